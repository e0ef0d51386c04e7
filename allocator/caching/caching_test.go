package caching

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

const (
	B = fakeBase
	M = uint64(1 << 20)
)

func hx(v uint64) string { return fmt.Sprintf("%#x", v) }

func mal(addr, size uint64) string { return fmt.Sprintf("malloc %#x+%d", addr, size) }
func fre(addr, size uint64) string { return fmt.Sprintf("free %#x+%d", addr, size) }
func mp(addr, size uint64) string  { return fmt.Sprintf("map %#x+%d", addr, size) }
func ump(addr, size uint64) string { return fmt.Sprintf("unmap %#x+%d", addr, size) }
func rsv(addr, size uint64) string { return fmt.Sprintf("reserve %#x+%d", addr, size) }
func calls(c ...string) string     { return strings.Join(c, "; ") }

func TestRoundSize(t *testing.T) {
	d4, _ := ParseConf("roundup_power2_divisions:4")
	d1, _ := ParseConf("roundup_power2_divisions:1")
	def := DefaultConfig()
	cases := []struct {
		cfg  Config
		n    uint64
		want uint64
	}{
		{def, 1, 512}, {def, 512, 512}, {def, 513, 1024}, {def, 1048577, 1049088},
		{d4, 1200, 1536},         // guard n > 512*d is false: plain rounding
		{d4, 3000, 3072},         // f=2048, step 512
		{d4, 1500000, 1572864},   // step 262144
		{d4, 4 * M, 4 * M},       // a power of two is unchanged
		{d4, 5*M + 1, 6 * M},     // f=4 MiB, step 1 MiB
		{d1, 3000, 3072},         // 1 division: plain rounding
		{d1, 5*M + 1, 5*M + 512}, // plain rounding
		{d4, 2049, 2560},         // n > 2048: f=2048, step 512
	}
	for _, c := range cases {
		if got := c.cfg.RoundSize(c.n); got != c.want {
			t.Errorf("RoundSize(%d) with %v = %d, want %d", c.n, c.cfg.RoundupPower2Divisions, got, c.want)
		}
	}
}

func TestAllocationSize(t *testing.T) {
	def := DefaultConfig()
	big, err := ParseConf("large_segment_size_mb:32")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg     Config
		s, want uint64
	}{
		{def, 512, 2 * M}, {def, M, 2 * M}, {def, M + 512, 20 * M}, {def, 5 * M, 20 * M},
		{def, 10 * M, 10 * M}, {def, 10*M + 512, 12 * M}, {big, 5 * M, 32 * M}, {big, 10 * M, 10 * M},
	}
	for _, c := range cases {
		if got := c.cfg.AllocationSize(c.s); got != c.want {
			t.Errorf("AllocationSize(%d) = %d, want %d", c.s, got, c.want)
		}
	}
	if big.MaxNonSplitRounding != 32*M {
		t.Errorf("max_non_split_rounding follows large_segment_size: got %d", big.MaxNonSplitRounding)
	}
}

