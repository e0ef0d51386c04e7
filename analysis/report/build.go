// Package report writes a replay comparison as one self-contained HTML
// page (a timeline of every policy, the segment map at any captured
// moment, the free-block histogram, where the stranded bytes come from,
// the policies and settings table and the recommendation), and writes a
// replay in the formats of other viewers: PyTorch's memory_viz snapshot
// pickle and Chrome's trace-event JSON (Perfetto).
package report

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// Options configures Build.
type Options struct {
	// Compare configures the comparison (policies, settings, conf, capacity).
	Compare analysis.CompareOptions
	// Policy is the run whose segment map and stranded bytes are shown
	// ("": the baseline policy); it replays with Compare.Conf.
	Policy string
	// Moments is the number of moments whose segment map is captured,
	// half evenly spaced in events and half in time, besides the worst
	// one and peak reserved; 0: 32.
	Moments int
	// Buckets is the number of time buckets of the timeline; 0: DefaultBuckets.
	Buckets int
}

// Report is what the page shows; it is embedded in the page as JSON.
type Report struct {
	Trace          TraceHeader          `json:"trace"`
	Recommendation Recommendation       `json:"recommendation"`
	Timeline       Timeline             `json:"timeline"`
	Policy         string               `json:"policy"` // the run of the segment map
	Layouts        []Layout             `json:"layouts"`
	Selected       int                  `json:"selected"` // the layout shown first: the worst moment
	Stacks         []string             `json:"stacks"`
	Breakdowns     []analysis.Breakdown `json:"breakdowns"`
	// Pools is the memory of each pool at peak reserved, with the
	// estimated saving of each private pool left out (analyze's "Memory by
	// pool"); nil for a trace without private pools.
	Pools    []analysis.PoolUsage `json:"pools,omitempty"`
	Runs     []RunRow             `json:"runs"`
	Fidelity string               `json:"fidelity"`
	// Silent is the silent-OOM forecast of the segment map's run on the
	// trace's GPU (replay --forecast): the risk and what reduces it, or how
	// close the run came.
	Silent     string   `json:"silent"`
	Verdict    []string `json:"verdict"`
	Truncated  string   `json:"truncated,omitempty"`
	comparison *analysis.Comparison
}

// TraceHeader is the page's header.
type TraceHeader struct {
	Name      string  `json:"name"`
	GPU       string  `json:"gpu"`
	Torch     string  `json:"torch"`
	Date      string  `json:"date"`
	Producer  string  `json:"producer,omitempty"`
	AllocConf string  `json:"alloc_conf,omitempty"`
	Events    int64   `json:"events"`
	DurationS float64 `json:"duration_s"`
}

// RunRow is one row of the policies and settings table.
type RunRow struct {
	Label           string  `json:"label"`
	Policy          string  `json:"policy"`
	Setting         string  `json:"setting,omitempty"`
	Apply           string  `json:"apply"`
	Exact           bool    `json:"exact"`
	ErrorPct        float64 `json:"error_pct,omitempty"` // a model's measured error of peak reserved
	Limit           bool    `json:"limit,omitempty"`
	Recommended     bool    `json:"recommended,omitempty"`
	Excluded        string  `json:"excluded,omitempty"` // why the decision cannot pick it
	Note            string  `json:"note,omitempty"`
	PeakReserved    uint64  `json:"peak_reserved"`
	PeakRequested   uint64  `json:"peak_requested"`
	AtPeakPct       float64 `json:"at_peak_pct"`
	TimeWeightedPct float64 `json:"time_weighted_pct"`
	StrandedAtPeak  uint64  `json:"stranded_at_peak"`
	DeviceCalls     int64   `json:"device_calls"`
	OOMs            int64   `json:"ooms"`
	Error           string  `json:"error,omitempty"`
}

// maxShares bounds each table of where the stranded bytes come from; the
// rest is summed into one "(other)" row.
const maxShares = 12

// Build compares the policies on the trace, explains the fragmentation of
// opts.Policy and captures its segment map.
func Build(open analysis.Opener, opts Options) (*Report, error) {
	co := opts.Compare
	if co.MaxPoints == 0 {
		b := opts.Buckets
		if b <= 0 {
			b = DefaultBuckets
		}
		co.MaxPoints = 2 * b
	}
	if opts.Policy != "" {
		// Checked now, so that a bad policy fails before any replay.
		if _, err := analysis.NewFactory(opts.Policy, co.Conf, nil); err != nil {
			return nil, err
		}
	}
	cmp, err := analysis.Compare(open, co)
	if err != nil {
		return nil, err
	}
	return FromComparison(open, cmp, opts)
}

