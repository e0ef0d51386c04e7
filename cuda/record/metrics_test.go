package record_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/cuda/record"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/replay/monitor"
	"github.com/fragsim/fragsim/trace"
)

// parseMetrics reads Prometheus's text format: each sample's value by its
// name and device label, and the names the HELP and TYPE lines give.
func parseMetrics(t *testing.T, text string) (values map[string]float64, described map[string]string) {
	t.Helper()
	values, described = map[string]float64{}, map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			described[f[2]] = f[3]
			continue
		}
		if strings.HasPrefix(l, "#") {
			continue
		}
		name, rest, ok := strings.Cut(l, "{")
		labels, v, ok2 := strings.Cut(rest, "} ")
		if !ok || !ok2 || !strings.HasPrefix(labels, `device="`) {
			t.Fatalf("sample line %q: want name{device=\"N\"} value", l)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("sample line %q: %v", l, err)
		}
		values[name+"{"+labels+"}"] = x
	}
	return values, described
}

// freePort returns a TCP port free now on 127.0.0.1.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRecordMetrics runs a program under fragsim record with
// FRAGSIM_METRICS_ADDR, against the fake driver, whose device keeps 100 MiB
// free outside the program: the endpoint serves every metric of
// replay/monitor, labelled by device; the allocator's figures are those of
// the recorded trace replayed under PyTorch's allocator (the engine's own
// peak and fragmentation), the device's are the fake driver's, the risk is
// on, and its warning is written once for two scrapes.
func TestRecordMetrics(t *testing.T) {
	lib, env := record.Setup(t)
	const total, outside = 80 << 30, 80<<30 - 100<<20
	port := freePort(t)
	out := filepath.Join(t.TempDir(), "run.fst")
	var stdout, stderr bytes.Buffer
	s, err := record.Run(record.Config{Output: out, HookLib: lib,
		Args:   []string{"python3", "testdata/metrics.py", fmt.Sprintf("http://127.0.0.1:%d/metrics", port)},
		Env:    append(env, fmt.Sprintf("FRAGSIM_METRICS_ADDR=127.0.0.1:%d", port), fmt.Sprintf("FAKE_CUDA_OUTSIDE=%d", outside)),
		Stdout: &stdout, Stderr: &stderr})
	if err != nil || s.ExitCode != 0 {
		t.Fatalf("Run: %v, exit %v\n%s%s", err, s, stdout.String(), stderr.String())
	}
	var texts []string
	if err := json.Unmarshal(stdout.Bytes(), &texts); err != nil || len(texts) != 2 {
		t.Fatalf("%v: %q", err, stdout.String())
	}
	got, described := parseMetrics(t, texts[1])
	var names []string
	for n := range described {
		names = append(names, n)
	}
	sort.Strings(names)
	want := monitor.Names()
	sort.Strings(want)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("the endpoint describes\n%v\nreplay/monitor exports\n%v", names, want)
	}
	for _, m := range monitor.Metrics {
		if described[m.Name] != m.Type {
			t.Errorf("%s: type %q, want %q", m.Name, described[m.Name], m.Type)
		}
		if _, ok := got[m.Name+`{device="0"}`]; !ok {
			t.Errorf("%s{device=\"0\"} is not served", m.Name)
		}
	}

	// The trace replayed under PyTorch's allocator: its state at the end.
	f, err := allocator.NewFactory("caching", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The state after the last event (the engine releases its policies
	// once the replay ends).
	var l monitor.Layout
	res, err := replay.RunFile(out, f, replay.Config{Observer: func(s *replay.Sample) {
		l = monitor.Layout{}
		s.Policy.(driver.Inspector).Segments(func(s trace.Segment) bool { l.Add(s); return true })
	}})
	if err != nil {
		t.Fatal(err)
	}
	if l.CachedFreeBytes == 0 || l.LargestFreeBytes == l.CachedFreeBytes {
		t.Fatalf("the workload leaves no fragmented cache: %+v", l)
	}
	free := got[`fragsim_device_free_bytes{device="0"}`]
	for name, v := range map[string]float64{
		"fragsim_reserved_bytes":           float64(l.ReservedBytes),
		"fragsim_allocated_bytes":          float64(l.AllocatedBytes),
		"fragsim_inactive_split_bytes":     float64(l.StrandedBytes),
		"fragsim_largest_free_block_bytes": float64(l.LargestFreeBytes),
		"fragsim_cached_free_bytes":        float64(l.CachedFreeBytes),
		"fragsim_fragmentation_ratio":      1 - float64(l.LargestFreeBytes)/float64(l.CachedFreeBytes),
		"fragsim_at_peak_pct":              res.Fragmentation.AtPeakPct,
		"fragsim_silent_oom_risk":          1,
		"fragsim_silent_oom_margin_bytes":  free - replay.DefaultOutsideReserveBytes,
		"fragsim_oom_total":                0,
		"fragsim_alloc_retries_total":      0,
	} {
		if g := got[name+`{device="0"}`]; math.Abs(g-v) > 1e-9*math.Max(1, math.Abs(v)) {
			t.Errorf("%s = %v, want %v", name, g, v)
		}
	}
	// The fake driver's pool holds the live blocks (the recording
	// allocator's, not the model's) and counts them as used: the memory
	// outside it is the fake context's.
	if free <= 0 || free >= 100<<20 || got[`fragsim_outside_allocator_bytes{device="0"}`] != outside {
		t.Errorf("device free %v, outside %v: want under 100 MiB and %d", free, got[`fragsim_outside_allocator_bytes{device="0"}`], outside)
	}
	if n := strings.Count(stderr.String(), "fragsim: silent OOM risk on device 0: "); n != 1 {
		t.Errorf("%d risk warnings for two scrapes, want 1:\n%s", n, stderr.String())
	}
}
