package analysis

import (
	"fmt"
	"io"
	"strings"

	"github.com/fragsim/fragsim/trace"
)

// shareRows is the number of rows a breakdown table shows.
const shareRows = 8

// fmtSigned formats a byte delta: "+1.2 GiB", "-300.0 MiB", "0 B".
func fmtSigned(d int64) string {
	switch {
	case d > 0:
		return "+" + FmtBytes(uint64(d))
	case d < 0:
		return "-" + FmtBytes(uint64(-d))
	}
	return "0 B"
}

// truncate shortens s to n runes.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// WriteText writes the analysis as a report that fits TableWidth columns
// (wrapping the prose).
func (a *Analysis) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	r := a.Result
	name := a.Trace.Name
	if name == "" {
		name = "trace"
	}
	fmt.Fprintf(ew, "%s: %s events, policy %s\n", trace.Printable(name), fmtCount(a.Trace.Events), a.Policy)
	if a.State != nil { // no events: the state is all there is to show
		a.State.WriteText(ew)
		if l := a.RecommendedLine(); l != "" {
			fmt.Fprintln(ew, wrap(l, TableWidth))
		}
		return ew.err
	}
	fr := r.Fragmentation
	fmt.Fprintf(ew, "Peak reserved %s at event %s; stranded %s at peak, %s at most; %s OOMs\n"+
		"at_peak_pct %.1f%%, peak_ratio_pct %.1f%%, time_weighted_pct %.1f%%\n",
		FmtBytes(r.PeakReservedBytes), fmtCount(fr.PeakIndex), FmtBytes(fr.StrandedBytes), FmtBytes(fr.MaxStrandedBytes),
		fmtCount(r.OOMs), fr.AtPeakPct, fr.PeakRatioPct, fr.TimeWeightedPct)

	fmt.Fprintf(ew, "\nWorst moments (most stranded bytes, then most reserved − active):\n")
	fmt.Fprintf(ew, "%12s  %9s  %10s  %10s  %6s  %10s  %12s\n", "event", "time", "reserved", "active", "frag", "stranded", "largest free")
	for _, m := range a.Moments {
		fmt.Fprintf(ew, "%12s  %8.2fs  %10s  %10s  %5.1f%%  %10s  %12s\n", fmtCount(m.Index), m.TimeS,
			FmtBytes(m.ReservedBytes), FmtBytes(m.ActiveBytes), m.Pct, FmtBytes(m.StrandedBytes), FmtBytes(m.LargestFreeBytes))
	}

	for _, bd := range a.Breakdowns {
		fmt.Fprintf(ew, "\nStranded at %s (event %s, %.2f s): %s in %d split segments,\n"+
			"shared among the live blocks that keep those segments:\n",
			bd.What, fmtCount(bd.Moment.Index), bd.Moment.TimeS, FmtBytes(bd.StrandedBytes), bd.SplitSegments)
		if bd.StrandedBytes == 0 {
			continue
		}
		writeShares(ew, "by request size", bd.BySize)
		writeShares(ew, "by stream", bd.ByStream)
		if len(bd.ByMarker) > 0 {
			writeShares(ew, "by agent or model", bd.ByMarker)
		}
		if len(bd.ByStack) > 0 {
			writeShares(ew, "by call stack (top frames)", bd.ByStack)
		}
		if len(bd.ByPool) > 0 {
			writeShares(ew, "by pool", bd.ByPool)
		}
	}
	a.writePools(ew)

	var total int64
	for _, c := range a.Requests {
		total += c.Count
	}
	fmt.Fprintf(ew, "\nRequest sizes (%s allocations):\n", fmtCount(total))
	maxPct := 0.0
	for _, c := range a.Requests {
		maxPct = max(maxPct, c.Pct)
	}
	for _, c := range a.Requests {
		bar := 0
		if maxPct > 0 {
			bar = int(40*c.Pct/maxPct + 0.5)
		}
		fmt.Fprintf(ew, "  %-22s %12s %6.1f%%  %s\n", SizeClassLabel(c.Log2), fmtCount(c.Count), c.Pct, strings.Repeat("#", bar))
	}

	if len(a.Advice) > 0 {
		a.writeAdvice(ew)
	}
	if a.Decision != nil {
		fmt.Fprintln(ew)
		if a.State == nil {
			for _, l := range a.Decision.Table() {
				fmt.Fprintln(ew, l)
			}
		}
		fmt.Fprintln(ew, wrap(a.RecommendedLine(), TableWidth))
	}
	fmt.Fprintln(ew)
	fmt.Fprintln(ew, wrap(a.Workload, TableWidth))
	return ew.err
}

