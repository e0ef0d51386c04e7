package async

import (
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator/internal/fakedev"
	"github.com/fragsim/fragsim/replay/driver"
)

const (
	va  = 1 << 48 // the fake device's first reserved address: the heap's base
	KiB = 1 << 10
	MiB = 1 << 20
)

type op = fakedev.Op

// probe drives a fresh default pool the way a probe program drove the real
// one: mallocs by name, frees by name, and checks each malloc's offset from
// the heap's base and the pool's reserved bytes after it.
type probe struct {
	t     *testing.T
	name  string
	d     *fakedev.Device
	p     *Policy
	addrs map[string]driver.Block
}

func newProbe(t *testing.T, name string) *probe { return newProbeConf(t, name, "") }

func newProbeConf(t *testing.T, name, conf string) *probe {
	d := &fakedev.Device{}
	cfg, err := ParseConf(conf)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &probe{t: t, name: name, d: d, p: p, addrs: map[string]driver.Block{}}
}

// malloc requests size bytes as name and checks the offset (in bytes; -1:
// unchecked) and the reserved MiB after it.
func (pr *probe) malloc(name string, size uint64, off int64, reservedMiB uint64) {
	pr.t.Helper()
	b, err := pr.p.Malloc(size, 0)
	if err != nil {
		pr.t.Fatalf("%s: malloc %s (%d bytes): %v", pr.name, name, size, err)
	}
	pr.addrs[name] = b
	if off >= 0 && b.Addr != va+uint64(off) {
		pr.t.Errorf("%s: %s (%d bytes) at offset %.4f MiB, the real pool put it at %.4f MiB",
			pr.name, name, size, float64(b.Addr-va)/MiB, float64(off)/MiB)
	}
	if pr.d.Used != reservedMiB*MiB {
		pr.t.Errorf("%s: after %s reserved %d MiB, the real pool %d MiB", pr.name, name, pr.d.Used/MiB, reservedMiB)
	}
	if msg := pr.p.Check(); msg != "" {
		pr.t.Fatalf("%s: %s", pr.name, msg)
	}
}

func (pr *probe) free(names ...string) {
	for _, n := range names {
		pr.p.FreeRequested(pr.addrs[n])
		pr.p.FreeCompleted(pr.addrs[n])
	}
}

