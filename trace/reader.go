package trace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Reader reads a trace file as a stream: memory holds one chunk and the
// string and stack tables, whatever the file's length. It validates
// everything it decodes and never panics on bad input.
type Reader struct {
	br      *bufio.Reader
	name    string
	off     int64 // bytes consumed
	version int
	hdr     *Header
	dec     *zstd.Decoder

	comp, raw []byte
	ed        eventDecoder
	buf       [512]Event
	events    []Event // decoded events; those from next on are not read yet
	next      int
	chunkOff  int64 // offset of the events chunk being decoded
	chunkBase int64 // events before it

	chunk   int64 // index of the next chunk to read
	nEvents int64 // events decoded so far
	strings []string
	stacks  [][]Frame
	tables  tableBudget // what strings and stacks take, and may
	ended   bool
	err     error // sticky
}

// NewReader reads the magic, version and header of the trace in r.
func NewReader(r io.Reader) (*Reader, error) {
	return newReader(r, "")
}

func newReader(r io.Reader, name string) (*Reader, error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	rd := &Reader{br: br, name: name, strings: []string{""}, stacks: [][]Frame{nil}}
	if err := rd.readStart(); err != nil {
		return nil, err
	}
	return rd, nil
}

func (r *Reader) fail(off int64, event int64, class error, format string, args ...any) error {
	return &FormatError{File: r.name, Offset: off, Chunk: r.chunk, Event: event, Msg: fmt.Sprintf(format, args...), Err: class}
}

func (r *Reader) readStart() error {
	var m [len(Magic)]byte
	n, err := io.ReadFull(r.br, m[:])
	r.off += int64(n)
	if err != nil {
		if err != io.EOF && err != io.ErrUnexpectedEOF {
			return r.fail(0, 0, nil, "reading: %v", err) // a directory, say
		}
		if n > 0 && bytes.Equal(m[:n], []byte(Magic[:n])) {
			return r.fail(0, 0, ErrTruncated, "%d bytes of the file's magic, the whole trace lost", n)
		}
		if n == 0 {
			return r.fail(0, 0, nil, "empty file, not a fragsim trace")
		}
		return r.fail(0, 0, nil, "not a fragsim trace: starts with %q", m[:n])
	}
	if string(m[:]) != Magic {
		return r.fail(0, 0, nil, "not a fragsim trace: magic %q, want %q", m[:], Magic)
	}
	v, err := binary.ReadUvarint(r)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return r.fail(r.off, 0, ErrTruncated, "format version missing, the whole trace lost")
		}
		return r.fail(int64(len(Magic)), 0, nil, "bad format version varint")
	}
	if v == 0 || v > Version {
		return r.fail(int64(len(Magic)), 0, ErrVersion,
			"format version %d, this reader reads versions 1 to %d (a newer fragsim wrote it?)", v, Version)
	}
	r.version = int(v)
	dec, err := getDecoder()
	if err != nil {
		return err
	}
	r.dec = dec
	start := r.off
	typ, payload, err := r.readChunk()
	if err != nil {
		return err
	}
	if typ != chunkHeader {
		r.chunk--
		return r.fail(start, 0, nil, "first chunk has type %d, want the header (%d)", typ, chunkHeader)
	}
	h := new(Header)
	if err := unmarshalHeader(payload, h); err != nil {
		r.chunk--
		return r.fail(start, 0, nil, "header JSON: %v", err)
	}
	if err := h.Check(); err != nil {
		r.chunk--
		return r.fail(start, 0, nil, "header: %v", err)
	}
	r.hdr = h
	return nil
}

// ReadByte reads one byte, counting it; it lets binary.ReadUvarint read r.
func (r *Reader) ReadByte() (byte, error) {
	c, err := r.br.ReadByte()
	if err == nil {
		r.off++
	}
	return c, err
}

