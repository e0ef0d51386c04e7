package caching

import (
	"math/bits"
	"sort"
)

// entry is one free block of a freeSet, as its walks report it.
type entry struct {
	size, addr uint64
	id         int32
}

func (b *block) less(size, addr uint64) bool {
	return b.size < size || (b.size == size && b.addr < addr)
}

// freeSet is a sorted set of the free blocks of one (pool, stream),
// ordered by (size, addr). Its blocks are kept in size-class bins: each
// bin is a list linked through the blocks themselves (block.bnext and
// block.bprev), sorted by (size, addr), and a bitmap tells the bins that
// hold blocks. Every block of a bin is below every block of the bins
// after it, so that a search walks one bin (none or one block most of the
// time) and then, through the bitmap, takes the head of the next nonempty
// bin; a block leaves its set without a search.
//
// A bin's list ends with none forward; backward it is circular: the
// head's bprev is the tail. A block's size and address must not change
// while it is in a set (its bin follows from its size). Positions are
// block ids, none past the last block. The methods take the allocator's
// blocks, which hold the links and, while in a set, their bin (block.bin).
type freeSet struct {
	heads []int32  // heads[b]: the first block of bin b, or none
	words []uint64 // bit b%64 of words[b/64]: bin b is not empty
	top   uint64   // bit w: words[w] is not zero
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

// endBin is past every bin.
const endBin = 1 << 30

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

// head returns the first block of the first nonempty bin from b on, or none.
func (s *freeSet) head(b int) int32 {
	if b < len(s.heads) && s.heads[b] != none {
		return s.heads[b]
	}
	if b = s.nextBin(b); b == endBin {
		return none
	}
	return s.heads[b]
}

// lowerBound returns the first block >= (size, addr), or none.
func (s *freeSet) lowerBound(bl []block, size, addr uint64) int32 {
	b := binOf(size)
	if b < len(s.heads) {
		for id := s.heads[b]; id != none; id = bl[id].bnext {
			if !bl[id].less(size, addr) {
				return id
			}
		}
	}
	return s.head(b + 1)
}

// bestFit returns the first block of at least size bytes, or none:
// lowerBound(size, 0).
func (s *freeSet) bestFit(bl []block, size uint64) int32 {
	b := binOf(size)
	if b < len(s.heads) {
		for id := s.heads[b]; id != none; id = bl[id].bnext {
			if bl[id].size >= size {
				return id
			}
		}
	}
	return s.head(b + 1)
}

// next returns the block after id, or none.
func (s *freeSet) next(bl []block, id int32) int32 {
	if n := bl[id].bnext; n != none {
		return n
	}
	return s.head(int(bl[id].bin) + 1)
}

// prev returns the block before id (the last block when id is none); ok
// is false at the beginning.
func (s *freeSet) prev(bl []block, id int32) (int32, bool) {
	b := endBin
	if id != none {
		b = int(bl[id].bin)
		if s.heads[b] != id {
			return bl[id].bprev, true
		}
	}
	if b = s.prevBin(b); b < 0 {
		return none, false
	}
	return bl[s.heads[b]].bprev, true
}

func (s *freeSet) last(bl []block) (int32, bool) { return s.prev(bl, none) }

// insert adds block id, which must be in no set.
func (s *freeSet) insert(bl []block, id int32) {
	e := &bl[id]
	b := binOf(e.size)
	e.bin = uint16(b)
	if b >= len(s.heads) {
		n := max(b+1, 2*len(s.heads), 64)
		for len(s.heads) < n {
			s.heads = append(s.heads, none)
		}
		if w := (n + 63) >> 6; w > len(s.words) {
			s.words = append(s.words, make([]uint64, w-len(s.words))...)
		}
	}
	s.n++
	h := s.heads[b]
	if h == none {
		s.heads[b] = id
		e.bnext, e.bprev = none, id
		s.words[b>>6] |= 1 << uint(b&63)
		s.top |= 1 << uint(b>>6)
		return
	}
	if t := bl[h].bprev; bl[t].less(e.size, e.addr) {
		// after the tail
		bl[t].bnext = id
		e.bnext, e.bprev = none, t
		bl[h].bprev = id
		return
	}
	c := h
	for bl[c].less(e.size, e.addr) {
		c = bl[c].bnext
	}
	// before c
	p := bl[c].bprev
	e.bnext, e.bprev = c, p
	bl[c].bprev = id
	if c == h {
		s.heads[b] = id
	} else {
		bl[p].bnext = id
	}
}

// remove takes block id, which must be in s, out of it.
func (s *freeSet) remove(bl []block, id int32) {
	e := &bl[id]
	b := int(e.bin)
	h := s.heads[b]
	nx, pv := e.bnext, e.bprev
	s.n--
	if h == id {
		if nx == none {
			s.heads[b] = none
			w := b >> 6
			m := s.words[w] &^ (1 << uint(b&63))
			s.words[w] = m
			var t uint64
			if m == 0 {
				t = 1 << uint(w)
			}
			s.top &^= t
			return
		}
		s.heads[b] = nx
		bl[nx].bprev = pv
		return
	}
	bl[pv].bnext = nx
	if nx != none {
		bl[nx].bprev = pv
	} else {
		bl[h].bprev = pv
	}
}

// each calls fn for every block in order.
func (s *freeSet) each(bl []block, fn func(e entry)) {
	for b := s.nextBin(-1); b < endBin; b = s.nextBin(b) {
		for id := s.heads[b]; id != none; id = bl[id].bnext {
			fn(entry{size: bl[id].size, addr: bl[id].addr, id: id})
		}
	}
}

// entries appends all blocks in order to dst.
func (s *freeSet) entries(bl []block, dst []entry) []entry {
	s.each(bl, func(e entry) { dst = append(dst, e) })
	return dst
}

// clone returns a copy of s that shares no memory with it; the links are
// in the blocks.
func (s *freeSet) clone() freeSet {
	return freeSet{heads: append([]int32(nil), s.heads...), words: append([]uint64(nil), s.words...), top: s.top, n: s.n}
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
