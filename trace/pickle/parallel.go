package pickle

import (
	"bytes"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Parallel decoding of streamed entries.
//
// A memory snapshot is almost all trace entries, each a dict of scalars
// made the same way: EMPTY_DICT MEMOIZE MARK, the pairs, SETITEMS, with
// MARK and APPENDS around every thousand of them and a FRAME every 64 KiB.
// When the handler is a ParallelHandler and Decoder.Workers > 1,
// DecodeDoc decodes the first entries itself (see settled), then splits the
// rest of the input into chunks that worker goroutines decode at once,
// each from the first entry that starts in it (found by the bytes the
// entries start with: EMPTY_DICT MEMOIZE MARK and the first key, as the
// entry at the split has them) to the first that starts in the next
// chunk, or to the first thing that is not such an entry. A worker knows
// the memo as it was at the split, but not how many memo entries the
// chunks before its own add: it numbers what it memoizes, its entries and
// its strings from 0 and stops at a reference it cannot resolve. (When
// the handler is a ParallelLists, an entry's frames list is decoded too:
// see there.) An entry the worker cannot decode is left to the decoder,
// and the worker goes on from the next entry of its chunk, as a chunk of
// its own (parChunk.cont).
//
// The decoder goes on through the input as before; when it reaches the
// entry a chunk starts with, in the device list where entries are
// streamed, it takes the chunk's work in one go: the chunk's strings are
// interned, its memo entries appended with their final numbers, its MARK
// and APPENDS replayed on the stack, and its entries handed to
// ParallelHandler.Merge; it then goes on from where the chunk stopped.
// A chunk that started at a false match, or whose start the decoder does
// not reach exactly, is decoded again by the decoder, so the result is the
// sequential decode's in every case: the same Doc, the same entries, the
// same errors at the same offsets.

// ParallelHandler is an EntryHandler whose entries can be decoded on
// worker goroutines (see Decoder.Workers).
type ParallelHandler interface {
	EntryHandler
	// Fork is called once, on the decoding goroutine, before the
	// workers start at input offset off on chunks of about chunkBytes
	// of input. The function it returns is called on worker
	// goroutines, once per chunk, with the chunk's own Doc (its string
	// indexes below NumStrings at the fork are the decoder's, those
	// above are the chunk's own), and returns the handler of the
	// chunk's entries, numbered from 0. A SetEntry error of that
	// handler ends the chunk before the entry; the decoder then decodes
	// the entry itself.
	Fork(off, chunkBytes int) func(doc *Doc) EntryHandler
	// Merge takes, on the decoding goroutine, the entries from to to-1
	// of the chunk handler h as entries first, first+1..., in order (the
	// entries of a chunk come in one or more calls, in order; an entry
	// the chunk could not convert comes between them through NewEntry
	// and SetEntry); end is the input offset after the chunk; m maps
	// what the chunk numbered on its own to the decoder's.
	Merge(h EntryHandler, from, to int, first uint32, end int, m *ChunkMap) error
	// Release is called, on the decoding goroutine, once the decoder is
	// done with the chunk handler h (taken or not), so that its memory
	// may serve another chunk.
	Release(h EntryHandler)
}

const (
	// parLaunch is the fewest entries the decoder decodes itself before
	// the workers start (the memo then holds the keys and actions), and
	// parLaunchMax the most (see settled).
	parLaunch    = 1024
	parLaunchMax = 4096
	// parMinBytes is the least input left at the launch for workers to
	// be worth starting.
	parMinBytes = 1 << 20
	// opsMark and opsAppends are a chunk's MARK and APPENDS; a smaller
	// op is a run of that many entries pushed.
	opsMark    = ^uint32(0)
	opsAppends = ^uint32(1)
	// missedValue is what a worker's fastEntry gives for a memo entry it
	// cannot fetch (the entry is then left to the decoder).
	missedValue = inlineBit | strBit | (maxInlineStr - 1)
)

// deferral is an entry a worker decoded but could not convert: its
// number in the chunk, its offset and the chunk's memo length before it.
type deferral struct {
	k, off, m0 int
	lists      int    // the chunk's lists of fetched values before it
	refs       int    // the chunk's fetches its handler took (Doc.Ref) before it
	order      int    // and both in the order met (Doc.order)
	ops        int    // len(ops) before it, and the entries of ops' last run then
	run        uint32 //   (when that run goes on with this entry)
	misses     []uint64
	check      bool // only its lists' items are to check: the chunk's conversion of it stands
}

// missKey marks, in deferral.misses, a memo index fetched as a key, and
// missItem one fetched as an item of a list of fetched values (see
// pendingRef; the entries with those only are not decoded again).
const (
	missKey  = 1 << 63
	missItem = 1 << 62
)

// parChunk is one chunk's work.
type parChunk struct {
	lo, hi int // the chunk: its entries start in [lo, hi)
	start  int // where its worker started; -1: no entry starts from lo on
	end    int // where it stopped
	n      int
	lists  int      // its lists of fetched values (Doc.RefList) up to end
	refs   int      // its fetches its handler took (Doc.Ref) up to end
	order  int      // and both in the order met (Doc.order)
	memo   []Value  // what it memoized: its entries (from 0), its doc's strings and lists
	ops    []uint32 // MARK, APPENDS and runs of entries
	defers []deferral
	doc    *Doc
	h      EntryHandler
	done   chan struct{} // closed when the chunk and its continuations are decoded
	// cont is the rest of the chunk after an entry its worker left to the
	// decoder, from the next entry: decoded as a chunk of its own, taken
	// after it.
	cont *parChunk
}

// parallel is the decoder's parallel state; on a worker's Decoder,
// worker is set and memo is the memo at the launch (read through it).
type parallel struct {
	worker  bool
	memo    []Value // memo entries from base, at the launch (a copy)
	old     []memoBlock
	base    uint64
	shift   uint8
	strs    []string          // the decoder's strings at the launch
	intern  map[string]uint32 // and those of them interned, up to launchInterned (read only)
	sig     []byte            // the bytes every entry starts with
	fork    func(*Doc) EntryHandler
	release func(EntryHandler)
	lists   bool // the handler is a ParallelLists (see refList)

	// A worker's.
	defers     bool              // fastEntry gives missedValue for a memo index above memo
	misses     []uint64          // the memo indexes of its missedValues (missKey set for a key)
	extra      map[uint64]Value  // memo entries past memo that it knows (see known)
	listIDs    map[string]uint32 // its chunk's lists of fetched values, by their items' bytes
	refBuf     []uint64          // refList's scratch
	itemMisses []uint64          // the memo indexes memoized after the launch in the entry's new lists (missItem set)
	made       bool              // fastEntry made a list of fetched values,
	madeV      Value             //   this one,
	madeSlot   int               //   memoized there
	room       int               // the values its chunk's lists are likely to need

	// The decoder's scratch in take.
	listBuf []uint32    // the ids of a chunk's lists
	refVals []Value     // the values of a chunk's fetches
	fetched [][2]uint32 // its fetches of lists, and their ids
	itemBuf []Value     // the items of a list

	chunks []*parChunk
	next   int // the next chunk the decoder takes or skips
	hop    int // where chunk next starts (-1: none)
	tokens chan struct{}
	memos  chan []Value // chunks' memo slices, taken and idle
	ramp   int          // tokens given so far, until 2w
	quit   chan struct{}
	claim  atomic.Int64
	// waiting is the chunk the decoder waits for (setHop): its worker
	// yields its core to the decoder when done (see work).
	waiting atomic.Int64
	wg      sync.WaitGroup
	// known holds strings memoized after the launch, by memo index, for
	// the workers of chunks not yet started: a chunk's first memo entry
	// of each of its strings, published when the decoder takes it (an
	// action the trace has not had before the launch is fetched from the
	// memo by every later entry).
	known     atomic.Pointer[map[uint64]string]
	published map[string]bool // the strings in known
	stats     ParallelStats
}

// ChunkMap maps what a chunk decoded on a worker numbered on its own to
// the decoder's, for ParallelHandler.Merge.
type ChunkMap struct {
	// Strs maps the chunk's string indexes from the fork's NumStrings on
	// to the decoder's.
	Strs []uint32
	// Lists maps the chunk's lists of fetched values (Doc.RefList) to
	// the ids ParallelLists.TakeList gave them, and Refs its fetches
	// (Doc.Ref) to the values fetched (the decoder's).
	Lists []uint32
	Refs  []Value
}

// ParallelLists is a ParallelHandler that takes the lists its entries
// make of values fetched from the memo (see Decoder.Take): a snapshot's
// frames lists, of frame dicts memoized once and fetched by every later
// entry with the same frame. A worker then decodes an entry with such a
// list, when the values are in the memo as it was at the launch: the
// chunk's Doc holds the list as a number (Doc.RefList), and the decoder,
// when it takes the chunk, hands each list's values to TakeList, puts the
// Ticket of its id where the chunk memoized the list, and gives Merge the
// ids. Other lists are left to the decoder. A value the worker fetches
// from a memo index it does not know (a free_completed fetches its
// free_requested's frames list) is given to the handler as a number
// (Doc.Ref), which it may take (the value then comes with Merge) or not
// (ErrDeferEntry).
type ParallelLists interface {
	ParallelHandler
	// TakeList is called on the decoding goroutine with the items of a
	// list a chunk made (Values of the decoder's Doc, valid during the
	// call), in the order the chunk made them, as the decoder reaches the
	// chunk; it returns the id under which the handler keeps what it
	// needs of the list, as Decoder.Take's id (below 2^28).
	TakeList(items []Value) uint32
}

// ParallelReady is a ParallelHandler that says when the workers may
// start. A worker cannot resolve a string first memoized after the
// launch (an action first met then) until the decoder has taken the
// chunk that memoized it: the chunks started before that leave the
// entries that fetch it to the decoder, which decodes them again. The
// workers therefore start one chunk at a time (three more for each the
// decoder takes), unless the handler is ready: then they all start at
// once.
type ParallelReady interface {
	ParallelHandler
	// ReadyForWorkers is called, on the decoding goroutine, at the
	// creation of each streamed entry from the launch's fewest entries
	// on until the workers start; true when the entries so far have
	// shown the strings most later entries fetch.
	ReadyForWorkers() bool
}

// ParallelStats says how much of a decode the workers did.
type ParallelStats struct {
	Workers int   // workers started (0: none)
	Chunks  int   // chunks the decoder took from them
	Skipped int   // chunks decoded but not taken (the decoder decoded them)
	Entries int64 // entries in the chunks taken
	Redone  int64 // entries of those that the decoder decoded again
	Lists   int64 // lists of those handed to ParallelLists.TakeList
	Refs    int64 // fetches their handlers took unresolved (Doc.Ref)
}

// ParallelStats returns, after DecodeDoc, how much the workers did.
func (d *Decoder) ParallelStats() ParallelStats { return d.parStats }

// ParallelTuning overrides how the workers share a decode (tests; the
// defaults suit snapshots of every size).
type ParallelTuning struct {
	After      uint32 // entries the decoder decodes before the workers start
	MinBytes   int    // input left then for the workers to start
	ChunkBytes int    // bytes of input a chunk spans
}

// settled reports, at the creation of a streamed entry, whether the
// workers may start: with a tuning, once its After entries are decoded;
// by default, after parLaunch entries, once a handler that is a
// ParallelReady is ready, or after parLaunchMax entries.
func (d *Decoder) settled() bool {
	if d.Tuning != nil {
		return d.nEntries >= d.Tuning.After
	}
	if d.nEntries < parLaunch {
		return false
	}
	r, ok := d.entries.(ParallelReady)
	if ok && r.ReadyForWorkers() {
		d.allAtOnce = true
		return true
	}
	return !ok || d.nEntries >= parLaunchMax
}

// launch starts the workers on data[pos:], pos being the start of the
// entry about to be created (an EMPTY_DICT in a streamed device list).
func (d *Decoder) launch(pos int, memo []Value) {
	data := d.data
	ph, ok := d.entries.(ParallelHandler)
	minBytes := parMinBytes
	if d.Tuning != nil {
		minBytes = d.Tuning.MinBytes
	}
	if !ok || d.sparse != nil || len(data)-pos < minBytes {
		return
	}
	// The signature: EMPTY_DICT MEMOIZE MARK and the first key, fetched
	// from the memo.
	var klen int
	switch {
	case pos+5 > len(data) || data[pos+1] != opMemoize || data[pos+2] != opMark:
		return
	case data[pos+3] == opBinGet:
		klen = 2
	case data[pos+3] == opLongBinGet:
		klen = 5
	default:
		return
	}
	if pos+3+klen > len(data) {
		return
	}
	w := d.Workers
	rest := len(data) - pos
	// About 8 chunks a worker, of 64 KiB to 2 MiB. (From 256 KiB, on the
	// H200 host's 16 cores: the snapshots of 4-9 MB have 17-34 chunks,
	// which the workers shared unevenly; 64 KiB took their imports 3-8%
	// less time, medians of 5 runs of 20: expandable_empty 8.1 -> 7.6
	// ms, baseline_s1 9.9 -> 9.5, train_s1 13.5 -> 13.1.)
	size := min(max(rest/(8*w), 64<<10), 2<<20)
	if d.Tuning != nil {
		size = max(d.Tuning.ChunkBytes, 1)
	}
	_, lists := ph.(ParallelLists)
	p := &parallel{
		lists:     lists,
		memo:      append([]Value(nil), memo...),
		old:       d.memoOld[:len(d.memoOld):len(d.memoOld)],
		base:      d.memoBase,
		shift:     d.memoShift,
		strs:      d.doc.strs[:len(d.doc.strs):len(d.doc.strs)],
		intern:    launchIntern(d.doc),
		sig:       append([]byte(nil), data[pos:pos+3+klen]...),
		fork:      ph.Fork(pos, size),
		release:   ph.Release,
		tokens:    make(chan struct{}, 4*w),
		memos:     make(chan []Value, 8*w),
		published: map[string]bool{},
		quit:      make(chan struct{}),
	}
	// The first chunks are smaller, from an eighth of the size up: the
	// workers ramp up a chunk at a time (below), and the decoder waits for
	// the first one.
	sz := min(max(size/8, 32<<10), size)
	if d.Tuning != nil {
		sz = max(size/8, 1)
	}
	for lo := pos; lo < len(data); lo += sz {
		if lo > pos {
			sz = min(2*sz, size)
		}
		p.chunks = append(p.chunks, &parChunk{lo: lo, hi: min(lo+sz, len(data)), done: make(chan struct{})})
	}
	// 2w chunks in flight when the handler is ready (see ParallelReady);
	// else one chunk at first, then three more for each the decoder
	// takes, up to 2w: a chunk that starts before the decoder has taken
	// the one before does not know the strings memoized since the launch
	// (the actions not met before: their entries are left to the
	// decoder).
	t0 := 1
	if d.allAtOnce {
		t0 = 2 * w
	}
	for range t0 {
		p.tokens <- struct{}{}
	}
	p.ramp = t0
	p.wg.Add(w)
	for range w {
		go p.work(d)
	}
	d.par = p
	p.stats.Workers = w
	p.setHop()
}

// launchInterned is the most interned strings the workers start with.
const launchInterned = 1024

// launchIntern returns a copy of doc's intern map for the workers, or nil
// when it holds more than launchInterned strings.
func launchIntern(doc *Doc) map[string]uint32 {
	if len(doc.intern) > launchInterned {
		return nil
	}
	return maps.Clone(doc.intern)
}

// work decodes chunks, in order, as long as tokens allow (a token is
// given back for each chunk the decoder takes: so the chunks' results
// waiting for it stay few).
func (p *parallel) work(d *Decoder) {
	defer p.wg.Done()
	for {
		select {
		case <-p.tokens:
		case <-p.quit:
			return
		}
		c := int(p.claim.Add(1) - 1)
		if c >= len(p.chunks) {
			return
		}
		ch := p.chunks[c]
		select {
		case <-p.quit:
			ch.start = -1
		default:
			p.decode(d, ch, c == 0)
		}
		close(ch.done)
		if p.waiting.Load() == int64(c) {
			// The decoder was readied onto this core, where it would wait
			// until this worker blocked: with a worker on every core, it
			// waited 2 ms of baseline_s1's import on the H200 host while
			// the workers decoded, then merged their chunks alone.
			runtime.Gosched()
		}
	}
}

// decode decodes chunk ch (see parallel). The first chunk starts at an
// entry the decoder verified.
func (p *parallel) decode(d *Decoder, ch *parChunk, first bool) {
	data := d.data
	start := ch.lo
	if !first {
		// Only within the chunk: an input whose entries stop would
		// otherwise be scanned to its end for every chunk.
		i := bytes.Index(data[ch.lo:min(len(data), ch.hi+len(p.sig)-1)], p.sig)
		if i < 0 {
			ch.start = -1 // no entry starts in the chunk
			return
		}
		start += i
	}
	// An entry the worker cannot decode ends the chunk's part; the worker
	// goes on from the next entry in a continuation (see decodeAt), up to
	// maxConts of them.
	for c, k := ch, 0; c != nil; c, k = c.cont, k+1 {
		select {
		case <-p.quit:
			c.start = -1
			return
		default:
		}
		if c != ch {
			start = c.lo
		}
		p.decodeAt(d, c, start, k < maxConts)
	}
}

// maxConts is the most continuations of a chunk. Each costs a chunk's
// start (a Doc, its copy of the interned strings, a handler), which a
// snapshot whose entries the workers leave to the decoder one in a few
// would pay over and over (a snapshot with call stacks decoded for a
// handler that takes no lists: without a bound, this package's tests took
// 141 s under the race detector on the VM, against 52 s).
const maxConts = 16

// decodeAt decodes chunk ch from start, the start of an entry; when it
// stops at an entry it cannot decode (one the decoder must decode: a list
// holding a frame dict first met there, an action the handler does not
// know) and more is set, it sets ch.cont to the rest of the chunk from
// the next entry.
func (p *parallel) decodeAt(d *Decoder, ch *parChunk, start int, more bool) {
	data := d.data
	ch.start = start
	// The strings interned at the launch keep their indexes in the chunk
	// (its values of them need no mapping in take): every entry of a
	// PyTorch snapshot memoizes a new "N/A".
	doc := &Doc{strs: p.strs, intern: make(map[string]uint32, len(p.intern))}
	maps.Copy(doc.intern, p.intern)
	w := &Decoder{
		data: data, doc: doc, par: &parallel{worker: true, defers: true, memo: p.memo, lists: p.lists},
		memoBase: p.base, memoOld: p.old, memoShift: p.shift,
		lastEntry: noValue, lastPos: -1, outer: noValue, cur: noValue,
	}
	if p.lists {
		w.par.listIDs = make(map[string]uint32, 64)
		w.par.room = (ch.hi - ch.lo) / 64
	}
	h := p.fork(doc)
	w.entries = h
	if k := p.known.Load(); k != nil {
		w.par.extra = make(map[uint64]Value, len(*k))
		for idx, str := range *k {
			if v, ok := strValue(w.intern(str)); ok {
				w.par.extra[idx] = v
			}
		}
	}
	var memo []Value
	select {
	case memo = <-p.memos:
	default:
	}
	memo = memo[:0]
	var kinds []Kind
	var xs []uint64
	pos, n := start, uint32(0)
	failed := false
loop:
	for pos < len(data) {
		switch data[pos] {
		case opFrame:
			if pos+9 > len(data) {
				break loop
			}
			pos += 9
		case opMark:
			ch.ops = append(ch.ops, opsMark)
			pos++
		case opAppends:
			ch.ops = append(ch.ops, opsAppends)
			pos++
		case opEmptyDict:
			if pos >= ch.hi || pos+3 > len(data) || data[pos+1] != opMemoize || data[pos+2] != opMark || n >= maxEntries-maxTickets {
				break loop
			}
			m0 := len(memo)
			opsLen, run := len(ch.ops), uint32(0)
			if opsLen > 0 && ch.ops[opsLen-1] < opsAppends {
				run = ch.ops[opsLen-1]
			}
			h.NewEntry(n, pos)
			l0, r0, o0 := len(doc.refLists), len(doc.pending), len(doc.order)
			w.par.made = false
			end, ok, err := w.fastEntry(pos+3, tagMask|Value(n), &memo, &kinds, &xs)
			if err != nil || !ok || len(w.par.misses) > 0 && w.par.made {
				failed = true
				// (An entry left to the decoder is decoded again with
				// fastEntry, which makes no list.)
				memo = memo[:m0]
				doc.refLists, doc.pending, doc.order = doc.refLists[:l0], doc.pending[:r0], doc.order[:o0]
				w.par.misses, w.par.itemMisses = w.par.misses[:0], w.par.itemMisses[:0]
				break loop
			}
			if len(w.par.misses) > 0 || len(w.par.itemMisses) > 0 {
				// (The fetches the handler took are checked apart: see
				// refsFetchable.)
				df := deferral{k: int(n), off: pos, m0: m0, lists: l0, refs: r0, order: o0, ops: opsLen, run: run, check: len(w.par.misses) == 0}
				df.misses = append(append(df.misses, w.par.misses...), w.par.itemMisses...)
				ch.defers = append(ch.defers, df)
				w.par.misses, w.par.itemMisses = w.par.misses[:0], w.par.itemMisses[:0]
			}
			if k := len(ch.ops); k > 0 && ch.ops[k-1] < opsAppends {
				ch.ops[k-1]++
			} else {
				ch.ops = append(ch.ops, 1)
			}
			n++
			pos = end
		default:
			break loop
		}
	}
	ch.end, ch.n, ch.memo, ch.doc, ch.h = pos, int(n), memo, doc, h
	ch.lists, ch.refs, ch.order = len(doc.refLists), len(doc.pending), len(doc.order)
	if failed && more && pos+1 < ch.hi {
		// The next entry within the chunk (a false match is no harm: the
		// decoder takes a part only where it creates an entry).
		if i := bytes.Index(data[pos+1:min(len(data), ch.hi+len(p.sig)-1)], p.sig); i >= 0 {
			ch.cont = &parChunk{lo: pos + 1 + i, hi: ch.hi, done: ch.done}
		}
	}
}

// setHop waits for the next chunk in which an entry starts and sets hop to
// where it starts (-1: none is left).
func (p *parallel) setHop() {
	p.hop = -1
	for p.next < len(p.chunks) {
		ch := p.chunks[p.next]
		p.waiting.Store(int64(p.next))
		<-ch.done
		if ch.start >= 0 {
			p.hop = ch.start
			return
		}
		p.drop() // no entry starts in it: the next chunk's start is the hop
	}
}

// drop is done with the next chunk: its results go, and the workers get
// a token for another.
func (p *parallel) drop() {
	p.chunks[p.next] = nil
	p.next++
	p.give()
}

// skip passes over the next chunk, whose work the decoder does not take.
func (p *parallel) skip() {
	ch := p.chunks[p.next]
	if ch.start >= 0 {
		p.release(ch.h)
		p.stats.Skipped++
	}
	p.onward(ch)
}

// onward is done with chunk ch, the next: its continuation is the next,
// if any.
func (p *parallel) onward(ch *parChunk) {
	if ch.cont != nil {
		p.chunks[p.next] = ch.cont
		p.hop = ch.cont.start
		return
	}
	p.drop()
	p.setHop()
}

// publish adds pub to the strings known to the workers: each string's
// first memo entry in the chunks taken (the one the pickle fetches again
// for an object it has memoized), up to 4,096 strings.
func (p *parallel) publish(pub map[uint64]string) {
	if len(pub) == 0 {
		return
	}
	old := p.known.Load()
	n := len(pub)
	if old != nil {
		n += len(*old)
	}
	k := make(map[uint64]string, n)
	if old != nil {
		for idx, s := range *old {
			k[idx] = s
		}
	}
	for idx, s := range pub {
		k[idx] = s
	}
	p.known.Store(&k)
}

// give gives the workers a token for the chunk the decoder took, and two
// more while ramping up (none when enough are waiting: the workers have
// ended, or are behind). With one more, the H200 host's 16 workers took
// longer to all get chunks: 3-9% of an import of 4-9 MB.
func (p *parallel) give() {
	n := 1
	if p.ramp < cap(p.tokens)/2 {
		n, p.ramp = 3, p.ramp+2
	}
	for range n {
		select {
		case p.tokens <- struct{}{}:
		default:
		}
	}
}

// stopPar stops the workers (DecodeDoc's end, or a store into the memo
// they read) and waits for them: nothing reads the input after it.
func (d *Decoder) stopPar() {
	p := d.par
	if p == nil || p.worker {
		return
	}
	close(p.quit)
	p.wg.Wait()
	d.parStats = p.stats
	d.par = nil
}

// take applies the chunk that starts at pos, the start of an entry the
// decoder is about to create in the streamed list cur; it returns the
// offset reached and the stack and memo after it (pos itself when the
// chunk cannot be taken: the decoder then decodes its entries).
func (d *Decoder) take(pos int, stack, memo []Value) (int, []Value, []Value, error) {
	p := d.par
	// One chunk a call: DecodeDoc's periodic work (the memo's compaction,
	// the input's release, progress) runs between chunks.
	if p.hop == pos && inCtx(stack, d.marks, d.cur) {
		ch := p.chunks[p.next]
		if !d.replayable(ch, stack) || uint64(d.nEntries)+uint64(ch.n) >= maxEntries-maxTickets {
			p.skip()
			return pos, stack, memo, nil
		}
		if !d.refsFetchable(ch, memo) {
			p.skip()
			return pos, stack, memo, nil
		}
		d.fetchable(ch, memo)
		// The chunk's lists, and the lists of the decoder's it fetched, in
		// the order it met them: the handler interns them as the
		// sequential decode would have, entry by entry.
		at := func(idx uint64) Value { // memoized before the chunk (fetchable), or by it once the memo is filled
			if idx < d.memoBase {
				return d.memoOldAt(idx)
			}
			return memo[idx-d.memoBase]
		}
		hl, _ := d.entries.(ParallelLists) // (a chunk has lists only then)
		lists, fetched := p.listBuf[:0], p.fetched[:0]
		for _, o := range ch.doc.order[:ch.order] {
			var id uint32
			if o&orderRef == 0 {
				x := ch.doc.refLists[o]
				start := uint32(x >> 32)
				items := p.itemBuf[:0]
				for _, r := range ch.doc.refs[start : start+uint32(x)&lowMask] {
					v := Value(r)
					if r&pendingRef != 0 {
						v = at(r &^ pendingRef)
					}
					items = append(items, v)
				}
				p.itemBuf = items
				id = d.takeList(hl, items)
				lists = append(lists, id)
			} else {
				// A list of the decoder's, fetched: taken as set would
				// take it (its Ticket goes to Merge).
				idx := ch.doc.pending[o&^orderRef] & lowIdx
				if idx >= d.memoBase+uint64(len(memo)) {
					continue // the chunk's own
				}
				v := at(idx)
				if v >= inlineBit || d.doc.kinds[v] != KindList {
					continue
				}
				id = d.takeList(hl, d.doc.Slice(v))
				fetched = append(fetched, [2]uint32{o &^ orderRef, id})
			}
			if id >= maxTickets {
				return pos, stack, memo, ErrNotStreamable
			}
		}
		p.listBuf, p.fetched = lists, fetched
		p.stats.Lists += int64(len(lists) + len(fetched))
		doc := d.doc
		n0 := len(p.strs)
		strs := make([]uint32, len(ch.doc.strs)-n0)
		for i, s := range ch.doc.strs[n0:] {
			strs[i] = d.intern(s)
		}
		if len(memo)+len(ch.memo) > cap(memo) {
			memo = d.growMemo(memo, ch, pos)
		}
		first := d.nEntries
		base := len(memo)
		var pub map[uint64]string // strings new to the workers, at their first memo entry
		seen := make([]bool, len(strs))
		memo = memo[:base+len(ch.memo)]
		dst := memo[base:]
		for i, v := range ch.memo {
			switch {
			case v&tagMask == tagMask:
				v += Value(first)
			case len(strs) == 0: // no string of the chunk's own
			case v&tagMask == inlineBit|strBit && int(v&^(inlineBit|strBit)) >= n0:
				id := int(v&^(inlineBit|strBit)) - n0
				if !seen[id] {
					seen[id] = true
					if str := ch.doc.strs[n0+id]; !p.published[str] && len(p.published) < 4096 {
						if pub == nil {
							pub = map[uint64]string{}
						}
						p.published[str] = true
						pub[d.memoBase+uint64(base+i)] = str
					}
				}
				sv, ok := strValue(strs[id])
				if !ok {
					sv = Value(len(doc.kinds))
					doc.kinds = append(doc.kinds, KindString)
					doc.xs = append(doc.xs, uint64(strs[id]))
					d.keep = int(sv) + 1
				}
				v = sv
			}
			dst[i] = v
		}
		for _, j := range ch.doc.listSlots { // the lists of fetched values
			if int(j) < len(ch.memo) {
				dst[j] = Ticket(lists[ch.doc.xs[ch.memo[j]]])
			}
		}
		p.publish(pub)
		// The values of the fetches the handler took, the memo filled.
		refs := p.refVals[:0]
		for _, r := range ch.doc.pending[:ch.refs] {
			refs = append(refs, at(r&lowIdx))
		}
		for _, f := range fetched {
			refs[f[0]] = Ticket(f[1])
		}
		p.refVals = refs
		p.stats.Refs += int64(len(refs))
		cm := &ChunkMap{Strs: strs, Lists: lists, Refs: refs}
		e := tagMask | Value(first)
		for _, op := range ch.ops {
			switch op {
			case opsMark:
				d.marks = append(d.marks, len(stack))
			case opsAppends:
				m := d.marks[len(d.marks)-1]
				d.marks = d.marks[:len(d.marks)-1]
				d.appendItems(stack[m-1], stack[m:])
				stack = stack[:m]
			default:
				for range op {
					stack = append(stack, e)
					e++
				}
			}
		}
		h := d.entries.(ParallelHandler)
		from := 0
		for _, df := range ch.defers {
			if df.check {
				continue
			}
			if err := h.Merge(ch.h, from, df.k, first+uint32(from), ch.end, cm); err != nil {
				return pos, stack, memo, err
			}
			if err := d.redo(first+uint32(df.k), df.off, memo[:base+df.m0+1]); err != nil {
				return pos, stack, memo, err
			}
			p.stats.Redone++
			from = df.k + 1
		}
		if err := h.Merge(ch.h, from, ch.n, first+uint32(from), ch.end, cm); err != nil {
			return pos, stack, memo, err
		}
		p.release(ch.h)
		select {
		case p.memos <- ch.memo:
		default:
		}
		d.nEntries += uint32(ch.n)
		d.lastEntry, d.lastPos = noValue, -1
		p.stats.Chunks++
		p.stats.Entries += int64(ch.n)
		pos = ch.end
		p.onward(ch)
	}
	return pos, stack, memo, nil
}

// takeList returns the id h.TakeList gives the list of items, asked once
// for equal lists while the dicts they may hold are unchanged: every chunk
// makes its own lists, most of them the stacks of the chunks before (a
// snapshot has a few hundred), and the handler reads every frame dict of
// each (genpickle 100K -frames 8: 30,754 lists in 124 chunks, 0.5 us
// each, on the decoding goroutine).
func (d *Decoder) takeList(h ParallelLists, items []Value) uint32 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(items))), len(items)*4)
	if id, ok := d.taken[string(b)]; ok {
		return id
	}
	id := h.TakeList(items)
	if d.taken == nil {
		d.taken = make(map[string]uint32, 1024)
	}
	if len(d.taken) < maxTaken {
		d.taken[string(b)] = id
	}
	d.takenBelow = len(d.doc.kinds)
	return id
}

