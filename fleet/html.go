package fleet

import (
	_ "embed"
	"fmt"
	"hash/fnv"
	"html/template"
	"io"
	"math"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/analysis/report"
)

// The page's template and the styles it adds to the report's.
var (
	//go:embed assets/fleet.html
	pageHTML string
	//go:embed assets/fleet.css
	pageCSS  string
	pageTmpl = template.Must(template.New("fleet.html").Parse(pageHTML))
)

// WriteHTML writes fleet.html: one self-contained page in the style of
// `fragsim report` (no script, no file, network or server needed to open
// it) that shows the settings' fleet-wide effect, the jobs and their rank
// imbalance, the stacks that strand the most, the OOMs by class and every
// trace, each with the command that writes its own report and a link to
// that report when the fleet wrote one (Row.Report). Every string from
// an input goes through html/template, which escapes it for its context.
func WriteHTML(w io.Writer, f *Fleet, rows []Row) error {
	return pageTmpl.Execute(w, newPage(f, rows))
}

// page is what the template shows, every figure already in words.
type page struct {
	CSS      template.CSS
	Goal     string
	Meta     string
	Rec      *choiceView
	Keep     string // the recommendation when none saves without a regression
	WithRegs *choiceView
	Failures []failureView
	Chart    chartView
	Cands    []candView
	Jobs     []jobView
	Stacks   []stackView
	OOMs     []oomView
	Traces   []traceView
}

type choiceView struct {
	Apply, Label, Saving string
	Traces, Improved     int
	Worse                int
	Regs                 []regView
	MoreRegs             int
}

type regView struct {
	Input, Anchor, Saving, OOMs string
}

type failureView struct {
	Input, Anchor, Error string
}

type candView struct {
	Label, Apply                             string
	Traces, Improved, Unchanged, Worse, Fail int
	Own                                      int
	Total, Median                            string
	Negative                                 bool
	Worst                                    *regView
	Pick                                     string // "fleet" or "with regressions"
}

type jobView struct {
	Job, Ranks              string
	Traces                  int
	Min, Median, Max        string
	Imbalance               string
	Hot                     bool
	Outlier, OutlierInput   string
	MedianRank, MedianInput string
	Diffs                   []diffView
}

type diffView struct {
	Stack, Diff, Outlier, Median string
}

type stackView struct {
	Stack, Bytes string
	Traces       int64
	Pct          float64 // of the largest, for its bar
}

type oomView struct {
	Class string
	Count int64
}

type traceView struct {
	Anchor, Input, Href, Job, Rank, Format string
	Events, Peak, AtPeak                   string
	Status                                 string // "ok", "cut short" or "failed"
	Line, Error, Command                   string
}

// maxListedRegressions bounds the regressions named in the header; the
// candidates table and settings.csv hold the rest.
const maxListedRegressions = 10

func newPage(f *Fleet, rows []Row) *page {
	p := &page{CSS: template.CSS(report.Stylesheet() + pageCSS), Goal: f.Goal}
	anchors := map[string]string{}
	for i, r := range rows {
		a := "trace-" + strconv.Itoa(i+1)
		if _, ok := anchors[r.Input]; !ok {
			anchors[r.Input] = a
		}
		p.Traces = append(p.Traces, traceOf(r, a))
	}
	p.Meta = fmt.Sprintf("goal %s · %s: %d analysed, %d failed · %s", f.Goal,
		plural(int(f.Inputs), "input"), f.Analysed, f.Failed, plural(len(f.Jobs), "job"))
	p.Rec = choiceOf(f.Recommendation, anchors)
	switch {
	case p.Rec != nil:
	case f.Analysed > 0:
		p.Keep = "keep the current settings (no candidate saves without making a trace worse)"
	default:
		p.Keep = "none: no input could be analysed"
	}
	p.WithRegs = choiceOf(f.WithRegressions, anchors)
	for _, x := range f.Failures {
		p.Failures = append(p.Failures, failureView{Input: x.Input, Anchor: anchors[x.Input], Error: x.Error})
	}
	for _, c := range f.Candidates {
		v := candView{Label: c.Label, Apply: applyOfCandidate(c), Traces: c.Traces, Improved: c.Improved,
			Unchanged: c.Unchanged, Worse: c.Worse, Fail: c.FailedRuns, Own: c.Recommended,
			Total: signedBytes(c.TotalSavingBytes), Median: signedBytes(c.MedianSavingBytes), Negative: c.TotalSavingBytes < 0}
		if w := c.WorstRegression; w != nil {
			r := regOf(*w, anchors)
			v.Worst = &r
		}
		v.Pick = pickOf(f, c.Label)
		p.Cands = append(p.Cands, v)
	}
	p.Chart = chartOf(f)
	for _, j := range f.Jobs {
		p.Jobs = append(p.Jobs, jobOf(j))
	}
	var top uint64
	for _, s := range f.Stacks {
		top = max(top, s.StrandedBytes)
	}
	for _, s := range f.Stacks {
		v := stackView{Stack: s.Stack, Bytes: analysis.FmtBytes(s.StrandedBytes), Traces: s.Traces}
		if v.Stack == "" {
			v.Stack = "(no stack)"
		}
		if top > 0 {
			v.Pct = math.Round(1000*float64(s.StrandedBytes)/float64(top)) / 10
		}
		p.Stacks = append(p.Stacks, v)
	}
	classes := make([]string, 0, len(f.OOMClasses))
	for k := range f.OOMClasses {
		classes = append(classes, k)
	}
	sort.Strings(classes)
	for _, k := range classes {
		p.OOMs = append(p.OOMs, oomView{Class: k, Count: f.OOMClasses[k]})
	}
	return p
}

