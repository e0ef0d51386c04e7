package caching

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// TestFreeSetMatchesSortedSlice checks the chunked set against a plain
// sorted slice over random inserts, removes, replacements and searches.
func TestFreeSetMatchesSortedSlice(t *testing.T) {
	var s freeSet
	var ref []entry
	rng := rand.New(rand.NewPCG(3, 4))
	find := func(size, addr uint64) int {
		return sort.Search(len(ref), func(i int) bool { return !ref[i].less(size, addr) })
	}
	for step := 0; step < 50000; step++ {
		size := uint64(rng.IntN(40)+1) * 512
		addr := uint64(rng.IntN(400)) * 4096
		i := find(size, addr)
		present := i < len(ref) && ref[i].size == size && ref[i].addr == addr
		if r := rng.IntN(4); r == 0 && len(ref) > 0 && !present {
			// replace a random entry with (size, addr)
			k := rng.IntN(len(ref))
			old := ref[k]
			s.replaceAt(s.lowerBound(old.size, old.addr), entry{size: size, addr: addr, id: int32(step)})
			ref = append(ref[:k], ref[k+1:]...)
			i = find(size, addr)
			ref = append(ref, entry{})
			copy(ref[i+1:], ref[i:])
			ref[i] = entry{size: size, addr: addr, id: int32(step)}
		} else if r < 2 && !present {
			s.insert(entry{size: size, addr: addr, id: int32(step)})
			ref = append(ref, entry{})
			copy(ref[i+1:], ref[i:])
			ref[i] = entry{size: size, addr: addr, id: int32(step)}
		} else if got := s.remove(size, addr); got != present {
			t.Fatalf("step %d: remove = %v, want %v", step, got, present)
		} else if present {
			ref = append(ref[:i], ref[i+1:]...)
		}
		p := s.lowerBound(size, 0)
		j := find(size, 0)
		if s.valid(p) != (j < len(ref)) || (j < len(ref) && s.at(p) != ref[j]) {
			t.Fatalf("step %d: lowerBound(%d) differs", step, size)
		}
		if s.n != len(ref) {
			t.Fatalf("step %d: n = %d, want %d", step, s.n, len(ref))
		}
	}
	got := s.entries(nil)
	for i := range ref {
		if got[i] != ref[i] {
			t.Fatalf("entry %d: %v, want %v", i, got[i], ref[i])
		}
	}
	if e, ok := s.last(); len(ref) > 0 && (!ok || e != ref[len(ref)-1]) {
		t.Fatal("last differs")
	}
}
