package async

import (
	"slices"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator/internal/fakedev"
)

const (
	base = 1 << 32 // the fake device's first address
	KiB  = 1 << 10
	MiB  = 1 << 20
)

type op = fakedev.Op

func TestRules(t *testing.T) {
	tests := []struct {
		name     string
		dev      fakedev.Device
		conf     string
		ops      []op
		reserved uint64 // device bytes held after
		peak     uint64 // device peak (0: unchecked)
		largest  uint64
		stranded uint64
		remaps   int64
		log      []string // device calls (nil: unchecked)
	}{
		{
			name: "small requests share a 2 MiB chunk, rounded to 512 bytes, in address order",
			ops: []op{
				{Do: "malloc", Size: 100, Addr: base, Block: 512},
				{Do: "malloc", Size: 1000, Addr: base + 512, Block: 1024},
				{Do: "malloc", Size: 0, Addr: base + 1536, Block: 512},
			},
			reserved: 2 * MiB, largest: 2*MiB - 2048, stranded: 2*MiB - 2048,
			log: []string{"malloc 2097152 -> 0x100000000"},
		},
		{
			name: "a large request gets a chunk rounded up to 2 MiB; its tail serves small requests",
			ops: []op{
				{Do: "malloc", Size: 3*MiB + 1, Addr: base, Block: 3*MiB + 512},
				{Do: "malloc", Size: 900 * KiB, Addr: base + 3*MiB + 512, Block: 900 * KiB},
				{Do: "malloc", Size: 200 * KiB, Addr: base + 4*MiB, Block: 200 * KiB}, // tail too small: new chunk
			},
			reserved: 6 * MiB, largest: 2*MiB - 200*KiB, stranded: 2*MiB - 200*KiB + (MiB - 512 - 900*KiB),
		},
		{
			name: "freed ranges are reused by any stream, best fit by size then address",
			ops: []op{
				{Do: "malloc", Size: 4 * KiB, Addr: base},
				{Do: "malloc", Size: 2 * KiB, Addr: base + 4*KiB},
				{Do: "malloc", Size: 2 * KiB, Addr: base + 6*KiB},
				{Do: "malloc", Size: 2 * KiB, Addr: base + 8*KiB},
				{Do: "free", Addr: base},
				{Do: "free", Addr: base + 6*KiB},
				{Do: "malloc", Size: 2 * KiB, Stream: 7, Addr: base + 6*KiB, Block: 2 * KiB},
				{Do: "malloc", Size: 3 * KiB, Stream: 9, Addr: base, Block: 3 * KiB},
			},
			reserved: 2 * MiB, largest: 2*MiB - 10*KiB, stranded: 2*MiB - 10*KiB + KiB,
		},
		{
			name: "a free is reusable when it completes, not when it is requested",
			ops: []op{
				{Do: "malloc", Size: 4 * KiB, Addr: base},
				{Do: "free_requested", Addr: base},
				{Do: "malloc", Size: 4 * KiB, Addr: base + 4*KiB},
				{Do: "free_completed", Addr: base},
				{Do: "malloc", Size: 4 * KiB, Addr: base},
			},
			reserved: 2 * MiB, largest: 2*MiB - 8*KiB, stranded: 2*MiB - 8*KiB,
		},
		{
			name: "fully free chunks are remapped into one range: reserved does not grow",
			ops: []op{
				{Do: "malloc", Size: 4 * MiB, Addr: base},
				{Do: "malloc", Size: 4 * MiB, Addr: base + 4*MiB},
				{Do: "free", Addr: base},
				{Do: "free", Addr: base + 4*MiB},
				{Do: "malloc", Size: 8 * MiB, Addr: base + 8*MiB, Block: 8 * MiB},
			},
			reserved: 8 * MiB, peak: 8 * MiB, largest: 0, stranded: 0, remaps: 1,
			log: []string{"malloc 4194304 -> 0x100000000", "malloc 4194304 -> 0x100400000",
				"free 0x100000000 4194304", "free 0x100400000 4194304", "malloc 8388608 -> 0x100800000"},
		},
		{
			name: "remapping adds only what the free chunks lack; partly used chunks stay",
			ops: []op{
				{Do: "malloc", Size: 4 * MiB, Addr: base},
				{Do: "malloc", Size: MiB, Addr: base + 4*MiB}, // its own 2 MiB chunk
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 6 * MiB, Addr: base + 6*MiB, Block: 6 * MiB},
			},
			reserved: 8 * MiB, peak: 8 * MiB, largest: MiB, stranded: MiB, remaps: 1,
		},
		{
			name: "remap:false keeps the free chunks and grows",
			conf: "remap:false",
			ops: []op{
				{Do: "malloc", Size: 4 * MiB, Addr: base},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 6 * MiB, Addr: base + 4*MiB, Block: 6 * MiB},
			},
			reserved: 10 * MiB, largest: 4 * MiB, stranded: 0,
		},
		{
			name: "empty_cache trims only chunks with nothing in use",
			ops: []op{
				{Do: "malloc", Size: 4 * MiB, Addr: base},
				{Do: "malloc", Size: MiB, Addr: base + 4*MiB},
				{Do: "free", Addr: base},
				{Do: "empty_cache"},
			},
			reserved: 2 * MiB, largest: MiB, stranded: MiB,
			log: []string{"malloc 4194304 -> 0x100000000", "malloc 2097152 -> 0x100400000", "free 0x100000000 4194304"},
		},
		{
			name: "a release threshold returns idle chunks after a free",
			conf: "release_threshold_mb:3",
			ops: []op{
				{Do: "malloc", Size: 2 * MiB, Addr: base},
				{Do: "malloc", Size: 2 * MiB, Addr: base + 2*MiB},
				{Do: "free", Addr: base}, // 4 MiB held > 3: the idle chunk goes
				{Do: "free", Addr: base + 2*MiB},
			},
			reserved: 2 * MiB, largest: 2 * MiB, stranded: 0,
		},
		{
			name: "granularity and minimum chunk are options",
			conf: "granularity_mb:1,min_chunk_mb:32",
			ops: []op{
				{Do: "malloc", Size: 100, Addr: base},
				{Do: "malloc", Size: 40*MiB + 1, Addr: base + 32*MiB, Block: 40*MiB + 512},
			},
			reserved: 32*MiB + 41*MiB, largest: 32*MiB - 512, stranded: 32*MiB - 512 + MiB - 512,
		},
		{
			name: "separate_small keeps small requests out of large chunks' tails",
			conf: "separate_small:true",
			ops: []op{
				{Do: "malloc", Size: 5 * MiB / 2, Addr: base, Block: 5 * MiB / 2},     // 4 MiB chunk, 1.5 MiB tail
				{Do: "malloc", Size: 4 * KiB, Addr: base + 4*MiB, Block: 4 * KiB},     // not in the tail: a small chunk
				{Do: "malloc", Size: MiB, Addr: base + 4*MiB + 4*KiB},                 // 1 MiB is small: the small chunk
				{Do: "malloc", Size: MiB + 1, Addr: base + 5*MiB/2, Block: MiB + 512}, // large: the tail
			},
			reserved: 6 * MiB, largest: MiB - 4*KiB, stranded: MiB - 4*KiB + MiB/2 - 512,
		},
		{
			name: "without separate_small the small request settles in the large chunk's tail",
			ops: []op{
				{Do: "malloc", Size: 3 * MiB, Addr: base, Block: 3 * MiB},
				{Do: "malloc", Size: 4 * KiB, Addr: base + 3*MiB, Block: 4 * KiB},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 4 * MiB, Addr: base + 4*MiB, Block: 4 * MiB}, // the 4 MiB chunk is pinned
			},
			reserved: 8 * MiB, largest: 3 * MiB, stranded: 4*MiB - 4*KiB,
		},
		{
			name: "out of memory when the device refuses and nothing is idle",
			dev:  fakedev.Device{Capacity: 4 * MiB},
			ops: []op{
				{Do: "malloc", Size: 3 * MiB, Addr: base},
				{Do: "malloc", Size: MiB, Addr: base + 3*MiB},
				{Do: "malloc", Size: 1, OOM: true},
			},
			reserved: 4 * MiB, largest: 0, stranded: 0,
		},
		{
			name: "out of memory after remapping keeps the idle memory",
			dev:  fakedev.Device{Capacity: 8 * MiB},
			ops: []op{
				{Do: "malloc", Size: 4 * MiB, Addr: base},
				{Do: "malloc", Size: 2 * MiB, Addr: base + 4*MiB},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 8 * MiB, OOM: true},
				{Do: "malloc", Size: 4 * MiB, Addr: base + 6*MiB}, // the restored idle 4 MiB
			},
			reserved: 6 * MiB, largest: 0, stranded: 0, remaps: 1,
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
			if d.Used != tt.reserved || st.LargestFreeBytes != tt.largest || st.StrandedBytes != tt.stranded || p.Remaps() != tt.remaps {
				t.Errorf("after: reserved %d largest %d stranded %d remaps %d, want %d %d %d %d",
					d.Used, st.LargestFreeBytes, st.StrandedBytes, p.Remaps(), tt.reserved, tt.largest, tt.stranded, tt.remaps)
			}
			if tt.peak != 0 && d.Peak != tt.peak {
				t.Errorf("device peak %d, want %d", d.Peak, tt.peak)
			}
			if tt.log != nil && !slices.Equal(d.Log, tt.log) {
				t.Errorf("device calls:\n got %q\nwant %q", d.Log, tt.log)
			}
		})
	}
}

