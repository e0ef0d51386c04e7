package report

import (
	"fmt"

	"github.com/fragsim/fragsim/analysis"
)

// Recommendation is the page's answer: what to change, what it saves, and
// whether the figure is an exact replay of PyTorch's allocator or a model.
type Recommendation struct {
	// Line is what to paste (an environment setting), or what to do.
	Line string `json:"line"`
	// Label is the run recommended, as the table names it.
	Label string `json:"label"`
	// Saving says what the change saves, in words.
	Saving string `json:"saving"`
	// SavedBytes is the peak reserved saved (negative: it costs memory).
	SavedBytes int64 `json:"saved_bytes"`
	// Exact is set when the figures come from an exact replay.
	Exact bool `json:"exact"`
	// Why is the reasoning, one line.
	Why string `json:"why,omitempty"`
}

// recommendation turns a comparison's verdict into the page's
// recommendation. It is the one place that decides what the page advises.
func recommendation(cmp *analysis.Comparison) Recommendation {
	before, after := cmp.Run(cmp.Before), cmp.Run(cmp.After)
	if after == nil || !after.OK() {
		return Recommendation{Line: "no run finished: nothing to recommend"}
	}
	rec := Recommendation{Label: after.Label, Exact: analysis.Exact(after.Policy), Line: after.Apply}
	if before == nil || !before.OK() || before == after {
		rec.Line = "keep the current settings"
		rec.Saving = fmt.Sprintf("no policy or setting replayed does better than %s (%.1f%% fragmented at peak reserved)",
			after.Label, after.Result.Fragmentation.AtPeakPct)
		return rec
	}
	b, a := before.Result, after.Result
	rec.SavedBytes = int64(b.PeakReservedBytes) - int64(a.PeakReservedBytes)
	verb, n := "saves", rec.SavedBytes
	if n < 0 {
		verb, n = "costs", -n
	}
	rec.Saving = fmt.Sprintf("%s %s of peak reserved (%s → %s); fragmentation at peak %.1f%% → %.1f%%",
		verb, analysis.FmtBytes(uint64(n)), analysis.FmtBytes(b.PeakReservedBytes), analysis.FmtBytes(a.PeakReservedBytes),
		b.Fragmentation.AtPeakPct, a.Fragmentation.AtPeakPct)
	rec.Why = fmt.Sprintf("%s against %s, the lowest fragmentation at peak reserved of the runs that do not add OOMs", after.Label, before.Label)
	return rec
}
