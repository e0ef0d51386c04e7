package pytorch

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"sync"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// errFallback says that a streamed decode met something the streaming
// path does not follow; the snapshot is then decoded again as a whole.
var errFallback = errors.New("the snapshot's entries cannot be streamed")

// Entry keys, numbered from 1 (0: a key the import ignores), and the bits
// of event.set that say which were set.
const (
	keyAction = 1 + iota
	keyAddr
	keySize
	keyStream
	keyTime
	keyFrames
	keyDeviceFree
	keyUserMetadata
	keyOther // computed: not an entry key

	setAction = 1 << (keyAction - 1) // the entry has an action
	setTimeOK = 1 << 15              // time_us held a number
)

func entryKey(s string) uint8 {
	switch s {
	case "action":
		return keyAction
	case "addr":
		return keyAddr
	case "size":
		return keySize
	case "stream":
		return keyStream
	case "time_us":
		return keyTime
	case "frames":
		return keyFrames
	case "device_free":
		return keyDeviceFree
	case "user_metadata":
		return keyUserMetadata
	}
	return keyOther
}

// streamer turns the trace entries of a snapshot into events while the
// pickle decoder meets them (pickle.EntryHandler): an entry costs its
// event, not a tree of decoded values. Its events are in the order the
// entries were created; the device lists say which events each device has.
// A large snapshot's events go to a temporary file as they come (see
// evlog): an entry can then be changed only while it is among the latest
// (an older one sends the snapshot to the general path).
type streamer struct {
	conv
	dec     *pickle.Decoder // takes the frames lists (see stackTable)
	stacks  stackTable
	log     evlog
	unknown map[uint32]string  // entry -> its action when not one the import knows
	chunks  chan *chunkEntries // idle chunk handlers (see Fork): kept across collections
	ready   chan []event       // the events' memory, being made (see Fork)
	size    int                // the input's size
	first   int                // the first entry's offset
	midOff  int                // entry rateFrom's offset (see Fork)

	prepareAt int              // the offset from which to call prepare
	prepare   func(events int) // see Options.prepare

	// copies are Merge's copies of chunks' events into the log, made on
	// other goroutines, so that the decoder, which merges the chunks in
	// order and is the decode's slowest goroutine at its end, does not
	// copy them itself. The log is not
	// grown, spilled or read before they are done (wait).
	copies sync.WaitGroup
}

// wait returns once Merge's copies into the log are done.
func (s *streamer) wait() { s.copies.Wait() }

// rateFrom is the entry from which Fork also measures the entries a byte
// holds.
const rateFrom = 256

// perByte is the entries a byte of input held from the first entry to
// offset off, n entries, or from entry rateFrom on when denser: the rate
// at which the estimates of the entries to come are made (0 before the
// first entry). (The first entries of a snapshot with call stacks hold
// each frame's dict, met once: for genpickle 100K -frames 8, Fork
// estimated 87,906 entries from the first rate alone, and the log was
// grown by copying at the end.)
func (s *streamer) perByte(n, off int) float64 {
	if off <= s.first {
		return 0
	}
	rate := float64(n) / float64(off-s.first)
	if n > 2*rateFrom && off > s.midOff && s.midOff > s.first {
		rate = max(rate, float64(n-rateFrom)/float64(off-s.midOff))
	}
	return rate
}

// estimate guesses the input's entries from the n entries that start
// before offset off.
func (s *streamer) estimate(n, off int) int {
	return n + int(float64(s.size-off)*s.perByte(n, off))
}

// NewEntry starts entry n's event; off is where its dict starts.
func (s *streamer) NewEntry(n uint32, off int) {
	if n == rateFrom {
		s.midOff = off
	}
	if off >= s.prepareAt {
		s.prepareAt = math.MaxInt
		s.prepare(s.estimate(int(n), off))
	}
	l := &s.log
	if len(l.mem) == cap(l.mem) {
		s.reserve(off)
	}
	l.mem = append(l.mem, event{frames: noFrames})
}

// reserve grows the events for the entries the rest of the input holds at
// the rate seen so far (plus a tenth), so that they are neither copied
// again and again as they grow nor much larger than needed (a million
// entries are 48 MB of events); beyond spillEvents, they spill to a file.
func (s *streamer) reserve(off int) {
	s.reserveFor(off, 0)
}

