package report

import (
	"fmt"

	"github.com/fragsim/fragsim/analysis"
)

// Recommendation is the page's answer, from the decision engine: what to
// change, what it saves, and whether the figure is an exact replay of
// PyTorch's allocator or a model.
type Recommendation struct {
	// Line is what to paste (an environment line), or what to do.
	Line string `json:"line"`
	// Label is the run recommended, as the table names it.
	Label string `json:"label"`
	// Goal is what the recommendation optimises ("reserved", ...).
	Goal string `json:"goal"`
	// Saving says what the change saves, in words.
	Saving string `json:"saving"`
	// SavedBytes is the peak reserved saved (negative: it costs memory).
	SavedBytes int64 `json:"saved_bytes"`
	// Exact is set when the figures come from an exact replay; a model
	// carries its measured error of peak reserved, in percent.
	Exact    bool    `json:"exact"`
	ErrorPct float64 `json:"error_pct,omitempty"`
	// Why is the decision engine's own line.
	Why string `json:"why,omitempty"`
}

// recommendation is the page's recommendation: the decision engine's, as
// compare prints it.
func recommendation(cmp *analysis.Comparison) Recommendation {
	if cmp.Decision == nil || cmp.Decision.Recommendation == nil {
		return Recommendation{Line: "no run finished: nothing to recommend"}
	}
	d := cmp.Decision.Recommendation
	rec := Recommendation{Label: d.Label, Goal: d.Goal, Exact: d.Exact, ErrorPct: d.ErrorPct, Why: d.Line,
		SavedBytes: d.SavingBytes}
	switch {
	case d.Label == "":
		rec.Line = "no change recommended"
		rec.Saving = d.Line
		return rec
	case d.Label == cmp.Decision.Baseline || d.Setting == "":
		rec.Line = "keep PyTorch's defaults"
	case d.Env != "":
		rec.Line = d.Env
	default:
		rec.Line = d.Apply
	}
	verb, n := "saves", d.SavingBytes
	if n < 0 {
		verb, n = "costs", -n
	}
	rec.Saving = fmt.Sprintf("%s %s of peak reserved (%s → %s); fragmentation at peak %.1f%% → %.1f%%; %d device calls (baseline %d)",
		verb, analysis.FmtBytes(uint64(n)), analysis.FmtBytes(d.BaselinePeakReservedBytes), analysis.FmtBytes(d.PeakReservedBytes),
		d.BaselineAtPeakPct, d.AtPeakPct, d.DeviceCalls, d.BaselineDeviceCalls)
	if d.Label == cmp.Decision.Baseline {
		rec.Saving = fmt.Sprintf("no policy or setting replayed does better for the goal %q", d.Goal)
	}
	return rec
}