func TestParseConf(t *testing.T) {
	c, err := ParseConf("backend:cudaMallocAsync,granularity_mb:4,release_threshold_mb:1024")
	if err != nil {
		t.Fatal(err)
	}
	if c.Granularity != 4*MiB || c.ReleaseThreshold != 1024*MiB || c.NoRemap {
		t.Errorf("ParseConf = %+v", c)
	}
	if _, err := ParseConf("granularity:4"); err == nil || !strings.Contains(err.Error(), "granularity_mb") {
		t.Errorf("unknown key: err = %v, want one listing the known keys", err)
	}
}

// TestFractionChecksLiveBytes checks PyTorch's fraction check, made against
// the live requested bytes before the pool is asked, and the replay
// device's cap on reserved bytes that the model cannot lift.
func TestFractionChecksLiveBytes(t *testing.T) {
	d := &fakedev.Device{CapBytes: 3 * MiB, Capped: true}
	p, _ := New(d, DefaultConfig())
	fakedev.Run(t, p, d, []op{
		{Do: "malloc", Size: MiB, Addr: base},       // 2 MiB chunk, 1 MiB live
		{Do: "malloc", Size: MiB, Addr: base + MiB}, // 2 MiB live, fits the chunk
	})
	_, err := p.Malloc(MiB+1, 0) // 3 MiB + 1 live > 3 MiB
	if err == nil || !strings.Contains(err.Error(), "would exceed allowed memory") || d.Refused != 0 {
		t.Fatalf("over the fraction: err %v, device asked %d times; want PyTorch's check, device not asked", err, d.Refused)
	}
	p.FreeRequested(base) // live drops to 1 MiB at the request
	if p.used != MiB {
		t.Fatalf("live bytes %d after a free request, want %d", p.used, MiB)
	}
	// Live bytes allow it, but the pending range is not free and a new
	// chunk would take reserved over the cap: the device refuses.
	if _, err := p.Malloc(512*KiB, 0); err == nil || d.Refused != 1 {
		t.Fatalf("err %v, device refused %d times; want a refusal by the device", err, d.Refused)
	}
	p.FreeCompleted(base)
	fakedev.Run(t, p, d, []op{{Do: "malloc", Size: 512 * KiB, Addr: base}})
}