// reserveFor is reserve when the entries up to off are those of the log
// and more others (a chunk's, about to be added).
func (s *streamer) reserveFor(off, more int) {
	s.wait() // the log may move, or be written out
	n := s.log.Len()
	if n == 0 {
		s.first = off
		s.log.grow(4096, 0)
		return
	}
	if s.ready != nil {
		// Made by Fork: taken when it holds more than today. Until it is
		// made, the log grows by a quarter (or what the chunk adds): the
		// decoder does not wait for it (memory the heap had freed is
		// cleared first, and the decoder and the workers would wait).
		select {
		case mem := <-s.ready:
			s.ready = nil
			if l := &s.log; !l.spilled() && cap(mem) > len(l.mem) {
				l.mem = append(mem, l.mem...)
				return
			}
		default:
			s.log.grow(n+more, 0)
			return
		}
	}
	want, est := 0, 0
	if off > s.first {
		est = int(float64(s.size-off)*s.perByte(n+more, off)) + more
		want = n + est + est/10 + 1024
	}
	s.log.grow(want, est)
}

// conv turns the pairs of entries into events: for the streamer, and for
// each chunk of entries decoded on a worker (chunkEntries), with the
// chunk's own Doc and caches.
type conv struct {
	doc    *pickle.Doc
	keyOf  []uint8 // string index -> entry key, 0 when not yet known
	kindOf []uint8 // string index -> action kind + 1 (1: unknown), 0 when not yet known
	kinds  uint32  // bit k: an action of kind k met
	lists  bool    // a chunk's: some event's frames are the chunk's (chunkList, chunkRef)
	// maxSize is the largest size an entry may have (see
	// Options.MaxSizeBytes; 0: DefaultMaxSizeBytes).
	maxSize uint64
}

// chunkList marks, in a chunk's event, frames that are the chunk's list
// of that number (pickle.Doc.RefList), and chunkRef frames fetched from
// the memo, its fetch of that number (pickle.Doc.Ref), until Merge gives
// the stack id.
const (
	chunkList = pickle.Value(1) << 31
	chunkRef  = pickle.Value(1) << 30
)

// errChunk ends a chunk decoded on a worker before an entry the chunk
// cannot convert alone (an action the import does not know, a frames
// list not yet interned): the decoder converts that entry itself.
var errChunk = errors.New("entry left to the decoder")

// grow extends the string-index caches to the strings decoded so far.
func (c *conv) grow(id uint32) {
	n := max(c.doc.NumStrings(), int(id)+1)
	c.keyOf = append(c.keyOf, make([]uint8, n-len(c.keyOf))...)
	c.kindOf = append(c.kindOf, make([]uint8, n-len(c.kindOf))...)
}

// SetEntry stores the keys and values set on entry n in its event. A key
// set twice sends the snapshot to the general path (which keeps Python's
// last-value semantics for every field).
func (s *streamer) SetEntry(n uint32, kv []pickle.Value) error {
	if s.log.err != nil {
		return s.log.err // the events could not be spilled
	}
	e := s.log.at(int(n))
	if e == nil {
		return errFallback // changed after it left the window
	}
	return s.set(n, e, kv, s)
}

