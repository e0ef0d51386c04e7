package report

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/fragsim/fragsim/trace/pytorch"
)

// bytesOpener opens a trace held in memory.
func bytesOpener(data []byte) analysis.Opener {
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(data))
		return r, io.NopCloser(nil), err
	}
}

// importViz imports an exported snapshot as fragsim import does, into a
// trace in memory.
func importViz(t *testing.T, snap []byte) []byte {
	t.Helper()
	s, err := pytorch.Load(bytes.NewReader(snap), "export.pickle", pytorch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, s.Header())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Emit(w, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// roundTrip exports the trace opened by open as a snapshot, imports it
// back and checks that the trace imported is the trace replayed: its
// replay makes the same calls at the same addresses (its export is the
// same snapshot, byte for byte), the same peak, device calls and OOMs,
// and reproduces every allocation's address and device event of the
// export.
func roundTrip(t *testing.T, name string, open analysis.Opener) {
	t.Helper()
	var a, b bytes.Buffer
	resA, err := WriteMemoryViz(&a, open, ExportOptions{SpillDir: t.TempDir()})
	if err != nil {
		t.Fatalf("%s: export: %v", name, err)
	}
	back := importViz(t, a.Bytes())
	resB, err := WriteMemoryViz(&b, bytesOpener(back), ExportOptions{SpillDir: t.TempDir()})
	if err != nil {
		t.Fatalf("%s: export of the import: %v", name, err)
	}
	if resA.PeakReservedBytes != resB.PeakReservedBytes || resA.OOMs != resB.OOMs ||
		resA.DeviceAllocs != resB.DeviceAllocs || resA.DeviceFrees != resB.DeviceFrees ||
		resA.AllocRetries != resB.AllocRetries || resA.FinalReservedBytes != resB.FinalReservedBytes {
		t.Errorf("%s: replay of the trace: peak %d, OOMs %d, allocs %d, device calls %d+%d, retries %d, final %d; of its import: %d, %d, %d, %d+%d, %d, %d",
			name, resA.PeakReservedBytes, resA.OOMs, resA.Allocs, resA.DeviceAllocs, resA.DeviceFrees, resA.AllocRetries, resA.FinalReservedBytes,
			resB.PeakReservedBytes, resB.OOMs, resB.Allocs, resB.DeviceAllocs, resB.DeviceFrees, resB.AllocRetries, resB.FinalReservedBytes)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		// A live recording's OOM that the replay serves becomes the alloc
		// and frees it was (a snapshot has no served OOM): the import
		// completes that free at the next request, as a snapshot's frees
		// complete, and its entry comes later. Every call and address
		// is still the same.
		if served := servedOOMs(t, open); served == 0 {
			i := 0
			for i < min(a.Len(), b.Len()) && a.Bytes()[i] == b.Bytes()[i] {
				i++
			}
			t.Errorf("%s: the import's replay differs from the trace's: their snapshots (%d and %d bytes) differ from byte %d", name, a.Len(), b.Len(), i)
		} else if ca, cb := vizCalls(t, a.Bytes()), vizCalls(t, b.Bytes()); ca != cb {
			t.Errorf("%s: the import's replay makes other calls than the trace's", name)
		}
	}
	// The import, replayed under its own settings, is checked against
	// the calls it holds: every one reproduced.
	r, err := trace.NewReader(bytes.NewReader(back))
	if err != nil {
		t.Fatal(err)
	}
	f, err := allocator.NewFactory("caching", "", r.Header())
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay.Run(r, f, replay.Config{})
	if err != nil {
		t.Fatalf("%s: replay of the import: %v", name, err)
	}
	fd := res.Fidelity
	if resA.Allocs > 0 && (!fd.Checked || fd.AllocsAtRecordedAddress != fd.Allocs || fd.DeviceEventsMatched != fd.DeviceEvents ||
		fd.DeviceEvents != resA.DeviceAllocs+resA.DeviceFrees) {
		t.Errorf("%s: the import's replay: fidelity %+v, the export made %d device calls", name, fd, resA.DeviceAllocs+resA.DeviceFrees)
	}
}

// committedTraces lists the trace files of traces/ (a test run from a
// copy without them finds none).
func committedTraces(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join("..", "..", "traces"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".fst") {
			out = append(out, p)
		}
		return err
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("no trace in traces/: %v", err)
	}
	return out
}

// TestMemoryVizRoundTrip round-trips every committed trace through
// export --format memory_viz and import (a few of each kind unless
// FRAGSIM_LONG=1): recorded live or imported, expandable segments, CUDA
// graphs and MemPools, memory fractions with OOMs, empty_cache(), device
// samples, ring buffers that start mid-run. The everyday pass leaves out
// the long traces (the co-hosted servers', the serving runs', the
// built-in one): the conformance traces stand for an imported run's
// entries, and the first events of two serving runs (roundTripCuts) for
// their CUDA graphs and MemPools.
func TestMemoryVizRoundTrip(t *testing.T) {
	every := os.Getenv("FRAGSIM_LONG") == "1"
	some := map[string]bool{"expandable_mixed.fst": true, "fraction_large.live.fst": true, "ring_streams.fst": true,
		"gc_mixed.fst": true, "empty_cache_small.fst": true, "deferred_edges.fst": true}
	n := 0
	for _, p := range committedTraces(t) {
		if !every && !some[filepath.Base(p)] {
			continue
		}
		n++
		t.Run(strings.TrimPrefix(filepath.ToSlash(p), "../../traces/"), func(t *testing.T) {
			roundTrip(t, p, replay.OpenFile(p))
		})
	}
	if n < len(some) {
		t.Errorf("%d traces round-tripped, want at least %d", n, len(some))
	}
	for _, c := range roundTripCuts {
		t.Run(fmt.Sprintf("%s/first_%d", c.path, c.events), func(t *testing.T) {
			data := tracePrefix(t, filepath.Join("..", "..", "traces", c.path), c.events)
			kinds := kindsOf(t, data)
			for _, k := range c.holds {
				if kinds[k] == 0 {
					t.Fatalf("the cut holds no %s event: it no longer stands for the run (%v)", k, kinds)
				}
			}
			roundTrip(t, c.path, bytesOpener(data))
		})
	}
}

// roundTripCuts are the serving runs whose first events the round trip
// reads in both passes: each cut ends past what it stands for, and holds
// it (holds; trace.KindInvalid counts a MemPool's pool_begin).
var roundTripCuts = []struct {
	path   string
	events int64
	holds  []trace.Kind
}{
	// Four CUDA graphs captured into their private pools, with the
	// empty_cache() and cudaFree before each capture, then ten
	// torch.cuda.MemPool scopes on the default stream.
	{"serving/graphs_mempool_s1.fst", 16_200, []trace.Kind{trace.KindPoolBegin, trace.KindPoolEnd,
		trace.KindSegmentFree, trace.KindEmptyCache, trace.KindInvalid}},
	// Expandable segments under CUDA graphs: four captures, their pools
	// released (pool_release) with the segments unmapped, and the first
	// capture again on another stream.
	{"serving/graphs_recapture_expandable_s1.fst", 41_100, []trace.Kind{trace.KindPoolBegin, trace.KindPoolEnd,
		trace.KindPoolRelease, trace.KindSegmentMap, trace.KindSegmentUnmap, trace.KindEmptyCache}},
}

// servedOOMs counts the OOM events of a live recording (which its
// allocator failed, not PyTorch's): a replay may serve them.
func servedOOMs(t *testing.T, open analysis.Opener) int {
	r, c, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r.Header().Producer != trace.ProducerLive {
		return 0
	}
	sum, err := trace.Summarize(r)
	if err != nil {
		t.Fatal(err)
	}
	return int(sum.ByKind["oom"])
}

// vizCalls returns a snapshot's entries but its frees, one a line
// (action, address, size, stream), and its final segments: the calls of
// the replay it holds, and where they landed.
func vizCalls(t *testing.T, data []byte) string {
	t.Helper()
	v, err := pickle.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*pickle.Dict)
	var b strings.Builder
	devs, _ := d.Get("device_traces")
	for i, l := range devs.(*pickle.List).Items {
		for _, it := range l.(*pickle.List).Items {
			e := it.(*pickle.Dict)
			act, _ := e.Get("action")
			if a := act.(string); a == "free_requested" || a == "free_completed" {
				continue
			}
			addr, _ := e.Get("addr")
			size, _ := e.Get("size")
			stream, _ := e.Get("stream")
			fmt.Fprintln(&b, i, act, addr, size, stream)
		}
	}
	segs, _ := d.Get("segments")
	writeValue(&b, segs)
	return b.String()
}

