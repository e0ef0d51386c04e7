package caching

import (
	"reflect"
	"testing"
)

// TestPoolRules checks private pools (CUDA graph capture, MemPool) step
// by step: where requests go while a pool is routed, what empty_cache and
// a malloc's retry release, and when a released pool's memory goes back.
func TestPoolRules(t *testing.T) {
	const G = uint64(1 << 30)
	const rem = 2*M - 1024 // what a 2 MiB segment keeps free after one 1 KiB block
	runTable(t, []tableCase{
		{
			name: "capture requests go to the graph's pool, whose blocks serve only it",
			steps: []step{
				{op: "malloc", size: 1000, addr: B, calls: mal(B, 2*M)},
				{op: "begin", pool: 1, stream: 7},
				{op: "malloc", size: 1000, stream: 7, addr: B + 2*M, calls: mal(B+2*M, 2*M)},
				{op: "malloc", size: 1000, addr: B + 1024, calls: "-"},
				{op: "malloc", size: 1000, stream: 7, addr: B + 2*M + 1024, calls: "-"},
				{op: "end", pool: 1, stream: 7},
				{op: "free", addr: B + 2*M},
				// After the capture, stream 7 is served by the default pool.
				{op: "malloc", size: 1000, stream: 7, addr: B + 4*M, calls: mal(B+4*M, 2*M)},
				// A second capture into the same pool reuses its free block.
				{op: "begin", pool: 1, stream: 7},
				{op: "malloc", size: 1000, stream: 7, addr: B + 2*M, calls: "-"},
				{op: "end", pool: 1, stream: 7},
			},
			after:  "S0 " + hx(B) + ": A1024 A1024 F2095104 | S7 " + hx(B+2*M) + ": A1024 A1024 F2095104 | S7 " + hx(B+4*M) + ": A1024 F2096128",
			strand: 2*(rem-1024) + rem,
		},
		{
			name: "empty_cache during a capture leaves the default pools alone",
			steps: []step{
				{op: "malloc", size: 1000, addr: B},
				{op: "free", addr: B},
				{op: "begin", pool: 1, stream: 7},
				{op: "empty", calls: "-"},
				{op: "end", pool: 1, stream: 7},
				{op: "empty", calls: fre(B, 2*M)},
			},
		},
		{
			name: "a released pool's free segments go at the next empty_cache, its live ones once freed",
			steps: []step{
				{op: "begin", pool: 1, stream: 7},
				{op: "malloc", size: 1000, stream: 7, addr: B, calls: mal(B, 2*M)},
				{op: "malloc", size: 2 * M, stream: 7, addr: B + 2*M, calls: mal(B+2*M, 20*M)},
				{op: "end", pool: 1, stream: 7},
				{op: "free", addr: B},
				{op: "empty", calls: "-"},
				{op: "release", pool: 1, calls: "-"},
				{op: "empty", calls: fre(B, 2*M)},
				{op: "free", addr: B + 2*M, calls: "-"},
				{op: "empty", calls: fre(B+2*M, 20*M)},
				// The pool is gone: beginning it again makes a new one.
				{op: "begin", pool: 1, stream: 7},
				{op: "malloc", size: 1000, stream: 7, addr: B + 22*M, calls: mal(B+22*M, 2*M)},
				{op: "end", pool: 1, stream: 7},
			},
			after: "S7 " + hx(B+22*M) + ": A1024 F2096128", strand: rem,
		},
		{
			name: "release order: default pools, then freeable pools in hash-table order (2 before 1), each small then large",
			steps: []step{
				{op: "begin", pool: 2, stream: 7},
				{op: "malloc", size: 2 * M, stream: 7, addr: B},
				{op: "malloc", size: 1000, stream: 7, addr: B + 20*M},
				{op: "end", pool: 2, stream: 7},
				{op: "begin", pool: 1, stream: 8},
				{op: "malloc", size: 2 * M, stream: 8, addr: B + 22*M},
				{op: "malloc", size: 1000, stream: 8, addr: B + 42*M},
				{op: "end", pool: 1, stream: 8},
				{op: "malloc", size: 1000, addr: B + 44*M},
				{op: "free", addr: B}, {op: "free", addr: B + 20*M}, {op: "free", addr: B + 22*M},
				{op: "free", addr: B + 42*M}, {op: "free", addr: B + 44*M},
				{op: "release", pool: 2}, {op: "release", pool: 1},
				{op: "empty", calls: calls(fre(B+44*M, 2*M), fre(B+20*M, 2*M), fre(B, 20*M), fre(B+42*M, 2*M), fre(B+22*M, 20*M))},
			},
		},
		{
			name:  "no release and retry while a pool is routed",
			total: 22 * M,
			steps: []step{
				{op: "malloc", size: 2 * M, addr: B},
				{op: "free", addr: B},
				{op: "begin", pool: 1, stream: 7},
				{op: "malloc", size: 1000, stream: 7, addr: B + 20*M, calls: mal(B+20*M, 2*M)},
				{op: "malloc", size: 2 * M, stream: 7, addr: 0, calls: "-"},
				{op: "end", pool: 1, stream: 7},
				{op: "malloc", size: 2 * M, stream: 7, addr: B + 22*M, calls: calls(fre(B, 20*M), mal(B+22*M, 20*M))},
			},
			after:  "S7 " + hx(B+20*M) + ": A1024 F2096128 | L7 " + hx(B+22*M) + ": A2097152 F18874368",
			strand: rem + 18874368,
		},
		{
			name: "nested pools: the newest route wins; a MemPool routed by thread takes every stream",
			steps: []step{
				{op: "begin", pool: 1, stream: 7},
				{op: "begin", pool: 2},
				{op: "malloc", size: 1000, stream: 7, addr: B, calls: mal(B, 2*M)},
				{op: "malloc", size: 1000, addr: B + 2*M, calls: mal(B+2*M, 2*M)},
				{op: "end", pool: 2},
				{op: "malloc", size: 1000, stream: 7, addr: B + 4*M, calls: mal(B+4*M, 2*M)},
				{op: "malloc", size: 1000, addr: B + 6*M, calls: mal(B+6*M, 2*M)},
				{op: "end", pool: 1, stream: 7},
				{op: "free", addr: B + 4*M},
				{op: "release", pool: 1},
				{op: "release", pool: 2},
				{op: "free", addr: B},
				{op: "empty", calls: calls(fre(B, 2*M), fre(B+4*M, 2*M))},
			},
			after: "S0 " + hx(B+2*M) + ": A1024 F2096128 | S0 " + hx(B+6*M) + ": A1024 F2096128", strand: 2 * rem,
		},
		{
			name: "expandable: each pool grows its own segments, unmapped once released",
			conf: "expandable_segments:True",
			steps: []step{
				{op: "malloc", size: 1000, addr: B, calls: calls(rsv(B, 90*G), mp(B, 2*M))},
				{op: "begin", pool: 1, stream: 7},
				{op: "malloc", size: 1000, stream: 7, addr: B + 90*G, calls: calls(rsv(B+90*G, 90*G), mp(B+90*G, 2*M))},
				{op: "end", pool: 1, stream: 7},
				{op: "malloc", size: 1000, stream: 7, addr: B + 180*G, calls: calls(rsv(B+180*G, 90*G), mp(B+180*G, 2*M))},
				{op: "free", addr: B + 90*G},
				{op: "empty", calls: "-"},
				{op: "release", pool: 1},
				{op: "empty", calls: ump(B+90*G, 2*M)},
			},
		},
	})
}

