package cli

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/synth"
)

// synthTrace writes a small multi-agent trace and returns its path.
func synthTrace(t *testing.T, events int64) string {
	t.Helper()
	return synthAgents(t, events, synth.DefaultConfig().Agents)
}

// synthAgents writes a trace of the given agents (synthTrace's defaults
// otherwise) and returns its path. Every agent holds its own model's
// weights, so fewer agents make every replay's measure of the segments
// cheaper: the tests of a command's plumbing take one or two.
func synthAgents(t *testing.T, events int64, agents int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agents.fst")
	h := &trace.Header{Producer: trace.ProducerSynthetic, GPUName: "NVIDIA H200", GPUTotalBytes: 140 << 30,
		TorchVersion: "2.11.0", Created: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	w, err := trace.Create(path, h)
	if err != nil {
		t.Fatal(err)
	}
	cfg := synth.DefaultConfig()
	cfg.Events = events
	cfg.Agents = agents
	if _, err := synth.Generate(w, cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCLI(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = Main(append([]string{"fragsim"}, args...), &o, &e)
	return o.String(), e.String(), code
}

func TestCompareTableAndVerdict(t *testing.T) {
	// Two agents: the table and the verdict are laid out the same for any
	// trace, and each agent's weights make every replay dearer.
	path := synthAgents(t, 5000, 2)
	out, errOut, code := runCLI("compare", path, "--policies", "caching,expandable,ideal",
		"--setting", "max_split_size_mb:64", "--setting", "roundup_power2_divisions:4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for _, l := range lines {
		// The Recommended line alone is never wrapped: scripts grep it.
		if len([]rune(l)) > 100 && !strings.HasPrefix(l, "Recommended: ") {
			t.Errorf("line wider than 100 columns: %q", l)
		}
	}
	for _, row := range []string{"peak reserved", "peak requested", "at_peak_pct", "peak_ratio_pct", "time_weighted_pct",
		"external_pct", "stranded at peak", "overhead ratio", "device calls", "alloc retries", "OOMs", "reserved vs ideal"} {
		if !strings.Contains(out, "\n"+row) {
			t.Errorf("table lacks row %q", row)
		}
	}
	// One ranked table of every candidate, policies and settings, each once.
	if n := strings.Count(out, "\nrank  candidate "); n != 1 {
		t.Errorf("%d candidate tables, want 1:\n%s", n, out)
	}
	if !regexp.MustCompile(`\nrank  candidate +reserved +frag +stranded +calls +OOMs +trust\n`).MatchString(out) {
		t.Errorf("candidate table header lacks a column:\n%s", out)
	}
	for _, c := range []string{"the current settings", "expandable_segments:True", "max_split_size_mb:64",
		"roundup_power2_divisions:4", "ideal (physical limit)"} {
		if n := regexp.MustCompile(`(?m)^ *\d+[* ]  `+regexp.QuoteMeta(c)+` `).FindAllStringIndex(out, -1); len(n) != 1 {
			t.Errorf("candidate %q in %d rows, want 1:\n%s", c, len(n), out)
		}
	}
	rec := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "Recommended: ") {
			rec = i
		}
	}
	if rec < 0 || rec+4 >= len(lines) {
		t.Fatalf("no Recommended line, or too few after it:\n%s", out)
	}
	var before, after, cost, methods int
	for i := rec; i < len(lines); i++ {
		switch l := lines[i]; {
		case strings.HasPrefix(l, "Fragmentation before: "):
			before = i
			if !regexp.MustCompile(`^Fragmentation before: \d+\.\d% \(caching, at peak reserved\)$`).MatchString(l) {
				t.Errorf("before line %q", l)
			}
		case strings.HasPrefix(l, "Fragmentation after: "):
			after = i
			if !regexp.MustCompile(`^Fragmentation after: \d+\.\d% \(.+\)$`).MatchString(l) {
				t.Errorf("after line %q", l)
			}
		case strings.HasPrefix(l, "Allocator cost (estimated): "):
			cost = i
			if !regexp.MustCompile(`^Allocator cost \(estimated\): [\d,]+ calls( \([\d,]+ pages\))?, \d+\.\d ms after, [\d,]+ calls( \([\d,]+ pages\))?, \d+\.\d ms before`).MatchString(l) {
				t.Errorf("cost line %q", l)
			}
		case strings.HasPrefix(l, "Methods: "):
			methods = i
		}
	}
	if !(rec < before && before < after && after < cost && cost < methods) {
		t.Errorf("verdict lines out of order: Recommended %d, before %d, after %d, cost %d, Methods %d", rec, before, after, cost, methods)
	}
	// Methods is a short paragraph of lines of at most 80 columns, then the trace line.
	n := len(lines)
	for _, l := range lines[methods : n-1] {
		if len([]rune(l)) > 80 {
			t.Errorf("methods line wider than 80 columns: %q", l)
		}
	}
	if n-1-methods > 6 {
		t.Errorf("methods take %d lines, want a short paragraph", n-1-methods)
	}
	if lines[n-1] != "Trace: 2026-11-30, NVIDIA H200, PyTorch 2.11.0" {
		t.Errorf("trace line %q", lines[n-1])
	}
}

func TestCompareJSONCSVAndPlots(t *testing.T) {
	path := synthAgents(t, 5000, 1)
	// Flags after the trace are honoured too. One setting stands for the
	// default variants, which TestCompareAndAnalyzeRecommendTheSame weighs:
	// the JSON is the same code for any candidates.
	out, errOut, code := runCLI("compare", path, "--policies", "caching,expandable,ideal", "--setting", "max_split_size_mb:64", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var m struct {
		BeforePct   *float64                   `json:"before_pct"`
		AfterPct    *float64                   `json:"after_pct"`
		AfterMethod string                     `json:"after_method"`
		Methods     []string                   `json:"methods"`
		Results     map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out[:min(len(out), 500)])
	}
	if m.BeforePct == nil || m.AfterPct == nil || m.AfterMethod == "" || len(m.Methods) == 0 {
		t.Errorf("verdict fields missing: %+v", m)
	}
	for _, p := range []string{"caching", "expandable", "ideal"} {
		if m.Results[p] == nil {
			t.Errorf("results lack %s", p)
		}
	}
	// --out draws every figure for any number of candidates, and each
	// candidate adds a series to draw (the dearest part of the test under
	// -race): one candidate shows that the four figures are written, as
	// PNG that decodes and SVG; analysis/plot checks what they show.
	dir := filepath.Join(t.TempDir(), "plots")
	if _, errOut, code := runCLI("compare", path, "--policies", "caching", "--setting", "none", "--out", dir); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, name := range []string{"fragmentation_hist", "timeline", "views", "policies"} {
		f, err := os.Open(filepath.Join(dir, name+".png"))
		if err != nil {
			t.Errorf("%s.png: %v", name, err)
			continue
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s.png does not decode: %v", name, err)
		}
		f.Close()
		if _, err := os.Stat(filepath.Join(dir, name+".svg")); err != nil {
			t.Errorf("%s.svg: %v", name, err)
		}
	}
	out, errOut, code = runCLI("compare", "--policies", "caching,ideal", "--setting", "max_split_size_mb:128", "--csv", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[0][0] != "label" || rows[1][0] != "caching" || rows[2][0] != "ideal" || rows[3][0] != "caching+max_split_size_mb:128" {
		t.Errorf("CSV rows %v", rows)
	}
}

func TestCompareBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.fst")
	os.WriteFile(bad, []byte("not a trace at all"), 0o644)
	_, errOut, code := runCLI("compare", bad)
	if code == 0 || !strings.Contains(errOut, "bad.fst") || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
		t.Errorf("bad trace: exit %d, stderr %q (want one line naming the file)", code, errOut)
	}
	_, errOut, code = runCLI("compare", filepath.Join(dir, "missing.fst"))
	if code == 0 || !strings.Contains(errOut, "missing.fst") {
		t.Errorf("missing trace: exit %d, stderr %q", code, errOut)
	}
	path := synthTrace(t, 2000)
	_, errOut, code = runCLI("compare", path, "--policies", "caching,nosuch")
	if code == 0 || !strings.Contains(errOut, "nosuch") {
		t.Errorf("unknown policy: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runCLI("compare", path, "--capacity", "lots")
	if code == 0 || !strings.Contains(errOut, "lots") {
		t.Errorf("bad capacity: exit %d, stderr %q", code, errOut)
	}
}

func TestCompareOfCutTraceReportsWhatWasRead(t *testing.T) {
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
	out, errs, code := runCLI("compare", cut, "--policies", "caching,expandable", "--setting", "none")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr %q", code, errs)
	}
	if !strings.Contains(out, "Fragmentation before:") || !strings.Contains(errs, "truncated at byte offset") || !strings.Contains(errs, cut) {
		t.Errorf("want the verdict of the events read and a one-line error naming the file; stdout %q stderr %q", out, errs)
	}
}
