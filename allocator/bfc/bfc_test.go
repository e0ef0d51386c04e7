package bfc

import (
	"reflect"
	"slices"
	"testing"

	"github.com/fragsim/fragsim/allocator/internal/fakedev"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

const (
	base = 1 << 32 // the fake device's first address
	KiB  = 1 << 10
	MiB  = 1 << 20
)

type op = fakedev.Op

func TestRoundedBytesAndBins(t *testing.T) {
	for _, tt := range []struct{ n, rounded uint64 }{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {1000, 1024}, {MiB + 1, MiB + 256},
	} {
		if got := RoundedBytes(tt.n); got != tt.rounded {
			t.Errorf("RoundedBytes(%d) = %d, want %d", tt.n, got, tt.rounded)
		}
	}
	for _, tt := range []struct {
		size uint64
		bin  int
	}{
		{256, 0}, {511, 0}, {512, 1}, {1023, 1}, {1024, 2}, {256 << 19, 19},
		{256<<20 - 1, 19}, {256 << 20, 20}, {1 << 40, 20},
	} {
		if got := BinFor(tt.size); got != tt.bin {
			t.Errorf("BinFor(%d) = %d, want %d", tt.size, got, tt.bin)
		}
	}
}

func TestRules(t *testing.T) {
	tests := []struct {
		name     string
		dev      fakedev.Device
		conf     string
		ops      []op
		reserved uint64   // device bytes held after
		largest  uint64   // Stats().LargestFreeBytes after
		stranded uint64   // Stats().StrandedBytes after
		retries  int64    // Stats().AllocRetries after
		curr     uint64   // curr_region_allocation_bytes_ after (0: unchecked)
		log      []string // device calls (nil: unchecked)
	}{
		{
			name: "256-byte rounding; splits carve the first 2 MiB region in address order",
			ops: []op{
				{Do: "malloc", Size: 1, Addr: base, Block: 256},
				{Do: "malloc", Size: 1000, Addr: base + 256, Block: 1024},
				{Do: "malloc", Size: 257, Addr: base + 1280, Block: 512},
			},
			reserved: 2 * MiB, largest: 2*MiB - 1792, stranded: 2*MiB - 1792, curr: 4 * MiB,
			log: []string{"malloc 2097152 -> 0x100000000"},
		},
		{
			name: "regions double; a chunk under twice the request and 128 MiB over it is not split",
			ops: []op{
				{Do: "malloc", Size: MiB, Addr: base, Block: MiB},                   // 2 MiB region, split (2 >= 2x1)
				{Do: "malloc", Size: 3 * MiB, Addr: base + 2*MiB, Block: 4 * MiB},   // 4 MiB region, 4 < 6: whole
				{Do: "malloc", Size: 20 * MiB, Addr: base + 6*MiB, Block: 32 * MiB}, // curr 8 -> 16 -> 32, whole
			},
			reserved: 38 * MiB, largest: MiB, stranded: MiB, curr: 32 * MiB,
			log: []string{"malloc 2097152 -> 0x100000000", "malloc 4194304 -> 0x100200000", "malloc 33554432 -> 0x100600000"},
		},
		{
			name: "a remainder of 128 MiB or more is split off",
			ops: []op{
				{Do: "malloc", Size: 300 * MiB, Addr: base, Block: 300 * MiB}, // 512 MiB region, 212 MiB left
				{Do: "malloc", Size: 200 * MiB, Addr: base + 300*MiB, Block: 212 * MiB},
			},
			reserved: 512 * MiB, largest: 0, stranded: 0, curr: 512 * MiB,
		},
		{
			name: "fragmentation_fraction sets the split threshold as a fraction of the limit",
			conf: "memory_limit_mb:1024,fragmentation_fraction:0.01", // 10.24 MiB
			ops: []op{
				{Do: "malloc", Size: 20 * MiB, Addr: base, Block: 20 * MiB},         // 32 MiB region: 12 MiB left >= 10.24
				{Do: "malloc", Size: 7 * MiB, Addr: base + 20*MiB, Block: 12 * MiB}, // 12 < 14 and 5 < 10.24: whole
			},
			reserved: 32 * MiB, largest: 0, stranded: 0,
		},
		{
			name: "best fit by size, then lowest address; freed chunks coalesce",
			ops: []op{
				{Do: "malloc", Size: KiB, Addr: base, Block: KiB},
				{Do: "malloc", Size: KiB, Addr: base + KiB, Block: KiB},
				{Do: "malloc", Size: KiB, Addr: base + 2*KiB, Block: KiB},
				{Do: "malloc", Size: KiB, Addr: base + 3*KiB, Block: KiB},
				{Do: "malloc", Size: KiB, Addr: base + 4*KiB, Block: KiB},
				{Do: "free", Addr: base + 3*KiB},
				{Do: "free", Addr: base + KiB},
				// Two free 1 KiB chunks: the lower one wins.
				{Do: "malloc", Size: 1000, Addr: base + KiB, Block: KiB},
				{Do: "free", Addr: base},
				{Do: "free", Addr: base + KiB}, // merges with base: 2 KiB free at base
				// 2 KiB at base (best fit) beats the 1 KiB-short tail; split as 2 KiB >= 2x1 KiB.
				{Do: "malloc", Size: KiB, Addr: base + 3*KiB, Block: KiB},
				{Do: "malloc", Size: KiB + 1, Addr: base, Block: 2 * KiB}, // 2 KiB < 2x1.25 KiB: whole
			},
			reserved: 2 * MiB, largest: 2*MiB - 5*KiB, stranded: 2*MiB - 5*KiB,
		},
		{
			name: "free requested is not reusable until the free completes",
			ops: []op{
				{Do: "malloc", Size: KiB, Addr: base, Block: KiB},
				{Do: "free_requested", Addr: base},
				{Do: "malloc", Size: KiB, Addr: base + KiB, Block: KiB},
				{Do: "free_completed", Addr: base},
				{Do: "malloc", Size: KiB, Addr: base, Block: KiB},
			},
			reserved: 2 * MiB, largest: 2*MiB - 2*KiB, stranded: 2*MiB - 2*KiB,
		},
		{
			name: "backpedal by 10% when the device refuses; garbage collection frees idle regions and retries",
			dev:  fakedev.Device{Capacity: 6 * MiB},
			ops: []op{
				{Do: "malloc", Size: MiB, Addr: base, Block: MiB},
				{Do: "free", Addr: base},
				// curr 4 -> 8 MiB; 8 MiB, 7549952, 6795008, 6115584, 5504256 refused with 2 MiB held,
				// the next try is under 5 MiB: GC returns the idle region, then 6115584 fits.
				{Do: "malloc", Size: 5 * MiB, Addr: base + 2*MiB, Block: 6115584},
			},
			reserved: 6115584, largest: 0, stranded: 0, retries: 1, curr: 16 * MiB, // doubled after the extension
			log: []string{
				"malloc 2097152 -> 0x100000000",
				"refuse 8388608", "refuse 7549952", "refuse 6795008", "refuse 6115584", "refuse 5504256",
				"free 0x100000000 2097152",
				"refuse 8388608", "refuse 7549952", "refuse 6795008", "malloc 6115584 -> 0x100200000",
			},
		},
		{
			name: "without garbage collection the same request runs out of memory",
			dev:  fakedev.Device{Capacity: 6 * MiB},
			conf: "garbage_collection:false",
			ops: []op{
				{Do: "malloc", Size: MiB, Addr: base, Block: MiB},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 5 * MiB, OOM: true},
			},
			reserved: 2 * MiB, largest: 2 * MiB, stranded: 0,
		},
		{
			name: "over the memory limit fails at once",
			dev:  fakedev.Device{CapBytes: 4 * MiB, Capped: true},
			ops: []op{
				{Do: "malloc", Size: 3 * MiB, Addr: base, Block: 4 * MiB}, // 2 MiB -> 4 MiB (= limit), not split
				{Do: "malloc", Size: 2 * MiB, OOM: true},
			},
			reserved: 4 * MiB, largest: 0, stranded: 0,
			log: []string{"malloc 4194304 -> 0x100000000"},
		},
		{
			name: "allow_growth:false takes the whole limit in one region",
			dev:  fakedev.Device{CapBytes: 64 * MiB, Capped: true},
			conf: "allow_growth:false",
			ops: []op{
				{Do: "malloc", Size: 100, Addr: base, Block: 256},
				{Do: "malloc", Size: 10 * MiB, Addr: base + 256, Block: 10 * MiB},
			},
			reserved: 64 * MiB, largest: 54*MiB - 256, stranded: 54*MiB - 256,
		},
		{
			name: "empty_cache returns only regions with nothing in use",
			ops: []op{
				{Do: "malloc", Size: MiB, Addr: base, Block: MiB},
				{Do: "malloc", Size: 3 * MiB, Addr: base + 2*MiB, Block: 4 * MiB},
				{Do: "free", Addr: base + 2*MiB},
				{Do: "empty_cache"},
				{Do: "malloc", Size: 3 * MiB, Addr: base + 6*MiB, Block: 3 * MiB}, // 8 MiB >= 2x3: split
			},
			reserved: 10 * MiB, largest: 5 * MiB, stranded: 6 * MiB, curr: 16 * MiB,
			log: []string{"malloc 2097152 -> 0x100000000", "malloc 4194304 -> 0x100200000",
				"free 0x100200000 4194304", "malloc 8388608 -> 0x100600000"},
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
			st := p.Stats()
			if d.Used != tt.reserved || st.LargestFreeBytes != tt.largest || st.StrandedBytes != tt.stranded || st.AllocRetries != tt.retries {
				t.Errorf("after: reserved %d largest %d stranded %d retries %d, want %d %d %d %d",
					d.Used, st.LargestFreeBytes, st.StrandedBytes, st.AllocRetries, tt.reserved, tt.largest, tt.stranded, tt.retries)
			}
			if tt.curr != 0 && p.RegionAllocationBytes() != tt.curr {
				t.Errorf("curr_region_allocation_bytes = %d, want %d", p.RegionAllocationBytes(), tt.curr)
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
		{Do: "malloc", Size: 1000, Addr: base, Block: 1024},
		{Do: "malloc", Size: 3 * MiB, Addr: base + 2*MiB, Block: 4 * MiB},
		{Do: "malloc", Size: 10, Addr: base + 1024, Block: 256},
		{Do: "free_requested", Addr: base + 1024},
	})
	var got []trace.Segment
	p.Segments(func(s trace.Segment) bool { got = append(got, s); return true })
	want := []trace.Segment{
		{Addr: base, SizeBytes: 2 * MiB, Pool: "large", Blocks: []trace.Block{
			{Addr: base, SizeBytes: 1024, RequestedBytes: 1000, State: trace.BlockAllocated},
			{Addr: base + 1024, SizeBytes: 256, RequestedBytes: 10, State: trace.BlockPendingFree},
			{Addr: base + 1280, SizeBytes: 2*MiB - 1280, State: trace.BlockInactive},
		}},
		{Addr: base + 2*MiB, SizeBytes: 4 * MiB, Pool: "large", Blocks: []trace.Block{
			{Addr: base + 2*MiB, SizeBytes: 4 * MiB, RequestedBytes: 3 * MiB, State: trace.BlockAllocated},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Segments:\n got %+v\nwant %+v", got, want)
	}
	// fn returning false stops the walk.
	n := 0
	p.Segments(func(trace.Segment) bool { n++; return false })
	if n != 1 {
		t.Errorf("Segments called fn %d times after it returned false, want 1", n)
	}
}

// TestLimitFollowsCap checks that the memory limit follows the device cap
// as a trace's set_fraction events move it.
func TestLimitFollowsCap(t *testing.T) {
	d := &fakedev.Device{CapBytes: 64 * MiB, Capped: true}
	p, _ := New(d, DefaultConfig())
	fakedev.Run(t, p, d, []op{{Do: "malloc", Size: MiB, Addr: base, Block: MiB}})
	d.CapBytes = 4 * MiB // 2 MiB held: 2 MiB available, a 3 MiB request cannot fit
	fakedev.Run(t, p, d, []op{{Do: "malloc", Size: 3 * MiB, OOM: true}})
	d.CapBytes = 64 * MiB
	fakedev.Run(t, p, d, []op{{Do: "malloc", Size: 3 * MiB, Addr: base + 2*MiB, Block: 4 * MiB}})
	if d.Refused != 0 {
		t.Errorf("BFC asked the device past its limit %d times", d.Refused)
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
