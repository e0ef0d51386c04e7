package fleet

import (
	"fmt"
	"sort"

	"github.com/fragsim/fragsim/analysis"
)

// Fleet is fleet.json: what the fleet's rows add up to. Its keys are
// stable: add, never rename.
type Fleet struct {
	Goal     string    `json:"goal"`
	Inputs   int64     `json:"inputs"`
	Analysed int64     `json:"analysed"`
	Failed   int64     `json:"failed"`
	Failures []Failure `json:"failures"`
	// Candidates are every candidate's effect over the fleet, the
	// largest total saving first.
	Candidates []CandidateSummary `json:"candidates"`
	// Recommendation is the candidate with the largest total saving that
	// makes no trace worse (nil: none saves without a regression);
	// WithRegressions the one with the largest total saving, with its
	// regressions named, when it is another.
	Recommendation  *Choice      `json:"recommendation"`
	WithRegressions *Choice      `json:"with_regressions,omitempty"`
	Jobs            []JobSummary `json:"jobs"`
	// Stacks strand the most bytes over the fleet (each trace's top
	// stacks at its peak reserved, summed).
	Stacks []StackSummary `json:"stacks"`
	// OOMClasses counts the snapshots taken at an OOM by the failure's
	// class: fragmentation, exhaustion, outside.
	OOMClasses map[string]int64 `json:"oom_classes"`
}

// CandidateSummary is one candidate over the fleet.
type CandidateSummary struct {
	Label   string `json:"label"`
	Setting string `json:"setting"`
	Env     string `json:"env,omitempty"`
	// Traces it was replayed on, and its verdicts there.
	Traces     int `json:"traces"`
	Improved   int `json:"improved"`
	Unchanged  int `json:"unchanged"`
	Worse      int `json:"worse"`
	FailedRuns int `json:"failed"`
	// Recommended counts the traces whose own recommendation it is.
	Recommended       int   `json:"recommended"`
	TotalSavingBytes  int64 `json:"total_saving_bytes"`
	MedianSavingBytes int64 `json:"median_saving_bytes"`
	// WorstRegression is the trace it makes worst (nil: none worse).
	WorstRegression *Regression `json:"worst_regression,omitempty"`
	regressions     []Regression
}

// Regression is a trace a candidate makes worse.
type Regression struct {
	Input       string `json:"input"`
	SavingBytes int64  `json:"saving_bytes"` // negative: more peak reserved
	OOMs        int64  `json:"ooms"`
	BaseOOMs    int64  `json:"baseline_ooms"`
}

// Choice is a candidate chosen for the whole fleet.
type Choice struct {
	Label            string       `json:"label"`
	Setting          string       `json:"setting"`
	Env              string       `json:"env,omitempty"`
	TotalSavingBytes int64        `json:"total_saving_bytes"`
	Improved         int          `json:"improved"`
	Traces           int          `json:"traces"`
	Regressions      []Regression `json:"regressions"`
}

// JobSummary is one job's ranks.
type JobSummary struct {
	Job    string `json:"job"`
	Traces int    `json:"traces"`
	// Ranks lists the ranks found (traces without one are not listed).
	Ranks                   []int   `json:"ranks"`
	PeakReservedMinBytes    uint64  `json:"peak_reserved_min_bytes"`
	PeakReservedMedianBytes uint64  `json:"peak_reserved_median_bytes"`
	PeakReservedMaxBytes    uint64  `json:"peak_reserved_max_bytes"`
	Imbalance               float64 `json:"imbalance"` // max / median
	// Outlier is the trace with the highest peak, Median the one at the
	// median (the lower of the two middle ones for an even count).
	Outlier RankRef `json:"outlier"`
	Median  RankRef `json:"median"`
	// StackDiffs are the stacks whose stranded bytes differ most between
	// the outlier and the median rank.
	StackDiffs []StackDiff `json:"stack_diffs,omitempty"`
}