// readChunk reads, checks and decompresses the next chunk. It returns
// io.EOF only at a clean end after the end chunk.
func (r *Reader) readChunk() (byte, []byte, error) {
	start := r.off
	truncated := func(what string) error {
		lost := r.off - start
		return r.fail(start, r.nEvents, ErrTruncated, "%d bytes of a partial chunk lost (%s)", lost, what)
	}
	t, err := r.ReadByte()
	if err != nil {
		if err != io.EOF {
			return 0, nil, err
		}
		if r.ended {
			return 0, nil, io.EOF
		}
		return 0, nil, r.fail(start, r.nEvents, ErrTruncated, "the file ends without its end chunk; events written after this point are lost")
	}
	if r.ended {
		return 0, nil, r.fail(start, r.nEvents, nil, "data after the end chunk")
	}
	var hdr [1 + 2*binary.MaxVarintLen64]byte
	hdr[0] = t
	hn := 1
	var lens [2]uint64
	for i := range lens {
		for s := 0; ; s++ {
			c, err := r.ReadByte()
			if err != nil {
				if err == io.EOF {
					return 0, nil, truncated("cut in its header")
				}
				return 0, nil, err
			}
			if s == binary.MaxVarintLen64-1 && c > 1 || s >= binary.MaxVarintLen64 {
				return 0, nil, r.fail(start, r.nEvents, nil, "bad varint in chunk header")
			}
			hdr[hn] = c
			hn++
			lens[i] |= uint64(c&0x7f) << (7 * s)
			if c < 0x80 {
				break
			}
		}
	}
	rawLen, compLen := lens[0], lens[1]
	typ := t &^ chunkStored
	if typ == 0 || typ >= numChunks {
		return 0, nil, r.fail(start, r.nEvents, nil, "unknown chunk type %d", t)
	}
	if rawLen > maxChunkRaw || compLen > maxChunkRaw+maxChunkRaw/8 ||
		(t&chunkStored != 0 && compLen != rawLen) {
		return 0, nil, r.fail(start, r.nEvents, nil, "chunk lengths %d (stored %d) exceed the limit of %d bytes", rawLen, compLen, maxChunkRaw)
	}
	var crcb [4]byte
	n, err := io.ReadFull(r.br, crcb[:])
	r.off += int64(n)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, nil, truncated("cut in its header")
		}
		return 0, nil, err
	}
	// Read the payload in steps so that a corrupt length cannot make us
	// allocate much more than the file holds.
	if r.comp == nil {
		r.comp = getBuf(0) // grown below in steps
	}
	p := r.comp[:0]
	for uint64(len(p)) < compLen {
		if len(p) == cap(p) {
			p = append(p, make([]byte, min(int(compLen)-len(p), max(len(p), 64<<10)))...)[:len(p)]
		}
		m, err := io.ReadFull(r.br, p[len(p):min(cap(p), int(compLen))])
		p = p[:len(p)+m]
		r.off += int64(m)
		if err != nil {
			r.comp = p
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return 0, nil, truncated(fmt.Sprintf("%d of its %d payload bytes present", len(p), compLen))
			}
			return 0, nil, err
		}
	}
	r.comp = p
	crc := crc32.Update(0, castagnoli, hdr[:hn])
	crc = crc32.Update(crc, castagnoli, p)
	if want := binary.LittleEndian.Uint32(crcb[:]); crc != want {
		return 0, nil, r.fail(start, r.nEvents, nil, "chunk checksum mismatch: computed %08x, stored %08x", crc, want)
	}
	if t&chunkStored != 0 {
		r.chunk++
		return typ, p, nil
	}
	if uint64(cap(r.raw)) < rawLen {
		r.raw = getBuf(int(rawLen))
	}
	out, err := r.dec.DecodeAll(p, r.raw[:0:rawLen])
	if err != nil || uint64(len(out)) != rawLen {
		if err == nil {
			err = fmt.Errorf("%d bytes, want %d", len(out), rawLen)
		}
		return 0, nil, r.fail(start, r.nEvents, nil, "decompressing chunk: %v", err)
	}
	r.chunk++
	return typ, out, nil
}

// nextChunk reads chunks until one holds events, and starts decoding it.
func (r *Reader) nextChunk() error {
	for {
		start := r.off
		typ, p, err := r.readChunk()
		if err != nil {
			return err
		}
		switch typ {
		case chunkHeader:
			r.chunk--
			return r.fail(start, r.nEvents, nil, "a second header chunk")
		case chunkTable:
			var derr *decodeError
			r.tables.limit = tableFloor + tableRatio*r.off
			r.strings, r.stacks, derr = decodeTable(p, r.strings, r.stacks, &r.tables)
			if derr != nil {
				r.chunk--
				return r.fail(start, r.nEvents, nil, "%s", derr.msg)
			}
		case chunkEvents:
			if derr := r.ed.start(p, r.version, len(r.strings), len(r.stacks)); derr != nil {
				r.chunk--
				return r.fail(start, r.nEvents, nil, "%s", derr.msg)
			}
			r.chunkOff, r.chunkBase = start, r.nEvents
			if r.ed.remaining() > 0 {
				return nil
			}
		case chunkEnd:
			var tot [4]uint64
			i := 0
			for j := range tot {
				if tot[j], i = uvarint(p, i); i < 0 {
					r.chunk--
					return r.fail(start, r.nEvents, nil, "end chunk: bad varint")
				}
			}
			if tot[0] != uint64(r.nEvents) || tot[1] != uint64(r.chunk-1) ||
				tot[2] != uint64(len(r.strings)) || tot[3] != uint64(len(r.stacks)) {
				r.chunk--
				return r.fail(start, r.nEvents, nil,
					"end chunk counts %d events in %d chunks, %d strings, %d stacks; read %d events in %d chunks, %d strings, %d stacks",
					tot[0], tot[1], tot[2], tot[3], r.nEvents, r.chunk, len(r.strings), len(r.stacks))
			}
			r.ended = true
		}
	}
}

// ReadEvent returns the next event, or io.EOF after the last one. An error
// other than io.EOF matches ErrCorrupt; it is returned again by later calls.
func (r *Reader) ReadEvent() (Event, error) {
	if i := r.next; i < len(r.events) {
		r.next = i + 1
		return r.events[i], nil
	}
	return r.readEventSlow()
}

