package report

import (
	"strings"
	"testing"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
)

// TestReportRowsCarryPool checks the segment map of a CUDA-graph serving
// run: at peak reserved, the rows of the graphs' private pools carry
// their pool, come after the default pool's and add up to what analyze
// says the pools hold, and the report has the by-pool table.
func TestReportRowsCarryPool(t *testing.T) {
	const path = "../../traces/serving/graphs_s1.fst"
	rep, err := Build(replay.OpenFile(path), Options{Moments: 2, Compare: analysis.CompareOptions{Name: "graphs_s1.fst",
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
