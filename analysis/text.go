package analysis

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
)

// TableWidth is the width tables are laid out to fit.
const TableWidth = 100

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
	{"reserved vs ideal", func(c *Comparison, r *Run) string { return c.vsLimit(r) }},
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

// WriteTable writes the side-by-side table (rows: metrics, columns:
// policies, split into blocks that fit TableWidth), the settings table,
// any failed runs and the verdict lines.
func (c *Comparison) WriteTable(w io.Writer) error {
	var pols, sets []*Run
	for _, r := range c.Runs {
		if r.Setting == "" {
			pols = append(pols, r)
		} else {
			sets = append(sets, r)
		}
	}
	ew := &errWriter{w: w}
	if c.Trace.Name != "" {
		fmt.Fprintf(ew, "%s: %s events\n\n", c.Trace.Name, fmtCount(c.Trace.Events))
	}
	writeMetricTable(ew, c, pols)
	if len(sets) > 0 {
		fmt.Fprintln(ew)
		writeSettingsTable(ew, sets)
	}
	for _, r := range c.Runs {
		if r.Error != "" {
			fmt.Fprintf(ew, "%s failed: %s\n", r.Label, r.Error)
		}
	}
	if c.State != nil {
		fmt.Fprintln(ew)
		c.State.WriteText(ew)
	} else if c.Decision != nil {
		fmt.Fprintln(ew)
		for _, l := range c.Decision.Table() {
			fmt.Fprintln(ew, l)
		}
	}
	fmt.Fprintln(ew)
	if l := c.RecommendedLine(); l != "" {
		fmt.Fprintln(ew, wrap(l, TableWidth))
	}
	for _, l := range c.VerdictLines() {
		fmt.Fprintln(ew, l)
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

func writeSettingsTable(w io.Writer, runs []*Run) {
	labelW := len("setting")
	for _, r := range runs {
		labelW = max(labelW, len(r.Label))
	}
	labelW = min(labelW, TableWidth-63) // the columns after the label take 63
	fmt.Fprintf(w, "%-*s  %11s  %13s  %11s  %12s  %6s\n", labelW, "setting", "at_peak_pct", "peak reserved", "stranded", "device calls", "OOMs")
	for _, r := range runs {
		label := r.Label
		if len(label) > labelW {
			label = label[:labelW-1] + "…"
		}
		if !r.OK() {
			fmt.Fprintf(w, "%-*s  %11s\n", labelW, label, "failed")
			continue
		}
		res := r.Result
		fmt.Fprintf(w, "%-*s  %11s  %13s  %11s  %12s  %6s\n", labelW, label,
			fmtPct(res.Fragmentation.AtPeakPct), FmtBytes(res.PeakReservedBytes),
			FmtBytes(res.Fragmentation.StrandedBytes), fmtCount(res.DeviceAllocs+res.DeviceFrees), fmtCount(res.OOMs))
	}
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

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, nil
}