func TestParseDivisions(t *testing.T) {
	c, err := ParseConf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
	if err != nil {
		t.Fatal(err)
	}
	want := [16]uint64{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8}
	if c.RoundupPower2Divisions != want {
		t.Fatalf("divisions = %v, want %v", c.RoundupPower2Divisions, want)
	}
	c, err = ParseConf("roundup_power2_divisions:[1:4,64:8]")
	if err != nil {
		t.Fatal(err)
	}
	want = [16]uint64{4, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if c.RoundupPower2Divisions != want {
		t.Fatalf("divisions = %v, want %v", c.RoundupPower2Divisions, want)
	}
	// 1 GiB bucket of [256:1,512:2,1024:4,>:8] keeps 4: a 1.5 GiB request rounds to 1.5 GiB
	c, _ = ParseConf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
	if got := c.RoundSize(1300 * M); got != 1536*M {
		t.Fatalf("RoundSize(1300 MiB) = %d MiB, want 1536", got/M)
	}
	c, _ = ParseConf("roundup_power2_divisions:[65536:2]")
	if c.RoundupPower2Divisions[15] != 2 || c.RoundupPower2Divisions[0] != 2 {
		t.Fatalf("key beyond 32 GiB clamps to bucket 15 and fills below: %v", c.RoundupPower2Divisions)
	}
}

func TestParseConfErrors(t *testing.T) {
	for _, c := range []struct{ conf, key string }{
		{"max_split_size_mb:10", "max_split_size_mb"},
		{"large_segment_size_mb:32,max_split_size_mb:25", "max_split_size_mb"},
		{"garbage_collection_threshold:1.5", "garbage_collection_threshold"},
		{"roundup_power2_divisions:3", "roundup_power2_divisions"},
		{"roundup_power2_divisions:[3:4]", "roundup_power2_divisions"},
		{"expandable_segments:maybe", "expandable_segments"},
		{"no_such_key:1", "no_such_key"},
		{"large_segment_size_mb:8", "large_segment_size_mb"},
		{"max_split_size_mb", "max_split_size_mb"},
		{"garbage_collection_threshold:NaN", "garbage_collection_threshold"},
		{"per_process_memory_fraction:NaN", "per_process_memory_fraction"},
		{"max_split_size_mb:NaN", "max_split_size_mb"},
		{"max_split_size_mb:Inf", "max_split_size_mb"},
		{"max_split_size_mb:99999999999999999999", "above the largest"},
	} {
		_, err := ParseConf(c.conf)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("ParseConf(%q) = %v, want an error naming %s", c.conf, err, c.key)
		}
	}
	c, err := ParseConf("max_split_size_mb:40,large_segment_size_mb:32,garbage_collection_threshold:0.6,expandable_segments:True,per_process_memory_fraction:0.5,max_non_split_rounding_mb:64")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxSplitSize != 40*M || c.LargeSegmentSize != 32*M || c.GCThreshold != 0.6 || !c.Expandable || c.Fraction != 0.5 || c.MaxNonSplitRounding != 64*M {
		t.Fatalf("parsed %+v", c)
	}
	if d := DefaultConfig(); d.MaxSplitSize != math.MaxUint64 || d.MaxNonSplitRounding != 20*M {
		t.Fatalf("defaults %+v", d)
	}
}

