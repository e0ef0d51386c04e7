package analysis

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/trace"
)

// TableWidth is the width tables are laid out to fit.
const TableWidth = 100

// ProseWidth is the width paragraphs under the tables wrap to.
const ProseWidth = 80

// FmtBytes formats a byte count with a binary unit: "1.50 GiB", "512.0 MiB".
func FmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func fmtPct(v float64) string { return fmt.Sprintf("%.1f%%", v) }

// metric is one row of the policy table.
type metric struct {
	name string
	cell func(c *Comparison, r *Run) string
}

var policyMetrics = []metric{
	{"peak reserved", func(_ *Comparison, r *Run) string { return FmtBytes(r.Result.PeakReservedBytes) }},
	{"peak requested", func(_ *Comparison, r *Run) string { return FmtBytes(r.Result.PeakRequestedBytes) }},
	{"at_peak_pct", func(_ *Comparison, r *Run) string { return fmtPct(r.Result.Fragmentation.AtPeakPct) }},
	{"peak_ratio_pct", func(_ *Comparison, r *Run) string { return fmtPct(r.Result.Fragmentation.PeakRatioPct) }},
	{"time_weighted_pct", func(_ *Comparison, r *Run) string { return fmtPct(r.Result.Fragmentation.TimeWeightedPct) }},
	{"external_pct", func(_ *Comparison, r *Run) string { return fmtPct(r.Result.Fragmentation.ExternalPct) }},
	{"stranded at peak", func(_ *Comparison, r *Run) string { return FmtBytes(r.Result.Fragmentation.StrandedBytes) }},
	{"stranded max", func(_ *Comparison, r *Run) string { return FmtBytes(r.Result.Fragmentation.MaxStrandedBytes) }},
	{"overhead ratio", func(_ *Comparison, r *Run) string {
		return fmt.Sprintf("%.2fx", r.Result.Fragmentation.OverheadRatio)
	}},
	{"device calls", func(_ *Comparison, r *Run) string {
		return fmtCount(r.Result.DeviceAllocs + r.Result.DeviceFrees)
	}},
	{"device time (est.)", func(_ *Comparison, r *Run) string {
		if r.Cost == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f ms", r.Cost.Ms)
	}},
	{"alloc retries", func(_ *Comparison, r *Run) string { return fmtCount(r.Result.AllocRetries) }},
	{"OOMs", func(_ *Comparison, r *Run) string { return fmtCount(r.Result.OOMs) }},
	{"reserved vs " + limitName(), func(c *Comparison, r *Run) string { return c.vsLimit(r) }},
}

// limitName names the physical limit in the policy table: the registry's
// limit policy.
func limitName() string {
	if f, ok := allocator.LimitFacts(); ok {
		return f.Name
	}
	return "limit"
}

// vsLimit is the distance of r's peak reserved from the physical limit's.
func (c *Comparison) vsLimit(r *Run) string {
	var lim *Run
	for _, x := range c.Runs {
		if x.Limit && x.OK() {
			lim = x
			break
		}
	}
	if lim == nil || lim.Result.PeakReservedBytes == 0 {
		return "-"
	}
	d := 100 * (float64(r.Result.PeakReservedBytes)/float64(lim.Result.PeakReservedBytes) - 1)
	return fmt.Sprintf("%+.1f%%", d)
}

// WriteTable writes the comparison as text: the policies' views side by
// side (rows: metrics, columns: policies, split into blocks that fit
// TableWidth), the ranked table of every candidate, policies and settings
// (Decision.Table), any failed runs, then the recommendation and the
// verdict, the methods as a paragraph of at most ProseWidth columns.
func (c *Comparison) WriteTable(w io.Writer) error {
	var pols []*Run
	for _, r := range c.Runs {
		if r.Setting == "" {
			pols = append(pols, r)
		}
	}
	ew := &errWriter{w: w}
	if c.Trace.Name != "" {
		fmt.Fprintf(ew, "%s: %s events\n\n", trace.Printable(c.Trace.Name), fmtCount(c.Trace.Events))
	}
	writeMetricTable(ew, c, pols)
	if c.State != nil {
		fmt.Fprintln(ew)
		c.State.WriteText(ew)
	} else if c.Decision != nil {
		fmt.Fprintln(ew)
		for _, l := range c.Decision.Table() {
			fmt.Fprintln(ew, l)
		}
	}
	for _, r := range c.Runs {
		if r.Error != "" {
			fmt.Fprintf(ew, "%s failed: %s\n", trace.Printable(r.Label), trace.Printable(r.Error))
		}
	}
	fmt.Fprintln(ew)
	if l := c.RecommendedLine(); l != "" {
		// One line, never wrapped: scripts grep it and people copy its setting.
		fmt.Fprintln(ew, l)
	}
	methods := c.MethodsLine()
	for _, l := range c.VerdictLines() {
		width := TableWidth
		if l == methods {
			width = ProseWidth
		}
		fmt.Fprintln(ew, wrap(l, width))
	}
	return ew.err
}