// set stores kv, set on entry n, in its event e. s is the streamer, or
// nil for a chunk's entry (whose frames lists must be the chunk's own,
// numbered until Merge, or stacks known before the chunks, and action one
// the import knows).
func (c *conv) set(n uint32, e *event, kv []pickle.Value, s *streamer) error {
	doc := c.doc
	for i := 0; i+1 < len(kv); i += 2 {
		id, ok := doc.StrID(kv[i])
		k := uint8(keyOther)
		if ok {
			if int(id) >= len(c.keyOf) {
				c.grow(id)
			}
			if k = c.keyOf[id]; k == 0 {
				str, _ := doc.Str(kv[i])
				k = entryKey(str)
				c.keyOf[id] = k
			}
		}
		if k != keyFrames && s == nil {
			// A chunk's list the import does not take as a stack: the
			// decoder decodes the entry (it keeps the list, which the
			// chunk would have taken).
			if _, ok := doc.RefList(kv[i+1]); ok {
				return errChunk
			}
		}
		if k == keyOther {
			continue
		}
		bit := uint16(1) << (k - 1)
		if e.set&bit != 0 {
			return errFallback
		}
		e.set |= bit
		v := kv[i+1]
		if r, ok := doc.Ref(v); ok && s == nil {
			// A value the worker could not fetch: the frames list of a
			// free_requested in another chunk, taken as Merge gets it.
			if k != keyFrames {
				return pickle.ErrDeferEntry
			}
			e.frames = chunkRef | pickle.Value(r)
			c.lists = true
			continue
		}
		switch k {
		case keyAction:
			if !c.action(e, v) {
				if s == nil {
					return errChunk
				}
				if s.unknown == nil {
					s.unknown = map[uint32]string{}
				}
				s.unknown[n], _ = doc.Str(v)
			}
		case keyAddr:
			x, bad := entryUint(doc, v, math.MaxUint64)
			if bad != "" {
				return c.badValue(s)
			}
			if e.Kind != trace.KindOOM { // an OOM's Addr is its device_free
				e.Addr = x
			}
		case keySize:
			x, bad := entryUint(doc, v, cmp.Or(c.maxSize, DefaultMaxSizeBytes))
			if bad != "" {
				return c.badValue(s)
			}
			e.SizeBytes = x
		case keyStream:
			x, _ := doc.Int(v)
			e.Stream = trace.StreamID(x)
		case keyTime:
			x, bad := entryTime(doc, v)
			if bad != "" {
				return c.badValue(s)
			}
			e.TimeNS = x
			e.set |= setTimeOK
		case keyFrames:
			// The stack's id in the table: a list shared by entries comes
			// back as the decoder's ticket for it once taken. (A chunk's
			// tickets are all of stacks interned before the chunks; its
			// own lists are numbered in the chunk until Merge.)
			if id, ok := doc.RefList(v); ok && s == nil {
				e.frames = chunkList | pickle.Value(id)
				c.lists = true
			} else if id, ok := pickle.TicketID(v); ok && (s == nil || int(id) < len(s.stacks.stacks)) {
				e.frames = pickle.Value(id)
			} else if doc.Kind(v) == pickle.KindList {
				if s == nil {
					return errChunk
				}
				var id uint32
				if s.dec != nil {
					id = s.dec.ListID(s, v)
					s.dec.Take(v, id)
				} else {
					id = s.stacks.intern(doc, v)
				}
				e.frames = pickle.Value(id)
			}
		case keyDeviceFree:
			// Kept in Addr for an OOM, which has no address: the action
			// must come first (PyTorch writes it first).
			if e.set&setAction == 0 {
				return errFallback
			}
			x, bad := entryUint(doc, v, math.MaxUint64)
			if bad != "" {
				return c.badValue(s)
			}
			if e.Kind == trace.KindOOM {
				e.Addr = x
			}
		case keyUserMetadata:
			if sid, ok := doc.StrID(v); ok {
				e.text = int32(sid) + 1
			}
		}
	}
	return nil
}

// action sets e's kind from the action value v; false for an action the
// import does not know (e's kind is then KindInvalid).
func (c *conv) action(e *event, v pickle.Value) bool {
	doc := c.doc
	id, ok := doc.StrID(v)
	if ok {
		if int(id) >= len(c.kindOf) {
			c.grow(id)
		}
		k := c.kindOf[id]
		if k == 0 {
			str, _ := doc.Str(v)
			k = 1
			if kind, known := actionKinds[str]; known {
				k = uint8(kind) + 1
				c.kinds |= 1 << kind
			}
			c.kindOf[id] = k
		}
		if k > 1 {
			e.Kind = trace.Kind(k - 1)
			if e.Kind == trace.KindOOM {
				e.Addr = 0 // until device_free
			}
			return true
		}
	}
	e.Kind = trace.KindInvalid
	return false
}

// chunkEntries converts the entries of a chunk decoded on a worker
// (pickle.ParallelHandler).
type chunkEntries struct {
	conv
	strs    int  // the decoder's strings at the fork: the chunk's own are above
	texts   bool // some event has a text
	evs     []event
	copying sync.WaitGroup // Merge's copies of evs not yet done
	async   bool           // Merge copied some on another goroutine
}

func (h *chunkEntries) NewEntry(n uint32, off int) {
	h.evs = append(h.evs, event{frames: noFrames})
}