// FromComparison builds the report of a comparison already made (compare
// --html): it replays the trace twice more, to explain opts.Policy's
// fragmentation and to capture its segment map.
func FromComparison(open analysis.Opener, cmp *analysis.Comparison, opts Options) (*Report, error) {
	policy := opts.Policy
	if policy == "" {
		policy = allocator.BaselineFacts().Name
	}
	an, err := analysis.Analyze(open, analysis.AnalyzeOptions{Policy: policy, Conf: opts.Compare.Conf,
		Config: opts.Compare.Config, NoAdvice: true, Top: 1, Name: cmp.Trace.Name, Parallel: opts.Compare.Parallel})
	if err != nil {
		return nil, err
	}
	rep := &Report{Policy: policy, comparison: cmp, Truncated: cmp.Truncated}
	rep.Trace = TraceHeader{Name: cmp.Trace.Name, GPU: cmp.Trace.GPU, Torch: cmp.Trace.Torch, Date: cmp.Trace.Date,
		Producer: cmp.Trace.Producer, AllocConf: cmp.Trace.AllocConf, Events: cmp.Trace.Events}
	rep.Timeline = newTimeline(cmp.Runs, opts.Buckets)
	for _, r := range cmp.Runs {
		for i := range r.Series {
			if n := len(r.Series[i].TimeS); n > 0 && r.Series[i].TimeS[n-1] > rep.Trace.DurationS {
				rep.Trace.DurationS = r.Series[i].TimeS[n-1]
			}
		}
	}
	rep.Recommendation = recommendation(cmp)
	rep.Verdict = cmp.VerdictLines()
	rep.Runs = runRows(cmp)
	rep.Fidelity = fidelityLine(an.Result, cmp.Trace.Producer)
	if rep.Silent, err = silentLine(open, policy, opts); err != nil {
		return nil, err
	}
	for _, bd := range an.Breakdowns {
		bd.BySize, bd.ByStream = capShares(bd.BySize), capShares(bd.ByStream)
		bd.ByMarker, bd.ByStack = capShares(bd.ByMarker), capShares(bd.ByStack)
		bd.ByPool = capShares(bd.ByPool)
		rep.Breakdowns = append(rep.Breakdowns, bd)
	}
	rep.Pools = an.Pools

	k := opts.Moments
	if k <= 0 {
		k = maxLayoutsDefault
	}
	// Half the moments evenly spaced in events (where the trace is busy),
	// half in time (so that a click on a quiet stretch finds one near).
	targets := layoutTargets(an.Result.Events, (k+1)/2)
	times := timeTargets(rep.Trace.DurationS, k/2)
	what := map[int64]string{}
	if len(an.Moments) > 0 {
		what[an.Moments[0].Index] = "most stranded"
		targets = append(targets, an.Moments[0].Index)
	}
	peak := an.Result.Fragmentation.PeakIndex
	if _, ok := what[peak]; !ok {
		what[peak] = "peak reserved"
	}
	targets = append(targets, peak)
	if err := rep.captureLayouts(open, policy, opts, targets, times, what); err != nil {
		return nil, err
	}
	rep.Selected = 0
	for i, l := range rep.Layouts {
		if l.What == "most stranded" || (l.What == "peak reserved" && rep.Layouts[rep.Selected].What == "") {
			rep.Selected = i
		}
	}
	if rep.Stacks == nil {
		rep.Stacks = []string{}
	}
	rep.clipText()
	return rep, nil
}

// captureLayouts replays the trace under the policy and snapshots its
// segments at the target events.
func (rep *Report) captureLayouts(open analysis.Opener, policy string, opts Options, targets []int64, times []float64, what map[int64]string) error {
	r, c, err := open()
	if err != nil {
		return err
	}
	if c != nil {
		defer c.Close()
	}
	f, err := allocator.NewFactory(policy, opts.Compare.Conf, r.Header())
	if err != nil {
		return err
	}
	lc := newLayoutCapture(r, targets, what)
	lc.times = times
	cfg := opts.Compare.Config
	cfg.Observer, cfg.Progress = lc.observe, nil
	_, err = replay.Run(r, probeFactory(f, nil, func(*probe) {}), cfg)
	if err != nil && !errors.Is(err, trace.ErrTruncated) {
		return fmt.Errorf("%s: %w", policy, err)
	}
	rep.Layouts, rep.Stacks = lc.layouts, lc.stacks
	if rep.Layouts == nil {
		rep.Layouts = []Layout{}
	}
	return nil
}

// Comparison returns the comparison the report shows.
func (rep *Report) Comparison() *analysis.Comparison { return rep.comparison }

