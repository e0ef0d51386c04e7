package analysis

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// DefaultSettings returns the setting variants a decision weighs besides
// the policies: PyTorch's own settings, each over a few values, emptying
// the cache at three rhythms, and the combinations PyTorch documents as
// working together. A setting that is the PyTorch setting of a compared
// policy (expandable_segments:True) is left out: it is the same replay.
// garbage_collection_threshold does nothing without a memory cap: without
// one in the trace it is replayed under a cap at the baseline's peak
// reserved (see planner.second). The settings apply to the baseline
// policy (Setting.Policy "").
func DefaultSettings(h *trace.Header, policies []string) []Setting {
	compared := map[string]bool{}
	for _, p := range policies {
		if f, ok := allocator.Lookup(p); ok && f.TorchConf != "" {
			compared[f.TorchConf] = true
		}
	}
	return defaultSettings(compared)
}

// defaultSettings is DefaultSettings less the settings of compared: the
// PyTorch settings of the policies compared.
func defaultSettings(compared map[string]bool) []Setting {
	var out []Setting
	c := func(conf string) {
		if !compared[conf] {
			out = append(out, Setting{Conf: conf})
		}
	}
	c("expandable_segments:True")
	for _, mb := range []int{32, 64, 128, 256, 512} {
		c(fmt.Sprintf("max_split_size_mb:%d", mb))
	}
	for _, d := range []int{2, 4, 8, 16} {
		c(fmt.Sprintf("roundup_power2_divisions:%d", d))
	}
	c("garbage_collection_threshold:0.6")
	c("garbage_collection_threshold:0.8")
	for _, n := range []int64{100, 1000, 10000} {
		out = append(out, Setting{EmptyCacheEvery: n})
	}
	c("expandable_segments:True,garbage_collection_threshold:0.8")
	c("max_split_size_mb:128,garbage_collection_threshold:0.8")
	c("max_split_size_mb:128,roundup_power2_divisions:4")
	return out
}

// planner builds and runs the replays a decision weighs: the policies and
// the settings, in the order given. compare and analyze both use it, so
// they weigh the same candidates, replayed alike.
type planner struct {
	open      Opener
	h         *trace.Header
	conf      string // given to every policy
	base      string // the conf settings are joined to
	cfg       replay.Config
	cost      *DeviceCost
	parallel  int
	maxPoints int
	series    bool
	progress  func(int64, int, int)

	runs       []*Run
	first      []*job
	later      []Setting
	seen       map[string]bool
	torchConfs map[string]bool // the PyTorch settings of the policies added
}

