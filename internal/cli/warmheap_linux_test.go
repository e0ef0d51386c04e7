package cli

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"testing"
)

// TestWarmHeap checks that warmHeap leaves the memory it readied free in
// the heap, kept for the allocations that follow, with the collector off
// as importGC sets it.
func TestWarmHeap(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("warmHeap does nothing in a 32-bit program")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(gcOffLimitBytes))
	read := func(name string) uint64 {
		s := []metrics.Sample{{Name: name}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	const free, total = "/memory/classes/heap/free:bytes", "/memory/classes/total:bytes"
	runtime.GC()
	before := read(free)
	const n = 64 << 20
	<-warmHeap(n)
	// Most of it (the test's other allocations meanwhile may take some).
	if got := read(free); got < before+n/2 {
		t.Fatalf("free heap after warmHeap(%d): %d bytes, %d before", n, got, before)
	}
	// The next allocations take it: the memory mapped does not grow.
	mapped := read(total)
	b := make([]byte, n/2)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	if got := read(total); got > mapped+(8<<20) {
		t.Fatalf("%d bytes more mapped for %d bytes allocated after warmHeap", got-mapped, n/2)
	}
}
