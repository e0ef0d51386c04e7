package analysis

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/replay"
)

func TestParseGoal(t *testing.T) {
	for in, want := range map[string]Goal{
		"":              {Kind: GoalReserved},
		"reserved":      {Kind: GoalReserved},
		"Fragmentation": {Kind: GoalFragmentation},
		"fit:24GiB":     {Kind: GoalFit, FitBytes: 24 << 30},
		"fit:a100-80g":  {Kind: GoalFit, FitBytes: 80 << 30},
	} {
		g, err := ParseGoal(in)
		if err != nil || g.Kind != want.Kind || g.FitBytes != want.FitBytes {
			t.Errorf("ParseGoal(%q) = %+v, %v; want %+v", in, g, err, want)
		}
	}
	for _, bad := range []string{"memory", "fit:", "fit:lots", "fit:0"} {
		if _, err := ParseGoal(bad); err == nil {
			t.Errorf("ParseGoal(%q): no error", bad)
		}
	}
}

// cand is a run for the decision tests: peak reserved, at_peak_pct,
// device calls (as allocs), allocator time and min capacity.
func cand(label, policy, setting string, peak uint64, pct float64, calls int64, ms float64, minCap uint64) *Run {
	r := &Run{Label: label, Policy: policy, Setting: setting, Result: &replay.Result{PeakReservedBytes: peak,
		DeviceAllocs: calls, MinCapacityBytes: minCap}, Cost: &AllocatorCost{Calls: calls, Ms: ms}}
	r.Result.Fragmentation.AtPeakPct = pct
	return r
}

