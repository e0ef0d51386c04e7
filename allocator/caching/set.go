package caching

import "sort"

// entry is one free block in a freeSet, ordered by (size, addr).
type entry struct {
	size, addr uint64
	id         int32
}

func (e entry) less(size, addr uint64) bool {
	return e.size < size || (e.size == size && e.addr < addr)
}

// maxChunk is the largest chunk a freeSet keeps before splitting it.
const maxChunk = 64

// freeSet is a sorted set of free blocks of one (pool, stream), ordered by
// (size, addr): a list of sorted chunks, so that inserts and deletes move
// at most maxChunk entries, with each chunk's last entry kept apart for
// the search.
type freeSet struct {
	chunks [][]entry
	lasts  []entry // lasts[c] is the last entry of chunks[c]
	n      int
	spare  [][]entry // emptied chunks, reused before allocating
}

func (s *freeSet) newChunk() []entry {
	if n := len(s.spare); n > 0 {
		c := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return c[:0]
	}
	return make([]entry, 0, maxChunk+1)
}

// pos is a position in a freeSet.
type pos struct{ c, i int }

// lowerBound returns the position of the first entry >= (size, addr).
func (s *freeSet) lowerBound(size, addr uint64) pos {
	ls := s.lasts
	lo, hi := 0, len(ls)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ls[m].less(size, addr) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(ls) {
		return pos{lo, 0}
	}
	ch := s.chunks[lo]
	i, j := 0, len(ch)-1 // the last entry is >= the key
	for i < j {
		m := int(uint(i+j) >> 1)
		if ch[m].less(size, addr) {
			i = m + 1
		} else {
			j = m
		}
	}
	return pos{lo, i}
}

func (s *freeSet) valid(p pos) bool { return p.c < len(s.chunks) }

func (s *freeSet) at(p pos) entry { return s.chunks[p.c][p.i] }

func (s *freeSet) next(p pos) pos {
	p.i++
	if p.i == len(s.chunks[p.c]) {
		return pos{p.c + 1, 0}
	}
	return p
}

// prev returns the position before p; ok is false at the beginning.
func (s *freeSet) prev(p pos) (pos, bool) {
	if p.i > 0 {
		return pos{p.c, p.i - 1}, true
	}
	if p.c == 0 {
		return p, false
	}
	return pos{p.c - 1, len(s.chunks[p.c-1]) - 1}, true
}

func (s *freeSet) last() (entry, bool) {
	if len(s.lasts) == 0 {
		return entry{}, false
	}
	return s.lasts[len(s.lasts)-1], true
}

func (s *freeSet) insert(e entry) {
	s.n++
	if len(s.chunks) == 0 {
		s.chunks = append(s.chunks, append(s.newChunk(), e))
		s.lasts = append(s.lasts, e)
		return
	}
	p := s.lowerBound(e.size, e.addr)
	if p.c == len(s.chunks) {
		p.c--
		p.i = len(s.chunks[p.c])
	}
	ch := s.chunks[p.c]
	ch = append(ch, entry{})
	copy(ch[p.i+1:], ch[p.i:])
	ch[p.i] = e
	if len(ch) > maxChunk {
		half := len(ch) / 2
		nc := append(s.newChunk(), ch[half:]...)
		ch = ch[:half]
		s.chunks = append(s.chunks, nil)
		copy(s.chunks[p.c+2:], s.chunks[p.c+1:])
		s.chunks[p.c+1] = nc
		s.lasts = append(s.lasts, entry{})
		copy(s.lasts[p.c+2:], s.lasts[p.c+1:])
		s.lasts[p.c+1] = nc[len(nc)-1]
	}
	s.chunks[p.c] = ch
	s.lasts[p.c] = ch[len(ch)-1]
}

// remove deletes the entry (size, addr); it reports whether it was there.
func (s *freeSet) remove(size, addr uint64) bool {
	p := s.lowerBound(size, addr)
	if !s.valid(p) {
		return false
	}
	e := s.at(p)
	if e.size != size || e.addr != addr {
		return false
	}
	s.removeAt(p)
	return true
}

func (s *freeSet) removeAt(p pos) {
	s.n--
	ch := s.chunks[p.c]
	copy(ch[p.i:], ch[p.i+1:])
	ch = ch[:len(ch)-1]
	if len(ch) == 0 {
		s.spare = append(s.spare, ch)
		copy(s.chunks[p.c:], s.chunks[p.c+1:])
		s.chunks[len(s.chunks)-1] = nil
		s.chunks = s.chunks[:len(s.chunks)-1]
		copy(s.lasts[p.c:], s.lasts[p.c+1:])
		s.lasts = s.lasts[:len(s.lasts)-1]
		return
	}
	s.chunks[p.c] = ch
	s.lasts[p.c] = ch[len(ch)-1]
}

// replaceAt replaces the entry at p with e, keeping the order; e must not
// be in the set already. When e's place is in p's chunk, only the entries
// between the two places move.
func (s *freeSet) replaceAt(p pos, e entry) {
	ch := s.chunks[p.c]
	old := ch[p.i]
	if e.less(old.size, old.addr) {
		// e goes at or before p.i: find the first entry >= e in ch[:p.i]
		if p.c > 0 && !s.lasts[p.c-1].less(e.size, e.addr) {
			s.removeAt(p)
			s.insert(e)
			return
		}
		i, j := 0, p.i
		for i < j {
			m := int(uint(i+j) >> 1)
			if ch[m].less(e.size, e.addr) {
				i = m + 1
			} else {
				j = m
			}
		}
		copy(ch[i+1:p.i+1], ch[i:p.i])
		ch[i] = e
	} else {
		// e goes after p.i: find the first entry > e in ch[p.i+1:]
		if p.c+1 < len(s.chunks) && !e.less(s.chunks[p.c+1][0].size, s.chunks[p.c+1][0].addr) {
			s.removeAt(p)
			s.insert(e)
			return
		}
		i, j := p.i+1, len(ch)
		for i < j {
			m := int(uint(i+j) >> 1)
			if ch[m].less(e.size, e.addr) {
				i = m + 1
			} else {
				j = m
			}
		}
		// entries p.i+1 .. i-1 move down one place; e goes at i-1
		copy(ch[p.i:i-1], ch[p.i+1:i])
		ch[i-1] = e
	}
	s.lasts[p.c] = ch[len(ch)-1]
}

// each calls fn for every entry in order.
func (s *freeSet) each(fn func(e entry)) {
	for _, ch := range s.chunks {
		for _, e := range ch {
			fn(e)
		}
	}
}

// entries appends all entries in order to dst.
func (s *freeSet) entries(dst []entry) []entry {
	for _, ch := range s.chunks {
		dst = append(dst, ch...)
	}
	return dst
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
