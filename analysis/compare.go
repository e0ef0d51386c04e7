package analysis

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// Opener opens a fresh reader on the trace; Compare calls it once per run.
type Opener func() (*trace.Reader, io.Closer, error)

// Run is one replay of a comparison: a policy, or a setting variant.
type Run struct {
	Label   string `json:"label"`
	Policy  string `json:"policy"`
	Conf    string `json:"conf,omitempty"`    // the conf the run was given
	Setting string `json:"setting,omitempty"` // the setting varied, for setting variants
	// EmptyCacheEvery is the rhythm of injected empty_cache calls (0: none).
	EmptyCacheEvery int64 `json:"empty_cache_every,omitempty"`
	// Note says how the run was made when that is not plain (a cap).
	Note string `json:"note,omitempty"`
	// Limit marks the physical limit (the registry's Limit policy): shown,
	// never chosen.
	Limit    bool           `json:"physical_limit,omitempty"`
	Apply    string         `json:"apply"` // how to get this allocator in PyTorch
	Result   *replay.Result `json:"result"`
	Series   []Series       `json:"series,omitempty"`
	FreeHist *FreeHistogram `json:"free_hist,omitempty"`
	Error    string         `json:"error,omitempty"`
	WallS    float64        `json:"wall_s"`
	// Truncated is set when the trace was cut short: the result covers the
	// events before the cut, and this says what was lost.
	Truncated string `json:"truncated,omitempty"`
	// Cost is the estimated time of the run's device calls.
	Cost *AllocatorCost `json:"allocator_cost,omitempty"`

	firstTimeNS int64 // the first event's time
}

// OK reports whether the run finished and has a result.
func (r *Run) OK() bool { return r != nil && r.Error == "" && r.Result != nil }

// MarshalJSON writes the run with the figures a decision weighs at its top
// level: setting (the change it stands for, "" for the trace's own settings),
// peak_reserved_bytes, ooms, exact and, when found, min_capacity_bytes.
func (r *Run) MarshalJSON() ([]byte, error) {
	type plain Run
	exact, errPct := trust(r.Policy)
	x := struct {
		*plain
		Setting           string  `json:"setting"`
		Exact             bool    `json:"exact"`
		ErrorPct          float64 `json:"error_pct,omitempty"`
		PeakReservedBytes *uint64 `json:"peak_reserved_bytes,omitempty"`
		OOMs              *int64  `json:"ooms,omitempty"`
		MinCapacityBytes  uint64  `json:"min_capacity_bytes,omitempty"`
	}{plain: (*plain)(r), Setting: settingOf(r), Exact: exact}
	if !exact {
		x.ErrorPct = errPct
	}
	if res := r.Result; res != nil {
		x.PeakReservedBytes, x.OOMs, x.MinCapacityBytes = &res.PeakReservedBytes, &res.OOMs, res.MinCapacityBytes
	}
	return json.Marshal(x)
}

// SeriesNamed returns the run's series of that name, nil if none.
func (r *Run) SeriesNamed(name string) *Series {
	for i := range r.Series {
		if r.Series[i].Name == name {
			return &r.Series[i]
		}
	}
	return nil
}

// TraceInfo describes the compared trace, from its header.
type TraceInfo struct {
	Name      string `json:"name,omitempty"`
	Date      string `json:"date,omitempty"` // YYYY-MM-DD
	GPU       string `json:"gpu,omitempty"`
	Torch     string `json:"torch_version,omitempty"`
	Producer  string `json:"producer,omitempty"`
	AllocConf string `json:"alloc_conf,omitempty"`
	Events    int64  `json:"events"`
}

// NewTraceInfo describes a trace from its header.
func NewTraceInfo(name string, h *trace.Header) TraceInfo {
	ti := TraceInfo{Name: name}
	if h == nil {
		return ti
	}
	ti.GPU, ti.Torch, ti.Producer, ti.AllocConf = h.GPUName, h.TorchVersion, h.Producer, h.AllocConf
	if !h.Created.IsZero() {
		ti.Date = h.Created.UTC().Format("2006-01-02")
	}
	return ti
}