// writeValue writes a decoded pickle value, containers by content.
func writeValue(b *strings.Builder, v any) {
	switch x := v.(type) {
	case *pickle.Dict:
		b.WriteByte('{')
		for _, p := range x.Pairs {
			fmt.Fprintf(b, "%s:", p.Key)
			writeValue(b, p.Value)
			b.WriteByte(',')
		}
		b.WriteByte('}')
	case *pickle.List:
		b.WriteByte('[')
		for _, it := range x.Items {
			writeValue(b, it)
			b.WriteByte(',')
		}
		b.WriteByte(']')
	default:
		fmt.Fprintf(b, "%v", x)
	}
}

// multiTrace is a trace of two devices, interleaved, with every kind of
// event a snapshot's entries cannot hold: markers of each kind, a memory
// fraction, device samples, empty_cache(), a private pool, a snapshot.
func multiTrace(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic, GPUTotalBytes: 8 << 30,
		GPUName: "test GPU", Tags: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := int64(1_700_000_000_000_000_000)
	put := func(e trace.Event) {
		ts += 1500 // not whole microseconds
		e.TimeNS = ts
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	const mib = 1 << 20
	stack := w.Stack([]trace.Frame{{Func: w.String("forward"), File: w.String("model.py"), Line: 7}})
	for dev := range trace.DeviceID(2) {
		put(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerAgent, Device: dev, Text: w.String(fmt.Sprintf("agent-%d", dev))})
		put(trace.Event{Kind: trace.KindDeviceMem, Device: dev, SizeBytes: 7 << 30, Aux: 8 << 30})
	}
	put(trace.Event{Kind: trace.KindSetFraction, Device: 1, Aux: math.Float64bits(0.5)})
	for i := range uint64(40) {
		dev := trace.DeviceID(i % 2)
		put(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerBegin, Device: dev, Text: w.String("step"), Aux: i + 1}) // synth numbers its steps
		put(trace.Event{Kind: trace.KindAlloc, Device: dev, Addr: (i + 1) << 32, SizeBytes: (i%5 + 1) * 3 * mib, Stack: stack})
		if i >= 2 {
			a := (i - 1) << 32 // alloc i-2's
			put(trace.Event{Kind: trace.KindFreeRequested, Device: trace.DeviceID((i - 2) % 2), Addr: a, SizeBytes: ((i-2)%5 + 1) * 3 * mib})
			put(trace.Event{Kind: trace.KindFreeCompleted, Device: trace.DeviceID((i - 2) % 2), Addr: a, SizeBytes: ((i-2)%5 + 1) * 3 * mib})
		}
		put(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerEnd, Device: dev, Text: w.String("step")})
		if i%10 == 9 {
			put(trace.Event{Kind: trace.KindEmptyCache, Device: dev})
			put(trace.Event{Kind: trace.KindSnapshot, Device: dev})
		}
	}
	const capture = trace.StreamID(0x5000)
	pool := trace.PoolID(1, 0)
	put(trace.Event{Kind: trace.KindPoolBegin, Stream: capture, Aux: pool})
	put(trace.Event{Kind: trace.KindAlloc, Stream: capture, Addr: 100 << 32, SizeBytes: 5 * mib})
	put(trace.Event{Kind: trace.KindPoolEnd, Stream: capture, Aux: pool})
	put(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerText, Device: 1, Text: w.String("the end")})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Two devices, and every event the entries cannot hold, round-trip; each
