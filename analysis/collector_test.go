package analysis

import (
	"testing"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// fakePolicy is a Policy and Inspector whose segments a test sets.
type fakePolicy struct {
	segs  []trace.Segment
	walks int
}

func (p *fakePolicy) Name() string { return "fake" }
func (p *fakePolicy) Malloc(n uint64, s trace.StreamID) (driver.Block, error) {
	return driver.Block{}, nil
}
func (p *fakePolicy) FreeRequested(driver.Block) {}
func (p *fakePolicy) FreeCompleted(driver.Block) {}
func (p *fakePolicy) EmptyCache()                {}
func (p *fakePolicy) Stats() driver.Stats        { return driver.Stats{} }
func (p *fakePolicy) Segments(fn func(trace.Segment) bool) {
	p.walks++
	for _, s := range p.segs {
		if !fn(s) {
			return
		}
	}
}

const mib = 1 << 20

func blk(addr, size uint64, st trace.BlockState) trace.Block {
	return trace.Block{Addr: addr, SizeBytes: size, State: st}
}

func TestFreeHistogram(t *testing.T) {
	segs := []trace.Segment{
		// A split segment: one live block, free 3 MiB and 512 KiB: stranded.
		{Addr: 0, SizeBytes: 20 * mib, Blocks: []trace.Block{
			blk(0, 16*mib+512<<10, trace.BlockAllocated),
			blk(16*mib+512<<10, 3*mib, trace.BlockInactive),
			blk(19*mib+512<<10, 512<<10, trace.BlockInactive),
		}},
		// A wholly free segment: releasable, not stranded.
		{Addr: 1 << 40, SizeBytes: 2 * mib, Blocks: []trace.Block{blk(1<<40, 2*mib, trace.BlockInactive)}},
		// A segment whose only other block waits on a stream: still live.
		{Addr: 2 << 40, SizeBytes: 4 * mib, Blocks: []trace.Block{
			blk(2<<40, 1*mib, trace.BlockPendingFree),
			blk(2<<40+mib, 3*mib, trace.BlockInactive),
		}},
	}
	h := FreeHistogramOf(segs)
	// Bins: 2^19 (512 KiB): 1 block stranded; 2^20: none; 2^21 (2..4 MiB):
	// 3 blocks (3 MiB stranded, 2 MiB free, 3 MiB stranded).
	if len(h.Bins) != 3 {
		t.Fatalf("bins %+v, want 3 (2^19..2^21)", h.Bins)
	}
	want := []HistBin{
		{Log2: 19, LowBytes: 512 << 10, HighBytes: 1 << 20, Blocks: 1, Bytes: 512 << 10, StrandedBlocks: 1, StrandedBytes: 512 << 10},
		{Log2: 20, LowBytes: 1 << 20, HighBytes: 2 << 20},
		{Log2: 21, LowBytes: 2 << 20, HighBytes: 4 << 20, Blocks: 3, Bytes: 8 * mib, StrandedBlocks: 2, StrandedBytes: 6 * mib},
	}
	for i := range want {
		if h.Bins[i] != want[i] {
			t.Errorf("bin %d = %+v, want %+v", i, h.Bins[i], want[i])
		}
	}
	if h.FreeBytes != 8*mib+512<<10 || h.StrandedBytes != 6*mib+512<<10 || h.Segments != 3 {
		t.Errorf("free %d stranded %d segments %d", h.FreeBytes, h.StrandedBytes, h.Segments)
	}
}

func TestLog2Class(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want int
	}{{0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 2}, {512, 9}, {1023, 9}, {1024, 10}, {1 << 63, 63}} {
		if got := Log2Class(c.n); got != c.want {
			t.Errorf("Log2Class(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestCollectorSeriesAndPeakHistogram(t *testing.T) {
	p := &fakePolicy{}
	c := newCollector("fake", 100)
	type st struct{ res, act, req uint64 }
	steps := []st{{0, 0, 0}, {4 * mib, 1 * mib, 1 * mib}, {8 * mib, 6 * mib, 5 * mib}, {8 * mib, 2 * mib, 2 * mib}, {6 * mib, 3 * mib, 3 * mib}}
	peakSegs := []trace.Segment{{SizeBytes: 8 * mib, Blocks: []trace.Block{
		blk(0, 6*mib, trace.BlockAllocated), blk(6*mib, 2*mib, trace.BlockInactive)}}}
	for i, s := range steps {
		// The segments seen at event 2 (the peak) are the ones the
		// histogram must keep; later ones must not replace them.
		switch i {
		case 2:
			p.segs = peakSegs
		case 3:
			p.segs = []trace.Segment{{SizeBytes: 8 * mib, Blocks: []trace.Block{blk(0, 8*mib, trace.BlockInactive)}}}
		}
		c.observe(&replay.Sample{Index: int64(i), TimeNS: 1e9 + int64(i)*5e8, ReservedBytes: s.res,
			ActiveBytes: s.act, AllocatedBytes: s.act, RequestedBytes: s.req, Policy: p})
	}
	ser := c.series()
	res, frag := &ser[0], &ser[4]
	if res.Name != "reserved" || frag.Name != "fragmentation" {
		t.Fatalf("series names %q %q", res.Name, frag.Name)
	}
	wantFrag := []float64{0, 75, 25, 75, 50}
	for i, s := range steps {
		if res.Value[i] != float64(s.res)/gib {
			t.Errorf("reserved[%d] = %v GiB, want %v", i, res.Value[i], float64(s.res)/gib)
		}
		if frag.Value[i] != wantFrag[i] {
			t.Errorf("fragmentation[%d] = %v, want %v", i, frag.Value[i], wantFrag[i])
		}
		if res.TimeS[i] != float64(i)*0.5 {
			t.Errorf("t[%d] = %v, want %v", i, res.TimeS[i], float64(i)*0.5)
		}
	}
	// Walks: the first event (0 bytes, first seen), 4 MiB, 8 MiB; not the
	// repeat of 8 MiB nor the drop to 6.
	if p.walks != 3 {
		t.Errorf("%d segment walks, want 3 (only on new peaks)", p.walks)
	}
	h := c.histogram()
	if h == nil || h.Index != 2 || h.ReservedBytes != 8*mib || h.ActiveBytes != 6*mib || h.TimeS != 1 {
		t.Fatalf("histogram moment %+v, want index 2 at 1 s, 8 MiB reserved", h)
	}
	if len(h.Bins) != 1 || h.Bins[0].Log2 != 21 || h.Bins[0].StrandedBytes != 2*mib {
		t.Errorf("bins %+v, want one 2 MiB stranded block", h.Bins)
	}
}

func TestFragPct(t *testing.T) {
	for _, c := range []struct {
		r, a uint64
		want float64
	}{{0, 0, 0}, {100, 0, 100}, {100, 25, 75}, {100, 100, 0}, {100, 120, 0}} {
		if got := FragPct(c.r, c.a); got != c.want {
			t.Errorf("FragPct(%d, %d) = %v, want %v", c.r, c.a, got, c.want)
		}
	}
}
