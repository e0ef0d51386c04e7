package analysis

import (
	"fmt"
	"sort"
	"strings"
)

// bytesEqual is the relative difference of peak reserved under which two
// candidates tie; the cheaper one then wins.
const bytesEqual = 0.01

// manyCalls is the multiple of the baseline's device calls past which a
// candidate's cost is called out next to its figures.
const manyCalls = 10

// Outcome is one candidate of a decision, as the recommendation weighed it.
type Outcome struct {
	Label string `json:"label"`
	// Policy is the allocator policy replayed; Setting is the change it
	// stands for ("" for the trace's own settings): a PYTORCH_CUDA_ALLOC_CONF
	// fragment, "empty_cache every N allocations", or a policy's name.
	Policy  string `json:"policy"`
	Setting string `json:"setting"`
	// Env is the line to paste into the environment ("" when no variable
	// gives it), Apply how to get it otherwise.
	Env   string `json:"env,omitempty"`
	Apply string `json:"apply"`
	// Exact is set when the candidate is PyTorch's own allocator replayed
	// exactly; a modelled one carries ErrorPct, its measured error of
	// peak reserved against real runs.
	Exact    bool    `json:"exact"`
	ErrorPct float64 `json:"error_pct,omitempty"`
	Limit    bool    `json:"physical_limit,omitempty"`

	PeakReservedBytes uint64  `json:"peak_reserved_bytes"`
	AtPeakPct         float64 `json:"at_peak_pct"`
	OOMs              int64   `json:"ooms"`
	DeviceCalls       int64   `json:"device_calls"`
	AllocatorMs       float64 `json:"allocator_ms"`
	// CallsNote says when the candidate needs more than 10x the
	// baseline's device calls ("18x the baseline's device calls").
	CallsNote string `json:"calls_note,omitempty"`
	// MinCapacityBytes is the smallest device it runs on with no OOM
	// (fit goals only).
	MinCapacityBytes uint64 `json:"min_capacity_bytes,omitempty"`
	// Excluded says why the candidate cannot be recommended.
	Excluded    string `json:"excluded,omitempty"`
	Note        string `json:"note,omitempty"`
	Error       string `json:"error,omitempty"`
	Recommended bool   `json:"recommended,omitempty"`
	Rank        int    `json:"rank"`

	run *Run
}

// Recommendation is the decision's answer: the setting to use for the goal.
type Recommendation struct {
	Label   string `json:"label"`
	Setting string `json:"setting"` // "" to keep the trace's own settings
	Policy  string `json:"policy"`
	// Conf is the PYTORCH_CUDA_ALLOC_CONF value, Env the line to paste
	// (both "" when no variable gives the change), Apply how to get it.
	Conf  string `json:"conf"`
	Env   string `json:"env"`
	Apply string `json:"apply"`
	Goal  string `json:"goal"`
	Exact bool   `json:"exact"`

	PeakReservedBytes         uint64  `json:"peak_reserved_bytes"`
	BaselinePeakReservedBytes uint64  `json:"baseline_peak_reserved_bytes"`
	SavingBytes               int64   `json:"saving_bytes"` // baseline − recommended peak reserved
	AtPeakPct                 float64 `json:"at_peak_pct"`
	BaselineAtPeakPct         float64 `json:"baseline_at_peak_pct"`
	DeviceCalls               int64   `json:"device_calls"`
	BaselineDeviceCalls       int64   `json:"baseline_device_calls"`
	MinCapacityBytes          uint64  `json:"min_capacity_bytes,omitempty"`
	ErrorPct                  float64 `json:"error_pct,omitempty"`
	// Fits is false when a fit goal has no candidate within its size.
	Fits bool `json:"fits"`
	// Line is the text report's "Recommended: ..." line.
	Line string `json:"line"`
}

// Decision is the recommendation for a goal, with every candidate weighed.
// compare, analyze and the reports all show one, made by Decide.
type Decision struct {
	Goal Goal `json:"goal"`
	// Baseline is the label of the run measured against: PyTorch's
	// caching allocator under the trace's settings.
	Baseline       string          `json:"baseline"`
	Recommendation *Recommendation `json:"recommendation"`
	// Results are the candidates, best first for the goal; those that
	// cannot be recommended (failed, more OOMs than the baseline, no fit,
	// the physical limit) last.
	Results []Outcome `json:"results"`
}