func pickOf(f *Fleet, label string) string {
	switch {
	case f.Recommendation != nil && f.Recommendation.Label == label:
		return "fleet"
	case f.WithRegressions != nil && f.WithRegressions.Label == label:
		return "with regressions"
	}
	return ""
}

func applyOfCandidate(c CandidateSummary) string {
	if c.Env != "" {
		return c.Env
	}
	return c.Setting
}

func choiceOf(c *Choice, anchors map[string]string) *choiceView {
	if c == nil {
		return nil
	}
	v := &choiceView{Apply: applyOf(c), Label: c.Label, Saving: savingPhrase(c.TotalSavingBytes),
		Traces: c.Traces, Improved: c.Improved, Worse: len(c.Regressions)}
	for i, r := range c.Regressions {
		if i == maxListedRegressions {
			v.MoreRegs = len(c.Regressions) - i
			break
		}
		v.Regs = append(v.Regs, regOf(r, anchors))
	}
	return v
}

// savingPhrase says a saving of peak reserved in words.
func savingPhrase(n int64) string {
	if n < 0 {
		return analysis.FmtBytes(uint64(-n)) + " more peak reserved"
	}
	return analysis.FmtBytes(uint64(n)) + " less peak reserved"
}

func regOf(r Regression, anchors map[string]string) regView {
	v := regView{Input: r.Input, Anchor: anchors[r.Input], Saving: savingPhrase(r.SavingBytes)}
	if r.OOMs != r.BaseOOMs {
		v.OOMs = fmt.Sprintf("OOMs %d → %d", r.BaseOOMs, r.OOMs)
	}
	return v
}

func jobOf(j JobSummary) jobView {
	v := jobView{Job: j.Job, Ranks: rankRanges(j.Ranks), Traces: j.Traces,
		Min: analysis.FmtBytes(j.PeakReservedMinBytes), Median: analysis.FmtBytes(j.PeakReservedMedianBytes),
		Max: analysis.FmtBytes(j.PeakReservedMaxBytes), Imbalance: fmt.Sprintf("%.2fx", j.Imbalance),
		Hot: j.Traces > 1 && j.Imbalance >= 1.2, Outlier: rankName(j.Outlier), OutlierInput: j.Outlier.Input,
		MedianRank: rankName(j.Median), MedianInput: j.Median.Input}
	if j.Traces < 2 {
		v.Outlier, v.MedianRank = "", ""
	}
	for _, d := range j.StackDiffs {
		s := d.Stack
		if s == "" {
			s = "(no stack)"
		}
		v.Diffs = append(v.Diffs, diffView{Stack: s, Diff: signedBytes(d.DiffBytes),
			Outlier: analysis.FmtBytes(d.OutlierBytes), Median: analysis.FmtBytes(d.MedianBytes)})
	}
	return v
}

// rankName names a trace of a job by its rank, else by its input.
func rankName(r RankRef) string {
	if r.Rank != nil {
		return "rank " + strconv.Itoa(*r.Rank)
	}
	return r.Input
}

