package fleet

import (
	"sort"

	"github.com/fragsim/fragsim/analysis"
)

// Part kinds: the keys a fleet's rows are reduced by.
const (
	KindInputs    = "inputs"    // key "all": how many inputs, which failed
	KindCandidate = "candidate" // key: the candidate's label
	KindJob       = "job"       // key: the job
	KindStack     = "stack"     // key: the call stack
	KindOOM       = "oom"       // key: the OOM class
)

// Part is what some rows say about one key. Parts of the same key merge
// in any order and grouping (Merge) into the same part, so that an engine
// may combine them on its workers; Summarize reads the merged parts.
type Part struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
	// KindInputs: inputs counted, the failures named.
	Inputs   int64     `json:"inputs,omitempty"`
	Failures []Failure `json:"failures,omitempty"`
	// KindCandidate: the candidate on each trace it was replayed on.
	Candidates []CandidateObs `json:"candidates,omitempty"`
	// KindJob: each rank of the job.
	Ranks []RankObs `json:"ranks,omitempty"`
	// KindStack: the stranded bytes summed over the traces; KindOOM: the
	// OOMs of the class (Traces).
	StrandedBytes uint64 `json:"stranded_bytes,omitempty"`
	Traces        int64  `json:"traces,omitempty"`
}

// Failure is an input that could not be analysed whole.
type Failure struct {
	Input string `json:"input"`
	Error string `json:"error"`
}

// Verdicts of a candidate on one trace, against the baseline, for the goal.
const (
	Improved  = "improved"
	Unchanged = "unchanged" // within 1% (peak reserved) or 1 point (fragmentation)
	Worse     = "worse"
	Failed    = "failed"
)

// CandidateObs is one candidate on one trace.
type CandidateObs struct {
	Input             string `json:"input"`
	Setting           string `json:"setting"`
	Env               string `json:"env,omitempty"`
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	SavingBytes       int64  `json:"saving_bytes"`
	OOMs              int64  `json:"ooms"`
	BaselineOOMs      int64  `json:"baseline_ooms"`
	Verdict           string `json:"verdict"`
	// Recommended is set when it is the trace's own recommendation.
	Recommended bool `json:"recommended,omitempty"`
}

// RankObs is one trace of a job.
type RankObs struct {
	Input             string `json:"input"`
	Rank              *int   `json:"rank"`
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	// Stacks are the stranded bytes of its top stacks at its peak.
	Stacks map[string]uint64 `json:"stacks,omitempty"`
}

// PartsOf reduces one row to its parts, each with its key. A failed row
// counts among the inputs and nothing else; a row cut short adds its
// figures and is named a failure too.
func PartsOf(r Row, goal analysis.Goal) []Part {
	in := Part{Kind: KindInputs, Key: "all", Inputs: 1}
	if r.Error != "" {
		in.Failures = []Failure{{Input: r.Input, Error: r.Error}}
	}
	parts := []Part{in}
	if !r.OK() {
		return parts
	}
	var base *Candidate
	for i := range r.Candidates {
		if r.Candidates[i].Label == r.Baseline {
			base = &r.Candidates[i]
		}
	}
	for _, c := range r.Candidates {
		if c.Limit || base == nil || c.Label == base.Label {
			continue
		}
		parts = append(parts, Part{Kind: KindCandidate, Key: c.Label, Candidates: []CandidateObs{{
			Input: r.Input, Setting: c.Setting, Env: c.Env, PeakReservedBytes: c.PeakReservedBytes,
			SavingBytes: c.SavingBytes, OOMs: c.OOMs, BaselineOOMs: base.OOMs, Verdict: verdict(c, *base, goal), Recommended: c.Recommended,
		}}})
	}
	obs := RankObs{Input: r.Input, Rank: r.Rank, PeakReservedBytes: r.BaselinePeakReservedBytes}
	for _, s := range r.Stacks {
		if obs.Stacks == nil {
			obs.Stacks = map[string]uint64{}
		}
		obs.Stacks[s.Key] += s.StrandedBytes
		parts = append(parts, Part{Kind: KindStack, Key: s.Key, StrandedBytes: s.StrandedBytes, Traces: 1})
	}
	parts = append(parts, Part{Kind: KindJob, Key: r.Job, Ranks: []RankObs{obs}})
	if r.OOM != nil {
		parts = append(parts, Part{Kind: KindOOM, Key: string(r.OOM.Class), Traces: 1})
	}
	return parts
}

// verdict weighs c against the baseline b for the goal: fewer OOMs is
// better, more is worse; then the goal's figure (fragmentation at peak
// for the fragmentation goal, peak reserved otherwise), unchanged within
// 1% of the baseline's peak reserved or 1 point of fragmentation.
func verdict(c, b Candidate, goal analysis.Goal) string {
	switch {
	case c.Error != "":
		return Failed
	case c.OOMs > b.OOMs:
		return Worse
	case c.OOMs < b.OOMs:
		return Improved
	}
	if goal.Kind == analysis.GoalFragmentation {
		switch d := c.AtPeakPct - b.AtPeakPct; {
		case d < -1:
			return Improved
		case d > 1:
			return Worse
		}
		return Unchanged
	}
	tol := int64(b.PeakReservedBytes / 100)
	switch {
	case c.SavingBytes > tol:
		return Improved
	case c.SavingBytes < -tol:
		return Worse
	}
	return Unchanged
}

// Merge merges b into a, of the same kind and key.
func Merge(a, b Part) Part {
	a.Inputs += b.Inputs
	a.Failures = append(a.Failures, b.Failures...)
	a.Candidates = append(a.Candidates, b.Candidates...)
	a.Ranks = append(a.Ranks, b.Ranks...)
	a.StrandedBytes += b.StrandedBytes
	a.Traces += b.Traces
	return a
}

// MergeAll merges parts by kind and key, in a stable order.
func MergeAll(parts []Part) []Part {
	idx := map[[2]string]int{}
	var out []Part
	for _, p := range parts {
		k := [2]string{p.Kind, p.Key}
		if i, ok := idx[k]; ok {
			out[i] = Merge(out[i], p)
			continue
		}
		idx[k] = len(out)
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Key < out[j].Key
	})
	return out
}
