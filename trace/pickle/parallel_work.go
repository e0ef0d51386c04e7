package pickle

import (
	"bytes"
	"maps"
	"runtime"
)

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
	// About 8 chunks a worker, of 64 KiB to 2 MiB: with larger chunks, a
	// snapshot of a few MB has too few for many workers to share evenly.
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
			// would wait while the workers decoded, then merge their
			// chunks alone.
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
// handler that takes no lists).
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
	for pos < len(data) && opTable[data[pos]].paths&pathChunk != 0 {
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
// ended, or are behind). With more, many workers take longer to all get
// chunks.
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