func (h *chunkEntries) SetEntry(n uint32, kv []pickle.Value) error {
	e := &h.evs[n]
	err := h.set(n, e, kv, nil)
	h.texts = h.texts || e.text != 0
	return err
}

// ReadyForWorkers reports whether the entries so far have had the actions
// most later entries fetch from the memo, alloc and the two frees
// (pickle.ParallelReady): the workers then start all at once. A snapshot
// meets its first free once the model has loaded (entry 127 to 1,165 of
// the 16 real ones); rarer actions (segment_free, oom) come in few
// entries.
func (s *streamer) ReadyForWorkers() bool {
	const want = 1<<trace.KindAlloc | 1<<trace.KindFreeRequested | 1<<trace.KindFreeCompleted
	return s.kinds&want == want
}

// Fork readies the chunk handlers (pickle.ParallelHandler): each gets a
// copy of the caches as they are now. The events' memory for the rest of
// the input is made and faulted in on another goroutine meanwhile (see
// reserve), not on the decoding goroutine, which every other waits for.
func (s *streamer) Fork(off, chunkBytes int) func(doc *pickle.Doc) pickle.EntryHandler {
	// perChunk is a chunk's events, with some room, at the rate so far
	// (grown by appending, they were copied as they grew, in fresh memory).
	perChunk := 0
	if n := s.log.Len(); n > 0 && off > s.first {
		rate := s.perByte(n, off)
		perChunk = min(int(float64(chunkBytes)*rate*1.15)+64, 1<<16)
		est := s.estimate(n, off) - n
		if want := n + est + est/10 + 1024; !s.log.spilled() && want <= spillEvents && want > cap(s.log.mem) {
			s.ready = make(chan []event, 1)
			hold := forkHold
			go func() {
				mem, reused := newEvents(0, want)
				if !reused {
					pickle.Prefault(eventBytesOf(mem[:est]))
				}
				if hold != nil {
					<-hold
				}
				s.ready <- mem
			}()
		}
	}
	s.chunks = make(chan *chunkEntries, 64)
	n := s.doc.NumStrings()
	s.conv.grow(uint32(max(n, 1) - 1))
	keyOf, kindOf := slices.Clone(s.keyOf[:n]), slices.Clone(s.kindOf[:n])
	return func(doc *pickle.Doc) pickle.EntryHandler {
		var h *chunkEntries
		select {
		case h = <-s.chunks:
		default:
			if h, _ = idleChunks.Get().(*chunkEntries); h == nil {
				h = &chunkEntries{}
			}
		}
		h.conv = conv{doc: doc, keyOf: append(h.keyOf[:0], keyOf...), kindOf: append(h.kindOf[:0], kindOf...), maxSize: s.maxSize}
		if cap(h.evs) < perChunk {
			h.evs = make([]event, 0, perChunk)
		}
		h.strs, h.evs, h.texts = n, h.evs[:0], false
		return h
	}
}

// idleChunks holds the chunk handlers of finished imports (see
// streamer.idle) for the next import's Fork.
var idleChunks sync.Pool

// idle gives the chunk handlers kept for this import's chunks to the next
// import: their events' memory (a chunk's, up to 3.5 MiB) is then already
// faulted in, and need not be cleared.
func (s *streamer) idle() {
	for {
		select {
		case c := <-s.chunks:
			idleChunks.Put(c)
		default:
			return
		}
	}
}

// forkHold, when not nil (tests), holds the events' memory Fork makes
// until it is closed.
var forkHold chan struct{}

// TakeList interns the stack of a frames list a chunk made
// (pickle.ParallelLists): items are its frame dicts.
func (s *streamer) TakeList(items []pickle.Value) uint32 {
	return s.stacks.internItems(s.doc, items)
}

// The streamer's entries may be decoded on workers, frames lists and all.
var _ interface {
	pickle.ParallelReady
	pickle.ParallelLists
} = (*streamer)(nil)

// Release keeps the chunk handler h for another chunk
// (pickle.ParallelHandler): its events' memory is then already faulted in.
func (s *streamer) Release(h pickle.EntryHandler) {
	c := h.(*chunkEntries)
	c.doc = nil
	keep := func() {
		select {
		case s.chunks <- c:
		default:
		}
	}
	if c.async {
		// Kept once Merge's copies of its events are done.
		s.copies.Add(1)
		go func() {
			defer s.copies.Done()
			c.copying.Wait()
			c.async = false
			keep()
		}()
		return
	}
	keep()
}

