package analysis

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

func TestClassifyOOM(t *testing.T) {
	for _, tt := range []struct {
		name                                  string
		request, cachedFree, largest, outside uint64
		outsideKnown                          bool
		want                                  OOMClass
	}{
		{"free bytes enough, no block", 24 * mib, 32 * mib, 16 * mib, 0, false, OOMFragmentation},
		{"exactly enough free bytes", 32 * mib, 32 * mib, 16 * mib, 0, true, OOMFragmentation},
		{"outside covers the shortfall", 40 * mib, 32 * mib, 16 * mib, 8 * mib, true, OOMOutside},
		{"outside short by a byte", 40 * mib, 32 * mib, 16 * mib, 8*mib - 1, true, OOMExhaustion},
		{"outside unknown", 40 * mib, 32 * mib, 16 * mib, 0, false, OOMExhaustion},
		{"empty cache, outside covers", 10 * mib, 0, 0, 10 * mib, true, OOMOutside},
		{"a block was large enough", 8 * mib, 32 * mib, 16 * mib, 0, true, OOMExhaustion},
	} {
		if got := ClassifyOOM(tt.request, tt.cachedFree, tt.largest, tt.outside, tt.outsideKnown); got != tt.want {
			t.Errorf("%s: ClassifyOOM = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// fragmentedOOM writes a trace whose last request fails on a 60 MiB device
// for fragmentation alone: six 8 MiB blocks fill three 20 MiB segments
// (two each, and 4 MiB free at their end), the first of each pair is
// freed (36 MiB cached, no free block over 8 MiB), and a 12 MiB request
// needs a new segment.
func fragmentedOOM(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic, GPUTotalBytes: 60 * mib})
	if err != nil {
		t.Fatal(err)
	}
	ts := int64(1000)
	emit := func(e trace.Event) {
		ts += 1000
		e.TimeNS = ts
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint64(0); i < 6; i++ {
		emit(trace.Event{Kind: trace.KindAlloc, Addr: 1<<32 + i<<24, SizeBytes: 8 * mib})
	}
	for i := uint64(0); i < 6; i += 2 {
		emit(trace.Event{Kind: trace.KindFreeRequested, Addr: 1<<32 + i<<24, SizeBytes: 8 * mib})
		emit(trace.Event{Kind: trace.KindFreeCompleted, Addr: 1<<32 + i<<24, SizeBytes: 8 * mib})
	}
	emit(trace.Event{Kind: trace.KindOOM, SizeBytes: 12 * mib, Aux: 0})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestExplainReplayedOOM(t *testing.T) {
	data := fragmentedOOM(t)
	x, err := Explain(opener(data), ExplainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !x.History || !x.AtOOM || x.RequestGiven {
		t.Errorf("history %v, at an oom %v, request given %v: want the trace's oom event", x.History, x.AtOOM, x.RequestGiven)
	}
	got := [5]uint64{x.RequestBytes, x.ReservedBytes, x.AllocatedBytes, x.CachedFreeBytes, x.LargestFreeBlockBytes}
	if want := [5]uint64{12 * mib, 60 * mib, 24 * mib, 36 * mib, 8 * mib}; got != want {
		t.Errorf("request, reserved, allocated, cached free, largest free = %v MiB, want %v MiB", div(got[:]), div(want[:]))
	}
	if x.OutsideBytes == nil || *x.OutsideBytes != 0 {
		t.Errorf("outside known %v, want 0 (60 MiB device, all reserved, none free)", x.OutsideBytes != nil)
	}
	if x.Class != OOMFragmentation {
		t.Errorf("class %s, want fragmentation", x.Class)
	}
	if x.FitBytes != 60*mib || x.Fit == nil {
		t.Fatalf("fit size %d, fit %v: want the recommendation for fit:60MiB", x.FitBytes, x.Fit)
	}
	// The same recommendation as compare --goal fit:60MiB.
	goal, _ := ParseGoal("fit:60MiB")
	cmp, err := Compare(opener(data), CompareOptions{Goal: goal})
	if err != nil {
		t.Fatal(err)
	}
	want := cmp.Decision.Recommendation
	if x.Fit.Label != want.Label || x.Fit.Line != want.Line || !x.Fit.Fits {
		t.Errorf("fit %q (%s, fits %v), want compare's %q (%s)", x.Fit.Label, x.Fit.Line, x.Fit.Fits, want.Label, want.Line)
	}
	if x.Fit.Label == cmp.Decision.Baseline {
		t.Errorf("fit recommends the baseline, which failed on this device")
	}
	if n := len(x.Lines()); n < 3 || n > 4 {
		t.Errorf("%d lines, want 3 or 4: %q", n, x.Lines())
	}
}

func div(v []uint64) []float64 {
	out := make([]float64, len(v))
	for i, n := range v {
		out[i] = float64(n) / mib
	}
	return out
}

// stateOnly is a state-only trace: two 20 MiB segments, one holding
// [2 MiB allocated, 8 MiB free, 2 MiB allocated, 8 MiB free], the other
// [4 MiB allocated, 16 MiB free]: 40 MiB reserved, 8 MiB allocated, 32 MiB
// free, the largest free block 16 MiB.
func stateOnly(t *testing.T) []byte {
	t.Helper()
	a, b := uint64(1<<32), uint64(1<<33)
	h := &trace.Header{Producer: trace.ProducerPyTorch, Initial: &trace.InitialState{Segments: []trace.Segment{
		{Addr: a, SizeBytes: 20 * mib, Pool: "large", Blocks: []trace.Block{
			{Addr: a, SizeBytes: 2 * mib, RequestedBytes: 2 * mib, State: trace.BlockAllocated},
			{Addr: a + 2*mib, SizeBytes: 8 * mib, State: trace.BlockInactive},
			{Addr: a + 10*mib, SizeBytes: 2 * mib, RequestedBytes: 2 * mib, State: trace.BlockAllocated},
			{Addr: a + 12*mib, SizeBytes: 8 * mib, State: trace.BlockInactive}}},
		{Addr: b, SizeBytes: 20 * mib, Pool: "large", Blocks: []trace.Block{
			{Addr: b, SizeBytes: 4 * mib, RequestedBytes: 4 * mib, State: trace.BlockAllocated},
			{Addr: b + 4*mib, SizeBytes: 16 * mib, State: trace.BlockInactive}}},
	}}}
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestExplainState(t *testing.T) {
	data := stateOnly(t)
	if _, err := Explain(opener(data), ExplainOptions{}); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("no request given: err %v, want ErrNoRequest", err)
	}
	for _, tt := range []struct {
		name         string
		opts         ExplainOptions
		want         OOMClass
		outside      uint64
		outsideKnown bool
	}{
		{"fragmentation", ExplainOptions{RequestBytes: 24 * mib}, OOMFragmentation, 0, false},
		{"outside", ExplainOptions{RequestBytes: 40 * mib, DeviceTotalBytes: 100 * mib, DeviceFreeBytes: 10 * mib},
			OOMOutside, 50 * mib, true},
		{"exhaustion", ExplainOptions{RequestBytes: 40 * mib, DeviceTotalBytes: 100 * mib, DeviceFreeBytes: 58 * mib},
			OOMExhaustion, 2 * mib, true},
	} {
		x, err := Explain(opener(data), tt.opts)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got := [5]uint64{x.RequestBytes, x.ReservedBytes, x.AllocatedBytes, x.CachedFreeBytes, x.LargestFreeBlockBytes}
		if want := [5]uint64{tt.opts.RequestBytes, 40 * mib, 8 * mib, 32 * mib, 16 * mib}; got != want {
			t.Errorf("%s: figures %v MiB, want %v MiB", tt.name, div(got[:]), div(want[:]))
		}
		if x.Class != tt.want {
			t.Errorf("%s: class %s, want %s", tt.name, x.Class, tt.want)
		}
		if (x.OutsideBytes != nil) != tt.outsideKnown || x.OutsideBytes != nil && *x.OutsideBytes != tt.outside {
			t.Errorf("%s: outside known %v, want %d (known %v)", tt.name, x.OutsideBytes != nil, tt.outside, tt.outsideKnown)
		}
		if x.History || x.Fit != nil {
			t.Errorf("%s: a state alone has no history and no fit", tt.name)
		}
		// The figures agree with the state report analyze shows.
		st := StateOf(h(t, data))
		if st.ReservedBytes != x.ReservedBytes || st.LargestFreeBytes != x.LargestFreeBlockBytes ||
			st.ReservedBytes-st.ActiveBytes != x.CachedFreeBytes {
			t.Errorf("%s: state report %+v disagrees", tt.name, st)
		}
	}
}

func h(t *testing.T, data []byte) *trace.Header {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return r.Header()
}
