package fleet

import (
	"bytes"
	"fmt"
	"html"
	"html/template"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/analysis"
)

// Inputs and names an attacker might give the page: each must stay text.
const (
	hostileInput = `jobs/<img src=x onerror=alert(1)>/rank0.fst`
	hostileStack = `</title><script>alert(2)</script> (x.py:1)`
	hostileLabel = `caching+<svg onload=alert(3)>`
	hostileError = `bad magic <iframe src=javascript:alert(4)>`
)

// candidate settings of the test fleet: expandable saves on every trace,
// split saves more in total but makes one trace worse, bfc costs.
const (
	expandable = "caching+expandable_segments:True"
	split      = "caching+max_split_size_mb:128"
	bfc        = "bfc"
)

// testRow is one analysed trace: its baseline's peak and the saving (GiB)
// of each candidate, its stacks' stranded bytes.
func testRow(input, job string, rank int, format string, peakGiB float64, saves map[string]float64, stacks map[string]uint64) Row {
	peak := uint64(peakGiB * gib)
	r := Row{Input: input, Job: job, Rank: &rank, Format: format, Events: 123456,
		BaselinePeakReservedBytes: peak, BaselineAtPeakPct: 21.5, Baseline: "caching",
		Recommendation: &analysis.Recommendation{Line: "Recommended: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 1.00 GiB less peak reserved"},
		Candidates:     []Candidate{{Label: "caching", Exact: true, PeakReservedBytes: peak}}}
	for _, l := range []string{expandable, split, bfc, hostileLabel} {
		s, ok := saves[l]
		if !ok {
			continue
		}
		c := Candidate{Label: l, Setting: strings.TrimPrefix(l, "caching+"), PeakReservedBytes: uint64(int64(peak) - int64(s*gib)),
			SavingBytes: int64(s * gib)}
		if strings.HasPrefix(l, "caching+") {
			c.Env = "PYTORCH_CUDA_ALLOC_CONF=" + c.Setting
		}
		r.Candidates = append(r.Candidates, c)
	}
	for k, v := range stacks {
		r.Stacks = append(r.Stacks, analysis.Share{Key: k, StrandedBytes: v})
	}
	return r
}

// testFleet is a small fleet made by hand: a job of four ranks, one of
// which peaks 1.75x the median, a job of two snapshots, a trace cut
// short, a failed input, an OOM snapshot and hostile names.
func testFleet(t testing.TB) (*Fleet, []Row) {
	t.Helper()
	all := map[string]float64{expandable: 1, split: 3, bfc: -0.5}
	rows := []Row{
		testRow("jobs/train-a/rank0.fst", "train-a", 0, "trace", 8, all, map[string]uint64{"forward (model.py:10)": 1 * gib}),
		testRow("jobs/train-a/rank1.fst", "train-a", 1, "trace", 8, all, map[string]uint64{"forward (model.py:10)": 1 * gib}),
		testRow("jobs/train-a/rank2.fst", "train-a", 2, "trace", 8, all, map[string]uint64{"forward (model.py:10)": 1 * gib}),
		testRow("jobs/train-a/rank3.fst", "train-a", 3, "trace", 14, map[string]float64{expandable: 3, split: -1, bfc: -1},
			map[string]uint64{"forward (model.py:10)": 1 * gib, "all_gather (dist.py:77)": 4 * gib}),
		testRow("jobs/serve b/snapshot_0.pickle", "serve b", 0, "pytorch", 20, map[string]float64{expandable: 0.5, split: 0.7}, nil),
		testRow("jobs/serve b/snapshot_1.pickle", "serve b", 1, "pytorch", 22, map[string]float64{expandable: 0.5, split: 0.7}, nil),
		testRow(hostileInput, "hostile", 0, "trace", 4, map[string]float64{expandable: 0.25, hostileLabel: 0.1},
			map[string]uint64{hostileStack: 512 << 20}),
		{Input: "jobs/bad/rank0.pickle", Job: "bad", Error: hostileError},
	}
	rows[1].Error = "trace cut short at event 99 (the figures cover the events before the cut)"
	rows[5].OOM = &analysis.Explanation{Class: analysis.OOMFragmentation}
	rows[0].Report = "reports/train-a rank0?.html"
	var parts []Part
	goal := analysis.Goal{}
	for _, r := range rows {
		parts = append(parts, PartsOf(r, goal)...)
	}
	f := Summarize(parts, goal)
	if f.Recommendation == nil || f.Recommendation.Label != expandable || f.WithRegressions == nil || f.WithRegressions.Label != split {
		t.Fatalf("the test fleet's choices: %+v, with regressions %+v", f.Recommendation, f.WithRegressions)
	}
	SortRows(rows)
	return f, rows
}

