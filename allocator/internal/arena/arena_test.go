package arena

import (
	"math/rand/v2"
	"testing"
)

func TestTakeReleaseMerge(t *testing.T) {
	a := New()
	s := a.AddSegment(1000, 100, 0, "large")
	check := func(step string) {
		t.Helper()
		if msg := a.Check(); msg != "" {
			t.Fatalf("%s: %s", step, msg)
		}
	}
	x := a.Take(a.BestFit(10), 10, 9, 0, true)  // [1000,1010)
	y := a.Take(a.BestFit(20), 20, 20, 0, true) // [1010,1030)
	z := a.Take(a.BestFit(30), 30, 30, 0, true) // [1030,1060), 40 free at 1060
	check("takes")
	if x.Addr != 1000 || y.Addr != 1010 || z.Addr != 1030 || a.LargestFree() != 40 || a.StrandedBytes() != 40 {
		t.Fatalf("takes at %d %d %d, largest %d stranded %d", x.Addr, y.Addr, z.Addr, a.LargestFree(), a.StrandedBytes())
	}
	// An unsplit take hands out the whole range.
	w := a.Take(a.BestFit(5), 5, 5, 0, false)
	if w.Addr != 1060 || w.Size != 40 || a.FreeBytes() != 0 {
		t.Fatalf("unsplit take = [%d,+%d), free %d", w.Addr, w.Size, a.FreeBytes())
	}
	a.Release(w)
	a.Release(x)
	check("release x")
	// y sits between two free ranges: releasing it merges all three.
	a.Release(z)
	m := a.Release(y)
	check("release y")
	if m.Addr != 1000 || m.Size != 100 || s.InUse() != 0 || a.FullyFreeBytes() != 100 || a.StrandedBytes() != 0 {
		t.Fatalf("merged [%d,+%d), in use %d, fully free %d", m.Addr, m.Size, s.InUse(), a.FullyFreeBytes())
	}
	if got := a.FullyFreeSegs(); len(got) != 1 || got[0] != s {
		t.Fatalf("FullyFreeSegs = %v", got)
	}
	a.RemoveSegment(s)
	check("remove")
	if a.ReservedBytes() != 0 || a.NumSegs() != 0 || a.BestFit(1) != nil {
		t.Fatalf("after removal: reserved %d, %d segments", a.ReservedBytes(), a.NumSegs())
	}
}

func TestRemoveSegmentInUsePanics(t *testing.T) {
	a := New()
	a.AddSegment(0, 64, 0, "large")
	a.Take(a.BestFit(8), 8, 8, 0, true)
	defer func() {
		if recover() == nil {
			t.Fatal("RemoveSegment of a segment in use did not panic")
		}
	}()
	a.RemoveSegment(a.FullyFreeSegs()[0])
}

// TestRandom drives the arena with random operations and checks every
// invariant after each one.
func TestRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a := New()
	var live []*Range
	next := uint64(1 << 20)
	for i := 0; i < 5000; i++ {
		switch x := rng.IntN(10); {
		case x < 5:
			size := uint64(1 + rng.IntN(4096))
			r := a.BestFit(size)
			if r == nil {
				seg := max(size, uint64(rng.IntN(16384)))
				a.AddSegment(next, seg, 0, "large")
				next += seg + uint64(rng.IntN(3))*512
				r = a.BestFit(size)
			}
			live = append(live, a.Take(r, size, size, 0, rng.IntN(3) > 0))
		case x < 9 && len(live) > 0:
			j := rng.IntN(len(live))
			a.Release(live[j])
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			for _, s := range a.FullyFreeSegs() {
				a.RemoveSegment(s)
			}
		}
		if msg := a.Check(); msg != "" {
			t.Fatalf("op %d: %s", i, msg)
		}
	}
}
