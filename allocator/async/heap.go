package async

import (
	"math/bits"
	"sort"
)

// span is a free range [off, off+size) of the heap, offsets from its base.
type span struct{ off, size uint64 }

// heap keeps the pool's free ranges by offset and finds a range for a
// request: the best fit by (size, offset), or, with bins > 0, the lowest
// offset among the ranges of the smallest size class that holds any size
// of the request's class rounded up (a segregated fit with bins classes per
// power of two).
type heap struct {
	free []span // by offset; neighbours never touch (they merge)
	bins int
}

// class returns the size class of n: its power of two and, with bins
// classes per power, its sub-class.
func (h *heap) class(n uint64) uint64 {
	fl := uint64(bits.Len64(n) - 1)
	sl := uint64(bits.Len(uint(h.bins)) - 1) // log2(bins)
	if fl < sl {
		return fl << 32
	}
	return fl<<32 | (n>>(fl-sl) - 1<<sl)
}

// classUp returns the smallest class whose every size is at least n.
func (h *heap) classUp(n uint64) uint64 {
	fl := uint64(bits.Len64(n) - 1)
	sl := uint64(bits.Len(uint(h.bins)) - 1)
	if fl >= sl {
		n += 1<<(fl-sl) - 1
	}
	return h.class(n)
}

// find returns the index of the free range a request of n bytes goes to, or -1.
func (h *heap) find(n uint64) int {
	best := -1
	if h.bins <= 0 {
		for i, s := range h.free {
			if s.size >= n && (best < 0 || s.size < h.free[best].size) {
				best = i
			}
		}
		return best
	}
	want := h.classUp(n)
	var bestClass uint64
	for i, s := range h.free {
		if s.size < n {
			continue
		}
		if c := h.class(s.size); c >= want && (best < 0 || c < bestClass) {
			best, bestClass = i, c
		}
	}
	return best
}

// take cuts n bytes from the low end of free range i and returns their offset.
func (h *heap) take(i int, n uint64) uint64 {
	s := h.free[i]
	if s.size == n {
		h.free = append(h.free[:i], h.free[i+1:]...)
	} else {
		h.free[i] = span{s.off + n, s.size - n}
	}
	return s.off
}

// put returns [off, off+n) to the free ranges, merging it with its neighbours.
func (h *heap) put(off, n uint64) {
	i := sort.Search(len(h.free), func(i int) bool { return h.free[i].off > off })
	if i > 0 && h.free[i-1].off+h.free[i-1].size == off {
		i--
		h.free[i].size += n
	} else {
		h.free = append(h.free, span{})
		copy(h.free[i+1:], h.free[i:])
		h.free[i] = span{off, n}
	}
	if i+1 < len(h.free) && h.free[i].off+h.free[i].size == h.free[i+1].off {
		h.free[i].size += h.free[i+1].size
		h.free = append(h.free[:i+1], h.free[i+2:]...)
	}
}

// tail returns the index of the free range that ends at end, or -1.
func (h *heap) tail(end uint64) int {
	if n := len(h.free); n > 0 && h.free[n-1].off+h.free[n-1].size == end {
		return n - 1
	}
	return -1
}
