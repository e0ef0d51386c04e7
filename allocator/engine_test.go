package allocator

import (
	"bytes"
	"testing"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// traceOf writes ops as a synthetic trace (recorded addresses are unique per
// block) and returns a reader over it.
func traceOf(t *testing.T, ops []rop) *trace.Reader {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic})
	if err != nil {
		t.Fatal(err)
	}
	addr := func(id int) uint64 { return 0x7f0000000000 + uint64(id)<<32 }
	size := map[int]uint64{}
	for i, o := range ops {
		ev := trace.Event{TimeNS: int64(i) * 1000}
		switch o.kind {
		case 'm':
			size[o.id] = o.size
			ev.Kind, ev.Addr, ev.SizeBytes, ev.Stream = trace.KindAlloc, addr(o.id), o.size, o.stream
		case 'r':
			ev.Kind, ev.Addr, ev.SizeBytes = trace.KindFreeRequested, addr(o.id), size[o.id]
		case 'c':
			ev.Kind, ev.Addr, ev.SizeBytes = trace.KindFreeCompleted, addr(o.id), size[o.id]
		case 'e':
			ev.Kind = trace.KindEmptyCache
		}
		if err := w.WriteEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := trace.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReplayAgainstIdeal replays random traces through the engine under
// every policy: ideal's peak reserved equals the trace's peak requested
// bytes, and no policy reports less.
func TestReplayAgainstIdeal(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := range uint64(seeds) {
		ops, peakLive := randomStream(seed+100, 2000)
		res := map[string]*replay.Result{}
		for _, name := range Names() {
			f, err := NewFactory(name, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			r, err := replay.Run(traceOf(t, ops), f, replay.Config{CapacityBytes: 1 << 40})
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, name, err)
			}
			if r.OOMs != 0 || r.Policy != name {
				t.Fatalf("seed %d %s: %d OOMs, policy %q", seed, name, r.OOMs, r.Policy)
			}
			res[name] = r
		}
		ideal := res["ideal"]
		if ideal.PeakReservedBytes != ideal.PeakRequestedBytes || ideal.PeakRequestedBytes != peakLive {
			t.Errorf("seed %d: ideal peak reserved %d, peak requested %d, trace's peak live %d: want all equal",
				seed, ideal.PeakReservedBytes, ideal.PeakRequestedBytes, peakLive)
		}
		for name, r := range res {
			if r.PeakReservedBytes < ideal.PeakReservedBytes {
				t.Errorf("seed %d: %s peak reserved %d below ideal's %d", seed, name, r.PeakReservedBytes, ideal.PeakReservedBytes)
			}
			if r.PeakRequestedBytes != peakLive {
				t.Errorf("seed %d: %s peak requested %d, want %d", seed, name, r.PeakRequestedBytes, peakLive)
			}
			if o := r.Fragmentation.OverheadRatio; o < 1 {
				t.Errorf("seed %d: %s overhead ratio %.3f below 1", seed, name, o)
			}
		}
	}
}
