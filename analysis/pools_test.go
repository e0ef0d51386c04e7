package analysis

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

func analyzeFile(t *testing.T, path string) *Analysis {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Analyze(opener(data), AnalyzeOptions{NoAdvice: true, Name: path})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPoolsOfGraphServing checks the by-pool breakdown of a serving run
// with CUDA graphs captured for four batch sizes: the default pool and one
// private pool a graph, whose reserved bytes at the peak add up to the
// peak, and a what-if without each graph that reserves no more than the
// run itself.
func TestPoolsOfGraphServing(t *testing.T) {
	a := analyzeFile(t, "../traces/serving/graphs_s1.fst")
	if len(a.Pools) != 5 || a.Pools[0].ID != 0 || a.Pools[0].Kind != "default" {
		t.Fatalf("pools %+v, want the default pool and 4 graph pools", a.Pools)
	}
	peak := a.Result.PeakReservedBytes
	var sum, private uint64
	var stranded uint64
	for i, p := range a.Pools {
		sum += p.ReservedAtPeakBytes
		stranded += p.StrandedAtPeakBytes
		if p.ActiveAtPeakBytes+p.StrandedAtPeakBytes > p.ReservedAtPeakBytes || p.PeakReservedBytes < p.ReservedAtPeakBytes {
			t.Errorf("pool %s: active %d + stranded %d over reserved %d, or own peak %d below it",
				p.Label, p.ActiveAtPeakBytes, p.StrandedAtPeakBytes, p.ReservedAtPeakBytes, p.PeakReservedBytes)
		}
		if i == 0 {
			continue
		}
		private += p.ReservedAtPeakBytes
		if p.Kind != "graph" || p.Stream == 0 || !strings.HasPrefix(p.Label, "graph (") {
			t.Errorf("pool %d: kind %q, stream %#x, label %q: want a graph pool with its capture stream", p.ID, p.Kind, uint64(p.Stream), p.Label)
		}
		if p.WithoutError != "" || p.WithoutPeakReservedBytes == 0 || p.WithoutPeakReservedBytes > peak {
			t.Errorf("without %s: peak %d (error %q), want at most the run's %d", p.Label, p.WithoutPeakReservedBytes, p.WithoutError, peak)
		}
		if int64(peak)-int64(p.WithoutPeakReservedBytes) != p.SavedBytes {
			t.Errorf("without %s: saves %d, want %d − %d", p.Label, p.SavedBytes, peak, p.WithoutPeakReservedBytes)
		}
	}
	if sum != peak {
		t.Errorf("pools reserve %d at the peak, want the peak reserved %d", sum, peak)
	}
	if private == 0 || private != a.PrivateAtPeakBytes() {
		t.Errorf("private pools hold %d at the peak, PrivateAtPeakBytes %d", private, a.PrivateAtPeakBytes())
	}
	bd := a.Breakdowns[0]
	if len(bd.ByPool) == 0 || stranded != bd.StrandedBytes {
		t.Errorf("by-pool stranded %d (table %+v), want the breakdown's %d", stranded, bd.ByPool, bd.StrandedBytes)
	}
	var tableSum uint64
	for _, s := range bd.ByPool {
		tableSum += s.StrandedBytes
	}
	if tableSum != bd.StrandedBytes {
		t.Errorf("by-pool table sums to %d, want %d", tableSum, bd.StrandedBytes)
	}
	var buf bytes.Buffer
	if err := a.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"Memory by pool", "by pool:", "private pools (CUDA graphs, MemPools) hold " + FmtBytes(private), "saves "} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

// TestNoPoolsWithoutPrivatePools checks that a trace without private
// pools shows nothing by pool.
func TestNoPoolsWithoutPrivatePools(t *testing.T) {
	a := analyzeFile(t, "../traces/conformance/plain_small.fst")
	if a.Pools != nil {
		t.Errorf("pools %+v for a trace without private pools", a.Pools)
	}
	for _, bd := range a.Breakdowns {
		if bd.ByPool != nil {
			t.Errorf("%s: by-pool table %+v", bd.What, bd.ByPool)
		}
	}
	var buf bytes.Buffer
	if err := a.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(buf.String()), "pool") {
		t.Errorf("text mentions pools:\n%s", buf.String())
	}
}