// TestRealPoolProbes replays, on the model, probes run on the real pool:
// an NVIDIA H200, driver 580, PyTorch 2.11.0+cu130 with
// PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, one process, each probe
// on an emptied pool (empty_cache), requests as torch.empty(n, uint8);
// offsets from data_ptr, reserved from memory_stats
// reserved_bytes.all.current (the pool's ReservedMemCurrent). Every
// expected number below is what the real pool did.
func TestRealPoolProbes(t *testing.T) {
	// One request on an empty pool: reserved grows in 32 MiB pieces, for
	// small and large requests alike.
	for _, c := range []struct{ size, reserved uint64 }{
		{100, 32}, {64 * KiB, 32}, {MiB, 32}, {MiB + 1, 32}, {2*MiB + 1, 32}, {9 * MiB / 4, 32},
		{9 * MiB, 32}, {16 * MiB, 32}, {16*MiB + 1, 32}, {17 * MiB, 32}, {31 * MiB, 32},
		{32*MiB + 1, 64}, {33 * MiB, 64}, {40*MiB + 1, 64}, {100 * MiB, 128},
	} {
		newProbe(t, "one request").malloc("x", c.size, 0, c.reserved)
	}
	// Forty 2.25 MiB and twelve 9 MiB requests pack contiguously across
	// the 32 MiB pieces (the 7th 9 MiB request spans the 64 MiB mark).
	pr := newProbe(t, "forty 2.25 MiB")
	for i := range 40 {
		pr.malloc("w", 9*MiB/4, int64(i)*9*MiB/4, []uint64{32, 64, 96}[(i*9/4+9/4)/32])
	}
	pr = newProbe(t, "twelve 9 MiB")
	for i, r := range []uint64{32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 128, 128} {
		pr.malloc("w", 9*MiB, int64(i)*9*MiB, r)
	}
	// Small requests share the large ones' pieces, 512-byte aligned.
	pr = newProbe(t, "small after large")
	pr.malloc("a", 17*MiB, 0, 32)
	pr.malloc("b", 4*KiB, 17*MiB, 32)
	pr.malloc("c", 100, 17*MiB+4*KiB, 32)
	pr.malloc("d", 100, 17*MiB+4*KiB+512, 32)
	pr.malloc("e", MiB, 17*MiB+5*KiB, 32)
	// Placement among holes of 8, 4 and 6 MiB and an 11 MiB tail.
	pr = newProbe(t, "holes")
	for i, s := range []uint64{8, 1, 4, 1, 6, 1} {
		pr.malloc(string(rune('a'+i)), s*MiB, -1, 32)
	}
	pr.free("a", "c", "e")
	pr.malloc("x", 7*MiB/2, 9*MiB, 32)
	pr.malloc("y", 5*MiB, 14*MiB, 32)
	pr.malloc("z", MiB/2, 25*MiB/2, 32)
	// A hole at the start is preferred to the untouched tail.
	pr = newProbe(t, "hole or tail")
	pr.malloc("a", 10*MiB, 0, 32)
	pr.malloc("b", MiB, 10*MiB, 32)
	pr.free("a")
	pr.malloc("x", 9*MiB, 0, 32)
	pr = newProbe(t, "freed top")
	pr.malloc("a", 8*MiB, 0, 32)
	pr.malloc("b", 8*MiB, 8*MiB, 32)
	pr.free("b")
	pr.malloc("x", 4*MiB, 8*MiB, 32)
	pr.malloc("y", 4*MiB, 12*MiB, 32)
	// A growing tensor, each size made while the last is live. At 34 MiB
	// the real pool stays at 96 MiB although the new block ends 99 MiB
	// above the first: it moved the memory of the idle first piece (all
	// free since 33 MiB was made at 32 MiB). Only remap:true reproduces
	// that; the default reserves 128 MiB from there on.
	pr = newProbeConf(t, "growing tensor", "remap:true")
	pr.malloc("1", MiB, 0, 32)
	grow := [][3]uint64{{2, 1, 32}, {3, 3, 32}, {4, 6, 32}, {5, 0, 32}, {6, 5, 32}, {7, 11, 32}, {8, 0, 32},
		{9, 8, 32}, {10, 17, 32}, {11, 0, 32}, {12, 11, 32}, {13, 23, 64}, {14, 0, 64}, {15, 14, 64},
		{16, 29, 64}, {17, 0, 64}, {18, 17, 64}, {19, 35, 64}, {20, 0, 64}, {21, 20, 64}, {22, 41, 64},
		{23, 0, 64}, {24, 23, 64}, {25, 47, 96}, {26, 0, 96}, {27, 26, 96}, {28, 53, 96}, {29, 0, 96},
		{30, 29, 96}, {31, 59, 96}, {32, 0, 96}, {33, 32, 96}, {34, 65, 96}, {35, 0, 128}, {36, 35, 128},
		{37, 71, 128}, {38, 0, 128}, {39, 38, 128}}
	prev := "1"
	for _, g := range grow {
		name := string(rune('A' + g[0]))
		pr.malloc(name, g[0]*MiB, int64(g[1])*MiB, g[2])
		pr.free(prev)
		prev = name
	}
	// The pool grows at its end, merging the free tail; a hole it cannot
	// use stays, and is not remapped.
	pr = newProbe(t, "grow past a hole")
	pr.malloc("a", 30*MiB, 0, 32)
	pr.malloc("b", 8*MiB, 30*MiB, 64)
	pr.free("a")
	pr.malloc("c", 31*MiB, 38*MiB, 96)
	pr = newProbe(t, "tail of a large request")
	pr.malloc("a", 100*MiB, 0, 128)
	pr.malloc("b", MiB, 100*MiB, 128)
	pr = newProbe(t, "hole of 40 MiB")
	pr.malloc("a", 40*MiB, 0, 64)
	pr.malloc("b", 40*MiB, 40*MiB, 96)
	pr.malloc("c", 40*MiB, 80*MiB, 128)
	pr.free("b")
	pr.malloc("x", 24*MiB, 40*MiB, 128)
	pr.malloc("y", 24*MiB, 120*MiB, 160)
	pr = newProbe(t, "free then bigger")
	pr.malloc("a", 20*MiB, 0, 32)
	pr.malloc("s", 4*KiB, 20*MiB, 32)
	pr.free("a")
	pr.malloc("x", 40*MiB, -1, 64)
	pr = newProbe(t, "nine MiB holes")
	for i := range 10 {
		pr.malloc(string(rune('a'+i)), 9*MiB, int64(i)*9*MiB, []uint64{32, 32, 32, 64, 64, 64, 64, 96, 96, 96}[i])
	}
	pr.free("a", "c", "e", "g", "i")
	pr.malloc("x", 12*MiB, 90*MiB, 128)
}

