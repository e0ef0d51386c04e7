package cli

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// unwrapped joins the lines of a wrapped paragraph that starts with prefix.
func unwrapped(out, prefix string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		s := l
		for _, next := range lines[i+1:] {
			if next == "" || strings.HasPrefix(next, "Fragmentation before:") || strings.HasPrefix(next, "Workload") {
				break
			}
			s += " " + next
		}
		return s
	}
	return ""
}

func TestCompareAndAnalyzeRecommendTheSame(t *testing.T) {
	path := synthAgents(t, 5000, 1)
	// compare without --policies or --setting weighs the default
	// candidates, the ones analyze weighs: for either goal both recommend
	// the same, in the same line (compare's is never wrapped, analyze's is).
	// compare's text and CSV carry what is compared, not its --json: with
	// every candidate's series that is megabytes, dear to write and read
	// under -race; TestCompareJSONCSVAndPlots checks the JSON is the same
	// comparison.
	cout, errs, code := runCLI("compare", path, "--goal", "reserved")
	if code != 0 {
		t.Fatalf("compare exit %d: %s", code, errs)
	}
	aout, errs, code := runCLI("analyze", path, "--goal", "reserved")
	if code != 0 {
		t.Fatalf("analyze exit %d: %s", code, errs)
	}
	if cl, al := unwrapped(cout, "Recommended: "), unwrapped(aout, "Recommended: "); cl == "" || !strings.Contains(cl, "replay") || al != cl {
		t.Errorf("reserved: compare recommends %q, analyze %q", cl, al)
	}
	cout, errs, code = runCLI("compare", path, "--goal", "fragmentation")
	if code != 0 {
		t.Fatalf("compare exit %d: %s", code, errs)
	}
	cl := unwrapped(cout, "Recommended: ")
	if cl == "" || !strings.Contains(cl, "replay") {
		t.Errorf("fragmentation: compare has no Recommended line:\n%s", cout)
	}
	aout, errs, code = runCLI("analyze", path, "--json", "--goal", "fragmentation")
	if code != 0 {
		t.Fatalf("analyze --json exit %d: %s", code, errs)
	}
	type rec struct {
		Recommendation map[string]any            `json:"recommendation"`
		Results        map[string]map[string]any `json:"results"`
		BeforePct      *float64                  `json:"before_pct"`
		Advice         []json.RawMessage         `json:"advice"`
	}
	var a rec
	if err := json.Unmarshal([]byte(aout), &a); err != nil {
		t.Fatal(err)
	}
	if a.Recommendation["line"] != cl || a.Recommendation["goal"] != "fragmentation" {
		t.Errorf("fragmentation: compare recommends %q, analyze %v (goal %v)", cl, a.Recommendation["line"], a.Recommendation["goal"])
	}
	// The same candidates, each with the same peak reserved.
	cout, errs, code = runCLI("compare", path, "--csv", "--goal", "fragmentation")
	if code != 0 {
		t.Fatalf("compare --csv exit %d: %s", code, errs)
	}
	rows, err := csv.NewReader(strings.NewReader(cout)).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("CSV: %v, %d rows", err, len(rows))
	}
	peak := slices.Index(rows[0], "peak_reserved_bytes")
	if peak < 0 || rows[0][0] != "label" {
		t.Fatalf("CSV header %v", rows[0])
	}
	if len(rows)-1 != len(a.Results) || len(a.Results) < 20 || len(a.Advice) == 0 {
		t.Errorf("%d compare rows, %d analyze results; %d advice rows", len(rows)-1, len(a.Results), len(a.Advice))
	}
	for _, row := range rows[1:] {
		ar := a.Results[row[0]]
		if ar == nil {
			t.Errorf("analyze has no result %s", row[0])
			continue
		}
		if want := strconv.FormatFloat(ar["peak_reserved_bytes"].(float64), 'f', -1, 64); row[peak] != want {
			t.Errorf("results[%s]: compare peak reserved %s, analyze %s", row[0], row[peak], want)
		}
	}
	// Both JSON recommendations carry the same fields, and compare's
	// results theirs (any candidates: here two).
	cout, errs, code = runCLI("compare", path, "--json", "--goal", "fragmentation", "--policies", "caching,expandable", "--setting", "none")
	if code != 0 {
		t.Fatalf("compare --json exit %d: %s", code, errs)
	}
	var c rec
	if err := json.Unmarshal([]byte(cout), &c); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"setting", "policy", "conf", "env", "goal", "exact", "peak_reserved_bytes",
		"baseline_peak_reserved_bytes", "saving_bytes", "device_calls", "line"} {
		if c.Recommendation[k] == nil || a.Recommendation[k] == nil {
			t.Errorf("recommendation lacks %q: compare %v, analyze %v", k, c.Recommendation[k], a.Recommendation[k])
		}
	}
	if len(c.Results) != 2 || c.BeforePct == nil {
		t.Errorf("%d compare results, want 2; before_pct %v", len(c.Results), c.BeforePct)
	}
	for label, r := range c.Results {
		for _, k := range []string{"policy", "setting", "peak_reserved_bytes", "ooms"} {
			if _, ok := r[k]; !ok {
				t.Errorf("results[%s] lacks %q", label, k)
			}
		}
	}
}

