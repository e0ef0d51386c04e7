package caching

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// TestFreeSetMatchesSortedSlice checks the binned set against a plain
// sorted slice over random inserts, removes, replacements, searches and
// walks, with sizes from 512 bytes to 16 GiB (many in one bin, bins far
// apart).
func TestFreeSetMatchesSortedSlice(t *testing.T) {
	var s freeSet
	var ref []entry
	rng := rand.New(rand.NewPCG(3, 4))
	find := func(size, addr uint64) int {
		return sort.Search(len(ref), func(i int) bool { return !ref[i].less(size, addr) })
	}
	for step := 0; step < 50000; step++ {
		size := uint64(rng.IntN(40)+1) * 512 << uint(rng.IntN(4)*rng.IntN(6))
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
		if q := s.bestFit(size); q != p {
			t.Fatalf("step %d: bestFit(%d) = %v, lowerBound %v", step, size, q, p)
		}
		// a few steps forward and back from p
		q, k := p, j
		for n := 0; n < 3 && s.valid(q); n++ {
			q, k = s.next(q), k+1
			if s.valid(q) != (k < len(ref)) || (k < len(ref) && s.at(q) != ref[k]) {
				t.Fatalf("step %d: next differs at %d", step, k)
			}
		}
		q, k = p, j
		for n := 0; n < 3; n++ {
			pq, ok := s.prev(q)
			if ok != (k > 0) {
				t.Fatalf("step %d: prev at %d: ok = %v", step, k, ok)
			}
			if !ok {
				break
			}
			q, k = pq, k-1
			if s.at(q) != ref[k] {
				t.Fatalf("step %d: prev differs at %d", step, k)
			}
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
	c := s.clone()
	if c.insert(entry{size: 1 << 40, addr: 1}); s.n != len(ref) || c.n != len(ref)+1 {
		t.Fatal("clone shares its set")
	}
	var each []entry
	c.each(func(e entry) { each = append(each, e) })
	if len(each) != len(ref)+1 || each[len(ref)] != (entry{size: 1 << 40, addr: 1}) {
		t.Fatal("each differs")
	}
	for i := range ref {
		if each[i] != ref[i] {
			t.Fatalf("each: entry %d: %v, want %v", i, each[i], ref[i])
		}
	}
}
