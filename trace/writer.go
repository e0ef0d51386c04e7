package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Sink receives a trace: the Writer, or anything that consumes events as a
// Writer would (the text reader feeds one).
type Sink interface {
	// WriteEvent appends e. Its Text and Stack must come from String and Stack.
	WriteEvent(e Event) error
	// String returns the ID of s, defining it on first use; "" is NoString.
	String(s string) StringID
	// Stack returns the ID of frames, defining it on first use; no frames is NoStack.
	Stack(frames []Frame) StackID
}

// Defaults for the writer's chunk size.
const (
	DefaultChunkEvents = 64 << 10
	DefaultChunkBytes  = 1 << 20
)

// WriterOption configures a Writer.
type WriterOption func(*writerOptions)

type writerOptions struct {
	chunkEvents int
	chunkBytes  int
	byEvents    bool // chunkBytes is set from chunkEvents (ChunksByEvents)
	workers     int  // chunks compressed at once on other goroutines (see Concurrency)
	version     int  // format version written
	fast        bool // FastCompression
}

// level returns the index of the writer's zstd level in encoderLevels.
func (o *writerOptions) level() int {
	if o.fast {
		return 1
	}
	return 0
}

// FastCompression makes the writer compress at zstd's fastest level
// instead of its default: 15-25% less CPU (BenchmarkEncode), and match
// tables of 256 KiB instead of 1.25 MiB, fresh memory for each new
// encoder, one per compressing goroutine. Traces are larger: 2-10% on
// imported snapshots of 8K-event chunks, 19% on one of a single chunk.
func FastCompression() WriterOption {
	return func(o *writerOptions) { o.fast = true }
}

// ChunkEvents makes the writer end a chunk after n events (at most 1<<20).
func ChunkEvents(n int) WriterOption {
	return func(o *writerOptions) { o.chunkEvents = min(max(n, 1), maxChunkEvents) }
}

// ChunkBytes makes the writer end a chunk once it holds about n bytes
// before compression (at most 32 MiB).
func ChunkBytes(n int) WriterOption {
	return func(o *writerOptions) { o.chunkBytes = min(max(n, 1), maxChunkRaw/2) }
}

// ChunksByEvents makes the writer end a chunk by its events alone (see
// ChunkEvents): its byte bound is set above what as many events can take
// (maxEventBound bytes each, up to the bound's limit). WriteRange then
// gives whole chunks to the compressors without measuring their events
// first.
func ChunksByEvents() WriterOption {
	return func(o *writerOptions) { o.byEvents = true }
}

// Writer writes a trace file in chunks; its memory does not grow with the
// trace beyond the string and stack tables. It is not safe for concurrent use.
type Writer struct {
	w    io.Writer
	opts writerOptions
	err  error // sticky
	done bool

	events   []Event
	estBytes int    // bound on the encoded size of events
	estAddr  uint64 // the chunk's largest address, for estBytes
	tab      []byte // table records not yet written

	strings map[string]StringID
	stacks  map[string]StackID
	nStr    int // strings defined, including ""
	nStk    int // stacks defined, including NoStack
	stkKey  []byte

	enc     *zstd.Encoder
	ee      eventEncoder
	raw     []byte
	comp    []byte
	frame   []byte
	nEvents int64
	nChunks int64
	par     *parallel // nil: chunks are compressed and written in the caller
	scratch []Event   // WriteRange's
	sc      scan      // WriteRange's
}

var errClosed = errors.New("trace: writer closed")