func TestCachingRules(t *testing.T) {
	const G = uint64(1 << 30)
	runTable(t, []tableCase{
		{
			name: "small pool: 2 MiB segment, front carving, inactive split",
			steps: []step{
				{op: "malloc", size: 1000, addr: B, calls: mal(B, 2*M)},
				{op: "malloc", size: 1000, addr: B + 1024, calls: "-"},
			},
			after: "S0 " + hx(B) + ": A1024 A1024 F2095104", strand: 2095104,
		},
		{
			name: "1 MiB exactly is small, 1 MiB + 1 is large with a 20 MiB segment",
			steps: []step{
				{op: "malloc", size: M, addr: B, calls: mal(B, 2*M)},
				{op: "malloc", size: M + 1, addr: B + 2*M, calls: mal(B+2*M, 20*M)},
			},
			after: "S0 " + hx(B) + ": A1048576 F1048576 | L0 " + hx(B+2*M) + ": A1049088 F19922432", strand: M + 19922432,
		},
		{
			name: "large pool splits only when more than 1 MiB remains",
			steps: []step{
				{op: "malloc", size: 19 * M, addr: B, calls: mal(B, 20*M)},
				{op: "malloc", size: 10*M + 1, addr: B + 20*M, calls: mal(B+20*M, 12*M)},
			},
			after: "L0 " + hx(B) + ": A20971520 | L0 " + hx(B+20*M) + ": A10486272 F2096640", strand: 2096640,
		},
		{
			name: "best fit: smallest size that fits, then lowest address",
			steps: []step{
				{op: "malloc", size: 16 * M, addr: B},
				{op: "malloc", size: 12 * M, addr: B + 16*M},
				{op: "malloc", size: 12 * M, addr: B + 28*M},
				{op: "free", addr: B + 28*M}, {op: "free", addr: B}, {op: "free", addr: B + 16*M},
				{op: "malloc", size: 11 * M, addr: B + 16*M, calls: "-"},
				{op: "malloc", size: 11 * M, addr: B + 28*M, calls: "-"},
				{op: "malloc", size: 11 * M, addr: B, calls: "-"},
			},
			after:  "L0 " + hx(B) + ": A11534336 F5242880 | L0 " + hx(B+16*M) + ": A12582912 | L0 " + hx(B+28*M) + ": A12582912",
			strand: 5 * M,
		},
		{
			name: "streams never share free blocks",
			steps: []step{
				{op: "malloc", size: 1000, stream: 1, addr: B},
				{op: "free", addr: B},
				{op: "malloc", size: 1000, stream: 2, addr: B + 2*M, calls: mal(B+2*M, 2*M)},
				{op: "malloc", size: 1000, stream: 1, addr: B, calls: "-"},
			},
			after: "S1 " + hx(B) + ": A1024 F2096128 | S2 " + hx(B+2*M) + ": A1024 F2096128", strand: 2 * 2096128,
		},
		{
			name: "free merges with prev, then next; a whole segment is not stranded",
			steps: []step{
				{op: "malloc", size: 1000, addr: B}, {op: "malloc", size: 1000, addr: B + 1024}, {op: "malloc", size: 1000, addr: B + 2048},
				{op: "free", addr: B + 1024},
				{op: "free", addr: B},
				{op: "free", addr: B + 2048, calls: "-"},
			},
			after: "S0 " + hx(B) + ": F2097152", strand: 0,
		},
		{
			name: "a block waiting for its free is neither reused nor merged",
			steps: []step{
				{op: "malloc", size: 1000, addr: B}, {op: "malloc", size: 1000, addr: B + 1024},
				{op: "req", addr: B},
				{op: "malloc", size: 1000, addr: B + 2048},
				{op: "free", addr: B + 1024},
				{op: "malloc", size: 1000, addr: B + 1024},
				{op: "done", addr: B},
				{op: "malloc", size: 1000, addr: B},
			},
			after: "S0 " + hx(B) + ": A1024 A1024 A1024 F2094080", strand: 2094080,
		},
		{
			name: "max_split_size: small requests skip oversize blocks, large ones reuse within max_non_split_rounding",
			conf: "max_split_size_mb:40",
			steps: []step{
				{op: "malloc", size: 62 * M, addr: B, calls: mal(B, 62*M)},
				{op: "free", addr: B},
				{op: "malloc", size: 30 * M, addr: B + 62*M, calls: mal(B+62*M, 30*M)}, // 62 MiB block is oversize
				{op: "malloc", size: 41 * M, addr: B + 92*M, calls: mal(B+92*M, 42*M)}, // 62 >= 41+20: miss
				{op: "malloc", size: 43 * M, addr: B, calls: "-"},                      // 62 < 43+20: hit, not split
			},
			after: "L0 " + hx(B) + ": A65011712 | L0 " + hx(B+62*M) + ": A31457280 | L0 " + hx(B+92*M) + ": A44040192",
		},
		{
			name: "max_non_split_rounding_mb widens reuse",
			conf: "max_split_size_mb:40,max_non_split_rounding_mb:30",
			steps: []step{
				{op: "malloc", size: 62 * M, addr: B},
				{op: "free", addr: B},
				{op: "malloc", size: 41 * M, addr: B, calls: "-"},
			},
		},
		{
			name: "requests below max_split_size split; at or above they never do",
			conf: "max_split_size_mb:40",
			steps: []step{
				{op: "malloc", size: 30 * M, addr: B}, {op: "free", addr: B},
				{op: "malloc", size: 25 * M, addr: B, calls: "-"},
			},
			after: "L0 " + hx(B) + ": A26214400 F5242880", strand: 5 * M,
		},
		{
			name:  "cap: release every whole free segment and retry",
			total: G, frac: 0.125,
			steps: []step{
				{op: "malloc", size: 60 * M, addr: B}, {op: "malloc", size: 60 * M, addr: B + 60*M},
				{op: "free", addr: B},
				{op: "malloc", size: 62 * M, addr: B + 120*M, calls: calls(fre(B, 60*M), mal(B+120*M, 62*M))},
			},
		},
		{
			name:  "cap check uses the allocation size, not the request",
			total: G, frac: 0.125,
			steps: []step{
				{op: "malloc", size: 126 * M, addr: B},
				{op: "malloc", size: 1000, addr: B + 126*M, calls: mal(B+126*M, 2*M)},
				{op: "malloc", size: 3 * M / 2, addr: 0, calls: "-"},
			},
			strand: 2096128,
		},
		{
			name: "release_available: one oversize block large enough",
			conf: "max_split_size_mb:40", total: G, frac: 0.125,
			steps: []step{
				{op: "malloc", size: 90 * M, addr: B}, {op: "free", addr: B},
				{op: "malloc", size: 45 * M, addr: B + 90*M, calls: calls(fre(B, 90*M), mal(B+90*M, 46*M))},
			},
		},
		{
			name: "release_available: several oversize blocks from the largest down, kept released when short",
			conf: "max_split_size_mb:40", total: G, frac: 0.125,
			steps: []step{
				{op: "malloc", size: 50 * M, addr: B}, {op: "malloc", size: 42 * M, addr: B + 50*M},
				{op: "malloc", size: 30 * M, addr: B + 92*M},
				{op: "free", addr: B}, {op: "free", addr: B + 50*M},
				// 122 MiB reserved; 100 MiB needs 94 freed: 50 then 42 (all of them) is short,
				// then the full release finds nothing more, and the retry still fails.
				{op: "malloc", size: 100 * M, addr: 0, calls: calls(fre(B, 50*M), fre(B+50*M, 42*M))},
			},
		},
		{
			name: "garbage collection frees blocks of at least the mean age",
			conf: "garbage_collection_threshold:0.5", total: G, frac: 0.125,
			steps: []step{
				{op: "malloc", size: 20 * M, addr: B}, {op: "malloc", size: 20 * M, addr: B + 20*M},
				{op: "malloc", size: 20 * M, addr: B + 40*M},
				{op: "free", addr: B},
				{op: "malloc", size: 22 * M, addr: B + 60*M, calls: mal(B+60*M, 22*M)}, // 60 MiB <= 64: no GC
				{op: "free", addr: B + 20*M}, {op: "free", addr: B + 60*M},
				// ages: B 2, B+20 1, B+60 1; mean 4/3: only B goes, reclaiming 20 >= 82-64
				{op: "malloc", size: 30 * M, addr: B + 82*M, calls: calls(fre(B, 20*M), mal(B+82*M, 30*M))},
			},
		},
		{
			name: "garbage collection repeats passes until the target is reclaimed",
			conf: "garbage_collection_threshold:0.4", total: G, frac: 0.125,
			steps: []step{
				{op: "malloc", size: 20 * M, addr: B}, {op: "malloc", size: 20 * M, addr: B + 20*M},
				{op: "malloc", size: 10 * M, addr: B + 40*M},
				{op: "free", addr: B},
				{op: "malloc", size: 22 * M, addr: B + 50*M},
				{op: "free", addr: B + 20*M}, {op: "free", addr: B + 50*M},
				{op: "malloc", size: 30 * M, addr: B + 72*M,
					calls: calls(fre(B, 20*M), fre(B+20*M, 20*M), fre(B+50*M, 22*M), mal(B+72*M, 30*M))},
			},
		},
		{
			name: "empty_cache: large pool then small, each by (stream, size, address); live segments stay",
			steps: []step{
				{op: "malloc", size: 12 * M, stream: 0, addr: B},
				{op: "malloc", size: 1000, stream: 0, addr: B + 12*M},
				{op: "malloc", size: 12 * M, stream: 1, addr: B + 14*M},
				{op: "malloc", size: 10 * M, stream: 0, addr: B + 26*M},
				{op: "malloc", size: 1000, stream: 0, addr: B + 12*M + 1024},
				{op: "free", addr: B}, {op: "free", addr: B + 14*M}, {op: "free", addr: B + 26*M},
				{op: "free", addr: B + 12*M},
				{op: "empty", calls: calls(fre(B+26*M, 10*M), fre(B, 12*M), fre(B+14*M, 12*M))},
				{op: "free", addr: B + 12*M + 1024},
				{op: "empty", calls: fre(B+12*M, 2*M)},
			},
		},
	})
}