// isConf reports whether a setting is a PYTORCH_CUDA_ALLOC_CONF fragment.
func isConf(s string) bool { return s != "" && strings.Contains(s, ":") && !strings.Contains(s, " ") }

// baselineRun is the run the others are measured against: the baseline
// policy (allocator.Baseline) under the trace's own settings, else the
// first run that finished.
func baselineRun(runs []*Run) *Run {
	base := baselinePolicy()
	for _, r := range runs {
		if r.OK() && r.Policy == base && r.Setting == "" && r.EmptyCacheEvery == 0 {
			return r
		}
	}
	for _, r := range runs {
		if r.OK() && !r.Limit {
			return r
		}
	}
	return nil
}

func calls(r *Run) int64 { return r.Result.DeviceAllocs + r.Result.DeviceFrees }

// cheaper reports whether a costs less than b: the estimated allocator
// time when both have one, else the device calls.
func cheaper(a, b *Outcome) bool {
	if a.run.Cost != nil && b.run.Cost != nil && a.AllocatorMs != b.AllocatorMs {
		return a.AllocatorMs < b.AllocatorMs
	}
	return a.DeviceCalls < b.DeviceCalls
}

// primary is the goal's figure, lower better.
func primary(g Goal, o *Outcome) float64 {
	switch g.Kind {
	case GoalFragmentation:
		return o.AtPeakPct
	case GoalFit:
		return o.AllocatorMs*1e6 + float64(o.DeviceCalls) // cost first
	}
	return float64(o.PeakReservedBytes)
}

// pick returns the best of the candidates for the goal: the lowest figure,
// and among those within its tie band (1% of bytes, 0.05 points of
// at_peak_pct) the cheapest. A fit goal takes the cheapest, ties to the
// smaller min capacity.
func pick(g Goal, cands []*Outcome) *Outcome {
	if len(cands) == 0 {
		return nil
	}
	if g.Kind == GoalFit {
		best := cands[0]
		for _, c := range cands[1:] {
			if cheaper(c, best) || (!cheaper(best, c) && c.MinCapacityBytes < best.MinCapacityBytes) {
				best = c
			}
		}
		return best
	}
	low := cands[0]
	for _, c := range cands[1:] {
		if primary(g, c) < primary(g, low) {
			low = c
		}
	}
	inBand := func(c *Outcome) bool {
		if g.Kind == GoalFragmentation {
			return c.AtPeakPct <= low.AtPeakPct+pctEqual
		}
		return float64(c.PeakReservedBytes) <= float64(low.PeakReservedBytes)*(1+bytesEqual)
	}
	var best *Outcome
	for _, c := range cands {
		if !inBand(c) {
			continue
		}
		if best == nil || cheaper(c, best) || (!cheaper(best, c) && primary(g, c) < primary(g, best)) {
			best = c
		}
	}
	return best
}

// beats reports whether a modelled candidate m beats the best exact one e
// by more than m's error. A model whose error was never measured against
// real runs does not.
func beats(g Goal, m, e *Outcome) bool {
	if m.ErrorPct <= 0 {
		return false
	}
	switch g.Kind {
	case GoalFragmentation:
		return m.AtPeakPct < e.AtPeakPct-m.ErrorPct
	case GoalFit: // it fits with its error as margin already; its cost is modelled too
		if m.run.Cost != nil && e.run.Cost != nil {
			return m.AllocatorMs < e.AllocatorMs*(1-m.ErrorPct/100)
		}
		return float64(m.DeviceCalls) < float64(e.DeviceCalls)*(1-m.ErrorPct/100)
	}
	return float64(m.PeakReservedBytes) < float64(e.PeakReservedBytes)*(1-m.ErrorPct/100)
}