func TestRules(t *testing.T) {
	tests := []struct {
		name     string
		dev      fakedev.Device
		conf     string
		ops      []op
		reserved uint64 // device bytes held after
		largest  uint64
		stranded uint64
		log      []string // device calls (nil: unchecked)
	}{
		{
			name: "requests are rounded to 512 bytes and packed from the heap's start; it is mapped in 32 MiB pieces",
			ops: []op{
				{Do: "malloc", Size: 100, Addr: va, Block: 512},
				{Do: "malloc", Size: 1000, Addr: va + 512, Block: 1024},
				{Do: "malloc", Size: 0, Addr: va + 1536, Block: 512},
				{Do: "malloc", Size: 40 * MiB, Addr: va + 2048, Block: 40 * MiB},
			},
			reserved: 64 * MiB, largest: 24*MiB - 2048, stranded: 24*MiB - 2048,
			log: []string{"map 0x1000000000000 33554432", "map 0x1000002000000 33554432"},
		},
		{
			name: "segregated fit: a request skips a free range of its own size class (4 classes per power of two)",
			ops: []op{
				{Do: "malloc", Size: 4 * MiB, Addr: va},
				{Do: "malloc", Size: MiB, Addr: va + 4*MiB},
				{Do: "malloc", Size: 5 * MiB, Addr: va + 5*MiB},
				{Do: "malloc", Size: MiB, Addr: va + 10*MiB},
				{Do: "free", Addr: va + 5*MiB}, // 5 MiB hole: class [5, 6)
				{Do: "free", Addr: va},         // 4 MiB hole: class [4, 5)
				// 4.5 MiB rounds up to class [5, 6): the 5 MiB hole, not the 4 MiB one.
				{Do: "malloc", Size: 9 * MiB / 2, Addr: va + 5*MiB},
			},
			reserved: 32 * MiB, largest: 21 * MiB, stranded: 4*MiB + MiB/2 + 21*MiB,
		},
		{
			name: "fit_bins:0 is exact best fit",
			conf: "fit_bins:0",
			ops: []op{
				{Do: "malloc", Size: 5 * MiB, Addr: va},
				{Do: "malloc", Size: MiB, Addr: va + 5*MiB},
				{Do: "malloc", Size: 9 * MiB / 2, Addr: va + 6*MiB},
				{Do: "malloc", Size: MiB, Addr: va + 21*MiB/2},
				{Do: "free", Addr: va},
				{Do: "free", Addr: va + 6*MiB},
				{Do: "malloc", Size: 4 * MiB, Addr: va + 6*MiB}, // the 4.5 MiB hole
			},
			reserved: 32 * MiB,
		},
		{
			name: "freed ranges merge with free neighbours",
			ops: []op{
				{Do: "malloc", Size: 4 * MiB, Addr: va},
				{Do: "malloc", Size: 4 * MiB, Addr: va + 4*MiB},
				{Do: "malloc", Size: 4 * MiB, Addr: va + 8*MiB},
				{Do: "malloc", Size: MiB, Addr: va + 12*MiB},
				{Do: "free", Addr: va},
				{Do: "free", Addr: va + 8*MiB},
				{Do: "free", Addr: va + 4*MiB},
				{Do: "malloc", Size: 12 * MiB, Addr: va, Block: 12 * MiB},
			},
			reserved: 32 * MiB, largest: 19 * MiB, stranded: 19 * MiB,
		},
		{
			name: "a free is reusable when it completes, not when it is requested",
			ops: []op{
				{Do: "malloc", Size: 4 * KiB, Addr: va},
				{Do: "free_requested", Addr: va},
				{Do: "malloc", Size: 4 * KiB, Addr: va + 4*KiB},
				{Do: "free_completed", Addr: va},
				{Do: "malloc", Size: 4 * KiB, Addr: va},
			},
			reserved: 32 * MiB, largest: 32*MiB - 8*KiB, stranded: 32*MiB - 8*KiB,
		},
		{
			name: "empty_cache unmaps every piece with nothing live; a later request maps them again",
			ops: []op{
				{Do: "malloc", Size: 40 * MiB, Addr: va},
				{Do: "malloc", Size: MiB, Addr: va + 40*MiB},
				{Do: "malloc", Size: 30 * MiB, Addr: va + 41*MiB},
				{Do: "free", Addr: va},
				{Do: "free", Addr: va + 41*MiB},
				{Do: "empty_cache"},                      // pieces 0 and 2 go; piece 1 holds the 1 MiB
				{Do: "malloc", Size: 20 * MiB, Addr: va}, // the 40 MiB range before it: piece 0 again
			},
			reserved: 64 * MiB, largest: 23 * MiB, stranded: 12*MiB + 31*MiB,
			log: []string{"map 0x1000000000000 33554432", "map 0x1000002000000 33554432", "map 0x1000004000000 33554432",
				"unmap 0x1000004000000 33554432", "unmap 0x1000000000000 33554432", "map 0x1000000000000 33554432"},
		},
		{
			name: "remap:true moves an idle piece's memory to where the heap grows",
			conf: "remap:true",
			ops: []op{
				{Do: "malloc", Size: 32 * MiB, Addr: va},
				{Do: "malloc", Size: 20 * MiB, Addr: va + 32*MiB},
				{Do: "free", Addr: va},
				{Do: "malloc", Size: 40 * MiB, Addr: va + 52*MiB}, // no range holds it: grow from the 12 MiB tail
			},
			reserved: 64 * MiB,
			log: []string{"map 0x1000000000000 33554432", "map 0x1000002000000 33554432",
				"unmap 0x1000000000000 33554432", "map 0x1000004000000 33554432"},
		},
		{
			name: "without remap the heap maps new memory past an idle piece",
			ops: []op{
				{Do: "malloc", Size: 32 * MiB, Addr: va},
				{Do: "malloc", Size: 20 * MiB, Addr: va + 32*MiB},
				{Do: "free", Addr: va},
				{Do: "malloc", Size: 40 * MiB, Addr: va + 52*MiB},
			},
			reserved: 96 * MiB, largest: 32 * MiB, stranded: 4 * MiB, // the idle piece is not stranded: a trim returns it
		},
		{
			name: "a release threshold unmaps idle pieces after a free",
			conf: "release_threshold_mb:64",
			ops: []op{
				{Do: "malloc", Size: 32 * MiB, Addr: va},
				{Do: "malloc", Size: 32 * MiB, Addr: va + 32*MiB},
				{Do: "malloc", Size: 32 * MiB, Addr: va + 64*MiB},
				{Do: "free", Addr: va + 64*MiB}, // 96 MiB held > 64: the idle piece goes
				{Do: "free", Addr: va},          // 64 MiB held: kept
			},
			reserved: 64 * MiB, largest: 32 * MiB, stranded: 0,
		},
		{
			name: "granularity is an option",
			conf: "granularity_mb:2",
			ops: []op{
				{Do: "malloc", Size: 100, Addr: va},
				{Do: "malloc", Size: 3 * MiB, Addr: va + 512},
			},
			reserved: 4 * MiB, largest: MiB - 512, stranded: MiB - 512,
		},
		{
			name: "out of memory when the device refuses a piece; nothing changes",
			dev:  fakedev.Device{Capacity: 64 * MiB},
			ops: []op{
				{Do: "malloc", Size: 60 * MiB, Addr: va},
				{Do: "malloc", Size: 8 * MiB, OOM: true},
				{Do: "malloc", Size: 4 * MiB, Addr: va + 60*MiB},
			},
			reserved: 64 * MiB, largest: 0, stranded: 0,
		},
		{
			name: "out of memory undoes the pieces it mapped",
			dev:  fakedev.Device{Capacity: 64 * MiB},
			ops: []op{
				{Do: "malloc", Size: 8 * MiB, Addr: va},
				{Do: "malloc", Size: 70 * MiB, OOM: true}, // would need 3 more pieces
				{Do: "malloc", Size: 40 * MiB, Addr: va + 8*MiB},
			},
			reserved: 64 * MiB, largest: 16 * MiB, stranded: 16 * MiB,
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
			if d.Used != tt.reserved {
				t.Errorf("reserved %d, want %d", d.Used, tt.reserved)
			}
			if tt.largest != 0 || tt.stranded != 0 {
				if st.LargestFreeBytes != tt.largest || st.StrandedBytes != tt.stranded {
					t.Errorf("largest %d stranded %d, want %d %d", st.LargestFreeBytes, st.StrandedBytes, tt.largest, tt.stranded)
				}
			}
			if tt.log != nil && strings.Join(d.Log, "\n") != strings.Join(tt.log, "\n") {
				t.Errorf("device calls:\n got %q\nwant %q", d.Log, tt.log)
			}
		})
	}
}

