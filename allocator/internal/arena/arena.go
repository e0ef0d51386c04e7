// Package arena keeps segments of device memory cut into ranges, with best-fit search, splitting and coalescing.
package arena

import (
	"cmp"
	"slices"

	"github.com/fragsim/fragsim/allocator/internal/ordset"
	"github.com/fragsim/fragsim/trace"
)

// Range is a contiguous part of a segment, free or in use.
type Range struct {
	Addr      uint64
	Size      uint64
	Requested uint64 // bytes the program asked for (in-use ranges)
	Stream    trace.StreamID
	InUse     bool
	Pending   bool // freed by the program, not yet returned (in-use ranges)

	prev, next *Range
	seg        *Seg
}

// Seg returns the segment holding r.
func (r *Range) Seg() *Seg { return r.seg }

// Seg is one piece of device memory (a region, a chunk) obtained in one call.
type Seg struct {
	Addr   uint64
	Size   uint64
	Stream trace.StreamID
	Pool   string // reported by Segments ("small" or "large")

	inUse     int    // ranges in use
	freeBytes uint64 // bytes of free ranges
	first     *Range
}

// InUse returns the number of in-use ranges in s.
func (s *Seg) InUse() int { return s.inUse }

// Arena holds segments and their ranges. Free ranges of every segment are
// searched together, in (size, address) order.
type Arena struct {
	free      ordset.Set
	byAddr    map[uint64]*Range // every range by its address
	segs      map[uint64]*Seg
	fullyFree map[*Seg]struct{}

	spare []*Range // ranges merged away, for reuse

	reserved  uint64 // bytes of all segments
	freeBytes uint64 // bytes of all free ranges
	fullBytes uint64 // bytes of segments with no range in use
	inUse     int    // ranges in use
}

// New returns an empty arena.
func New() *Arena {
	return &Arena{
		byAddr:    make(map[uint64]*Range),
		segs:      make(map[uint64]*Seg),
		fullyFree: make(map[*Seg]struct{}),
	}
}

// ReservedBytes returns the bytes of all segments.
func (a *Arena) ReservedBytes() uint64 { return a.reserved }

// FreeBytes returns the bytes of all free ranges.
func (a *Arena) FreeBytes() uint64 { return a.freeBytes }

// FullyFreeBytes returns the bytes of segments that hold no range in use.
func (a *Arena) FullyFreeBytes() uint64 { return a.fullBytes }

// StrandedBytes returns the free bytes of segments that still hold a range
// in use: releasing cached segments cannot return them.
func (a *Arena) StrandedBytes() uint64 { return a.freeBytes - a.fullBytes }

// LargestFree returns the size of the largest free range.
func (a *Arena) LargestFree() uint64 {
	k, ok := a.free.Max()
	if !ok {
		return 0
	}
	return k.Size
}

// NumSegs returns the number of segments.
func (a *Arena) NumSegs() int { return len(a.segs) }

// InUse returns the number of ranges in use.
func (a *Arena) InUse() int { return a.inUse }

// leave removes s's share from the totals before s changes; enter adds it back.
func (a *Arena) leave(s *Seg) {
	if s.inUse == 0 {
		a.fullBytes -= s.Size
		delete(a.fullyFree, s)
	}
}

func (a *Arena) enter(s *Seg) {
	if s.inUse == 0 {
		a.fullBytes += s.Size
		a.fullyFree[s] = struct{}{}
	}
}

// AddSegment adds a segment of size bytes at addr, as one free range.
func (a *Arena) AddSegment(addr, size uint64, stream trace.StreamID, pool string) *Seg {
	if size == 0 {
		panic("arena: empty segment")
	}
	if _, dup := a.segs[addr]; dup {
		panic("arena: segment address already in use")
	}
	s := &Seg{Addr: addr, Size: size, Stream: stream, Pool: pool}
	r := &Range{Addr: addr, Size: size, Stream: stream, seg: s}
	s.first = r
	a.segs[addr] = s
	a.reserved += size
	s.freeBytes = size
	a.freeBytes += size
	a.byAddr[addr] = r
	a.free.Insert(ordset.Key{Size: size, Addr: addr})
	a.enter(s)
	return s
}

// RemoveSegment removes a segment that holds no range in use.
func (a *Arena) RemoveSegment(s *Seg) {
	if s.inUse != 0 {
		panic("arena: removing a segment in use")
	}
	a.leave(s)
	for r := s.first; r != nil; r = r.next {
		a.free.Delete(ordset.Key{Size: r.Size, Addr: r.Addr})
		delete(a.byAddr, r.Addr)
	}
	a.freeBytes -= s.freeBytes
	a.reserved -= s.Size
	delete(a.segs, s.Addr)
}

// FullyFreeSegs returns the segments that hold no range in use, by address.
func (a *Arena) FullyFreeSegs() []*Seg {
	out := make([]*Seg, 0, len(a.fullyFree))
	for s := range a.fullyFree {
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y *Seg) int { return cmp.Compare(x.Addr, y.Addr) })
	return out
}

// BestFit returns the smallest free range of at least size bytes, the lowest
// address among equals, or nil.
func (a *Arena) BestFit(size uint64) *Range {
	k, ok := a.free.Ceil(ordset.Key{Size: size})
	if !ok {
		return nil
	}
	return a.byAddr[k.Addr]
}