// Decide weighs the runs for the goal and recommends one. The runs are a
// comparison's or an analysis's replays: the baseline (caching under the
// trace's settings), the policies and settings; ideal (Limit) is shown,
// never chosen. A candidate with more OOMs than the baseline, or, for a
// fit goal, a min capacity (Result.MinCapacityBytes) over the size, is
// not chosen. A modelled policy wins only when it beats the best exact
// candidate by more than its measured error; with a fit goal it must fit
// with its error as margin.
func Decide(runs []*Run, goal Goal) *Decision {
	if goal.Kind == "" {
		goal = Goal{Kind: GoalReserved}
	}
	d := &Decision{Goal: goal}
	base := baselineRun(runs)
	if base != nil {
		d.Baseline = base.Label
	}
	outs := make([]Outcome, len(runs))
	for i, r := range runs {
		outs[i] = outcome(r, base, goal)
	}
	var exact, modelled, unmeasured []*Outcome
	for i := range outs {
		o := &outs[i]
		if o.Excluded != "" {
			continue
		}
		if o.Exact {
			exact = append(exact, o)
		} else if o.ErrorPct > 0 { // an unmeasured model never beats an exact replay
			modelled = append(modelled, o)
		} else {
			unmeasured = append(unmeasured, o)
		}
	}
	win := pick(goal, exact)
	if m := pick(goal, modelled); m != nil && (win == nil || beats(goal, m, win)) {
		win = m
	}
	if win == nil { // no exact candidate at all (a comparison of models only)
		win = pick(goal, unmeasured)
	}
	if win != nil {
		win.Recommended = true
	}
	sort.SliceStable(outs, func(i, j int) bool {
		a, b := &outs[i], &outs[j]
		if a.Recommended != b.Recommended {
			return a.Recommended
		}
		if (a.Excluded == "") != (b.Excluded == "") {
			return a.Excluded == ""
		}
		if a.Error != "" || b.Error != "" {
			return b.Error != "" && a.Error == ""
		}
		return primary(goal, a) < primary(goal, b)
	})
	for i := range outs {
		outs[i].Rank = i + 1
	}
	d.Results = outs
	d.Recommendation = recommend(goal, base, outs)
	return d
}

// outcome describes one run for the decision.
func outcome(r *Run, base *Run, g Goal) Outcome {
	o := Outcome{Label: r.Label, Policy: r.Policy, Setting: settingOf(r), Apply: r.Apply, Limit: r.Limit,
		Error: r.Error, Note: r.Note, run: r}
	o.Exact, o.ErrorPct = trust(r.Policy)
	if o.Exact {
		o.ErrorPct = 0
	}
	if isConf(o.Setting) {
		o.Env = confEnv(o.Setting)
	}
	if o.Apply == "" {
		o.Apply = applyHint(r.Policy, r.Setting)
	}
	if !r.OK() {
		o.Excluded = "the replay failed"
		return o
	}
	res := r.Result
	o.PeakReservedBytes, o.AtPeakPct, o.OOMs = res.PeakReservedBytes, res.Fragmentation.AtPeakPct, res.OOMs
	o.DeviceCalls, o.MinCapacityBytes = calls(r), res.MinCapacityBytes
	if r.Cost != nil {
		o.AllocatorMs = r.Cost.Ms
	}
	if base != nil && base.OK() && !r.Limit {
		if bc := calls(base); bc > 0 && o.DeviceCalls > manyCalls*bc {
			o.CallsNote = fmt.Sprintf("%.0fx the baseline's device calls", float64(o.DeviceCalls)/float64(bc))
		}
	}
	switch {
	case r.Limit:
		o.Excluded = "the physical limit: no allocator reaches it"
	case base != nil && res.OOMs > base.Result.OOMs:
		o.Excluded = fmt.Sprintf("%d OOMs where the baseline has %d", res.OOMs, base.Result.OOMs)
	case g.Kind == GoalFit && o.MinCapacityBytes == 0:
		o.Excluded = "no min capacity: OOMs even on an unlimited device"
	case g.Kind == GoalFit && float64(o.MinCapacityBytes)*(1+o.ErrorPct/100) > float64(g.FitBytes):
		o.Excluded = fmt.Sprintf("needs %s, over %s", FmtBytes(o.MinCapacityBytes), FmtBytes(g.FitBytes))
		if o.ErrorPct > 0 && o.MinCapacityBytes <= g.FitBytes {
			o.Excluded += fmt.Sprintf(" with its %.1f%% error", o.ErrorPct)
		}
	}
	return o
}