// NewWriter writes the file's magic, version and header to w and returns a
// Writer for its events. h may be nil.
func NewWriter(w io.Writer, h *Header, opts ...WriterOption) (*Writer, error) {
	if h == nil {
		h = &Header{}
	}
	hj, err := marshalHeader(h)
	if err != nil {
		return nil, fmt.Errorf("trace: encoding header: %w", err)
	}
	o := writerOptions{chunkEvents: DefaultChunkEvents, chunkBytes: DefaultChunkBytes, version: Version}
	for _, opt := range opts {
		opt(&o)
	}
	if o.byEvents {
		o.chunkBytes = min(max(o.chunkBytes, o.chunkEvents*maxEventBound), maxChunkRaw/2)
	}
	// With Concurrency the workers compress every chunk: the writer's own
	// encoder is never used, so it does not take a prepared one.
	get := getEncoder
	if o.workers > 1 {
		get = getIdleEncoder
	}
	enc, err := get(o.level())
	if err != nil {
		return nil, err
	}
	wr := &Writer{
		w:       w,
		opts:    o,
		strings: map[string]StringID{},
		stacks:  map[string]StackID{},
		nStr:    1,
		nStk:    1,
		enc:     enc,
	}
	// The chunk's whole event buffer at once: grown by copying, it cost a
	// small import a third of its time (copies into fresh pages).
	if b := takeBuffers(wr.opts.chunkEvents); b != nil {
		wr.events, wr.ee, wr.raw = b.events[:0], b.ee, b.raw
	} else {
		wr.events = make([]Event, 0, wr.opts.chunkEvents)
	}
	if wr.opts.workers > 1 {
		wr.par = newParallel(w, wr.opts.workers, wr.opts.version, wr.opts.level())
	}
	start := binary.AppendUvarint([]byte(Magic), uint64(wr.opts.version))
	if _, err := w.Write(start); err != nil {
		wr.par.stop()
		return nil, err
	}
	if err := wr.writeChunk(chunkHeader, hj); err != nil {
		wr.par.stop()
		return nil, err
	}
	return wr, nil
}

// WriteEvent appends e to the trace.
func (w *Writer) WriteEvent(e Event) error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return errClosed
	}
	if w.invalid(&e) {
		return w.eventError(&e, w.nEvents+int64(len(w.events)))
	}
	w.events = append(w.events, e)
	prev := &Event{}
	if len(w.events) > 1 {
		prev = &w.events[len(w.events)-2]
	}
	w.estBytes += eventBound(&w.events[len(w.events)-1], prev, &w.estAddr)
	if len(w.events) >= w.opts.chunkEvents || w.estBytes+len(w.tab) >= w.opts.chunkBytes {
		return w.endChunk()
	}
	return nil
}

// WriteEvents appends evs, in order: WriteEvent for each, in one call.
func (w *Writer) WriteEvents(evs []Event) error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return errClosed
	}
	for i := range evs {
		e := &evs[i]
		if w.invalid(e) {
			return w.eventError(e, w.nEvents+int64(len(w.events)))
		}
		prev := &Event{}
		if n := len(w.events); n > 0 {
			prev = &w.events[n-1]
		}
		w.estBytes += eventBound(e, prev, &w.estAddr)
		w.events = append(w.events, *e)
		if len(w.events) >= w.opts.chunkEvents || w.estBytes+len(w.tab) >= w.opts.chunkBytes {
			if err := w.endChunk(); err != nil {
				return err
			}
		}
	}
	return nil
}

// invalid reports whether WriteEvent refuses e: a kind it does not know,
// or a string or stack not defined.
func (w *Writer) invalid(e *Event) bool { return invalidEvent(e, w.nStr, w.nStk) }

// invalidEvent reports whether e has a kind not known, or a string or
// stack beyond the nStr strings and nStk stacks defined.
func invalidEvent(e *Event, nStr, nStk int) bool {
	return !e.Kind.Valid() || int(e.Text) >= nStr || int(e.Stack) >= nStk
}

// eventError is WriteEvent's error for e, invalid, event n of the trace.
func (w *Writer) eventError(e *Event, n int64) error {
	if !e.Kind.Valid() {
		return fmt.Errorf("trace: event %d: invalid kind %d", n, e.Kind)
	}
	return fmt.Errorf("trace: event %d: string %d or stack %d not defined", n, e.Text, e.Stack)
}

// String returns the ID of s, defining it on first use. Strings longer
// than 1 MiB are cut to their first 1 MiB.
func (w *Writer) String(s string) StringID {
	if s == "" {
		return NoString
	}
	if id, ok := w.strings[s]; ok {
		return id
	}
	if len(s) > maxStringLen {
		s = s[:maxStringLen]
		if id, ok := w.strings[s]; ok {
			return id
		}
	}
	id := StringID(w.nStr)
	w.nStr++
	w.strings[s] = id
	w.tab = appendStringRecord(w.tab, id, s)
	w.flushTableIfBig()
	return id
}

