package pytorch

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/fragsim/fragsim/trace/pickle"
)

// Spilling: a snapshot of more than spillEvents trace entries keeps its
// events in a temporary file, in blocks of spillBlock events, so that the
// import's memory does not grow with the snapshot. Variables so that tests
// can make them tiny.
var (
	spillEvents = 1 << 20 // 48 MiB of events
	spillBlock  = 64 << 10
)

const eventBytes = int(unsafe.Sizeof(event{}))

// SpillError is an error reading or writing the temporary file of a large
// import's events.
type SpillError struct{ Err error }

func (e *SpillError) Error() string { return "spilling events: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *SpillError) Unwrap() error { return e.Err }

// evlog is a sequence of events that can be appended to and read forward
// or backward. Up to spillEvents it is a slice in memory; beyond, its
// events are written in blocks to a temporary file (unnamed: removed as
// soon as it is made, where the system allows), keeping only the block
// being filled and the one before it in memory, so that the latest events
// (at least spillBlock of them) can still be changed.
type evlog struct {
	mem  []event // all events in memory; when spilled, the block being filled
	prev []event // when spilled, the block before mem (nil while none)
	base int     // index of mem[0] (0 in memory)
	f    *os.File
	name string  // the file's name while it could not be removed
	dir  string  // where to make the file ("": os.TempDir())
	err  error   // the first spill error
	done bool    // finished: everything is in the file
	rbuf []event // blocks' read buffer, between walks
}

// Len returns the number of events.
func (l *evlog) Len() int { return l.base + len(l.mem) }

// spilled reports whether the events are in a file.
func (l *evlog) spilled() bool { return l.f != nil }

// push appends e.
func (l *evlog) push(e event) {
	if len(l.mem) == cap(l.mem) {
		l.grow(0, 0)
	}
	l.mem = append(l.mem, e)
}

// grow makes room for at least one more event: when in memory, a capacity
// of want events (at least a quarter more than today, at most
// spillEvents) of which est (the events still expected) are faulted in
// ahead, or the spill to a file if more than spillEvents are expected in
// all; when spilled, the next block.
func (l *evlog) grow(want, est int) {
	n := len(l.mem)
	if l.f == nil && l.err == nil {
		want = min(max(want, n+n/4, 1024), max(spillEvents, n+1))
		if max(n+est, n+1) <= spillEvents {
			mem, reused := newEvents(n, want)
			if est >= 1<<15 && !reused {
				est = min(est, want-n)
				pickle.Prefault(eventBytesOf(mem[n : n+est]))
			}
			copy(mem, l.mem)
			l.mem = mem
			return
		}
		if err := l.open(); err != nil {
			l.fail(err)
		} else {
			// The latest events stay in memory as the previous block.
			keep := min(n, spillBlock)
			l.write(l.mem[:n-keep])
			l.prev = append(make([]event, 0, spillBlock), l.mem[n-keep:]...)
			l.base += n
			l.mem = make([]event, 0, spillBlock)
			return
		}
	}
	if l.f == nil { // failed: keep the events in memory (the error is reported)
		l.mem = append(l.mem, event{})[:n]
		return
	}
	l.write(l.prev)
	l.base += len(l.mem)
	l.prev, l.mem = l.mem, l.prev[:0]
	if cap(l.mem) == 0 {
		l.mem = make([]event, 0, spillBlock)
	}
}

// fail records the first error.
func (l *evlog) fail(err error) {
	if l.err == nil {
		l.err = &SpillError{err}
	}
}

// open makes the temporary file.
func (l *evlog) open() error {
	dir := l.dir
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, ".fragsim-events-*")
	if err != nil {
		return err
	}
	if os.Remove(f.Name()) != nil {
		l.name = f.Name() // removed by close
	}
	l.f = f
	return nil
}

// write appends evs to the file.
func (l *evlog) write(evs []event) {
	if len(evs) == 0 || l.err != nil {
		return
	}
	if _, err := l.f.Write(eventBytesOf(evs)); err != nil {
		l.fail(err)
	}
}

func eventBytesOf(evs []event) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(evs))), len(evs)*eventBytes)
}

// at returns event i when it is still in memory, else nil.
func (l *evlog) at(i int) *event {
	if j := i - l.base; uint(j) < uint(len(l.mem)) {
		return &l.mem[j]
	}
	return l.atPrev(i)
}

// atPrev is at for an event of the previous block.
func (l *evlog) atPrev(i int) *event {
	if j := i - (l.base - len(l.prev)); j >= 0 && i < l.base && !l.done {
		return &l.prev[j]
	}
	return nil
}

// finish ends the appending: a spilled log writes what it still holds.
// It returns the first spill error.
func (l *evlog) finish() error {
	if l.f != nil && !l.done {
		l.write(l.prev)
		l.write(l.mem)
		l.base += len(l.mem)
		l.prev, l.mem, l.done = nil, nil, true
	}
	return l.err
}

