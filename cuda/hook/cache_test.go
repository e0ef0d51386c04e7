//go:build cgo

package main

import (
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestReuseCache drives the reuse cache (cache.c) through the hook's
// calls (testdata/cache_harness.cc) and checks what the driver saw: a
// freed block serves the next request of its size class on its own stream
// only, the least recently freed blocks go back past the limit, the retry
// after a refused allocation and empty_cache give every block back, and
// nothing is kept once a private-pool route opened. The trace holds the
// requests as made.
func TestReuseCache(t *testing.T) {
	t.Parallel()
	out, path := runCxxHarness(t, "cache_harness", "FRAGSIM_HOOK_CACHE_MB=1", "FAKE_CUDA_CAPACITY=2000000")
	want := strings.Join([]string{
		"a freed: allocs 1 frees 0 live 1",
		"b is a: 1",
		"c is a: 0",
		"c allocated: allocs 2 frees 0 live 2",
		"emptied: allocs 2 frees 2 live 0",
		"d e f freed: allocs 5 frees 3 live 2",
		"g is f: 1",
		"h allocated: 1",
		"h allocated: allocs 6 frees 5 live 1",
		"h freed: allocs 6 frees 6 live 0",
		"after a route: allocs 8 frees 8 live 0",
	}, "\n")
	if got := strings.TrimSpace(out); got != want {
		t.Errorf("driver state:\n%s\nwant:\n%s", got, want)
	}
	_, evs, err := trace.ReadAll(mustOpen(t, path))
	if err != nil {
		t.Fatal(err)
	}
	var sizes []uint64
	for _, e := range evs {
		if e.Kind == trace.KindAlloc {
			sizes = append(sizes, e.SizeBytes)
		}
	}
	wantSizes := []uint64{1000, 900, 1000, 400000, 400000, 400000, 400000, 1500000, 1000, 1000}
	if len(sizes) != len(wantSizes) {
		t.Fatalf("recorded allocations of %v, want %v", sizes, wantSizes)
	}
	for i := range sizes {
		if sizes[i] != wantSizes[i] {
			t.Fatalf("recorded allocations of %v, want %v", sizes, wantSizes)
		}
	}
}
