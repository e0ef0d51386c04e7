package ideal

import (
	"slices"
	"testing"

	"github.com/fragsim/fragsim/allocator/internal/fakedev"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

const base = 1 << 32

type op = fakedev.Op

func TestRules(t *testing.T) {
	tests := []struct {
		name     string
		dev      fakedev.Device
		conf     string
		ops      []op
		reserved uint64
		peak     uint64
		log      []string
	}{
		{
			name: "free_at_request: exactly the requested bytes, released when the program frees them",
			conf: "free_at_request:true",
			ops: []op{
				{Do: "malloc", Size: 1000, Addr: base, Block: 1000},
				{Do: "malloc", Size: 3, Addr: base + 1024, Block: 3},
				{Do: "free_requested", Addr: base},
				{Do: "malloc", Size: 0, Addr: base + 1536, Block: 1}, // zero takes one byte
				{Do: "free_completed", Addr: base},                   // already released: nothing
			},
			reserved: 4, peak: 1003,
			log: []string{"malloc 1000 -> 0x100000000", "malloc 3 -> 0x100000400", "free 0x100000000 1000", "malloc 1 -> 0x100000600"},
		},
		{
			name: "by default the bytes are held until the free completes",
			ops: []op{
				{Do: "malloc", Size: 1000, Addr: base},
				{Do: "free_requested", Addr: base},
				{Do: "malloc", Size: 24, Addr: base + 1024},
				{Do: "free_completed", Addr: base},
				{Do: "empty_cache"},
			},
			reserved: 24, peak: 1024,
		},
		{
			name: "out of memory when the device refuses",
			dev:  fakedev.Device{Capacity: 1500},
			ops: []op{
				{Do: "malloc", Size: 1000, Addr: base},
				{Do: "malloc", Size: 501, OOM: true},
				{Do: "malloc", Size: 500, Addr: base + 1024},
			},
			reserved: 1500, peak: 1500,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConf(tt.conf)
			if err != nil {
				t.Fatal(err)
			}
			d := tt.dev
			p, _ := New(&d, cfg)
			fakedev.Run(t, p, &d, tt.ops)
			if d.Used != tt.reserved || d.Peak != tt.peak {
				t.Errorf("reserved %d peak %d, want %d %d", d.Used, d.Peak, tt.reserved, tt.peak)
			}
			if st := p.Stats(); st.LargestFreeBytes != 0 || st.StrandedBytes != 0 {
				t.Errorf("Stats = %+v, want no free or stranded bytes", st)
			}
			if tt.log != nil && !slices.Equal(d.Log, tt.log) {
				t.Errorf("device calls:\n got %q\nwant %q", d.Log, tt.log)
			}
		})
	}
}

func TestSegments(t *testing.T) {
	d := &fakedev.Device{}
	p, _ := New(d, Config{})
	fakedev.Run(t, p, d, []op{
		{Do: "malloc", Size: 2 << 20, Addr: base},
		{Do: "malloc", Size: 100, Addr: base + 2<<20},
		{Do: "free_requested", Addr: base + 2<<20},
	})
	var got []trace.Segment
	p.Segments(func(s trace.Segment) bool { got = append(got, s); return true })
	if len(got) != 2 || got[0].Addr != base || got[0].Pool != "large" || got[1].Pool != "small" ||
		got[1].Blocks[0].State != trace.BlockPendingFree || got[0].Blocks[0].RequestedBytes != 2<<20 {
		t.Errorf("Segments = %+v", got)
	}
}

// TestHugeRequests checks sizes no device holds: an OOM, never a panic, a
// rounding that wraps around or a blow-up (fakedev.CheckHuge).
func TestHugeRequests(t *testing.T) {
	fakedev.CheckHuge(t, func(d *fakedev.Device) driver.Policy {
		p, err := New(d, Config{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
