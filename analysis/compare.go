package analysis

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// DefaultPolicies are the policies Compare replays when none are given.
var DefaultPolicies = []string{"caching", "expandable", "pooled", "bfc", "ideal"}

// LimitPolicy is the policy shown as the physical limit: no allocator one
// can switch to does better, so it is never the verdict's "after".
const LimitPolicy = "ideal"

// Opener opens a fresh reader on the trace; Compare calls it once per run.
type Opener func() (*trace.Reader, io.Closer, error)

// Setting is an allocator setting replayed as a variant of a policy: a
// PYTORCH_CUDA_ALLOC_CONF fragment, or emptying the cache at a rhythm.
type Setting struct {
	Policy string `json:"policy"` // the policy it applies to, e.g. "caching"
	Conf   string `json:"conf"`   // a PYTORCH_CUDA_ALLOC_CONF fragment, e.g. "max_split_size_mb:128"
	// EmptyCacheEvery calls empty_cache after every N requests.
	EmptyCacheEvery int64 `json:"empty_cache_every,omitempty"`
}

// Name is the change the setting makes: its conf, or "empty_cache every N
// requests".
func (s Setting) Name() string {
	if s.EmptyCacheEvery > 0 {
		name := fmt.Sprintf("empty_cache every %d requests", s.EmptyCacheEvery)
		if s.Conf != "" {
			name = s.Conf + "," + name
		}
		return name
	}
	return s.Conf
}

// Label names the setting as tables and verdicts show it.
func (s Setting) Label() string { return s.Policy + "+" + s.Name() }

// CompareOptions configures Compare.
type CompareOptions struct {
	// Policies to replay; nil: DefaultPolicies (those registered).
	Policies []string
	// Conf is a PYTORCH_CUDA_ALLOC_CONF string (or policy options) given to
	// every policy; empty: the settings recorded in the trace header.
	Conf string
	// Settings are the variants considered for the verdict besides the
	// policies; nil: DefaultSettings. Use an empty non-nil slice for none.
	Settings []Setting
	// Config is the replay configuration (capacity, fraction, ...); its
	// Observer and Progress are set by Compare.
	Config replay.Config
	// Parallel bounds the replays run at once; 0: GOMAXPROCS.
	Parallel int
	// MaxPoints bounds the points of each time series; 0: DefaultMaxPoints.
	MaxPoints int
	// Progress, when set, is called now and then (from any goroutine, never
	// concurrently) with the events replayed so far over all runs and the
	// runs finished.
	Progress func(events int64, runsDone, runs int)
	// Name is the trace's name, for reports.
	Name string
	// DeviceCost prices every run's device calls; nil: H200Cost.
	DeviceCost *DeviceCost
	// Goal is what the recommendation optimises; zero: GoalReserved.
	Goal Goal
}

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
	// Limit marks the physical limit (ideal): shown, never chosen.
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
// level: setting (the change it stands for, "" for PyTorch's defaults),
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

// registered reports whether the allocator registry knows name.
func registered(name string) bool { return allocator.Describe(name) != "" }

// joinConf appends a setting to a base PYTORCH_CUDA_ALLOC_CONF string; the
// later key wins, as in PyTorch.
func joinConf(base, setting string) string {
	base = strings.Trim(base, ", ")
	if base == "" {
		return setting
	}
	return base + "," + setting
}

// applyHint says how to get a policy or setting in PyTorch.
func applyHint(policy, setting string) string {
	if setting != "" {
		return "PYTORCH_CUDA_ALLOC_CONF=" + setting
	}
	switch policy {
	case "caching":
		return "PyTorch's default caching allocator"
	case "expandable":
		return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
	case "pooled", "async":
		return "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"
	case LimitPolicy:
		return "none: the physical limit"
	}
	return "a pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator)"
}

// job is one replay to run.
type job struct {
	run     *Run
	factory replay.Factory
	cfg     replay.Config
	// open, when set, replaces the comparison's opener (transformed traces).
	open Opener
	// noSeries skips the time series and histogram.
	noSeries bool
	// prepare, when set, is called with the reader before the replay and
	// may set cfg.Observer.
	prepare func(r *trace.Reader, cfg *replay.Config)
}

// readHeader opens the trace once to read its header.
func readHeader(open Opener) (*trace.Header, error) {
	r, c, err := open()
	if err != nil {
		return nil, err
	}
	h := r.Header()
	if c != nil {
		c.Close()
	}
	return h, nil
}

// Compare replays the trace under each policy and setting, in parallel,
// and decides the verdict.
func Compare(open Opener, opts CompareOptions) (*Comparison, error) {
	start := time.Now()
	h, err := readHeader(open)
	if err != nil {
		return nil, err
	}
	policies := opts.Policies
	if len(policies) == 0 {
		for _, p := range DefaultPolicies {
			if registered(p) {
				policies = append(policies, p)
			}
		}
	}
	settings := opts.Settings
	if settings == nil {
		settings = DefaultSettings(h, policies)
	}
	p := newPlanner(open, h, opts.Conf, opts.Config, opts.DeviceCost)
	p.parallel, p.maxPoints, p.series, p.progress = opts.Parallel, opts.MaxPoints, true, opts.Progress
	for _, pol := range policies {
		if err := p.addPolicy(pol); err != nil {
			return nil, err
		}
	}
	for _, s := range settings {
		if err := p.addSetting(s); err != nil {
			return nil, err
		}
	}
	if err := p.replay(nil); err != nil {
		return nil, err
	}
	c := &Comparison{Trace: NewTraceInfo(opts.Name, h), Goal: opts.Goal}
	for _, r := range p.runs {
		if r.Truncated != "" {
			c.Truncated = r.Truncated
		}
	}
	if opts.Goal.Kind == GoalFit && c.Truncated == "" {
		p.minCapacities()
	}
	if b := baselineRun(p.runs); b != nil && StateOnly(h, b.Result.Events) {
		c.State = StateOf(h)
		for _, r := range p.runs {
			if r.OK() && !r.Limit {
				c.State.ApplyState(r.Result)
			}
		}
	}
	for _, r := range p.runs {
		c.Runs = append(c.Runs, r)
		if r.OK() && c.Trace.Events == 0 {
			c.Trace.Events = r.Result.Events
			c.Trace.dateFrom(r.firstTimeNS)
		}
	}
	c.decide()
	c.Cost = c.costVerdict(h)
	c.WallS = time.Since(start).Seconds()
	return c, nil
}