// ListID returns the id h.TakeList gives the items of the list v of the
// Doc being decoded, asked once for lists of equal items while the dicts
// they may hold are unchanged, as for the lists of the workers' chunks:
// for a handler that takes the lists the decoder makes itself (a
// snapshot's first entries, and every entry without workers), reading
// each list's frame dicts was four tenths of a sequential decode of a
// snapshot with call stacks.
func (d *Decoder) ListID(h ParallelLists, v Value) uint32 {
	return d.takeList(h, d.doc.Slice(v))
}

// maxTaken bounds takeList's memory.
const maxTaken = 1 << 16

// redo decodes entry n again, at off, as the decoder would have: the
// handler gets NewEntry and SetEntry, with the memo as it was then (look:
// the memo from memoBase up to the entry's dict). What it memoizes was
// taken with the chunk, so it goes to a scratch memo here. An entry the
// fast path does not take sends the snapshot to a decode without
// streaming (ErrNotStreamable), which gives the precise error if any.
func (d *Decoder) redo(n uint32, off int, look []Value) error {
	doc := d.doc
	if d.redoer == nil {
		d.redoer = &redoer{}
	}
	rr := d.redoer
	rr.par = parallel{worker: true, memo: look}
	rr.dec = Decoder{
		data: d.data, doc: doc, entries: d.entries,
		memoBase: d.memoBase, memoOld: d.memoOld, memoShift: d.memoShift,
		par:  &rr.par,
		keep: len(doc.kinds),
		kv:   rr.dec.kv[:0],
	}
	r := &rr.dec
	d.entries.NewEntry(n, off)
	rr.scratch = rr.scratch[:0]
	kinds, xs := doc.kinds, doc.xs
	_, ok, err := r.fastEntry(off+3, tagMask|Value(n), &rr.scratch, &kinds, &xs)
	doc.kinds, doc.xs = kinds[:r.keep], xs[:r.keep]
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotStreamable
	}
	return nil
}