// dateFrom fills a missing date from the first event's time, when that
// time is a Unix time (after 2001) rather than an arbitrary origin.
func (t *TraceInfo) dateFrom(timeNS int64) {
	if t.Date == "" && timeNS > 1e18 {
		t.Date = time.Unix(0, timeNS).UTC().Format("2006-01-02")
	}
}

// Line returns the verdict's trace line: "Trace: <date>, <GPU>, PyTorch <version>".
func (t TraceInfo) Line() string {
	or := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	return fmt.Sprintf("Trace: %s, %s, PyTorch %s",
		or(t.Date, "unknown date"), or(t.GPU, "unknown GPU"), or(t.Torch, "unknown"))
}

// Comparison is the result of Compare.
type Comparison struct {
	Trace TraceInfo `json:"trace"`
	// Runs in the order they were asked for: policies, then settings.
	Runs []*Run `json:"-"`

	// Before is the label of the baseline (caching) run, BeforePct its at_peak_pct.
	Before    string  `json:"before"`
	BeforePct float64 `json:"before_pct"`
	// After is the label of the best run, AfterPct its at_peak_pct and
	// AfterMethod how to apply it.
	After       string  `json:"after"`
	AfterPct    float64 `json:"after_pct"`
	AfterMethod string  `json:"after_method"`
	// Methods lists the candidates replayed for the verdict.
	Methods []string `json:"methods"`
	// LimitPct is the physical limit's at_peak_pct (-1 when not replayed).
	LimitPct float64 `json:"limit_pct"`
	WallS    float64 `json:"wall_s"`
	// Truncated says what was lost when the trace was cut short: the
	// figures then cover the events before the cut ("" for a whole trace).
	Truncated string `json:"truncated,omitempty"`
	// Cost compares the estimated allocator cost of before and after, with
	// the wall times measured on the GPU when the trace header has them.
	Cost *CostVerdict `json:"cost,omitempty"`
	// Goal is what the recommendation optimises; Decision weighs every
	// run for it (After is its recommendation).
	Goal     Goal      `json:"-"`
	Decision *Decision `json:"decision"`
	// State describes the allocator state a state-only snapshot holds
	// (nil for a trace with events); the verdict is then that state's.
	State *StateReport `json:"state,omitempty"`
}

// MarshalJSON writes the comparison with its runs keyed by label.
func (c *Comparison) MarshalJSON() ([]byte, error) {
	type plain Comparison
	res := make(map[string]*Run, len(c.Runs))
	order := make([]string, 0, len(c.Runs))
	for _, r := range c.Runs {
		res[r.Label] = r
		order = append(order, r.Label)
	}
	var rec *Recommendation
	if c.Decision != nil {
		rec = c.Decision.Recommendation
	}
	return json.Marshal(struct {
		*plain
		Recommendation *Recommendation `json:"recommendation"`
		Results        map[string]*Run `json:"results"`
		Order          []string        `json:"order"`
	}{(*plain)(c), rec, res, order})
}

// Run returns the run with that label, nil if none.
func (c *Comparison) Run(label string) *Run {
	for _, r := range c.Runs {
		if r.Label == label {
			return r
		}
	}
	return nil
}

// Compare replays the trace under each policy and setting, in parallel,
// and decides the verdict: the options are planned into replays, each
// candidate's factory built from the allocator registry (a bad option is
// an *OptionError, before any replay), the replays run, and Decide weighs
// them for the goal.
func Compare(open Opener, opts CompareOptions) (*Comparison, error) {
	start := time.Now()
	p, err := plan(open, opts)
	if err != nil {
		return nil, err
	}
	if err := p.replayAll(nil, opts.Goal); err != nil {
		return nil, err
	}
	d := Decide(p.runs, opts.Goal)
	c := newComparison(opts.Name, p.h, p.runs, d)
	c.WallS = time.Since(start).Seconds()
	return c, nil
}