// close removes the file, if any.
func (l *evlog) close() {
	if l.f != nil {
		l.f.Close()
		if l.name != "" {
			os.Remove(l.name)
		}
		l.f = nil
	} else {
		putEvents(l.mem)
	}
	l.mem, l.prev, l.rbuf = nil, nil, nil
}

// idleEvents holds the memory of a closed log's events (*[]event), for
// the next import in the process: the heap would clear it again, or fault
// it in (a 124,000-entry snapshot's events are 6.6 MiB). A process that
// imports several snapshots reuses it, as it reuses the chunk handlers'
// and the trace writer's buffers (idleChunks, trace's idleJobs).
var idleEvents sync.Pool

// newEvents returns events of length n and capacity want or more: a
// closed log's (reused true) when it is large enough, else new ones. A
// closed log's keep their capacity (the log's first growth takes it, and
// Fork then has no memory to make) up to spillEvents: the log spills when
// it has to grow beyond. Nothing reads a log's events beyond its length,
// so reused memory is not cleared.
func newEvents(n, want int) (mem []event, reused bool) {
	if p, ok := idleEvents.Get().(*[]event); ok && cap(*p) >= want {
		if poisonEvents {
			b := eventBytesOf((*p)[:cap(*p)])
			for i := range b {
				b[i] = 0xa5
			}
		}
		return (*p)[:n:min(cap(*p), max(want, spillEvents))], true
	}
	return make([]event, n, want), false
}

// poisonEvents has newEvents fill reused memory with garbage (tests: the
// import must not read what it did not write).
var poisonEvents bool

// putEvents keeps mem for newEvents when it is large enough to be worth
// it (16K events, 0.9 MiB).
func putEvents(mem []event) {
	if cap(mem) >= 1<<14 {
		mem = mem[:0]
		idleEvents.Put(&mem)
	}
}

// errClosed is returned when a closed snapshot's events are read.
var errClosed = errors.New("the snapshot's events were released (Close)")

// blocks calls fn with the events [from, to) in order, a block at a time,
// with the index of the block's first event (backward: the blocks last
// first; fn reads each backward itself). fn's slice is valid during the
// call; an error of fn's ends the walk.
func (l *evlog) blocks(from, to int, backward bool, fn func(lo int, b []event) error) error {
	if from >= to {
		return nil
	}
	if l.f == nil {
		if l.base != 0 || to > len(l.mem) {
			return errClosed
		}
		return fn(from, l.mem[from:to])
	}
	if !l.done {
		return errors.New("spilled events read before they were finished")
	}
	n := min(spillBlock, to-from)
	if cap(l.rbuf) < n {
		l.rbuf = make([]event, n)
	}
	buf := l.rbuf[:n]
	l.rbuf = nil // (a walk inside fn gets its own)
	defer func() { l.rbuf = buf }()
	for k := 0; from+k < to; k += len(buf) {
		lo, hi := from+k, min(to, from+k+len(buf))
		if backward {
			lo, hi = max(from, to-k-len(buf)), to-k
		}
		b := buf[:hi-lo]
		if err := l.read(b, lo); err != nil {
			return err
		}
		if err := fn(lo, b); err != nil {
			return err
		}
	}
	return nil
}

// read fills b with the events from index i of the file.
func (l *evlog) read(b []event, i int) error {
	if _, err := l.f.ReadAt(eventBytesOf(b), int64(i)*int64(eventBytes)); err != nil {
		return &SpillError{fmt.Errorf("read: %w", err)}
	}
	return nil
}

// cursor reads the events [pos, end) of a log in order, a block at a time.
type cursor struct {
	l        *evlog
	buf      []event // the block being read
	i        int     // next in buf
	pos, end int     // next index to fill buf from, and the end
	err      error
}

func newCursor(l *evlog, from, to int) *cursor {
	c := &cursor{l: l, pos: from, end: to}
	if l.f == nil && l.base == 0 && to <= len(l.mem) {
		c.buf, c.pos = l.mem[from:to], to
	}
	return c
}

// next returns the next event, or nil at the end or on an error (c.err).
func (c *cursor) next() *event {
	if c.i < len(c.buf) {
		c.i++
		return &c.buf[c.i-1]
	}
	if c.pos >= c.end || c.err != nil {
		return nil
	}
	if c.l.f == nil {
		c.err = errClosed
		return nil
	}
	n := min(spillBlock, c.end-c.pos)
	if cap(c.buf) < n {
		c.buf = make([]event, n)
	}
	c.buf = c.buf[:n]
	if c.err = c.l.read(c.buf, c.pos); c.err != nil {
		return nil
	}
	c.pos += n
	c.i = 1
	return &c.buf[0]
}
