package report

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/synth"
)

const committedTrace = "../../traces/baseline_s1.fst"

// baselineEvents is how much of the built-in multi-agent trace the
// report tests read: its first 15,000 events hold the model loads and
// the agents' first turns, already fragmented the way the whole run is
// (the same setting recommended, with a saving), at an eighth of the
// replays.
const baselineEvents = 15_000

// baselineOpener opens the report tests' cut of the built-in trace.
func baselineOpener(t *testing.T) analysis.Opener {
	return bytesOpener(tracePrefix(t, committedTrace, baselineEvents))
}

var (
	baseOnce sync.Once
	baseRep  *Report
	baseErr  error
	pageOnce sync.Once
	basePage []byte
	pageErr  error
)

// baseline returns the report of the cut of the built-in trace, built
// once.
func baseline(t *testing.T) *Report {
	t.Helper()
	open := baselineOpener(t)
	baseOnce.Do(func() {
		baseRep, baseErr = Build(open, Options{Compare: analysis.CompareOptions{Name: "baseline_s1.fst"}})
	})
	if baseErr != nil {
		t.Fatal(baseErr)
	}
	return baseRep
}

// baselinePage returns baseline's page, written once.
func baselinePage(t *testing.T) []byte {
	t.Helper()
	rep := baseline(t)
	pageOnce.Do(func() {
		var buf bytes.Buffer
		pageErr = rep.WriteHTML(&buf)
		basePage = buf.Bytes()
	})
	if pageErr != nil {
		t.Fatal(pageErr)
	}
	return basePage
}

func TestReportTimelineKeepsEveryPeak(t *testing.T) {
	rep := baseline(t)
	tl := rep.Timeline
	if len(tl.T) != 2*DefaultBuckets {
		t.Fatalf("timeline has %d times, want %d", len(tl.T), 2*DefaultBuckets)
	}
	for i := 1; i < len(tl.T); i++ {
		if tl.T[i] < tl.T[i-1] {
			t.Fatalf("times go back at %d: %v < %v", i, tl.T[i], tl.T[i-1])
		}
	}
	if len(tl.Runs) != len(rep.Comparison().Runs) {
		t.Fatalf("%d runs on the timeline, %d compared", len(tl.Runs), len(rep.Comparison().Runs))
	}
	for _, tr := range tl.Runs {
		run := rep.Comparison().Run(tr.Label)
		for name, s := range map[string][]float64{"reserved": tr.Reserved, "active": tr.Active, "requested": tr.Requested} {
			if tr.Setting && name != "reserved" {
				if s != nil {
					t.Fatalf("%s: setting variant carries its %s series", tr.Label, name)
				}
				continue
			}
			if len(s) != len(tl.T) {
				t.Fatalf("%s %s: %d points for %d times", tr.Label, name, len(s), len(tl.T))
			}
		}
		peak := 0.0
		for _, v := range tr.Reserved {
			peak = math.Max(peak, v)
		}
		want := float64(run.Result.PeakReservedBytes) / (1 << 30)
		if math.Abs(peak-want) > 1e-4 {
			t.Errorf("%s: timeline peak reserved %.4f GiB, replay %.4f GiB", tr.Label, peak, want)
		}
	}
}

