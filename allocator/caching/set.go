package caching

import (
	"math/bits"
	"sort"
)

// entry is one free block in a freeSet, ordered by (size, addr).
type entry struct {
	size, addr uint64
	id         int32
}

func (e entry) less(size, addr uint64) bool {
	return e.size < size || (e.size == size && e.addr < addr)
}

// freeSet is a sorted set of free blocks of one (pool, stream), ordered by
// (size, addr). Its entries are kept in size-class bins, each sorted by
// (size, addr), with a bitmap of the bins that hold entries: every entry
// of a bin is below every entry of the bins after it, so that a search
// looks into one bin (a few entries, most often none or one) and then,
// through the bitmap, at the first entry of the next nonempty bin.
type freeSet struct {
	bins  [][]entry // bins[b]: the entries of bin b, in order
	words []uint64  // bit b%64 of words[b/64]: bins[b] is not empty
	top   uint64    // bit w: words[w] is not zero
	n     int
}

// binOf returns the bin of a block size: 64 bins per power of two of
// size/512 + 64, so one bin per 512 bytes below 32 KiB (sizes below 512
// share bin 0), computed without a branch. It never decreases as the
// size grows.
func binOf(size uint64) int {
	y := size>>9 + 64
	k := bits.Len64(y) - 1 // 6 or more
	return (k-6)<<6 + int((y>>(k-6))&63)
}

// endBin is the bin of the position past the last entry.
const endBin = 1 << 30

// pos is a position in a freeSet: entry i of bin c.
type pos struct{ c, i int }

// nextBin returns the first nonempty bin after b, or endBin.
func (s *freeSet) nextBin(b int) int {
	b++
	w := b >> 6
	if w >= len(s.words) {
		return endBin
	}
	if m := s.words[w] >> uint(b&63); m != 0 {
		return b + bits.TrailingZeros64(m)
	}
	t := s.top >> uint(w+1)
	if t == 0 {
		return endBin
	}
	w += 1 + bits.TrailingZeros64(t)
	return w<<6 + bits.TrailingZeros64(s.words[w])
}

// prevBin returns the last nonempty bin before b, or -1.
func (s *freeSet) prevBin(b int) int {
	if b <= 0 {
		return -1
	}
	b--
	w := b >> 6
	if w < len(s.words) {
		if m := s.words[w] << uint(63-b&63); m != 0 {
			return b - bits.LeadingZeros64(m)
		}
	} else {
		w = len(s.words)
	}
	t := s.top & (1<<uint(w) - 1)
	if t == 0 {
		return -1
	}
	w = 63 - bits.LeadingZeros64(t)
	return w<<6 + 63 - bits.LeadingZeros64(s.words[w])
}

// search returns the index of the first entry >= (size, addr) in bin ch.
func search(ch []entry, size, addr uint64) int {
	if len(ch) <= 8 {
		for i := range ch {
			if !ch[i].less(size, addr) {
				return i
			}
		}
		return len(ch)
	}
	i, j := 0, len(ch)
	for i < j {
		m := int(uint(i+j) >> 1)
		if ch[m].less(size, addr) {
			i = m + 1
		} else {
			j = m
		}
	}
	return i
}

// lowerBound returns the position of the first entry >= (size, addr).
func (s *freeSet) lowerBound(size, addr uint64) pos {
	b := binOf(size)
	if b < len(s.bins) {
		ch := s.bins[b]
		if i := search(ch, size, addr); i < len(ch) {
			return pos{b, i}
		}
	}
	return pos{s.nextBin(b), 0}
}

// bestFit returns the position of the first entry of at least size bytes:
// lowerBound(size, 0).
func (s *freeSet) bestFit(size uint64) pos {
	b := binOf(size)
	if b < len(s.bins) {
		ch := s.bins[b]
		if len(ch) <= 8 {
			for i := range ch {
				if ch[i].size >= size {
					return pos{b, i}
				}
			}
		} else if i := search(ch, size, 0); i < len(ch) {
			return pos{b, i}
		}
	}
	return pos{s.nextBin(b), 0}
}

func (s *freeSet) valid(p pos) bool { return p.c < endBin }

func (s *freeSet) at(p pos) entry { return s.bins[p.c][p.i] }

func (s *freeSet) next(p pos) pos {
	p.i++
	if p.i == len(s.bins[p.c]) {
		return pos{s.nextBin(p.c), 0}
	}
	return p
}

// prev returns the position before p; ok is false at the beginning.
func (s *freeSet) prev(p pos) (pos, bool) {
	if p.i > 0 {
		return pos{p.c, p.i - 1}, true
	}
	c := s.prevBin(p.c)
	if c < 0 {
		return p, false
	}
	return pos{c, len(s.bins[c]) - 1}, true
}

func (s *freeSet) last() (entry, bool) {
	c := s.prevBin(endBin)
	if c < 0 {
		return entry{}, false
	}
	ch := s.bins[c]
	return ch[len(ch)-1], true
}