// MaxStackFrames is the most frames one stack of a trace holds: Stack
// keeps the first MaxStackFrames of a longer one.
const MaxStackFrames = maxStackFrames

// Stack returns the ID of frames, defining it on first use. Frames must
// use IDs returned by String.
func (w *Writer) Stack(frames []Frame) StackID {
	if len(frames) == 0 {
		return NoStack
	}
	if len(frames) > maxStackFrames {
		frames = frames[:maxStackFrames]
	}
	key := w.stkKey[:0]
	for _, f := range frames {
		if int(f.Func) >= w.nStr || int(f.File) >= w.nStr {
			if w.err == nil {
				w.err = fmt.Errorf("trace: stack frame uses undefined string %d or %d", f.Func, f.File)
			}
			return NoStack
		}
		key = binary.AppendUvarint(key, uint64(f.Func))
		key = binary.AppendUvarint(key, uint64(f.File))
		key = binary.AppendUvarint(key, uint64(f.Line))
	}
	w.stkKey = key
	if id, ok := w.stacks[string(key)]; ok {
		return id
	}
	id := StackID(w.nStk)
	w.nStk++
	w.stacks[string(key)] = id
	w.tab = appendStackRecord(w.tab, id, frames)
	w.flushTableIfBig()
	return id
}

// flushTableIfBig writes the pending definitions alone once they fill a chunk.
func (w *Writer) flushTableIfBig() {
	if len(w.tab) >= w.opts.chunkBytes && w.err == nil {
		if err := w.writeChunk(chunkTable, w.tab); err != nil {
			w.err = err
		}
		w.tab = w.tab[:0]
	}
}

// Flush ends the current chunk: everything written so far is in w's
// io.Writer, readable even if the process dies before Close.
func (w *Writer) Flush() error {
	if err := w.endChunk(); err != nil {
		return err
	}
	if w.par != nil {
		return w.par.wait()
	}
	return nil
}

// endChunk ends the current chunk; with Concurrency, it may still be
// being compressed when endChunk returns.
func (w *Writer) endChunk() error {
	if w.err != nil {
		return w.err
	}
	if len(w.tab) > 0 {
		if err := w.writeChunk(chunkTable, w.tab); err != nil {
			return err
		}
		w.tab = w.tab[:0]
	}
	if len(w.events) > 0 {
		n := len(w.events)
		if w.par != nil {
			// Encoded by the compressor that compresses it.
			evs, err := w.par.submitEvents(w.events)
			if err != nil {
				w.err = err
				return err
			}
			w.nChunks++
			w.nEvents += int64(n)
			w.events = evs
			w.estBytes, w.estAddr = 0, 0
			return nil
		}
		w.raw = w.ee.encode(w.raw[:0], w.events, w.opts.version)
		if err := w.writeChunk(chunkEvents, w.raw); err != nil {
			return err
		}
		w.nEvents += int64(len(w.events))
		w.events = w.events[:0]
		w.estBytes, w.estAddr = 0, 0
	}
	return nil
}

// Close flushes and ends the trace with its end chunk. It does not close
// the underlying io.Writer. A trace without its end chunk reads as truncated.
func (w *Writer) Close() error {
	if w.done {
		return w.err
	}
	if err := w.Flush(); err != nil {
		w.par.stop()
		return err
	}
	w.done = true
	var p []byte
	p = binary.AppendUvarint(p, uint64(w.nEvents))
	p = binary.AppendUvarint(p, uint64(w.nChunks)) // chunks before this one
	p = binary.AppendUvarint(p, uint64(w.nStr))
	p = binary.AppendUvarint(p, uint64(w.nStk))
	if err := w.writeChunk(chunkEnd, p); err != nil {
		w.par.stop()
		return err
	}
	if err := w.par.stop(); err != nil {
		w.err = err
		return err
	}
	encoders[w.opts.level()].Put(w.enc)
	w.enc = nil
	if cap(w.events) > 0 && cap(w.events) <= DefaultChunkEvents {
		idleBuffers.Put(&writerBuffers{events: w.events[:0], ee: w.ee, raw: w.raw[:0]})
		w.events, w.ee, w.raw = nil, eventEncoder{}, nil
	}
	return nil
}