// growMemo returns memo with room for what the chunks from ch on, ch
// starting at pos, memoize up to the memo's next compaction or the end
// of the input, at ch's rate (with a tenth more): grown by appending, a
// chunk at a time, the memo was copied over and over, a third of the
// decoder goroutine's work on baseline_s1.
func (d *Decoder) growMemo(memo []Value, ch *parChunk, pos int) []Value {
	n := len(ch.memo)
	if span := ch.end - pos; span > 0 {
		rest := min(len(d.data)-pos, d.checkEvery)
		n = max(n, int(float64(n)/float64(span)*float64(rest)*1.1))
	}
	return withRoom(memo, len(memo)+n)
}

// redoer is what redo reuses from one entry to the next (made anew for
// each, they were most of redo's allocations; baseline_s1 has about
// 2,400 entries decoded again).
type redoer struct {
	dec     Decoder
	par     parallel
	scratch []Value
}

// refsFetchable reports whether the fetches of chunk ch that its handler
// took (Doc.Ref) were memoized before their entries, with the memo as it
// was at the chunk: memo, the decoder's from memoBase, then the chunk's.
// (A pickle that fetches a memo index not yet memoized fails there; the
// decoder then decodes the chunk itself. Checked apart from the entries
// fetchable checks, they need no record each: a third of a snapshot's
// entries, with call stacks, have one.)
func (d *Decoder) refsFetchable(ch *parChunk, memo []Value) bool {
	abs := d.memoBase + uint64(len(memo)) // the chunk's first memo index
	for _, r := range ch.doc.pending {
		switch idx, m0 := r&lowIdx, r>>32; {
		case idx < d.memoBase:
			if d.memoOldAt(idx) == memoHole {
				return false
			}
		case idx < abs:
			if memo[idx-d.memoBase] == memoHole {
				return false
			}
		case idx-abs >= m0:
			return false
		}
	}
	return true
}