// Take hands out the free range r for a request of requested bytes. When
// size < r.Size and split is true, r is cut to size bytes and the rest stays
// free as a range of its own; otherwise the whole range is handed out.
func (a *Arena) Take(r *Range, size, requested uint64, stream trace.StreamID, split bool) *Range {
	if r.InUse || size > r.Size || size == 0 {
		panic("arena: bad Take")
	}
	s := r.seg
	a.leave(s)
	a.free.Delete(ordset.Key{Size: r.Size, Addr: r.Addr})
	if split && size < r.Size {
		rest := a.newRange()
		*rest = Range{Addr: r.Addr + size, Size: r.Size - size, seg: s, prev: r, next: r.next}
		if r.next != nil {
			r.next.prev = rest
		}
		r.next = rest
		r.Size = size
		a.byAddr[rest.Addr] = rest
		a.free.Insert(ordset.Key{Size: rest.Size, Addr: rest.Addr})
	}
	r.InUse = true
	r.Pending = false
	r.Requested = requested
	r.Stream = stream
	s.inUse++
	a.inUse++
	s.freeBytes -= r.Size
	a.freeBytes -= r.Size
	a.enter(s)
	return r
}

func (a *Arena) newRange() *Range {
	if n := len(a.spare); n > 0 {
		r := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return r
	}
	return new(Range)
}

// recycle keeps a range merged away for reuse; callers hold no reference.
func (a *Arena) recycle(r *Range) {
	*r = Range{}
	if len(a.spare) < 1024 {
		a.spare = append(a.spare, r)
	}
}

// Lookup returns the in-use range at addr.
func (a *Arena) Lookup(addr uint64) (*Range, bool) {
	r, ok := a.byAddr[addr]
	if !ok || !r.InUse {
		return nil, false
	}
	return r, true
}

// Release returns the in-use range r to the free ranges, merging it with
// free neighbours of its segment. It returns the merged free range.
func (a *Arena) Release(r *Range) *Range {
	if !r.InUse {
		panic("arena: releasing a free range")
	}
	s := r.seg
	a.leave(s)
	r.InUse = false
	r.Pending = false
	r.Requested = 0
	s.inUse--
	a.inUse--
	s.freeBytes += r.Size
	a.freeBytes += r.Size
	if n := r.next; n != nil && !n.InUse {
		a.free.Delete(ordset.Key{Size: n.Size, Addr: n.Addr})
		delete(a.byAddr, n.Addr)
		r.Size += n.Size
		r.next = n.next
		if n.next != nil {
			n.next.prev = r
		}
		a.recycle(n)
	}
	if p := r.prev; p != nil && !p.InUse {
		a.free.Delete(ordset.Key{Size: p.Size, Addr: p.Addr})
		delete(a.byAddr, r.Addr)
		p.Size += r.Size
		p.next = r.next
		if r.next != nil {
			r.next.prev = p
		}
		a.recycle(r)
		r = p
	}
	a.free.Insert(ordset.Key{Size: r.Size, Addr: r.Addr})
	a.enter(s)
	return r
}

// Segments calls fn for every segment, by address, with its ranges as
// blocks, until fn returns false.
func (a *Arena) Segments(fn func(seg trace.Segment) bool) {
	segs := make([]*Seg, 0, len(a.segs))
	for _, s := range a.segs {
		segs = append(segs, s)
	}
	slices.SortFunc(segs, func(x, y *Seg) int { return cmp.Compare(x.Addr, y.Addr) })
	for _, s := range segs {
		ts := trace.Segment{Stream: s.Stream, Addr: s.Addr, SizeBytes: s.Size, Pool: s.Pool}
		for r := s.first; r != nil; r = r.next {
			b := trace.Block{Addr: r.Addr, SizeBytes: r.Size, State: trace.BlockInactive}
			if r.InUse {
				b.RequestedBytes = r.Requested
				b.State = trace.BlockAllocated
				if r.Pending {
					b.State = trace.BlockPendingFree
				}
			}
			ts.Blocks = append(ts.Blocks, b)
		}
		if !fn(ts) {
			return
		}
	}
}

// Check verifies the arena's invariants and returns a description of the
// first one broken, or "". It walks everything: for tests.
func (a *Arena) Check() string {
	var reserved, free, full uint64
	inUse := 0
	for addr, s := range a.segs {
		if addr != s.Addr {
			return "segment key differs from its address"
		}
		reserved += s.Size
		var sum, sfree uint64
		n := 0
		at := s.Addr
		var prev *Range
		for r := s.first; r != nil; r = r.next {
			if r.Addr != at || r.prev != prev || r.seg != s {
				return "ranges of a segment are not contiguous and linked"
			}
			if prev != nil && !prev.InUse && !r.InUse {
				return "two adjacent free ranges were not merged"
			}
			if a.byAddr[r.Addr] != r {
				return "range missing from the address index"
			}
			has := a.free.Contains(ordset.Key{Size: r.Size, Addr: r.Addr})
			if has == r.InUse {
				return "free set disagrees with a range's state"
			}
			if r.InUse {
				n++
			} else {
				sfree += r.Size
			}
			sum += r.Size
			at += r.Size
			prev = r
		}
		if sum != s.Size {
			return "ranges do not cover their segment"
		}
		if n != s.inUse || sfree != s.freeBytes {
			return "segment counters are wrong"
		}
		inUse += n
		free += sfree
		if n == 0 {
			full += s.Size
			if _, ok := a.fullyFree[s]; !ok {
				return "fully free segment missing from its index"
			}
		}
	}
	if reserved != a.reserved || free != a.freeBytes || full != a.fullBytes || inUse != a.inUse {
		return "arena totals are wrong"
	}
	if a.free.Len() != len(a.byAddr)-inUse {
		return "free set size is wrong"
	}
	return ""
}
