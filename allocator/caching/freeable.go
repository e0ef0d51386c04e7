package caching

import "math/bits"

// freeableSet is PyTorch's graph_pools_freeable, the private pools whose
// use count is 0: a ska::flat_hash_map keyed by pool ID, whose iteration
// order is its slot order. release_cached_blocks walks it in that order,
// so the order of a release's segment frees depends on it; the table is
// reproduced here: Robin Hood hashing with Fibonacci hashing of the ID
// (PyTorch's MempoolIdHash: a if a != 0 else b), a load factor of 0.5,
// and erasure by shifting the following entries back.
type freeableSet struct {
	slots      []freeSlot // numSlots + maxLookups
	shift      uint
	maxLookups int
	n          int
}

type freeSlot struct {
	dist int8 // distance from the desired slot; -1 when empty
	id   uint64
}

func (f *freeableSet) numSlots() int {
	if len(f.slots) == 0 {
		return 0
	}
	return len(f.slots) - f.maxLookups
}

// hashIndex is fibonacci_hash_policy::index_for_hash.
func (f *freeableSet) hashIndex(id uint64) int {
	h := id &^ (1 << 63)
	return int((h * 11400714819323198485) >> f.shift)
}

// rehash is rehash(n): at least n slots, a power of two.
func (f *freeableSet) rehash(n int) {
	n = max(n, 2*f.n) // ceil(n_elements / 0.5)
	if n < 2 {
		n = 2
	}
	log := bits.Len(uint(n - 1))
	n = 1 << log
	old := f.slots
	f.shift = uint(64 - log)
	f.maxLookups = max(4, log)
	f.slots = make([]freeSlot, n+f.maxLookups)
	for i := range f.slots {
		f.slots[i].dist = -1
	}
	f.n = 0
	for _, s := range old {
		if s.dist >= 0 {
			f.insert(s.id)
		}
	}
}

func (f *freeableSet) grow() { f.rehash(max(4, 2*f.numSlots())) }

// insert adds id, as emplace does.
func (f *freeableSet) insert(id uint64) {
	if len(f.slots) == 0 {
		f.grow()
	}
	cur := f.hashIndex(id)
	dist := int8(0)
	for ; f.slots[cur].dist >= dist; cur, dist = cur+1, dist+1 {
		if f.slots[cur].id == id {
			return
		}
	}
	if int(dist) == f.maxLookups || float64(f.n+1) > float64(f.numSlots())*0.5 {
		f.grow()
		f.insert(id)
		return
	}
	if f.slots[cur].dist < 0 {
		f.slots[cur] = freeSlot{dist, id}
		f.n++
		return
	}
	// Robin Hood: the newcomer takes the slot, the one it displaces moves on.
	first := id
	carry := f.slots[cur]
	f.slots[cur] = freeSlot{dist, id}
	dist = carry.dist + 1
	for cur++; ; cur++ {
		switch s := &f.slots[cur]; {
		case s.dist < 0:
			*s = freeSlot{dist, carry.id}
			f.n++
			return
		case s.dist < dist:
			d, v := s.dist, s.id
			*s = freeSlot{dist, carry.id}
			carry.id, dist = v, d+1
		default:
			dist++
			if int(dist) == f.maxLookups {
				// Put back what was displaced, grow, and insert again.
				f.eraseID(first)
				f.grow()
				f.insert(first)
				f.insert(carry.id)
				return
			}
		}
	}
}

// eraseAt erases the entry at slot i, shifting the following ones back.
func (f *freeableSet) eraseAt(i int) {
	f.slots[i].dist = -1
	f.n--
	for next := i + 1; next < len(f.slots) && f.slots[next].dist > 0; i, next = i+1, next+1 {
		f.slots[i] = freeSlot{f.slots[next].dist - 1, f.slots[next].id}
		f.slots[next].dist = -1
	}
}

// eraseID erases id if present.
func (f *freeableSet) eraseID(id uint64) {
	for i := range f.slots {
		if f.slots[i].dist >= 0 && f.slots[i].id == id {
			f.eraseAt(i)
			return
		}
	}
}

func (f *freeableSet) clone() freeableSet {
	c := *f
	c.slots = append([]freeSlot(nil), f.slots...)
	return c
}