// Merge appends the events from to to-1 of the chunk handler h as entries
// first on (pickle.ParallelHandler); m maps the chunk's own strings,
// lists and fetches.
func (s *streamer) Merge(h pickle.EntryHandler, from, to int, first uint32, end int, m *pickle.ChunkMap) error {
	c := h.(*chunkEntries)
	if s.log.err != nil {
		return s.log.err
	}
	if s.log.Len() != int(first) {
		return errFallback
	}
	if end >= s.prepareAt {
		s.prepareAt = math.MaxInt
		s.prepare(s.estimate(int(first)+to-from, end))
	}
	if c.texts {
		for i := from; i < to; i++ {
			if e := &c.evs[i]; e.text > int32(c.strs) { // a string of the chunk's own
				e.text = int32(m.Strs[int(e.text)-1-c.strs]) + 1
			}
		}
	}
	if c.lists {
		for i := from; i < to; i++ {
			e := &c.evs[i]
			switch f := e.frames; {
			case f == noFrames:
			case f&chunkList != 0:
				e.frames = pickle.Value(m.Lists[f&^chunkList])
			case f&chunkRef != 0:
				// As set would have taken the value: a Ticket, or no
				// stack (the decoder leaves a list to set).
				e.frames = noFrames
				if id, ok := pickle.TicketID(m.Refs[f&^chunkRef]); ok && int(id) < len(s.stacks.stacks) {
					e.frames = pickle.Value(id)
				}
			}
		}
	}
	// In runs as long as the room left (the log grows, or spills, between
	// them).
	l := &s.log
	for from < to {
		if len(l.mem) == cap(l.mem) {
			s.reserveFor(end, to-from)
			if l.err != nil {
				return l.err
			}
		}
		k := min(to-from, cap(l.mem)-len(l.mem))
		dst, src := l.mem[len(l.mem):len(l.mem)+k], c.evs[from:from+k]
		l.mem = l.mem[:len(l.mem)+k]
		if k < mergeCopyMin {
			copy(dst, src)
		} else {
			s.copies.Add(1)
			c.copying.Add(1)
			c.async = true
			go func() {
				defer s.copies.Done()
				defer c.copying.Done()
				copy(dst, src)
			}()
		}
		from += k
	}
	return nil
}

// mergeCopyMin is the fewest events Merge copies on another goroutine.
var mergeCopyMin = 1024

// streamEntries is entries for a streamed decode: device_traces must be
// a list of lists of streamed entries, each list the entries created next,
// in order (as every snapshot PyTorch writes is). Anything else returns
// errFallback.
func (c *converter) streamEntries() error {
	doc, st := c.doc, c.stream
	if doc.Kind(c.traces) != pickle.KindList {
		return errFallback
	}
	lists := doc.Slice(c.traces)
	seqs := make([]devSeq, len(lists))
	next := 0
	for dev, l := range lists {
		if doc.Kind(l) != pickle.KindList {
			return errFallback
		}
		// The list's entries, read as runs (no Value made for each).
		first, n, bad := next, 0, false
		if !doc.EntryRuns(l, func(f, k uint32) bool {
			switch {
			case n == 0 && int(f) >= next:
				first = int(f)
			case n == 0 || int(f) != first+n:
				bad = true
				return false
			}
			n += int(k)
			return true
		}) || bad {
			return errFallback
		}
		next = first + n
		seqs[dev] = devSeq{dev: trace.DeviceID(dev), from: first, to: next}
	}
	if err := st.log.finish(); err != nil {
		return err
	}
	c.snap.raw, c.snap.unknown, c.snap.seqs = &st.log, st.unknown, seqs
	c.snap.stacks = &st.stacks
	if c.opt.Progress != nil {
		c.opt.Progress("convert", int64(next), int64(next))
	}
	return nil
}

// badValue is set's error for an entry with a value of the wrong type or
// out of bounds: the decoder, or the whole decode, converts it again (see
// entries), which names the entry.
func (c *conv) badValue(s *streamer) error {
	if s == nil {
		return errChunk
	}
	return errFallback
}
