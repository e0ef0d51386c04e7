package analysis

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// DefaultPolicies are the policies Compare replays when none are given.
var DefaultPolicies = []string{"caching", "expandable", "pooled", "bfc", "ideal"}

// LimitPolicy is the policy shown as the physical limit: no allocator one
// can switch to does better, so it is never the verdict's "after".
const LimitPolicy = "ideal"

// Opener opens a fresh reader on the trace; Compare calls it once per run.
type Opener func() (*trace.Reader, io.Closer, error)

// Setting is an allocator setting replayed as a variant of a policy.
type Setting struct {
	Policy string `json:"policy"` // the policy it applies to, e.g. "caching"
	Conf   string `json:"conf"`   // a PYTORCH_CUDA_ALLOC_CONF fragment, e.g. "max_split_size_mb:128"
}

// Label names the setting as tables and verdicts show it.
func (s Setting) Label() string { return s.Policy + "+" + s.Conf }

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
}

// Run is one replay of a comparison: a policy, or a setting variant.
type Run struct {
	Label   string `json:"label"`
	Policy  string `json:"policy"`
	Conf    string `json:"conf,omitempty"`    // the conf the run was given
	Setting string `json:"setting,omitempty"` // the setting varied, for setting variants
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
	return json.Marshal(struct {
		*plain
		Results map[string]*Run `json:"results"`
		Order   []string        `json:"order"`
	}{(*plain)(c), res, order})
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

// DefaultSettings returns the setting variants Compare considers for the
// verdict: expandable segments (unless the expandable policy is compared),
// two max_split_size_mb values, and garbage_collection_threshold when the
// trace runs under a memory fraction (the threshold does nothing without one).
func DefaultSettings(h *trace.Header, policies []string) []Setting {
	has := func(p string) bool {
		for _, q := range policies {
			if q == p {
				return true
			}
		}
		return false
	}
	var out []Setting
	if !has("expandable") {
		out = append(out, Setting{"caching", "expandable_segments:True"})
	}
	out = append(out, Setting{"caching", "max_split_size_mb:64"}, Setting{"caching", "max_split_size_mb:256"})
	if h != nil && h.MemoryFraction > 0 && h.MemoryFraction < 1 {
		out = append(out, Setting{"caching", "garbage_collection_threshold:0.8"})
	}
	return out
}

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
	factory driver.Factory
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
	baseConf := opts.Conf
	if baseConf == "" && h != nil {
		baseConf = h.AllocConf
	}
	cost := opts.DeviceCost
	if cost == nil {
		cost = &H200Cost
	}
	var jobs []*job
	seen := map[string]bool{}
	add := func(run *Run, conf string) error {
		if seen[run.Label] {
			return nil
		}
		seen[run.Label] = true
		f, err := allocator.NewFactory(run.Policy, conf, h)
		if err != nil {
			return err
		}
		run.Conf = conf
		run.Apply = applyHint(run.Policy, run.Setting)
		if !run.Limit { // the physical limit makes no device calls worth pricing
			run.Cost = &AllocatorCost{}
			f = costFactory(f, cost, pageCounter(run.Policy), run.Cost)
		}
		jobs = append(jobs, &job{run: run, factory: f, cfg: opts.Config})
		return nil
	}
	for _, p := range policies {
		p = strings.ToLower(strings.TrimSpace(p))
		if err := add(&Run{Label: p, Policy: p, Limit: p == LimitPolicy}, opts.Conf); err != nil {
			return nil, err
		}
	}
	for _, s := range settings {
		if err := add(&Run{Label: s.Label(), Policy: s.Policy, Setting: s.Conf}, joinConf(baseConf, s.Conf)); err != nil {
			return nil, err
		}
	}
	if err := runJobs(open, jobs, opts.Parallel, opts.MaxPoints, opts.Progress); err != nil {
		return nil, err
	}
	c := &Comparison{Trace: NewTraceInfo(opts.Name, h)}
	for _, j := range jobs {
		if j.run.Truncated != "" {
			c.Truncated = j.run.Truncated
		}
	}
	for _, j := range jobs {
		c.Runs = append(c.Runs, j.run)
		if j.run.OK() && c.Trace.Events == 0 {
			c.Trace.Events = j.run.Result.Events
			c.Trace.dateFrom(j.run.firstTimeNS)
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

// better reports whether run a beats run b for the verdict: lower
// at_peak_pct, ties broken by lower peak reserved.
func better(a, b *Run) bool {
	pa, pb := a.Result.Fragmentation.AtPeakPct, b.Result.Fragmentation.AtPeakPct
	if math.Abs(pa-pb) > pctEqual {
		return pa < pb
	}
	return a.Result.PeakReservedBytes < b.Result.PeakReservedBytes
}

// Exact reports whether a policy reproduces a real allocator exactly
// (PyTorch's caching allocator, with or without expandable segments); the
// others are models.
func Exact(policy string) bool { return policy == "caching" || policy == "expandable" }

// decide fills the verdict from the runs.
func (c *Comparison) decide() {
	c.LimitPct = -1
	var before *Run
	for _, r := range c.Runs {
		if r.OK() && r.Policy == "caching" && r.Setting == "" {
			before = r
			break
		}
	}
	if before == nil {
		for _, r := range c.Runs {
			if r.OK() && !r.Limit {
				before = r
				break
			}
		}
	}
	c.Methods = c.Methods[:0]
	var bestExact, bestAny *Run
	for _, r := range c.Runs {
		if r.Limit && r.OK() && c.LimitPct < 0 {
			c.LimitPct = r.Result.Fragmentation.AtPeakPct
		}
		if !r.OK() || r.Limit {
			continue
		}
		c.Methods = append(c.Methods, r.Label)
		// A candidate must not fail where the baseline succeeded.
		if before != nil && r.Result.OOMs > before.Result.OOMs {
			continue
		}
		if bestAny == nil || better(r, bestAny) {
			bestAny = r
		}
		if Exact(r.Policy) && (bestExact == nil || better(r, bestExact)) {
			bestExact = r
		}
	}
	// A setting of PyTorch's own allocator is replayed exactly; the other
	// policies are models. Prefer the exact answer whenever it improves on
	// the baseline: a model's edge smaller than its error would be noise.
	best := bestAny
	if bestExact != nil && (before == nil || better(bestExact, before)) {
		best = bestExact
	}
	if before != nil {
		c.Before, c.BeforePct = before.Label, before.Result.Fragmentation.AtPeakPct
	}
	if best != nil {
		c.After, c.AfterPct = best.Label, best.Result.Fragmentation.AtPeakPct
		c.AfterMethod = best.Apply
	}
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
		"; verdict view: at_peak_pct, 100·(1 − active/reserved) when reserved peaks (lowest wins, ties to lower peak reserved; " +
		"settings of PyTorch's own allocator, replayed exactly, win over modelled policies whenever they improve on the baseline)"
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
