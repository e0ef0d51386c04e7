package async

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator/internal/fakedev"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
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
			name: "small requests share a 32 MiB chunk of their class, rounded to 512 bytes, in address order",
			ops: []op{
				{Do: "malloc", Size: 100, Addr: base, Block: 512},
				{Do: "malloc", Size: 1000, Addr: base + 512, Block: 1024},
				{Do: "malloc", Size: 0, Addr: base + 1536, Block: 512},
			},
			reserved: 32 * MiB, largest: 32*MiB - 2048, stranded: 32*MiB - 2048,
			log: []string{"malloc 33554432 -> 0x100000000"},
		},
		{
			name: "mid-size requests up to half a chunk are packed into a shared 32 MiB chunk",
			ops: []op{
				{Do: "malloc", Size: 9 * MiB / 4, Addr: base, Block: 9 * MiB / 4}, // a 768x768 fp32 weight
				{Do: "malloc", Size: 9 * MiB / 4, Addr: base + 9*MiB/4},
				{Do: "malloc", Size: 9 * MiB, Addr: base + 9*MiB/2, Block: 9 * MiB},
				{Do: "malloc", Size: 16 * MiB, Addr: base + 27*MiB/2}, // exactly half a chunk: shared
				{Do: "malloc", Size: 3 * MiB, Addr: base + 32*MiB},    // the 2.5 MiB left is too small: a new shared chunk
			},
			reserved: 64 * MiB, largest: 29 * MiB, stranded: 29*MiB + 5*MiB/2,
			log: []string{"malloc 33554432 -> 0x100000000", "malloc 33554432 -> 0x102000000"},
		},
		{
			name: "a request above half a chunk gets a chunk of its own rounded up to 2 MiB; mid-size requests use its tail",
			ops: []op{
				{Do: "malloc", Size: 16*MiB + 1, Addr: base, Block: 16*MiB + 512},
				{Do: "malloc", Size: 3 * MiB / 2, Addr: base + 16*MiB + 512, Block: 3 * MiB / 2},
				{Do: "malloc", Size: 17 * MiB, Addr: base + 18*MiB}, // its own chunk again
			},
			reserved: 36 * MiB, largest: MiB, stranded: MiB/2 - 512 + MiB,
			log: []string{"malloc 18874368 -> 0x100000000", "malloc 18874368 -> 0x101200000"},
		},
		{
			name: "small requests stay out of large chunks' tails",
			ops: []op{
				{Do: "malloc", Size: 17 * MiB, Addr: base},                         // 18 MiB chunk, 1 MiB tail
				{Do: "malloc", Size: 4 * KiB, Addr: base + 18*MiB, Block: 4 * KiB}, // not in the tail: a small chunk
				{Do: "malloc", Size: MiB, Addr: base + 18*MiB + 4*KiB},             // 1 MiB is small: the small chunk
			},
			reserved: 50 * MiB, largest: 31*MiB - 4*KiB, stranded: 31*MiB - 4*KiB + MiB,
		},
		{
			name: "separate_small:false lets a small request settle in a large chunk's tail and pin it",
			conf: "separate_small:false",
			ops: []op{
				{Do: "malloc", Size: 17 * MiB, Addr: base},
				{Do: "malloc", Size: 4 * KiB, Addr: base + 17*MiB, Block: 4 * KiB},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 18 * MiB, Addr: base + 18*MiB, Block: 18 * MiB}, // the first chunk is pinned
			},
			reserved: 36 * MiB, largest: 17 * MiB, stranded: 18*MiB - 4*KiB,
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
			reserved: 32 * MiB, largest: 32*MiB - 10*KiB, stranded: 32*MiB - 10*KiB + KiB,
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
			reserved: 32 * MiB, largest: 32*MiB - 8*KiB, stranded: 32*MiB - 8*KiB,
		},
		{
			name: "fully free chunks are remapped into one range: reserved does not grow",
			ops: []op{
				{Do: "malloc", Size: 20 * MiB, Addr: base},
				{Do: "malloc", Size: 20 * MiB, Addr: base + 20*MiB},
				{Do: "free", Addr: base},
				{Do: "free", Addr: base + 20*MiB},
				{Do: "malloc", Size: 40 * MiB, Addr: base + 40*MiB, Block: 40 * MiB},
			},
			reserved: 40 * MiB, peak: 40 * MiB, largest: 0, stranded: 0, remaps: 1,
			log: []string{"malloc 20971520 -> 0x100000000", "malloc 20971520 -> 0x101400000",
				"free 0x100000000 20971520", "free 0x101400000 20971520", "malloc 41943040 -> 0x102800000"},
		},
		{
			name: "remapping adds only what the free chunks lack; partly used chunks stay",
			ops: []op{
				{Do: "malloc", Size: 20 * MiB, Addr: base},
				{Do: "malloc", Size: 16 * MiB, Addr: base + 20*MiB}, // a shared chunk
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 24 * MiB, Addr: base + 52*MiB, Block: 24 * MiB},
			},
			reserved: 56 * MiB, peak: 56 * MiB, largest: 16 * MiB, stranded: 16 * MiB, remaps: 1,
		},
		{
			name: "remap:false keeps the free chunks and grows",
			conf: "remap:false",
			ops: []op{
				{Do: "malloc", Size: 20 * MiB, Addr: base},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 24 * MiB, Addr: base + 20*MiB, Block: 24 * MiB},
			},
			reserved: 44 * MiB, largest: 20 * MiB, stranded: 0,
		},
		{
			name: "empty_cache trims only chunks with nothing in use",
			ops: []op{
				{Do: "malloc", Size: 20 * MiB, Addr: base},
				{Do: "malloc", Size: 4 * MiB, Addr: base + 20*MiB},
				{Do: "free", Addr: base},
				{Do: "empty_cache"},
			},
			reserved: 32 * MiB, largest: 28 * MiB, stranded: 28 * MiB,
			log: []string{"malloc 20971520 -> 0x100000000", "malloc 33554432 -> 0x101400000", "free 0x100000000 20971520"},
		},
		{
			name: "a release threshold returns idle chunks after a free",
			conf: "release_threshold_mb:40",
			ops: []op{
				{Do: "malloc", Size: 20 * MiB, Addr: base},
				{Do: "malloc", Size: 20 * MiB, Addr: base + 20*MiB},
				{Do: "malloc", Size: 20 * MiB, Addr: base + 40*MiB},
				{Do: "free", Addr: base},          // 60 MiB held > 40: the idle chunk goes
				{Do: "free", Addr: base + 20*MiB}, // 40 MiB held: kept
			},
			reserved: 40 * MiB, largest: 20 * MiB, stranded: 0,
		},
		{
			name: "granularity and chunk size are options; large_mb defaults to half a chunk",
			conf: "granularity_mb:1,min_chunk_mb:64",
			ops: []op{
				{Do: "malloc", Size: 100, Addr: base},                                       // small class: a 64 MiB chunk
				{Do: "malloc", Size: 32 * MiB, Addr: base + 64*MiB},                         // half a chunk: a shared chunk
				{Do: "malloc", Size: 40*MiB + 1, Addr: base + 128*MiB, Block: 40*MiB + 512}, // its own chunk, 41 MiB
			},
			reserved: 64*MiB + 64*MiB + 41*MiB, largest: 64*MiB - 512,
			stranded: 64*MiB - 512 + 32*MiB + MiB - 512,
		},
		{
			name: "large_mb sets the bound of shared chunks",
			conf: "large_mb:8",
			ops: []op{
				{Do: "malloc", Size: 9 * MiB, Addr: base},          // its own 10 MiB chunk
				{Do: "malloc", Size: 8 * MiB, Addr: base + 10*MiB}, // a shared 32 MiB chunk
			},
			reserved: 42 * MiB, largest: 24 * MiB, stranded: 25 * MiB,
		},
		{
			name: "out of memory when the device refuses and nothing is idle",
			dev:  fakedev.Device{Capacity: 40 * MiB},
			ops: []op{
				{Do: "malloc", Size: 20 * MiB, Addr: base},
				{Do: "malloc", Size: 20 * MiB, Addr: base + 20*MiB},
				{Do: "malloc", Size: 1, OOM: true}, // a small chunk does not fit
			},
			reserved: 40 * MiB, largest: 0, stranded: 0,
		},
		{
			name: "out of memory after remapping keeps the idle memory",
			dev:  fakedev.Device{Capacity: 40 * MiB},
			ops: []op{
				{Do: "malloc", Size: 20 * MiB, Addr: base},
				{Do: "malloc", Size: 18 * MiB, Addr: base + 20*MiB},
				{Do: "free", Addr: base},
				{Do: "malloc", Size: 40 * MiB, OOM: true},
				{Do: "malloc", Size: 20 * MiB, Addr: base + 38*MiB}, // the restored idle 20 MiB
			},
			reserved: 38 * MiB, largest: 0, stranded: 0, remaps: 1,
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
	c, err = ParseConf("large_mb:8,separate_small:false")
	if err != nil || c.LargeAbove != 8*MiB || c.SeparateSmall || c.MinChunk != 32*MiB {
		t.Errorf("ParseConf = %+v, %v; want large_mb 8 MiB, 32 MiB chunks, no small class", c, err)
	}
	if d := DefaultConfig(); d.MinChunk != 32*MiB || !d.SeparateSmall || d.Granularity != 2*MiB {
		t.Errorf("DefaultConfig = %+v, want 32 MiB shared chunks, 2 MiB granularity, a small class", d)
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
	cfg := DefaultConfig()
	cfg.MinChunk = 2 * MiB
	p, _ := New(d, cfg)
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

// realBaselinePeak is the pool's ReservedMemHigh (memory_stats
// reserved_bytes.all.peak) of a real run of traces/workloads/multi_agent.py
// --seed 1 under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync on an
// NVIDIA H200 (PyTorch 2.11.0+cu130, driver 580): key baseline_async of the
// run's timings.json (traces/workloads/record_snapshots.sh).
// testdata/baseline_s1.fst is the import of the same seeded workload's
// native-allocator snapshot: the same request stream.
const realBaselinePeak = 2449473536

// TestRealBaselinePeak replays the real trace through the model and checks
// its peak reserved against the real pool's; the rules before the size
// classes (every request in a chunk of its own) must miss it, or the trace
// would not tell the readings apart.
func TestRealBaselinePeak(t *testing.T) {
	peak := func(conf string) uint64 {
		cfg, err := ParseConf(conf)
		if err != nil {
			t.Fatal(err)
		}
		res, err := replay.RunFile("testdata/baseline_s1.fst", func(dev replay.Device, _ *trace.Header) (replay.Policy, error) {
			return New(dev, cfg)
		}, replay.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if res.OOMs != 0 {
			t.Fatalf("%q: %d OOMs", conf, res.OOMs)
		}
		return res.PeakReservedBytes
	}
	errPct := func(p uint64) float64 { return 100 * (float64(p)/realBaselinePeak - 1) }
	if p := peak(""); math.Abs(errPct(p)) > 10 {
		t.Errorf("model peak %d bytes, %+.1f%% off the real %d", p, errPct(p), uint64(realBaselinePeak))
	}
	if p := peak("min_chunk_mb:2,separate_small:false"); math.Abs(errPct(p)) <= 10 {
		t.Errorf("one chunk per request: peak %d bytes, %+.1f%% off the real: the trace does not discriminate", p, errPct(p))
	}
}
