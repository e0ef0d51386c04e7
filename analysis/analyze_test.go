package analysis

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

func TestBreakdownSharesStrandedByLiveBlocks(t *testing.T) {
	p := &fakePolicy{segs: []trace.Segment{
		// 6 MiB free, kept by a 2 MiB block (agent a) and a 4 MiB block (agent b):
		// shares 2 and 4 MiB.
		{Stream: 7, SizeBytes: 12 * mib, Blocks: []trace.Block{
			blk(0, 2*mib, trace.BlockAllocated),
			blk(2*mib, 6*mib, trace.BlockInactive),
			blk(8*mib, 4*mib, trace.BlockPendingFree),
		}},
		// Wholly free: releasable, not stranded.
		{SizeBytes: 2 * mib, Blocks: []trace.Block{blk(1<<30, 2*mib, trace.BlockInactive)}},
		// Wholly live: nothing stranded.
		{SizeBytes: 2 * mib, Blocks: []trace.Block{blk(2<<30, 2*mib, trace.BlockAllocated)}},
		// 1 MiB free kept by one block the analysis has no attribution for.
		{Stream: 9, SizeBytes: 3 * mib, Blocks: []trace.Block{
			blk(3<<30, 2*mib, trace.BlockAllocated), blk(3<<30+2*mib, mib, trace.BlockInactive)}},
	}}
	tr := &attributions{in: p, m: map[uint64]attribution{
		0:       {size: 2*mib - 100, stream: 7, marker: "agent a", stack: "attn"},
		8 * mib: {size: 4 * mib, stream: 7, marker: "agent b"},
	}}
	x := newExplainer(nil)
	bd := x.breakdown(tr, "peak reserved", Moment{Index: 3})
	if bd.StrandedBytes != 7*mib || bd.SplitSegments != 2 {
		t.Fatalf("stranded %d in %d segments, want 7 MiB in 2", bd.StrandedBytes, bd.SplitSegments)
	}
	want := map[string]map[string]uint64{
		"size":   {"[1 MiB, 2 MiB)": 2 * mib, "[4 MiB, 8 MiB)": 4 * mib, "(unknown)": 1 * mib},
		"stream": {"stream 0x7": 6 * mib, "stream 0x9": 1 * mib},
		"marker": {"agent a": 2 * mib, "agent b": 4 * mib, "(unknown)": 1 * mib},
		"stack":  {"attn": 2 * mib, "(no stack)": 5 * mib},
	}
	got := map[string][]Share{"size": bd.BySize, "stream": bd.ByStream, "marker": bd.ByMarker, "stack": bd.ByStack}
	for table, w := range want {
		g := got[table]
		if len(g) != len(w) {
			t.Errorf("%s: %+v, want %v", table, g, w)
			continue
		}
		var sum uint64
		for i, s := range g {
			if w[s.Key] != s.StrandedBytes {
				t.Errorf("%s[%q] = %d, want %d", table, s.Key, s.StrandedBytes, w[s.Key])
			}
			if i > 0 && s.StrandedBytes > g[i-1].StrandedBytes {
				t.Errorf("%s not sorted: %+v", table, g)
			}
			sum += s.StrandedBytes
		}
		if sum != bd.StrandedBytes {
			t.Errorf("%s sums to %d, want %d", table, sum, bd.StrandedBytes)
		}
	}
	if bd.ByMarker[0].Key != "agent b" || bd.ByMarker[0].Pct != 400.0/7 {
		t.Errorf("top marker %+v, want agent b at %v%%", bd.ByMarker[0], 400.0/7)
	}
}

func TestMomentBucketsTop(t *testing.T) {
	mb := newMomentBuckets(4)
	// 8 moments: buckets merge to width 2: {0,1} {2,3} {4,5} {6,7}.
	stranded := []uint64{5, 1, 9, 2, 3, 8, 7, 4}
	for i, s := range stranded {
		mb.add(Moment{Index: int64(i), StrandedBytes: s})
	}
	if len(mb.buckets) != 4 || mb.width != 2 {
		t.Fatalf("%d buckets of width %d", len(mb.buckets), mb.width)
	}
	// Bucket worsts: 5@0, 9@2, 8@5, 7@6. Top: 9 (bucket 1), then 8 (bucket 2)
	// is a neighbour: skipped; 7 (bucket 3)... also 5 (bucket 0) is a
	// neighbour of bucket 1. So: 9, 7.
	top := mb.top(3)
	if len(top) != 2 || top[0].Index != 2 || top[1].Index != 6 {
		t.Errorf("top %+v, want events 2 and 6", top)
	}
	// Ties on stranded bytes go to the larger reserved − active.
	a := Moment{StrandedBytes: 1, ReservedBytes: 10, ActiveBytes: 2}
	b := Moment{StrandedBytes: 1, ReservedBytes: 10, ActiveBytes: 5}
	if !worse(a, b) || worse(b, a) {
		t.Error("tie not broken by reserved − active")
	}
}