func TestExpandableRules(t *testing.T) {
	const G = uint64(1 << 30)
	// VA: ceil((1 GiB + 1 GiB/8) / page) pages
	vaL := (G + G/8 + 20*M - 1) / (20 * M) * (20 * M)
	vaS := (G + G/8 + 2*M - 1) / (2 * M) * (2 * M)
	E := "expandable_segments:True"
	var grow []step
	grow = append(grow, step{op: "malloc", size: 16 * M, addr: B, calls: calls(rsv(B, vaL), mp(B, 20*M))})
	mapped := uint64(20 * M)
	for i := uint64(1); i < 8; i++ {
		c := "-"
		if (i+1)*16*M > mapped {
			c = mp(B+mapped, 20*M)
			mapped += 20 * M
		}
		grow = append(grow, step{op: "malloc", size: 16 * M, addr: B + i*16*M, calls: c})
	}
	var freeAll []step
	for i := uint64(0); i < 8; i++ {
		freeAll = append(freeAll, step{op: "free", addr: B + i*16*M})
	}
	steps := append(append(grow, freeAll...),
		step{op: "malloc", size: 32 * M, addr: B, calls: "-"},
		step{op: "malloc", size: 32 * M, addr: B + 32*M, calls: "-"},
		step{op: "malloc", size: 32 * M, addr: B + 64*M, calls: "-"},
		step{op: "malloc", size: 32 * M, addr: B + 96*M, calls: "-"},
		// the frontier block (12 MiB before unmapped space) is avoided when another fits
		step{op: "free", addr: B + 32*M},
		step{op: "malloc", size: 10 * M, addr: B + 32*M, calls: "-"},
	)
	runTable(t, []tableCase{
		{
			name: "8 x 16 MiB map 7 pages; freed, 4 x 32 MiB map none", conf: E, total: G,
			steps: steps,
			after: "L0 " + hx(B) + ": A33554432 A10485760 F23068672 A33554432 A33554432 F12582912",
		},
		{
			name: "small pool: 2 MiB pages, own segment", conf: E, total: G,
			steps: []step{
				{op: "malloc", size: 1000, addr: B, calls: calls(rsv(B, vaS), mp(B, 2*M))},
				{op: "malloc", size: 3 * M, addr: B + vaS, calls: calls(rsv(B+vaS, vaL), mp(B+vaS, 20*M))},
			},
			after: "S0 " + hx(B) + ": A1024 F2096128 | L0 " + hx(B+vaS) + ": A3145728 F17825792",
		},
		{
			name: "empty_cache unmaps whole pages only; holes fill lowest first; empty segment destroyed", conf: E, total: G,
			steps: []step{
				{op: "malloc", size: 30 * M, addr: B, calls: calls(rsv(B, vaL), mp(B, 40*M))},
				{op: "malloc", size: 5 * M, addr: B + 30*M, calls: "-"},
				{op: "free", addr: B},
				{op: "empty", calls: ump(B, 20*M)},
				{op: "malloc", size: 25 * M, addr: B, calls: mp(B, 20*M)},
				{op: "free", addr: B}, {op: "free", addr: B + 30*M},
				{op: "empty", calls: ump(B, 40*M)},
				{op: "malloc", size: 5 * M, addr: B + vaL, calls: calls(rsv(B+vaL, vaL), mp(B+vaL, 20*M))},
			},
			after: "L0 " + hx(B+vaL) + ": A5242880 F15728640",
		},
		{
			name: "expandable cap check uses the allocation size; mapping may exceed it", conf: E, total: G, frac: 0.125,
			steps: []step{
				{op: "malloc", size: 100 * M, addr: B, calls: calls(rsv(B, vaL), mp(B, 100*M))},
				{op: "malloc", size: 11 * M, addr: B + 100*M, calls: mp(B+100*M, 20*M)}, // 100+12 <= 128; maps 20
				{op: "malloc", size: 10 * M, addr: 0, calls: "-"},                       // 120+10 > 128
			},
		},
	})
}

