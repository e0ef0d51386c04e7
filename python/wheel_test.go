// Package python_test builds the fragsim wheel, installs it into a fresh
// virtual environment and checks the Python side: the binary as a script,
// python -m fragsim, the API against the command line, the OOM observer
// against a fake torch, and recording through fragsim.recording().
package python_test

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/internal/cli"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/monitor"
	"github.com/fragsim/fragsim/trace"
)

// env is what the tests share, made once per test binary.
var env struct {
	once  sync.Once
	dir   string // temporary directory of everything below
	wheel string // the built wheel
	venv  string // the virtual environment it is installed in
	skip  string
	err   error
}

// setup builds the wheel and installs it into a fresh venv with pip
// --no-index, once. Without python3 or its venv module the tests skip,
// except under CI=true, where they fail.
func setup(t *testing.T) {
	t.Helper()
	env.once.Do(func() {
		if _, err := exec.LookPath("python3"); err != nil {
			env.skip = "python3 not found"
			return
		}
		d, err := os.MkdirTemp("", "fragsim-wheel-test")
		if err != nil {
			env.err = err
			return
		}
		env.dir = d
		env.venv = filepath.Join(d, "venv")
		// With a pip of its own that can install into another environment
		// (pip 22.3's --python), python3 installs the wheel into a venv
		// made without pip: ensurepip, installing pip into the venv, took
		// as much CPU as building the wheel. Otherwise the venv's own pip
		// installs it.
		pip := []string{"python3", "-m", "pip", "--python", filepath.Join(env.venv, "bin", "python")}
		venvArgs := []string{"-m", "venv", "--without-pip", env.venv}
		if !pipHasPython(exec.Command("python3", "-m", "pip", "--version")) {
			pip = []string{filepath.Join(env.venv, "bin", "pip")}
			venvArgs = []string{"-m", "venv", env.venv}
		}
		if out, err := exec.Command("python3", venvArgs...).CombinedOutput(); err != nil {
			env.skip = fmt.Sprintf("python3 -m venv failed (on Debian: apt-get install python3-venv): %v\n%s", err, out)
			return
		}
		dist := filepath.Join(d, "dist")
		out, err := exec.Command("python3", "build_wheel.py", "-o", dist).CombinedOutput()
		if err != nil {
			env.err = fmt.Errorf("build_wheel.py: %v\n%s", err, out)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		env.wheel = lines[len(lines)-1]
		if out, err := exec.Command(pip[0], append(pip[1:], "install", "--no-index", "-q", env.wheel)...).CombinedOutput(); err != nil {
			env.err = fmt.Errorf("pip install --no-index: %v\n%s", err, out)
		}
	})
	if env.skip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(env.skip + ": CI installs python3-venv")
		}
		t.Skip(env.skip)
	}
	if env.err != nil {
		t.Fatal(env.err)
	}
}

