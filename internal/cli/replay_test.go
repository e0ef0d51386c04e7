package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/replay"
)

var (
	realTraceDir = filepath.Join("..", "..", "allocator", "caching", "testdata", "real")
	workloadDir  = filepath.Join("..", "..", "traces") // the workload traces
)

func runReplayCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(append([]string{"fragsim"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func TestReplayHumanOutputShowsFidelity(t *testing.T) {
	out, errs, code := runReplayCLI(t, "replay", "--capacity", "h200", filepath.Join(workloadDir, "baseline_s1.fst"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"policy                caching",
		"peak reserved         2.52 GiB  (2705326080 B)",
		"fidelity: 41942/41942 allocs at recorded address, 115/115 device events matched",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A trace without its GPU's memory, replayed without --capacity, has an
// unlimited device: the forecast says so instead of a stand-in figure.
func TestReplayForecastUnlimited(t *testing.T) {
	out, errs, code := runReplayCLI(t, "replay", "--forecast", filepath.Join(workloadDir, "conformance", "all_default.fst"))
	if code != 0 || !strings.Contains(out, "min headroom: unlimited") || strings.Contains(out, "TiB") {
		t.Errorf("exit %d: %s\n%s", code, errs, out)
	}
}

func TestReplayJSON(t *testing.T) {
	out, errs, code := runReplayCLI(t, "replay", "--json", "--capacity", "150109880320", "--fraction", "0.00966",
		filepath.Join(realTraceDir, "fraction_retry.fst"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy", "events", "allocs", "peak_reserved_bytes", "final_reserved_bytes", "peak_active_bytes",
		"peak_requested_bytes", "device_allocs", "device_frees", "alloc_retries", "ooms", "fragmentation", "fidelity"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	fr := m["fragmentation"].(map[string]any)
	for _, k := range []string{"at_peak_pct", "peak_ratio_pct", "time_weighted_pct", "external_pct", "internal_bytes", "stranded_bytes", "overhead_ratio"} {
		if _, ok := fr[k]; !ok {
			t.Errorf("fragmentation lacks %q", k)
		}
	}
	fd := m["fidelity"].(map[string]any)
	if fd["checked"] != true || fd["allocs"] != fd["allocs_at_recorded_address"] || fd["device_events"] != fd["device_events_matched"] {
		t.Errorf("fidelity %v", fd)
	}
	if m["peak_reserved_bytes"].(float64) != 1444937728 || m["alloc_retries"].(float64) != 150 || m["ooms"].(float64) != 150 {
		t.Errorf("peak %v retries %v ooms %v", m["peak_reserved_bytes"], m["alloc_retries"], m["ooms"])
	}
}

func TestReplayOtherPolicyIsNotChecked(t *testing.T) {
	out, errs, code := runReplayCLI(t, "replay", "--policy", "expandable", "--capacity", "h200", filepath.Join(workloadDir, "baseline_s1.fst"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "policy                expandable") || !strings.Contains(out, "fidelity: not checked") {
		t.Errorf("output:\n%s", out)
	}
}

func TestReplayMinCapacityAndInjection(t *testing.T) {
	out, errs, code := runReplayCLI(t, "replay", "--json", "--min-capacity", "--empty-cache-every", "100", "--capacity", "h200",
		filepath.Join(realTraceDir, "empty_cache.fst"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	mc, peak := m["min_capacity_bytes"].(float64), m["peak_reserved_bytes"].(float64)
	if mc <= 0 || mc > peak+2<<20 || int64(mc)%(2<<20) != 0 {
		t.Errorf("min capacity %v with peak reserved %v", mc, peak)
	}
	if m["fidelity"].(map[string]any)["checked"] != false {
		t.Errorf("fidelity checked with injected empty_cache")
	}
}

func TestReplayErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"replay"}, "want one TRACE argument", 2},
		{[]string{"replay", "--capacity", "lots", "x.fst"}, "--capacity", 2},
		{[]string{"replay", "--policy", "nope", filepath.Join(realTraceDir, "ring.fst")}, "nope", 2},
		{[]string{"replay", "--conf", "max_split_size_mb:1", filepath.Join(realTraceDir, "ring.fst")}, "max_split_size_mb", 2},
		{[]string{"replay", "--empty-cache-every", "3", "--defrag-threshold", "50", "x.fst"}, "not both", 2},
		{[]string{"replay", filepath.Join(realTraceDir, "missing.fst")}, "missing.fst", 1},
	} {
		_, errs, code := runReplayCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errs, c.code, c.want)
		}
	}
}

func TestReplayOfCutTraceReportsWhatWasRead(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "traces", "kv_decode_s1.fst"))
	if err != nil {
		t.Fatal(err)
	}
	// A sixth of the trace holds its first chunk of events and part of the
	// next: events to report, at a sixth of the replays' cost.
	cut := filepath.Join(t.TempDir(), "cut.fst")
	if err := os.WriteFile(cut, data[:len(data)/6], 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := runReplayCLI(t, "replay", "--json", cut)
	if code != 2 {
		t.Fatalf("exit %d, want 2 for a cut trace; stderr %q", code, errs)
	}
	if !strings.Contains(errs, "truncated at byte offset") || !strings.Contains(errs, "cut.fst") {
		t.Errorf("stderr %q does not say where the file was cut", errs)
	}
	var res replay.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("no result for the events read: %v (%q)", err, out)
	}
	if res.Events == 0 || res.Allocs == 0 || res.PeakReservedBytes == 0 || res.Fragmentation.OverheadRatio == 0 {
		t.Errorf("partial result not finished: %+v", res)
	}
	if !strings.Contains(errs, fmt.Sprintf("the %d events read", res.Events)) {
		t.Errorf("stderr %q does not give the events read (%d)", errs, res.Events)
	}
}