func TestNextPow2(t *testing.T) {
	for n, want := range map[uint64]uint64{0: 0, 1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 1000: 1024, 1 << 20: 1 << 20, 1<<20 + 1: 2 << 20} {
		if got := nextPow2(n); got != want {
			t.Errorf("nextPow2(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestPadTransform(t *testing.T) {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic})
	if err != nil {
		t.Fatal(err)
	}
	agent := w.String("agent-7")
	stack := w.Stack([]trace.Frame{{Func: w.String("forward"), File: w.String("m.py"), Line: 3}})
	for _, e := range []trace.Event{
		{Kind: trace.KindMarker, Marker: trace.MarkerAgent, Text: agent, TimeNS: 1},
		{Kind: trace.KindSegmentAlloc, Addr: 1 << 20, SizeBytes: 2 << 20, TimeNS: 2},
		{Kind: trace.KindAlloc, Addr: 1 << 20, SizeBytes: 1000, Stack: stack, TimeNS: 2},
		{Kind: trace.KindFreeRequested, Addr: 1 << 20, SizeBytes: 1000, TimeNS: 3},
		{Kind: trace.KindFreeCompleted, Addr: 1 << 20, SizeBytes: 1000, TimeNS: 3},
		{Kind: trace.KindAlloc, Addr: 1 << 21, SizeBytes: 4096, TimeNS: 4},
	} {
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	data := buf.Bytes()
	r, c, err := padTransform(opener(data))()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var evs []trace.Event
	for {
		e, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if len(evs) != 5 {
		t.Fatalf("%d events, want 5 (the segment_alloc dropped)", len(evs))
	}
	if evs[0].Kind != trace.KindMarker || r.String(evs[0].Text) != "agent-7" {
		t.Errorf("marker %+v text %q", evs[0], r.String(evs[0].Text))
	}
	if evs[1].SizeBytes != 1024 || evs[2].SizeBytes != 1024 || evs[3].SizeBytes != 1024 || evs[4].SizeBytes != 4096 {
		t.Errorf("sizes %d %d %d %d, want 1024 ×3 and 4096", evs[1].SizeBytes, evs[2].SizeBytes, evs[3].SizeBytes, evs[4].SizeBytes)
	}
	fr := r.Stack(evs[1].Stack)
	if len(fr) != 1 || r.String(fr[0].Func) != "forward" || r.String(fr[0].File) != "m.py" || fr[0].Line != 3 {
		t.Errorf("stack %+v", fr)
	}
	if h := r.Header(); len(h.Approximate) != 1 || !strings.Contains(h.Approximate[0], "padded") {
		t.Errorf("header approximate %v", h.Approximate)
	}
}

func TestAnalyzeEndToEnd(t *testing.T) {
	data := genTrace(t, 30000, 3)
	a, err := Analyze(opener(data), AnalyzeOptions{Name: "gen"})
	if err != nil {
		t.Fatal(err)
	}
	r := a.Result
	if len(a.Breakdowns) == 0 || a.Breakdowns[0].What != "peak reserved" {
		t.Fatalf("breakdowns %+v", a.Breakdowns)
	}
	pk := a.Breakdowns[0]
	if pk.Moment.Index != r.Fragmentation.PeakIndex || pk.Moment.ReservedBytes != r.PeakReservedBytes {
		t.Errorf("peak breakdown at event %d (%d bytes), replay peaked at %d (%d bytes)",
			pk.Moment.Index, pk.Moment.ReservedBytes, r.Fragmentation.PeakIndex, r.PeakReservedBytes)
	}
	if pk.StrandedBytes != r.Fragmentation.StrandedBytes {
		t.Errorf("breakdown stranded %d, policy says %d at peak", pk.StrandedBytes, r.Fragmentation.StrandedBytes)
	}
	for _, bd := range a.Breakdowns {
		for name, tab := range map[string][]Share{"size": bd.BySize, "stream": bd.ByStream, "marker": bd.ByMarker, "stack": bd.ByStack} {
			var sum uint64
			for _, s := range tab {
				sum += s.StrandedBytes
			}
			// Shares are rounded to bytes: allow one byte per row.
			if d := int64(sum) - int64(bd.StrandedBytes); d > int64(len(tab)) || -d > int64(len(tab)) {
				t.Errorf("%s %s sums to %d, stranded %d", bd.What, name, sum, bd.StrandedBytes)
			}
		}
	}
	if a.Markers != 3 || !a.HasStacks {
		t.Errorf("markers %d stacks %v, want 3 agents with stacks", a.Markers, a.HasStacks)
	}
	var n int64
	for _, c := range a.Requests {
		n += c.Count
	}
	if n != r.Allocs {
		t.Errorf("request classes count %d, replay served %d", n, r.Allocs)
	}
	if len(a.Moments) == 0 || a.Moments[0].StrandedBytes != r.Fragmentation.MaxStrandedBytes {
		t.Errorf("worst moment %+v, max stranded %d", a.Moments, r.Fragmentation.MaxStrandedBytes)
	}
	if len(a.Advice) != len(DefaultSweep()) {
		t.Fatalf("%d advice rows, want %d", len(a.Advice), len(DefaultSweep()))
	}
	for i, ad := range a.Advice {
		if ad.Error != "" {
			t.Errorf("%s: %s", ad.Setting, ad.Error)
		}
		if ad.Rank != i+1 {
			t.Errorf("rank %d at %d", ad.Rank, i)
		}
		if i > 0 && ad.AtPeakPct < a.Advice[i-1].AtPeakPct-pctEqual {
			t.Errorf("advice not ranked: %v after %v", ad.AtPeakPct, a.Advice[i-1].AtPeakPct)
		}
		if ad.Knob == "empty_cache" && ad.DeviceCalls <= a.Baseline.DeviceAllocs+a.Baseline.DeviceFrees {
			t.Errorf("%s: %d device calls, no more than the baseline's", ad.Setting, ad.DeviceCalls)
		}
	}
	var out bytes.Buffer
	if err := a.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Worst moments", "Stranded at peak reserved", "by request size", "by agent or model",
		"by call stack", "Request sizes", "Advice", "fragsim record --", "_dump_snapshot"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q", s)
		}
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if n := len([]rune(l)); n > TableWidth {
			t.Errorf("line of %d runes: %q", n, l)
		}
	}
}
