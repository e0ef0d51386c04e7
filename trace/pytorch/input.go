package pytorch

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Error is an import error; it names the input and, for decoding errors,
// the byte offset of the decompressed pickle.
type Error struct {
	Name string
	Err  error
}

func (e *Error) Error() string { return e.Name + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// The decompression budget: a compressed input may decompress to at most
// maxRatio times its size, or minBudgetBytes when that is more, and never
// more than Options.MaxInputBytes. Real snapshots compress 10 to 30 times;
// a decompression bomb (gigabytes of zeros in a few megabytes) is refused
// once it passes the budget, before it is held in memory.
const defaultMaxRatio = 100

// minBudgetBytes is what any compressed input may decompress to, whatever
// its ratio (a variable for tests).
var minBudgetBytes int64 = 64 << 20

// maxZstdWindow bounds the window a zstd frame may ask the decoder for.
const maxZstdWindow = 256 << 20

// budget bounds a decompression.
type budget struct {
	limit      int64 // the most bytes in all
	ratio      int64 // the most bytes per compressed byte (beyond minBudgetBytes)
	streamFrom int64 // the pickle size from which a compressed input is streamed (see zsrc)
}

func (o *Options) budget() budget {
	b := budget{limit: o.MaxInputBytes, ratio: o.MaxRatio, streamFrom: o.StreamFromBytes}
	if b.limit <= 0 {
		b.limit = 64 << 30
	}
	if b.ratio <= 0 {
		b.ratio = defaultMaxRatio
	}
	if b.streamFrom <= 0 {
		b.streamFrom = defaultStreamFrom
	}
	return b
}

// allowed returns the most bytes that in compressed bytes may give.
func (b budget) allowed(in int64) int64 {
	if in > b.limit/b.ratio {
		return b.limit
	}
	return min(b.limit, max(b.ratio*in, minBudgetBytes))
}

// ReadInput reads r whole, decompressing gzip or zstd when the data starts
// with their magic bytes: the compressed stream is decompressed as it is
// read, never held whole.
func ReadInput(r io.Reader, opt Options) ([]byte, error) {
	data, free, err := readInput(r, opt)
	if err != nil {
		return nil, err
	}
	if free == nil {
		return data, nil
	}
	out := append([]byte(nil), data...) // out of the decompression's own memory
	free()
	return out, nil
}

// readInput is ReadInput; free, when not nil, releases the memory of the
// data returned (see inflate), which nothing may use after.
func readInput(r io.Reader, opt Options) (data []byte, free func(), err error) {
	br, size, b := inputReader(r, opt)
	head, _ := br.Peek(64)
	if err := checkHead(head); err != nil {
		return nil, nil, err
	}
	kind := compression(head)
	if kind == "" {
		hint := int64(1 << 20)
		if size >= 0 {
			hint = size + 1
		}
		data, err := readAll(br, min(hint, b.limit+1), b.limit)
		return data, nil, err
	}
	hint := int64(-1)
	if size > 0 {
		hint = size * 6
	}
	return inflate(&countReader{r: br}, kind, hint, size, b)
}

// readSnapshot reads a snapshot from r as Load does: a plain pickle whole
// (as readInput), a compressed one whole too, compressed, then either
// decompressed whole when its pickle is small (data and free as
// readInput's) or returned as z, to be decoded as it is decompressed.
func readSnapshot(r io.Reader, opt Options) (data []byte, free func(), z *zsrc, err error) {
	br, size, b := inputReader(r, opt)
	// The first bytes are checked before the rest is read (and held).
	head, _ := br.Peek(64)
	if err := checkHead(head); err != nil {
		return nil, nil, nil, err
	}
	hint := int64(1 << 20)
	if size >= 0 {
		hint = size + 1
	}
	raw, err := readAll(br, min(hint, b.limit+1), b.limit)
	if err != nil {
		return raw, nil, nil, err
	}
	return openPickle(raw, b)
}

// inputReader returns r buffered, with opt's progress reported as it is
// read, r's size when known (else -1), and opt's memory budget.
func inputReader(r io.Reader, opt Options) (*bufio.Reader, int64, budget) {
	size := sizeOf(r)
	pr := &progressReader{r: r, p: opt.Progress}
	return bufio.NewReaderSize(pr, 64<<10), size, opt.budget()
}

// openPickle returns the pickle in raw: raw itself when it is not
// compressed; else decompressed whole (data and free as readInput's) when
// the pickle is small, or z, to be decoded as it is decompressed, when it
// is large or of unknown size (see Options.StreamFromBytes), or when its decompression
// breaks: the entries before the break are then kept, as those of a cut
// pickle are.
func openPickle(raw []byte, b budget) (data []byte, free func(), z *zsrc, err error) {
	kind := compression(raw)
	if kind == "" {
		return raw, nil, nil, nil
	}
	z = newZsrc(raw, kind, b)
	if z.streamed() {
		return nil, nil, z, nil
	}
	data, free, err = decompress(raw, b)
	var broken brokenStream
	if errors.As(err, &broken) {
		return nil, nil, z, nil
	}
	return data, free, nil, err
}

// brokenStream is inflate's error for a compressed stream that fails
// after some of its bytes (cut, or corrupt), not refused by the budget.
type brokenStream struct{ error }

func (e brokenStream) Unwrap() error { return e.error }

// sizeOf returns the size of r, a regular file or a reader with a Len
// or Size method, or -1.
func sizeOf(r io.Reader) int64 {
	switch x := r.(type) {
	case *os.File:
		if st, err := x.Stat(); err == nil && st.Mode().IsRegular() {
			return st.Size()
		}
	case interface{ Len() int }:
		return int64(x.Len())
	case *trace.Input:
		return x.Size()
	}
	return -1
}

// checkHead refuses an input whose first bytes can start neither a
// pickle nor a gzip or zstd stream, before the rest is read: 2 GB of
// zeros on standard input are refused at once, as the same bytes in a
// file are by the decoder.
func checkHead(head []byte) error {
	if len(head) == 0 || compression(head) != "" {
		return nil // an empty input: the decoder says so
	}
	if bytes.HasPrefix(head, []byte("Thread,Time,")) || bytes.HasPrefix(head, []byte("\ufeffThread,Time,")) {
		return errors.New("byte offset 0: not a snapshot: it starts as an RMM log's header (import it with --format rmm)")
	}
	if op := head[0]; op != 0x80 && pickle.OpName(op) == "unknown" {
		return fmt.Errorf("byte offset 0: not a snapshot: it starts with byte 0x%02x, which starts no pickle (nor gzip or zstd)", op)
	}
	return nil
}

// compression returns "gzip" or "zstd" when data starts with their magic
// bytes, else "".
func compression(data []byte) string {
	switch {
	case bytes.HasPrefix(data, gzipMagic):
		return "gzip"
	case bytes.HasPrefix(data, zstdMagic):
		return "zstd"
	}
	return ""
}

// decompress returns raw, or its decompression when it starts with the
// magic bytes of gzip or zstd; free is as readInput's.
func decompress(raw []byte, b budget) (data []byte, free func(), err error) {
	kind := compression(raw)
	if kind == "" {
		return raw, nil, nil
	}
	most := b.allowed(int64(len(raw)))
	hint := int64(len(raw)) * 6
	switch kind {
	case "gzip":
		// A gzip member ends with its size modulo 2^32: the exact size of
		// a snapshot's single member, when it is within the budget.
		if len(raw) >= 18 {
			if n := int64(binary.LittleEndian.Uint32(raw[len(raw)-4:])); n >= int64(len(raw))/2 && n <= most {
				hint = n + 1
			}
		}
	case "zstd":
		var h zstd.Header
		if h.Decode(raw) == nil && h.HasFCS && h.FrameContentSize <= uint64(most) {
			hint = int64(h.FrameContentSize) + 1
		}
	}
	return inflate(&countReader{r: bytes.NewReader(raw)}, kind, hint, int64(len(raw)), b)
}

// countReader counts the bytes read from r.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// inflate decompresses in (kind "gzip" or "zstd", size bytes; -1: not
// known) into memory of about hint bytes (-1: not known), growing it as
// needed, within the budget b:
// at any point of the stream, the output may not pass b.allowed of the
// compressed bytes read so far, and its first byte must be able to start
// a pickle, so that a bomb is refused before it fills memory. The output
// lives outside the Go heap where the system allows it (see newOutBuf):
// free releases it.
func inflate(in *countReader, kind string, hint, size int64, b budget) (data []byte, free func(), err error) {
	most := b.limit // the most bytes the output can reach
	if size >= 0 {
		most = b.allowed(size)
	}
	var zr io.Reader
	switch kind {
	case "gzip":
		g, err := gzip.NewReader(in)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		defer g.Close()
		zr = g
	case "zstd":
		z, err := zstd.NewReader(in, zstd.WithDecoderMaxMemory(uint64(most)+1),
			zstd.WithDecoderMaxWindow(min(uint64(most)+1, maxZstdWindow)), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		defer z.Close()
		zr = z
	}
	if hint < 0 {
		hint = 1 << 20
	}
	out := newOutBuf(int(min(max(hint, 4<<10), most+1)))
	fail := func(err error) ([]byte, func(), error) {
		out.free()
		return nil, nil, err
	}
	n := 0
	checked := false
	for {
		if n == len(out.b) {
			if int64(n) > b.allowed(in.n) || int64(n) > b.limit {
				return fail(b.bombError(kind, int64(n), in.n))
			}
			out.grow(int(min(int64(2*n), most+1)))
		}
		k, err := zr.Read(out.b[n:])
		n += k
		if !checked && n > 0 {
			checked = true
			if op := out.b[0]; op != 0x80 && pickle.OpName(op) == "unknown" {
				return fail(fmt.Errorf("%s: the decompressed data is not a pickle: it starts with byte 0x%02x", kind, op))
			}
		}
		if int64(n) > b.limit || int64(n) > b.allowed(in.n) {
			return fail(b.bombError(kind, int64(n), in.n))
		}
		if err == io.EOF {
			return out.b[:n], out.free, nil
		}
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return fail(fmt.Errorf("%s: %w, past the budget of %d bytes: refused as a decompression bomb", kind, err, most))
		}
		if err != nil {
			return fail(brokenStream{fmt.Errorf("%s: after %d decompressed bytes: %w", kind, n, err)})
		}
	}
}

// bombError is inflate's error for an output of n bytes from in
// compressed ones, past the budget.
func (b budget) bombError(kind string, n, in int64) error {
	if n > b.limit {
		return fmt.Errorf("%s: decompresses to more than %d bytes, the input limit", kind, b.limit)
	}
	return fmt.Errorf("%s: decompresses to more than %d bytes from its first %d (%d times as many, at least %d MiB): refused as a decompression bomb",
		kind, b.allowed(in), in, b.ratio, minBudgetBytes>>20)
}

// readAll reads r to its end into a buffer of capacity hint, failing past
// limit: the buffer never grows past limit+1 bytes (the byte that tells
// an input of more).
func readAll(r io.Reader, hint, limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(max(hint, 512), limit+1))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, fmt.Errorf("input exceeds %d bytes", limit)
			}
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), limit+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("input exceeds %d bytes", limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("after %d bytes: %w", len(buf), err)
		}
	}
}

type progressReader struct {
	r    io.Reader
	p    func(string, int64, int64)
	n    int64
	next int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.p != nil && p.n >= p.next {
		p.p("read", p.n, -1)
		p.next = p.n + 16<<20
	}
	return n, err
}