func (r *Reader) readEventSlow() (Event, error) {
	n, err := r.ReadEvents(r.buf[:])
	if n == 0 {
		return Event{}, err
	}
	r.events, r.next = r.buf[:n], 1
	return r.buf[0], nil
}

// ReadEvents reads up to len(dst) events into dst and returns how many.
// It returns io.EOF, or the error that stopped it, only with n == 0; the
// events before a corrupt one are returned first.
func (r *Reader) ReadEvents(dst []Event) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	if r.next < len(r.events) {
		n := copy(dst, r.events[r.next:])
		r.next += n
		return n, nil
	}
	for {
		if r.err != nil {
			return 0, r.err
		}
		if r.ed.remaining() > 0 {
			n, derr := r.ed.next(dst)
			r.nEvents += int64(n)
			if derr != nil {
				ev := r.nEvents
				if derr.event >= 0 {
					ev = r.chunkBase + int64(derr.event)
				}
				r.err = &FormatError{File: r.name, Offset: r.chunkOff, Chunk: r.chunk - 1, Event: ev, Msg: derr.msg}
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		r.err = r.nextChunk()
		if r.err == io.EOF {
			r.release()
		}
	}
}

// Header returns the trace's header.
func (r *Reader) Header() *Header { return r.hdr }

// Version returns the trace's format version.
func (r *Reader) Version() int { return r.version }

// String returns the string with the given ID; "" for an unknown ID.
func (r *Reader) String(id StringID) string {
	if int(id) < len(r.strings) {
		return r.strings[id]
	}
	return ""
}

// Stack returns the frames of the stack with the given ID; nil for NoStack
// or an unknown ID. The slice must not be modified.
func (r *Reader) Stack(id StackID) []Frame {
	if int(id) < len(r.stacks) {
		return r.stacks[id]
	}
	return nil
}

// NumStrings returns the number of strings defined so far, including "".
func (r *Reader) NumStrings() int { return len(r.strings) }

// NumStacks returns the number of stacks defined so far, including NoStack.
func (r *Reader) NumStacks() int { return len(r.stacks) }

// Offset returns the number of file bytes read so far.
func (r *Reader) Offset() int64 { return r.off }

// EventsRead returns the number of events returned so far.
func (r *Reader) EventsRead() int64 { return r.nEvents - int64(len(r.events)-r.next) }

// Close releases the reader's decompressor. It does not close the
// underlying io.Reader.
func (r *Reader) Close() error {
	if r.dec != nil {
		decoders.Put(r.dec)
		r.dec = nil
	}
	if r.err == nil {
		r.err = errors.New("trace: reader closed")
	}
	return nil
}

// File is a Reader of a file it owns; its errors name the file.
type File struct {
	*Reader
	f *Input
}

// Open opens the trace file path and reads its header. A path that can be
// read only once (a pipe, a FIFO; "-" for standard input) is read through
// OpenInput, so that every Open of it reads the whole trace.
func Open(path string) (*File, error) {
	f, err := OpenInput(path, InputOptions{})
	if err != nil {
		return nil, err
	}
	r, err := newReader(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{Reader: r, f: f}, nil
}

// Close closes the file.
func (f *File) Close() error {
	f.Reader.Close()
	return f.f.Close()
}

// ReadAll reads a whole trace. On error it returns the header and every
// event read before the error.
func ReadAll(r io.Reader) (*Header, []Event, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	var evs []Event
	for {
		e, err := rd.ReadEvent()
		if err == io.EOF {
			return rd.Header(), evs, nil
		}
		if err != nil {
			return rd.Header(), evs, err
		}
		evs = append(evs, e)
	}
}

// decoders holds idle zstd decoders, returned by Reader.Close and at the
// clean end of a trace.
var decoders sync.Pool

// bufs holds idle chunk buffers (*[]byte), returned at the clean end of a
// trace, so that replaying many traces one after another does not
// allocate (and page in) fresh ones for each.
var bufs sync.Pool

// maxPooledBuf is the largest chunk buffer kept in bufs.
const maxPooledBuf = 4 << 20

// getBuf returns an empty buffer of capacity n at least, from bufs when
// it holds one large enough.
func getBuf(n int) []byte {
	if b, ok := bufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, n)
}

// release hands the decompressor and the chunk buffers back once the
// trace has been read to its clean end; nothing reads them afterwards.
func (r *Reader) release() {
	if r.dec != nil {
		decoders.Put(r.dec)
		r.dec = nil
	}
	for _, b := range [...][]byte{r.raw, r.comp} {
		if c := cap(b); c > 0 && c <= maxPooledBuf {
			b = b[:0]
			bufs.Put(&b)
		}
	}
	r.raw, r.comp = nil, nil
	r.ed = eventDecoder{}
}

func getDecoder() (*zstd.Decoder, error) {
	if d, ok := decoders.Get().(*zstd.Decoder); ok {
		return d, nil
	}
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxChunkRaw),
		zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderLowmem(true))
}