// RankRef names one trace of a job.
type RankRef struct {
	Input             string `json:"input"`
	Rank              *int   `json:"rank"`
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
}

// StackDiff is a stack's stranded bytes on the outlier and the median rank.
type StackDiff struct {
	Stack        string `json:"stack"`
	OutlierBytes uint64 `json:"outlier_bytes"`
	MedianBytes  uint64 `json:"median_bytes"`
	DiffBytes    int64  `json:"diff_bytes"`
}

// StackSummary is a stack over the fleet.
type StackSummary struct {
	Stack         string `json:"stack"`
	StrandedBytes uint64 `json:"stranded_bytes"`
	Traces        int64  `json:"traces"`
}

// TopStacks is how many stacks fleet.json lists.
const TopStacks = 20

// Summarize turns merged parts (MergeAll) into the fleet's answer for the
// goal. Every list is sorted, so that the same rows give the same answer
// whatever order an engine merged them in.
func Summarize(parts []Part, goal analysis.Goal) *Fleet {
	f := &Fleet{Goal: goal.String(), Failures: []Failure{}, Candidates: []CandidateSummary{},
		Jobs: []JobSummary{}, Stacks: []StackSummary{}, OOMClasses: map[string]int64{}}
	for _, p := range MergeAll(parts) {
		switch p.Kind {
		case KindInputs:
			f.Inputs += p.Inputs
			f.Failures = append(f.Failures, p.Failures...)
		case KindCandidate:
			f.Candidates = append(f.Candidates, summarizeCandidate(p))
		case KindJob:
			f.Jobs = append(f.Jobs, summarizeJob(p))
		case KindStack:
			f.Stacks = append(f.Stacks, StackSummary{Stack: p.Key, StrandedBytes: p.StrandedBytes, Traces: p.Traces})
		case KindOOM:
			f.OOMClasses[p.Key] += p.Traces
		}
	}
	sort.Slice(f.Failures, func(i, j int) bool { return f.Failures[i].Input < f.Failures[j].Input })
	f.Failed = int64(len(f.Failures))
	f.Analysed = f.Inputs - f.Failed
	sort.SliceStable(f.Candidates, func(i, j int) bool {
		a, b := f.Candidates[i], f.Candidates[j]
		switch {
		case a.TotalSavingBytes != b.TotalSavingBytes:
			return a.TotalSavingBytes > b.TotalSavingBytes
		case a.Recommended != b.Recommended: // the traces' own choice first
			return a.Recommended > b.Recommended
		case len(a.Setting) != len(b.Setting): // then the simpler setting
			return len(a.Setting) < len(b.Setting)
		}
		return a.Label < b.Label
	})
	for i := range f.Candidates {
		c := &f.Candidates[i]
		if c.TotalSavingBytes <= 0 && goal.Kind != analysis.GoalFragmentation || c.Improved == 0 {
			continue
		}
		if c.Worse == 0 && c.FailedRuns == 0 && f.Recommendation == nil {
			f.Recommendation = choice(c)
		}
		if f.WithRegressions == nil {
			f.WithRegressions = choice(c)
		}
	}
	if f.WithRegressions != nil && f.Recommendation != nil && f.WithRegressions.Label == f.Recommendation.Label {
		f.WithRegressions = nil
	}
	sort.SliceStable(f.Jobs, func(i, j int) bool {
		if f.Jobs[i].Imbalance != f.Jobs[j].Imbalance {
			return f.Jobs[i].Imbalance > f.Jobs[j].Imbalance
		}
		return f.Jobs[i].Job < f.Jobs[j].Job
	})
	sort.Slice(f.Stacks, func(i, j int) bool {
		if f.Stacks[i].StrandedBytes != f.Stacks[j].StrandedBytes {
			return f.Stacks[i].StrandedBytes > f.Stacks[j].StrandedBytes
		}
		return f.Stacks[i].Stack < f.Stacks[j].Stack
	})
	if len(f.Stacks) > TopStacks {
		f.Stacks = f.Stacks[:TopStacks]
	}
	return f
}

