package report

import (
	"strings"
	"testing"

	"github.com/fragsim/fragsim/analysis"
)

// graphsEvents is how much of the CUDA-graph serving run
// (serving/graphs_s1.fst) the pool tests read: its first 5,000 events
// capture the four graphs into their private pools and serve a few
// requests after, so that the pools hold segments at the cut's peak
// reserved, as they do at the whole run's.
const graphsEvents = 5_000

// graphsOpener opens the pool tests' cut of the CUDA-graph serving run.
func graphsOpener(t *testing.T) analysis.Opener {
	return bytesOpener(tracePrefix(t, "../../traces/serving/graphs_s1.fst", graphsEvents))
}

// TestReportRowsCarryPool checks the segment map of a CUDA-graph serving
// run: at peak reserved, the rows of the graphs' private pools carry
// their pool, come after the default pool's and add up to what analyze
// says the pools hold, and the report has the by-pool table.
func TestReportRowsCarryPool(t *testing.T) {
	rep, err := Build(graphsOpener(t), Options{Moments: 2, Compare: analysis.CompareOptions{Name: "graphs_s1.fst",
		Policies: []string{"caching"}, Settings: []analysis.Setting{}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Pools) != 5 {
		t.Fatalf("pools %+v, want the default and 4 graph pools", rep.Pools)
	}
	want := map[uint64]uint64{}
	for _, p := range rep.Pools {
		want[p.ID] = p.ReservedAtPeakBytes
		if p.ReservedAtPeakBytes == 0 {
			t.Errorf("pool %d holds nothing at peak reserved: the cut ends before the graphs hold their pools", p.ID)
		}
	}
	var peak *Layout
	for i := range rep.Layouts {
		if rep.Layouts[i].What == "peak reserved" {
			peak = &rep.Layouts[i]
		}
	}
	if peak == nil || peak.MoreSegments != 0 {
		t.Fatalf("no layout at peak reserved with every segment drawn: %v", peak)
	}
	got := map[uint64]uint64{}
	for i, r := range peak.Segments {
		got[r.PoolID] += r.Size
		if i > 0 && r.PoolID < peak.Segments[i-1].PoolID {
			t.Errorf("row %d of pool %d after one of pool %d: private pools not grouped", i, r.PoolID, peak.Segments[i-1].PoolID)
		}
		if (r.PoolID != 0) != strings.HasPrefix(r.PoolTag, "graph (") {
			t.Errorf("row %#x: pool %d tagged %q", r.Addr, r.PoolID, r.PoolTag)
		}
	}
	for id, b := range want {
		if got[id] != b {
			t.Errorf("pool %d: rows sum to %d bytes at the peak, analyze says %d", id, got[id], b)
		}
	}
	if len(got) != len(want) {
		t.Errorf("rows in pools %v, want %v", got, want)
	}
}
