package replay

import (
	"math/rand"
	"testing"
)

// TestTailsLast checks tails.last against a scan of every tail, most
// recent first, as tails are pushed and used up.
func TestTailsLast(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var tl tails
	scan := func(lim int, n uint64) int {
		for i := lim - 1; i >= 0; i-- {
			if tl.s[i].size >= n {
				return i
			}
		}
		return -1
	}
	for step := 0; step < 5000; step++ {
		if rng.Intn(3) > 0 {
			tl.push(span{addr: uint64(step) << 25, size: uint64(rng.Intn(1 << 20))})
		}
		n := uint64(rng.Intn(1<<20)) + 1
		lim := rng.Intn(len(tl.s) + 1)
		got, want := tl.last(lim, n), scan(lim, n)
		if got != want {
			t.Fatalf("step %d: last(%d, %d) = %d, want %d", step, lim, n, got, want)
		}
		if got >= 0 {
			tl.s[got].size -= min(tl.s[got].size, n)
			tl.shrunk(got)
		}
	}
}

// TestPlaceLayout checks the layout of reserved ranges with no recorded
// map: slots of whole 32 MiB downwards from LayoutTop, a later range in
// the most recent tail it fits, and a slot that no longer fits below
// LayoutTop taken upwards from it.
func TestPlaceLayout(t *testing.T) {
	d := newDevice(nil, 0, 0, 0, 0)
	const mib = 1 << 20
	top := uint64(LayoutTop)
	steps := []struct{ size, want uint64 }{
		{90 * mib, top - 96*mib},  // 3 slots; its tail: 6 MiB
		{20 * mib, top - 128*mib}, // no tail fits: a slot; its tail: 12 MiB
		{2 * mib, top - 108*mib},  // the most recent tail, 10 MiB left
		{8 * mib, top - 106*mib},  // again, 2 MiB left
		{4 * mib, top - 6*mib},    // the older tail
		{top, top},                // no room below: upwards
		{32 * mib, top - 160*mib}, // below again
	}
	for i, s := range steps {
		if got := d.placeRange(s.size); got != s.want {
			t.Errorf("step %d: %d bytes placed at %#x, want %#x", i, s.size, got, s.want)
		}
	}
}

// TestDeviceRefusesHugeSegments checks that sizes near 2^64 are refused,
// over capacity and over the memory-fraction cap, with bytes reserved
// (the sums must not wrap), and that a fitting segment is still served.
func TestDeviceRefusesHugeSegments(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		total uint64
		frac  float64
	}{{0, 0}, {24 * gib, 0}, {24 * gib, 0.5}} {
		d := newDevice(nil, 0, c.total, 0, c.frac)
		d.compare = false
		if _, ok := d.Malloc(gib, 0); !ok {
			t.Fatalf("total %d fraction %v: 1 GiB refused", c.total, c.frac)
		}
		for _, size := range []uint64{^uint64(0), ^uint64(0) - gib + 1, 1 << 63, 1 << 47} {
			if _, ok := d.Malloc(size, 0); ok {
				t.Errorf("total %d fraction %v: %d bytes served", c.total, c.frac, size)
			}
			if d.Map(LayoutTop, size) {
				t.Errorf("total %d fraction %v: %d bytes mapped", c.total, c.frac, size)
			}
		}
		if d.reserved != gib {
			t.Errorf("total %d fraction %v: %d bytes reserved, want 1 GiB", c.total, c.frac, d.reserved)
		}
	}
}
