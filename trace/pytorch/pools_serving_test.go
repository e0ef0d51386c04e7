package pytorch

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

var updatePools = flag.Bool("update-pools", false, "rewrite the graph traces of traces/serving with the pools InferPools finds")

// TestPoolsServingTraces checks the pool events of the CUDA-graph traces
// of traces/serving: they are what InferPools finds in the trace without
// them (with -update-pools, it writes them so).
func TestPoolsServingTraces(t *testing.T) {
	for _, c := range []struct {
		name  string
		pools int
	}{{"graphs_s1", 4}, {"graphs_expandable_s1", 4}, {"graphs_recapture_s1", 8}, {"graphs_mempool_s1", 4}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join("..", "..", "traces", "serving", c.name+".fst")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			h, evs, err := trace.ReadAll(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			var plain []trace.Event
			for _, e := range evs {
				if e.Kind < trace.KindPoolBegin || e.Kind > trace.KindPoolRelease {
					plain = append(plain, e)
				}
			}
			got, n := InferPools(plain, nil)
			if n != c.pools {
				t.Errorf("%d pools found, want %d", n, c.pools)
			}
			if *updatePools {
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
			if !reflect.DeepEqual(got, evs) {
				t.Errorf("%s: the pool events differ from what InferPools finds (%d events, want %d); -update-pools rewrites them", path, len(evs), len(got))
			}
		})
	}
}