func choice(c *CandidateSummary) *Choice {
	return &Choice{Label: c.Label, Setting: c.Setting, Env: c.Env, TotalSavingBytes: c.TotalSavingBytes,
		Improved: c.Improved, Traces: c.Traces, Regressions: append([]Regression{}, c.regressions...)}
}

func summarizeCandidate(p Part) CandidateSummary {
	obs := append([]CandidateObs(nil), p.Candidates...)
	sort.Slice(obs, func(i, j int) bool { return obs[i].Input < obs[j].Input })
	c := CandidateSummary{Label: p.Key, Traces: len(obs)}
	var savings []int64
	for _, o := range obs {
		if c.Setting == "" {
			c.Setting, c.Env = o.Setting, o.Env
		}
		if o.Recommended {
			c.Recommended++
		}
		switch o.Verdict {
		case Improved:
			c.Improved++
		case Unchanged:
			c.Unchanged++
		case Worse:
			c.Worse++
			c.regressions = append(c.regressions, Regression{Input: o.Input, SavingBytes: o.SavingBytes, OOMs: o.OOMs, BaseOOMs: o.BaselineOOMs})
		default:
			c.FailedRuns++
			continue
		}
		c.TotalSavingBytes += o.SavingBytes
		savings = append(savings, o.SavingBytes)
	}
	// The worst regression: the most OOMs added, then the most bytes lost.
	for i := range c.regressions {
		r := &c.regressions[i]
		w := c.WorstRegression
		if w == nil || r.OOMs-r.BaseOOMs > w.OOMs-w.BaseOOMs || r.OOMs-r.BaseOOMs == w.OOMs-w.BaseOOMs && r.SavingBytes < w.SavingBytes {
			c.WorstRegression = r
		}
	}
	if c.WorstRegression != nil {
		w := *c.WorstRegression
		c.WorstRegression = &w
	}
	if len(savings) > 0 {
		sort.Slice(savings, func(i, j int) bool { return savings[i] < savings[j] })
		c.MedianSavingBytes = medianInt(savings)
	}
	return c
}

// medianInt is the median of sorted values: the mean of the two middle
// ones for an even count.
func medianInt(s []int64) int64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func summarizeJob(p Part) JobSummary {
	obs := append([]RankObs(nil), p.Ranks...)
	// By peak, then rank, then input: the outlier is the last.
	sort.Slice(obs, func(i, j int) bool {
		if obs[i].PeakReservedBytes != obs[j].PeakReservedBytes {
			return obs[i].PeakReservedBytes < obs[j].PeakReservedBytes
		}
		if ri, rj := rankOr(obs[i].Rank), rankOr(obs[j].Rank); ri != rj {
			return ri < rj
		}
		return obs[i].Input < obs[j].Input
	})
	j := JobSummary{Job: p.Key, Traces: len(obs), Ranks: []int{}}
	peaks := make([]int64, len(obs))
	for i, o := range obs {
		peaks[i] = int64(o.PeakReservedBytes)
		if o.Rank != nil {
			j.Ranks = append(j.Ranks, *o.Rank)
		}
	}
	sort.Ints(j.Ranks)
	n := len(obs)
	out, med := obs[n-1], obs[(n-1)/2]
	j.PeakReservedMinBytes, j.PeakReservedMaxBytes = obs[0].PeakReservedBytes, out.PeakReservedBytes
	j.PeakReservedMedianBytes = uint64(medianInt(peaks))
	if j.PeakReservedMedianBytes > 0 {
		j.Imbalance = float64(j.PeakReservedMaxBytes) / float64(j.PeakReservedMedianBytes)
	}
	j.Outlier = RankRef{Input: out.Input, Rank: out.Rank, PeakReservedBytes: out.PeakReservedBytes}
	j.Median = RankRef{Input: med.Input, Rank: med.Rank, PeakReservedBytes: med.PeakReservedBytes}
	if n > 1 {
		keys := map[string]bool{}
		for k := range out.Stacks {
			keys[k] = true
		}
		for k := range med.Stacks {
			keys[k] = true
		}
		for k := range keys {
			a, b := out.Stacks[k], med.Stacks[k]
			if a != b {
				j.StackDiffs = append(j.StackDiffs, StackDiff{Stack: k, OutlierBytes: a, MedianBytes: b, DiffBytes: int64(a) - int64(b)})
			}
		}
		sort.Slice(j.StackDiffs, func(x, y int) bool {
			dx, dy := abs(j.StackDiffs[x].DiffBytes), abs(j.StackDiffs[y].DiffBytes)
			if dx != dy {
				return dx > dy
			}
			return j.StackDiffs[x].Stack < j.StackDiffs[y].Stack
		})
		if len(j.StackDiffs) > 5 {
			j.StackDiffs = j.StackDiffs[:5]
		}
	}
	return j
}

