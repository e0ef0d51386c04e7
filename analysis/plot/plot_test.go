package plot

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
)

// comparison returns a hand-made comparison of three runs.
func comparison() *analysis.Comparison {
	mk := func(label string, peak uint64, pct float64) *analysis.Run {
		r := &analysis.Run{Label: label, Policy: label,
			Result: &replay.Result{Policy: label, PeakReservedBytes: peak}}
		r.Result.Fragmentation.AtPeakPct = pct
		r.Series = []analysis.Series{
			{Name: "reserved", Unit: "GiB", TimeS: []float64{0, 1, 2}, Index: []int64{0, 1, 2}, Value: []float64{0, float64(peak) / (1 << 30), 0.5}},
			{Name: "active", Unit: "GiB", TimeS: []float64{0, 1, 2}, Index: []int64{0, 1, 2}, Value: []float64{0, 0.25, 0.25}},
			{Name: "requested", Unit: "GiB", TimeS: []float64{0, 1, 2}, Index: []int64{0, 1, 2}, Value: []float64{0, 0.2, 0.2}},
			{Name: "fragmentation", Unit: "%", TimeS: []float64{0, 1, 2}, Index: []int64{0, 1, 2}, Value: []float64{0, pct, 50}},
		}
		return r
	}
	c := &analysis.Comparison{Runs: []*analysis.Run{
		mk("caching", 3<<30, 40), mk("expandable", 2<<30, 8.5), mk("ideal", 1<<30, 0),
	}, Before: "caching", After: "expandable"}
	c.Runs[2].Limit = true
	c.Runs[0].FreeHist = &analysis.FreeHistogram{Policy: "caching", Index: 1, ReservedBytes: 3 << 30, Bins: []analysis.HistBin{
		{Log2: 19, LowBytes: 512 << 10, HighBytes: 1 << 20, Blocks: 6, StrandedBlocks: 4, Bytes: 3 << 20, StrandedBytes: 2 << 20},
		{Log2: 20, LowBytes: 1 << 20, HighBytes: 2 << 20},
		{Log2: 21, LowBytes: 2 << 20, HighBytes: 4 << 20, Blocks: 2, StrandedBlocks: 1, Bytes: 5 << 20, StrandedBytes: 1 << 20},
	}}
	return c
}

// TestHistogramData checks that the bars are bytes (MiB), not block counts.
func TestHistogramData(t *testing.T) {
	d := HistogramData(comparison().Runs[0].FreeHist)
	want := HistData{Labels: []string{"1/2", "1", "2"}, Stranded: []float64{2, 0, 1}, Releasable: []float64{1, 0, 4}}
	if strings.Join(d.Labels, " ") != strings.Join(want.Labels, " ") {
		t.Errorf("labels %v, want %v", d.Labels, want.Labels)
	}
	for i := range want.Stranded {
		if d.Stranded[i] != want.Stranded[i] || d.Releasable[i] != want.Releasable[i] {
			t.Errorf("bin %d: stranded %v releasable %v, want %v %v", i, d.Stranded[i], d.Releasable[i], want.Stranded[i], want.Releasable[i])
		}
	}
}