func writeMetricTable(w io.Writer, c *Comparison, runs []*Run) {
	const labelW = 19
	cells := make([][]string, len(runs))
	widths := make([]int, len(runs))
	for j, r := range runs {
		widths[j] = len(r.Label)
		for _, m := range policyMetrics {
			s := "-"
			if r.Result != nil {
				s = m.cell(c, r)
			} else if r.Error != "" {
				s = "failed"
			}
			cells[j] = append(cells[j], s)
			widths[j] = max(widths[j], len(s))
		}
	}
	for start := 0; start < len(runs); {
		end, tot := start, labelW
		for end < len(runs) && (end == start || tot+2+widths[end] <= TableWidth) {
			tot += 2 + widths[end]
			end++
		}
		if start > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%-*s", labelW, "")
		for j := start; j < end; j++ {
			fmt.Fprintf(w, "  %*s", widths[j], runs[j].Label)
		}
		fmt.Fprintln(w)
		for i, m := range policyMetrics {
			fmt.Fprintf(w, "%-*s", labelW, m.name)
			for j := start; j < end; j++ {
				fmt.Fprintf(w, "  %*s", widths[j], cells[j][i])
			}
			fmt.Fprintln(w)
		}
		start = end
	}
}

// Table returns the candidates, best first, one a line, fitting
// TableWidth, under a title line: every policy and setting replayed, with
// its peak reserved, fragmentation (at_peak_pct), stranded bytes at peak,
// device calls, OOMs and how far to trust it; * marks the recommended one.
func (d *Decision) Table() []string {
	fit := d.Goal.Kind == GoalFit
	labelW := 33
	if fit {
		labelW -= 11 // room for the min capacity
	}
	head := fmt.Sprintf("%4s  %-*s  %9s  %6s  %9s  %7s  %4s  %s", "rank", labelW, "candidate",
		"reserved", "frag", "stranded", "calls", "OOMs", "trust")
	if fit {
		head += "  min capacity"
	}
	title := "Candidates for the goal " + d.Goal.String() + ", each replayed (* recommended; frag: at_peak_pct; " +
		"stranded: free bytes empty_cache cannot return, at peak; calls: device calls, [Nx]: N times the baseline's):"
	lines := []string{wrap(title, TableWidth), head}
	for _, o := range d.Results {
		label := orDefault(o.Setting)
		if !o.Exact && o.Setting != o.Policy && !o.Limit {
			label = o.Policy + ": " + label
		}
		if o.Limit {
			label = o.Policy + " (physical limit)"
		}
		mark := " "
		if o.Recommended {
			mark = "*"
		}
		if o.Error != "" {
			lines = append(lines, fmt.Sprintf("%3d%s  %-*s  failed: %s", o.Rank, mark, labelW, truncate(label, labelW), truncate(o.Error, 50)))
			continue
		}
		tr := "exact"
		switch {
		case !o.Exact && o.ErrorPct > 0:
			tr = fmt.Sprintf("±%.1f%%", o.ErrorPct)
		case !o.Exact:
			tr = "model"
		}
		if o.Limit {
			tr = "limit"
		}
		stranded := "-"
		if o.run != nil && o.run.Result != nil {
			stranded = FmtBytes(o.run.Result.Fragmentation.StrandedBytes)
		}
		l := fmt.Sprintf("%3d%s  %-*s  %9s  %5.1f%%  %9s  %7s  %4s  %-6s", o.Rank, mark, labelW, truncate(label, labelW),
			FmtBytes(o.PeakReservedBytes), o.AtPeakPct, stranded, fmtCount(o.DeviceCalls), fmtCount(o.OOMs), tr)
		if fit && o.MinCapacityBytes > 0 {
			l += fmt.Sprintf("  %s", FmtBytes(o.MinCapacityBytes))
		}
		if o.CallsNote != "" {
			l += "  [" + strings.TrimSuffix(o.CallsNote, " the baseline's device calls") + "]"
		}
		lines = append(lines, strings.TrimRight(l, " "))
	}
	return lines
}

// CSVHeader is the header row of WriteCSV.
var CSVHeader = []string{"label", "policy", "setting", "conf", "events", "peak_reserved_bytes", "peak_requested_bytes",
	"peak_active_bytes", "at_peak_pct", "peak_ratio_pct", "time_weighted_pct", "external_pct", "internal_bytes",
	"stranded_bytes", "max_stranded_bytes", "overhead_ratio", "device_allocs", "device_frees", "alloc_retries",
	"ooms", "wall_s", "error"}

// WriteCSV writes one row per run.
func (c *Comparison) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range c.Runs {
		row := []string{r.Label, r.Policy, r.Setting, r.Conf}
		if res := r.Result; res != nil {
			fr := res.Fragmentation
			row = append(row, i(res.Events), u(res.PeakReservedBytes), u(res.PeakRequestedBytes), u(res.PeakActiveBytes),
				f(fr.AtPeakPct), f(fr.PeakRatioPct), f(fr.TimeWeightedPct), f(fr.ExternalPct), u(fr.InternalBytes),
				u(fr.StrandedBytes), u(fr.MaxStrandedBytes), f(fr.OverheadRatio), i(res.DeviceAllocs), i(res.DeviceFrees),
				i(res.AllocRetries), i(res.OOMs))
		} else {
			row = append(row, make([]string, 16)...)
		}
		row = append(row, f(r.WallS), r.Error)
		cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

// errWriter is the writer of every text renderer here: it keeps the
// first write error, and writes what it is given as a terminal may show it
// (trace.PrintableLines: lines and tabs kept, every control escaped), so
// that no string of a trace (a frame, a marker, a GPU name) acts on the
// terminal. Fields that could hold a newline go through trace.Printable
// first, so that they cannot forge a line either. Each Write must hold
// whole runes, as fmt's do.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	_, e.err = trace.PrintableWriter(e.w).Write(p)
	return len(p), nil
}
