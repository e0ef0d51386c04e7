package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// replayPeak returns the peak reserved bytes that replay --json reports.
func replayPeak(t *testing.T, args ...string) uint64 {
	t.Helper()
	stdout, stderr, code := runCLI(append([]string{"replay", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("replay %v: exit %d: %s", args, code, stderr)
	}
	var res struct {
		Peak uint64 `json:"peak_reserved_bytes"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("replay --json: %v\n%s", err, stdout)
	}
	return res.Peak
}

// TestExportMemoryVizImportsBackToSamePeak exports a replay under each
// policy the caching allocator reproduces, imports the pickle and replays
// it: the same peak reserved.
func TestExportMemoryVizImportsBackToSamePeak(t *testing.T) {
	tr := synthAgents(t, 5000, 2)
	dir := t.TempDir()
	for _, policy := range []string{"caching", "expandable"} {
		pk := filepath.Join(dir, policy+".pickle")
		if _, stderr, code := runCLI("export", "--format", "memory_viz", "--policy", policy, tr, "-o", pk); code != 0 {
			t.Fatalf("export %s: exit %d: %s", policy, code, stderr)
		}
		back := filepath.Join(dir, policy+".fst")
		if _, stderr, code := runCLI("import", pk, "-o", back); code != 0 {
			t.Fatalf("import %s: exit %d: %s", pk, code, stderr)
		}
		want := replayPeak(t, "--policy", policy, tr)
		if got := replayPeak(t, back); got != want {
			t.Errorf("%s: imported export peaks at %d, the replay at %d", policy, got, want)
		}
	}
}

func TestExportPerfettoAndUsage(t *testing.T) {
	tr := synthTrace(t, 5_000)
	out := filepath.Join(t.TempDir(), "t.json")
	if _, stderr, code := runCLI("export", "--format", "perfetto", "--policies", "caching,bfc", tr, "-o", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.TraceEvents) == 0 {
		t.Fatalf("not a trace-event file: %v", err)
	}
	if _, stderr, code := runCLI("export", "--format", "svg", tr, "-o", out); code != 2 || !strings.Contains(stderr, "svg") {
		t.Errorf("unknown format: exit %d, %q", code, stderr)
	}
	if _, stderr, code := runCLI("export", "--format", "memory_viz", "--policy", "nosuch", tr, "-o", out); code != 2 {
		t.Errorf("unknown policy: exit %d, %q", code, stderr)
	}
	if _, _, code := runCLI("export", "--format", "perfetto", tr); code != 2 {
		t.Errorf("no -o: exit %d, want 2", code)
	}
}
