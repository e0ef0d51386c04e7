package analysis

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Analysis explains where a trace's fragmentation comes from and which
// setting removes most of it.
type Analysis struct {
	Trace  TraceInfo      `json:"trace"`
	Policy string         `json:"policy"`
	Conf   string         `json:"conf,omitempty"`
	Result *replay.Result `json:"result"`
	// Moments are the worst moments: the most stranded bytes (free bytes
	// that empty_cache cannot return), then the most reserved − active.
	Moments []Moment `json:"moments"`
	// Breakdowns attribute the stranded bytes at the worst moments to the
	// live blocks that keep their segments from being released.
	Breakdowns []Breakdown `json:"breakdowns"`
	// Requests is the request size distribution, in log2 classes.
	Requests []SizeClass `json:"requests"`
	// Markers is the number of distinct agents or models seen.
	Markers int `json:"markers"`
	// HasStacks is set when allocations carry call stacks.
	HasStacks bool `json:"has_stacks"`
	// Advice ranks the replayed settings, best first.
	Advice []Advice `json:"advice,omitempty"`
	// BestChange is the recommended setting for the goal ("" when none,
	// or the trace's own settings, is recommended).
	BestChange string `json:"best_change,omitempty"`
	// Baseline is the caching replay the advice is measured against.
	Baseline *replay.Result `json:"baseline,omitempty"`
	// Workload says how to test changes a setting cannot make.
	Workload string  `json:"workload"`
	WallS    float64 `json:"wall_s"`
	// Truncated says what was lost when the trace was cut short: the
	// figures then cover the events before the cut ("" for a whole trace).
	Truncated string `json:"truncated,omitempty"`
	// Pools is the memory of each pool, the default and the private ones
	// (CUDA graphs, MemPools), at the peak reserved, with what leaving
	// each private pool out would save; nil without private pools.
	Pools []PoolUsage `json:"pools,omitempty"`
	// State describes the allocator state a state-only snapshot holds
	// (nil for a trace with events).
	State *StateReport `json:"state,omitempty"`
	// Goal is what the recommendation optimises; Decision weighs every
	// candidate for it, as compare's does; Runs are the candidates' replays.
	Goal     Goal      `json:"-"`
	Decision *Decision `json:"decision,omitempty"`
	Runs     []*Run    `json:"-"`
}

// MarshalJSON writes the analysis with the recommendation and the
// candidates' replays keyed by label, as compare writes them.
func (a *Analysis) MarshalJSON() ([]byte, error) {
	type plain Analysis
	var rec *Recommendation
	if a.Decision != nil {
		rec = a.Decision.Recommendation
	}
	var res map[string]*Run
	var order []string
	if len(a.Runs) > 0 {
		res = make(map[string]*Run, len(a.Runs))
		for _, r := range a.Runs {
			res[r.Label] = r
			order = append(order, r.Label)
		}
	}
	return json.Marshal(struct {
		*plain
		Recommendation *Recommendation `json:"recommendation,omitempty"`
		Results        map[string]*Run `json:"results,omitempty"`
		Order          []string        `json:"order,omitempty"`
	}{(*plain)(a), rec, res, order})
}

// RecommendedLine is the "Recommended: ..." line, the same in compare and
// analyze ("" without advice).
func (a *Analysis) RecommendedLine() string {
	if a.Decision == nil || a.Decision.Recommendation == nil {
		return ""
	}
	return a.Decision.Recommendation.Line
}

// Moment is the replayed state at one event.
type Moment struct {
	Index            int64   `json:"index"`
	TimeS            float64 `json:"t_s"`
	ReservedBytes    uint64  `json:"reserved_bytes"`
	ActiveBytes      uint64  `json:"active_bytes"`
	Pct              float64 `json:"pct"` // 100·(1 − active/reserved)
	StrandedBytes    uint64  `json:"stranded_bytes"`
	LargestFreeBytes uint64  `json:"largest_free_bytes"`
}

// Breakdown attributes the stranded bytes of one moment. Each split
// segment's stranded bytes are shared among its live blocks in proportion
// to their sizes, so every table sums to StrandedBytes.
type Breakdown struct {
	What          string  `json:"what"` // "peak reserved", "most stranded"
	Moment        Moment  `json:"moment"`
	StrandedBytes uint64  `json:"stranded_bytes"`
	SplitSegments int     `json:"split_segments"` // segments holding both live and free blocks
	BySize        []Share `json:"by_size"`
	ByStream      []Share `json:"by_stream"`
	ByMarker      []Share `json:"by_marker,omitempty"`
	ByStack       []Share `json:"by_stack,omitempty"`
	// ByPool attributes the stranded bytes to the pool whose segments
	// hold them (a trace with private pools only).
	ByPool []Share `json:"by_pool,omitempty"`

	pools map[uint64]*poolAt // each pool's part of the walk, with private pools
}