// device's entries are in its own list, every entry has its real time,
// and the markers are external annotations too. Once a second device's
// frees landed under device 0 and every time_us was 0.
func TestMemoryVizDevicesAndEvents(t *testing.T) {
	data := multiTrace(t)
	roundTrip(t, "two devices", bytesOpener(data))
	var out bytes.Buffer
	if _, err := WriteMemoryViz(&out, bytesOpener(data), ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := pickle.Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*pickle.Dict)
	devs, _ := d.Get("device_traces")
	first, last := int64(1_700_000_000_000_000), int64(1_700_000_000_001_000)
	for i, l := range devs.(*pickle.List).Items {
		counts := map[string]int{}
		for _, it := range l.(*pickle.List).Items {
			e := it.(*pickle.Dict)
			tu, _ := e.Get("time_us")
			act, _ := e.Get("action")
			if x := tu.(int64); x < first || x > last {
				t.Fatalf("device %d: %s at time_us %d, outside the trace's %d..%d", i, act, x, first, last)
			}
			counts[act.(string)]++
		}
		// device 0: 20 allocs and the pool's; 19 frees of its own; 1: 20
		// allocs, 19 frees
		want := map[int][2]int{0: {21, 19}, 1: {20, 19}}[i]
		if counts["alloc"] != want[0] || counts["free_requested"] != want[1] || counts["free_completed"] != want[1] {
			t.Errorf("device %d: %v; want %d allocs and %d frees", i, counts, want[0], want[1])
		}
	}
	ann, _ := d.Get("external_annotations")
	if n := len(ann.(*pickle.List).Items); n != 2+80+1 {
		t.Errorf("%d external annotations, want %d", n, 2+80+1)
	}
	settings, _ := d.Get("allocator_settings")
	if f, _ := settings.(*pickle.Dict).Get("expandable_segments"); f != false {
		t.Errorf("expandable_segments %v", f)
	}
}

