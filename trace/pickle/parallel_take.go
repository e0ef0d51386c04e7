package pickle

import "unsafe"

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
		memo = d.fillMemo(ch, memo, strs, lists, n0)
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
// each, on the decoding goroutine.
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
// each list's frame dicts again would be a large share of decoding a
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
// chunk at a time, the memo would be copied over and over on the
// decoder's goroutine.
func (d *Decoder) growMemo(memo []Value, ch *parChunk, pos int) []Value {
	n := len(ch.memo)
	if span := ch.end - pos; span > 0 {
		rest := min(len(d.data)-pos, d.checkEvery)
		n = max(n, int(float64(n)/float64(span)*float64(rest)*1.1))
	}
	return withRoom(memo, len(memo)+n)
}

// redoer is what redo reuses from one entry to the next (made anew for
// each, they would be most of redo's allocations: a snapshot may have
// thousands of entries decoded again).
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

// fillMemo appends chunk ch's memo to memo, mapped to the decoder's
// values: its entries numbered from d.nEntries, its own strings (from n0)
// to their interned indexes strs, its lists of fetched values to the
// Tickets of lists; the strings new to the workers are published.
func (d *Decoder) fillMemo(ch *parChunk, memo []Value, strs, lists []uint32, n0 int) []Value {
	p, doc := d.par, d.doc
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
	return memo
}