func TestDecideGoals(t *testing.T) {
	const G = 1 << 30
	runs := []*Run{
		cand("caching", "caching", "", 2130*G/1000, 20.4, 108, 5.2, 1820*G/1000),
		cand("expandable", "expandable", "", 1820*G/1000, 18.2, 103, 6.5, 1760*G/1000),
		// Within 1% of expandable's bytes but dearer: loses the reserved goal.
		cand("caching+empty_cache every 100 allocations", "caching", "empty_cache every 100 allocations", 1819*G/1000, 7.1, 1971, 90, 1800*G/1000),
		cand("caching+empty_cache every 10000 allocations", "caching", "empty_cache every 10000 allocations", 1840*G/1000, 6.7, 393, 20, 1800*G/1000),
		// Lowest of all, but OOMs where the baseline does not.
		cand("caching+max_split_size_mb:64", "caching", "max_split_size_mb:64", 1*G, 1, 50, 1, 900*G/1000),
		// The model: 2.2% under expandable, within its error.
		cand("pooled", "pooled", "", 1780*G/1000, 4.5, 57, 2.8, 1780*G/1000),
		// Never measured: never beats an exact replay.
		cand("bfc", "bfc", "", 1500*G/1000, 2, 4, 0.4, 1500*G/1000),
		cand("ideal", "ideal", "", 1700*G/1000, 0, 400000, 0, 1700*G/1000),
	}
	runs[4].Result.OOMs = 1
	runs[7].Limit, runs[7].Cost = true, nil
	for _, tc := range []struct {
		goal    string
		setting string
	}{
		{"reserved", "expandable_segments:True"},
		{"fragmentation", "empty_cache every 10000 allocations"},
		// The defaults fit (1.82 GiB) and cost least of the exact; the
		// model fits with its error as margin and costs less still.
		{"fit:2GiB", "backend:cudaMallocAsync"},
		{"fit:1.79GiB", "expandable_segments:True"}, // only expandable fits (the model not with its error)
	} {
		g, err := ParseGoal(tc.goal)
		if err != nil {
			t.Fatal(err)
		}
		d := Decide(runs, g)
		rec := d.Recommendation
		if rec == nil || !rec.Fits || rec.Setting != tc.setting {
			t.Errorf("%s: recommended %+v, want %q", tc.goal, rec, tc.setting)
			continue
		}
		if rec.Exact != (rec.Policy != "pooled") || (rec.ErrorPct != 0) == rec.Exact || d.Baseline != "caching" || rec.BaselinePeakReservedBytes != runs[0].Result.PeakReservedBytes ||
			rec.SavingBytes != int64(rec.BaselinePeakReservedBytes)-int64(rec.PeakReservedBytes) {
			t.Errorf("%s: recommendation fields %+v", tc.goal, rec)
		}
		if (g.Kind == GoalFit) != (rec.MinCapacityBytes > 0) {
			t.Errorf("%s: min capacity %d", tc.goal, rec.MinCapacityBytes)
		}
		if !d.Results[0].Recommended || d.Results[0].Setting != tc.setting {
			t.Errorf("%s: first result %+v is not the recommendation", tc.goal, d.Results[0])
		}
		for _, o := range d.Results {
			switch o.Label {
			case "ideal", "caching+max_split_size_mb:64":
				if o.Excluded == "" || o.Recommended {
					t.Errorf("%s: %s not excluded", tc.goal, o.Label)
				}
			case "caching+empty_cache every 100 allocations":
				if !strings.Contains(o.CallsNote, "18x") {
					t.Errorf("%s: calls note %q, want 18x the baseline's", tc.goal, o.CallsNote)
				}
			case "pooled":
				if o.Exact || o.ErrorPct <= 0 {
					t.Errorf("pooled trust: exact %v, error %v", o.Exact, o.ErrorPct)
				}
			}
		}
	}
	rec := Decide(runs, Goal{}).Recommendation
	if rec.Line != "Recommended: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (317.4 MiB less peak reserved; exact replay)" {
		t.Errorf("line %q", rec.Line)
	}
	if rec.Env != "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" || rec.Conf != "expandable_segments:True" || rec.Goal != "reserved" {
		t.Errorf("env %q conf %q goal %q", rec.Env, rec.Conf, rec.Goal)
	}

	// A model beating the best exact by more than its error wins, and says so.
	_, errPct := trust("pooled")
	runs[5].Result.PeakReservedBytes = uint64(float64(runs[1].Result.PeakReservedBytes) * (1 - errPct/100 - 0.01))
	rec = Decide(runs, Goal{Kind: GoalReserved}).Recommendation
	if rec.Policy != "pooled" || rec.Exact || rec.ErrorPct != errPct || !strings.Contains(rec.Line, "modelled") ||
		rec.Env != "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync" {
		t.Errorf("model beyond its error: %+v", rec)
	}
	// A fitting model cheaper by less than its error does not win a fit goal.
	runs[5].Cost.Ms = runs[0].Cost.Ms * (1 - errPct/200)
	if rec := Decide(runs, Goal{Kind: GoalFit, FitBytes: 2 << 30}).Recommendation; rec.Policy != "caching" || rec.Setting != "" {
		t.Errorf("fit with a model cheaper within its error: %+v", rec)
	}
	// Nothing fits: no recommendation, and the line says the least needed.
	g, _ := ParseGoal("fit:1GiB")
	rec = Decide(runs[:4], g).Recommendation
	if rec.Fits || rec.Setting != "" || !strings.HasPrefix(rec.Line, "Recommended: none fits in 1.00 GiB; the smallest min capacity is 1.76 GiB (expandable_segments:True)") {
		t.Errorf("nothing fits: %+v", rec)
	}
	// Nothing better than the baseline: keep the defaults.
	rec = Decide([]*Run{runs[0], cand("caching+max_split_size_mb:512", "caching", "max_split_size_mb:512", runs[0].Result.PeakReservedBytes, 20.4, 108, 5.2, 0)}, Goal{}).Recommendation
	if rec.Setting != "" || !strings.HasPrefix(rec.Line, "Recommended: keep the current settings") {
		t.Errorf("baseline best: %+v", rec)
	}
}

// decisionOn replays the trace for compare and analyze alike, on the given
// candidates, and returns both decisions.
func decisionOn(t *testing.T, path string, g Goal, policies []string, settings []Setting) (*Comparison, *Analysis) {
	t.Helper()
	return decisionOf(t, replay.OpenFile(path), g, policies, settings)
}

