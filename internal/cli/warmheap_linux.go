package cli

import (
	"runtime"
	"strconv"

	"github.com/fragsim/fragsim/trace/pickle"
)

// warmHeap readies n bytes of the heap for the import that follows, when
// the collector is off (see importGC): it allocates them, asks the kernel
// to back them with huge pages (MADV_HUGEPAGE: one fault per 2 MiB
// instead of 512), and frees them with one collection, on another
// goroutine, so that the import's allocations reuse them (the runtime
// keeps freed pages; with the collector off nothing else would be
// freed). It returns a channel closed once they are free. It does
// nothing in a 32-bit program.
//
// With the collector off every allocation is fresh memory, faulted in
// page by page. On the development VM, where a fault costs 10-15 us,
// `fragsim import` of baseline_s1 took 3,217 faults and 60.6 ms (best of
// 15; median 65.0) without, 1,405 and 45.8 ms (55.4) with; kv_decode_s1
// 8,360 and 168 ms (175) against 2,260 and 132 ms (148), for 9 MB more
// peak RSS (101 -> 110 MB). On the H200 host's 16 cores, where faults
// run in parallel, the faults fell 3-11 times (baseline_s1 9,962 ->
// 2,944, kv_decode_s1 29,091 -> 2,599) and the system time by up to
// half, but the wall time only by 0.5-2 ms at best (baseline_s1 18.4 ->
// 16.9 ms, best of 15), within noise in other calls: see
// bench/import/README.md.
func warmHeap(n int) <-chan struct{} {
	done := make(chan struct{})
	if strconv.IntSize < 64 {
		// A 32-bit address space has no room to spare: the import may
		// need all of it.
		close(done)
		return done
	}
	b := make([]byte, n)
	pickle.HugePages(b)
	runtime.KeepAlive(b)
	go func() {
		runtime.GC()
		close(done)
	}()
	return done
}