// Share is one key's part of a breakdown.
type Share struct {
	Key           string  `json:"key"`
	StrandedBytes uint64  `json:"stranded_bytes"`
	LiveBlocks    int64   `json:"live_blocks"` // live blocks in split segments
	Pct           float64 `json:"pct"`
}

// SizeClass is one log2 class of request sizes: LowBytes <= size < 2·LowBytes.
type SizeClass struct {
	Log2     int     `json:"log2"`
	LowBytes uint64  `json:"low_bytes"`
	Count    int64   `json:"count"`
	Bytes    uint64  `json:"bytes"`
	Pct      float64 `json:"pct"` // of the requests
}

// SizeClassLabel names a log2 class: "[4 MiB, 8 MiB)".
func SizeClassLabel(k int) string {
	return fmt.Sprintf("[%s, %s)", shortBytes(1<<uint(k)), shortBytes(1<<uint(k+1)))
}

// shortBytes writes a power of two compactly: 512 B, 4 KiB, 2 MiB, 1 GiB.
func shortBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for n >= 1024 && n%1024 == 0 && i < len(units)-1 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%d %s", n, units[i])
}

// explainer observes the explained replay.
type explainer struct {
	r            *trace.Reader
	attributions map[driver.Policy]*attributions // by policy; nil for one that cannot list its blocks
	marker       string
	markers      map[string]bool
	stacks       map[trace.StackID]string
	reqs         [64]SizeClass
	moments      *momentBuckets
	t0           int64
	started      bool

	peak, maxStranded    uint64
	peakSeen             bool
	peakBD, strandedBD   *Breakdown
	lastStrandedCaptured uint64
	hasStacks            bool
	pools                *poolTracker
}

func newExplainer(r *trace.Reader) *explainer {
	return &explainer{r: r, markers: map[string]bool{}, stacks: map[trace.StackID]string{},
		attributions: map[driver.Policy]*attributions{}, moments: newMomentBuckets(512), pools: newPoolTracker()}
}

// stackKey names a stack by its top frames.
func (x *explainer) stackKey(id trace.StackID) string {
	if id == trace.NoStack {
		return ""
	}
	if k, ok := x.stacks[id]; ok {
		return k
	}
	frames := x.r.Stack(id)
	var parts []string
	for i, f := range frames {
		if i == 3 {
			break
		}
		s := x.r.String(f.Func)
		if file := x.r.String(f.File); file != "" && f.Line > 0 {
			s += fmt.Sprintf(" (%s:%d)", file, f.Line)
		}
		parts = append(parts, s)
	}
	k := strings.Join(parts, " < ")
	x.stacks[id] = k
	return k
}

func (x *explainer) observe(s *replay.Sample) {
	if !x.started {
		x.t0, x.started = s.TimeNS, true
	}
	ev := &s.Event
	t, ok := x.attributions[s.Policy]
	if !ok {
		var h *trace.Header
		if x.r != nil {
			h = x.r.Header()
		}
		t = newAttributions(s, h)
		x.attributions[s.Policy] = t
	}
	switch ev.Kind {
	case trace.KindMarker:
		if ev.Marker == trace.MarkerAgent || ev.Marker == trace.MarkerModel {
			x.marker = ev.Marker.String() + " " + x.r.String(ev.Text)
			x.markers[x.marker] = true
		}
	case trace.KindAlloc:
		k := Log2Class(ev.SizeBytes)
		x.reqs[k].Count++
		x.reqs[k].Bytes += ev.SizeBytes
		if t != nil && s.HasBlock {
			o := attribution{size: ev.SizeBytes, stream: ev.Stream, marker: x.marker}
			if ev.Stack != trace.NoStack {
				x.hasStacks = true
				o.stack = x.stackKey(ev.Stack)
			}
			t.served(s.Block.Addr, o)
		}
	}
	st := s.Policy.Stats()
	m := Moment{Index: s.Index, TimeS: float64(s.TimeNS-x.t0) / 1e9, ReservedBytes: s.ReservedBytes,
		ActiveBytes: s.ActiveBytes, Pct: FragPct(s.ReservedBytes, s.ActiveBytes),
		StrandedBytes: st.StrandedBytes, LargestFreeBytes: st.LargestFreeBytes}
	x.moments.add(m)
	if t == nil {
		return
	}
	pi, _ := t.in.(PoolInspector)
	x.pools.observe(s, pi)
	if s.ReservedBytes > x.peak || !x.peakSeen {
		x.peak, x.peakSeen = s.ReservedBytes, true
		x.peakBD = x.breakdown(t, "peak reserved", m)
	}
	// The most stranded moment: walked again only when the stranded bytes
	// grow by 1% over the last walk, so the walks stay few.
	if st.StrandedBytes > x.maxStranded {
		x.maxStranded = st.StrandedBytes
		if x.strandedBD == nil || st.StrandedBytes > x.lastStrandedCaptured+x.lastStrandedCaptured/100 {
			x.lastStrandedCaptured = st.StrandedBytes
			x.strandedBD = x.breakdown(t, "most stranded", m)
		}
	}
}

