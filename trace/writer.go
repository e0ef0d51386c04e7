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

// formatVersion makes the writer write format version v (1 to Version),
// for tests of older versions' readers.
func formatVersion(v int) WriterOption {
	return func(o *writerOptions) { o.version = min(max(v, 1), Version) }
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

// WriteEvent appends e to the trace. (WriteEvents of one event took a
// twentieth more instructions writing a trace event by event.)
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

// WriteRange appends n events, which fill gives: fill(dst, i) sets dst to
// events i, i+1... (len(dst) of them). With Concurrency, the events of
// each whole chunk are given again, and encoded, on the compressors, so
// fill is then called concurrently (for different events); the writer
// itself gives them a thousand at a time, only to find where chunks end
// (with ChunksByEvents, not at all: the compressors check them).
// The file is what WriteEvent would write, event by event; fill is no
// longer called once WriteRange returns.
func (w *Writer) WriteRange(n int, fill func(dst []Event, i int)) error {
	return w.writeRange(n, fill, false)
}

// WriteRangeEnd is WriteRange followed by the end of the chunk in
// progress, as Flush ends it but without waiting for the compressors: with
// Concurrency, the range's last events (less than a chunk) are then
// compressed alongside its whole chunks, not after them. The file is what
// WriteRange then Flush would write. (On the H200 host's 16 cores, ring's
// import made 3 whole chunks and a rest of 5,424 events, which was
// compressed alone once they were done; ending it here took its import
// in process from 7.2 to 6.6 ms: bench/import/h200_session23.txt.)
func (w *Writer) WriteRangeEnd(n int, fill func(dst []Event, i int)) error {
	if err := w.writeRange(n, fill, true); err != nil {
		return err
	}
	return w.endChunk()
}

// writeRange is WriteRange; with end set, the caller ends the chunk in
// progress next, and writeWhole may end it first.
func (w *Writer) writeRange(n int, fill func(dst []Event, i int), end bool) error {
	if cap(w.scratch) == 0 {
		w.scratch = make([]Event, 1024)
	}
	buf := w.scratch[:cap(w.scratch)]
	i := 0
	// Without Concurrency, and for the chunk in progress: as WriteEvents
	// (with Concurrency, up to where the chunk would end by its events;
	// if its bytes end it before, the next one is in progress).
	for i < n && (w.par == nil || len(w.events) > 0 || len(w.tab) > 0) {
		k := min(len(buf), n-i)
		if w.par != nil {
			k = max(min(k, w.opts.chunkEvents-len(w.events)), 1)
		}
		fill(buf[:k], i)
		if err := w.WriteEvents(buf[:k]); err != nil {
			return err
		}
		i += k
	}
	if i == n {
		return nil
	}
	if w.err != nil {
		return w.err
	}
	if w.done {
		return errClosed
	}
	// Whole chunks, cut where WriteEvent would cut them (the table is
	// empty: no string or stack can be defined meanwhile). When no chunk
	// can reach its byte bound and every event is valid, that is every
	// chunkEvents events.
	if w.opts.chunkEvents*maxEventBound <= w.opts.chunkBytes {
		return w.writeWhole(fill, i, n, end)
	}
	// Else a window of
	// events at a time is measured on the compressors' number of
	// goroutines (measure), then walked in order: the addresses' terms
	// and where chunks end.
	var filled sync.WaitGroup
	defer filled.Wait()
	start, cnt, est := i, 0, 0
	var maxAddr uint64
	var zero Event
	one := make([]Event, 1)
	for i < n {
		k := min(scanWindow, n-i)
		sc := w.measure(fill, i, k)
		for j := range k {
			b, hasAddr := int(sc.base[j]), sc.has[j]
			if j == sc.bad || cnt == 0 {
				// A chunk's first event is measured against no event.
				fill(one, i+j)
				e := &one[0]
				if w.invalid(e) {
					return w.eventError(e, w.nEvents+int64(cnt))
				}
				if cnt == 0 {
					b, hasAddr = baseBound(e, &zero)
				}
			}
			if hasAddr {
				maxAddr = max(maxAddr, sc.addr[j])
				b += addrBound(maxAddr)
			}
			est += b
			cnt++
			if cnt >= w.opts.chunkEvents || est >= w.opts.chunkBytes {
				if err := w.par.submitRange(fill, start, cnt, &filled, nil); err != nil {
					w.err = err
					return err
				}
				w.nChunks++
				w.nEvents += int64(cnt)
				start += cnt
				cnt, est, maxAddr = 0, 0, 0
			}
		}
		i += k
	}
	// The rest is the chunk in progress.
	if cnt > 0 {
		if cap(w.events) < cnt {
			w.events = make([]Event, 0, w.opts.chunkEvents)
		}
		w.events = w.events[:cnt]
		fill(w.events, start)
		w.estBytes, w.estAddr = est, maxAddr
	}
	return nil
}

// writeWhole is WriteRange of the events i to n-1 when chunks end every
// chunkEvents events (if they are valid): whole chunks go to the
// compressors at once, which check their events; the rest is the chunk in
// progress, or, with end set, a chunk of its own, which goes to them too.
// A chunk with an invalid event is not written, nor those after it: from
// its first event on, the events go through WriteEvents, which keeps
// those before the invalid one and returns its error.
func (w *Writer) writeWhole(fill func(dst []Event, i int), i, n int, end bool) error {
	var filled sync.WaitGroup
	defer filled.Wait()
	check := &rangeCheck{nStr: w.nStr, nStk: w.nStk}
	c, from, sent := w.opts.chunkEvents, i, 0
	for i < n && check.first.Load() == 0 {
		k := c
		if n-i < c {
			if !end {
				break
			}
			k = n - i // the rest, a chunk of its own
		}
		if err := w.par.submitRange(fill, i, k, &filled, check); err != nil {
			w.err = err
			return err
		}
		sent++
		i += k
	}
	w.nChunks += int64(sent)
	w.nEvents += int64(i - from)
	// The rest, the chunk in progress, as WriteEvents writes it, while
	// the compressors check theirs (less than a chunk: it ends none).
	var err error
	if check.first.Load() == 0 {
		err = w.writeEvents(fill, i, n)
	}
	filled.Wait()
	if bad := int(check.first.Load()) - 1; bad >= 0 {
		// The chunks from the one holding it on are dropped, with none
		// in flight once wait returns, and the chunk in progress (the
		// writer's is empty when writeWhole is called).
		if err := w.par.wait(); err != nil {
			w.err = err
			return err
		}
		w.par.dropping = false
		keep := (bad - from) / c // the whole chunks before it
		w.nChunks -= int64(sent - keep)
		w.nEvents -= int64(i - from - keep*c)
		w.events, w.estBytes, w.estAddr = w.events[:0], 0, 0
		return w.writeEvents(fill, from+keep*c, n)
	}
	return err
}

// writeEvents is WriteEvents of the events i to n-1 that fill gives.
func (w *Writer) writeEvents(fill func(dst []Event, i int), i, n int) error {
	buf := w.scratch[:cap(w.scratch)]
	for ; i < n; i += len(buf) {
		k := min(len(buf), n-i)
		fill(buf[:k], i)
		if err := w.WriteEvents(buf[:k]); err != nil {
			return err
		}
	}
	return nil
}

// scanWindow is how many events WriteRange measures at a time, and
// measureBatch how many of them a goroutine of measure fills at a time
// (filled a part at a time, they were 8 MB of fresh memory for
// baseline_s1 on 16 cores, about a fifth of what its import allocated).
var (
	scanWindow   = 1 << 16
	measureBatch = 1 << 10
)

// scan is what measure finds of a window of events: each one's baseBound
// against the event before it, its address and whether it has one, and
// the first that is invalid (-1: none).
type scan struct {
	base []uint8
	addr []uint64
	has  []bool
	bad  int
	bufs [][]Event
}

// measure fills w.sc for the k events that fill gives from index i, on
// up to w.opts.workers goroutines.
func (w *Writer) measure(fill func(dst []Event, i int), i, k int) *scan {
	sc := &w.sc
	if cap(sc.base) < k {
		sc.base, sc.addr, sc.has = make([]uint8, k), make([]uint64, k), make([]bool, k)
	}
	sc.base, sc.addr, sc.has = sc.base[:k], sc.addr[:k], sc.has[:k]
	parts := max(min(w.opts.workers, k/1024), 1)
	for len(sc.bufs) < parts {
		sc.bufs = append(sc.bufs, nil)
	}
	bad := make([]int, parts)
	var wg sync.WaitGroup
	for p := range parts {
		a, b := k*p/parts, k*(p+1)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			// measureBatch events at a time, with the one before each
			// batch (when there is one): the events are not kept.
			buf := sc.bufs[p]
			if cap(buf) < measureBatch+1 {
				buf = make([]Event, measureBatch+1)
			}
			sc.bufs[p] = buf
			var zero Event
			bad[p] = -1
			for a0 := a; a0 < b; a0 += measureBatch {
				b0 := min(a0+measureBatch, b)
				from := max(i+a0-1, 0)
				evs := buf[:i+b0-from]
				fill(evs, from)
				for j := a0; j < b0; j++ {
					e := &evs[i+j-from]
					prev := &zero
					if i+j > from {
						prev = &evs[i+j-from-1]
					}
					if bad[p] < 0 && w.invalid(e) {
						bad[p] = j
					}
					n, has := baseBound(e, prev)
					sc.base[j], sc.addr[j], sc.has[j] = uint8(n), e.Addr, has
				}
			}
		}()
	}
	wg.Wait()
	sc.bad = -1
	for _, j := range bad {
		if j >= 0 {
			sc.bad = j
			break
		}
	}
	return sc
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
// header of a snapshot that starts mid-run: ring's is 100 KiB of initial
// state) went through the path with history, whose first use made a 4 MiB
// buffer (2.7 ms against 0.23 for one block without history, on the
// development VM). Columns that large are rare: the 16 real snapshots'
// traces were the same bytes but for ring's header.
func newEncoder(lv int) (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false),
		zstd.WithWindowSize(encoderWindow), zstd.WithEncoderLevel(encoderLevels[lv]))
}

// encoderLevels are the zstd encoders' levels: the default, and with
// FastCompression the fastest. SpeedBetterCompression made traces
// 0.8-2.6% smaller than the default (baseline_s1 95.2 against 96.2 KB)
// but its match tables are 4 MiB, fresh memory for each new encoder, and
// an import compresses on every core; the default's are 1.25 MiB, the
// fastest's 256 KiB.
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