func TestGoalConfPolicyErrorsExit2(t *testing.T) {
	path := synthTrace(t, 2000)
	for _, args := range [][]string{
		{"compare", path, "--goal", "memory"},
		{"compare", path, "--goal", "fit:lots"},
		{"compare", path, "--conf", "max_split_size_mb:abc"},
		{"compare", path, "--policies", "caching,nosuch"},
		{"compare", path, "--setting", "nosuch_key:1"},
		{"analyze", path, "--goal", "memory"},
		{"analyze", path, "--conf", "nosuch_key:1"},
		{"analyze", path, "--policy", "nosuch"},
		{"replay", path, "--conf", "max_split_size_mb:abc"},
		{"replay", path, "--policy", "nosuch"},
	} {
		_, errs, code := runCLI(args...)
		if code != 2 || strings.Count(strings.TrimSpace(errs), "\n") > 0 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, errs)
		}
	}
}

func TestAnalyzeOfCutTraceExits2(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "traces", "baseline_s1.fst"))
	if err != nil {
		t.Skip("no baseline_s1.fst")
	}
	cut := filepath.Join(t.TempDir(), "cut.fst")
	if err := os.WriteFile(cut, data[:len(data)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := runCLI("analyze", cut, "--no-advice")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr %q", code, errs)
	}
	if !strings.Contains(out, "Worst moments") || !strings.Contains(errs, "truncated") || !strings.Contains(errs, cut) {
		t.Errorf("want the report of the events read and a one-line error naming the file; stdout %q stderr %q", out, errs)
	}
}

// stateOnlyTrace writes a snapshot with an initial state and no events:
// a 20 MiB segment holding one 1 MiB block, and an empty 2 MiB one.
func stateOnlyTrace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	text := filepath.Join(dir, "state.txt")
	const seg = `{"device":0,"stream":0,"addr":140000000000000,"size":20971520,"pool":"large","blocks":[` +
		`{"addr":140000000000000,"size":1048576,"requested":1000000,"state":"active_allocated"},` +
		`{"addr":140000001048576,"size":19922944,"state":"inactive"}]},` +
		`{"device":0,"stream":0,"addr":140000100000000,"size":2097152,"pool":"small","blocks":[` +
		`{"addr":140000100000000,"size":2097152,"state":"inactive"}]}`
	src := "# fragsim text v1\nheader {\"producer\":\"pytorch\",\"gpu_name\":\"NVIDIA H200\",\"gpu_total_bytes\":150109880320," +
		"\"torch_version\":\"2.11.0+cu130\",\"initial\":{\"segments\":[" + seg + "]}}\n"
	if err := os.WriteFile(text, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state.fst")
	if _, errs, code := runCLI("undump", "-o", path, text); code != 0 {
		t.Fatalf("undump: exit %d: %s", code, errs)
	}
	return path
}

func TestStateOnlySnapshot(t *testing.T) {
	path := stateOnlyTrace(t)
	out, errs, code := runCLI("replay", path, "--json")
	if code != 0 {
		t.Fatalf("replay exit %d: %s", code, errs)
	}
	var r struct {
		Events        int64  `json:"events"`
		PeakReserved  uint64 `json:"peak_reserved_bytes"`
		PeakActive    uint64 `json:"peak_active_bytes"`
		Fragmentation struct {
			AtPeakPct float64 `json:"at_peak_pct"`
			Stranded  uint64  `json:"stranded_bytes"`
		} `json:"fragmentation"`
		State struct {
			LargestFree uint64 `json:"largest_free_bytes"`
			Hint        string `json:"hint"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	pct := 100 * (1 - 1.0/22)
	if r.Events != 0 || r.PeakReserved != 22<<20 || r.PeakActive != 1<<20 || r.Fragmentation.Stranded != 19<<20 ||
		r.Fragmentation.AtPeakPct < pct-0.01 || r.Fragmentation.AtPeakPct > pct+0.01 || r.State.LargestFree != 19<<20 ||
		!strings.Contains(r.State.Hint, "_record_memory_history(") {
		t.Errorf("replay --json of the state: %+v", r)
	}
	out, _, code = runCLI("replay", path)
	if code != 0 || !strings.Contains(out, "torch.cuda.memory._record_memory_history(max_entries=") {
		t.Errorf("replay text: exit %d, no record hint:\n%s", code, out)
	}
	out, errs, code = runCLI("compare", path, "--policies", "caching,expandable", "--setting", "none")
	if code != 0 || !strings.Contains(out, "Fragmentation before: 95.5% (") || !strings.Contains(out, "Largest free block 19.0 MiB") ||
		!strings.Contains(out, "[16 MiB, 32 MiB)") {
		t.Errorf("compare: exit %d %s\n%s", code, errs, out)
	}
	out, errs, code = runCLI("analyze", path)
	if code != 0 || !strings.Contains(out, "at_peak_pct 95.5%") || !strings.Contains(out, "stranded 19.0 MiB") ||
		!strings.Contains(out, "Recommended: none yet") {
		t.Errorf("analyze: exit %d %s\n%s", code, errs, out)
	}
}
