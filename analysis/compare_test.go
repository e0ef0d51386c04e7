package analysis

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/replay"
)

func TestCompareParallelEqualsSequential(t *testing.T) {
	data := genTrace(t, 20000, 7)
	opts := CompareOptions{Policies: []string{"caching", "expandable", "bfc", "ideal"}, MaxPoints: 200}
	opts.Parallel = 1
	seq, err := Compare(opener(data), opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Parallel = 4
	par, err := Compare(opener(data), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(seq.Runs) != len(par.Runs) || len(seq.Runs) < 4 {
		t.Fatalf("%d and %d runs", len(seq.Runs), len(par.Runs))
	}
	for i := range seq.Runs {
		a, b := *seq.Runs[i], *par.Runs[i]
		a.WallS, b.WallS = 0, 0
		if a.Error != "" {
			t.Errorf("%s: %s", a.Label, a.Error)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("run %s differs between sequential and parallel", a.Label)
		}
		if s := a.SeriesNamed("reserved"); s == nil || len(s.Value) == 0 || len(s.Value) > 200 {
			t.Errorf("%s: reserved series missing or over 200 points", a.Label)
		} else if got, want := s.Max(), float64(a.Result.PeakReservedBytes)/gib; got != want {
			t.Errorf("%s: series peak %v GiB, result peak %v GiB", a.Label, got, want)
		}
	}
	if seq.BeforePct != par.BeforePct || seq.After != par.After || seq.AfterPct != par.AfterPct {
		t.Errorf("verdicts differ: %+v vs %+v", seq.VerdictLines(), par.VerdictLines())
	}
	// The histogram is taken where reserved peaked, as the engine reports.
	c := seq.Run("caching")
	if c.FreeHist == nil || c.FreeHist.Index != c.Result.Fragmentation.PeakIndex || c.FreeHist.ReservedBytes != c.Result.PeakReservedBytes {
		t.Errorf("caching histogram at %+v, peak at event %d (%d bytes)", c.FreeHist, c.Result.Fragmentation.PeakIndex, c.Result.PeakReservedBytes)
	}
	if c.FreeHist != nil {
		var free uint64
		for _, b := range c.FreeHist.Bins {
			free += b.Bytes
		}
		if free != c.FreeHist.FreeBytes || c.FreeHist.ReservedBytes-c.FreeHist.ActiveBytes != free {
			t.Errorf("histogram holds %d free bytes, reserved-active = %d", free, c.FreeHist.ReservedBytes-c.FreeHist.ActiveBytes)
		}
	}
}

// decideOn makes the comparison's decision and verdict of its runs, as
// Compare does.
func decideOn(c *Comparison) {
	c.Decision = Decide(c.Runs, c.Goal)
	c.verdict()
}

func run(label string, pct float64, peak uint64, ooms int64) *Run {
	r := &Run{Label: label, Policy: label, Apply: applyHint(label, ""), Result: &replay.Result{PeakReservedBytes: peak, OOMs: ooms}}
	r.Result.Fragmentation.AtPeakPct = pct
	return r
}

func TestVerdict(t *testing.T) {
	set := run("caching+max_split_size_mb:64", 9.0, 90, 0)
	set.Policy, set.Setting = "caching", "max_split_size_mb:64"
	set.Apply = applyHint("caching", set.Setting)
	c := &Comparison{Runs: []*Run{
		run("caching", 23.44, 100, 0),
		run("expandable", 9.02, 95, 0), // ties with the setting at 0.1%: loses on peak reserved
		run("bfc", 2, 80, 3),           // lower, but OOMs where caching did not
		run("ideal", 0, 70, 0),
		set,
		{Label: "pooled", Policy: "pooled", Error: "boom"},
	}}
	c.Runs[3].Limit = true
	c.Trace = TraceInfo{Date: "2026-11-30", GPU: "NVIDIA H200", Torch: "2.11.0", Events: 1234}
	decideOn(c)
	if c.Before != "caching" || c.BeforePct != 23.44 {
		t.Errorf("before %s %v", c.Before, c.BeforePct)
	}
	if c.After != set.Label || c.AfterPct != 9.0 {
		t.Errorf("after %s %v, want the setting at 9.0", c.After, c.AfterPct)
	}
	if c.LimitPct != 0 {
		t.Errorf("limit %v", c.LimitPct)
	}
	lines := c.VerdictLines()
	want := []string{
		"Fragmentation before: 23.4% (caching, at peak reserved)",
		"Fragmentation after: 9.0% (caching+max_split_size_mb:64: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64)",
	}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d = %q, want %q", i, lines[i], w)
		}
	}
	if !regexp.MustCompile(`^Methods: replayed 1,234 events under 3 policies and 1 setting; .*ideal 0\.0% is the physical limit$`).MatchString(lines[2]) {
		t.Errorf("methods line %q", lines[2])
	}
	if lines[3] != "Trace: 2026-11-30, NVIDIA H200, PyTorch 2.11.0" {
		t.Errorf("trace line %q", lines[3])
	}
	// ideal is never the after, even when it is the lowest.
	c2 := &Comparison{Runs: []*Run{run("caching", 30, 100, 0), run("ideal", 0, 50, 0)}}
	c2.Runs[1].Limit = true
	decideOn(c2)
	if c2.After != "caching" || c2.AfterPct != 30 {
		t.Errorf("after %s %v: ideal chosen or caching lost", c2.After, c2.AfterPct)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"before_pct", "after_pct", "after_method", "methods", "results"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	if res, _ := m["results"].(map[string]any); res["expandable"] == nil {
		t.Errorf("results not keyed by policy: %v", m["results"])
	}
}

func TestVerdictRegexp(t *testing.T) {
	c := &Comparison{Runs: []*Run{run("caching", 12.345, 100, 0), run("expandable", 4.96, 90, 0)}}
	decideOn(c)
	l := c.VerdictLines()
	if !regexp.MustCompile(`^Fragmentation before: \d+\.\d% \(caching, at peak reserved\)$`).MatchString(l[0]) ||
		!regexp.MustCompile(`^Fragmentation after: \d+\.\d% \(expandable: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\)$`).MatchString(l[1]) {
		t.Errorf("verdict lines %q", l[:2])
	}
	if l[0] != "Fragmentation before: 12.3% (caching, at peak reserved)" || l[1][:26] != "Fragmentation after: 5.0% " {
		t.Errorf("rounding: %q", l[:2])
	}
	if !strings.HasPrefix(l[3], "Trace: unknown date, unknown GPU, PyTorch unknown") {
		t.Errorf("trace line without header: %q", l[3])
	}
}

func TestVerdictPrefersExactReplays(t *testing.T) {
	// pooled is a model: its lower figure loses to an exact setting that
	// improves on the baseline.
	c := &Comparison{Runs: []*Run{run("caching", 14, 100, 0), run("pooled", 4.8, 96, 0), run("expandable", 7.1, 95, 0)}}
	decideOn(c)
	if c.After != "expandable" || c.AfterPct != 7.1 {
		t.Errorf("after %s %v, want expandable 7.1", c.After, c.AfterPct)
	}
	// When no exact setting improves on the baseline, the best model is
	// named, if it beats the baseline by more than its measured error.
	_, errPct := trust("pooled")
	beyond := uint64(100*(1-errPct/100)) - 1
	c = &Comparison{Runs: []*Run{run("caching", 14, 100, 0), run("expandable", 15, 101, 0), run("pooled", 4.8, beyond, 0)}}
	decideOn(c)
	if c.After != "pooled" {
		t.Errorf("after %s, want pooled", c.After)
	}
	// Within its error, it does not.
	within := uint64(100*(1-errPct/100)) + 1
	c = &Comparison{Runs: []*Run{run("caching", 14, 100, 0), run("expandable", 15, 101, 0), run("pooled", 4.8, within, 0)}}
	decideOn(c)
	if c.After != "caching" {
		t.Errorf("after %s, want caching: pooled at %d is within its %.1f%% error", c.After, within, errPct)
	}
}
