package fleet_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/fleet"
	"github.com/fragsim/fragsim/internal/cli"
)

// committed lists the trace files under traces/.
func committed(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join("..", "traces"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".fst") {
			out = append(out, p)
		}
		return err
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("no trace under traces/: %v", err)
	}
	return out
}

// compareJSON runs `fragsim compare --json` as a user would.
func compareJSON(t *testing.T, args ...string) map[string]json.RawMessage {
	t.Helper()
	var out, errb bytes.Buffer
	if code := cli.Main(append([]string{"fragsim", "compare", "-q", "--json"}, args...), &out, &errb); code != 0 {
		t.Fatalf("compare %v: exit %d: %s", args, code, errb.String())
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRowsAreCompares checks that the row of every trace under traces/
// holds what `compare --json` gives for it under the same flags: the same
// recommendation object, and the same peak reserved and OOMs for every
// candidate. The everyday pass takes a small real trace with OOMs under a
// few candidates (three policies, the physical limit and two settings: a
// quarter of the replays). FRAGSIM_LONG=1 takes every trace under those,
// a fit goal on the traces with a memory fraction, and the small trace
// under the default candidates (no flags, fleet.Options{}).
func TestRowsAreCompares(t *testing.T) {
	every := os.Getenv("FRAGSIM_LONG") == "1"
	few := fleet.Options{Policies: []string{"caching", "expandable", "pooled", "ideal"}, SettingsSet: true,
		Settings: []string{"max_split_size_mb:128", "garbage_collection_threshold:0.8"}}
	fewFlags := []string{"--policies", "caching,expandable,pooled,ideal", "--setting", few.Settings[0], "--setting", few.Settings[1]}
	type rowCase struct {
		path, goal string
		opts       fleet.Options
		flags      []string
	}
	small := filepath.Join("..", "traces", "conformance", "fraction_medium.fst")
	cases := []rowCase{{small, "reserved", few, fewFlags}}
	if every {
		cases = []rowCase{{small, "reserved", fleet.Options{}, nil}}
		for _, goal := range []string{"reserved", "fit:1536MiB"} {
			for _, p := range committed(t) {
				// A fit goal bisects every candidate's capacity: the long
				// pass takes it on the traces with OOMs under a memory
				// fraction.
				if goal == "reserved" || strings.Contains(filepath.Base(p), "fraction") {
					cases = append(cases, rowCase{p, goal, few, fewFlags})
				}
			}
		}
	}
	for _, rc := range cases {
		p, goal, flags := rc.path, rc.goal, rc.flags
		o := rc.opts
		o.Goal = goal
		row := fleet.Analyze(p, o, t.TempDir())
		if row.Error != "" {
			t.Errorf("%s: %s", p, row.Error)
			continue
		}
		m := compareJSON(t, append(append([]string{"--goal", goal}, flags...), p)...)
		got, _ := json.Marshal(row.Recommendation)
		if !jsonEqual(t, got, m["recommendation"]) {
			t.Errorf("%s --goal %s: the row's recommendation\n%s\ncompare's\n%s", p, goal, got, m["recommendation"])
		}
		var dec struct {
			Results []struct {
				Label string `json:"label"`
				Peak  uint64 `json:"peak_reserved_bytes"`
				OOMs  int64  `json:"ooms"`
			} `json:"results"`
		}
		if err := json.Unmarshal(m["decision"], &dec); err != nil {
			t.Fatal(err)
		}
		if len(dec.Results) != len(row.Candidates) {
			t.Errorf("%s: %d candidates, compare weighs %d", p, len(row.Candidates), len(dec.Results))
			continue
		}
		for i, r := range dec.Results {
			c := row.Candidates[i]
			if c.Label != r.Label || c.PeakReservedBytes != r.Peak || c.OOMs != r.OOMs {
				t.Errorf("%s: candidate %d: %s %d B %d OOMs, compare's %s %d B %d OOMs", p, i, c.Label, c.PeakReservedBytes, c.OOMs, r.Label, r.Peak, r.OOMs)
			}
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

// writeGzip writes b gzip'd to path.
func writeGzip(t *testing.T, path string, b []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDeadLetters runs a fleet with a corrupt, a cut and a hostile input
// beside good ones: each bad one is a row naming its error, and the good
// ones are analysed all the same; an OOM snapshot is classed.
func TestDeadLetters(t *testing.T) {
	d := t.TempDir()
	// The good input is a rank of a job (its folder and name say which):
	// a small real trace put where a job's rank 0 would be.
	src, err := os.ReadFile(filepath.Join("..", "traces", "conformance", "ring_mixed.fst"))
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(d, "train_ranks", "rank0.fst")
	if err := os.MkdirAll(filepath.Dir(good), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, src, 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(d, "corrupt.fst")
	os.WriteFile(corrupt, append([]byte(nil), append(src[:64:64], bytes.Repeat([]byte{0xff}, 4096)...)...), 0o644)
	cut := filepath.Join(d, "cut.fst")
	os.WriteFile(cut, src[:len(src)/2], 0o644)
	// A pickle that asks for os.system: refused, never run.
	hostile := filepath.Join(d, "hostile.pickle")
	os.WriteFile(hostile, []byte("cos\nsystem\n(S'touch "+filepath.Join(d, "pwned")+"'\ntR."), 0o644)
	// A snapshot taken at an OOM: exported from a trace with OOMs.
	oom := filepath.Join(d, "snapshot_oom_rank-0.pickle")
	var errb bytes.Buffer
	if code := cli.Main([]string{"fragsim", "export", "-q", "--format", "memory_viz", "-o", oom,
		filepath.Join("..", "traces", "conformance", "fraction_medium.fst")}, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("export: %s", errb.String())
	}
	pk, _ := os.ReadFile(oom)
	writeGzip(t, oom+".gz", pk)
	os.Remove(oom)

	inputs := []string{good, corrupt, cut, hostile, oom + ".gz"}
	rows, f, err := fleet.Run(inputs, fleet.Options{}, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	byInput := map[string]fleet.Row{}
	for _, r := range rows {
		byInput[r.Input] = r
	}
	for _, in := range []string{corrupt, cut, hostile} {
		if r := byInput[in]; r.Error == "" {
			t.Errorf("%s: no error in its row", in)
		}
	}
	if r := byInput[good]; r.Error != "" || r.Recommendation == nil || r.Job != "train_ranks" || r.Rank == nil || *r.Rank != 0 {
		t.Errorf("the good trace: %+v", r)
	}
	r := byInput[oom+".gz"]
	if r.Error != "" || r.OOM == nil || r.OOM.Class != "fragmentation" || r.Format != "pytorch" || r.Rank == nil || *r.Rank != 0 {
		t.Errorf("the OOM snapshot: error %q, oom %+v, format %s, rank %v", r.Error, r.OOM, r.Format, r.Rank)
	}
	if f.Failed != 3 || f.Analysed != 2 || f.OOMClasses["fragmentation"] != 1 {
		t.Errorf("fleet: failed %d analysed %d OOM classes %v, want 3, 2, fragmentation 1", f.Failed, f.Analysed, f.OOMClasses)
	}
	if _, err := os.Stat(filepath.Join(d, "pwned")); err == nil {
		t.Errorf("the hostile pickle ran a command")
	}
	left, _ := filepath.Glob(filepath.Join(d, ".fragsim-fleet-*"))
	if len(left) != 0 {
		t.Errorf("scratch traces left behind: %v", left)
	}
}

// TestReports checks --reports: the trace's report is written, and its
// row says where; two inputs of the same name have reports apart.
func TestReports(t *testing.T) {
	d := t.TempDir()
	dir := filepath.Join(d, "out", fleet.ReportsSub)
	a := filepath.Join("..", "traces", "conformance", "ring_mixed.fst")
	r := fleet.Analyze(a, fleet.Options{ReportsDir: dir}, d)
	if r.Error != "" || r.Report != fleet.ReportsSub+"/"+fleet.ReportName(a) {
		t.Fatalf("report %q (error %q), want %s/%s", r.Report, r.Error, fleet.ReportsSub, fleet.ReportName(a))
	}
	html, err := os.ReadFile(filepath.Join(d, "out", r.Report))
	if err != nil || !bytes.Contains(html, []byte(r.Recommendation.Line)) {
		t.Errorf("%s: %v; the report does not say the row's recommendation %q", r.Report, err, r.Recommendation.Line)
	}
	b := filepath.Join(d, "other", "conformance", "ring_mixed.fst")
	if fleet.ReportName(a) == fleet.ReportName(b) || !strings.HasPrefix(fleet.ReportName(b), "conformance_ring_mixed-") {
		t.Errorf("report names %s and %s: want apart, after the folder and the name", fleet.ReportName(a), fleet.ReportName(b))
	}
}