// TestWithoutPoolDropsItsRequests checks the trace the what-if replays:
// the requests routed to the pool, their frees and the pool's events are
// left out, the rest (other streams during the capture, the same address
// reused after its free) kept.
func TestWithoutPoolDropsItsRequests(t *testing.T) {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{})
	if err != nil {
		t.Fatal(err)
	}
	evs := []trace.Event{
		{Kind: trace.KindAlloc, Addr: 0x100, SizeBytes: 10, Stream: 7},
		{Kind: trace.KindPoolBegin, Stream: 7, Aux: 3},
		{Kind: trace.KindAlloc, Addr: 0x200, SizeBytes: 20, Stream: 7},
		{Kind: trace.KindAlloc, Addr: 0x300, SizeBytes: 30, Stream: 8},
		{Kind: trace.KindPoolEnd, Stream: 7, Aux: 3},
		{Kind: trace.KindFreeRequested, Addr: 0x200, SizeBytes: 20, Stream: 7},
		{Kind: trace.KindFreeCompleted, Addr: 0x200, SizeBytes: 20, Stream: 7},
		{Kind: trace.KindAlloc, Addr: 0x200, SizeBytes: 40, Stream: 7},
		{Kind: trace.KindPoolRelease, Aux: 3},
	}
	for i := range evs {
		evs[i].TimeNS = int64(i + 1)
		if err := w.WriteEvent(evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, c, err := withoutPool(opener(buf.Bytes()), 3)()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []string
	ev := make([]trace.Event, 16)
	for {
		n, err := r.ReadEvents(ev)
		for _, e := range ev[:n] {
			got = append(got, fmt.Sprintf("%s@%x/%d", e.Kind, e.Addr, e.SizeBytes))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := "alloc@100/10 alloc@300/30 alloc@200/40"
	if strings.Join(got, " ") != want {
		t.Errorf("events %q, want %q", strings.Join(got, " "), want)
	}
}

// TestPoolsWhenPeakPrecedesCaptures checks a run whose peak comes before
// any capture: at the peak the default pool holds everything, the graph
// pool has its own peak later, and leaving it out saves nothing.
func TestPoolsWhenPeakPrecedesCaptures(t *testing.T) {
	const mib = 1 << 20
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{})
	if err != nil {
		t.Fatal(err)
	}
	evs := []trace.Event{
		{Kind: trace.KindAlloc, Addr: 0x1000000, SizeBytes: 100 * mib},
		{Kind: trace.KindAlloc, Addr: 0x9000000, SizeBytes: 512},
		{Kind: trace.KindFreeCompleted, Addr: 0x1000000, SizeBytes: 100 * mib},
		{Kind: trace.KindEmptyCache},
		{Kind: trace.KindPoolBegin, Stream: 7, Aux: 1},
		{Kind: trace.KindAlloc, Addr: 0x20000000, SizeBytes: 4 * mib, Stream: 7},
		{Kind: trace.KindPoolEnd, Stream: 7, Aux: 1},
	}
	for i := range evs {
		evs[i].TimeNS = int64(i + 1)
		if err := w.WriteEvent(evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := Analyze(opener(buf.Bytes()), AnalyzeOptions{NoAdvice: true})
	if err != nil {
		t.Fatal(err)
	}
	peak := a.Result.PeakReservedBytes
	if len(a.Pools) != 2 {
		t.Fatalf("pools %+v, want the default and one graph pool", a.Pools)
	}
	d, g := a.Pools[0], a.Pools[1]
	if d.ReservedAtPeakBytes != peak || d.PeakReservedBytes != peak || g.ReservedAtPeakBytes != 0 || g.PeakReservedBytes == 0 {
		t.Errorf("default pool %+v, graph pool %+v: want all of the peak %d in the default pool and the graph's own peak later", d, g, peak)
	}
	if g.Label != "graph (1,0) pool, stream 0x7" || g.WithoutPeakReservedBytes != peak || g.SavedBytes != 0 {
		t.Errorf("graph pool %+v: want label \"graph (1,0) pool, stream 0x7\" and no saving without it (peak %d)", g, peak)
	}
}
