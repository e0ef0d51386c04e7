package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

func runImportCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(append([]string{"fragsim", "import"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

const importTestdata = "../../trace/pytorch/testdata/"

func TestImportSnapshotJSON(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "basic.fst")
	code, stdout, stderr := runImportCLI(t, importTestdata+"basic.p5.pickle.gz", "-o", out, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	var sum struct {
		Events  int                       `json:"events"`
		Actions map[string]map[string]int `json:"actions"`
		Devices []int                     `json:"devices"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, stdout)
	}
	raw, err := os.ReadFile(importTestdata + "basic.expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var exp struct {
		Counts map[string]map[string]int `json:"counts"`
	}
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sum.Actions, exp.Counts) || !reflect.DeepEqual(sum.Devices, []int{0, 1}) {
		t.Errorf("summary actions %v devices %v, want %v", sum.Actions, sum.Devices, exp.Counts)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, evs, err := trace.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != sum.Events || h.Producer != trace.ProducerPyTorch {
		t.Errorf("trace has %d events (summary %d), producer %q", len(evs), sum.Events, h.Producer)
	}
}

func TestImportSnapshotText(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.fst")
	code, stdout, stderr := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	for _, want := range []string{"events:", "devices:     0", "starts mid-run: 3 segments", "empty_cache: 1 inferred"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, _ = runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", out, "--no-infer-empty-cache")
	if code != 0 || !strings.Contains(stdout, "empty_cache: 0 inferred") {
		t.Errorf("--no-infer-empty-cache: exit %d\n%s", code, stdout)
	}
}

func TestImportRefusesHostileAndTruncated(t *testing.T) {
	dir := t.TempDir()
	const pwned = "/tmp/fragsim-pickle-pwned"
	os.Remove(pwned)
	out := filepath.Join(dir, "evil.fst")
	code, stdout, stderr := runImportCLI(t, "../../trace/pickle/testdata/evil_reduce.p2.pickle", "-o", out)
	if code == 0 {
		t.Fatalf("hostile pickle imported: %s", stdout)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("the payload ran")
	}
	line := strings.TrimSpace(stderr)
	if strings.Count(line, "\n") != 0 || !strings.Contains(line, "evil_reduce.p2.pickle") || !strings.Contains(line, "byte offset") ||
		!strings.Contains(line, "GLOBAL") || !strings.Contains(line, "nothing was written") {
		t.Errorf("error %q: want one line naming the file, the offset and the opcode", line)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an output was written")
	}

	full, err := os.ReadFile(importTestdata + "empty_cache.p4.pickle")
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.pickle")
	if err := os.WriteFile(cut, full[:len(full)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runImportCLI(t, cut, "-o", out)
	line = strings.TrimSpace(stderr)
	if code == 0 || strings.Count(line, "\n") != 0 || !strings.Contains(line, "cut.pickle") || !strings.Contains(line, "byte offset") ||
		!strings.Contains(line, "kept the ") {
		t.Errorf("cut file: exit %d, stderr %q", code, line)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("no trace of the entries before the cut: %v", err)
	}
	defer f.Close()
	h, evs, err := trace.ReadAll(f)
	if err != nil || len(evs) == 0 || len(h.Approximate) == 0 {
		t.Errorf("kept trace: %d events, %v, approximate %v", len(evs), err, h.Approximate)
	}
	// Cut before any entry: nothing is written.
	os.Remove(out)
	if err := os.WriteFile(cut, full[:30], 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runImportCLI(t, cut, "-o", out)
	if code == 0 || !strings.Contains(stderr, "nothing was written") {
		t.Errorf("cut early: exit %d, stderr %q", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left behind: %v", entries)
	}
}

func TestImportRMM(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "log.txt")
	os.WriteFile(in, []byte("Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000001,allocate,0x100,64,0x0\n1,10:00:00.000002,free,0x100,64,0x0\n1,10:00:00.000003,allocate,0x100,64\n"), 0o644)
	out := filepath.Join(dir, "log.fst")
	code, _, stderr := runImportCLI(t, in, "-o", out)
	if code == 0 || !strings.Contains(stderr, "log.txt:4:") || !strings.Contains(stderr, "kept the 3 valid events") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, evs, err := trace.ReadAll(f)
	if err != nil || len(evs) != 3 || h.Producer != trace.ProducerRMM {
		t.Fatalf("kept trace: %d events, %v, %+v", len(evs), err, h)
	}
	code, _, stderr = runImportCLI(t, in, "-o", out, "--format", "pytorch")
	if code == 0 || !strings.Contains(stderr, "byte offset") {
		t.Errorf("forced pytorch format on a CSV: exit %d %q", code, stderr)
	}
	// A log with a byte-order mark, under a name that is not .csv, is
	// told from a snapshot by its first bytes.
	bom := filepath.Join(dir, "bom.log")
	os.WriteFile(bom, []byte("\ufeffThread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000001,allocate,0x100,64,0x0\n"), 0o644)
	if code, _, stderr := runImportCLI(t, bom, "-o", out); code != 0 {
		t.Errorf("a log with a byte-order mark: exit %d %q", code, stderr)
	}
}

// TestImportedRealSnapshotsReplayExactly imports real H200 snapshots and
// replays them through PyTorch's caching allocator: every allocation lands
// at its recorded address and every device event is matched, which checks
// the import end to end (the ring-buffer run's rebuilt initial state and
// the inferred empty_cache() calls included).
func TestImportedRealSnapshotsReplayExactly(t *testing.T) {
	fid := regexp.MustCompile(`fidelity: (\d+)/(\d+) allocs at recorded address, (\d+)/(\d+) device events matched`)
	for _, name := range []string{"ring", "empty_cache", "expandable_empty", "streams"} {
		dir := t.TempDir()
		out := filepath.Join(dir, name+".fst")
		code, stdout, stderr := runImportCLI(t, importTestdata+"real/"+name+".pickle.gz", "-o", out, "-q")
		if code != 0 {
			t.Fatalf("%s: import exit %d: %s%s", name, code, stdout, stderr)
		}
		var o, e bytes.Buffer
		if code := Main([]string{"fragsim", "replay", out, "--capacity", "h200"}, &o, &e); code != 0 {
			t.Fatalf("%s: replay exit %d: %s", name, code, e.String())
		}
		m := fid.FindStringSubmatch(o.String())
		if m == nil {
			t.Fatalf("%s: no fidelity line in\n%s", name, o.String())
		}
		if m[1] != m[2] || m[3] != m[4] || m[1] == "0" {
			t.Errorf("%s: %s", name, m[0])
		}
	}
}

// TestEmptyCacheInferenceMatters replays the empty_cache() run imported
// without the inference: the real allocator's releases cannot be
// reproduced, so the replay departs from the recorded addresses.
func TestEmptyCacheInferenceMatters(t *testing.T) {
	fid := regexp.MustCompile(`fidelity: (\d+)/(\d+) allocs at recorded address`)
	out := filepath.Join(t.TempDir(), "noec.fst")
	if code, stdout, stderr := runImportCLI(t, importTestdata+"real/empty_cache.pickle.gz", "-o", out, "-q", "--no-infer-empty-cache"); code != 0 {
		t.Fatalf("import exit %d: %s%s", code, stdout, stderr)
	}
	var o, e bytes.Buffer
	if code := Main([]string{"fragsim", "replay", out, "--capacity", "h200"}, &o, &e); code != 0 {
		t.Fatalf("replay exit %d: %s", code, e.String())
	}
	m := fid.FindStringSubmatch(o.String())
	if m == nil || m[1] == m[2] {
		t.Errorf("without inferred empty_cache() calls the replay still matches: %q", o.String())
	}
}

func TestImportHeaderFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "meta.fst")
	_, stderr, code := runCLI("import", "-q", "-o", out, "--gpu", "NVIDIA H200", "--gpu-total", "h200",
		"--torch", "2.11.0+cu130", "--tag", "wall_native_s=1.31", "--tag", "seed=1", "../../trace/pytorch/testdata/basic.p5.pickle")
	if code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	f, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	if h.GPUName != "NVIDIA H200" || h.GPUTotalBytes != 150109880320 || h.TorchVersion != "2.11.0+cu130" ||
		h.Tags["wall_native_s"] != "1.31" || h.Tags["seed"] != "1" || h.Producer != trace.ProducerPyTorch {
		t.Errorf("header %+v", h)
	}
	if h.Created.IsZero() {
		t.Errorf("header has no date; want the first entry's")
	}
	if _, stderr, code := runCLI("import", "-o", out, "--tag", "novalue", "../../trace/pytorch/testdata/basic.p5.pickle"); code != 2 || !strings.Contains(stderr, "KEY=VALUE") {
		t.Errorf("bad --tag: exit %d, %q", code, stderr)
	}
}

// noGCEnv sets the collector to its defaults for the test (GOGC 100, no
// memory limit: what pytorch.TuneGC tunes) and returns the percent.
func noGCEnv(t *testing.T) int {
	pct := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(limit)
	})
	return 100
}

// gcWriter records the collector's percent at each write.
type gcWriter struct{ pcts []int }

func (w *gcWriter) Write(p []byte) (int, error) {
	pct := debug.SetGCPercent(-1)
	debug.SetGCPercent(pct)
	w.pcts = append(w.pcts, pct)
	return len(p), nil
}

// TestImportGCUntilOutput checks that the command turns the collector
// back on only after its summary is written (turned on with the import's
// heap live, it started a collection while the summary was printed), and
// that it is back on when the command returns.
func TestImportGCUntilOutput(t *testing.T) {
	pct := noGCEnv(t)
	for _, asJSON := range []bool{false, true} {
		args := []string{"fragsim", "import", importTestdata + "basic.p5.pickle", "-o", filepath.Join(t.TempDir(), "o.fst")}
		if asJSON {
			args = append(args, "--json")
		}
		w := &gcWriter{}
		if rc := Main(args, w, io.Discard); rc != 0 {
			t.Fatalf("JSON %v: exit %d", asJSON, rc)
		}
		if len(w.pcts) == 0 {
			t.Fatalf("JSON %v: no output", asJSON)
		}
		for i, p := range w.pcts {
			if p != -1 {
				t.Errorf("JSON %v: write %d with the collector at %d%%, want off", asJSON, i, p)
			}
		}
		if got := debug.SetGCPercent(pct); got != pct {
			t.Errorf("JSON %v: percent %d after the command, was %d", asJSON, got, pct)
		}
	}
}

// TestImportStdinAndSameFile checks that `import -` reads the snapshot
// from standard input (the same trace as from the file), and that an
// output that is the input, by its name or a link to it, is refused with
// exit 2 and the snapshot left as it was.
func TestImportStdinAndSameFile(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "s.pickle.gz")
	data, err := os.ReadFile("../../trace/pytorch/testdata/real/ring.pickle.gz")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snap, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile := filepath.Join(dir, "file.fst")
	if _, stderr, code := runCLI("import", "-q", snap, "-o", fromFile); code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	f, err := os.Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer func(old *os.File) { os.Stdin = old }(os.Stdin)
	os.Stdin = f
	fromStdin := filepath.Join(dir, "stdin.fst")
	_, stderr, code := runCLI("import", "-q", "-", "-o", fromStdin)
	f.Close()
	if code != 0 {
		t.Fatalf("import -: exit %d: %s", code, stderr)
	}
	a, _ := os.ReadFile(fromFile)
	b, _ := os.ReadFile(fromStdin)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("import - wrote %d bytes, from the file %d", len(b), len(a))
	}
	link := filepath.Join(dir, "link.pickle.gz")
	if err := os.Symlink(snap, link); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{snap, link} {
		_, stderr, code := runCLI("import", "-q", snap, "-o", out)
		if code != 1 || !strings.Contains(stderr, "is the input") {
			t.Errorf("import %s -o %s: exit %d, %q; want 1 and a refusal", snap, out, code, stderr)
		}
	}
	if now, _ := os.ReadFile(snap); !bytes.Equal(now, data) {
		t.Fatal("the snapshot was changed")
	}
}

// TestImportAdvice checks the summary's advice: a snapshot whose release
// bursts look like a capped run's retries or garbage collection, imported
// without a cap, names the flags and estimates the fraction from the peak
// reserved and the GPU's memory (gc_threshold ran at 0.0107 of an H200);
// given the cap, it says nothing; a bad fraction is refused.
func TestImportAdvice(t *testing.T) {
	snap := "../../trace/pytorch/testdata/real/gc_threshold.pickle.gz"
	out := filepath.Join(t.TempDir(), "t.fst")
	stdout, stderr, code := runCLI("import", "-q", "--gpu-total", "h200", snap, "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "import with --memory-fraction 0.0107 --gpu-total 150109880320") {
		t.Errorf("no advice naming the flags:\n%s", stdout)
	}
	stdout, _, _ = runCLI("import", "-q", snap, "-o", out)
	if !strings.Contains(stdout, "import with --memory-fraction F --gpu-total NAME") {
		t.Errorf("without the GPU's memory, no advice naming the flags:\n%s", stdout)
	}
	stdout, _, _ = runCLI("import", "-q", "--gpu-total", "h200", "--memory-fraction", "0.0107", snap, "-o", out)
	if strings.Contains(stdout, "advice:") {
		t.Errorf("advice given with the cap known:\n%s", stdout)
	}
	for _, f := range []string{"NaN", "Inf", "-0.5", "1.5"} {
		if _, stderr, code := runCLI("import", "-q", "--memory-fraction", f, snap, "-o", out); code != 2 || !strings.Contains(stderr, "--memory-fraction") {
			t.Errorf("--memory-fraction %s: exit %d, %q; want 2", f, code, stderr)
		}
	}
}

// TestImportStateOnly checks that a snapshot without trace entries (an
// OOM handler's) imports its segments as the trace's initial state, and
// that the summary says how to record one that allows what-ifs.
func TestImportStateOnly(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.fst")
	code, stdout, stderr := runImportCLI(t, "-q", importTestdata+"state_only.p4.pickle", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, `torch.cuda.memory._record_memory_history(enabled="all"`) ||
		!strings.Contains(stdout, "2 segments, 4 blocks, 22.0 MiB reserved") {
		t.Errorf("summary:\n%s", stdout)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, evs, err := trace.ReadAll(f)
	if err != nil || len(evs) != 0 || h.Initial == nil || len(h.Initial.Segments) != 2 {
		t.Fatalf("trace: %v, %d events, initial %+v", err, len(evs), h.Initial)
	}
}

// A snapshot given as a FIFO (or a pipe, <(cat s.pickle)) is read once:
// the import once read its first bytes to tell its format, then found
// the rest "corrupt".
func TestImportFromFIFO(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(importTestdata + "midrun.p4.pickle")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("no fifo: %v", err)
	}
	go func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Write(data)
			f.Close()
		}
	}()
	out := filepath.Join(dir, "out.fst")
	if code, o, errs := runImportCLI(t, p, "-o", out, "-q"); code != 0 || !strings.Contains(o, "events:      11") {
		t.Fatalf("exit %d: %s%s", code, o, errs)
	}
}
