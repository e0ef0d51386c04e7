package pytorch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// A compressed snapshot is decoded while it is decompressed (streamed)
// when its pickle is large (Options.StreamFromBytes) or of unknown size:
// the decoder then holds a window of the pickle (see
// pickle.NewReaderDecoder), and the decompression runs on another
// goroutine, a few blocks ahead of it. A small one is decompressed whole
// first, so that the decoder's workers can split it (they need the whole
// pickle).
//
// defaultStreamFrom is Options.StreamFromBytes's default (a variable for
// tests): the decoder's budget floor, which any decode may take, so that
// below it the workers are kept, and from it the memory that grows with
// the pickle is saved for a few percent of speed (bench/RESULTS.md).
var defaultStreamFrom int64 = 32 << 20

// streamed, when set (tests), is called with each compressed input an
// import has decoded while it decompressed it.
var streamed func(*zsrc)

// Blocks of the decompression's read-ahead: zBlocks blocks of zBlock bytes.
const (
	zBlock  = 256 << 10
	zBlocks = 4
)

// zsrc is a compressed pickle, held whole (it is a fraction of the
// pickle's size), decompressed anew for each decode.
type zsrc struct {
	raw  []byte
	kind string // "gzip" or "zstd"
	hint int64  // the pickle's size from the gzip trailer or the zstd frame header, or -1
	b    budget
	cur  *zstream // the stream of the latest decode
	dec  *pickle.Decoder
	peak int // the most bytes of pickle a decoder of z held at once (its window)
}

// newZsrc returns the compressed input raw, of kind.
func newZsrc(raw []byte, kind string, b budget) *zsrc {
	return &zsrc{raw: raw, kind: kind, hint: sizeHint(raw, kind, b), b: b}
}

// sizeHint returns the size raw decompresses to as its gzip trailer or
// zstd frame header gives it, or -1 when it does not, or gives a size out
// of the budget.
func sizeHint(raw []byte, kind string, b budget) int64 {
	most := b.allowed(int64(len(raw)))
	switch kind {
	case "gzip":
		// A gzip member ends with its size modulo 2^32: the exact size of
		// a snapshot's single member, when it is within the budget.
		if len(raw) >= 18 {
			if n := int64(binary.LittleEndian.Uint32(raw[len(raw)-4:])); n >= int64(len(raw))/2 && n <= most {
				return n
			}
		}
	case "zstd":
		var h zstd.Header
		if h.Decode(raw) == nil && h.HasFCS && h.FrameContentSize <= uint64(most) {
			return int64(h.FrameContentSize)
		}
	}
	return -1
}

// streamed reports whether the import decodes z while it decompresses it.
func (z *zsrc) streamed() bool { return z.hint < 0 || z.hint >= z.b.streamFrom }

// size returns the pickle's size: exact once a decode has read it to its
// end, else the header's, else a guess (what snapshots compress by).
func (z *zsrc) size() int {
	switch {
	case z.cur != nil && z.cur.end:
		return int(z.cur.n)
	case z.hint >= 0:
		return int(z.hint)
	}
	return 10 * len(z.raw)
}

// decoder returns a decoder of a fresh decompression of z, closing the
// previous one's.
func (z *zsrc) decoder() (*pickle.Decoder, error) {
	z.close()
	s, err := openZstream(bytes.NewReader(z.raw), z.kind, int64(len(z.raw)), z.b)
	if err != nil {
		return nil, err
	}
	z.cur, z.dec = s, pickle.NewReaderDecoder(s, z.hint)
	return z.dec, nil
}

// finish ends a decode whose error was err: after a pickle decoded, the
// stream is read to its end, which checks its checksum and counts its
// bytes.
func (z *zsrc) finish(err error) error {
	s := z.cur
	if err != nil || s == nil {
		return err
	}
	if _, err := io.Copy(io.Discard, s); err != nil {
		return fmt.Errorf("past the pickle's end: %w", err)
	}
	return nil
}

// close stops the latest decompression.
func (z *zsrc) close() {
	if z.cur != nil {
		z.cur.Close()
	}
	if z.dec != nil {
		z.peak = max(z.peak, z.dec.BufferedPeak())
	}
}

// zstream is a decompression run ahead of its reader on another
// goroutine, in blocks, within the budget b: at any point, its output may
// not pass b.allowed of the compressed bytes read so far, so that a bomb
// is refused before much of it is decoded.
type zstream struct {
	blocks chan []byte // decompressed blocks, in order
	free   chan []byte // blocks read, for the goroutine to fill again
	quit   chan struct{}
	done   chan struct{} // closed when the goroutine has returned
	err    error         // why blocks was closed (io.EOF: the stream ended), set before
	cur    []byte        // the unread bytes of the block being read
	buf    []byte        // that block
	n      int64         // bytes read
	end    bool          // the stream was read to its end
	closed bool
}