// runRows lists the runs for the policies and settings table: in the
// decision's order (best first for the goal) when there is one.
func runRows(cmp *analysis.Comparison) []RunRow {
	runs := cmp.Runs
	outcomes := map[string]*analysis.Outcome{}
	if cmp.Decision != nil && len(cmp.Decision.Results) > 0 {
		runs = nil
		for i := range cmp.Decision.Results {
			o := &cmp.Decision.Results[i]
			if r := cmp.Run(o.Label); r != nil {
				outcomes[o.Label] = o
				runs = append(runs, r)
			}
		}
		for _, r := range cmp.Runs { // any run the decision did not weigh
			if outcomes[r.Label] == nil {
				runs = append(runs, r)
			}
		}
	}
	var rows []RunRow
	for _, r := range runs {
		row := RunRow{Label: r.Label, Policy: r.Policy, Setting: r.Setting, Apply: r.Apply,
			Exact: analysis.Exact(r.Policy), Limit: r.Limit, Error: r.Error}
		if o := outcomes[r.Label]; o != nil {
			row.Exact, row.ErrorPct, row.Recommended, row.Excluded = o.Exact, o.ErrorPct, o.Recommended, o.Excluded
			row.Note = strings.Trim(o.Note+"; "+o.CallsNote, "; ")
			if o.Env != "" {
				row.Apply = o.Env
			}
		}
		if res := r.Result; res != nil {
			row.PeakReserved, row.PeakRequested = res.PeakReservedBytes, res.PeakRequestedBytes
			row.AtPeakPct, row.TimeWeightedPct = res.Fragmentation.AtPeakPct, res.Fragmentation.TimeWeightedPct
			row.StrandedAtPeak = res.Fragmentation.StrandedBytes
			row.DeviceCalls, row.OOMs = res.DeviceAllocs+res.DeviceFrees, res.OOMs
		}
		rows = append(rows, row)
	}
	return rows
}

// fidelityLine says how closely the replay matched the recorded allocator.
func fidelityLine(res *replay.Result, producer string) string {
	fd := res.Fidelity
	if fd.Checked {
		s := fmt.Sprintf("fidelity: %d/%d allocs at recorded address, %d/%d device events matched",
			fd.AllocsAtRecordedAddress, fd.Allocs, fd.DeviceEventsMatched, fd.DeviceEvents)
		if fd.FirstMismatch != "" {
			s += "; first mismatch: " + fd.FirstMismatch
		}
		return s
	}
	if producer != trace.ProducerPyTorch && producer != trace.ProducerLive {
		return "fidelity: not checked (the trace was not recorded from PyTorch's allocator)"
	}
	return "fidelity: not checked (the trace has no device events, or the policy or settings differ from the recorded ones)"
}

// capShares keeps the largest shares and sums the rest into "(other)".
func capShares(s []analysis.Share) []analysis.Share {
	if len(s) <= maxShares {
		return s
	}
	sort.SliceStable(s, func(i, j int) bool { return s[i].StrandedBytes > s[j].StrandedBytes })
	out := append([]analysis.Share(nil), s[:maxShares-1]...)
	other := analysis.Share{Key: "(other)"}
	for _, x := range s[maxShares-1:] {
		other.StrandedBytes += x.StrandedBytes
		other.LiveBlocks += x.LiveBlocks
		other.Pct += x.Pct
	}
	return append(out, other)
}

// silentLine replays the trace under policy with the silent-OOM forecast
// (replay --forecast) and says in one line what it found.
func silentLine(open analysis.Opener, policy string, opts Options) (string, error) {
	r, c, err := open()
	if err != nil {
		return "", err
	}
	if c != nil {
		defer c.Close()
	}
	f, err := allocator.NewFactory(policy, opts.Compare.Conf, r.Header())
	if err != nil {
		return "", err
	}
	cfg := opts.Compare.Config
	cfg.Observer, cfg.Progress = nil, nil
	_, fc, err := replay.RunForecast(r, f, cfg, 0)
	if err != nil && !errors.Is(err, trace.ErrTruncated) {
		return "", fmt.Errorf("%s: forecast: %w", policy, err)
	}
	switch {
	case fc == nil || fc.OutsideSource == "":
		return "Silent-OOM forecast: the trace names no device size, so there is no free memory to forecast (pass --capacity).", nil
	case fc.SilentRisk != "":
		return "Silent-OOM risk: " + fc.SilentRisk, nil
	}
	return fmt.Sprintf("No silent-OOM risk: the device's free memory stayed at or above %s (outside memory from the %s; its reserve %s).",
		replay.FormatBytes(fc.SilentMinFreeBytes), fc.OutsideSource, replay.FormatBytes(fc.OutsideReserveBytes)), nil
}