func rankOr(r *int) int {
	if r == nil {
		return -1
	}
	return *r
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// Lines is the fleet's answer in a few lines for the terminal.
func (f *Fleet) Lines() []string {
	l := []string{fmt.Sprintf("Inputs: %d analysed %d failed %d (goal %s)", f.Inputs, f.Analysed, f.Failed, f.Goal)}
	switch c := f.Recommendation; {
	case c != nil:
		l = append(l, fmt.Sprintf("Recommended for the fleet: %s: %s less peak reserved over %s, better on %d, worse on none",
			applyOf(c), signedBytes(c.TotalSavingBytes), plural(c.Traces, "trace"), c.Improved))
	case f.Analysed > 0:
		l = append(l, "Recommended for the fleet: keep the current settings (no candidate saves without making a trace worse)")
	}
	if c := f.WithRegressions; c != nil {
		l = append(l, fmt.Sprintf("With regressions allowed: %s: %s less over %s, worse on %d (worst: %s)",
			applyOf(c), signedBytes(c.TotalSavingBytes), plural(c.Traces, "trace"), len(c.Regressions), c.Regressions[0].Input))
	}
	for _, j := range f.Jobs {
		if j.Traces < 2 {
			continue
		}
		who := j.Outlier.Input
		if j.Outlier.Rank != nil {
			who = fmt.Sprintf("rank %d", *j.Outlier.Rank)
		}
		l = append(l, fmt.Sprintf("Most imbalanced job: %s, %.2fx (%s peaks at %s reserved, the median %s)",
			j.Job, j.Imbalance, who, analysis.FmtBytes(j.PeakReservedMaxBytes), analysis.FmtBytes(j.PeakReservedMedianBytes)))
		break
	}
	if len(f.Stacks) > 0 {
		s := f.Stacks[0]
		l = append(l, fmt.Sprintf("Stack stranding the most: %s (%s over %s)", s.Stack, analysis.FmtBytes(s.StrandedBytes), plural(int(s.Traces), "trace")))
	}
	if len(f.OOMClasses) > 0 {
		keys := make([]string, 0, len(f.OOMClasses))
		for k := range f.OOMClasses {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		s := "OOM classes:"
		for _, k := range keys {
			s += fmt.Sprintf(" %s %d", k, f.OOMClasses[k])
		}
		l = append(l, s)
	}
	for _, x := range f.Failures {
		l = append(l, fmt.Sprintf("failed: %s: %s", x.Input, x.Error))
	}
	return l
}

func applyOf(c *Choice) string {
	if c.Env != "" {
		return c.Env
	}
	return c.Setting
}

func signedBytes(n int64) string {
	if n < 0 {
		return "-" + analysis.FmtBytes(uint64(-n))
	}
	return analysis.FmtBytes(uint64(n))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