// The settings written are those the replay ran under: an expandable
// trace's say so (once False beside expandable_segments:True), as do
// those of the expandable policy on a trace recorded without them; a
// CUDA graph trace's segments keep their pool (once always (0, 0)).
func TestMemoryVizSettingsAndPools(t *testing.T) {
	for _, tc := range []struct {
		path, policy string
		expandable   bool
	}{
		{"../../traces/conformance/expandable_mixed.fst", "", true},
		{vizTrace, "expandable", true},
		{vizTrace, "caching", false},
	} {
		var snap []byte
		if tc.path == vizTrace {
			snap, _ = exportViz(t, tc.policy) // the export tests' snapshots
		} else {
			var out bytes.Buffer
			if _, err := WriteMemoryViz(&out, replay.OpenFile(tc.path), ExportOptions{Policy: tc.policy}); err != nil {
				t.Fatal(err)
			}
			snap = out.Bytes()
		}
		s, err := pytorch.Load(bytes.NewReader(snap), "x.pickle", pytorch.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h := s.Header()
		s.Close()
		if got := h.AllocSettings["expandable_segments"]; got != map[bool]string{true: "True", false: "False"}[tc.expandable] ||
			strings.Contains(h.AllocConf, "expandable_segments:True") != tc.expandable {
			t.Errorf("%s under %q: settings %v, conf %q; want expandable %v", tc.path, tc.policy, h.AllocSettings, h.AllocConf, tc.expandable)
		}
	}
	var out bytes.Buffer
	if _, err := WriteMemoryViz(&out, graphsOpener(t), ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := pickle.Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	segs, _ := v.(*pickle.Dict).Get("segments")
	private := 0
	for _, s := range segs.(*pickle.List).Items {
		if id, _ := s.(*pickle.Dict).Get("segment_pool_id"); fmt.Sprint(id) != "[0 0]" {
			private++
		}
	}
	if private == 0 {
		t.Errorf("no segment of a private pool among %d", len(segs.(*pickle.List).Items))
	}
}
