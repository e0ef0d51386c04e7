package ordset

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAgainstSortedSlice checks every operation against a sorted slice.
func TestAgainstSortedSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s Set
	var ref []Key
	find := func(k Key) (int, bool) {
		return slices.BinarySearchFunc(ref, k, func(a, b Key) int {
			switch {
			case a.Less(b):
				return -1
			case b.Less(a):
				return 1
			}
			return 0
		})
	}
	for i := 0; i < 20000; i++ {
		k := Key{Size: uint64(rng.IntN(50)), Addr: uint64(rng.IntN(50))}
		switch rng.IntN(4) {
		case 0, 1:
			j, found := find(k)
			if got := s.Insert(k); got == found {
				t.Fatalf("Insert(%v) = %v, present before: %v", k, got, found)
			}
			if !found {
				ref = slices.Insert(ref, j, k)
			}
		case 2:
			j, found := find(k)
			if got := s.Delete(k); got != found {
				t.Fatalf("Delete(%v) = %v, present: %v", k, got, found)
			}
			if found {
				ref = slices.Delete(ref, j, j+1)
			}
		case 3:
			j, _ := find(k)
			got, ok := s.Ceil(k)
			if ok != (j < len(ref)) || (ok && got != ref[j]) {
				t.Fatalf("Ceil(%v) = %v %v, want index %d of %v", k, got, ok, j, ref)
			}
		}
		if s.Len() != len(ref) {
			t.Fatalf("Len = %d, want %d", s.Len(), len(ref))
		}
		if m, ok := s.Max(); ok != (len(ref) > 0) || (ok && m != ref[len(ref)-1]) {
			t.Fatalf("Max = %v %v, want last of %v", m, ok, ref)
		}
	}
	from := Key{Size: 20}
	j, _ := find(from)
	var got []Key
	s.Ascend(from, func(k Key) bool { got = append(got, k); return true })
	if !slices.Equal(got, ref[j:]) {
		t.Fatalf("Ascend(%v) = %v, want %v", from, got, ref[j:])
	}
}