// idleBuffers holds closed writers' buffers (of at most DefaultChunkEvents
// events), for PrepareWriter: a program that writes several traces
// reuses them.
var idleBuffers sync.Pool

// encoders holds idle zstd encoders, by level (encoderLevels): making one
// costs far more than a small trace.
var encoders [len(encoderLevels)]sync.Pool

// prepared holds what PrepareWriter readies for the next writers:
// pending encoders are made or being made, and arrive on ch; when
// bufsPending, a writer's buffers arrive on bufs.
var prepared struct {
	mu          sync.Mutex
	pending     [len(encoderLevels)]int // by level
	ch          [len(encoderLevels)]chan *zstd.Encoder
	bufsPending bool
	bufs        chan *writerBuffers
}

// writerBuffers are a writer's event buffer and encoding buffers, with
// their pages already touched.
type writerBuffers struct {
	events []Event
	ee     eventEncoder
	raw    []byte
}

// maxPrepared bounds the encoders prepared and not yet taken.
const maxPrepared = 16

// PrepareWriter readies, on other goroutines, the memory of the next
// writer with the default chunk size: its event buffer and encoding
// buffers, and n zstd encoders (one, or one per goroutine of Concurrency;
// up to 16 not yet taken), for a trace of about events events (0: not
// known, a chunk's worth or more). That memory is fresh, faulted in page
// by page as the first chunks are encoded and compressed (up to a 4 MiB
// event buffer and 1.25 MiB of match tables per encoder); a program that
// knows it will write a trace soon (an import, while it decodes its
// input) can have that done on another core meanwhile. Encoders and
// buffers that earlier writers left idle are taken first. A writer that
// needs what is being prepared waits for it. The traces written are the
// same bytes. Of opts, the writer's, only FastCompression counts: the
// encoders are made at its level.
//
// PrepareWriter is a package function, not a method of RangeSink or a
// WriterOption, because it runs before any writer exists: while an
// import decodes its input, the output file and the trace's header are
// not known yet, and what it readies is held for whichever writer
// NewWriter makes next.
func PrepareWriter(n, events int, opts ...WriterOption) {
	chunk := DefaultChunkEvents
	if events > 0 {
		chunk = min(chunk, events+events/8+256) // an estimate: some room
	}
	var o writerOptions
	for _, opt := range opts {
		opt(&o)
	}
	lv := o.level()
	prepared.mu.Lock()
	defer prepared.mu.Unlock()
	if prepared.ch[lv] == nil {
		prepared.ch[lv] = make(chan *zstd.Encoder, maxPrepared)
	}
	if prepared.bufs == nil {
		prepared.bufs = make(chan *writerBuffers, 1)
	}
	if !prepared.bufsPending {
		prepared.bufsPending = true
		if b, ok := idleBuffers.Get().(*writerBuffers); ok && cap(b.events) >= chunk {
			prepared.bufs <- b // a closed writer's: already touched
		} else {
			go func() { prepared.bufs <- newWriterBuffers(chunk) }()
		}
	}
	n = min(n, maxPrepared-prepared.pending[lv])
	for range n {
		prepared.pending[lv]++
		if e, ok := encoders[lv].Get().(*zstd.Encoder); ok {
			prepared.ch[lv] <- e // an idle encoder's tables are warm
			continue
		}
		go func() {
			e, err := newEncoder(lv)
			if err == nil {
				warmEncoder(e, min(warmBytes, chunk*warmPerEvent))
			}
			prepared.ch[lv] <- e // nil if it failed: the taker makes its own
		}()
	}
}