// plan reads the trace's header and builds the replay of every candidate
// of a comparison: the policies (the registry's defaults when none are
// given), then the settings (the default ones when nil). Every factory is
// built here, so that a bad policy, conf or setting is an *OptionError
// before any replay.
func plan(open Opener, opts CompareOptions) (*planner, error) {
	h, err := readHeader(open)
	if err != nil {
		return nil, err
	}
	if err := checkSettings(h, opts.Conf); err != nil {
		return nil, err
	}
	p := newPlanner(open, h, opts.Conf, opts.Config, opts.DeviceCost)
	p.parallel, p.maxPoints, p.series, p.progress = opts.Parallel, opts.MaxPoints, true, opts.Progress
	policies := opts.Policies
	if len(policies) == 0 {
		policies = allocator.Defaults()
	}
	if err := p.addPolicies(policies); err != nil {
		return nil, err
	}
	settings := opts.Settings
	if settings == nil {
		settings = defaultSettings(p.torchConfs)
	}
	if err := p.addSettings(settings); err != nil {
		return nil, err
	}
	return p, nil
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

func newPlanner(open Opener, h *trace.Header, conf string, cfg replay.Config, cost *DeviceCost) *planner {
	p := &planner{open: open, h: h, conf: conf, base: conf, cfg: cfg, cost: cost, seen: map[string]bool{},
		torchConfs: map[string]bool{}}
	if p.base == "" && h != nil {
		p.base = h.AllocConf
	}
	if p.cost == nil {
		p.cost = &H200Cost
	}
	return p
}

// addPolicies adds the policies, each under the planner's conf.
func (p *planner) addPolicies(names []string) error {
	for _, name := range names {
		name = strings.ToLower(strings.TrimSpace(name))
		if p.seen[name] {
			continue
		}
		p.seen[name] = true
		j, err := p.job(&Run{Label: name, Policy: name, Conf: p.conf}, p.cfg)
		if err != nil {
			return err
		}
		p.runs = append(p.runs, j.run)
		p.first = append(p.first, j)
	}
	return nil
}

// addSettings adds the setting variants. One that needs a cap the trace
// lacks waits for second, its factory built now all the same, so that a
// bad setting fails before any replay.
func (p *planner) addSettings(settings []Setting) error {
	for _, s := range settings {
		run := s.candidate(p.conf, p.base)
		if p.seen[run.Label] {
			continue
		}
		p.seen[run.Label] = true
		j, err := p.job(run, p.cfg)
		if err != nil {
			return err
		}
		if s.needsCap() && !hasFraction(p.h, p.cfg) {
			p.later = append(p.later, s)
			p.runs = append(p.runs, nil) // filled by second, in this place
			continue
		}
		p.runs = append(p.runs, run)
		p.first = append(p.first, j)
	}
	return nil
}

// job builds the replay of one candidate from the registry's entry of its
// policy: its factory, how to apply it, and how its device calls are
// priced (the physical limit's are not).
func (p *planner) job(run *Run, cfg replay.Config) (*job, error) {
	facts, _ := allocator.Lookup(run.Policy)
	f, err := allocator.NewFactory(run.Policy, run.Conf, p.h)
	if err != nil {
		return nil, optionError(run.Policy, run.Conf, run.Setting, err)
	}
	if run.Apply == "" {
		run.Apply = facts.Apply
	}
	if run.Setting == "" {
		run.Limit = facts.Role == allocator.Limit
		p.torchConfs[facts.TorchConf] = facts.TorchConf != ""
	}
	if !run.Limit {
		run.Cost = &AllocatorCost{}
		f = costFactory(f, p.cost, facts.MapPages, run.Cost)
	}
	cfg.EmptyCacheEvery = run.EmptyCacheEvery
	return &job{run: run, factory: f, cfg: cfg, noSeries: !p.series}, nil
}

// hasFraction reports whether the replay runs under a memory fraction.
func hasFraction(h *trace.Header, cfg replay.Config) bool {
	f := cfg.Fraction
	if f == 0 && h != nil {
		f = h.MemoryFraction
	}
	return f > 0 && f < 1
}

// replayAll runs the first round, with extra jobs alongside (analyze's
// explained replay), then the capped settings, then, for a fit goal,
// each candidate's min capacity: what Decide weighs.
func (p *planner) replayAll(extra []*job, goal Goal) error {
	jobs := append(append([]*job(nil), extra...), p.first...)
	if err := runJobs(p.open, jobs, p.parallel, p.maxPoints, p.progress); err != nil {
		return err
	}
	if err := p.second(); err != nil {
		return err
	}
	if goal.Kind == GoalFit {
		p.minCapacities()
	}
	return nil
}

// second replays the settings that need a cap the trace lacks, under a
// memory fraction that caps reserved at the baseline's peak (as
// torch.cuda.set_per_process_memory_fraction would).
func (p *planner) second() error {
	if len(p.later) == 0 {
		return nil
	}
	var known []*Run
	for _, r := range p.runs {
		if r != nil {
			known = append(known, r)
		}
	}
	base := baselineRun(known)
	cfg := p.cfg
	var note string
	if base != nil && base.Result.PeakReservedBytes > 0 {
		peak := base.Result.PeakReservedBytes
		total := cfg.CapacityBytes
		if total == 0 && p.h != nil {
			total = p.h.GPUTotalBytes
		}
		if total < peak+cfg.OutsideBytes {
			total = 2 * (peak + cfg.OutsideBytes)
		}
		cfg.CapacityBytes = total
		cfg.Fraction = math.Min(1, float64(peak)/float64(total)*1.0001)
		note = fmt.Sprintf("under a memory fraction of %.4f (%s: the %s peak reserved), as "+
			"torch.cuda.set_per_process_memory_fraction", cfg.Fraction, FmtBytes(peak), base.Label)
	}
	var jobs []*job
	k := 0
	for i, r := range p.runs {
		if r != nil {
			continue
		}
		s := p.later[k]
		k++
		run := s.candidate(p.conf, p.base)
		run.Note = note
		j, err := p.job(run, cfg)
		if err != nil {
			return err
		}
		p.runs[i] = run
		if note == "" { // no baseline to cap at: the setting does nothing
			run.Error = "no baseline peak to cap memory at"
			continue
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil
	}
	return runJobs(p.open, jobs, p.parallel, p.maxPoints, p.progress)
}

// minCapacities finds each candidate's min capacity (replay.MinCapacity:
// the smallest device, to 2 MiB, it runs on with no OOM), into
// Result.MinCapacityBytes. A candidate that OOMs even on an unlimited
// device keeps 0 and a note. A trace cut short has none.
func (p *planner) minCapacities() {
	par := p.parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, r := range p.runs {
		if r.Truncated != "" {
			return
		}
	}
	for _, r := range p.runs {
		if !r.OK() || r.Limit {
			continue
		}
		f, err := allocator.NewFactory(r.Policy, r.Conf, p.h)
		if err != nil {
			continue
		}
		cfg := p.cfg
		cfg.EmptyCacheEvery = r.EmptyCacheEvery
		cfg.Observer, cfg.Progress = nil, nil
		wg.Add(1)
		go func(r *Run) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			v, err := replay.MinCapacity(p.open, f, cfg)
			if err != nil {
				r.Note = strings.TrimSpace(r.Note + " min capacity: " + err.Error())
				return
			}
			r.Result.MinCapacityBytes = v
		}(r)
	}
	wg.Wait()
}