func TestResampleKeepsSpikeAndOrder(t *testing.T) {
	s := &analysis.Series{TimeS: []float64{0, 0.1, 0.2, 0.21, 0.22, 0.9}, Value: []float64{1, 1, 1, 9, 0.5, 2}}
	got := resample(s, 4, 0.25)
	want := []float64{1, 9, 0.5, 0.5, 0.5, 0.5, 2, 2}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Bucket 0 holds 1, 1, 1, 9, 0.5: its max (9) comes before its min (0.5).
	want[0], want[1] = 9, 0.5
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestReportLayoutsAddUp(t *testing.T) {
	rep := baseline(t)
	if len(rep.Layouts) < 10 {
		t.Fatalf("%d layouts captured, want the 32 evenly spaced ones and the worst", len(rep.Layouts))
	}
	sel := rep.Layouts[rep.Selected]
	if sel.What != "most stranded" {
		t.Fatalf("the layout shown first is %q, want the most stranded moment", sel.What)
	}
	// The moment analyze calls the worst.
	an, err := analysis.Analyze(baselineOpener(t), analysis.AnalyzeOptions{NoAdvice: true, Top: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sel.Index != an.Moments[0].Index || sel.StrandedBytes != an.Moments[0].StrandedBytes {
		t.Fatalf("selected layout: event %d, %d stranded; analyze's worst moment: event %d, %d stranded",
			sel.Index, sel.StrandedBytes, an.Moments[0].Index, an.Moments[0].StrandedBytes)
	}
	for _, l := range rep.Layouts {
		var segBytes, stranded, releasable uint64
		for _, r := range l.Segments {
			segBytes += r.Size
			var sum int64
			for _, b := range r.Blocks {
				sum += b[0]
			}
			if uint64(sum) != r.Size {
				t.Fatalf("event %d: segment %#x of %d bytes has blocks summing to %d", l.Index, r.Addr, r.Size, sum)
			}
			if len(r.Blocks) > 2*maxBlocksPerRow+1 {
				t.Fatalf("event %d: segment %#x drawn with %d blocks", l.Index, r.Addr, len(r.Blocks))
			}
		}
		if segBytes+l.MoreBytes != l.ReservedBytes {
			t.Fatalf("event %d: segments sum to %d (+%d not drawn), reserved %d", l.Index, segBytes, l.MoreBytes, l.ReservedBytes)
		}
		for _, h := range l.Hist {
			stranded += h.Stranded
			releasable += h.Releasable
		}
		if stranded != l.StrandedBytes || releasable != l.ReleasableBytes {
			t.Fatalf("event %d: histogram %d stranded %d releasable, layout %d and %d", l.Index, stranded, releasable, l.StrandedBytes, l.ReleasableBytes)
		}
	}
}

func TestReportRecommendationAndTable(t *testing.T) {
	rep := baseline(t)
	cmp := rep.Comparison()
	rec, d := rep.Recommendation, cmp.Decision.Recommendation
	if rec.Label != d.Label || rec.Why != d.Line || rec.Exact != d.Exact {
		t.Fatalf("recommendation %+v, decision %+v", rec, d)
	}
	if d.Env != "" && d.Label != cmp.Decision.Baseline && rec.Line != d.Env {
		t.Fatalf("line to paste %q, decision's %q", rec.Line, d.Env)
	}
	b, a := cmp.Run(cmp.Decision.Baseline).Result, cmp.Run(d.Label).Result
	if rec.SavedBytes != int64(b.PeakReservedBytes)-int64(a.PeakReservedBytes) {
		t.Fatalf("saving %d, want %d", rec.SavedBytes, int64(b.PeakReservedBytes)-int64(a.PeakReservedBytes))
	}
	if len(rep.Runs) != len(cmp.Runs) {
		t.Fatalf("%d table rows, %d runs", len(rep.Runs), len(cmp.Runs))
	}
	if !strings.HasPrefix(rep.Fidelity, "fidelity: ") {
		t.Fatalf("fidelity line %q", rep.Fidelity)
	}
	if len(rep.Breakdowns) == 0 || len(rep.Breakdowns[0].BySize) == 0 {
		t.Fatal("no breakdown of the stranded bytes")
	}
}

func TestReportHTMLIsSelfContained(t *testing.T) {
	rep := baseline(t)
	page := string(baselinePage(t))
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(page); m != "" {
		t.Fatalf("the page loads from the network: %q", m)
	}
	if strings.Contains(page, "{{") && regexp.MustCompile(`\{\{[A-Z_]+\}\}`).MatchString(page) {
		t.Fatal("a placeholder was left in the page")
	}
	if !strings.Contains(page, "uPlot") {
		t.Fatal("the chart library is not embedded")
	}
	// The data is what lies between its script tag and the first
	// </script> after it (a regexp's lazy match, found at a fraction of
	// its cost on a page of megabytes).
	const open, end = `<script type="application/json" id="data">`, `</script>`
	i := strings.Index(page, open)
	if i < 0 {
		t.Fatal("no data in the page")
	}
	data, _, ok := strings.Cut(page[i+len(open):], end)
	if !ok {
		t.Fatal("the page's data is not closed")
	}
	var back Report
	if err := json.Unmarshal([]byte(data), &back); err != nil {
		t.Fatalf("the page's data does not parse: %v", err)
	}
	if back.Recommendation.Line != rep.Recommendation.Line || len(back.Layouts) != len(rep.Layouts) {
		t.Fatalf("the page's data differs from the report")
	}
}

// synthOpener generates a synthetic trace of n events in memory.
func synthOpener(t testing.TB, n int64) analysis.Opener {
	t.Helper()
	cfg := synth.DefaultConfig()
	cfg.Events = n
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, cfg.Header())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synth.Generate(w, cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(data))
		return r, io.NopCloser(nil), err
	}
}

// TestReportSizeBound checks that a report of a million events stays
// under 8 MB: its size is bounded by the timeline's buckets and the
// captured layouts, not by the trace. The everyday pass builds it of
// 20,000 events, ten times the timeline's buckets, and checks the same
// bounds; the long pass, of the million.
func TestReportSizeBound(t *testing.T) {
	n := int64(20_000)
	if os.Getenv("FRAGSIM_LONG") == "1" {
		n = 1_000_000
	}
	rep, err := Build(synthOpener(t, n), Options{Compare: analysis.CompareOptions{Name: "synthetic"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Trace.Events < n*9/10 {
		t.Fatalf("replayed %d events, want about %d", rep.Trace.Events, n)
	}
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Len() >= 8<<20 {
		t.Fatalf("report of %d events is %d bytes, over 8 MiB", n, buf.Len())
	}
	if len(rep.Layouts) > maxLayoutsDefault+2 {
		t.Fatalf("%d layouts, at most %d", len(rep.Layouts), maxLayoutsDefault+2)
	}
	for _, l := range rep.Layouts {
		if len(l.Segments) > maxSegmentRows {
			t.Fatalf("event %d: %d segment rows", l.Index, len(l.Segments))
		}
	}
	// The synthetic trace has call stacks: blocks of the map point at them.
	withStack := 0
	for _, l := range rep.Layouts {
		for _, r := range l.Segments {
			for _, b := range r.Blocks {
				if b[3] >= 0 {
					if int(b[3]) >= len(rep.Stacks) || rep.Stacks[b[3]] == "" {
						t.Fatalf("block points at stack %d of %d", b[3], len(rep.Stacks))
					}
					withStack++
				}
			}
		}
	}
	if withStack == 0 {
		t.Fatal("no block of the map carries its call stack")
	}
	t.Logf("%d events: %d bytes", rep.Trace.Events, buf.Len())
}

// TestReportSilentForecast checks the page's silent-OOM line: on a device
// barely larger than the run's peak reserved and the memory outside the
// allocator, the risk and its remedies; on an 80 GiB one, none.
func TestReportSilentForecast(t *testing.T) {
	path := "../../traces/conformance/plain_small.fst"
	for _, c := range []struct {
		capacity uint64
		want     string
	}{
		{211812352 + 700<<20, "Silent-OOM risk: "},
		{80 << 30, "No silent-OOM risk: "},
	} {
		line, err := silentLine(replay.OpenFile(path), "caching", Options{Compare: analysis.CompareOptions{Config: replay.Config{CapacityBytes: c.capacity}}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(line, c.want) || (c.want == "Silent-OOM risk: " && !strings.Contains(line, "CUDA_MODULE_LOADING=EAGER")) {
			t.Errorf("capacity %d: %q, want a line starting %q", c.capacity, line, c.want)
		}
	}
	if !strings.HasPrefix(baseline(t).Silent, "No silent-OOM risk: ") {
		t.Errorf("the built-in trace's page (its cut): %q", baseline(t).Silent)
	}
}

var (
	hostileOnce sync.Once
	hostileRep  *Report
	hostileErr  error
)

// hostileReport returns the report of hostileTrace, named by a label as
// long as its names, built once for the tests that read it.
func hostileReport(t *testing.T) *Report {
	t.Helper()
	open := hostileTrace(t)
	hostileOnce.Do(func() {
		hostileRep, hostileErr = Build(open, Options{Compare: analysis.CompareOptions{Name: strings.Repeat("N", 200_000)}})
	})
	if hostileErr != nil {
		t.Fatal(hostileErr)
	}
	return hostileRep
}

// hostileTrace is a trace whose agent, model and frame names are 200,000
// characters long, with stranded bytes for each agent, and a long stretch
// after an empty_cache() with nothing reserved.
func hostileTrace(t *testing.T) analysis.Opener {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic, GPUTotalBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	long := func(c string) trace.StringID { return w.String(strings.Repeat(c, 200_000)) }
	stack := w.Stack([]trace.Frame{{Func: long("f"), File: long("p"), Line: 1}, {Func: long("g"), Line: 2}})
	ts := int64(1_000_000)
	put := func(e trace.Event) {
		ts += 1_000_000
		e.TimeNS = ts
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	const mib = 1 << 20
	put(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerModel, Text: long("M")})
	for i, name := range []string{"A", "B"} {
		put(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerAgent, Text: long(name)})
		for j := range 4 {
			put(trace.Event{Kind: trace.KindAlloc, Addr: uint64(i*8+j+1) << 32, SizeBytes: 3 * mib, Stack: stack})
		}
	}
	for _, a := range []uint64{1, 3, 9, 11} { // every other block: stranded
		put(trace.Event{Kind: trace.KindFreeRequested, Addr: a << 32, SizeBytes: 3 * mib})
		put(trace.Event{Kind: trace.KindFreeCompleted, Addr: a << 32, SizeBytes: 3 * mib})
	}
	for _, a := range []uint64{2, 4, 10, 12} {
		put(trace.Event{Kind: trace.KindFreeRequested, Addr: a << 32, SizeBytes: 3 * mib})
		put(trace.Event{Kind: trace.KindFreeCompleted, Addr: a << 32, SizeBytes: 3 * mib})
	}
	put(trace.Event{Kind: trace.KindEmptyCache})
	for range 40 { // nothing reserved from here on
		put(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerText, Text: long("T")})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(data))
		return r, io.NopCloser(nil), err
	}
}

// Every label of the report is cut as stacks are; no moment's segments
// are null in the page's data.
func TestReportClipsLabels(t *testing.T) {
	rep := hostileReport(t)
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, c := range []string{"A", "B", "M", "N", "f", "p", "g", "T"} {
		if strings.Contains(page, strings.Repeat(c, maxLabelBytes+1)) {
			t.Errorf("a run of %d %q on the page", maxLabelBytes+1, c)
		}
	}
	if strings.Contains(page, `"segments":null`) || strings.Contains(page, `"hist":null`) {
		t.Errorf("a moment's segments or histogram are null")
	}
	markers := 0
	for _, bd := range rep.Breakdowns {
		for _, s := range bd.ByMarker {
			if strings.HasPrefix(s.Key, "agent AAAA") && strings.HasSuffix(s.Key, "…") && len(s.Key) <= maxLabelBytes+len("…") {
				markers++
			}
		}
	}
	if markers == 0 {
		t.Errorf("no clipped agent in the breakdowns: %+v", rep.Breakdowns)
	}
	if len(page) > 4<<20 {
		t.Errorf("the page is %d bytes", len(page))
	}
}