// TestFreeableOrder checks the walk order of the freeable pools against
// PyTorch's: a real release of graph pools 1, 2 and 3 freed pool 2's
// segments, then 1's, then 3's (traces/serving/graphs_recapture_s1).
func TestFreeableOrder(t *testing.T) {
	order := func(f *freeableSet) []uint64 {
		var ids []uint64
		for _, s := range f.slots {
			if s.dist >= 0 {
				ids = append(ids, s.id)
			}
		}
		return ids
	}
	var f freeableSet
	for _, id := range []uint64{1, 2, 3} {
		f.insert(id)
	}
	if got := order(&f); !reflect.DeepEqual(got, []uint64{2, 1, 3}) {
		t.Errorf("order of 1, 2, 3 = %v, want [2 1 3]", got)
	}
	f.eraseID(2)
	if got := order(&f); !reflect.DeepEqual(got, []uint64{1, 3}) {
		t.Errorf("after erasing 2: %v, want [1 3]", got)
	}
	// Many IDs: each once, whatever the collisions and growths.
	var g freeableSet
	for id := uint64(1); id <= 100; id++ {
		g.insert(id)
		g.insert(id)
	}
	seen := map[uint64]bool{}
	for _, id := range order(&g) {
		seen[id] = true
	}
	if len(seen) != 100 || g.n != 100 || len(order(&g)) != 100 {
		t.Errorf("100 IDs inserted twice: %d distinct, n = %d, %d entries", len(seen), g.n, len(order(&g)))
	}
	for id := uint64(1); id <= 100; id += 2 {
		g.eraseID(id)
	}
	for _, id := range order(&g) {
		if id%2 == 1 {
			t.Fatalf("erased ID %d still there", id)
		}
	}
	if len(order(&g)) != 50 {
		t.Errorf("%d left after erasing 50 of 100", len(order(&g)))
	}
}