// rankRanges writes sorted ranks as runs: 0–3, 5, 7–8.
func rankRanges(ranks []int) string {
	if len(ranks) == 0 {
		return "—"
	}
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] <= ranks[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ranks[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d–%d", ranks[i], ranks[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

func traceOf(r Row, anchor string) traceView {
	v := traceView{Anchor: anchor, Input: r.Input, Job: r.Job, Rank: "—", Format: r.Format,
		Events: groupDigits(r.Events), Error: r.Error, Command: reportCommand(r)}
	if r.Rank != nil {
		v.Rank = strconv.Itoa(*r.Rank)
	}
	if r.Report != "" {
		v.Href = reportHref(r.Report)
	}
	switch {
	case !r.OK():
		v.Status = "failed"
		v.Events, v.Peak, v.AtPeak = "—", "—", "—"
		if v.Format == "" {
			v.Format = "—"
		}
		return v
	case r.Error != "":
		v.Status = "cut short"
	default:
		v.Status = "ok"
	}
	v.Peak = analysis.FmtBytes(r.BaselinePeakReservedBytes)
	v.AtPeak = fmt.Sprintf("%.1f%%", r.BaselineAtPeakPct)
	v.Line = r.Recommendation.Line
	return v
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// reportCommand is the command that writes the report of r's input: at
// r.Report when the fleet wrote one (a path relative to the fleet's
// directory), else beside where it runs, named after the input. A trace
// is reported as it is; a snapshot or an RMM log is imported first.
func reportCommand(r Row) string {
	out := r.Report
	stem := reportStem(r.Input)
	if out == "" {
		out = stem + ".html"
	}
	isTrace := r.Format == "trace" || r.Format == "" && strings.HasSuffix(r.Input, ".fst")
	if isTrace {
		return "fragsim report " + shellQuote(r.Input) + " -o " + shellQuote(out)
	}
	fst := strings.TrimSuffix(out, ".html") + ".fst"
	return "fragsim import " + shellQuote(r.Input) + " -o " + shellQuote(fst) +
		" && fragsim report " + shellQuote(fst) + " -o " + shellQuote(out)
}

// inputExts are the extensions a report's name drops from its input's.
var inputExts = []string{".gz", ".zst", ".zstd", ".pickle", ".pkl", ".fst", ".csv", ".log", ".txt", ".jsonl", ".json"}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// reportStem names the report of input: its directory's name and its own,
// less its extensions, joined by "_", every other character than a
// letter, a digit, '.', '_' or '-' made '_'; a long one is cut and ends
// with a hash of the whole input.
func reportStem(input string) string {
	p := filepath.ToSlash(input)
	if i := strings.Index(p, "://"); i >= 0 {
		p = p[i+3:]
	}
	p = strings.TrimRight(p, "/")
	base := path.Base(p)
	for again := true; again; {
		again = false
		for _, e := range inputExts {
			if len(base) > len(e) && strings.EqualFold(base[len(base)-len(e):], e) {
				base, again = base[:len(base)-len(e)], true
			}
		}
	}
	name := base
	if dir := path.Base(path.Dir(p)); dir != "." && dir != "/" && dir != ".." && dir != "" {
		name = dir + "_" + base
	}
	name = strings.TrimLeft(unsafeName.ReplaceAllString(name, "_"), "._-")
	if name == "" {
		name = "trace"
	}
	if len(name) > 80 {
		h := fnv.New32a()
		h.Write([]byte(input))
		name = fmt.Sprintf("%s-%08x", name[:71], h.Sum32())
	}
	return name
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9@%+=:,./_-]+$`)

// shellQuote quotes s for a POSIX shell; a path that begins with '-' is
// written ./-... so that no command takes it for a flag.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.HasPrefix(s, "-") {
		s = "./" + s
	}
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// reportHref is the link to a report at p, relative to the page: each
// segment escaped, so that '?', '#' or '%' in a name stay in the path, and
// a relative one begun with ./ so that no segment reads as a URL scheme.
func reportHref(p string) string {
	segs := strings.Split(filepath.ToSlash(p), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	h := strings.Join(segs, "/")
	if !strings.HasPrefix(h, "/") && !strings.HasPrefix(h, "./") && !strings.HasPrefix(h, "../") {
		h = "./" + h
	}
	return h
}

// The chart of the candidates' fleet-wide effect, drawn here as SVG: one
// row a candidate, its total saving a bar on an axis in GiB, and beside
// it how many traces it makes better, leaves unchanged and makes worse.
const (
	chartW      = 1270
	chartLabelX = 350 // the names end here
	chartBarX0  = 362 // the bars' axis spans chartBarX0..chartBarX1
	chartBarX1  = 690
	chartVerdX  = 870 // the verdicts' bar, chartVerdW wide, then its words
	chartVerdW  = 120
	chartTop    = 34
	chartRowH   = 26
	chartBarH   = 16
	chartBottom = 46
	chartLabelN = 40 // runes of a name shown; the rest in its tooltip
)

type chartView struct {
	W, H          int
	AxisY, TitleY float64
	ZeroX         float64
	BarX0, BarX1  float64
	LabelX        float64
	VerdX         float64
	Ticks         []tickView
	Bars          []barView
}

type tickView struct {
	X     float64
	Label string
}

type barView struct {
	Y, BarY, TextY float64
	X, W           float64
	Class          string // "ok": saves, no trace worse; "reg": saves with regressions; "neg": costs
	Name, Full     string
	Pick           string
	Value          string
	ValueX         float64
	Segs           []segView
	Verdicts       string
	VerdictsX      float64
}

type segView struct {
	X, W  float64
	Class string
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func chartOf(f *Fleet) chartView {
	n := len(f.Candidates)
	c := chartView{W: chartW, H: chartTop + n*chartRowH + chartBottom, BarX0: chartBarX0, BarX1: chartBarX1,
		LabelX: chartLabelX, VerdX: chartVerdX}
	c.AxisY = float64(chartTop + n*chartRowH + 4)
	c.TitleY = c.AxisY + 34
	lo, hi := 0.0, 0.0
	for _, x := range f.Candidates {
		g := float64(x.TotalSavingBytes) / (1 << 30)
		lo, hi = min(lo, g), max(hi, g)
	}
	step := niceStep((hi - lo) / 5)
	lo, hi = math.Floor(lo/step+1e-9)*step, math.Ceil(hi/step-1e-9)*step
	if hi <= lo {
		hi = lo + step
	}
	scale := func(g float64) float64 { return chartBarX0 + (g-lo)/(hi-lo)*(chartBarX1-chartBarX0) }
	c.ZeroX = round1(scale(0))
	digits := stepDigits(step)
	for i := 0; ; i++ {
		v := lo + float64(i)*step
		if v > hi+step/1e6 {
			break
		}
		if math.Abs(v) < step/1e6 {
			v = 0
		}
		label := strconv.FormatFloat(v, 'f', digits, 64)
		if strings.Contains(label, ".") {
			label = strings.TrimRight(strings.TrimRight(label, "0"), ".")
		}
		c.Ticks = append(c.Ticks, tickView{X: round1(scale(v)), Label: label + " GiB"})
	}
	for i, x := range f.Candidates {
		y := float64(chartTop + i*chartRowH)
		g := float64(x.TotalSavingBytes) / (1 << 30)
		x0, x1 := scale(min(0, g)), scale(max(0, g))
		b := barView{Y: y, BarY: y + (chartRowH-chartBarH)/2, TextY: y + chartRowH/2 + 4.5,
			X: round1(x0), W: round1(max(x1-x0, 1)), Name: x.Label, Full: x.Label, Pick: pickOf(f, x.Label),
			Value: signedBytes(x.TotalSavingBytes), ValueX: round1(max(x1, c.ZeroX) + 6)}
		if utf8.RuneCountInString(b.Name) > chartLabelN {
			b.Name = string([]rune(b.Name)[:chartLabelN-1]) + "…"
		}
		switch {
		case x.TotalSavingBytes <= 0:
			b.Class = "neg"
		case x.Worse > 0 || x.FailedRuns > 0:
			b.Class = "reg"
		default:
			b.Class = "ok"
		}
		switch b.Pick {
		case "fleet":
			b.Value += " · recommended"
		case "with regressions":
			b.Value += " · with regressions"
		}
		if x.Traces > 0 {
			at := float64(chartVerdX)
			for _, s := range []struct {
				n     int
				class string
			}{{x.Improved, "better"}, {x.Unchanged, "same"}, {x.Worse, "worse"}, {x.FailedRuns, "failed"}} {
				if s.n == 0 {
					continue
				}
				w := float64(s.n) / float64(x.Traces) * chartVerdW
				b.Segs = append(b.Segs, segView{X: round1(at), W: round1(w), Class: s.class})
				at += w
			}
		}
		b.Verdicts = fmt.Sprintf("%d better · %d unchanged · %d worse", x.Improved, x.Unchanged, x.Worse)
		if x.FailedRuns > 0 {
			b.Verdicts += fmt.Sprintf(" · %d failed", x.FailedRuns)
		}
		b.VerdictsX = chartVerdX + chartVerdW + 10
		c.Bars = append(c.Bars, b)
	}
	return c
}

// niceStep rounds a tick step in GiB up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// stepDigits is how many decimals write every multiple of step.
func stepDigits(step float64) int {
	for d := 0; d < 6; d++ {
		v := step * math.Pow(10, float64(d))
		if math.Abs(v-math.Round(v)) < 1e-6 {
			return d
		}
	}
	return 6
}
