package caching

import (
	"fmt"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestPoolSegments checks that each segment is listed with the private
// pool that holds it, 0 for the default pool, in both layouts.
func TestPoolSegments(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		a := mustNew(t, newFake(), conf)
		mustMalloc := func(size uint64, stream trace.StreamID) {
			if _, err := a.Malloc(size, stream); err != nil {
				t.Fatal(err)
			}
		}
		mustMalloc(1000, 0)
		if err := a.BeginPool(5, 7); err != nil {
			t.Fatal(err)
		}
		mustMalloc(30*M, 7)
		a.EndPool(5, 7)
		if err := a.BeginPool(trace.PoolID(0, 1), 0); err != nil {
			t.Fatal(err)
		}
		mustMalloc(1000, 9)
		a.EndPool(trace.PoolID(0, 1), 0)
		got := map[string]uint64{}
		var plain int
		a.PoolSegments(func(seg trace.Segment, pool uint64) bool {
			got[fmt.Sprintf("%s/%d", seg.Pool, seg.Stream)] = pool
			return true
		})
		a.Segments(func(trace.Segment) bool { plain++; return true })
		want := map[string]uint64{"small/0": 0, "large/7": 5, "small/9": trace.PoolID(0, 1)}
		if fmt.Sprint(got) != fmt.Sprint(want) || plain != len(want) {
			t.Errorf("%q: pools of segments %v (%d listed by Segments), want %v", conf, got, plain, want)
		}
	}
}