func TestMiBLabel(t *testing.T) {
	for b, want := range map[uint64]string{512: "1/2048", 1 << 19: "1/2", 1 << 20: "1", 64 << 20: "64", 1 << 30: "1024"} {
		if got := MiBLabel(b); got != want {
			t.Errorf("MiBLabel(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestPoliciesData(t *testing.T) {
	c := comparison()
	c.Runs = append(c.Runs, &analysis.Run{Label: "broken", Error: "boom"})
	d := PoliciesData(c)
	if strings.Join(d.Labels, ",") != "caching,expandable,ideal" {
		t.Fatalf("labels %v: failed runs must be left out", d.Labels)
	}
	wantGB := []float64{3, 2, 1}
	wantPct := []float64{40, 8.5, 0}
	for i := range wantGB {
		if d.PeakReservedGB[i] != wantGB[i] || d.AtPeakPct[i] != wantPct[i] {
			t.Errorf("bar %d: %v GiB %v%%, want %v %v", i, d.PeakReservedGB[i], d.AtPeakPct[i], wantGB[i], wantPct[i])
		}
	}
	if l := barLabel(d.AtPeakPct[1], "at_peak_pct (%)"); l != "8.5%" {
		t.Errorf("bar label %q, want 8.5%%", l)
	}
	if l := barLabel(d.PeakReservedGB[0], "peak reserved (GiB)"); l != "3.00" {
		t.Errorf("bar label %q, want 3.00", l)
	}
}

func TestTimelineSeries(t *testing.T) {
	c := comparison()
	// A setting variant is drawn only when it is the verdict's "after".
	c.Runs = append(c.Runs, &analysis.Run{Label: "caching+x", Setting: "x", Result: &replay.Result{}, Series: c.Runs[0].Series})
	runs := timelineRuns(c)
	if len(runs) != 3 {
		t.Fatalf("%d timeline runs, want 3", len(runs))
	}
	xy := XY(runs[0].SeriesNamed("reserved"))
	if len(xy) != 3 || xy[1].X != 1 || xy[1].Y != 3 {
		t.Errorf("reserved points %v, want (1 s, 3 GiB) second", xy)
	}
	c.After = "caching+x"
	if len(timelineRuns(c)) != 4 {
		t.Errorf("the after setting must be drawn")
	}
}

func TestStepXYHoldsValuesUntilTheNextSample(t *testing.T) {
	s := &analysis.Series{TimeS: []float64{0, 1, 1, 3}, Value: []float64{0, 2, 1, 5}}
	got := StepXY(s)
	want := [][2]float64{{0, 0}, {1, 0}, {1, 2}, {1, 1}, {3, 1}, {3, 5}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i, w := range want {
		if got[i].X != w[0] || got[i].Y != w[1] {
			t.Fatalf("point %d: got %v, want %v (all: %v)", i, got[i], w, got)
		}
	}
}

func TestTimelineScalesGiveOutliersTheirOwn(t *testing.T) {
	c := comparison()
	// bfc-like: far above the others.
	bfc := &analysis.Run{Label: "bfc", Policy: "bfc", Result: &replay.Result{PeakReservedBytes: 4 << 30},
		Series: []analysis.Series{{Name: "reserved", TimeS: []float64{0, 1}, Value: []float64{1, 4}}}}
	c.Runs = []*analysis.Run{c.Runs[0], c.Runs[1], bfc}
	c.Runs[0].Series[0].Value[1] = 2.51
	c.Runs[1].Series[0].Value[1] = 2.30
	ymax, own := TimelineScales(c.Runs)
	if own[0] || own[1] || !own[2] {
		t.Fatalf("own scales %v, want only the 4 GiB run's", own)
	}
	if ymax[0] != ymax[1] || math.Abs(ymax[0]-2.51*1.05) > 1e-9 {
		t.Fatalf("shared axis tops %v, want both 2.51·1.05", ymax[:2])
	}
	if math.Abs(ymax[2]-4*1.05) > 1e-9 {
		t.Fatalf("outlier axis top %v, want 4·1.05", ymax[2])
	}
}

func TestClipBars(t *testing.T) {
	drawn, top, clipped := ClipBars([]float64{14, 7.1, 50, 11.4, 16.7})
	if !clipped[2] || clipped[4] || clipped[0] {
		t.Fatalf("clipped %v, want only the 50", clipped)
	}
	if drawn[2] >= 50 || drawn[2] <= 16.7 || drawn[4] != 16.7 || top <= drawn[2] {
		t.Fatalf("drawn %v, axis top %v", drawn, top)
	}
}

func TestTitlesNameTraceAndGPU(t *testing.T) {
	c := comparison()
	c.Trace = analysis.TraceInfo{Name: "run.fst", GPU: "NVIDIA H200", Torch: "2.11.0"}
	if got, want := TraceLine(c), "run.fst, NVIDIA H200, PyTorch 2.11.0"; got != want {
		t.Fatalf("TraceLine = %q, want %q", got, want)
	}
	figs, err := Figures(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range figs {
		if !strings.Contains(f.Plots[0][0].Title.Text, "run.fst, NVIDIA H200") {
			t.Errorf("%s: title %q does not name the trace and GPU", f.Name, f.Plots[0][0].Title.Text)
		}
	}
}

func TestFiguresDecodeAtSize(t *testing.T) {
	dir := t.TempDir()
	paths, err := WriteAll(dir, comparison())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int{
		"fragmentation_hist.png": {1200, 700},
		"timeline.png":           {1200, 60 + 260*3},
		"views.png":              {1200, 600},
		"policies.png":           {1400, 650},
	}
	seen := map[string]bool{}
	for _, p := range paths {
		seen[filepath.Base(p)] = true
	}
	for name, size := range want {
		if !seen[name] || !seen[strings.TrimSuffix(name, ".png")+".svg"] {
			t.Errorf("%s (or its SVG) not written; wrote %v", name, paths)
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() != size[0] || b.Dy() != size[1] {
			t.Errorf("%s is %dx%d, want %dx%d", name, b.Dx(), b.Dy(), size[0], size[1])
		}
		svg, err := os.ReadFile(filepath.Join(dir, strings.TrimSuffix(name, ".png")+".svg"))
		if err != nil || !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("%s: SVG unreadable or not SVG (%v)", name, err)
		}
	}
	if os.Getenv("FRAGSIM_PLOT_DIR") != "" {
		for _, p := range paths {
			data, _ := os.ReadFile(p)
			os.WriteFile(filepath.Join(os.Getenv("FRAGSIM_PLOT_DIR"), filepath.Base(p)), data, 0o644)
		}
	}
}

// TestComparisonNames: the names a command checks before drawing are
// those of the figures drawn, and a figure that would replace an input
// (here through a symbolic link) is refused and leaves it whole. The link
// stands where the first figure goes, so that the refusal comes before
// any figure is drawn (TestFiguresDecodeAtSize draws them all).
func TestComparisonNames(t *testing.T) {
	figs, err := Figures(comparison())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range figs {
		names = append(names, f.Name)
	}
	if strings.Join(names, " ") != strings.Join(ComparisonNames, " ") {
		t.Errorf("figures %v, ComparisonNames %v", names, ComparisonNames)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.fst")
	os.WriteFile(in, []byte("input"), 0o644)
	if err := os.Symlink(in, filepath.Join(dir, ComparisonNames[0]+".png")); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteAll(dir, comparison(), in); err == nil || !strings.Contains(err.Error(), "is the input") {
		t.Errorf("a figure over the input: %v", err)
	}
	if b, _ := os.ReadFile(in); string(b) != "input" {
		t.Errorf("the input reads %q", b)
	}
}