func writeShares(w io.Writer, title string, shares []Share) {
	fmt.Fprintf(w, "  %s:\n", title)
	var rest Share
	for i, s := range shares {
		if i >= shareRows {
			rest.StrandedBytes += s.StrandedBytes
			rest.LiveBlocks += s.LiveBlocks
			rest.Pct += s.Pct
			continue
		}
		fmt.Fprintf(w, "    %-58s %11s %6.1f%%  %6s blocks\n", truncate(trace.Printable(s.Key), 58), FmtBytes(s.StrandedBytes), s.Pct, fmtCount(s.LiveBlocks))
	}
	if rest.LiveBlocks > 0 {
		fmt.Fprintf(w, "    %-58s %11s %6.1f%%  %6s blocks\n", fmt.Sprintf("(%d others)", len(shares)-shareRows),
			FmtBytes(rest.StrandedBytes), rest.Pct, fmtCount(rest.LiveBlocks))
	}
}

func (a *Analysis) writeAdvice(w io.Writer) {
	b := a.Baseline
	fmt.Fprintf(w, "\nAdvice: each change replayed, ranked by at_peak_pct then peak reserved (the fragmentation view;\n"+
		"the recommendation for the goal follows).\n")
	if b != nil {
		fmt.Fprintf(w, "Baseline %s: at_peak_pct %.1f%%, peak reserved %s, %s device calls, %s OOMs\n",
			baselinePolicy(), b.Fragmentation.AtPeakPct, FmtBytes(b.PeakReservedBytes), fmtCount(b.DeviceAllocs+b.DeviceFrees), fmtCount(b.OOMs))
	}
	fmt.Fprintf(w, "%4s  %-32s  %7s  %7s  %9s  %10s  %9s  %4s\n", "rank", "change", "at_peak", "removed",
		"reserved", "Δ reserved", "dev calls", "OOMs")
	var notes []string
	for _, ad := range a.Advice {
		label := truncate(trace.Printable(ad.Setting), 32)
		if ad.Error != "" {
			fmt.Fprintf(w, "%4d  %-32s  failed: %s\n", ad.Rank, label, truncate(trace.Printable(ad.Error), 50))
			continue
		}
		mark := ""
		if ad.Note != "" {
			notes = append(notes, ad.Setting+": "+ad.Note)
			mark = fmt.Sprintf(" [%d]", len(notes))
		}
		fmt.Fprintf(w, "%4d  %-32s  %6.1f%%  %6.0f%%  %9s  %10s  %9s  %4s%s\n", ad.Rank, label, ad.AtPeakPct,
			ad.RemovedPct, FmtBytes(ad.PeakReservedBytes), fmtSigned(ad.ReservedDeltaBytes),
			fmtCount(ad.DeviceCalls), fmtCount(ad.OOMs), mark)
	}
	for i, n := range notes {
		fmt.Fprintln(w, wrap(fmt.Sprintf("[%d] %s", i+1, n), TableWidth))
	}
}

// wrap breaks s into lines of at most width runes at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		l := len([]rune(word))
		if i > 0 {
			if n+1+l > width {
				b.WriteByte('\n')
				n = 0
			} else {
				b.WriteByte(' ')
				n++
			}
		}
		b.WriteString(word)
		n += l
	}
	return b.String()
}
