package allocator

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"testing"

	"github.com/fragsim/fragsim/replay"
)

// TestHugeRequests replays a request of a size no device holds, then its
// free, and then an ordinary request, under the policies that model other
// allocators, on a device without a capacity (a trace undumped without a
// GPU) and on an 80 GiB one. A request the policy cannot place is an OOM
// (so its free is skipped); nothing panics, the rounding does not wrap
// around to a small block, and the replay's heap does not grow by more
// than 256 MiB.
//
// A request that fits takes the paged policy one device call per page:
// 2 MiB pages make 1 TiB half a million calls, and the everyday pass
// gives it 64 MiB pages (16,384 calls: the heap's bound is still far below
// what memory in proportion to the bytes would take); the long pass
// (FRAGSIM_LONG=1, without the race detector) the default pages.
func TestHugeRequests(t *testing.T) {
	sizes := []uint64{1 << 40, 1 << 47, 1 << 62, math.MaxUint64}
	conf := map[string]string{"paged": "page_mb:64"}
	if os.Getenv("FRAGSIM_LONG") == "1" {
		conf = nil
	}
	for _, name := range []string{"pooled", "async", "bfc", "ideal", "paged"} {
		for _, capacity := range []uint64{0, 80 << 30} {
			for _, s := range sizes {
				t.Run(fmt.Sprintf("%s/cap=%d/S=%d", name, capacity, s), func(t *testing.T) {
					f, err := NewFactory(name, conf[name], nil)
					if err != nil {
						t.Fatal(err)
					}
					ops := []rop{{kind: 'm', id: 1, size: s}, {kind: 'r', id: 1}, {kind: 'c', id: 1}, {kind: 'm', id: 2, size: 1 << 20}}
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					res, err := replay.Run(traceOf(t, ops), f, replay.Config{CapacityBytes: capacity})
					runtime.ReadMemStats(&after)
					if err != nil {
						t.Fatalf("replay: %v", err)
					}
					// What the replay device can hold: its capacity, or the
					// total it reports without one.
					fits := s <= 1<<46 && (capacity == 0 || s <= capacity)
					if wantOOMs := int64(map[bool]int{true: 0, false: 1}[fits]); res.OOMs != wantOOMs {
						t.Errorf("OOMs %d, want %d (%+v)", res.OOMs, wantOOMs, res.OOMEvents)
					}
					if fits && res.PeakReservedBytes < s {
						t.Errorf("served a request of %d bytes with %d reserved", s, res.PeakReservedBytes)
					}
					if res.Allocs != 2 || res.FinalReservedBytes < 1<<20 {
						t.Errorf("the request after it: %d allocs, %d bytes reserved at the end", res.Allocs, res.FinalReservedBytes)
					}
					if grown := after.TotalAlloc - before.TotalAlloc; grown > 256<<20 {
						t.Errorf("the replay allocated %d MiB", grown>>20)
					}
				})
			}
		}
	}
}