// decisionOf is decisionOn of the trace open opens.
func decisionOf(t *testing.T, open Opener, g Goal, policies []string, settings []Setting) (*Comparison, *Analysis) {
	t.Helper()
	c, err := Compare(open, CompareOptions{Policies: policies, Settings: settings, Goal: g, MaxPoints: 16})
	if err != nil {
		t.Fatal(err)
	}
	opts := AnalyzeOptions{Policies: policies, Goal: g} // nil settings: the default candidates of both
	for _, s := range settings {
		opts.Sweep = append(opts.Sweep, Variant{Knob: "setting", Conf: s.Conf, EmptyCacheEvery: s.EmptyCacheEvery})
	}
	a, err := Analyze(open, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, a
}

// TestGoalsDisagreeOnKVDecode checks that the goals pick different
// settings on the KV-cache decode trace, where emptying the cache lowers
// at_peak_pct most and expandable segments lower peak reserved most, and
// that compare and analyze recommend the same, with the same line. The
// everyday pass reads the trace's first 60,000 events (a tenth: the
// decode steps' pattern, on which the goals already disagree); the long
// pass (FRAGSIM_LONG=1), the whole trace, and there the device calls
// too: emptying the cache every 100 allocations needs many times the
// baseline's calls only over the whole run (the cut's baseline calls are
// mostly its start's; TestDecideGoals checks the note on made-up runs).
func TestGoalsDisagreeOnKVDecode(t *testing.T) {
	path := filepath.Join("..", "traces", "kv_decode_s1.fst")
	if _, err := os.Stat(path); err != nil {
		t.Skip("no kv_decode_s1.fst in this checkout")
	}
	long := os.Getenv("FRAGSIM_LONG") == "1"
	open := replay.OpenFile(path)
	if !long {
		open = opener(tracePrefix(t, path, 60_000))
	}
	// Both goals weigh the same replays: decide each on one comparison
	// and one analysis.
	c, a := decisionOf(t, open, Goal{Kind: GoalReserved}, []string{"caching", "expandable", "ideal"},
		[]Setting{{Policy: "caching", EmptyCacheEvery: 100}, {Policy: "caching", EmptyCacheEvery: 10000}})
	for goal, want := range map[GoalKind]string{
		GoalReserved:      "expandable_segments:True",
		GoalFragmentation: "empty_cache every 100 allocations",
	} {
		cr, ar := Decide(c.Runs, Goal{Kind: goal}).Recommendation, Decide(a.Runs, Goal{Kind: goal}).Recommendation
		if cr.Setting != want || ar.Setting != want || cr.Line != ar.Line {
			t.Errorf("%s: compare recommends %q (%s), analyze %q (%s); want %q", goal, cr.Setting, cr.Line, ar.Setting, ar.Line, want)
		}
	}
	if c.RecommendedLine() != a.RecommendedLine() || c.After != "expandable" {
		t.Errorf("compare %q (after %s), analyze %q", c.RecommendedLine(), c.After, a.RecommendedLine())
	}
	// Emptying the cache every 100 allocations ties on bytes with expandable
	// segments but needs 18x the device calls, and says so.
	if !long {
		return
	}
	for _, o := range c.Decision.Results {
		if o.Setting == "empty_cache every 100 allocations" && !strings.Contains(o.CallsNote, "x the baseline's device calls") {
			t.Errorf("empty_cache every 100 allocations: calls note %q", o.CallsNote)
		}
	}
}

// TestFitGoalsOnKVDecode checks the fit goal there: the defaults fit in
// 2 GiB and cost least; in 1.79 GiB only expandable segments fit. It finds
// every candidate's min capacity by bisection, twice (compare, analyze).
func TestFitGoalsOnKVDecode(t *testing.T) {
	if os.Getenv("FRAGSIM_LONG") != "1" {
		t.Skip("long: set FRAGSIM_LONG=1")
	}
	goalsOnKVDecode(t, "fit:2GiB", "fit:1.79GiB")
}

// TestFitGoal checks the fit goal on a small trace in the everyday suite:
// each candidate's min capacity is found, the recommendation fits, and a
// size below every min capacity recommends nothing. Each min capacity
// is a bisection of replays: the everyday pass reads the first 25,000
// events of the training trace (a quarter: its first training steps,
// each allocating and freeing as the later ones do), the long pass
// (FRAGSIM_LONG=1) the whole trace.
func TestFitGoal(t *testing.T) {
	path := filepath.Join("..", "traces", "train_s1.fst")
	if _, err := os.Stat(path); err != nil {
		t.Skip("no train_s1.fst in this checkout")
	}
	open := replay.OpenFile(path)
	if os.Getenv("FRAGSIM_LONG") != "1" {
		open = opener(tracePrefix(t, path, 25_000))
	}
	g, _ := ParseGoal("fit:80GiB")
	c, err := Compare(open, CompareOptions{Policies: []string{"caching", "expandable"},
		Settings: []Setting{}, Goal: g, MaxPoints: 16})
	if err != nil {
		t.Fatal(err)
	}
	rec := c.Decision.Recommendation
	var least uint64
	for _, r := range c.Runs {
		mc := r.Result.MinCapacityBytes
		if mc == 0 || mc > r.Result.PeakReservedBytes+(2<<20) || mc < r.Result.PeakRequestedBytes {
			t.Errorf("%s: min capacity %d outside [peak requested %d, peak reserved %d]", r.Label, mc,
				r.Result.PeakRequestedBytes, r.Result.PeakReservedBytes)
		}
		if least == 0 || mc < least {
			least = mc
		}
	}
	if !rec.Fits || rec.MinCapacityBytes == 0 || rec.MinCapacityBytes > g.FitBytes || !strings.Contains(rec.Line, "fits in 80.00 GiB") {
		t.Errorf("fit:80GiB: %+v", rec)
	}
	// The cheapest fits: the recommendation costs no more than any other.
	for _, o := range c.Decision.Results {
		if o.Excluded == "" && o.AllocatorMs < c.Decision.Results[0].AllocatorMs {
			t.Errorf("%s costs %.2f ms, less than the recommended %.2f ms", o.Label, o.AllocatorMs, c.Decision.Results[0].AllocatorMs)
		}
	}
	small := Goal{Kind: GoalFit, FitBytes: least - (2 << 20)}
	if rec := Decide(c.Runs, small).Recommendation; rec.Fits || !strings.HasPrefix(rec.Line, "Recommended: none fits in ") {
		t.Errorf("below every min capacity: %+v", rec)
	}
}

func goalsOnKVDecode(t *testing.T, goals ...string) {
	path := filepath.Join("..", "traces", "kv_decode_s1.fst")
	if _, err := os.Stat(path); err != nil {
		t.Skip("no kv_decode_s1.fst in this checkout")
	}
	policies := []string{"caching", "expandable", "ideal"}
	settings := []Setting{{Policy: "caching", EmptyCacheEvery: 100}, {Policy: "caching", EmptyCacheEvery: 10000}}
	want := map[string]string{
		"reserved":      "expandable_segments:True",
		"fragmentation": "empty_cache every 10000 allocations",
		"fit:2GiB":      "",
		"fit:1.79GiB":   "expandable_segments:True",
	}
	for _, goal := range goals {
		g, _ := ParseGoal(goal)
		c, a := decisionOn(t, path, g, policies, settings)
		cr, ar := c.Decision.Recommendation, a.Decision.Recommendation
		if cr.Setting != want[goal] || ar.Setting != want[goal] {
			t.Errorf("%s: compare recommends %q, analyze %q; want %q", goal, cr.Setting, ar.Setting, want[goal])
		}
		if cr.Line != ar.Line || c.RecommendedLine() != a.RecommendedLine() {
			t.Errorf("%s: lines differ:\n%s\n%s", goal, cr.Line, ar.Line)
		}
		if c.After != cr.Label && !(cr.Setting == "" && c.After == c.Before) {
			t.Errorf("%s: verdict after %q, recommendation %q", goal, c.After, cr.Label)
		}
		if g.Kind != GoalFit {
			continue
		}
		b, _ := json.Marshal(c)
		var m struct {
			Recommendation map[string]any `json:"recommendation"`
			Results        map[string]map[string]any
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Recommendation["min_capacity_bytes"] == nil {
			t.Errorf("%s: recommendation lacks min_capacity_bytes", goal)
		}
		for label, r := range m.Results {
			if _, ok := r["min_capacity_bytes"]; !ok && label != "ideal" {
				t.Errorf("%s: results[%s] lacks min_capacity_bytes", goal, label)
			}
		}
	}
}

// TestCompareAndAnalyzeAgreeOnEveryTrace checks, on every committed
// trace and every goal, that compare and analyze recommend the same
// setting with their default candidates. Each replays them on its own,
// with the fit goal's min capacities (which do not depend on the size);
// each goal decided on the one's replays must give what it gives on the
// other's, the fit goal at the baseline's own peak reserved.
func TestCompareAndAnalyzeAgreeOnEveryTrace(t *testing.T) {
	if os.Getenv("FRAGSIM_LONG") != "1" {
		t.Skip("long: set FRAGSIM_LONG=1")
	}
	paths, _ := filepath.Glob(filepath.Join("..", "traces", "*.fst"))
	if len(paths) == 0 {
		t.Skip("no committed traces")
	}
	for _, path := range paths {
		c, a := decisionOn(t, path, Goal{Kind: GoalFit, FitBytes: 1 << 40}, nil, nil)
		base := c.Run(c.Decision.Baseline).Result.PeakReservedBytes
		for _, g := range []Goal{{Kind: GoalReserved}, {Kind: GoalFragmentation}, {Kind: GoalFit, FitBytes: base}} {
			cr, ar := Decide(c.Runs, g).Recommendation, Decide(a.Runs, g).Recommendation
			if cr.Setting != ar.Setting || cr.Policy != ar.Policy || cr.Line != ar.Line {
				t.Errorf("%s, goal %s: compare %q (%s), analyze %q (%s)", filepath.Base(path), g, cr.Setting, cr.Line, ar.Setting, ar.Line)
			}
		}
	}
}