// pipHasPython says whether the pip that cmd runs with --version is 22.3
// or later, which has --python.
func pipHasPython(cmd *exec.Cmd) bool {
	out, err := cmd.Output()
	if err != nil {
		return false
	}
	m := regexp.MustCompile(`^pip (\d+)\.(\d+)`).FindSubmatch(out)
	if m == nil {
		return false
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	return major > 22 || major == 22 && minor >= 3
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env.dir != "" {
		os.RemoveAll(env.dir)
	}
	os.Exit(code)
}

// venv runs a program of the virtual environment's bin/ with extra
// environment variables, and returns its stdout and stderr.
func venv(t *testing.T, extra []string, name string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.venv, "bin", name), args...)
	cmd.Env = append(os.Environ(), extra...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

// TestWheelContents checks the wheel's name, what it holds, its RECORD
// (every file with its sha256 and size, as pip verifies them) and that
// python -m zipfile lists it. The sizes and hashes of the two large
// entries (the binary and the hook, 25 MiB) are testdata/wheelfiles.py's,
// which reads the wheel with Python's zipfile: inflating and hashing them
// here, under the race detector, cost more than the rest of the package's
// checks. This test hashes the small entries itself and checks that the
// two readers agree on them.
func TestWheelContents(t *testing.T) {
	setup(t)
	name := filepath.Base(env.wheel)
	m := regexp.MustCompile(`^fragsim-([0-9.]+)-py3-none-(manylinux_2_(\d+)_x86_64)\.whl$`).FindStringSubmatch(name)
	if m == nil || m[1] != cli.Version {
		t.Fatalf("wheel %s: want fragsim-%s-py3-none-manylinux_2_N_x86_64.whl", name, cli.Version)
	}
	const hookPath = "fragsim/lib/libfragsim_hook.so"
	lib := filepath.Join(t.TempDir(), "hook.so")
	out, err := exec.Command("python3", "testdata/wheelfiles.py", env.wheel, lib, hookPath).Output()
	if err != nil {
		t.Fatalf("wheelfiles.py: %v", err)
	}
	var entries []struct {
		Name, Sha256 string
		Size         int
		Exe          bool
	}
	if err := json.Unmarshal(out, &entries); err != nil {
		t.Fatalf("wheelfiles.py: %v: %s", err, out)
	}
	type figures struct {
		sum  string
		size int
		exe  bool
	}
	files := map[string]figures{}
	for _, e := range entries {
		files[e.Name] = figures{e.Sha256, e.Size, e.Exe}
	}
	z, err := zip.OpenReader(env.wheel)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	info := "fragsim-" + cli.Version + ".dist-info/"
	small := map[string][]byte{} // the entries under 1 MiB, as archive/zip reads them
	for _, f := range z.File {
		py, ok := files[f.Name]
		exe := f.Mode()&0o111 != 0
		if !ok || py.exe != exe {
			t.Errorf("%s: archive/zip reads executable %v, wheelfiles.py %+v", f.Name, exe, py)
		}
		if wantExe := strings.HasSuffix(f.Name, "/scripts/fragsim") || strings.HasSuffix(f.Name, ".so"); exe != wantExe {
			t.Errorf("%s: executable %v, want %v", f.Name, exe, wantExe)
		}
		if f.UncompressedSize64 >= 1<<20 {
			continue
		}
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		small[f.Name] = b
		sum := sha256.Sum256(b)
		if s := "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:]); s != py.sum || len(b) != py.size {
			t.Errorf("%s: archive/zip reads %s %d, wheelfiles.py %s %d", f.Name, s, len(b), py.sum, py.size)
		}
	}
	if len(z.File) != len(files) {
		t.Errorf("archive/zip reads %d entries, wheelfiles.py %d", len(z.File), len(files))
	}
	for _, p := range []string{"fragsim-" + cli.Version + ".data/scripts/fragsim", hookPath,
		"fragsim/__init__.py", "fragsim/__main__.py", "fragsim/_hook/fragsim_hook.py", info + "WHEEL", info + "METADATA"} {
		if _, ok := files[p]; !ok {
			t.Errorf("the wheel lacks %s", p)
		}
	}
	if !strings.Contains(string(small[info+"WHEEL"]), "Tag: py3-none-"+m[2]+"\n") {
		t.Errorf("WHEEL:\n%s\nwant the tag %s", small[info+"WHEEL"], m[2])
	}
	rows, err := csv.NewReader(bytes.NewReader(small[info+"RECORD"])).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, row := range rows {
		listed[row[0]] = true
		if row[0] == info+"RECORD" {
			if row[1] != "" || row[2] != "" {
				t.Errorf("RECORD lists itself with a hash: %v", row)
			}
			continue
		}
		f, ok := files[row[0]]
		if !ok {
			t.Errorf("RECORD lists %s, which the wheel lacks", row[0])
			continue
		}
		if row[1] != f.sum || row[2] != strconv.Itoa(f.size) {
			t.Errorf("RECORD %s: %s %s, the file has %s %d", row[0], row[1], row[2], f.sum, f.size)
		}
	}
	for p := range files {
		if !listed[p] {
			t.Errorf("RECORD does not list %s", p)
		}
	}
	out, err = exec.Command("python3", "-m", "zipfile", "-l", env.wheel).CombinedOutput()
	if err != nil || !strings.Contains(string(out), hookPath) {
		t.Errorf("python3 -m zipfile -l: %v\n%s", err, out)
	}
	// The tag is honest: the hook needs no newer glibc than it says.
	if _, err := exec.LookPath("objdump"); err == nil {
		out, err := exec.Command("objdump", "-T", lib).Output()
		if err != nil {
			t.Fatal(err)
		}
		tagged, _ := strconv.Atoi(m[3])
		for _, v := range regexp.MustCompile(`GLIBC_2\.(\d+)`).FindAllStringSubmatch(string(out), -1) {
			if n, _ := strconv.Atoi(v[1]); n > tagged {
				t.Errorf("the hook needs GLIBC_2.%d, the wheel says manylinux_2_%d", n, tagged)
			}
		}
	}
}