// fetchable ends chunk ch before its first left entry (see redo) whose
// memo fetches would not give what fastEntry takes (a string key; a
// string or small int value), with the memo as it was at that entry:
// memo, the decoder's from memoBase, then the chunk's. The decoder then
// decodes that entry and what follows itself.
func (d *Decoder) fetchable(ch *parChunk, memo []Value) {
	abs := d.memoBase + uint64(len(memo)) // the chunk's first memo index
	for i, df := range ch.defers {
		ok := true
		for _, m := range df.misses {
			idx := m &^ (missKey | missItem)
			var v Value
			switch {
			case idx < d.memoBase:
				v = d.memoOldAt(idx)
				ok = ok && v != memoHole
			case idx < abs: // in memo (d.memo is DecodeDoc's as of its last store)
				v = memo[idx-d.memoBase]
				ok = ok && v != memoHole
			case idx-abs <= uint64(df.m0): // the chunk's, up to the entry's dict
				v = ch.memo[idx-abs]
				if j := idx - abs; j == uint64(df.m0) {
					v = tagMask // the entry itself
				} else if v < inlineBit {
					v = Ticket(0) // a list of fetched values: its ticket
				}
			default:
				ok = false
			}
			switch {
			case m&missItem != 0:
				// A list's item: a container memoized before the chunk.
				ok = ok && idx < abs && v < inlineBit
			case m&missKey != 0:
				ok = ok && v&tagMask == inlineBit|strBit
			default:
				ok = ok && fetchedScalar(v)
			}
		}
		if ok {
			continue
		}
		// Cut the chunk before entry df.k.
		ch.n, ch.end, ch.memo, ch.defers = df.k, df.off, ch.memo[:df.m0], ch.defers[:i]
		ch.lists, ch.refs, ch.order = df.lists, df.refs, df.order
		ch.ops = ch.ops[:df.ops]
		if df.run > 0 {
			ch.ops[df.ops-1] = df.run
		}
		return
	}
}