func TestParseConf(t *testing.T) {
	c, err := ParseConf("backend:cudaMallocAsync,granularity_mb:4,release_threshold_mb:1024,fit_bins:8")
	if err != nil {
		t.Fatal(err)
	}
	if c.Granularity != 4*MiB || c.ReleaseThreshold != 1024*MiB || c.FitBins != 8 {
		t.Errorf("ParseConf = %+v", c)
	}
	if d := DefaultConfig(); d.Granularity != 32*MiB || d.FitBins != 4 || d.ReleaseThreshold != 0 {
		t.Errorf("DefaultConfig = %+v, want 32 MiB pieces, 4 classes per power of two, no threshold", d)
	}
	if _, err := ParseConf("fit_bins:3"); err == nil {
		t.Error("fit_bins:3 accepted, want an error (not a power of two)")
	}
	if _, err := ParseConf("granularity:4"); err == nil || !strings.Contains(err.Error(), "granularity_mb") {
		t.Errorf("unknown key: err = %v, want one listing the known keys", err)
	}
}

// TestFractionChecksLiveBytes checks PyTorch's fraction check, made against
// the live requested bytes before the pool is asked, and the replay
// device's cap on reserved bytes that the model cannot lift.
func TestFractionChecksLiveBytes(t *testing.T) {
	d := &fakedev.Device{CapBytes: 40 * MiB, Capped: true}
	p, _ := New(d, DefaultConfig())
	fakedev.Run(t, p, d, []op{
		{Do: "malloc", Size: 16 * MiB, Addr: va},          // one 32 MiB piece
		{Do: "malloc", Size: 16 * MiB, Addr: va + 16*MiB}, // 32 MiB live, fits the piece
	})
	_, err := p.Malloc(8*MiB+1, 0) // 40 MiB + 1 live > 40 MiB
	if err == nil || !strings.Contains(err.Error(), "would exceed allowed memory") || d.Refused != 0 {
		t.Fatalf("over the fraction: err %v, device asked %d times; want PyTorch's check, device not asked", err, d.Refused)
	}
	p.FreeRequested(driver.Block{Addr: va}) // live drops to 16 MiB at the request
	if p.used != 16*MiB {
		t.Fatalf("live bytes %d after a free request, want %d", p.used, 16*MiB)
	}
	// Live bytes allow it, but the pending range is not free and a new
	// piece would take reserved over the cap: the device refuses.
	if _, err := p.Malloc(8*MiB, 0); err == nil || d.Refused != 1 {
		t.Fatalf("err %v, device refused %d times; want a refusal by the device", err, d.Refused)
	}
	p.FreeCompleted(driver.Block{Addr: va})
	fakedev.Run(t, p, d, []op{{Do: "malloc", Size: 8 * MiB, Addr: va}})
}
