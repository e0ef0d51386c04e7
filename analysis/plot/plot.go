// Package plot draws a comparison's figures (PNG and SVG) with gonum/plot.
package plot

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/outfile"
)

// DPI is the resolution of the PNG files.
const DPI = 96

// px converts pixels at DPI to a vg.Length.
func px(n int) vg.Length { return vg.Length(n) * vg.Inch / DPI }

// Figure is one figure: plots laid out in a grid, drawn at WidthPx × HeightPx.
type Figure struct {
	Name     string // file name without extension
	Plots    [][]*plot.Plot
	WidthPx  int
	HeightPx int
}

// Draw draws the figure on a canvas.
func (f *Figure) Draw(c vg.CanvasSizer) {
	dc := draw.New(c)
	rows, cols := len(f.Plots), 0
	for _, r := range f.Plots {
		cols = max(cols, len(r))
	}
	if rows == 1 && cols == 1 {
		f.Plots[0][0].Draw(dc)
		return
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadTop: 4, PadBottom: 4, PadLeft: 4, PadRight: 8, PadX: 16, PadY: 12}
	cs := plot.Align(f.Plots, tiles, dc)
	for i, r := range f.Plots {
		for j, p := range r {
			if p != nil {
				p.Draw(cs[i][j])
			}
		}
	}
}

