package trace

import "sync"

// RangeSink is a Sink that also takes events many at a time: the Writer
// is one. A producer that has its events in memory (the snapshot
// importer) gives them in batches and ranges, which a Writer with
// Concurrency encodes and compresses on every core.
//
// Whatever mix of WriteEvent, WriteEvents, WriteRange, WriteRangeEnd and
// Flush a producer uses, the Writer's output is the same bytes as giving
// every event to WriteEvent in the same order with the same Flush
// calls: batches and ranges change how fast a trace is written, never
// what. A RangeSink may be implemented by looping over WriteEvent.
type RangeSink interface {
	Sink
	// WriteEvents appends evs, in order, as WriteEvent would one by one.
	WriteEvents(evs []Event) error
	// WriteRange appends n events that fill gives: fill(dst, i) sets dst
	// to events i, i+1... (len(dst) of them). fill may be called
	// concurrently, for different events, and is not called once
	// WriteRange returns.
	WriteRange(n int, fill func(dst []Event, i int)) error
	// WriteRangeEnd is WriteRange followed by the end of the chunk in
	// progress (as Flush ends it): a producer calls it for the last
	// events it gives before Close.
	WriteRangeEnd(n int, fill func(dst []Event, i int)) error
	// Flush ends the chunk in progress: a producer that defines its
	// strings and stacks first flushes them, so that the events after
	// go in ranges.
	Flush() error
}

var _ RangeSink = (*Writer)(nil)

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
// WriteRange then Flush would write.
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
// (filled a part at a time, not a whole window on each goroutine: that
// would be megabytes of fresh memory on many cores).
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