// TestInstalledCommand runs the installed script and python -m fragsim.
func TestInstalledCommand(t *testing.T) {
	setup(t)
	out, errOut, err := venv(t, nil, "fragsim", "--version")
	if err != nil || !strings.HasPrefix(out, "fragsim version "+cli.Version) {
		t.Errorf("fragsim --version: %v, %q %s", err, out, errOut)
	}
	out, errOut, err = venv(t, nil, "python", "-m", "fragsim", "--version")
	if err != nil || !strings.HasPrefix(out, "fragsim version "+cli.Version) {
		t.Errorf("python -m fragsim --version: %v, %q %s", err, out, errOut)
	}
	out, errOut, err = venv(t, nil, "python", "-m", "fragsim", "compare")
	if err != nil || !strings.Contains(out, "Recommended: ") || !strings.Contains(out, "Fragmentation after:") {
		t.Errorf("python -m fragsim compare: %v\n%s%s", err, out, errOut)
	}
	if _, errOut, err = venv(t, nil, "python", "-m", "fragsim", "replay"); exitCode(err) != 2 || !strings.Contains(errOut, "replay") {
		t.Errorf("python -m fragsim replay (no trace): %v, want exit 2\n%s", err, errOut)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestAPI checks that the Python API gives what the command line gives:
// the recommendation of compare and analyze on the real traces, for two
// goals; a snapshot dict piped to import; and fragsim.Error. The script
// runs the installed fragsim command too and reads its --json with
// Python's json: compare prints some 13 MB of JSON a trace, which the
// race-instrumented decoder here took seconds a run to read.
func TestAPI(t *testing.T) {
	setup(t)
	// Two real traces, one under the default goal, one under a fit goal
	// (its min capacities take a bisection each), and with FRAGSIM_LONG=1
	// the second under the default goal too: small ones of the
	// conformance corpus (one with OOMs), so that the suite stays quick.
	// The first case's result also renders the HTML: goal reserved is
	// compare's default.
	cases := []string{"../traces/conformance/plain_mixed.fst|reserved", "../traces/conformance/fraction_medium.fst|fit:1536MiB"}
	if os.Getenv("FRAGSIM_LONG") == "1" {
		cases = append(cases, "../traces/conformance/fraction_medium.fst|reserved")
	}
	snap := "../trace/pytorch/testdata/basic.p5.pickle"
	imported := filepath.Join(t.TempDir(), "basic.fst")
	if _, errOut, err := venv(t, nil, "fragsim", "import", "-q", snap, "-o", imported); err != nil {
		t.Fatal(errOut)
	}
	script := `
import json, pickle, subprocess, sys
import fragsim
snap, imported, fragsim_cmd = sys.argv[1:4]
def cli(*args):
    p = subprocess.run([fragsim_cmd, *args, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit("fragsim %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr.decode()))
    return json.loads(p.stdout)
api, cmd = {}, {}
for case in sys.argv[4:]:
    path, goal = case.split("|")
    api[case] = fragsim.compare(path, goal=goal)
    cmd[case] = cli("compare", path, "--goal", goal)
path = sys.argv[4].split("|")[0]
api["analyze"] = fragsim.analyze(path, goal="fragmentation", no_advice=False)
cmd["analyze"] = cli("analyze", path, "--goal", "fragmentation")
with open(snap, "rb") as f:
    api["dict"] = fragsim.compare(pickle.load(f))
cmd["dict"] = cli("compare", imported)
out = {"api": {k: v["recommendation"] for k, v in api.items()}, "cli": {k: v["recommendation"] for k, v in cmd.items()}}
out["html"] = api[sys.argv[4]]._repr_html_()
try:
    fragsim.replay(path, policy="nosuch")
except fragsim.Error as e:
    out["error"] = [e.message, e.code]
print(json.dumps(out))
`
	args := append([]string{"-c", script, snap, imported, filepath.Join(env.venv, "bin", "fragsim")}, cases...)
	out, errOut, err := venv(t, nil, "python", args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var got struct {
		API, CLI map[string]json.RawMessage
		HTML     string
		Error    []any
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, name := range append(cases, "analyze", "dict") {
		var a, b any
		json.Unmarshal(got.API[name], &a)
		json.Unmarshal(got.CLI[name], &b)
		if fmt.Sprint(a) != fmt.Sprint(b) || a == nil {
			t.Errorf("%s: the API recommends\n%s\nthe command line\n%s", name, got.API[name], got.CLI[name])
		}
	}
	var rec struct {
		Line string `json:"line"`
	}
	json.Unmarshal(got.CLI[cases[0]], &rec)
	if rec.Line == "" || !strings.Contains(got.HTML, "<table>") || !strings.Contains(got.HTML, rec.Line) {
		t.Errorf("_repr_html_ lacks the table or the line %q:\n%s", rec.Line, got.HTML)
	}
	if e := got.Error; len(e) != 2 || !strings.Contains(fmt.Sprint(e[0]), "nosuch") || e[1] != 2.0 {
		t.Errorf("fragsim.Error: %v, want the message naming the policy and exit 2", e)
	}
}

// oomRun runs testdata/oom.py with the fake torch on the snapshot, the
// device figures and the observer's arguments; it returns the
// explanation the observer kept and the lines it printed.
func oomRun(t *testing.T, snapshot string, free, total, alloc, deviceAlloc uint64, extra ...string) (map[string]any, []string) {
	t.Helper()
	fake, _ := filepath.Abs("testdata/faketorch")
	dir := t.TempDir()
	e := []string{"PYTHONPATH=" + fake, "PYTHONDONTWRITEBYTECODE=1", "FAKE_SNAPSHOT=" + snapshot,
		fmt.Sprintf("FAKE_MEM_INFO=%d,%d", free, total)}
	out, errOut, err := venv(t, append(e, extra...), "python", "testdata/oom.py", dir, "0",
		fmt.Sprint(alloc), fmt.Sprint(deviceAlloc), fmt.Sprint(free))
	if err != nil {
		t.Fatalf("oom.py: %v\n%s", err, errOut)
	}
	var x map[string]any
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatalf("%v: %q\n%s", err, out, errOut)
	}
	return x, strings.Split(strings.TrimSpace(errOut), "\n")
}

// TestOOMObserverState explains an OOM whose snapshot holds the state
// alone, with known fragmentation (testdata/fragmented.py: 36 MiB free in
// blocks of at most 8 MiB), a 12 MiB request failing: the printed figures
// are analyze's (its state report) and explain's.
func TestOOMObserverState(t *testing.T) {
	setup(t)
	snap := filepath.Join(t.TempDir(), "fragmented.pickle")
	if out, err := exec.Command("python3", "testdata/fragmented.py", snap).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const mib = 1 << 20
	x, lines := oomRun(t, snap, 100*mib, 1<<30, 12*mib, 1<<30)
	if len(lines) > 6 {
		t.Errorf("%d lines, want at most 6:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	// analyze's figures of the same snapshot.
	imported := filepath.Join(t.TempDir(), "s.fst")
	if _, errOut, err := venv(t, nil, "fragsim", "import", "-q", snap, "-o", imported); err != nil {
		t.Fatal(errOut)
	}
	out, errOut, err := venv(t, nil, "fragsim", "analyze", imported, "--json")
	if err != nil {
		t.Fatal(errOut)
	}
	var a struct {
		State struct {
			Reserved uint64 `json:"reserved_bytes"`
			Active   uint64 `json:"active_bytes"`
			Largest  uint64 `json:"largest_free_bytes"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatal(err)
	}
	if a.State.Reserved != 60*mib || a.State.Active != 24*mib || a.State.Largest != 8*mib {
		t.Fatalf("analyze: %+v, want the snapshot's 60 MiB reserved, 24 MiB active, 8 MiB largest", a.State)
	}
	text := strings.Join(lines, "\n")
	outside := uint64(1<<30) - 60*mib - 100*mib
	for _, want := range []string{
		"PyTorch tried to allocate " + analysis.FmtBytes(12*mib),
		"largest free block " + analysis.FmtBytes(a.State.Largest),
		analysis.FmtBytes(a.State.Reserved-a.State.Active) + " free in PyTorch's cache",
		analysis.FmtBytes(a.State.Reserved) + " reserved",
		"fragmentation: ",
		analysis.FmtBytes(outside) + " outside the allocator",
		"the snapshot holds the state only",
		"snapshot " + x["snapshot"].(string),
		"report " + fmt.Sprint(x["report"]),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the observer's lines lack %q:\n%s", want, text)
		}
	}
	if x["class"] != "fragmentation" || x["cached_free_bytes"] != float64(36*mib) || x["outside_bytes"] != float64(outside) {
		t.Errorf("explanation %v", x)
	}
	if _, err := os.Stat(fmt.Sprint(x["report"])); err != nil {
		t.Errorf("the report: %v", err)
	}

	// The observer never raises: with no fragsim to run, one line says why
	// and the program still gets its OutOfMemoryError.
	fake, _ := filepath.Abs("testdata/faketorch")
	_, errOut, err = venv(t, []string{"PYTHONPATH=" + fake, "FAKE_SNAPSHOT=" + snap, "FAKE_MEM_INFO=1,2",
		"FRAGSIM_BIN=/nonexistent/fragsim"}, "python", "testdata/oom.py", t.TempDir(), "0", "1", "2", "1")
	if err != nil || !strings.Contains(errOut, "fragsim: the OOM could not be explained: ") {
		t.Errorf("a failing observer: %v\n%s", err, errOut)
	}
}

// TestOOMObserverHistory explains an OOM whose snapshot has history (a 64
// MiB request on device 0, its oom entry with 123 MiB free): the request
// is the entry's, and the setting named is compare's recommendation for
// fit: the room the allocator had on the device.
func TestOOMObserverHistory(t *testing.T) {
	setup(t)
	snap, _ := filepath.Abs("../trace/pytorch/testdata/basic.p5.pickle")
	x, lines := oomRun(t, snap, 123<<20, 1<<30, 64<<20, 1<<30, "OOM_NO_REPORT=1")
	text := strings.Join(lines, "\n")
	fit, _ := x["fit"].(map[string]any)
	if fit == nil || x["request_bytes"] != float64(64<<20) {
		t.Fatalf("explanation %v: want the oom entry's 64 MiB and a fit", x)
	}
	imported := filepath.Join(t.TempDir(), "basic.fst")
	if _, errOut, err := venv(t, nil, "fragsim", "import", "-q", snap, "--gpu-total", "1GiB", "-o", imported); err != nil {
		t.Fatal(errOut)
	}
	out, errOut, err := venv(t, nil, "fragsim", "compare", imported, "--goal", fmt.Sprint(fit["goal"]), "--json")
	if err != nil {
		t.Fatal(errOut)
	}
	var c struct {
		Recommendation struct {
			Env         string `json:"env"`
			MinCapacity uint64 `json:"min_capacity_bytes"`
			Fits        bool   `json:"fits"`
		} `json:"recommendation"`
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatal(err)
	}
	if !c.Recommendation.Fits || c.Recommendation.Env == "" {
		t.Fatalf("compare finds no setting that fits: %s", out)
	}
	for _, want := range []string{"a request of " + analysis.FmtBytes(64<<20) + " failed",
		"setting: " + c.Recommendation.Env + " would have fitted",
		"needing " + analysis.FmtBytes(c.Recommendation.MinCapacity) + " at its peak"} {
		if !strings.Contains(text, want) {
			t.Errorf("the observer's lines lack %q:\n%s", want, text)
		}
	}
}

// TestRecording records through fragsim.recording() with the fake torch
// and the fake CUDA driver of the recording tests: a block that exits
// closes a complete trace; a process killed inside the block still leaves
// every call; entered after CUDA started, it refuses and says what to do.
func TestRecording(t *testing.T) {
	setup(t)
	for _, tool := range []string{"gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not found: the fake CUDA driver needs it")
		}
	}
	dir := t.TempDir()
	libcuda := filepath.Join(dir, "libcuda.so.1")
	if out, err := exec.Command("gcc", "-O2", "-shared", "-fPIC", "-o", libcuda, "../cuda/hook/testdata/fakecuda.c").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	fake, _ := filepath.Abs("../cuda/record/testdata/faketorch")
	base := []string{"PYTHONPATH=" + fake, "PYTHONDONTWRITEBYTECODE=1", "FRAGSIM_LIBCUDA=" + libcuda,
		"LD_LIBRARY_PATH=" + dir}
	// 3 steps of 10 allocations, 5 of them freed.
	const allocs, frees = 30, 15

	out := filepath.Join(dir, "run.fst")
	// With FRAGSIM_METRICS_ADDR, the hook serves the monitor's metrics
	// inside the block, as under fragsim record.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stdout, errOut, err := venv(t, append(base, "FRAGSIM_METRICS_ADDR="+addr, "RECORDED_SCRAPE=http://"+addr+"/metrics"),
		"python", "testdata/recorded.py", out, "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var s struct {
		Allocs, Frees, Missing int64
		Closed                 bool
		Metrics                string
	}
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("%v: %q\n%s", err, stdout, errOut)
	}
	if s.Allocs != allocs || s.Frees != frees || !s.Closed || s.Missing != 0 {
		t.Errorf("summary %+v, want %d allocs, %d frees, closed, none missing", s, allocs, frees)
	}
	if n := countAllocs(t, out); n != allocs {
		t.Errorf("the trace holds %d allocs, want %d", n, allocs)
	}
	for _, name := range monitor.Names() {
		if !strings.Contains(s.Metrics, "\n"+name+`{device="0"} `) {
			t.Errorf("the hook's endpoint inside fragsim.recording() serves no %s:\n%s", name, s.Metrics)
		}
	}

	killed := filepath.Join(dir, "killed.fst")
	if _, _, err := venv(t, base, "python", "testdata/recorded.py", killed, "3", "kill"); exitCode(err) != -1 {
		t.Fatalf("the process was to be killed: %v", err)
	}
	// The trace writer finishes on its own once it sees the process gone.
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(killed); err == nil {
			break
		}
		exec.Command("sleep", "0.1").Run()
	}
	if n := countAllocs(t, killed); n != allocs {
		t.Errorf("killed inside the block: the trace holds %d allocs, want %d", n, allocs)
	}

	_, errOut, err = venv(t, append(base, "FAKE_TORCH_INIT=1"), "python", "testdata/recorded.py", filepath.Join(dir, "late.fst"), "1", "late")
	if exitCode(err) != 4 || !strings.Contains(errOut, "before the first CUDA allocation") || !strings.Contains(errOut, "fragsim record -o") {
		t.Errorf("entered late: %v\n%s", err, errOut)
	}
}

// countAllocs counts the alloc events of the trace at path.
func countAllocs(t *testing.T, path string) int {
	t.Helper()
	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for {
		e, err := f.ReadEvent()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if e.Kind == trace.KindAlloc {
			n++
		}
	}
}

// promClient returns a directory that holds prometheus_client alone (a
// link to the system's, Debian's python3-prometheus-client), to put on
// PYTHONPATH, and a python that can import it; "" when it is not
// installed (CI installs it).
func promClient(t *testing.T) (dir, python string) {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		out, err := exec.Command(py, "-c", "import os, prometheus_client; print(os.path.dirname(prometheus_client.__file__))").Output()
		if err != nil {
			continue
		}
		dir = t.TempDir()
		if err := os.Symlink(strings.TrimSpace(string(out)), filepath.Join(dir, "prometheus_client")); err != nil {
			t.Fatal(err)
		}
		return dir, py
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("prometheus_client is not installed: CI installs python3-prometheus-client")
	}
	return "", ""
}

// monitorSummary is what testdata/monitored.py prints.
type monitorSummary struct {
	Texts     [][2]string                `json:"texts"` // content type, body
	RiskCalls []map[string]any           `json:"risk_calls"`
	Ticks     int                        `json:"ticks"`
	Last      map[string]json.RawMessage `json:"last"`
	Returned  json.RawMessage            `json:"tick_returned"`
	CPU       []float64                  `json:"cpu"`
}

// runMonitored runs testdata/monitored.py in mode against the fake torch
// with the fragmented snapshot; extra PYTHONPATH entries and variables
// after. It returns the summary, the monitor's stderr lines and the log.
func runMonitored(t *testing.T, snap, mode string, path []string, extra ...string) (monitorSummary, []string, string) {
	t.Helper()
	fake, _ := filepath.Abs("testdata/faketorch")
	dir := t.TempDir()
	e := append([]string{"PYTHONPATH=" + strings.Join(append([]string{fake}, path...), ":"), "PYTHONDONTWRITEBYTECODE=1",
		"FAKE_DEVICE_COUNT=2", "FAKE_CONTEXTS=0"}, extra...)
	out, errOut, err := venv(t, e, "python", "testdata/monitored.py", dir, snap, mode)
	if err != nil {
		t.Fatalf("monitored.py %s: %v\n%s", mode, err, errOut)
	}
	var s monitorSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v: %q\n%s", err, out, errOut)
	}
	var lines []string
	for _, l := range strings.Split(errOut, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return s, lines, filepath.Join(dir, "metrics.jsonl")
}

// parseExposition parses Prometheus text with prometheus_client.parser
// (by python) and returns each sample's value by name and labels.
func parseExposition(t *testing.T, python, promDir, text string) map[string]float64 {
	t.Helper()
	cmd := exec.Command(python, "-c", `
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out[s.name + json.dumps(s.labels, sort_keys=True)] = s.value
print(json.dumps(out))`)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+promDir)
	cmd.Stdin = strings.NewReader(text)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("prometheus_client.parser: %v\n%s\n%s", err, e.String(), text)
	}
	var m map[string]float64
	if err := json.Unmarshal(o.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMonitor runs fragsim.monitor against the fake torch, whose
// allocator holds testdata/fragmented.py's segments (60 MiB reserved, 24
// MiB allocated, no free block over 8 MiB) on a 1 GiB device, with
// prometheus_client and without: each metric is analyze's figure of the
// same snapshot or the device's arithmetic; the risk turns on at 100 MiB
// free with one warning and one on_risk call, stays on at 120 MiB without
// another, goes off at 400 MiB and turns on again at 50 MiB; /metrics
// parses with prometheus_client.parser, names exactly replay/monitor's
// metrics and reads the same both ways; the log reads as a metrics log.
func TestMonitor(t *testing.T) {
	setup(t)
	snap := filepath.Join(t.TempDir(), "fragmented.pickle")
	if out, err := exec.Command("python3", "testdata/fragmented.py", snap).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	imported := filepath.Join(t.TempDir(), "s.fst")
	if _, errOut, err := venv(t, nil, "fragsim", "import", "-q", snap, "-o", imported); err != nil {
		t.Fatal(errOut)
	}
	out, errOut, err := venv(t, nil, "fragsim", "analyze", imported, "--json")
	if err != nil {
		t.Fatal(errOut)
	}
	var a struct {
		State struct {
			Reserved  uint64  `json:"reserved_bytes"`
			Active    uint64  `json:"active_bytes"`
			Largest   uint64  `json:"largest_free_bytes"`
			AtPeakPct float64 `json:"at_peak_pct"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatal(err)
	}
	const mib, total = 1 << 20, 1 << 30
	reserve := float64(replay.DefaultOutsideReserveBytes)
	cached := float64(a.State.Reserved - a.State.Active)
	want := map[string]float64{
		// memory_stats' counters, as the fake gives them
		"fragsim_reserved_bytes": 60 * mib, "fragsim_allocated_bytes": 24 * mib, "fragsim_inactive_split_bytes": 36 * mib,
		"fragsim_oom_total": 2, "fragsim_alloc_retries_total": 5,
		// the snapshot's, as analyze reads it
		"fragsim_largest_free_block_bytes": float64(a.State.Largest), "fragsim_cached_free_bytes": cached,
		"fragsim_fragmentation_ratio": 1 - float64(a.State.Largest)/cached, "fragsim_at_peak_pct": a.State.AtPeakPct,
		// the device's, at the first tick's 500 MiB free
		"fragsim_device_free_bytes": 500 * mib, "fragsim_outside_allocator_bytes": total - 60*mib - 500*mib,
		"fragsim_silent_oom_risk": 0, "fragsim_silent_oom_margin_bytes": 500*mib - reserve,
	}
	if len(want) != len(monitor.Metrics) {
		t.Fatalf("the test checks %d metrics, the monitor exports %d", len(want), len(monitor.Metrics))
	}
	prom, py := promClient(t)
	parsed := map[string][2]map[string]float64{}
	for _, withProm := range []bool{false, true} {
		name := "without prometheus_client"
		var path []string
		if withProm {
			if prom == "" {
				t.Log("prometheus_client is not installed: the run with it is skipped")
				continue
			}
			name, path = "with prometheus_client", []string{prom}
		}
		t.Run(name, func(t *testing.T) {
			s, lines, log := runMonitored(t, snap, "risk", path)
			if len(s.Texts) != 2 || s.Ticks != 6 {
				t.Fatalf("%d texts, %d ticks: want 2 and 6", len(s.Texts), s.Ticks)
			}
			if ct := s.Texts[0][0]; ct != "text/plain; version=0.0.4; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if strings.Contains(s.Texts[1][1], `device="1"`) {
				t.Error("device 1, which has no context, is monitored")
			}
			if py == "" {
				t.Skip("no prometheus_client to parse /metrics with")
			}
			var got [2]map[string]float64
			for i := range got {
				got[i] = parseExposition(t, py, prom, s.Texts[i][1])
			}
			parsed[name] = got
			names := map[string]bool{}
			for k := range got[0] {
				names[k[:strings.IndexByte(k, '{')]] = true
			}
			if len(names) != len(monitor.Metrics) {
				t.Errorf("/metrics names %v, want replay/monitor's %v", names, monitor.Names())
			}
			for n, v := range want {
				if g, ok := got[0][n+`{"device": "0"}`]; !ok || math.Abs(g-v) > 1e-9*math.Max(1, math.Abs(v)) {
					t.Errorf("first tick: %s = %v (served: %v), want %v", n, g, ok, v)
				}
			}
			if g := got[1][`fragsim_silent_oom_risk{"device": "0"}`]; g != 1 {
				t.Errorf("last tick: risk %v, want 1", g)
			}
			if g := got[1][`fragsim_silent_oom_margin_bytes{"device": "0"}`]; g != 50*mib-reserve {
				t.Errorf("last tick: margin %v, want %v", g, 50*mib-reserve)
			}
			// one line per crossing, naming the margin and the remedy
			if len(lines) != 2 {
				t.Fatalf("stderr has %d lines, want the 2 crossings':\n%s", len(lines), strings.Join(lines, "\n"))
			}
			for i, free := range []uint64{100, 50} {
				l := lines[i]
				for _, w := range []string{"fragsim: silent OOM risk on device 0: device free " + replay.FormatBytes(free*mib),
					"margin -" + replay.FormatBytes(uint64(reserve)-free*mib), "torch.cuda.empty_cache()",
					"returns 0 B of its " + replay.FormatBytes(uint64(cached)) + " cached free", "capping its cache"} {
					if !strings.Contains(l, w) {
						t.Errorf("warning %q lacks %q", l, w)
					}
				}
			}
			if len(s.RiskCalls) != 2 || s.RiskCalls[0]["warning"] == nil || s.RiskCalls[0]["remedy"] == nil {
				t.Errorf("on_risk calls %v, want 2 with the warning and the remedy", s.RiskCalls)
			}
			evs, err := trace.ReadMetricsLogFile(log)
			if err != nil {
				t.Fatal(err)
			}
			var frees []uint64
			for _, e := range evs {
				frees = append(frees, e.SizeBytes/mib)
				if e.Aux != total || e.Device != 0 {
					t.Errorf("sample %+v", e)
				}
			}
			if fmt.Sprint(frees) != "[500 100 120 400 50 50]" {
				t.Errorf("the log's samples: free %v MiB", frees)
			}
		})
	}
	if p := parsed["with prometheus_client"]; p[0] != nil && parsed["without prometheus_client"][0] != nil &&
		fmt.Sprint(p) != fmt.Sprint(parsed["without prometheus_client"]) {
		t.Errorf("with prometheus_client /metrics reads\n%v\nwithout\n%v", p, parsed["without prometheus_client"])
	}
}

// TestMonitorEdges: an allocator without statistics (the figures are the
// snapshot's), no fragsim to run (one line, said once, no exception),
// CUDA not initialised (no reading at all).
func TestMonitorEdges(t *testing.T) {
	setup(t)
	snap := filepath.Join(t.TempDir(), "fragmented.pickle")
	if out, err := exec.Command("python3", "testdata/fragmented.py", snap).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const mib = 1 << 20
	s, lines, _ := runMonitored(t, snap, "nostats", nil)
	var rec struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	json.Unmarshal(s.Last["0"], &rec)
	if rec.Metrics["fragsim_reserved_bytes"] != 60*mib || rec.Metrics["fragsim_allocated_bytes"] != 24*mib ||
		rec.Metrics["fragsim_inactive_split_bytes"] != 36*mib || rec.Metrics["fragsim_oom_total"] != 0 ||
		rec.Metrics["fragsim_silent_oom_risk"] != 1 || len(lines) != 1 {
		t.Errorf("no statistics: %v\n%s", rec.Metrics, strings.Join(lines, "\n"))
	}

	s, lines, _ = runMonitored(t, snap, "broken", nil, "FRAGSIM_BIN=/nonexistent/fragsim")
	if s.Ticks != 0 || string(s.Returned) != "null" || len(lines) != 1 ||
		lines[0] != "fragsim: monitor: FRAGSIM_BIN=/nonexistent/fragsim is not a file" {
		t.Errorf("no fragsim: %d ticks, returned %s, stderr:\n%s", s.Ticks, s.Returned, strings.Join(lines, "\n"))
	}

	s, lines, _ = runMonitored(t, snap, "nostats", nil, "FAKE_CUDA_UNINIT=1")
	if s.Ticks != 0 || len(s.Last) != 0 || len(lines) != 0 {
		t.Errorf("CUDA not initialised: %d ticks, %v, stderr %v", s.Ticks, s.Last, lines)
	}
}

// TestMonitorCost runs the tick benchmark (bench/monitor/tick.py) on a
// small cache: it reports the monitor thread's and the fragsim process's
// CPU time a tick, which add up. The figure itself is the benchmark's
// (bench/RESULTS.md), not this test's.
func TestMonitorCost(t *testing.T) {
	setup(t)
	fake, _ := filepath.Abs("testdata/faketorch")
	out, errOut, err := venv(t, []string{"PYTHONPATH=" + fake, "PYTHONDONTWRITEBYTECODE=1"}, "python",
		"../bench/monitor/tick.py", "--blocks", "2000", "--ticks", "3")
	if err != nil {
		t.Fatalf("tick.py: %v\n%s", err, errOut)
	}
	var r struct {
		Blocks int `json:"blocks"`
		CPU    struct {
			Python, Fragsim, Total float64
		} `json:"cpu_ms_per_tick"`
		Pct  float64 `json:"core_pct_at_interval"`
		Exec float64 `json:"a_process_per_tick_cpu_ms"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Blocks != 2000 || r.CPU.Python <= 0 || r.CPU.Fragsim < 0 || math.Abs(r.CPU.Total-r.CPU.Python-r.CPU.Fragsim) > 0.02 ||
		r.Pct <= 0 || r.Exec <= 0 {
		t.Errorf("tick.py reported %s", out)
	}
}