// WritePNG writes the figure as PNG.
func (f *Figure) WritePNG(w io.Writer) error {
	c := vgimg.NewWith(vgimg.UseWH(px(f.WidthPx), px(f.HeightPx)), vgimg.UseDPI(DPI))
	f.Draw(c)
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

// WriteSVG writes the figure as SVG.
func (f *Figure) WriteSVG(w io.Writer) error {
	c := vgsvg.New(px(f.WidthPx), px(f.HeightPx))
	f.Draw(c)
	_, err := c.WriteTo(w)
	return err
}

// ComparisonNames are the names of the figures of a comparison
// (Figures), and ForecastName that of a forecast's, for a command that
// checks its outputs before drawing them.
var ComparisonNames = []string{"fragmentation_hist", "timeline", "views", "policies"}

// ForecastName is the name of a forecast's figure (Forecast).
const ForecastName = "forecast"

// Save writes dir/Name.png and dir/Name.svg and returns their paths.
// inputs are the files the command read: a figure that would replace one
// of them (through any name or link) is refused (outfile.Create).
func (f *Figure) Save(dir string, inputs ...string) ([]string, error) {
	var paths []string
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(dir, f.Name+ext)
		write := f.WriteSVG
		if ext == ".png" {
			write = f.WritePNG
		}
		// A temporary file renamed into place: an earlier plot stays whole
		// until the new one is.
		if err := outfile.Write(path, inputs, write); err != nil {
			return paths, fmt.Errorf("%s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// Figures returns the comparison's figures: fragmentation_hist, timeline,
// views and policies.
func Figures(c *analysis.Comparison) ([]*Figure, error) {
	var out []*Figure
	for _, mk := range []func(*analysis.Comparison) (*Figure, error){Histogram, Timeline, Views, Policies} {
		f, err := mk(c)
		if err != nil {
			return nil, err
		}
		if f != nil {
			out = append(out, f)
		}
	}
	return out, nil
}

// WriteAll writes every figure of the comparison to dir (created if
// needed), PNG and SVG, and returns the paths written. inputs are the
// files the command read, which no figure may replace (see Save).
func WriteAll(dir string, c *analysis.Comparison, inputs ...string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	figs, err := Figures(c)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range figs {
		p, err := f.Save(dir, inputs...)
		paths = append(paths, p...)
		if err != nil {
			return paths, err
		}
	}
	return paths, nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

// HistData is the data behind fragmentation_hist: one bar per log2 bin,
// in MiB of free blocks (bytes, not block counts: a few large stranded
// blocks matter more than many small ones).
type HistData struct {
	Labels     []string  // bin lower bounds in MiB
	Stranded   []float64 // MiB of free blocks in segments that hold live blocks
	Releasable []float64 // MiB of free blocks in wholly free segments
}

// HistogramData returns the bars of the free-block histogram.
func HistogramData(h *analysis.FreeHistogram) HistData {
	var d HistData
	for _, b := range h.Bins {
		d.Labels = append(d.Labels, MiBLabel(b.LowBytes))
		d.Stranded = append(d.Stranded, float64(b.StrandedBytes)/(1<<20))
		d.Releasable = append(d.Releasable, float64(b.Bytes-b.StrandedBytes)/(1<<20))
	}
	return d
}

// TraceLine names the trace and its GPU for figure titles:
// "baseline_s1.fst, NVIDIA H200, PyTorch 2.11.0".
func TraceLine(c *analysis.Comparison) string {
	t := c.Trace
	or := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	return fmt.Sprintf("%s, %s, PyTorch %s", or(t.Name, "trace"), or(t.GPU, "unknown GPU"), or(t.Torch, "unknown"))
}

// MiBLabel writes a power-of-two byte count in MiB: "4", "1/2", "1/2048".
func MiBLabel(bytes uint64) string {
	const mib = 1 << 20
	if bytes >= mib {
		return fmt.Sprintf("%g", float64(bytes)/mib)
	}
	if bytes == 0 {
		return "0"
	}
	return fmt.Sprintf("1/%g", math.Round(mib/float64(bytes)))
}

// histRun picks the run whose histogram is drawn: the verdict's "before".
func histRun(c *analysis.Comparison) *analysis.Run {
	if r := c.Run(c.Before); r != nil && r.FreeHist != nil {
		return r
	}
	for _, r := range c.Runs {
		if r.FreeHist != nil {
			return r
		}
	}
	return nil
}

// Histogram draws the free block sizes at the worst moment (peak reserved)
// of the baseline run; nil when no run could list its segments.
func Histogram(c *analysis.Comparison) (*Figure, error) {
	r := histRun(c)
	if r == nil {
		return nil, nil
	}
	return HistogramFigure(r.FreeHist, TraceLine(c))
}

// HistogramFigure draws one free-block histogram; trace names the trace
// in the title ("" for none).
func HistogramFigure(h *analysis.FreeHistogram, trace string) (*Figure, error) {
	d := HistogramData(h)
	title := fmt.Sprintf("Free blocks at peak reserved (%s, event %d, t = %.1f s): %s free, %s stranded in %s reserved",
		h.Policy, h.Index, h.TimeS, analysis.FmtBytes(h.FreeBytes), analysis.FmtBytes(h.StrandedBytes),
		analysis.FmtBytes(h.ReservedBytes))
	if trace != "" {
		title = trace + "\n" + title
	}
	p := newPlot(title, "free block size (MiB, log2 bins, lower bound)", "free bytes (MiB)")
	if len(d.Labels) == 0 {
		d = HistData{Labels: []string{"none"}, Stranded: []float64{0}, Releasable: []float64{0}}
	}
	w := vg.Points(float64(min(40, 700/len(d.Labels))))
	st, err := plotter.NewBarChart(plotter.Values(d.Stranded), w)
	if err != nil {
		return nil, err
	}
	st.Color = color.RGBA{R: 200, G: 60, B: 40, A: 255}
	st.LineStyle.Width = 0
	rel, err := plotter.NewBarChart(plotter.Values(d.Releasable), w)
	if err != nil {
		return nil, err
	}
	rel.Color = color.RGBA{R: 90, G: 140, B: 200, A: 255}
	rel.LineStyle.Width = 0
	rel.StackOn(st)
	p.Add(st, rel)
	p.Legend.Add("stranded (segment holds live blocks)", st)
	p.Legend.Add("releasable (segment wholly free)", rel)
	p.NominalX(d.Labels...)
	padBars(p, len(d.Labels), sumMax(d.Stranded, d.Releasable))
	p.Legend.Left = false
	p.Legend.YOffs = -vg.Points(4)
	p.Legend.XOffs = -vg.Points(8)
	return &Figure{Name: "fragmentation_hist", Plots: [][]*plot.Plot{{p}}, WidthPx: 1200, HeightPx: 700}, nil
}

// timelineRuns are the runs drawn over time: the policies, and the
// verdict's "after" when it is a setting.
func timelineRuns(c *analysis.Comparison) []*analysis.Run {
	var out []*analysis.Run
	for _, r := range c.Runs {
		if r.OK() && len(r.Series) > 0 && (r.Setting == "" || r.Label == c.After) {
			out = append(out, r)
		}
	}
	return out
}

// XY returns a series as plot points (x in seconds, y in the series' unit).
func XY(s *analysis.Series) plotter.XYs {
	xy := make(plotter.XYs, len(s.Value))
	for i := range s.Value {
		xy[i].X, xy[i].Y = s.TimeS[i], s.Value[i]
	}
	return xy
}

// StepXY returns the line a series draws: each value holds from its
// event's time until the next sample's, as memory does between events, so
// a quiet stretch (a model loading between a few large allocations) is
// flat, not a ramp.
func StepXY(s *analysis.Series) plotter.XYs {
	xy := XY(s)
	if len(xy) < 2 {
		return xy
	}
	out := make(plotter.XYs, 0, 2*len(xy)-1)
	for i, pt := range xy {
		if i > 0 && pt.X > xy[i-1].X {
			out = append(out, plotter.XY{X: pt.X, Y: xy[i-1].Y})
		}
		out = append(out, pt)
	}
	return out
}

func addLine(p *plot.Plot, s *analysis.Series, name string, c color.Color, dash []vg.Length, width float64) error {
	if s == nil || len(s.Value) == 0 {
		return nil
	}
	l, err := plotter.NewLine(StepXY(s))
	if err != nil {
		return err
	}
	l.Color = c
	l.Dashes = dash
	l.Width = vg.Points(width)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// outlierRatio is how far above the median peak a run's peak must be to
// get an axis of its own: on a shared axis it would squash the others.
const outlierRatio = 1.3

// farAboveMedian reports which of vals are more than ratio times their
// median (the lower one of an even count; none when it is not positive),
// and returns the largest of the other values (0 when none) and the
// largest of all (0 for no values).
func farAboveMedian(vals []float64, ratio float64) (far []bool, rest, largest float64) {
	sorted := append([]float64(nil), vals...)
	sort.Float64s(sorted)
	median := 0.0
	if len(sorted) > 0 {
		median = sorted[(len(sorted)-1)/2]
		largest = sorted[len(sorted)-1]
	}
	far = make([]bool, len(vals))
	for i, v := range vals {
		far[i] = median > 0 && v > ratio*median
		if !far[i] {
			rest = math.Max(rest, v)
		}
	}
	return far, rest, largest
}

// TimelineScales returns the top of each timeline panel's axis, in GiB,
// and whether the panel has its own scale. The runs share one scale, but
// for those whose peak is far above the median peak: each of those has
// its own, so that a 2.51 against 2.30 GiB difference stays visible.
func TimelineScales(runs []*analysis.Run) (ymax []float64, own []bool) {
	peaks := make([]float64, len(runs))
	for i, r := range runs {
		for _, name := range []string{"reserved", "active", "requested"} {
			if s := r.SeriesNamed(name); s != nil {
				peaks[i] = math.Max(peaks[i], s.Max())
			}
		}
	}
	own, shared, _ := farAboveMedian(peaks, outlierRatio)
	ymax = make([]float64, len(runs))
	for i, p := range peaks {
		top := shared
		if own[i] {
			top = p
		}
		if top <= 0 {
			top = 1
		}
		ymax[i] = top * 1.05
	}
	return ymax, own
}

// Timeline draws reserved, active and requested over time, one panel per
// policy, on one scale but for runs far above the others (TimelineScales).
func Timeline(c *analysis.Comparison) (*Figure, error) {
	runs := timelineRuns(c)
	if len(runs) == 0 {
		return nil, nil
	}
	var rows [][]*plot.Plot
	ymax, own := TimelineScales(runs)
	for i, r := range runs {
		title := fmt.Sprintf("%s: at_peak_pct %.1f%%, peak reserved %s", r.Label,
			r.Result.Fragmentation.AtPeakPct, analysis.FmtBytes(r.Result.PeakReservedBytes))
		if own[i] {
			title += " (own scale: its peak would squash the others)"
		}
		if i == 0 {
			title = TraceLine(c) + "\n" + title
		}
		p := newPlot(title, "time (s)", "memory (GiB)")
		p.Legend.Top = false
		col := plotutil.Color(i)
		if err := addLine(p, r.SeriesNamed("reserved"), "reserved", col, nil, 1.5); err != nil {
			return nil, err
		}
		if err := addLine(p, r.SeriesNamed("active"), "active", color.RGBA{A: 255, R: 60, G: 60, B: 60}, []vg.Length{vg.Points(4), vg.Points(2)}, 1); err != nil {
			return nil, err
		}
		if err := addLine(p, r.SeriesNamed("requested"), "requested", color.RGBA{A: 255, G: 150, B: 60}, []vg.Length{vg.Points(1), vg.Points(2)}, 1); err != nil {
			return nil, err
		}
		p.Y.Min, p.Y.Max = 0, ymax[i]
		if i < len(runs)-1 {
			p.X.Label.Text = ""
		}
		rows = append(rows, []*plot.Plot{p})
	}
	h := min(4000, 60+260*len(rows))
	return &Figure{Name: "timeline", Plots: rows, WidthPx: 1200, HeightPx: h}, nil
}

// Views draws the at-the-moment fragmentation 100·(1 − active/reserved)
// over time, one line per policy.
func Views(c *analysis.Comparison) (*Figure, error) {
	runs := timelineRuns(c)
	if len(runs) == 0 {
		return nil, nil
	}
	p := newPlot(TraceLine(c)+"\nFragmentation at each moment: 100·(1 − active/reserved)", "time (s)", "fragmentation (%)")
	top := 0.0
	for i, r := range runs {
		if s := r.SeriesNamed("fragmentation"); s != nil {
			top = math.Max(top, s.Max())
		}
		name := fmt.Sprintf("%s (at peak %.1f%%, time-weighted %.1f%%)", r.Label,
			r.Result.Fragmentation.AtPeakPct, r.Result.Fragmentation.TimeWeightedPct)
		if err := addLine(p, r.SeriesNamed("fragmentation"), name, plotutil.Color(i), plotutil.Dashes(i), 1); err != nil {
			return nil, err
		}
	}
	// The legend sits above the lines: leave it room.
	p.Y.Min, p.Y.Max = 0, math.Min(100, math.Max(top, 1)*1.35)
	return &Figure{Name: "views", Plots: [][]*plot.Plot{{p}}, WidthPx: 1200, HeightPx: 600}, nil
}

// BarData is the data behind policies.png: one bar per run.
type BarData struct {
	Labels         []string
	PeakReservedGB []float64 // GiB
	AtPeakPct      []float64
}

// PoliciesData returns the bars of the policy comparison.
func PoliciesData(c *analysis.Comparison) BarData {
	var d BarData
	for _, r := range c.Runs {
		if !r.OK() {
			continue
		}
		d.Labels = append(d.Labels, r.Label)
		d.PeakReservedGB = append(d.PeakReservedGB, float64(r.Result.PeakReservedBytes)/(1<<30))
		d.AtPeakPct = append(d.AtPeakPct, r.Result.Fragmentation.AtPeakPct)
	}
	return d
}

// clipRatio is how far above the median a bar must reach to be cut.
const clipRatio = 2

// ClipBars returns the lengths the bars are drawn at and the axis top:
// values far above the median (more than clipRatio times) would squash
// the others, so the axis ends a little above the largest of the rest and
// those bars are cut there (their labels keep the true value).
func ClipBars(vals []float64) (drawn []float64, top float64, clipped []bool) {
	clipped, rest, largest := farAboveMedian(vals, clipRatio)
	if rest <= 0 {
		rest = math.Max(largest, 1)
	}
	top = rest * 1.25
	drawn = make([]float64, len(vals))
	for i, v := range vals {
		drawn[i] = v
		if clipped[i] {
			drawn[i] = rest * 1.12
		}
	}
	return drawn, top, clipped
}

// Policies draws peak reserved and at_peak_pct per policy and setting, as
// horizontal bars (the settings' names are long), outliers cut (ClipBars).
func Policies(c *analysis.Comparison) (*Figure, error) {
	d := PoliciesData(c)
	if len(d.Labels) == 0 {
		return nil, nil
	}
	// Bars from the top down in the runs' order.
	n := len(d.Labels)
	rev := func(v []float64) []float64 {
		out := make([]float64, n)
		for i := range v {
			out[n-1-i] = v[i]
		}
		return out
	}
	labels := make([]string, n)
	for i, l := range d.Labels {
		labels[n-1-i] = l
	}
	mk := func(title, x string, vals []float64, col color.Color) (*plot.Plot, error) {
		p := newPlot(title, x, "")
		drawn, top, clipped := ClipBars(rev(vals))
		w := vg.Points(float64(min(22, 360/n)))
		b, err := plotter.NewBarChart(plotter.Values(drawn), w)
		if err != nil {
			return nil, err
		}
		b.Horizontal = true
		b.Color = col
		b.LineStyle.Width = 0
		p.Add(b)
		p.NominalY(labels...)
		p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
		p.X.Min, p.X.Max = 0, top
		p.Legend.Top = false
		xy := make(plotter.XYs, n)
		text := make([]string, n)
		for i, v := range rev(vals) {
			xy[i].X, xy[i].Y = drawn[i], float64(i)
			text[i] = barLabel(v, x)
			if clipped[i] {
				text[i] += " (cut)"
			}
		}
		if l, err := plotter.NewLabels(plotter.XYLabels{XYs: xy, Labels: text}); err == nil {
			l.Offset = vg.Point{X: vg.Points(3), Y: -vg.Points(4)}
			p.Add(l)
		}
		return p, nil
	}
	a, err := mk(TraceLine(c)+"\nPeak reserved", "peak reserved (GiB)", d.PeakReservedGB, color.RGBA{R: 90, G: 140, B: 200, A: 255})
	if err != nil {
		return nil, err
	}
	b, err := mk(" \nFragmentation at peak reserved", "at_peak_pct (%)", d.AtPeakPct, color.RGBA{R: 200, G: 60, B: 40, A: 255})
	if err != nil {
		return nil, err
	}
	return &Figure{Name: "policies", Plots: [][]*plot.Plot{{a, b}}, WidthPx: 1400, HeightPx: max(650, 140+24*n)}, nil
}

// barLabel writes a bar's value: "8.5%" or "2.52".
func barLabel(v float64, unit string) string {
	if unit == "at_peak_pct (%)" {
		return fmt.Sprintf("%.1f%%", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// padBars leaves half a bar of room at both ends and headroom above the
// tallest bar for its label and the legend.
func padBars(p *plot.Plot, n int, top float64) {
	p.X.Min, p.X.Max = -0.6, float64(n)-0.4
	p.Y.Min = 0
	if top <= 0 {
		top = 1
	}
	p.Y.Max = top * 1.15
}

// sumMax returns the largest a[i]+b[i] (b may be nil).
func sumMax(a, b []float64) float64 {
	m := 0.0
	for i, v := range a {
		if b != nil {
			v += b[i]
		}
		m = math.Max(m, v)
	}
	return m
}