// newWriterBuffers makes and touches the buffers of a writer of chunks of
// n events: the event buffer, and room for about 3 bytes an event in each
// column of the encoded chunk (more grows them as before).
func newWriterBuffers(n int) *writerBuffers {
	b := &writerBuffers{events: make([]Event, n)}
	for i := 0; i < n; i += 4096 / 64 {
		b.events[i].Kind = 1
	}
	col := func(size int) []byte {
		p := make([]byte, size)
		for i := 0; i < size; i += 4096 {
			p[i] = 1
		}
		return p[:0]
	}
	b.ee = eventEncoder{timeCol: col(3 * n), addrCol: col(3 * n), sizeCol: col(3 * n), miscCol: col(2 * n), kinds: col(n)}
	b.raw = col(12 * n)
	return b
}

// takeBuffers returns the prepared buffers if they are pending and fit
// chunks of n events, else nil.
func takeBuffers(n int) *writerBuffers {
	prepared.mu.Lock()
	defer prepared.mu.Unlock()
	if !prepared.bufsPending || n > DefaultChunkEvents {
		return nil
	}
	prepared.bufsPending = false
	return <-prepared.bufs
}

// warmBytes is the most data warmEncoder compresses: enough to touch
// about every page of the encoder's match tables. A small trace's
// chunk touches fewer: warmPerEvent bytes for each of its events.
const (
	warmBytes    = 256 << 10
	warmPerEvent = 4
)

// warmEncoder compresses n bytes of varied data with e, which touches
// about every page of its match tables, and the start of its history.
// Each chunk is its own zstd frame, and a frame's matches never reach
// into a previous one, so this changes nothing that e writes later.
func warmEncoder(e *zstd.Encoder, n int) {
	src := make([]byte, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i+8 <= len(src); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(src[i:], x&0x0000ffff00ffffff) // compressible, seldom repeated
	}
	e.EncodeAll(src, make([]byte, 0, len(src)))
}

// getEncoder returns an encoder of level lv (encoderLevels): a prepared
// one if any is pending, else an idle or new one.
func getEncoder(lv int) (*zstd.Encoder, error) {
	prepared.mu.Lock()
	if prepared.pending[lv] > 0 {
		prepared.pending[lv]--
		prepared.mu.Unlock()
		if e := <-prepared.ch[lv]; e != nil {
			return e, nil
		}
		return getIdleEncoder(lv)
	}
	prepared.mu.Unlock()
	return getIdleEncoder(lv)
}

// getIdleEncoder returns an encoder of level lv from the pool, or a new one.
func getIdleEncoder(lv int) (*zstd.Encoder, error) {
	if e, ok := encoders[lv].Get().(*zstd.Encoder); ok {
		return e, nil
	}
	return newEncoder(lv)
}

// newEncoder makes an encoder of level lv (encoderLevels).
//
// The window is set before the level: set after, the fastest level has
// already cut its blocks to 64 KiB, and an input of 64 to 128 KiB (the
// header of a snapshot that starts mid-run, with its initial state) would
// go through the path with history, whose first use makes a 4 MiB buffer.
func newEncoder(lv int) (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false),
		zstd.WithWindowSize(encoderWindow), zstd.WithEncoderLevel(encoderLevels[lv]))
}

// encoderLevels are the zstd encoders' levels: the default, and with
// FastCompression the fastest. SpeedBetterCompression makes traces only
// a few percent smaller, but its match tables are 4 MiB, fresh memory for
// each new encoder, and an import compresses on every core; the default's
// are 1.25 MiB, the fastest's 256 KiB.
var encoderLevels = [...]zstd.EncoderLevel{zstd.SpeedDefault, zstd.SpeedFastest}

// encoderWindow is the zstd encoders' window. A chunk is compressed as one
// frame, whose matches never reach outside it, and the header of a frame
// no larger than the window does not record the window: any window at
// least as large as the chunk gives the same bytes. The encoder's history
// buffer is twice the window; at the level's default window (8 MiB) its
// 16 MiB counted in the heap, which let the decoder's garbage pile up
// that much more before a collection while a prepared encoder waited.
// Chunks are about DefaultChunkBytes; a larger one is still a valid
// frame, with matches at most this far back.
const encoderWindow = 2 << 20

// Events returns the number of events written so far.
func (w *Writer) Events() int64 { return w.nEvents + int64(len(w.events)) }