func TestPendingFreeReading(t *testing.T) {
	const G = uint64(1 << 30)
	setup := []step{
		{op: "malloc", size: 60 * M, addr: B},
		{op: "malloc", size: 60 * M, addr: B + 60*M},
		{op: "req", addr: B + 60*M}, // waits on another stream
	}
	runTable(t, []tableCase{
		{
			// The recorded release shows the free completed in the malloc's
			// own synchronize: the block was pending during the search.
			name: "a completion from the retry's synchronize", total: G, frac: 0.125,
			steps: append(append([]step{}, setup...),
				step{op: "rec", rec: []trace.Event{
					{Kind: trace.KindSegmentFree, Addr: B + 60*M, SizeBytes: 60 * M},
					{Kind: trace.KindSegmentAlloc, Addr: B + 120*M, SizeBytes: 50 * M}}},
				step{op: "done", addr: B + 60*M},
				step{op: "malloc", size: 50 * M, addr: B + 120*M, calls: calls(fre(B+60*M, 60*M), mal(B+120*M, 50*M))},
			),
		},
		{
			name: "a completion before the search", total: G, frac: 0.125,
			steps: append(append([]step{}, setup...),
				step{op: "done", addr: B + 60*M},
				step{op: "malloc", size: 50 * M, addr: B + 60*M, calls: "-"},
			),
			strand: 10 * M,
		},
	})
}
