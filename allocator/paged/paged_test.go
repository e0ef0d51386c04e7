package paged

import (
	"slices"
	"testing"

	"github.com/fragsim/fragsim/allocator/internal/fakedev"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

const (
	base = 1 << 32
	MiB  = 1 << 20
)

type op = fakedev.Op

func TestRules(t *testing.T) {
	tests := []struct {
		name     string
		dev      fakedev.Device
		conf     string
		ops      []op
		reserved uint64
		cached   int
		log      []string
	}{
		{
			name: "ceil(size/page) pages; freed pages serve any later request, first page first",
			ops: []op{
				{Do: "malloc", Size: 5 * MiB, Addr: base, Block: 6 * MiB},
				{Do: "malloc", Size: 1, Addr: base + 6*MiB, Block: 2 * MiB},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: MiB, Addr: base, Block: 2 * MiB},
				// Two cached pages (base+2, base+4 MiB) and one new: not contiguous, no matter.
				{Do: "malloc", Size: 5 * MiB, Addr: base + 2*MiB, Block: 6 * MiB},
			},
			reserved: 10 * MiB, cached: 0,
			log: []string{"malloc 2097152 -> 0x100000000", "malloc 2097152 -> 0x100200000", "malloc 2097152 -> 0x100400000",
				"malloc 2097152 -> 0x100600000", "malloc 2097152 -> 0x100800000"},
		},
		{
			name: "pages wait for the free to complete; empty_cache returns cached pages",
			conf: "page_mb:0.5",
			ops: []op{
				{Do: "malloc", Size: MiB, Addr: base, Block: MiB},
				{Do: "free_requested", Addr: base},
				{Do: "malloc", Size: 1, Addr: base + MiB, Block: MiB / 2},
				{Do: "free_completed", Addr: base},
				{Do: "empty_cache"},
			},
			reserved: MiB / 2, cached: 0,
		},
		{
			name: "out of memory gives the pages taken back to the cache",
			dev:  fakedev.Device{Capacity: 6 * MiB},
			ops: []op{
				{Do: "malloc", Size: 4 * MiB, Addr: base},
				{Do: "malloc", Size: MiB, Addr: base + 4*MiB},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 8 * MiB, OOM: true},
				{Do: "malloc", Size: 4 * MiB, Addr: base},
			},
			reserved: 6 * MiB, cached: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConf(tt.conf)
			if err != nil {
				t.Fatal(err)
			}
			d := tt.dev
			p, err := New(&d, cfg)
			if err != nil {
				t.Fatal(err)
			}
			fakedev.Run(t, p, &d, tt.ops)
			if d.Used != tt.reserved || p.CachedPages() != tt.cached {
				t.Errorf("reserved %d cached %d, want %d %d", d.Used, p.CachedPages(), tt.reserved, tt.cached)
			}
			if got := p.Stats().LargestFreeBytes; got != uint64(tt.cached)*cfg.PageSize {
				t.Errorf("LargestFreeBytes %d, want the cached pages' %d", got, uint64(tt.cached)*cfg.PageSize)
			}
			if tt.log != nil && !slices.Equal(d.Log, tt.log) {
				t.Errorf("device calls:\n got %q\nwant %q", d.Log, tt.log)
			}
		})
	}
}

func TestSegments(t *testing.T) {
	d := &fakedev.Device{}
	p, _ := New(d, DefaultConfig())
	fakedev.Run(t, p, d, []op{
		{Do: "malloc", Size: 3 * MiB, Addr: base},
		{Do: "malloc", Size: MiB, Addr: base + 4*MiB},
		{Do: "free", Addr: base + 4*MiB},
	})
	var got []trace.Segment
	p.Segments(func(s trace.Segment) bool { got = append(got, s); return true })
	want := []trace.Block{
		{Addr: base, SizeBytes: 2 * MiB, RequestedBytes: 2 * MiB, State: trace.BlockAllocated},
		{Addr: base + 2*MiB, SizeBytes: 2 * MiB, RequestedBytes: MiB, State: trace.BlockAllocated},
		{Addr: base + 4*MiB, SizeBytes: 2 * MiB, State: trace.BlockInactive},
	}
	if len(got) != len(want) {
		t.Fatalf("Segments = %+v", got)
	}
	for i, s := range got {
		if len(s.Blocks) != 1 || s.Blocks[0] != want[i] || s.Addr != want[i].Addr {
			t.Errorf("segment %d = %+v, want block %+v", i, s, want[i])
		}
	}
}

// TestHugeRequests checks sizes no device holds: an OOM, never a panic, a
// rounding that wraps around or a blow-up (fakedev.CheckHuge).
func TestHugeRequests(t *testing.T) {
	fakedev.CheckHuge(t, func(d *fakedev.Device) driver.Policy {
		p, err := New(d, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
