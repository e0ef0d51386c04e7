package fleet

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/analysis/report"
	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pytorch"
	"github.com/fragsim/fragsim/trace/rmm"
)

// Row is one input's line of traces.jsonl. Its keys are stable: add,
// never rename.
type Row struct {
	// Input is the path as given, or as found under a directory or glob.
	Input string `json:"input"`
	Job   string `json:"job"`
	Rank  *int   `json:"rank"`
	// Recommendation is the very object `compare --json` prints as its
	// "recommendation" for this input under the same flags.
	Recommendation *analysis.Recommendation `json:"recommendation,omitempty"`
	// Error is why the input could not be analysed, or was cut short (the
	// figures then cover the events before the cut); absent when it was
	// analysed whole.
	Error string `json:"error,omitempty"`

	// Format is how it was read: trace, pytorch or rmm.
	Format string `json:"format,omitempty"`
	// Tags are the trace header's tags (labels given at recording).
	Tags   map[string]string `json:"tags,omitempty"`
	Events int64             `json:"events"`
	// The baseline (PyTorch's caching allocator under the trace's own
	// settings): its peak reserved and its fragmentation at that peak.
	BaselinePeakReservedBytes uint64  `json:"baseline_peak_reserved_bytes"`
	BaselineAtPeakPct         float64 `json:"baseline_at_peak_pct"`
	BaselineOOMs              int64   `json:"baseline_ooms"`
	// Baseline is the baseline's label among the candidates.
	Baseline string `json:"baseline,omitempty"`
	// Candidates are every setting and policy weighed, best first for the
	// goal, as compare ranks them.
	Candidates []Candidate `json:"candidates,omitempty"`
	// Stacks are the call stacks whose live blocks strand the most free
	// bytes at the baseline's peak reserved (traces recorded with stacks).
	Stacks []analysis.Share `json:"stacks,omitempty"`
	// OOM explains the failure a snapshot taken at an OOM holds (an oom
	// event in its history): its class and figures.
	OOM   *analysis.Explanation `json:"oom,omitempty"`
	WallS float64               `json:"wall_s"`
	// Report is the path, relative to the fleet's directory, of the HTML
	// report written for this input (`fragsim report`), if any: fleet.html
	// links the input to it.
	Report string `json:"report,omitempty"`
}

// Candidate is one setting or policy's outcome on a trace.
type Candidate struct {
	Label             string  `json:"label"`
	Setting           string  `json:"setting"`
	Env               string  `json:"env,omitempty"`
	Exact             bool    `json:"exact"`
	PeakReservedBytes uint64  `json:"peak_reserved_bytes"`
	AtPeakPct         float64 `json:"at_peak_pct"`
	OOMs              int64   `json:"ooms"`
	// SavingBytes is the baseline's peak reserved less this one's
	// (negative: it needs more).
	SavingBytes int64  `json:"saving_bytes"`
	Limit       bool   `json:"physical_limit,omitempty"`
	Excluded    string `json:"excluded,omitempty"`
	Error       string `json:"error,omitempty"`
	Recommended bool   `json:"recommended,omitempty"`
}

// OK reports whether the row was analysed, whole or cut short.
func (r *Row) OK() bool { return r.Recommendation != nil }

// Analyze reads one local input and analyses it as `compare` does: a
// trace as it is; a PyTorch snapshot (plain, gzip'd or zstd'd) or an RMM
// log imported first into a scratch trace in scratchDir ("": the system's
// temporary directory) under import's budgets, removed before it returns.
// It never fails: an input that cannot be read or analysed is a Row with
// its Error (a dead letter), so that a fleet completes the rest.
func Analyze(input string, o Options, scratchDir string) Row {
	return AnalyzeFile(input, input, o, scratchDir)
}

// AnalyzeFile is Analyze of the local file local, named input in the row
// and its labels (a remote input fetched to a local copy).
func AnalyzeFile(input, local string, o Options, scratchDir string) Row {
	start := time.Now()
	row := Row{Input: input}
	p, err := o.parse()
	if err == nil {
		err = analyzeInto(&row, input, local, p, scratchDir)
	}
	if err != nil && row.Error == "" {
		row.Error = trace.Printable(err.Error())
	}
	if row.Job == "" {
		l := Label(input, row.Tags, p.labelOrNil())
		row.Job, row.Rank = l.Job, l.Rank
	}
	row.WallS = time.Since(start).Seconds()
	return row
}

func (p *parsed) labelOrNil() *regexp.Regexp {
	if p == nil {
		return nil
	}
	return p.label
}

