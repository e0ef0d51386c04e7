package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/fragsim/fragsim/trace/pytorch"
)

func num(t *testing.T, d *pickle.Dict, key string) uint64 {
	t.Helper()
	v, ok := d.Get(key)
	if !ok {
		t.Fatalf("no %q in %v", key, d.Pairs)
	}
	switch x := v.(type) {
	case int64:
		return uint64(x)
	case uint64:
		return x
	}
	t.Fatalf("%q is %T", key, v)
	return 0
}

// TestExportMemoryVizSumsToPeak decodes the snapshot as the importer does:
// its segment entries add up to the replay's peak reserved, its segments
// to the final reserved, and each segment's blocks to its size.
func TestExportMemoryVizSumsToPeak(t *testing.T) {
	for _, policy := range []string{"caching", "expandable"} {
		data, res := exportViz(t, policy)
		v, err := pickle.Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		snap := v.(*pickle.Dict)
		traces, _ := snap.Get("device_traces")
		dev0 := traces.(*pickle.List).Items[0].(*pickle.List).Items
		var cur, peak uint64
		actions := map[string]int{}
		for _, it := range dev0 {
			e := it.(*pickle.Dict)
			a, _ := e.Get("action")
			actions[a.(string)]++
			switch a {
			case "segment_alloc", "segment_map":
				cur += num(t, e, "size")
			case "segment_free", "segment_unmap":
				cur -= num(t, e, "size")
			}
			peak = max(peak, cur)
		}
		if peak != res.PeakReservedBytes {
			t.Errorf("%s: segment entries peak at %d, replay peak reserved %d", policy, peak, res.PeakReservedBytes)
		}
		if actions["alloc"] != int(res.Allocs) {
			t.Errorf("%s: %d alloc entries, %d allocs replayed", policy, actions["alloc"], res.Allocs)
		}
		segs, _ := snap.Get("segments")
		var total uint64
		for _, it := range segs.(*pickle.List).Items {
			s := it.(*pickle.Dict)
			size := num(t, s, "total_size")
			total += size
			blocks, _ := s.Get("blocks")
			var sum uint64
			for _, b := range blocks.(*pickle.List).Items {
				sum += num(t, b.(*pickle.Dict), "size")
			}
			if sum != size {
				t.Fatalf("%s: segment of %d bytes has blocks summing to %d", policy, size, sum)
			}
		}
		if total != res.FinalReservedBytes || total != cur {
			t.Errorf("%s: segments sum to %d, entries end at %d, final reserved %d", policy, total, cur, res.FinalReservedBytes)
		}
	}
}

// TestExportMemoryVizPython loads the snapshot with Python's pickle and
// sums its segment entries there.
func TestExportMemoryVizPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	data, res := exportViz(t, "expandable")
	cmd := exec.Command(py, "-c", `import pickle, sys
d = pickle.load(sys.stdin.buffer)
cur = peak = 0
for e in d["device_traces"][0]:
    sign = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}.get(e["action"], 0)
    cur += sign * e["size"]
    peak = max(peak, cur)
assert all(b["state"] in ("active_allocated", "active_pending_free", "inactive") for s in d["segments"] for b in s["blocks"])
print(peak)`)
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != strconv.FormatUint(res.PeakReservedBytes, 10) {
		t.Fatalf("python sums the segment entries to %s, replay peak reserved %d", got, res.PeakReservedBytes)
	}
}