// runJobs runs the jobs, at most parallel at once, each on its own reader.
// It fails only when every job failed; otherwise failures are kept in the runs.
func runJobs(open Opener, jobs []*job, parallel, maxPoints int, progress func(int64, int, int)) error {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	var (
		total    atomic.Int64
		done     atomic.Int64
		progMu   sync.Mutex
		wg       sync.WaitGroup
		sem      = make(chan struct{}, parallel)
		stopTick = make(chan struct{})
		tickDone = make(chan struct{})
	)
	report := func() {
		if progress != nil {
			progMu.Lock()
			progress(total.Load(), int(done.Load()), len(jobs))
			progMu.Unlock()
		}
	}
	go func() {
		defer close(tickDone)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopTick:
				return
			case <-t.C:
				report()
			}
		}
	}()
	for _, j := range jobs {
		wg.Add(1)
		go func(j *job) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			runOne(open, j, maxPoints, &total)
			done.Add(1)
		}(j)
	}
	wg.Wait()
	close(stopTick)
	<-tickDone
	report()
	var errs []error
	for _, j := range jobs {
		if j.run.Error != "" {
			errs = append(errs, fmt.Errorf("%s: %s", j.run.Label, j.run.Error))
		}
	}
	if len(errs) == len(jobs) && len(errs) > 0 {
		if len(errs) > 1 && sameErrors(jobs) {
			return errors.New(jobs[0].run.Error)
		}
		return errors.Join(errs...)
	}
	return nil
}

// sameErrors reports whether every job failed with the same message (a bad
// trace fails every replay alike).
func sameErrors(jobs []*job) bool {
	for _, j := range jobs[1:] {
		if j.run.Error != jobs[0].run.Error {
			return false
		}
	}
	return true
}

// runOne replays one job with a collector attached.
func runOne(open Opener, j *job, maxPoints int, total *atomic.Int64) {
	t0 := time.Now()
	defer func() { j.run.WallS = time.Since(t0).Seconds() }()
	if j.open != nil {
		open = j.open
	}
	r, c, err := open()
	if err != nil {
		j.run.Error = err.Error()
		return
	}
	if c != nil {
		defer c.Close()
	}
	cfg := j.cfg
	var col *collector
	if !j.noSeries {
		col = newCollector(j.run.Label, maxPoints)
		cfg.Observer = col.observe
	}
	if j.prepare != nil {
		j.prepare(r, &cfg)
	}
	var n int64
	obs := cfg.Observer
	cfg.Observer = func(s *replay.Sample) {
		if obs != nil {
			obs(s)
		}
		if n == 0 {
			j.run.firstTimeNS = s.TimeNS
		}
		if n++; n&(1<<16-1) == 0 {
			total.Add(1 << 16)
		}
	}
	res, err := replay.Run(r, j.factory, cfg)
	total.Add(n & (1<<16 - 1))
	if err != nil && res != nil && errors.Is(err, trace.ErrTruncated) {
		j.run.Truncated = err.Error()
	} else if err != nil {
		j.run.Error = err.Error()
	}
	if res != nil {
		res.Conf = j.run.Conf
		j.run.Result = res
		if col != nil {
			j.run.Series = col.series()
			j.run.FreeHist = col.histogram()
		}
	}
}

// pctEqual is the tolerance under which two at_peak_pct values tie.
const pctEqual = 0.05

// Exact reports whether a policy reproduces a real allocator exactly
// (PyTorch's caching allocator, with or without expandable segments); the
// others are models.
func Exact(policy string) bool {
	e, _ := trust(policy)
	return e
}

// decide fills the verdict from the runs: Decide for the comparison's
// goal; before is its baseline, after its recommendation.
func (c *Comparison) decide() {
	c.LimitPct = -1
	c.Decision = Decide(c.Runs, c.Goal)
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
		before = "caching"
	}
	after := c.After
	if c.AfterMethod != "" && c.AfterMethod != after {
		after += ": " + c.AfterMethod
	}
	methods := "replayed " + fmtCount(c.Trace.Events) + " events under " + strings.Join(c.Methods, ", ") +
		"; fragmentation view: at_peak_pct, 100·(1 − active/reserved) when reserved peaks; after: the recommendation for the goal " +
		c.Goal.String() + " (within 1% of peak reserved the cheaper in device calls and estimated allocator time wins; " +
		"a modelled policy wins only when it beats the best exact replay by more than its measured error)"
	if c.LimitPct >= 0 {
		methods += fmt.Sprintf("; %s %.1f%% is the physical limit", LimitPolicy, c.LimitPct)
	}
	lines := []string{
		fmt.Sprintf("Fragmentation before: %.1f%% (%s, at peak reserved)", c.BeforePct, before),
		fmt.Sprintf("Fragmentation after: %.1f%% (%s)", c.AfterPct, after),
	}
	if c.Cost != nil {
		lines = append(lines, c.Cost.Line())
	}
	return append(lines, "Methods: "+methods, c.Trace.Line())
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
