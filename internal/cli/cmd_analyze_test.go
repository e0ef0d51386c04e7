package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAnalyzeReportAndJSON(t *testing.T) {
	path := synthAgents(t, 5000, 1)
	out, errOut, code := runCLI("analyze", path, "--top", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range []string{"Worst moments", "Stranded at peak reserved", "by request size", "by stream",
		"by agent or model", "by call stack", "Request sizes", "Advice", "expandable_segments:True",
		"max_split_size_mb:", "roundup_power2_divisions:", "garbage_collection_threshold:", "empty_cache every",
		"pad requests to powers of two", "fragsim record --"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 100 {
			t.Errorf("line wider than 100 columns: %q", l)
		}
	}
	out, errOut, code = runCLI("analyze", "--no-advice", "--json", "--policy", "expandable", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var a struct {
		Policy     string            `json:"policy"`
		Moments    []json.RawMessage `json:"moments"`
		Breakdowns []json.RawMessage `json:"breakdowns"`
		Requests   []json.RawMessage `json:"requests"`
		Advice     []json.RawMessage `json:"advice"`
		Workload   string            `json:"workload"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatal(err)
	}
	if a.Policy != "expandable" || len(a.Moments) == 0 || len(a.Requests) == 0 || len(a.Advice) != 0 || a.Workload == "" {
		t.Errorf("JSON: policy %q, %d moments, %d request classes, %d advice", a.Policy, len(a.Moments), len(a.Requests), len(a.Advice))
	}
	_, errOut, code = runCLI("analyze", path, "--policy", "nosuch")
	if code == 0 || !strings.Contains(errOut, "nosuch") {
		t.Errorf("unknown policy: exit %d, %q", code, errOut)
	}
}