// shareAcc accumulates one breakdown table.
type shareAcc map[string]*Share

func (a shareAcc) add(key string, bytes float64, blocks int64) {
	s := a[key]
	if s == nil {
		s = &Share{Key: key}
		a[key] = s
	}
	s.StrandedBytes += uint64(bytes + 0.5)
	s.LiveBlocks += blocks
}

func (a shareAcc) sorted(total uint64) []Share {
	out := make([]Share, 0, len(a))
	for _, s := range a {
		if total > 0 {
			s.Pct = 100 * float64(s.StrandedBytes) / float64(total)
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].StrandedBytes != out[j].StrandedBytes {
			return out[i].StrandedBytes > out[j].StrandedBytes
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// breakdown walks the policy's segments and attributes their stranded bytes.
func (x *explainer) breakdown(t *attributions, what string, m Moment) *Breakdown {
	bd := &Breakdown{What: what, Moment: m}
	bySize, byStream, byMarker, byStack, byPool := shareAcc{}, shareAcc{}, shareAcc{}, shareAcc{}, shareAcc{}
	walk := func(fn func(seg trace.Segment, pool uint64) bool) {
		t.in.Segments(func(seg trace.Segment) bool { return fn(seg, 0) })
	}
	// With a policy that keeps private pools, each pool's part too (kept
	// only when the trace turns out to use private pools).
	pi, pooled := t.in.(PoolInspector)
	if pooled {
		walk = pi.PoolSegments
		bd.pools = map[uint64]*poolAt{}
	}
	walk(func(seg trace.Segment, pool uint64) bool {
		var free, live uint64
		for _, b := range seg.Blocks {
			if b.State == trace.BlockInactive {
				free += b.SizeBytes
			} else {
				live += b.SizeBytes
			}
		}
		if pooled {
			at := bd.pools[pool]
			if at == nil {
				at = &poolAt{}
				bd.pools[pool] = at
			}
			at.reserved += seg.SizeBytes
			at.active += live
			if live > 0 {
				at.stranded += free
			}
		}
		if free == 0 || live == 0 {
			return true
		}
		bd.SplitSegments++
		bd.StrandedBytes += free
		if pooled {
			label, _ := poolLabel(pool, x.pools.streams[pool])
			byPool.add(label, float64(free), int64(len(seg.Blocks))-inactiveBlocks(seg))
		}
		for _, b := range seg.Blocks {
			if b.State == trace.BlockInactive {
				continue
			}
			share := float64(free) * float64(b.SizeBytes) / float64(live)
			o, ok := t.m[b.Addr]
			if !ok {
				o = attribution{size: b.RequestedBytes, stream: seg.Stream, marker: "(unknown)"}
			}
			sizeKey := "(unknown)"
			if o.size > 0 {
				sizeKey = SizeClassLabel(Log2Class(o.size))
			}
			bySize.add(sizeKey, share, 1)
			byStream.add(fmt.Sprintf("stream %#x", uint64(o.stream)), share, 1)
			mk := o.marker
			if mk == "" {
				mk = "(no marker)"
			}
			byMarker.add(mk, share, 1)
			sk := o.stack
			if sk == "" {
				sk = "(no stack)"
			}
			byStack.add(sk, share, 1)
		}
		return true
	})
	bd.BySize = bySize.sorted(bd.StrandedBytes)
	bd.ByStream = byStream.sorted(bd.StrandedBytes)
	bd.ByMarker = byMarker.sorted(bd.StrandedBytes)
	bd.ByStack = byStack.sorted(bd.StrandedBytes)
	if pooled {
		bd.ByPool = byPool.sorted(bd.StrandedBytes)
	}
	return bd
}

// momentBuckets keeps, per bucket of events, the worst moment; buckets
// merge in pairs as the trace grows, as sampler's do.
type momentBuckets struct {
	max     int
	width   int64
	inCur   int64
	buckets []Moment
}

func newMomentBuckets(n int) *momentBuckets { return &momentBuckets{max: n, width: 1} }

// worse reports whether a is a worse moment than b: more stranded bytes,
// then more reserved − active.
func worse(a, b Moment) bool {
	if a.StrandedBytes != b.StrandedBytes {
		return a.StrandedBytes > b.StrandedBytes
	}
	return a.ReservedBytes-min(a.ActiveBytes, a.ReservedBytes) > b.ReservedBytes-min(b.ActiveBytes, b.ReservedBytes)
}

func (mb *momentBuckets) add(m Moment) {
	if len(mb.buckets) == 0 || mb.inCur >= mb.width {
		if len(mb.buckets) == mb.max {
			n := 0
			for i := 0; i < len(mb.buckets); i += 2 {
				a := mb.buckets[i]
				if i+1 < len(mb.buckets) && worse(mb.buckets[i+1], a) {
					a = mb.buckets[i+1]
				}
				mb.buckets[n] = a
				n++
			}
			if len(mb.buckets)%2 == 0 {
				mb.inCur += mb.width
			}
			mb.buckets = mb.buckets[:n]
			mb.width *= 2
		}
		if len(mb.buckets) == 0 || mb.inCur >= mb.width {
			mb.buckets = append(mb.buckets, m)
			mb.inCur = 1
			return
		}
	}
	if last := &mb.buckets[len(mb.buckets)-1]; worse(m, *last) {
		*last = m
	}
	mb.inCur++
}

// top returns the k worst moments, no two from neighbouring buckets, in
// order of badness.
func (mb *momentBuckets) top(k int) []Moment {
	idx := make([]int, len(mb.buckets))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return worse(mb.buckets[idx[a]], mb.buckets[idx[b]]) })
	taken := map[int]bool{}
	var out []Moment
	for _, i := range idx {
		if len(out) == k {
			break
		}
		if taken[i-1] || taken[i+1] {
			continue
		}
		taken[i] = true
		out = append(out, mb.buckets[i])
	}
	return out
}

// Analyze replays the trace under the policy, explains its fragmentation
// and, unless NoAdvice, ranks the settings that remove it, each by replay.
func Analyze(open Opener, opts AnalyzeOptions) (*Analysis, error) {
	start := time.Now()
	h, err := readHeader(open)
	if err != nil {
		return nil, err
	}
	if err := checkSettings(h, opts.Conf); err != nil {
		return nil, err
	}
	policy := opts.Policy
	if policy == "" {
		policy = baselinePolicy()
	}
	f, err := allocator.NewFactory(policy, opts.Conf, h)
	if err != nil {
		return nil, optionError(policy, opts.Conf, "", err)
	}
	var x *explainer
	main := &job{run: &Run{Label: policy, Policy: policy, Conf: opts.Conf}, cfg: opts.Config, noSeries: true, factory: f}
	main.prepare = func(r *trace.Reader, cfg *replay.Config) {
		x = newExplainer(r)
		cfg.Observer = x.observe
	}
	jobs := []*job{main}
	var p *planner
	var padded *Run
	variants := opts.Sweep
	if variants == nil {
		variants = DefaultSweep()
	}
	if !opts.NoAdvice {
		var pad *job
		if p, pad, err = advicePlanner(open, h, opts, variants); err != nil {
			return nil, err
		}
		if pad != nil {
			padded = pad.run
			jobs = append(jobs, pad)
		}
	}
	if p != nil {
		if err := p.replayAll(jobs, opts.Goal); err != nil {
			return nil, err
		}
	} else if err := runJobs(open, jobs, opts.Parallel, 0, opts.Progress); err != nil {
		return nil, err
	}
	if !main.run.OK() {
		return nil, fmt.Errorf("%s: %w", policy, main.err)
	}
	a := &Analysis{Trace: NewTraceInfo(opts.Name, h), Policy: policy, Conf: opts.Conf, Result: main.run.Result}
	a.Trace.Events = a.Result.Events
	a.Trace.dateFrom(main.run.firstTimeNS)
	top := opts.Top
	if top <= 0 {
		top = 5
	}
	a.Moments = x.moments.top(top)
	if x.peakBD != nil {
		a.Breakdowns = append(a.Breakdowns, *x.peakBD)
	}
	if x.strandedBD != nil && (x.peakBD == nil || x.strandedBD.Moment.Index != x.peakBD.Moment.Index) {
		a.Breakdowns = append(a.Breakdowns, *x.strandedBD)
	}
	if !x.pools.active() {
		for i := range a.Breakdowns {
			a.Breakdowns[i].ByPool = nil
		}
	} else if x.peakBD != nil && x.peakBD.pools != nil {
		a.Pools = x.pools.usage(x.peakBD.pools)
		wj := withoutPoolJobs(open, main, a.Pools)
		if err := runJobs(open, wj, opts.Parallel, 0, nil); err != nil {
			return nil, err
		}
		applyWithout(a.Pools, wj, a.Result.PeakReservedBytes)
	}
	a.HasStacks = x.hasStacks
	if !a.HasStacks {
		for i := range a.Breakdowns {
			a.Breakdowns[i].ByStack = nil
		}
	}
	a.Markers = len(x.markers)
	if a.Markers == 0 {
		for i := range a.Breakdowns {
			a.Breakdowns[i].ByMarker = nil
		}
	}
	var total int64
	for _, c := range x.reqs {
		total += c.Count
	}
	for k, c := range x.reqs {
		if c.Count == 0 {
			continue
		}
		c.Log2, c.LowBytes = k, 1<<uint(k)
		c.Pct = 100 * float64(c.Count) / float64(total)
		a.Requests = append(a.Requests, c)
	}
	a.Truncated = main.run.Truncated
	if StateOnly(h, a.Result.Events) {
		a.State = StateOf(h)
		a.State.ApplyState(a.Result)
	}
	if p != nil {
		a.Goal, a.Runs = opts.Goal, p.runs
		a.Decision = Decide(p.runs, opts.Goal)
		a.Baseline, a.Advice = rankAdvice(variants, p.runs, padded)
		if a.State != nil {
			a.State.stateOnly(a.Decision)
		}
		if rec := a.Decision.Recommendation; rec != nil {
			a.BestChange = rec.Setting
		}
	}
	a.Workload = workloadNote(a.Markers)
	a.WallS = time.Since(start).Seconds()
	return a, nil
}

// advicePlanner plans the candidates analyze weighs, as compare does:
// the policies and the default settings, or the sweep's variants when the
// options give them; and the padded replay when the sweep has it.
func advicePlanner(open Opener, h *trace.Header, opts AnalyzeOptions, variants []Variant) (*planner, *job, error) {
	policies := opts.Policies
	if len(policies) == 0 {
		policies = allocator.Defaults()
	}
	p := newPlanner(open, h, opts.Conf, opts.Config, opts.DeviceCost)
	p.parallel, p.progress = opts.Parallel, opts.Progress
	if err := p.addPolicies(policies); err != nil {
		return nil, nil, err
	}
	settings := defaultSettings(p.torchConfs)
	if opts.Sweep != nil {
		settings = nil
		for _, v := range variants {
			if !v.PadPow2 {
				settings = append(settings, v.setting())
			}
		}
	}
	if err := p.addSettings(settings); err != nil {
		return nil, nil, err
	}
	for _, v := range variants {
		if v.PadPow2 {
			j, err := padRun(open, h, opts.Conf, opts.Config)
			return p, j, err
		}
	}
	return p, nil, nil
}

// workloadNote says what a replay cannot test and how to record it.
func workloadNote(markers int) string {
	s := "Workload changes are not settings: one shared model instead of a copy per agent, or " +
		"batching the agents' requests, change the requests themselves, so no replay of this trace " +
		"can show their effect. Record the changed workload and compare it: " +
		"`fragsim record -- python serve.py`, or in the script " +
		"`torch.cuda.memory._record_memory_history(max_entries=1_000_000)` at the start and " +
		"`torch.cuda.memory._dump_snapshot(\"run.pickle\")` at the end, then " +
		"`fragsim import run.pickle` and `fragsim compare` on the result."
	if markers > 1 {
		s = fmt.Sprintf("This trace holds %d agents or models. ", markers) + s
	}
	return s
}
