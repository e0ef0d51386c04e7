package pytorch

import (
	"fmt"
	"slices"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// Emit writes the snapshot's events to sink, in order. It may be called
// again, but not concurrently on one Snapshot.
func (s *Snapshot) Emit(sink trace.Sink, progress func(string, int64, int64)) error {
	return s.emit(sink, progress, false)
}

// emit is Emit; closing is set when the sink is given nothing after the
// events but its end (see eventWriter.closing).
func (s *Snapshot) emit(sink trace.Sink, progress func(string, int64, int64), closing bool) error {
	if ps, ok := s.poolSink(sink); ok {
		return ps.emit(s, progress)
	}
	w := &eventWriter{s: s, sink: sink, progress: progress, total: int64(s.summary.Events), closing: closing}
	w.batcher, _ = sink.(trace.RangeSink)
	if doc := s.doc; doc != nil {
		w.strIDs = make([]uint32, doc.NumStrings())
	}
	if f := w.batcher; f != nil && (len(s.texts) > 1 || len(s.stacks.stacks) > 0) {
		// The texts and stacks are defined first, in a table of their
		// own: the events with one then go to the sink with the others,
		// in ranges compressed on every core. Defined where each was
		// first used, they would cut the ranges, and the writer would
		// write every event after one up to its chunk's end itself.
		w.texts = make([]trace.StringID, len(s.texts))
		for i := 1; i < len(s.texts); i++ {
			w.texts[i] = sink.String(s.texts[i])
		}
		w.stackIDs = make([]trace.StackID, len(s.stacks.stacks))
		for id := range s.stacks.stacks {
			if u := s.stacksUsed; u == nil || id/64 < len(u) && u[id/64]&(1<<(uint(id)%64)) != 0 {
				w.stackIDs[id] = w.stack(pickle.Value(id))
			}
		}
		if err := f.Flush(); err != nil {
			return err
		}
	}
	return s.each(w)
}

// eventWriter writes events to a sink with their stacks and texts (or,
// with collect set, keeps them: for tests).
type eventWriter struct {
	s        *Snapshot
	sink     trace.Sink
	progress func(string, int64, int64)
	total    int64
	i        int
	frames   []trace.Frame
	strIDs   []uint32         // doc string index -> sink StringID + 1
	texts    []trace.StringID // s.texts index -> sink StringID, when defined first (see Emit)
	stackIDs []trace.StackID  // stack id -> sink StackID, when defined first (see Emit)

	collect bool
	out     []event

	batcher trace.RangeSink // the sink, when it takes events in batches
	batch   []trace.Event
	bare    bool // the events putBlock is given are all bare

	// queue set (by eachOf, for a device in memory), the events without
	// a stack or text that put and putBlock are given wait in queued,
	// runs of entries and single events, to go to the sink together
	// (flushQueue): a device with many empty_cache() events merged in
	// was written run by run, mostly on this goroutine.
	queue   bool
	queued  []queuedRun
	nQueued int

	// closing is set when nothing is given to the sink after the
	// events but its end (ImportFile closes it).
	closing bool
}

// plain reports whether e goes to the sink in batches: it has no stack
// or one defined first, and no text or one defined first (see Emit).
func (w *eventWriter) plain(e *event) bool {
	return (e.frames == noFrames || w.stackIDs != nil) && (e.text == 0 || w.texts != nil)
}

// allPlain reports whether every event of b is plain.
func (w *eventWriter) allPlain(b []event) bool {
	for i := range b {
		if !w.plain(&b[i]) {
			return false
		}
	}
	return true
}

// event returns the sink's event of e, with its stack and text when they
// were defined first (see Emit): all of a plain event.
func (w *eventWriter) event(e *event) trace.Event {
	ev := e.Event()
	if e.text != 0 && w.texts != nil {
		ev.Text = w.texts[e.text]
	}
	if e.frames != noFrames && w.stackIDs != nil {
		ev.Stack = w.stackIDs[e.frames]
	}
	return ev
}

// queuedRun is a run of events putBlock was given (in memory until
// flushQueue), or, evs nil, one event put was given.
type queuedRun struct {
	evs []event
	one event
}

// writeBatch is the events putBlock gives the sink at a time.
const writeBatch = 1024

// putBlock writes the events b, in order: in batches when the sink takes
// them (an event with a stack or a text goes alone, through put). A block
// of bare events goes to the sink as one range (flushQueue), and while
// queue is set waits there for the next ones.
func (w *eventWriter) putBlock(b []event) error {
	if w.batcher == nil || w.collect {
		for i := range b {
			if err := w.put(&b[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if w.bare || w.allPlain(b) {
		w.queued = append(w.queued, queuedRun{evs: b})
		w.nQueued += len(b)
		if w.queue {
			return nil
		}
		return w.flushQueue()
	}
	if err := w.flushQueue(); err != nil {
		return err
	}
	batch := w.batch[:0]
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := w.batcher.WriteEvents(batch); err != nil {
			return fmt.Errorf("events %d to %d: %w", w.i, w.i+len(batch)-1, err)
		}
		w.wrote(len(batch))
		batch = batch[:0]
		return nil
	}
	for i := range b {
		e := &b[i]
		if !w.plain(e) {
			if err := flush(); err != nil {
				return err
			}
			if err := w.put(e); err != nil {
				return err
			}
			continue
		}
		batch = append(batch, w.event(e))
		if len(batch) == writeBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	err := flush()
	w.batch = batch
	return err
}

// str returns the sink's ID of the doc's string v.
func (w *eventWriter) str(v pickle.Value) trace.StringID {
	doc := w.s.doc
	id, ok := doc.StrID(v)
	if !ok {
		return trace.NoString
	}
	if sid := w.strIDs[id]; sid != 0 {
		return trace.StringID(sid - 1)
	}
	t, _ := doc.Str(v)
	sid := w.sink.String(t)
	w.strIDs[id] = uint32(sid) + 1
	return sid
}

// flushQueue writes the events queued, in order, as one range.
func (w *eventWriter) flushQueue() error { return w.flushQueueEnd(false) }

// flushQueueEnd is flushQueue; with end set, the events queued are the
// last the sink is given before it is closed, and when it can (a
// trace.Writer), it ends its chunk in progress with them (see
// trace.Writer.WriteRangeEnd).
func (w *eventWriter) flushQueueEnd(end bool) error {
	q, n := w.queued, w.nQueued
	if len(q) == 0 {
		return nil
	}
	w.queued, w.nQueued = q[:0], 0
	write := w.batcher.WriteRange
	if end {
		write = w.batcher.WriteRangeEnd
	}
	starts := make([]int, len(q)) // each run's first event in the range
	at := 0
	for r := range q {
		starts[r] = at
		at += max(len(q[r].evs), 1)
	}
	err := write(n, func(dst []trace.Event, i int) {
		r, _ := slices.BinarySearch(starts, i+1)
		r--
		for j := 0; j < len(dst); r++ {
			x := &q[r]
			if x.evs == nil {
				dst[j] = w.event(&x.one)
				j++
				continue
			}
			off := i + j - starts[r]
			m := min(len(x.evs)-off, len(dst)-j)
			for t := range m {
				dst[j+t] = w.event(&x.evs[off+t])
			}
			j += m
		}
	})
	if err != nil {
		return fmt.Errorf("events %d to %d: %w", w.i, w.i+n-1, err)
	}
	w.wrote(n)
	return nil
}

// wrote counts n events given to the sink, and reports the progress.
func (w *eventWriter) wrote(n int) {
	if w.progress != nil && (w.i+n)>>18 != w.i>>18 {
		w.progress("write", int64(w.i+n), w.total)
	}
	w.i += n
}

// put writes e, the next event.
func (w *eventWriter) put(e *event) error {
	if w.collect {
		w.out = append(w.out, *e)
		return nil
	}
	if w.queue && w.batcher != nil {
		if w.plain(e) {
			w.queued = append(w.queued, queuedRun{one: *e})
			w.nQueued++
			return nil
		}
		if err := w.flushQueue(); err != nil {
			return err
		}
	}
	ev := w.event(e) // its stack and text when defined first (see Emit)
	if e.frames != noFrames && w.stackIDs == nil {
		ev.Stack = w.stack(e.frames)
	}
	if e.text != 0 && w.texts == nil {
		ev.Text = w.sink.String(w.s.texts[e.text])
	}
	if err := w.sink.WriteEvent(ev); err != nil {
		return fmt.Errorf("event %d: %w", w.i, err)
	}
	if w.progress != nil && w.i&(1<<18-1) == 0 {
		w.progress("write", int64(w.i), w.total)
	}
	w.i++
	return nil
}

// stack returns the sink's stack of the snapshot's stack id, defining it
// and its strings (NoStack for a stack of no frames).
func (w *eventWriter) stack(id pickle.Value) trace.StackID {
	w.frames = w.frames[:0]
	for _, f := range w.s.stacks.stacks[id] {
		fr := trace.Frame{Line: f.line}
		// The strings go to the sink in the order of the frame's keys.
		if f.nameFirst && f.name != noFrames {
			fr.Func = w.str(f.name)
		}
		if f.file != noFrames {
			fr.File = w.str(f.file)
		}
		if !f.nameFirst && f.name != noFrames {
			fr.Func = w.str(f.name)
		}
		w.frames = append(w.frames, fr)
	}
	if len(w.frames) == 0 {
		return trace.NoStack
	}
	return w.sink.Stack(w.frames)
}

// seqReader reads a device's event sequence (see devSeq).
type seqReader struct {
	s      *Snapshot
	seq    *devSeq
	raw    *cursor
	ecs    *cursor
	ec     *event // the next inferred empty_cache(), nil when none
	t      int64  // the time of the latest entry
	n      int    // entries read
	head   event  // the next entry or empty_cache()
	ok     bool   // head is set
	filled bool   // head and ok are up to date
	mi     int    // the next marker
	xi     int    // the next event of the "fragsim" key
}

func (s *Snapshot) newSeqReader(seq *devSeq) *seqReader {
	r := &seqReader{s: s, seq: seq, raw: newCursor(s.raw, seq.from, seq.to), ecs: newCursor(&s.ecs, seq.ecFrom, seq.ecTo)}
	r.ec = r.ecs.next()
	return r
}

// entry returns the device's next entry or inferred empty_cache().
func (r *seqReader) entry() (event, bool) {
	if q := r.seq; r.xi < len(q.ext) && int(q.extPos[r.xi]) <= r.n {
		r.xi++
		return q.ext[r.xi-1], true
	}
	if r.ec != nil && int(r.ec.Addr) == r.n {
		e := *r.ec
		e.Addr = 0
		r.ec = r.ecs.next()
		return e, true
	}
	for {
		p := r.raw.next()
		if p == nil {
			if q := r.seq; r.xi < len(q.ext) { // placed past the entries kept
				r.xi++
				return q.ext[r.xi-1], true
			}
			return event{}, false
		}
		if e := *p; r.seq.conv || r.s.entry(&e, r.seq.dev, &r.t) {
			r.n++
			return e, true
		}
	}
}

// peek returns the device's next event without taking it; false at the end.
func (r *seqReader) peek() (*event, bool) {
	if !r.filled {
		r.head, r.ok = r.entry()
		r.filled = true
	}
	// An annotation goes before the entries of a later time only.
	if ms := r.seq.markers; r.mi < len(ms) && (!r.ok || ms[r.mi].TimeNS < r.head.TimeNS) {
		return &ms[r.mi], true
	}
	return &r.head, r.ok
}

// take drops the event peek returned.
func (r *seqReader) take() {
	if ms := r.seq.markers; r.mi < len(ms) && (!r.ok || ms[r.mi].TimeNS < r.head.TimeNS) {
		r.mi++
		return
	}
	r.filled = false
}

// err returns the error that ended the reading, if any.
func (r *seqReader) err() error {
	if r.raw.err != nil {
		return r.raw.err
	}
	return r.ecs.err
}

// eachOf writes the events of one device's sequence, in order: what
// seqReader gives, without its per-event calls. With last set, they are
// the last events the sink is given (see flushQueueEnd).
func (s *Snapshot) eachOf(q *devSeq, w *eventWriter, last bool) error {
	ecs := newCursor(&s.ecs, q.ecFrom, q.ecTo)
	ec := ecs.next()
	ms := q.markers
	// marks writes the annotations of a time before t.
	marks := func(t int64) error {
		for len(ms) > 0 && ms[0].TimeNS < t {
			if err := w.put(&ms[0]); err != nil {
				return err
			}
			ms = ms[1:]
		}
		return nil
	}
	// put writes x after the annotations of an earlier time.
	put := func(x *event) error {
		if err := marks(x.TimeNS); err != nil {
			return err
		}
		return w.put(x)
	}
	// flushECs writes the empty_cache() events that go before entry k,
	// and the events of the "fragsim" key.
	var x event
	xi := 0
	flushECs := func(k int) error {
		for xi < len(q.ext) && int(q.extPos[xi]) <= k {
			if err := put(&q.ext[xi]); err != nil {
				return err
			}
			xi++
		}
		for ec != nil && int(ec.Addr) == k {
			x = *ec
			x.Addr = 0
			if err := put(&x); err != nil {
				return err
			}
			ec = ecs.next()
		}
		return nil
	}
	var t int64
	k := 0
	if q.conv && !mergeOneByOne {
		w.bare, w.queue = q.bare, true
		defer func() { w.bare, w.queue = false, false }()
		// Converted in memory (the usual case): the entries between two
		// events merged in go to putBlock together (one by one, they kept
		// the writer's compressors waiting on this goroutine), and wait
		// there with the empty_cache() events until an annotation or the
		// end, to go to the writer as one range.
		err := s.raw.blocks(q.from, q.to, false, func(_ int, b []event) error {
			for len(b) > 0 {
				if err := flushECs(k); err != nil {
					return err
				}
				if err := marks(b[0].TimeNS); err != nil {
					return err
				}
				n := len(b) // the run: up to the next event merged in
				if ec != nil && int(ec.Addr) > k {
					n = min(n, int(ec.Addr)-k)
				}
				if xi < len(q.ext) && int(q.extPos[xi]) > k {
					n = min(n, int(q.extPos[xi])-k)
				}
				if len(ms) > 0 {
					for j := 1; j < n; j++ {
						if ms[0].TimeNS < b[j].TimeNS {
							n = j
						}
					}
				}
				if err := w.putBlock(b[:n]); err != nil {
					return err
				}
				b, k = b[n:], k+n
			}
			return nil
		})
		if err != nil {
			return err
		}
	} else if err := s.raw.blocks(q.from, q.to, false, func(_ int, b []event) error {
		for i := range b {
			// Converted where it is: b is a copy when not converted
			// (spilled).
			e := &b[i]
			if !q.conv && !s.entry(e, q.dev, &t) {
				continue
			}
			if ec != nil || xi < len(q.ext) {
				if err := flushECs(k); err != nil {
					return err
				}
			}
			k++
			var err error
			if len(ms) == 0 {
				err = w.put(e)
			} else {
				err = put(e)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := flushECs(k); err != nil {
		return err
	}
	for ; xi < len(q.ext); xi++ { // placed past the entries kept
		if err := put(&q.ext[xi]); err != nil {
			return err
		}
	}
	for i := range ms {
		if err := w.put(&ms[i]); err != nil {
			return err
		}
	}
	if err := w.flushQueueEnd(last); err != nil {
		return err
	}
	return ecs.err
}

// mergeOneByOne makes eachOf merge events in with each entry, as it
// does for entries not converted in memory (tests: the reference).
var mergeOneByOne = false

// each writes the events, in order: the devices' sequences merged by
// time, each keeping its order, ties going to the lower device.
func (s *Snapshot) each(w *eventWriter) error {
	rs := make([]*seqReader, 0, len(s.seqs))
	for i := range s.seqs {
		q := &s.seqs[i]
		if q.to > q.from || q.ecTo > q.ecFrom || len(q.markers) > 0 || len(q.ext) > 0 {
			rs = append(rs, s.newSeqReader(q))
		}
	}
	if len(rs) == 1 {
		return s.eachOf(rs[0].seq, w, w.closing)
	}
	for {
		var best *seqReader
		var be *event
		for _, r := range rs {
			if e, ok := r.peek(); ok && (best == nil || e.TimeNS < be.TimeNS) {
				best, be = r, e
			}
		}
		if best == nil {
			break
		}
		if err := w.put(be); err != nil {
			return err
		}
		best.take()
	}
	for _, r := range rs {
		if err := r.err(); err != nil {
			return err
		}
	}
	return nil
}
