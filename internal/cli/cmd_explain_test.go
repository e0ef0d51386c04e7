package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExplainState explains an OOM from a state-only snapshot (20 MiB
// segment: 8 MiB allocated, 12 MiB free; 2 MiB small segment: 512 B
// allocated, the rest free): a 13 MiB request finds 13.99 MiB free and no
// block over 12 MiB, fragmentation.
func TestExplainState(t *testing.T) {
	snap := importTestdata + "state_only.p4.pickle"
	out, errOut, code := runCLI("explain", snap, "--request", "13MiB", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var x map[string]any
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(x))
	for k := range x {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"allocated_bytes", "cached_free_bytes", "class", "largest_free_block_bytes",
		"request_bytes", "reserved_bytes"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	want := map[string]any{"reserved_bytes": 22.0 * (1 << 20), "allocated_bytes": 8.0*(1<<20) + 512,
		"cached_free_bytes": 12.0*(1<<20) + 2096640, "largest_free_block_bytes": 12.0 * (1 << 20),
		"request_bytes": 13.0 * (1 << 20), "class": "fragmentation"}
	for k, v := range want {
		if x[k] != v {
			t.Errorf("%s = %v, want %v", k, x[k], v)
		}
	}

	// The device figures give the memory outside the allocator: 100 MiB
	// total, 22 MiB reserved, 60 MiB free: 18 MiB outside, which covers a
	// 20 MiB request's 6 MiB shortfall.
	out, errOut, code = runCLI("explain", snap, "--request", "20MiB", "--device-total", "100MiB",
		"--device-free", "60MiB", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	x = nil
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatal(err)
	}
	if x["outside_bytes"] != 18.0*(1<<20) || x["class"] != "outside" {
		t.Errorf("outside_bytes %v, class %v; want 18 MiB, outside", x["outside_bytes"], x["class"])
	}

	out, errOut, code = runCLI("explain", snap, "--request", "13MiB")
	if code != 0 || !strings.Contains(out, "Fragmentation: ") || !strings.Contains(out, "largest free block 12.0 MiB") {
		t.Errorf("text: exit %d, %s%s", code, out, errOut)
	}
	if n := strings.Count(out, "\n"); n > 4 {
		t.Errorf("%d lines, want at most 4:\n%s", n, out)
	}

	if _, errOut, code = runCLI("explain", snap); code != 2 || !strings.Contains(errOut, "--request") {
		t.Errorf("no request: exit %d, %q; want 2 and the flag to give", code, errOut)
	}
	if _, errOut, code = runCLI("explain", snap, "--request", "lots"); code != 2 || !strings.Contains(errOut, "--request") {
		t.Errorf("bad request: exit %d, %q", code, errOut)
	}
	if _, errOut, code = runCLI("explain", filepath.Join(t.TempDir(), "none.pickle")); code != 1 || !strings.Contains(errOut, "none.pickle") {
		t.Errorf("missing file: exit %d, %q", code, errOut)
	}
}

// TestExplainHistory explains the OOM of a snapshot with history: the
// request is its last oom entry's, and fit is compare's recommendation
// for fit: the device total, on the same trace.
func TestExplainHistory(t *testing.T) {
	snap := importTestdata + "basic.p5.pickle"
	out, errOut, code := runCLI("explain", snap, "--device-total", "1GiB", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var x struct {
		RequestBytes uint64 `json:"request_bytes"`
		Class        string `json:"class"`
		Outside      *int64 `json:"outside_bytes"`
		Fit          *struct {
			Label string `json:"label"`
			Line  string `json:"line"`
			Goal  string `json:"goal"`
		} `json:"fit"`
	}
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatal(err)
	}
	explained := out
	if x.RequestBytes != 64<<20 || x.Outside == nil || x.Fit == nil {
		t.Fatalf("request %d, outside %v, fit %v: want the oom entry's 64 MiB, its device free, a fit", x.RequestBytes, x.Outside, x.Fit)
	}
	tr := filepath.Join(t.TempDir(), "basic.fst")
	if _, errOut, code := runCLI("import", "-q", snap, "--gpu-total", "1GiB", "-o", tr); code != 0 {
		t.Fatal(errOut)
	}
	// The goal is the device's memory less what was outside the
	// allocator: the room the allocator had.
	if want := fmt.Sprintf("fit:%d", 1<<30-*x.Outside); x.Fit.Goal != want {
		t.Errorf("fit goal %s, want %s", x.Fit.Goal, want)
	}
	out, errOut, code = runCLI("compare", tr, "--goal", x.Fit.Goal, "--json")
	if code != 0 {
		t.Fatalf("compare: exit %d: %s", code, errOut)
	}
	var cmp struct {
		Recommendation struct {
			Label string `json:"label"`
			Line  string `json:"line"`
		} `json:"recommendation"`
	}
	if err := json.Unmarshal([]byte(out), &cmp); err != nil {
		t.Fatal(err)
	}
	if x.Fit.Label != cmp.Recommendation.Label || x.Fit.Line != cmp.Recommendation.Line {
		t.Errorf("fit %q (%s), want compare's %q (%s)", x.Fit.Label, x.Fit.Line, cmp.Recommendation.Label, cmp.Recommendation.Line)
	}
	// The trace explains the same as its snapshot.
	out2, errOut, code := runCLI("explain", tr, "--json")
	if code != 0 {
		t.Fatalf("explain the trace: exit %d: %s", code, errOut)
	}
	if out2 != explained {
		t.Errorf("the imported trace explains differently:\n%s\nthe snapshot:\n%s", out2, explained)
	}
}