// newComparison is the comparison of the replays of the trace whose
// header is h, with the decision made of them.
func newComparison(name string, h *trace.Header, runs []*Run, d *Decision) *Comparison {
	c := &Comparison{Trace: NewTraceInfo(name, h), Runs: runs, Goal: d.Goal, Decision: d}
	for _, r := range runs {
		if r.Truncated != "" {
			c.Truncated = r.Truncated
		}
		if r.OK() && c.Trace.Events == 0 {
			c.Trace.Events = r.Result.Events
			c.Trace.dateFrom(r.firstTimeNS)
		}
	}
	if b := baselineRun(runs); b != nil && StateOnly(h, b.Result.Events) {
		c.State = StateOf(h)
		for _, r := range runs {
			if r.OK() && !r.Limit {
				c.State.ApplyState(r.Result)
			}
		}
	}
	c.verdict()
	c.Cost = c.costVerdict(h)
	return c
}

// pctEqual is the tolerance under which two at_peak_pct values tie.
const pctEqual = 0.05

// verdict fills the verdict from the decision: before is its baseline,
// after its recommendation.
func (c *Comparison) verdict() {
	c.LimitPct = -1
	c.Methods = c.Methods[:0]
	for _, r := range c.Runs {
		if r.Limit && r.OK() && c.LimitPct < 0 {
			c.LimitPct = r.Result.Fragmentation.AtPeakPct
		}
		if r.OK() && !r.Limit {
			c.Methods = append(c.Methods, r.Label)
		}
	}
	if before := c.Run(c.Decision.Baseline); before != nil {
		c.Before, c.BeforePct = before.Label, before.Result.Fragmentation.AtPeakPct
	}
	after := c.Run(c.Decision.Recommendation.Label)
	if after == nil || !after.OK() {
		after = c.Run(c.Decision.Baseline)
	}
	if after != nil {
		c.After, c.AfterPct, c.AfterMethod = after.Label, after.Result.Fragmentation.AtPeakPct, after.Apply
	}
	if c.State != nil {
		c.State.stateOnly(c.Decision)
		c.After, c.AfterPct, c.AfterMethod = c.Before, c.BeforePct, "no what-if: the snapshot holds no events"
	}
}

// RecommendedLine is the "Recommended: ..." line, the same in compare and
// analyze.
func (c *Comparison) RecommendedLine() string {
	if c.Decision == nil || c.Decision.Recommendation == nil {
		return ""
	}
	return c.Decision.Recommendation.Line
}

// VerdictLines returns the verdict, one line each: before, after, methods, trace.
func (c *Comparison) VerdictLines() []string {
	before := c.Before
	if before == "" {
		before = baselinePolicy()
	}
	after := c.After
	if c.AfterMethod != "" && c.AfterMethod != after {
		after += ": " + c.AfterMethod
	}
	lines := []string{
		fmt.Sprintf("Fragmentation before: %.1f%% (%s, at peak reserved)", c.BeforePct, before),
		fmt.Sprintf("Fragmentation after: %.1f%% (%s)", c.AfterPct, after),
	}
	if c.Cost != nil {
		lines = append(lines, c.Cost.Line())
	}
	return append(lines, c.MethodsLine(), c.Trace.Line())
}

// MethodsLine says how the verdict was reached: "Methods: replayed N
// events under P policies and S settings; ...". The candidates are those
// of Methods (and the JSON's methods).
func (c *Comparison) MethodsLine() string {
	var pols, sets int
	for _, r := range c.Runs {
		switch {
		case !r.OK() || r.Limit:
		case r.Setting == "":
			pols++
		default:
			sets++
		}
	}
	s := fmt.Sprintf("Methods: replayed %s events under %s and %s; fragmentation: at_peak_pct, "+
		"100·(1 − active/reserved) when reserved peaks; after: the recommendation for the goal %s: "+
		"within 1%% of peak reserved the cheaper in device calls and estimated allocator time wins, "+
		"and a modelled policy wins only by more than its measured error",
		fmtCount(c.Trace.Events), plural(pols, "policy", "policies"), plural(sets, "setting", "settings"), c.Goal)
	if c.LimitPct >= 0 {
		s += "; " + limitNote(c.LimitPct)
	}
	return s
}

// plural is "1 policy", "3 policies".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// fmtCount formats n with thousands separators.
func fmtCount(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