// writeChunk frames, compresses and writes one chunk:
//
//	type uvarint(rawLen) uvarint(storedLen) crc32c payload
func (w *Writer) writeChunk(typ byte, raw []byte) error {
	if w.enc == nil {
		w.err = errClosed
		return w.err
	}
	if len(raw) > maxChunkRaw {
		w.err = fmt.Errorf("trace: chunk of %d bytes exceeds the %d-byte limit", len(raw), maxChunkRaw)
		return w.err
	}
	if w.par != nil {
		if err := w.par.submit(typ, raw); err != nil {
			w.err = err
			return err
		}
		w.nChunks++
		return nil
	}
	w.frame, w.comp = frameChunk(w.frame[:0], w.comp[:0], w.enc, typ, raw, w.opts.version)
	if _, err := w.w.Write(w.frame); err != nil {
		w.err = err
		return err
	}
	w.nChunks++
	return nil
}

// frameChunk appends to dst the chunk of type typ holding raw (in format
// version version), compressed with enc (into comp, returned for reuse)
// unless that does not make it smaller.
func frameChunk(dst, comp []byte, enc *zstd.Encoder, typ byte, raw []byte, version int) (frame, compBuf []byte) {
	if typ == chunkEvents {
		comp = compressColumns(comp, enc, raw, version)
	} else {
		comp = enc.EncodeAll(raw, comp)
	}
	payload := comp
	if len(payload) >= len(raw) {
		typ |= chunkStored
		payload = raw
	}
	f := append(dst, typ)
	f = binary.AppendUvarint(f, uint64(len(raw)))
	f = binary.AppendUvarint(f, uint64(len(payload)))
	crc := crc32.Update(0, castagnoli, f[len(dst):])
	crc = crc32.Update(crc, castagnoli, payload)
	f = binary.LittleEndian.AppendUint32(f, crc)
	f = append(f, payload...)
	return f, comp
}

// compressColumns appends to comp the events payload raw compressed as
// one zstd frame per column (the column header and K, then T, A, S, M and
// version 2's R; an empty column has none). A zstd stream of several frames decodes to
// the concatenation of theirs, so readers see the same payload; each
// column gets its own entropy tables, fitted to its values alone (2-6%
// smaller than one frame for the whole payload on real traces).
func compressColumns(comp []byte, enc *zstd.Encoder, raw []byte, version int) []byte {
	var hdr [10]uint64
	nh, nc := colHeaderLen(version)
	i := 0
	for j := range nh {
		if hdr[j], i = uvarint(raw, i); i < 0 {
			return enc.EncodeAll(raw, comp) // not an events payload: one frame
		}
	}
	var cut [6]uint64 // the type bytes (after the header), then each column
	cut[0] = uint64(i) + hdr[0]
	copy(cut[1:], hdr[nh-nc:nh])
	start := uint64(0)
	for _, l := range cut[:nc+1] {
		if l > uint64(len(raw))-start {
			return enc.EncodeAll(raw[start:], comp)
		}
		if l > 0 {
			comp = enc.EncodeAll(raw[start:start+l], comp)
			start += l
		}
	}
	if start < uint64(len(raw)) {
		comp = enc.EncodeAll(raw[start:], comp)
	}
	return comp
}

// FileWriter is a Writer to a file it owns.
type FileWriter struct {
	*Writer
	f *os.File
}

// Create creates the trace file path and writes its header.
func Create(path string, h *Header, opts ...WriterOption) (*FileWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w, err := NewWriter(f, h, opts...)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &FileWriter{Writer: w, f: f}, nil
}

// Close ends the trace and closes the file.
func (fw *FileWriter) Close() error {
	err := fw.Writer.Close()
	if cerr := fw.f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", fw.f.Name(), err)
	}
	return nil
}

// Abort writes the events given so far and closes the file without the
// end chunk, so that readers report the trace as cut short there.
func (fw *FileWriter) Abort() error {
	err := fw.Writer.Flush()
	fw.Writer.done = true
	fw.Writer.par.stop()
	if cerr := fw.f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", fw.f.Name(), err)
	}
	return nil
}