// recommend turns the winner into the recommendation.
func recommend(g Goal, base *Run, outs []Outcome) *Recommendation {
	var win *Outcome
	for i := range outs {
		if outs[i].Recommended {
			win = &outs[i]
		}
	}
	rec := &Recommendation{Goal: g.String(), Fits: win != nil}
	if base != nil && base.OK() {
		rec.BaselinePeakReservedBytes = base.Result.PeakReservedBytes
		rec.BaselineAtPeakPct = base.Result.Fragmentation.AtPeakPct
		rec.BaselineDeviceCalls = calls(base)
	}
	if win == nil {
		rec.Line = noneLine(g, outs)
		return rec
	}
	r := win.run
	rec.Label, rec.Setting, rec.Policy, rec.Apply, rec.Env = win.Label, win.Setting, win.Policy, win.Apply, win.Env
	if isConf(win.Setting) {
		rec.Conf = win.Setting
		if r.Setting != "" && r.Conf != "" {
			rec.Conf = r.Conf // the setting joined to the trace's own
		}
		rec.Env = confEnv(rec.Conf)
	}
	rec.Exact, rec.ErrorPct = win.Exact, win.ErrorPct
	rec.PeakReservedBytes, rec.AtPeakPct, rec.DeviceCalls = win.PeakReservedBytes, win.AtPeakPct, win.DeviceCalls
	rec.SavingBytes = int64(rec.BaselinePeakReservedBytes) - int64(rec.PeakReservedBytes)
	if g.Kind == GoalFit {
		rec.MinCapacityBytes = win.MinCapacityBytes
	}
	rec.Line = recLine(g, rec, win, r == base)
	return rec
}

// recLine is "Recommended: PYTORCH_CUDA_ALLOC_CONF=... (N GiB less peak
// reserved; exact replay)".
func recLine(g Goal, rec *Recommendation, win *Outcome, isBase bool) string {
	what := rec.Env
	switch {
	case isBase || win.Setting == "":
		what = "keep the current settings"
	case what == "":
		what = win.Apply
	}
	var parts []string
	switch g.Kind {
	case GoalFit:
		parts = append(parts, fmt.Sprintf("fits in %s: min capacity %s", FmtBytes(g.FitBytes), FmtBytes(rec.MinCapacityBytes)))
	case GoalFragmentation:
		parts = append(parts, fmt.Sprintf("at_peak_pct %.1f%% from %.1f%%", rec.AtPeakPct, rec.BaselineAtPeakPct))
	}
	switch {
	case isBase:
		if g.Kind == GoalReserved {
			parts = append(parts, "no candidate lowers peak reserved by more than 1%")
		}
	case rec.SavingBytes > 0:
		parts = append(parts, FmtBytes(uint64(rec.SavingBytes))+" less peak reserved")
	case rec.SavingBytes < 0:
		parts = append(parts, FmtBytes(uint64(-rec.SavingBytes))+" more peak reserved")
	default:
		parts = append(parts, "the same peak reserved")
	}
	if g.Kind == GoalFit || win.CallsNote != "" {
		calls := fmtCount(win.DeviceCalls) + " device calls"
		if win.CallsNote != "" {
			calls += ", " + win.CallsNote
		}
		parts = append(parts, calls)
	}
	switch {
	case rec.Exact:
		parts = append(parts, "exact replay")
	case rec.ErrorPct > 0:
		parts = append(parts, fmt.Sprintf("modelled, %.1f%% measured error", rec.ErrorPct))
	default:
		parts = append(parts, "modelled, error not measured")
	}
	return fmt.Sprintf("Recommended: %s (%s)", what, strings.Join(parts, "; "))
}

// noneLine says that nothing meets the goal.
func noneLine(g Goal, outs []Outcome) string {
	if g.Kind != GoalFit {
		return "Recommended: none (no candidate replayed without failing or more OOMs than the baseline)"
	}
	var least *Outcome
	for i := range outs {
		o := &outs[i]
		if o.MinCapacityBytes > 0 && !o.Limit && (least == nil || o.MinCapacityBytes < least.MinCapacityBytes) {
			least = o
		}
	}
	if least == nil {
		return fmt.Sprintf("Recommended: none fits in %s", FmtBytes(g.FitBytes))
	}
	return fmt.Sprintf("Recommended: none fits in %s; the smallest min capacity is %s (%s)",
		FmtBytes(g.FitBytes), FmtBytes(least.MinCapacityBytes), orDefault(least.Setting))
}

func orDefault(s string) string {
	if s == "" {
		return "the current settings"
	}
	return s
}
