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
// working together. expandable_segments:True is a variant only when the
// expandable policy is not compared (it is the same replay).
// garbage_collection_threshold does nothing without a memory cap: without
// one in the trace it is replayed under a cap at the baseline's peak
// reserved (see planner.second).
func DefaultSettings(h *trace.Header, policies []string) []Setting {
	has := func(p string) bool {
		for _, q := range policies {
			if strings.EqualFold(strings.TrimSpace(q), p) {
				return true
			}
		}
		return false
	}
	var out []Setting
	c := func(conf string) { out = append(out, Setting{Policy: "caching", Conf: conf}) }
	if !has("expandable") {
		c("expandable_segments:True")
	}
	for _, mb := range []int{32, 64, 128, 256, 512} {
		c(fmt.Sprintf("max_split_size_mb:%d", mb))
	}
	for _, d := range []int{2, 4, 8, 16} {
		c(fmt.Sprintf("roundup_power2_divisions:%d", d))
	}
	c("garbage_collection_threshold:0.6")
	c("garbage_collection_threshold:0.8")
	for _, n := range []int64{100, 1000, 10000} {
		out = append(out, Setting{Policy: "caching", EmptyCacheEvery: n})
	}
	c("expandable_segments:True,garbage_collection_threshold:0.8")
	c("max_split_size_mb:128,garbage_collection_threshold:0.8")
	c("max_split_size_mb:128,roundup_power2_divisions:4")
	return out
}

// needsCap reports whether a setting does something only under a memory cap.
func (s Setting) needsCap() bool { return strings.Contains(s.Conf, "garbage_collection_threshold") }

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

	runs   []*Run
	first  []*job
	capped []*job // built by second, once the baseline's peak is known
	later  []Setting
	seen   map[string]bool
}

func newPlanner(open Opener, h *trace.Header, conf string, cfg replay.Config, cost *DeviceCost) *planner {
	p := &planner{open: open, h: h, conf: conf, base: conf, cfg: cfg, cost: cost, seen: map[string]bool{}}
	if p.base == "" && h != nil {
		p.base = h.AllocConf
	}
	if p.cost == nil {
		p.cost = &H200Cost
	}
	return p
}

// job builds the replay of one candidate.
func (p *planner) job(run *Run, cfg replay.Config) (*job, error) {
	f, err := allocator.NewFactory(run.Policy, run.Conf, p.h)
	if err != nil {
		if run.Setting != "" {
			return nil, fmt.Errorf("%s: %w", run.Setting, err)
		}
		return nil, err
	}
	if run.Apply == "" {
		run.Apply = applyHint(run.Policy, run.Setting)
	}
	if !run.Limit { // the physical limit makes no device calls worth pricing
		run.Cost = &AllocatorCost{}
		f = costFactory(f, p.cost, pageCounter(run.Policy), run.Cost)
	}
	cfg.EmptyCacheEvery = run.EmptyCacheEvery
	return &job{run: run, factory: f, cfg: cfg, noSeries: !p.series}, nil
}

// addPolicy adds a policy under the given conf.
func (p *planner) addPolicy(name string) error {
	name = strings.ToLower(strings.TrimSpace(name))
	if p.seen[name] {
		return nil
	}
	p.seen[name] = true
	run := &Run{Label: name, Policy: name, Conf: p.conf, Limit: name == LimitPolicy}
	j, err := p.job(run, p.cfg)
	if err != nil {
		return err
	}
	p.runs = append(p.runs, run)
	p.first = append(p.first, j)
	return nil
}

// addSetting adds a setting variant; one that needs a cap the trace lacks
// waits for second.
func (p *planner) addSetting(s Setting) error {
	if p.seen[s.Label()] {
		return nil
	}
	p.seen[s.Label()] = true
	if s.needsCap() && !hasFraction(p.h, p.cfg) {
		// Parse it now, so that a bad setting fails before any replay.
		if _, err := allocator.NewFactory(s.Policy, joinConf(p.base, s.Conf), p.h); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		p.later = append(p.later, s)
		p.runs = append(p.runs, nil) // filled by second, in this place
		return nil
	}
	j, err := p.job(s.run(p.conf, p.base), p.cfg)
	if err != nil {
		return err
	}
	p.runs = append(p.runs, j.run)
	p.first = append(p.first, j)
	return nil
}

// run returns the replay of the setting.
func (s Setting) run(conf, base string) *Run {
	r := &Run{Label: s.Label(), Policy: s.Policy, Setting: s.Name(), EmptyCacheEvery: s.EmptyCacheEvery, Conf: conf}
	if s.Conf != "" {
		r.Conf = joinConf(base, s.Conf)
	}
	return r
}

// hasFraction reports whether the replay runs under a memory fraction.
func hasFraction(h *trace.Header, cfg replay.Config) bool {
	f := cfg.Fraction
	if f == 0 && h != nil {
		f = h.MemoryFraction
	}
	return f > 0 && f < 1
}

// replay runs the first round, with extra jobs alongside (analyze's
// explained replay), then the capped settings.
func (p *planner) replay(extra []*job) error {
	jobs := append(append([]*job(nil), extra...), p.first...)
	if err := runJobs(p.open, jobs, p.parallel, p.maxPoints, p.progress); err != nil {
		return err
	}
	return p.second()
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
		note = fmt.Sprintf("under a memory fraction of %.4f (%s: the caching peak reserved), as "+
			"torch.cuda.set_per_process_memory_fraction", cfg.Fraction, FmtBytes(peak))
	}
	var jobs []*job
	k := 0
	for i, r := range p.runs {
		if r != nil {
			continue
		}
		s := p.later[k]
		k++
		run := s.run(p.conf, p.base)
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
	return runJobs(p.open, jobs, p.parallel, 0, p.progress)
}

// minCapacities finds each candidate's min capacity (replay.MinCapacity:
// the smallest device, to 2 MiB, it runs on with no OOM), into
// Result.MinCapacityBytes. A candidate that OOMs even on an unlimited
// device keeps 0 and a note.
func (p *planner) minCapacities() {
	par := p.parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, r := range p.runs {
		if !r.OK() || r.Limit || r.Truncated != "" {
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
