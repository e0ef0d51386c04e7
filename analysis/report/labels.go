package report

import (
	"unicode/utf8"

	"github.com/fragsim/fragsim/analysis"
)

// Bounds on the text the page draws. Names come from the trace (agents,
// models, frames, the trace's own name) or the command line (settings):
// a 200,000-character agent name once stalled the browser for minutes. A
// label (a table key, a run's name, a frame) keeps maxLabelBytes, a line
// of prose maxLineBytes, each cut at a character boundary with "…".
const (
	maxLabelBytes = 200
	maxLineBytes  = 1000
)

// clip returns s cut to at most n bytes of whole characters, with "…"
// when it was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func clipLabel(s string) string { return clip(s, maxLabelBytes) }

// clipText bounds every string of the report that comes from the trace
// or the command line (stacks are bounded as they are made; see
// layoutCapture.stack). Shares are copied: the analysis keeps its own.
func (rep *Report) clipText() {
	t := &rep.Trace
	for _, p := range []*string{&t.Name, &t.GPU, &t.Torch, &t.Date, &t.Producer} {
		*p = clipLabel(*p)
	}
	t.AllocConf = clip(t.AllocConf, maxLineBytes)
	rc := &rep.Recommendation
	rc.Label = clipLabel(rc.Label)
	for _, p := range []*string{&rc.Line, &rc.Goal, &rc.Saving, &rc.Why} {
		*p = clip(*p, maxLineBytes)
	}
	for i := range rep.Timeline.Runs {
		rep.Timeline.Runs[i].Label = clipLabel(rep.Timeline.Runs[i].Label)
	}
	for i := range rep.Breakdowns {
		bd := &rep.Breakdowns[i]
		bd.What = clipLabel(bd.What)
		for _, s := range []*[]analysis.Share{&bd.BySize, &bd.ByStream, &bd.ByMarker, &bd.ByStack, &bd.ByPool} {
			*s = clipShares(*s)
		}
	}
	for i := range rep.Pools {
		p := &rep.Pools[i]
		p.Label, p.Tag, p.Kind = clipLabel(p.Label), clipLabel(p.Tag), clipLabel(p.Kind)
	}
	for i := range rep.Runs {
		r := &rep.Runs[i]
		for _, p := range []*string{&r.Label, &r.Policy, &r.Setting} {
			*p = clipLabel(*p)
		}
		for _, p := range []*string{&r.Apply, &r.Excluded, &r.Note, &r.Error} {
			*p = clip(*p, maxLineBytes)
		}
	}
	for i, l := range rep.Layouts {
		for j := range l.Segments {
			row := &rep.Layouts[i].Segments[j]
			row.Stream, row.Pool, row.PoolTag = clipLabel(row.Stream), clipLabel(row.Pool), clipLabel(row.PoolTag)
		}
	}
	for i := range rep.Verdict {
		rep.Verdict[i] = clip(rep.Verdict[i], maxLineBytes)
	}
	rep.Policy = clipLabel(rep.Policy)
	rep.Fidelity = clip(rep.Fidelity, maxLineBytes)
	rep.Silent = clip(rep.Silent, maxLineBytes)
	rep.Truncated = clip(rep.Truncated, maxLineBytes)
}

// clipShares returns s with its keys clipped, a copy when one changes.
func clipShares(s []analysis.Share) []analysis.Share {
	var out []analysis.Share
	for i, x := range s {
		if k := clipLabel(x.Key); k != x.Key {
			if out == nil {
				out = append([]analysis.Share(nil), s...)
			}
			out[i].Key = k
		}
	}
	if out == nil {
		return s
	}
	return out
}
