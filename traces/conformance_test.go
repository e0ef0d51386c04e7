package traces_test

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

var update = flag.Bool("update", false, "rewrite exactness.txt from this run's outcomes")

// corpusCase is one case of conformance/cases.json: a seeded random program
// (traces/workloads/conformance.py) recorded on the GPU, with the real
// allocator's own counters from the same run.
type corpusCase struct {
	Dir      string   `json:"-"` // the manifest's folder
	Name     string   `json:"name"`
	Features []string `json:"features"`
	Conf     string   `json:"conf"`
	WhatIfOf string   `json:"whatif_of"`
	Live     bool     `json:"live"`
	Real     struct {
		ReservedPeak   uint64 `json:"reserved_peak"`
		NumDeviceAlloc int64  `json:"num_device_alloc"`
	} `json:"real"`
}

// outcome is what one check of one case gave: "exact", or what differed.
type outcome struct {
	exact bool
	diff  string
}

// TestConformanceCorpus replays every case of the conformance corpus and
// compares each check with exactness.txt:
//   - snapshot: the snapshot replayed under its recorded settings puts every
//     allocation at the recorded address, matches every recorded device
//     event, and peaks at the real run's peak reserved;
//   - live: the live recording of the same seed, replayed under the same
//     settings, peaks at the real run's peak reserved with the real number
//     of device allocations;
//   - whatif: the snapshot of the case named by whatif_of, replayed under this
//     case's settings, peaks at this case's real peak reserved with its
//     number of device allocations.
//
// A check listed as diverging must still diverge and an exact one stay exact:
// a fix moves a line of expect.txt (go test -run Conformance -update), and a
// regression fails. The corpus is wide on purpose; its failing cases are
// the project's open exactness work.
//
// The everyday pass replays the cases coverCases picks, and checks that
// exactness.txt lists every check of the corpus and no other; the long
// pass (FRAGSIM_LONG=1) and -update replay every case.
func TestConformanceCorpus(t *testing.T) {
	cases := loadCases(t, "conformance")
	if len(cases) < 40 {
		t.Fatalf("%d cases, the corpus holds at least 40", len(cases))
	}
	// The serving workloads (graphs.py, silent_oom.py) are checked the same way.
	cases = append(cases, loadCases(t, "serving")...)
	want, reasons, err := readExpect("exactness.txt")
	if err != nil && !*update {
		t.Fatal(err)
	}
	all := map[string]bool{} // every check of the corpus, replayed or not
	for _, c := range cases {
		for _, k := range c.checks() {
			all[c.key()+" "+k] = true
		}
	}
	if !longTests() && !*update {
		cases = coverCases(t, cases, want)
	}
	got := map[string]outcome{}
	for _, c := range cases {
		key := c.key()
		if c.WhatIfOf == "" {
			got[key+" snapshot"] = checkSnapshot(t, c)
			if c.Live {
				got[key+" live"] = checkLive(t, c)
			}
		} else {
			got[key+" whatif"] = checkWhatIf(t, c)
		}
	}
	if *update {
		if err := writeExpect("exactness.txt", got, reasons); err != nil {
			t.Fatal(err)
		}
		return
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	exact := 0
	for _, k := range keys {
		o := got[k]
		w, ok := want[k]
		switch {
		case !ok:
			t.Errorf("%s: not in expect.txt (got %s)", k, o.String())
		case w && !o.exact:
			t.Errorf("%s: was exact, now %s", k, o.diff)
		case !w && o.exact:
			t.Errorf("%s: listed as diverging (%s) but is exact now: run with -update", k, reasons[k])
		}
		if o.exact {
			exact++
		} else {
			t.Logf("%s: %s", k, o.diff) // go test -v shows how far each divergence is
		}
	}
	for k := range all {
		if _, ok := want[k]; !ok && got[k] == (outcome{}) {
			t.Errorf("%s: not in expect.txt (not replayed: run with FRAGSIM_LONG=1 -update)", k)
		}
	}
	for k := range want {
		if !all[k] {
			t.Errorf("%s: in expect.txt but not in the corpus", k)
		}
	}
	t.Logf("%d of %d checks exact (%d checks in the corpus)", exact, len(got), len(all))
}

// key names a case in exactness.txt.
func (c corpusCase) key() string { return c.Dir + "/" + c.Name }

// checks returns the checks of a case: snapshot, and live when it was
// recorded live too; whatif for a what-if case.
func (c corpusCase) checks() []string {
	switch {
	case c.WhatIfOf != "":
		return []string{"whatif"}
	case c.Live:
		return []string{"snapshot", "live"}
	}
	return []string{"snapshot"}
}

// traceBytes returns the size of the traces a case's checks replay.
func (c corpusCase) traceBytes(t *testing.T) int64 {
	t.Helper()
	var n int64
	for _, k := range c.checks() {
		name := c.Name + ".fst"
		switch k {
		case "live":
			name = c.Name + ".live.fst"
		case "whatif":
			name = c.WhatIfOf + ".fst"
		}
		st, err := os.Stat(filepath.Join(c.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

// coverCases returns the cases the everyday pass replays (see longTests):
// from the smallest traces up, each case that brings something no case
// taken before it brings: its folder, a feature, its allocator settings
// (conf, as a whole), a check, or a check with an expected outcome
// (exact, or diverging). About a quarter of the cases, a seventh of the
// corpus's bytes.
func coverCases(t *testing.T, cases []corpusCase, want map[string]bool) []corpusCase {
	t.Helper()
	size := map[string]int64{}
	for _, c := range cases {
		size[c.key()] = c.traceBytes(t)
	}
	sorted := slices.Clone(cases)
	slices.SortStableFunc(sorted, func(a, b corpusCase) int { return cmp.Compare(size[a.key()], size[b.key()]) })
	met := map[string]bool{}
	var out []corpusCase
	for _, c := range sorted {
		tags := []string{"dir " + c.Dir, "conf " + c.Conf}
		for _, f := range c.Features {
			tags = append(tags, "feature "+f)
		}
		for _, k := range c.checks() {
			tags = append(tags, "check "+k, fmt.Sprintf("check %s exact %v", k, want[c.key()+" "+k]))
		}
		adds := false
		for _, tag := range tags {
			adds = adds || !met[tag]
			met[tag] = true
		}
		if adds {
			out = append(out, c)
		}
	}
	return out
}

// loadCases reads dir/cases.json.
func loadCases(t *testing.T, dir string) []corpusCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Cases []corpusCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s/cases.json: %v", dir, err)
	}
	for i := range m.Cases {
		m.Cases[i].Dir = dir
	}
	return m.Cases
}

func (o outcome) String() string {
	if o.exact {
		return "exact"
	}
	return o.diff
}

func run(t *testing.T, path, conf string) (*replay.Result, error) {
	t.Helper()
	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fac, err := allocator.NewFactory("caching", conf, f.Reader.Header())
	if err != nil {
		t.Fatal(err)
	}
	return replay.Run(f.Reader, fac, replay.Config{})
}

func checkSnapshot(t *testing.T, c corpusCase) outcome {
	res, err := run(t, filepath.Join(c.Dir, c.Name+".fst"), "")
	if err != nil {
		return outcome{diff: err.Error()}
	}
	fd := res.Fidelity
	if !fd.Checked || fd.AllocsAtRecordedAddress != fd.Allocs || fd.DeviceEventsMatched != fd.DeviceEvents {
		return outcome{diff: fmt.Sprintf("%d/%d allocs at the recorded address, %d/%d device events",
			fd.AllocsAtRecordedAddress, fd.Allocs, fd.DeviceEventsMatched, fd.DeviceEvents)}
	}
	return peaks(res, c)
}

func checkLive(t *testing.T, c corpusCase) outcome {
	res, err := run(t, filepath.Join(c.Dir, c.Name+".live.fst"), c.Conf)
	if err != nil {
		return outcome{diff: err.Error()}
	}
	return peaks(res, c)
}

func checkWhatIf(t *testing.T, c corpusCase) outcome {
	res, err := run(t, filepath.Join(c.Dir, c.WhatIfOf+".fst"), c.Conf)
	if err != nil {
		return outcome{diff: err.Error()}
	}
	return peaks(res, c)
}

func peaks(res *replay.Result, c corpusCase) outcome {
	// A ring buffer that starts mid-run leaves out the segments made before
	// its first event: the real run's device allocations cannot be compared.
	devOK := res.DeviceAllocs == c.Real.NumDeviceAlloc || hasFeature(c, "ring")
	if res.PeakReservedBytes != c.Real.ReservedPeak || !devOK {
		return outcome{diff: fmt.Sprintf("peak reserved %d, real %d (%+.2f%%); %d device allocs, real %d",
			res.PeakReservedBytes, c.Real.ReservedPeak,
			100*(float64(res.PeakReservedBytes)-float64(c.Real.ReservedPeak))/float64(c.Real.ReservedPeak),
			res.DeviceAllocs, c.Real.NumDeviceAlloc)}
	}
	return outcome{exact: true}
}

func hasFeature(c corpusCase, f string) bool {
	for _, x := range c.Features {
		if x == f {
			return true
		}
	}
	return false
}

// readExpect reads expect.txt: one check a line, "CASE CHECK exact" or
// "CASE CHECK diverges # why", '#' starting a comment.
func readExpect(path string) (map[string]bool, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	want, reasons := map[string]bool{}, map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, why, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 || (fields[2] != "exact" && fields[2] != "diverges") {
			return nil, nil, fmt.Errorf("%s:%d: want \"CASE CHECK exact|diverges\", got %q", path, n, sc.Text())
		}
		k := fields[0] + " " + fields[1]
		want[k] = fields[2] == "exact"
		reasons[k] = strings.TrimSpace(why)
	}
	return want, reasons, sc.Err()
}

func writeExpect(path string, got map[string]outcome, reasons map[string]string) error {
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# The conformance corpus's expected outcomes (TestConformanceCorpus; -update rewrites).\n")
	b.WriteString("# CASE CHECK exact|diverges # why it diverges\n")
	for _, k := range keys {
		o := got[k]
		if o.exact {
			fmt.Fprintf(&b, "%s exact\n", k)
			continue
		}
		why := reasons[k]
		if why == "" {
			why = "new: " + o.diff
		}
		fmt.Fprintf(&b, "%s diverges # %s\n", k, why)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
