//go:build cgo

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// TestRecordStreamDefersFrees drives the record_stream hook as PyTorch's
// pluggable allocator calls it (testdata/streams_harness.cc): a block a
// side stream used is freed only once the side stream's event is done,
// at the first allocation that finds it done, at empty_cache, or after a
// capture's route closed; the trace holds the free_requested and
// free_completed PyTorch's own allocator records, and the memory is kept
// until then.
func TestRecordStreamDefersFrees(t *testing.T) {
	t.Parallel()
	out, path := runCxxHarness(t, "streams_harness", "FAKE_CUDA_EVENT_QUERIES=2")
	wantOut := strings.Join([]string{
		"a freed: live 1 events 1",
		"b allocated: live 2 events 1",
		"c allocated: live 2 events 0",
		"e freed: live 3 events 2",
		"emptied: live 2 events 0",
		"g allocated in the capture: live 4 events 0",
		"i allocated: live 5 events 0",
	}, "\n")
	if got := strings.TrimSpace(out); got != wantOut {
		t.Errorf("driver state:\n%s\nwant:\n%s", got, wantOut)
	}
	_, evs, err := trace.ReadAll(mustOpen(t, path))
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[uint64]uint64{}
	var got []string
	for _, e := range evs {
		switch e.Kind {
		case trace.KindAlloc:
			sizes[e.Addr] = e.SizeBytes
			got = append(got, fmt.Sprintf("alloc %d", e.SizeBytes))
		case trace.KindFreeRequested, trace.KindFreeCompleted:
			if sizes[e.Addr] != e.SizeBytes || e.Stream != 0x100 {
				t.Errorf("%s of %#x: size %d stream %#x, want %d on 0x100", e.Kind, e.Addr, e.SizeBytes, e.Stream, sizes[e.Addr])
			}
			got = append(got, fmt.Sprintf("%s %d", e.Kind, e.SizeBytes))
		case trace.KindEmptyCache:
			got = append(got, "empty_cache")
		}
	}
	want := []string{
		"alloc 1000", "free_requested 1000",
		"alloc 2000",
		"free_completed 1000", "alloc 3000",
		"alloc 4000", "free_requested 4000", "free_completed 4000",
		"alloc 5000", "free_requested 5000", "free_completed 5000", "empty_cache",
		"alloc 6000", "free_requested 6000",
		"alloc 7000",
		"alloc 8000",
		"free_completed 6000", "alloc 9000",
		"free_requested 2000", "free_completed 2000",
		"free_requested 3000", "free_completed 3000",
		"free_requested 7000", "free_completed 7000",
		"free_requested 8000", "free_completed 8000",
		"free_requested 9000", "free_completed 9000",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDeferredFreeBeforeOOM: under a memory fraction, an allocation that
// fits only once a deferred free completed succeeds, as under PyTorch's
// allocator, whose release path waits for the side streams
// (testdata/deferred_oom_harness.cc); the trace holds the completion
// before the allocation, and no OOM.
func TestDeferredFreeBeforeOOM(t *testing.T) {
	t.Parallel()
	out, path := runCxxHarness(t, "deferred_oom_harness", "FAKE_CUDA_EVENT_QUERIES=1000")
	if got := strings.TrimSpace(out); got != "a allocated: 1, b allocated: 1" {
		t.Errorf("harness: %s", got)
	}
	_, evs, err := trace.ReadAll(mustOpen(t, path))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		switch e.Kind {
		case trace.KindAlloc, trace.KindFreeRequested, trace.KindFreeCompleted, trace.KindOOM:
			got = append(got, fmt.Sprintf("%s %d", e.Kind, e.SizeBytes>>20))
		}
	}
	want := "alloc 40\nfree_requested 40\nfree_completed 40\nalloc 40\nfree_requested 40\nfree_completed 40"
	if strings.Join(got, "\n") != want {
		t.Errorf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
	// The replay of PyTorch's allocator under the recorded fraction agrees.
	fac := func(dev driver.Device, _ *trace.Header) (driver.Policy, error) {
		return caching.New(dev, caching.Config{})
	}
	res, err := replay.RunFile(path, fac, replay.Config{})
	if err != nil || res.OOMs != 0 {
		t.Errorf("replay: %v, %d OOMs; want none", err, res.OOMs)
	}
}