// openZstream starts the decompression of in (kind "gzip" or "zstd",
// size compressed bytes) and checks that it starts as a pickle does.
func openZstream(in io.Reader, kind string, size int64, b budget) (*zstream, error) {
	most := b.allowed(size)
	cr := &countReader{r: in}
	var zr io.Reader
	var closeZ func()
	switch kind {
	case "gzip":
		g, err := gzip.NewReader(cr)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		zr, closeZ = g, func() { g.Close() }
	case "zstd":
		zd, err := zstd.NewReader(cr, zstd.WithDecoderMaxMemory(uint64(most)+1),
			zstd.WithDecoderMaxWindow(min(uint64(most)+1, maxZstdWindow)), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		zr, closeZ = zd, zd.Close
	default:
		return nil, fmt.Errorf("unknown compression %q", kind)
	}
	s := &zstream{blocks: make(chan []byte, zBlocks), free: make(chan []byte, zBlocks),
		quit: make(chan struct{}), done: make(chan struct{})}
	for range zBlocks {
		s.free <- make([]byte, zBlock)
	}
	go func() {
		defer close(s.done)
		defer closeZ()
		s.err = s.run(zr, cr, kind, most, b)
		close(s.blocks)
	}()
	// The first byte: a pickle's first opcode, or the input is refused
	// before anything is decoded.
	var first [1]byte
	if _, err := io.ReadFull(s, first[:]); err != nil {
		s.Close()
		if err == io.EOF { // (else the decompression's error, which says so)
			err = decompressError(kind, 0, io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	if op := first[0]; op != 0x80 && pickle.OpName(op) == "unknown" {
		s.Close()
		return nil, fmt.Errorf("%s: the decompressed data is not a pickle: it starts with byte 0x%02x", kind, op)
	}
	s.cur = s.buf[:len(s.cur)+1] // the byte back: it starts the block
	s.n = 0
	return s, nil
}

// run decompresses zr into the free blocks until the stream ends, fails,
// passes the budget, or the reader closes the stream.
func (s *zstream) run(zr io.Reader, cr *countReader, kind string, most int64, b budget) error {
	var n int64
	for {
		var buf []byte
		select {
		case buf = <-s.free:
		case <-s.quit:
			return io.ErrClosedPipe
		}
		k, err := readFull(zr, buf)
		n += int64(k)
		if n > b.limit || n > b.allowed(cr.n) {
			return b.bombError(kind, n, cr.n)
		}
		if k > 0 {
			select {
			case s.blocks <- buf[:k]:
			case <-s.quit:
				return io.ErrClosedPipe
			}
		}
		switch {
		case err == io.EOF:
			return io.EOF
		case errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded):
			return fmt.Errorf("%s: %w, past the budget of %d bytes: refused as a decompression bomb", kind, err, most)
		case err != nil:
			return decompressError(kind, n, err)
		}
	}
}

// decompressError is the error of a decompression that fails after n
// bytes.
func decompressError(kind string, n int64, err error) error {
	return fmt.Errorf("%s: after %d decompressed bytes: %w", kind, n, err)
}

// readFull reads r into buf until buf is full or r ends or fails.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Read reads the decompressed stream; its error, past the data, is the
// decompression's (io.EOF at the stream's end).
func (s *zstream) Read(p []byte) (int, error) {
	for len(s.cur) == 0 {
		if s.buf != nil {
			s.free <- s.buf[:cap(s.buf)]
			s.buf = nil
		}
		b, ok := <-s.blocks
		if !ok {
			if s.err == io.EOF {
				s.end = true
			}
			return 0, s.err
		}
		s.cur, s.buf = b, b
	}
	k := copy(p, s.cur)
	s.cur = s.cur[k:]
	s.n += int64(k)
	return k, nil
}

// Close stops the decompression and waits for its goroutine.
func (s *zstream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	close(s.quit)
	<-s.done
}

// input is the pickle an import decodes: data, whole in memory, or z, a
// compressed pickle decompressed as it is decoded.
type input struct {
	data []byte
	z    *zsrc
}

// decoder returns a decoder of the pickle (for z, of a fresh
// decompression).
func (in input) decoder() (*pickle.Decoder, error) {
	if in.z != nil {
		return in.z.decoder()
	}
	return pickle.NewDecoder(in.data), nil
}

// size returns the pickle's size (for a stream not yet read to its end,
// the size its header gives, or a guess).
func (in input) size() int {
	if in.z != nil {
		return in.z.size()
	}
	return len(in.data)
}

// finish ends a decode whose error was err (see zsrc.finish).
func (in input) finish(err error) error {
	if in.z != nil {
		return in.z.finish(err)
	}
	return err
}

// loadStream is Load of the compressed pickle z, decoded as it is
// decompressed.
func loadStream(z *zsrc, name string, opt Options) (*Snapshot, error) {
	defer func() {
		z.close()
		if streamed != nil {
			streamed(z)
		}
	}()
	s, err := loadInput(input{z: z}, opt, nil)
	if s != nil {
		s.summary.Input = name
	}
	if err != nil {
		return s, &Error{name, err}
	}
	return s, nil
}
