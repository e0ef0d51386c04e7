package caching

import (
	"math/rand/v2"
	"sort"
	"testing"
	"unsafe"
)

// TestFreeSetMatchesSortedSlice checks the binned set against a plain
// sorted slice over random inserts, removes, searches and walks, with
// sizes from 512 bytes to 16 GiB (many in one bin, bins far apart).
func TestFreeSetMatchesSortedSlice(t *testing.T) {
	var s freeSet
	var ref []entry
	var bl []block
	var spare []int32
	in := map[[2]uint64]int32{} // (size, addr) -> block in the set
	rng := rand.New(rand.NewPCG(3, 4))
	less := func(e entry, size, addr uint64) bool { return e.size < size || (e.size == size && e.addr < addr) }
	find := func(size, addr uint64) int {
		return sort.Search(len(ref), func(i int) bool { return !less(ref[i], size, addr) })
	}
	id := func(e entry) int32 {
		if e.id == none {
			return none
		}
		return e.id
	}
	at := func(p int32) entry {
		if p == none {
			return entry{id: none}
		}
		return entry{size: bl[p].size, addr: bl[p].addr, id: p}
	}
	for step := 0; step < 50000; step++ {
		size := uint64(rng.IntN(40)+1) * 512 << uint(rng.IntN(4)*rng.IntN(6))
		addr := uint64(rng.IntN(400)) * 4096
		i := find(size, addr)
		present := i < len(ref) && ref[i].size == size && ref[i].addr == addr
		if !present && rng.IntN(2) == 0 {
			var b int32
			if n := len(spare); n > 0 {
				b, spare = spare[n-1], spare[:n-1]
			} else {
				bl = append(bl, block{})
				b = int32(len(bl) - 1)
			}
			bl[b] = block{size: size, addr: addr}
			s.insert(bl, b)
			in[[2]uint64{size, addr}] = b
			ref = append(ref, entry{})
			copy(ref[i+1:], ref[i:])
			ref[i] = entry{size: size, addr: addr, id: b}
		} else if present {
			b := in[[2]uint64{size, addr}]
			s.remove(bl, b)
			delete(in, [2]uint64{size, addr})
			bl[b] = block{}
			spare = append(spare, b)
			ref = append(ref[:i], ref[i+1:]...)
		}
		j := find(size, 0)
		want := entry{id: none}
		if j < len(ref) {
			want = ref[j]
		}
		p := s.bestFit(bl, size)
		if at(p) != want {
			t.Fatalf("step %d: bestFit(%d) = %v, want %v", step, size, at(p), want)
		}
		if q := s.lowerBound(bl, size, 0); q != p {
			t.Fatalf("step %d: lowerBound(%d, 0) = %d, bestFit %d", step, size, q, p)
		}
		k := find(size, addr)
		if q := s.lowerBound(bl, size, addr); k < len(ref) && q != id(ref[k]) || k == len(ref) && q != none {
			t.Fatalf("step %d: lowerBound(%d, %#x) differs", step, size, addr)
		}
		// a few steps forward and back from p
		q, k := p, j
		for n := 0; n < 3 && q != none; n++ {
			q, k = s.next(bl, q), k+1
			if w := (entry{id: none}); k < len(ref) && at(q) != ref[k] || k >= len(ref) && at(q) != w {
				t.Fatalf("step %d: next differs at %d", step, k)
			}
		}
		q, k = p, j
		for n := 0; n < 3; n++ {
			pq, ok := s.prev(bl, q)
			if ok != (k > 0) {
				t.Fatalf("step %d: prev at %d: ok = %v", step, k, ok)
			}
			if !ok {
				break
			}
			q, k = pq, k-1
			if at(q) != ref[k] {
				t.Fatalf("step %d: prev differs at %d", step, k)
			}
		}
		if s.n != len(ref) {
			t.Fatalf("step %d: n = %d, want %d", step, s.n, len(ref))
		}
	}
	got := s.entries(bl, nil)
	if len(got) != len(ref) {
		t.Fatalf("%d entries, want %d", len(got), len(ref))
	}
	for i := range ref {
		if got[i] != ref[i] {
			t.Fatalf("entry %d: %v, want %v", i, got[i], ref[i])
		}
	}
	if p, ok := s.last(bl); len(ref) > 0 && (!ok || at(p) != ref[len(ref)-1]) {
		t.Fatal("last differs")
	}
	c := s.clone()
	bl = append(bl, block{size: 1 << 40, addr: 1})
	if c.insert(bl, int32(len(bl)-1)); s.n != len(ref) || c.n != len(ref)+1 {
		t.Fatal("clone shares its set")
	}
	if p, _ := s.last(bl); len(ref) > 0 && at(p) != ref[len(ref)-1] {
		t.Fatal("clone shares its heads")
	}
}

// TestBlockSize checks that a block fills one 64-byte cache line.
func TestBlockSize(t *testing.T) {
	if s := unsafe.Sizeof(block{}); s != 64 {
		t.Fatalf("block is %d bytes, want 64", s)
	}
}