// TestExportMemoryVizImportsBack imports the snapshot as fragsim import
// does and replays it: the same peak reserved, every device call matched.
func TestExportMemoryVizImportsBack(t *testing.T) {
	data, res := exportViz(t, "caching")
	snap, err := pytorch.Load(bytes.NewReader(data), "export.pickle", pytorch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, snap.Header())
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Emit(w, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := trace.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	f, err := allocator.NewFactory("caching", "", r.Header())
	if err != nil {
		t.Fatal(err)
	}
	back, err := replay.Run(r, f, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if back.PeakReservedBytes != res.PeakReservedBytes {
		t.Fatalf("imported back: peak reserved %d, exported replay %d", back.PeakReservedBytes, res.PeakReservedBytes)
	}
	fd := back.Fidelity
	if !fd.Checked || fd.DeviceEventsMatched != fd.DeviceEvents || fd.DeviceEvents != res.DeviceAllocs+res.DeviceFrees {
		t.Fatalf("imported back: fidelity %+v, exported replay made %d device calls", fd, res.DeviceAllocs+res.DeviceFrees)
	}
}

// smallTrace writes a trace that calls empty_cache and then asks for more
// than a small device holds.
func smallTrace(t *testing.T) analysis.Opener {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic, GPUTotalBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	ts := int64(1000)
	put := func(e trace.Event) {
		ts += 1000
		e.TimeNS = ts
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	put(trace.Event{Kind: trace.KindAlloc, Addr: 1 << 32, SizeBytes: 300 << 20})
	put(trace.Event{Kind: trace.KindFreeRequested, Addr: 1 << 32, SizeBytes: 300 << 20})
	put(trace.Event{Kind: trace.KindFreeCompleted, Addr: 1 << 32, SizeBytes: 300 << 20})
	put(trace.Event{Kind: trace.KindEmptyCache})
	put(trace.Event{Kind: trace.KindAlloc, Addr: 2 << 32, SizeBytes: 600 << 20})
	put(trace.Event{Kind: trace.KindAlloc, Addr: 3 << 32, SizeBytes: 600 << 20})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(data))
		return r, io.NopCloser(nil), err
	}
}

func TestExportPerfetto(t *testing.T) {
	var buf bytes.Buffer
	open := smallTrace(t)
	if err := WritePerfetto(&buf, open, ExportOptions{Policies: []string{"caching", "expandable"}}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name  string         `json:"name"`
			Phase string         `json:"ph"`
			TS    float64        `json:"ts"`
			PID   int            `json:"pid"`
			Args  map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%.500s", err, buf.String())
	}
	names := map[int]string{}
	peaks := map[string]float64{}
	count := map[string]int{}
	for _, e := range doc.TraceEvents {
		switch e.Phase {
		case "M":
			if e.Name == "process_name" {
				names[e.PID] = e.Args["name"].(string)
			}
		case "C":
			for k, v := range e.Args {
				key := fmt.Sprint(e.PID, k)
				peaks[key] = max(peaks[key], v.(float64))
			}
		case "i":
			count[fmt.Sprint(e.PID, e.Name)]++
		}
	}
	for _, policy := range []string{"caching", "expandable"} {
		pid := 0
		for p, n := range names {
			if n == policy {
				pid = p
			}
		}
		if pid == 0 {
			t.Fatalf("no process for %s: %v", policy, names)
		}
		f, _ := allocator.NewFactory(policy, "", nil)
		r, _, _ := open()
		res, err := replay.Run(r, f, replay.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if got := peaks[fmt.Sprint(pid, "reserved")]; uint64(got) != res.PeakReservedBytes {
			t.Errorf("%s: reserved counter peaks at %.0f, replay %d", policy, got, res.PeakReservedBytes)
		}
		if peaks[fmt.Sprint(pid, "active")] == 0 || peaks[fmt.Sprint(pid, "requested")] == 0 {
			t.Errorf("%s: no active or requested counter", policy)
		}
		if res.OOMs == 0 || count[fmt.Sprint(pid, "OOM")] != int(res.OOMs) {
			t.Errorf("%s: %d OOM events, replay has %d OOMs", policy, count[fmt.Sprint(pid, "OOM")], res.OOMs)
		}
		if count[fmt.Sprint(pid, "empty_cache")] != 1 {
			t.Errorf("%s: %d empty_cache events, want 1", policy, count[fmt.Sprint(pid, "empty_cache")])
		}
	}
}

// confWith makes the conf string say what the replay ran under.
func TestConfWith(t *testing.T) {
	for _, tc := range []struct {
		conf       string
		expandable bool
		want       string
	}{
		{"", false, ""},
		{"", true, "expandable_segments:True"},
		{"expandable_segments:True", true, "expandable_segments:True"},
		{"expandable_segments:False,max_split_size_mb:128", true, "max_split_size_mb:128,expandable_segments:True"},
		{"max_split_size_mb:128, expandable_segments:True", false, "max_split_size_mb:128,expandable_segments:False"},
		{"roundup_power2_divisions:[256:1,>:4],expandable_segments:False", false, "roundup_power2_divisions:[256:1,>:4],expandable_segments:False"},
	} {
		if got := confWith(tc.conf, tc.expandable); got != tc.want {
			t.Errorf("confWith(%q, %v) = %q, want %q", tc.conf, tc.expandable, got, tc.want)
		}
	}
}