// grow makes room for bin b.
func (s *freeSet) grow(b int) {
	n := max(b+1, 2*len(s.bins), 64)
	s.bins = append(s.bins, make([][]entry, n-len(s.bins))...)
	if w := (len(s.bins) + 63) >> 6; w > len(s.words) {
		s.words = append(s.words, make([]uint64, w-len(s.words))...)
	}
}

// insertIn inserts e in bin b, which is binOf(e.size).
func (s *freeSet) insertIn(b int, e entry) {
	if b >= len(s.bins) {
		s.grow(b)
	}
	s.n++
	ch := s.bins[b]
	if len(ch) == 0 {
		s.bins[b] = append(ch, e)
		s.words[b>>6] |= 1 << uint(b&63)
		s.top |= 1 << uint(b>>6)
		return
	}
	i := search(ch, e.size, e.addr)
	ch = append(ch, entry{})
	copy(ch[i+1:], ch[i:])
	ch[i] = e
	s.bins[b] = ch
}

func (s *freeSet) insert(e entry) { s.insertIn(binOf(e.size), e) }

// remove deletes the entry (size, addr); it reports whether it was there.
func (s *freeSet) remove(size, addr uint64) bool {
	b := binOf(size)
	if b >= len(s.bins) {
		return false
	}
	ch := s.bins[b]
	i := search(ch, size, addr)
	if i == len(ch) || ch[i].size != size || ch[i].addr != addr {
		return false
	}
	s.removeAt(pos{b, i})
	return true
}

func (s *freeSet) removeAt(p pos) {
	s.n--
	ch := s.bins[p.c]
	// Bins are short: a loop moves their few entries faster than copy.
	for j := p.i + 1; j < len(ch); j++ {
		ch[j-1] = ch[j]
	}
	ch = ch[:len(ch)-1]
	s.bins[p.c] = ch
	if len(ch) == 0 {
		w := p.c >> 6
		m := s.words[w] &^ (1 << uint(p.c&63))
		s.words[w] = m
		var t uint64
		if m == 0 {
			t = 1 << uint(w)
		}
		s.top &^= t
	}
}

// replaceAt replaces the entry at p with e, keeping the order; e must not
// be in the set already. When e stays in p's bin, only the entries
// between the two places move.
func (s *freeSet) replaceAt(p pos, e entry) {
	if b := binOf(e.size); b != p.c {
		s.removeAt(p)
		s.insertIn(b, e)
		return
	}
	ch := s.bins[p.c]
	old := ch[p.i]
	if e.less(old.size, old.addr) {
		// e goes at or before p.i
		i := search(ch[:p.i], e.size, e.addr)
		copy(ch[i+1:p.i+1], ch[i:p.i])
		ch[i] = e
	} else {
		// e goes after p.i: entries p.i+1 .. i-1 move down one place
		i := p.i + 1 + search(ch[p.i+1:], e.size, e.addr)
		copy(ch[p.i:i-1], ch[p.i+1:i])
		ch[i-1] = e
	}
}

// each calls fn for every entry in order.
func (s *freeSet) each(fn func(e entry)) {
	for c := s.nextBin(-1); c < endBin; c = s.nextBin(c) {
		for _, e := range s.bins[c] {
			fn(e)
		}
	}
}

// entries appends all entries in order to dst.
func (s *freeSet) entries(dst []entry) []entry {
	for c := s.nextBin(-1); c < endBin; c = s.nextBin(c) {
		dst = append(dst, s.bins[c]...)
	}
	return dst
}

// clone returns a copy of s that shares no memory with it.
func (s *freeSet) clone() freeSet {
	c := freeSet{bins: make([][]entry, len(s.bins)), words: append([]uint64(nil), s.words...), top: s.top, n: s.n}
	for b := s.nextBin(-1); b < endBin; b = s.nextBin(b) {
		c.bins[b] = append([]entry(nil), s.bins[b]...)
	}
	return c
}

// addrSet is a sorted set of block ids keyed by address (unmapped blocks of
// expandable segments for one (pool, stream)).
type addrSet struct {
	addrs []uint64
	ids   []int32
}

func (s *addrSet) search(addr uint64) int {
	return sort.Search(len(s.addrs), func(i int) bool { return s.addrs[i] >= addr })
}

func (s *addrSet) insert(addr uint64, id int32) {
	i := s.search(addr)
	s.addrs = append(s.addrs, 0)
	s.ids = append(s.ids, 0)
	copy(s.addrs[i+1:], s.addrs[i:])
	copy(s.ids[i+1:], s.ids[i:])
	s.addrs[i] = addr
	s.ids[i] = id
}

func (s *addrSet) remove(addr uint64) bool {
	i := s.search(addr)
	if i == len(s.addrs) || s.addrs[i] != addr {
		return false
	}
	s.addrs = append(s.addrs[:i], s.addrs[i+1:]...)
	s.ids = append(s.ids[:i], s.ids[i+1:]...)
	return true
}