func analyzeInto(row *Row, input, local string, p *parsed, scratchDir string) error {
	open, format, cleanup, err := openInput(local, p, scratchDir)
	if err != nil {
		return err
	}
	defer cleanup()
	row.Format = format
	sum, err := summarize(open)
	if err != nil && sum == nil {
		return err
	}
	h := sum.Header
	row.Tags, row.Events = h.Tags, sum.Events
	l := Label(input, h.Tags, p.label)
	row.Job, row.Rank = l.Job, l.Rank

	opts := p.compare
	opts.Name = input
	if p.reports != "" {
		opts.MaxPoints = 2 * report.DefaultBuckets // as compare --html
	}
	cmp, err := analysis.Compare(open, opts)
	if err != nil {
		return err
	}
	if p.reports != "" {
		if err := writeReport(row, open, cmp, opts, p.reports, local); err != nil {
			return err
		}
	}
	if cmp.Decision == nil || cmp.Decision.Recommendation == nil {
		return errors.New("no run finished: nothing to recommend")
	}
	row.Recommendation = cmp.Decision.Recommendation
	row.BaselinePeakReservedBytes = row.Recommendation.BaselinePeakReservedBytes
	row.BaselineAtPeakPct = row.Recommendation.BaselineAtPeakPct
	row.Baseline = cmp.Decision.Baseline
	for _, oc := range cmp.Decision.Results {
		c := Candidate{Label: oc.Label, Setting: oc.Setting, Env: oc.Env, Exact: oc.Exact,
			PeakReservedBytes: oc.PeakReservedBytes, AtPeakPct: oc.AtPeakPct, OOMs: oc.OOMs,
			Limit: oc.Limit, Excluded: oc.Excluded, Error: oc.Error, Recommended: oc.Recommended}
		if oc.Error == "" {
			c.SavingBytes = int64(row.BaselinePeakReservedBytes) - int64(oc.PeakReservedBytes)
		}
		if oc.Label == cmp.Decision.Baseline {
			row.BaselineOOMs = oc.OOMs
		}
		row.Candidates = append(row.Candidates, c)
	}
	if err := strandingStacks(row, open, p); err != nil {
		return err
	}
	if sum.ByKind[trace.KindOOM.String()] > 0 || analysis.StateOnly(h, sum.Events) {
		x, err := analysis.Explain(open, analysis.ExplainOptions{Name: input, NoFit: true, Parallel: p.compare.Parallel})
		switch {
		case errors.Is(err, analysis.ErrNoRequest): // a state with no failed request
		case err != nil:
			return fmt.Errorf("explaining its OOM: %w", err)
		default:
			row.OOM = x
		}
	}
	if cmp.Truncated != "" {
		row.Error = trace.Printable(cmp.Truncated) + " (the figures cover the events before the cut)"
	}
	return nil
}

// writeReport writes the trace's HTML report, `fragsim report`'s, from
// the comparison made for its row.
func writeReport(row *Row, open analysis.Opener, cmp *analysis.Comparison, opts analysis.CompareOptions, dir, local string) error {
	rep, err := report.FromComparison(open, cmp, report.Options{Compare: opts})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	name := ReportName(row.Input)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := outfile.Write(filepath.Join(dir, name), []string{local}, rep.WriteHTML); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	row.Report = ReportsSub + "/" + name
	return nil
}

// ReportName is the file name of an input's report: its folder and name,
// and a hash of its whole path, so that two inputs never share one.
func ReportName(input string) string {
	h := fnv.New32a()
	h.Write([]byte(input))
	return fmt.Sprintf("%s-%08x.html", reportStem(input), h.Sum32())
}

// strandingStacks keeps the stacks whose live blocks strand the most free
// bytes at the baseline's peak reserved, as `analyze` attributes them.
func strandingStacks(row *Row, open analysis.Opener, p *parsed) error {
	a, err := analysis.Analyze(open, analysis.AnalyzeOptions{Conf: p.compare.Conf, Config: p.compare.Config,
		Top: 1, NoAdvice: true, Parallel: p.compare.Parallel, Name: row.Input})
	if err != nil {
		return fmt.Errorf("attributing its stranded bytes: %w", err)
	}
	if !a.HasStacks {
		return nil
	}
	for _, b := range a.Breakdowns {
		if b.What != "peak reserved" {
			continue
		}
		s := append([]analysis.Share(nil), b.ByStack...)
		sort.SliceStable(s, func(i, j int) bool { return s[i].StrandedBytes > s[j].StrandedBytes })
		if len(s) > p.stacks {
			s = s[:p.stacks]
		}
		row.Stacks = s
	}
	return nil
}

// summarize decodes the trace once: its header, events and kinds.
func summarize(open analysis.Opener) (*trace.Summary, error) {
	r, c, err := open()
	if err != nil {
		return nil, err
	}
	if c != nil {
		defer c.Close()
	}
	return trace.Summarize(r)
}

// openInput opens a trace as it is and imports anything else into a
// scratch trace; cleanup removes the scratch.
func openInput(input string, p *parsed, scratchDir string) (analysis.Opener, string, func(), error) {
	if trace.IsTraceFile(input) {
		return replay.OpenFile(input), "trace", func() {}, nil
	}
	if _, err := os.Stat(input); err != nil {
		return nil, "", nil, err
	}
	scratch, err := outfile.NewScratch(scratchDir, ".fragsim-fleet-*.fst")
	if err != nil {
		return nil, "", nil, err
	}
	format := pytorch.DetectFormat(input)
	switch format {
	case pytorch.FormatRMM:
		_, err = rmm.ImportFile(input, scratch.Path())
	default:
		meta := &trace.Header{GPUTotalBytes: p.gpuTotal}
		_, err = pytorch.ImportFile(input, scratch.Path(), pytorch.Options{Meta: meta, MaxSizeBytes: p.gpuTotal, MemoryFraction: p.fraction})
	}
	if err != nil {
		scratch.Remove()
		return nil, "", nil, fmt.Errorf("import: %w", err)
	}
	return replay.OpenFile(scratch.Path()), format, scratch.Remove, nil
}
