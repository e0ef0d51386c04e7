package pytorch

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

var updatePools = flag.Bool("update-pools", false, "rewrite the graph traces of traces/serving with the pools InferPools finds")

// TestPoolsServingTraces checks the pool events of the CUDA-graph traces
// of traces/serving: they are what InferPools finds in the trace without
// them (with -update-pools, it writes them so). graphs_mempool_s1 was
// imported with its final segments' segment_pool_id, which name a MemPool
// that the events alone cannot show: there, the events find the four graph
// pools, and the trace holds a fifth, the MemPool's (a, b) = (0, 1).
func TestPoolsServingTraces(t *testing.T) {
	for _, c := range []struct {
		name    string
		pools   int
		memPool bool // the trace also names a MemPool from segment_pool_id
	}{{"graphs_s1", 4, false}, {"graphs_expandable_s1", 4, false}, {"graphs_recapture_s1", 8, false}, {"graphs_mempool_s1", 4, true}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join("..", "..", "traces", "serving", c.name+".fst")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			h, evs := readSized(t, data)
			plain := make([]trace.Event, 0, len(evs))
			for _, e := range evs {
				if e.Kind < trace.KindPoolBegin || e.Kind > trace.KindPoolRelease {
					plain = append(plain, e)
				}
			}
			got, n := InferPools(plain, nil)
			if n != c.pools {
				t.Errorf("%d pools found, want %d", n, c.pools)
			}
			if *updatePools && !c.memPool { // the events alone would lose the MemPool
				var buf bytes.Buffer
				w, err := trace.NewWriter(&buf, h)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.WriteEvents(got); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if c.memPool {
				ids := map[uint64]bool{}
				for _, e := range evs {
					if e.Kind == trace.KindPoolBegin {
						ids[e.Aux] = true
					}
				}
				if len(ids) != c.pools+1 || !ids[trace.PoolID(0, 1)] {
					t.Errorf("%s: pools %v, want the %d graph pools and the MemPool %d", path, ids, c.pools, trace.PoolID(0, 1))
				}
				return
			}
			if !slices.Equal(got, evs) {
				t.Errorf("%s: the pool events differ from what InferPools finds (%d events, want %d); -update-pools rewrites them", path, len(evs), len(got))
			}
		})
	}
}

// readSized reads a whole trace into a slice of its size, counted first:
// growing it as trace.ReadAll does copies it several times, which costs
// more than the second decode under the race detector.
func readSized(t *testing.T, data []byte) (*trace.Header, []trace.Event) {
	t.Helper()
	buf := make([]trace.Event, 4096)
	n := 0
	eachBatch(t, data, buf, func(k int) { n += k })
	evs := make([]trace.Event, 0, n)
	h := eachBatch(t, data, buf, func(k int) { evs = append(evs, buf[:k]...) })
	return h, evs
}

// eachBatch reads the trace in data into buf, a batch at a time, and
// calls f with the size of each.
func eachBatch(t *testing.T, data []byte, buf []trace.Event, f func(k int)) *trace.Header {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		k, err := r.ReadEvents(buf)
		if err == io.EOF {
			return r.Header()
		}
		if err != nil {
			t.Fatal(err)
		}
		f(k)
	}
}