// esc is s as html/template writes it in text.
func esc(s string) string {
	var b strings.Builder
	if err := template.Must(template.New("").Parse("{{.}}")).Execute(&b, s); err != nil {
		panic(err)
	}
	return b.String()
}

func render(t testing.TB, f *Fleet, rows []Row) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, f, rows); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// tableRows returns the <tr> elements of the table with the id.
func tableRows(t *testing.T, page, id string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<table id="` + id + `">.*?<tbody>(.*?)</tbody>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no table #%s", id)
	}
	return regexp.MustCompile(`(?s)<tr.*?</tr>`).FindAllString(m[1], -1)
}

// rowWith returns the one row that holds s.
func rowWith(t *testing.T, rows []string, s string) string {
	t.Helper()
	var found []string
	for _, r := range rows {
		if strings.Contains(r, s) {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d rows hold %q, want 1", len(found), s)
	}
	return found[0]
}

func TestHTMLShowsTheFleet(t *testing.T) {
	f, rows := testFleet(t)
	page := render(t, f, rows)

	if !strings.Contains(page, `<code id="rec-line">PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True</code>`) {
		t.Errorf("the fleet's recommendation is not shown")
	}
	if !strings.Contains(page, `<div id="rec-saving">7.25 GiB less peak reserved in total over 7 traces, better on 7, worse on none`) {
		t.Errorf("the fleet's recommendation does not say what it saves")
	}
	wr := regexp.MustCompile(`(?s)<div id="with-regressions".*?</ul>`).FindString(page)
	if !strings.Contains(wr, "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128") || !strings.Contains(wr, "jobs/train-a/rank3.fst") ||
		!strings.Contains(wr, "worse on 1 ") {
		t.Errorf("the alternative with regressions does not name its setting and its regression:\n%s", wr)
	}
	meta := regexp.MustCompile(`<div id="fleet-meta"[^>]*>([^<]*)<`).FindStringSubmatch(page)
	if meta == nil || !strings.Contains(meta[1], "8 inputs: 6 analysed, 2 failed") {
		// The trace cut short counts among the failures, as in fleet.json.
		t.Errorf("header: %q", meta)
	}

	// The chart: one saving bar per candidate, an axis in GiB.
	if n := strings.Count(page, `<rect class="saving `); n != len(f.Candidates) {
		t.Errorf("%d bars, want one per candidate (%d)", n, len(f.Candidates))
	}
	for _, tick := range []string{">0 GiB<", ">-2.5 GiB<", ">5 GiB<", ">10 GiB<"} {
		if !strings.Contains(page, tick) {
			t.Errorf("no tick %s on the chart's axis", tick)
		}
	}
	if c := chartOf(f); c.Ticks[0].Label != "-2.5 GiB" || c.Ticks[len(c.Ticks)-1].Label != "10 GiB" {
		t.Errorf("the axis spans %s to %s, want -2.5 GiB to 10 GiB (totals -2.50 GiB to 9.40 GiB)", c.Ticks[0].Label, c.Ticks[len(c.Ticks)-1].Label)
	}
	for _, c := range f.Candidates {
		if !strings.Contains(page, ">"+esc(c.Label)+"<") {
			t.Errorf("candidate %q is not named", c.Label)
		}
	}

	cands := tableRows(t, page, "candidates")
	if len(cands) != len(f.Candidates) {
		t.Errorf("%d candidate rows, want %d", len(cands), len(f.Candidates))
	}
	if r := rowWith(t, cands, ">"+esc(expandable)+"<"); !strings.Contains(r, `class="best"`) || !strings.Contains(r, "<td>fleet</td>") {
		t.Errorf("the recommended candidate's row is not marked: %s", r)
	}

	jobs := tableRows(t, page, "jobs")
	if len(jobs) != len(f.Jobs) {
		t.Errorf("%d job rows, want %d", len(jobs), len(f.Jobs))
	}
	for _, j := range f.Jobs {
		r := rowWith(t, jobs, `<td class="l">`+esc(j.Job)+`</td>`)
		if !strings.Contains(r, fmt.Sprintf(">%.2fx<", j.Imbalance)) {
			t.Errorf("job %s: no imbalance %.2fx in %s", j.Job, j.Imbalance, r)
		}
	}
	a := rowWith(t, jobs, `<td class="l">train-a</td>`)
	if !strings.Contains(a, ">1.75x<") || !strings.Contains(a, "rank 3") || !strings.Contains(a, "0–3") ||
		!strings.Contains(a, "all_gather (dist.py:77)") || !strings.Contains(a, "4.00 GiB") {
		t.Errorf("job train-a: want 1.75x, outlier rank 3, ranks 0–3 and the all_gather stack 4.00 GiB apart: %s", a)
	}

	traces := tableRows(t, page, "traces")
	if len(traces) != len(rows) {
		t.Errorf("%d trace rows, want %d", len(traces), len(rows))
	}
	for _, r := range rows {
		tr := rowWith(t, traces, ">"+esc(r.Input)+"<")
		switch {
		case !r.OK():
			if !strings.Contains(tr, `class="failed"`) || !strings.Contains(tr, esc(r.Error)) {
				t.Errorf("failed input %s is not marked with its error: %s", r.Input, tr)
			}
		case r.Error != "":
			if !strings.Contains(tr, `class="cut"`) || !strings.Contains(tr, "cut short at event 99") {
				t.Errorf("input %s cut short is not marked: %s", r.Input, tr)
			}
		default:
			if !strings.Contains(tr, esc(r.Recommendation.Line)) || strings.Contains(tr, `class="failed"`) {
				t.Errorf("input %s: %s", r.Input, tr)
			}
		}
	}
	for in, cmd := range map[string]string{
		"jobs/train-a/rank0.fst":         `fragsim report jobs/train-a/rank0.fst -o &#39;reports/train-a rank0?.html&#39;`,
		"jobs/train-a/rank2.fst":         `fragsim report jobs/train-a/rank2.fst -o train-a_rank2.html`,
		"jobs/serve b/snapshot_1.pickle": `fragsim import &#39;jobs/serve b/snapshot_1.pickle&#39; -o serve_b_snapshot_1.fst &amp;&amp; fragsim report serve_b_snapshot_1.fst -o serve_b_snapshot_1.html`,
		"jobs/bad/rank0.pickle":          `fragsim import jobs/bad/rank0.pickle -o bad_rank0.fst &amp;&amp; fragsim report bad_rank0.fst -o bad_rank0.html`,
	} {
		if tr := rowWith(t, traces, ">"+esc(in)+"<"); !strings.Contains(tr, `<code class="cmd">`+cmd+`</code>`) {
			t.Errorf("input %s: want the command %s in %s", in, cmd, tr)
		}
	}
	if !strings.Contains(page, `<a class="report" href="./reports/train-a%20rank0%3f.html">jobs/train-a/rank0.fst</a>`) &&
		!strings.Contains(page, `<a class="report" href="./reports/train-a%20rank0%3F.html">jobs/train-a/rank0.fst</a>`) {
		t.Errorf("the input with a report does not link to it")
	}
	if n := strings.Count(page, `<a class="report"`); n != 1 {
		t.Errorf("%d inputs link to a report, want the one that has one", n)
	}

	stacks := tableRows(t, page, "stacks")
	if len(stacks) != len(f.Stacks) || !strings.Contains(stacks[0], "all_gather (dist.py:77)") {
		t.Errorf("stacks table: %d rows, the first %s", len(stacks), stacks[0])
	}
	if r := rowWith(t, tableRows(t, page, "ooms"), "fragmentation"); !strings.Contains(r, "<td>1</td>") {
		t.Errorf("OOM classes: %s", r)
	}
}

// TestHTMLEscapesInputs checks that names from the inputs (paths, stacks,
// settings, errors) stay text, and that the page reaches for nothing
// outside itself.
func TestHTMLEscapesInputs(t *testing.T) {
	for _, live := range []string{`<img src=x>`, `<a href="https://x.org/">`, `<a href=//x.org/>`, `<p onclick=f()>`, `<svg onload="f()">`} {
		if liveMarkup(live) == nil {
			t.Fatalf("liveMarkup does not see %s", live)
		}
	}
	if bad := liveMarkup(`<p title="onerror=f() &lt;img&gt;">&lt;script&gt; href=https://x.org/</p><a href="./r.html">`); bad != nil {
		t.Fatalf("liveMarkup sees text as markup: %q", bad)
	}
	f, rows := testFleet(t)
	page := render(t, f, rows)
	for _, s := range []string{hostileInput, hostileStack, hostileLabel, hostileError} {
		if !strings.Contains(page, esc(s)) {
			t.Errorf("%q is not on the page as text", s)
		}
	}
	for _, bad := range liveMarkup(page) {
		t.Errorf("the page holds %s", bad)
	}
	for _, ext := range []string{"<link", "@import", "url(", "<script"} {
		if strings.Contains(page, ext) {
			t.Errorf("the page holds %q", ext)
		}
	}
}

// liveMarkup lists the tags of page that load or run anything: an
// element that does (img, script, iframe, object, embed, link), an event
// handler, a URL to elsewhere. Text holds no '<' but as &lt;: every '<'
// opens a real tag.
func liveMarkup(page string) []string {
	var bad []string
	attr := regexp.MustCompile(`\s([a-zA-Z:-]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s>]+))?`)
	for _, tag := range regexp.MustCompile(`<[a-zA-Z][^>]*>`).FindAllString(page, -1) {
		if regexp.MustCompile(`(?i)^<(img|script|iframe|object|embed|link|frame|base|meta http-equiv)\b`).MatchString(tag) {
			bad = append(bad, tag)
			continue
		}
		for _, a := range attr.FindAllStringSubmatch(tag, -1) {
			name, value := strings.ToLower(a[1]), html.UnescapeString(strings.Trim(a[2], `"'`))
			if strings.HasPrefix(name, "on") {
				bad = append(bad, tag)
			}
			if (name == "src" || name == "href" || name == "action" || name == "xlink:href") &&
				regexp.MustCompile(`(?i)^\s*(https?:|//|javascript:|data:)`).MatchString(value) {
				bad = append(bad, tag)
			}
		}
	}
	return bad
}

func TestHTMLEmptyFleet(t *testing.T) {
	f := Summarize(PartsOf(Row{Input: "-", Error: "no such file"}, analysis.Goal{}), analysis.Goal{})
	page := render(t, f, []Row{{Input: "-", Error: "no such file"}})
	for _, want := range []string{"none: no input could be analysed", `id="no-candidates"`, `id="no-stacks"`,
		`<code class="cmd">fragsim import ./- -o trace.fst &amp;&amp; fragsim report trace.fst -o trace.html</code>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page of a fleet with no analysed input lacks %s", want)
		}
	}
	if strings.Contains(page, `id="with-regressions"`) || strings.Contains(page, `id="ooms"`) {
		t.Errorf("the page shows an alternative or OOM classes it does not have")
	}
}

func TestChartAxis(t *testing.T) {
	for _, c := range []struct {
		totals    []int64
		first, at string
	}{
		{[]int64{100 << 20, 30 << 20}, "0 GiB", "0.1 GiB"},
		{[]int64{-3 * gib}, "-3 GiB", "0 GiB"},
		{[]int64{0}, "0 GiB", "1 GiB"},
	} {
		f := &Fleet{}
		for i, v := range c.totals {
			f.Candidates = append(f.Candidates, CandidateSummary{Label: strconv.Itoa(i), TotalSavingBytes: v})
		}
		ch := chartOf(f)
		if first, last := ch.Ticks[0].Label, ch.Ticks[len(ch.Ticks)-1].Label; first != c.first || last != c.at {
			t.Errorf("totals %v: axis %s to %s, want %s to %s", c.totals, first, last, c.first, c.at)
		}
		if len(ch.Bars) != len(c.totals) {
			t.Errorf("totals %v: %d bars", c.totals, len(ch.Bars))
		}
	}
}

func TestReportCommandNames(t *testing.T) {
	for _, c := range []struct{ in, stem, quoted string }{
		{"jobs/a/rank0.fst", "a_rank0", "jobs/a/rank0.fst"},
		{"/data/run 1/snapshot_3.pickle.gz", "run_1_snapshot_3", "'/data/run 1/snapshot_3.pickle.gz'"},
		{"gs://bucket/j/rmm.csv", "j_rmm", "gs://bucket/j/rmm.csv"},
		{"-rank0.fst", "rank0", "./-rank0.fst"},
		{"it's.fst", "it_s", `'it'\''s.fst'`},
		{"..", "trace", ".."},
	} {
		if got := reportStem(c.in); got != c.stem {
			t.Errorf("reportStem(%q) = %q, want %q", c.in, got, c.stem)
		}
		if got := shellQuote(c.in); got != c.quoted {
			t.Errorf("shellQuote(%q) = %q, want %q", c.in, got, c.quoted)
		}
	}
	long := reportStem(strings.Repeat("x", 300) + ".fst")
	if len(long) != 80 || long == reportStem(strings.Repeat("x", 301)+".fst") {
		t.Errorf("a long name is %d bytes, or not told apart: %s", len(long), long)
	}
	if got := reportHref("javascript:alert(1) #x?.html"); got != "./javascript:alert%281%29%20%23x%3F.html" {
		t.Errorf("reportHref = %q", got)
	}
}