// replayable reports whether ch's MARK and APPENDS apply to the stack as
// the general path would apply them, streaming every entry the chunk
// pushed: each run of entries is pushed with a mark on top whose value
// below is the streamed list cur, and each APPENDS has such a mark.
// (Stack positions from low up hold what the chunk pushed.)
func (d *Decoder) replayable(ch *parChunk, stack []Value) bool {
	if ch.start < 0 {
		return false
	}
	marks := len(d.marks)
	var own []int // marks the chunk set: the stack height then
	height, low := len(stack), len(stack)
	top := func() int { // the top mark's height, or -1
		switch {
		case len(own) > 0:
			return own[len(own)-1]
		case marks > 0:
			return d.marks[marks-1]
		}
		return -1
	}
	for _, op := range ch.ops {
		if op == opsMark {
			own = append(own, height)
			continue
		}
		m := top()
		if m < 1 || m-1 >= low || stack[m-1] != d.cur {
			return false
		}
		if op == opsAppends {
			if len(own) > 0 {
				own = own[:len(own)-1]
			} else {
				marks--
			}
			height, low = m, min(low, m)
			continue
		}
		height += int(op)
	}
	return true
}

// intern returns the index of string s, adding it when new.
func (d *Decoder) intern(s string) uint32 {
	doc := d.doc
	if len(s) <= internMaxLen {
		if i, ok := doc.intern[s]; ok {
			return i
		}
	}
	i := uint32(len(doc.strs))
	doc.strs = append(doc.strs, s)
	if len(s) <= internMaxLen && len(doc.intern) < internMaxEntries {
		doc.intern[s] = i
	}
	return i
}
