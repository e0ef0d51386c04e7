// Package readme runs every shell command of the project's README, as
// written, from the repository's root, and checks its output against what
// the README says it shows.
package readme

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pytorch"
)

const root = "../.."

// skips are the README's commands this test does not run, and why: they
// need a GPU, a PyTorch program, the network or an environment of the
// user's, or they are the test suite itself, or a benchmark of minutes
// whose run bench/RESULTS.md records. A new command the README gains runs,
// unless it matches one of these.
var skips = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`(^|\s)(build/)?fragsim record( |$)`), "records a PyTorch program's allocations: needs a GPU and PyTorch"},
	{regexp.MustCompile(`(^|\s)python3? (app|serve_agents|prog)\.py`), "runs a PyTorch program on a GPU"},
	{regexp.MustCompile(`^python3? -m fragsim`), "runs the installed wheel: python's own test installs it in a fresh environment"},
	{regexp.MustCompile(`^pip3? install`), "installs into the user's Python environment: python's own test installs the wheel in a fresh one"},
	{regexp.MustCompile(`^fragsim probe`), "reads a live GPU"},
	{regexp.MustCompile(`go test (-race )?\./\.\.\.$|^\.ci/run$`), "the test suite itself, which .ci/run runs"},
	{regexp.MustCompile(`^bench/faults\.sh$`), ".ci/run runs it after the tests"},
	{regexp.MustCompile(`^bench/import/gpu_host\.sh|^bench/async/run\.sh|^bench/record/|bench/record/overhead\.py`), "a benchmark on a GPU host with PyTorch"},
	{regexp.MustCompile(`^bench/scale\.sh 100M$`), "a benchmark of minutes and GiBs of disk (100M synthetic events, a 4.9 GiB snapshot); bench/RESULTS.md records its run"},
	{regexp.MustCompile(`^BEST=5 bench/linear\.sh$`), "a benchmark of minutes (60 replays of up to 10M events); bench/RESULTS.md records its run"},
	{regexp.MustCompile(`^go test -bench Compare3Policies1M `), "a benchmark of about three minutes on two cores; bench/RESULTS.md records its run"},
	{regexp.MustCompile(`^bench/import/gzip\.sh`), "a benchmark of minutes (Python's pickle.load of a 1M-entry snapshot, five rounds); bench/RESULTS.md records its run"},
	{regexp.MustCompile(`--runner[ =](dataflow|universal|flink)|--endpoint[ =]`), "needs a Beam job server or Dataflow (the network)"},
	{regexp.MustCompile(`^(CORES=\d+ )?bench/fleet\.sh`), "a benchmark of minutes (every trace compared alone, then the fleet); bench/RESULTS.md records its run"},
	{regexp.MustCompile(`^traces/workloads/`), "runs PyTorch workloads on a GPU"},
}

// placeholders are the README's names for a file of the user's, and what
// the test gives for each (the fixtures of setup).
var placeholders = []struct{ name, value string }{
	{"[TRACE]", "traces/conformance/plain_tiny.fst"},
	{"TRACE", "traces/conformance/plain_tiny.fst"},
	{"SNAPSHOT", "oom_history.pickle.gz"},
	{"FILE", "device.log"},
	{"OUT", "out.fst"},
	{"CMD", "compare"},
}

// fixtures are the files the README's examples name, made from the
// repository's test data (relative to root).
var fixtures = map[string]string{
	"agents.pickle":         "trace/pytorch/testdata/real/stacks_agents.pickle.gz", // five agents, with call stacks
	"snapshot.pickle":       "trace/pytorch/testdata/basic.p5.pickle",
	"S.pickle":              "trace/pytorch/testdata/basic.p5.pickle",
	"oom.pickle":            "trace/pytorch/testdata/state_only.p4.pickle", // an OOM handler's: state, no history
	"oom_history.pickle.gz": "trace/pytorch/testdata/real/fraction_retry.pickle.gz",
	"a.fst":                 "traces/baseline_s2.fst",
	"b.fst":                 "traces/baseline_s3.fst",
	// A job of four ranks, and two snapshots taken at an OOM.
	"runs/train/rank0.fst":              "traces/train_ranks/rank0.fst",
	"runs/train/rank1.fst":              "traces/train_ranks/rank1.fst",
	"runs/train/rank2.fst":              "traces/train_ranks/rank2.fst",
	"runs/train/rank3.fst":              "traces/train_ranks/rank3.fst",
	"oom/snapshot_oom_rank-0.pickle.gz": "trace/pytorch/testdata/real/fraction_retry.pickle.gz",
	"oom/snapshot_oom_rank-1.pickle.gz": "trace/pytorch/testdata/real/gc_threshold.pickle.gz",
}

// expect is what the README says a command shows: every want matches its
// output (stdout and stderr), no none does, and every file exists.
type expect struct {
	want, none []string // regular expressions
	files      []string // globs, from the root
}

// expectations are keyed by the README's text of the command. The
// compare example's lines are the README's own block (compareExample).
var expectations = map[string]expect{
	"fragsim import snapshot.pickle -o run.fst": {want: []string{`imported snapshot\.pickle .* -> run\.fst`}, files: []string{"run.fst"}},
	"fragsim import oom.pickle -o oom.fst && fragsim analyze oom.fst": {want: []string{ // fragmentation, largest free block, histogram, stranded
		`at_peak_pct \d+\.\d%`, `Largest free block \d`, `(?m)^Free blocks by size:\n +\[`, `stranded \d+\.\d MiB`}},
	"fragsim import agents.pickle -o agents.fst --gpu-total h200": {want: []string{`imported agents\.pickle`, `stacks: +\d+ events with a call stack`}},
	"fragsim info agents.fst":                                     {want: []string{`events +\d+`, `gpu .*139\.8 GiB`}},
	"fragsim replay agents.fst": {want: []string{`peak reserved`, `frag at peak`, `frag time-weighted`, `stranded`,
		`fidelity: (\d+)/(\d+) allocs at recorded address, (\d+)/(\d+) device events matched`}},
	"fragsim dump agents.fst | less": {want: []string{`^# fragsim text v1\nheader \{`, `(?m)^alloc t=\d+ `}},
	"fragsim compare agents.fst --out plots/": {want: []string{`(?m)^Recommended: `, `(?m)^Fragmentation before: `},
		files: []string{"plots/fragmentation_hist.png", "plots/fragmentation_hist.svg", "plots/timeline.png", "plots/timeline.svg",
			"plots/views.png", "plots/views.svg", "plots/policies.png", "plots/policies.svg"}},
	"fragsim analyze agents.fst":                    {want: []string{`by request size`, `by stream`, `by call stack`, `(?m)^Worst moments`, `Recommended: `}},
	"fragsim report agents.fst -o agents.html":      {want: []string{`wrote agents\.html`}, files: []string{"agents.html"}},
	"fragsim replay agents.fst --min-capacity":      {want: []string{`min capacity +\S+ \S+ +\(\d+ B\)`}},
	"fragsim cohost a.fst b.fst --capacity rtx4090": {want: []string{`device 24\.00 GiB .*, 2 processes`, `(?m)^a +caching`, `(?m)^b +caching`}},
	"fragsim cohost --shared-clock --capacity 3543348019 traces/serving/cohost_leave3.3_p1.fst traces/serving/cohost_leave3.3_p2.fst": {
		want: []string{`, 2 processes,`, `cohost_leave3\.3_p1: at 6\.87 s: silent OOM risk`, `cohost_leave3\.3_p2: at 6\.87 s: silent OOM risk`,
			`empty_cache\(\)`, `set_per_process_memory_fraction\(`, `CUDA_MODULE_LOADING=EAGER`, `lower its peak`}},
	"fragsim cohost --shared-clock --capacity 40GiB traces/serving/cohost_leave40_p1.fst traces/serving/cohost_leave40_p2.fst": {
		want: []string{`cohost_leave40_p1: no silent-OOM risk`, `cohost_leave40_p2: no silent-OOM risk`}, none: []string{`silent OOM risk at`}},
	"fragsim import SNAPSHOT --device-log FILE -o OUT": {want: []string{`merged 1 device-memory samples into out\.fst`}, files: []string{"out.fst"}},
	"fragsim help CMD":                      {want: []string{`fragsim compare`, `--goal`}},
	"fragsim --version":                     {want: []string{`^fragsim version \d+\.\d+\.\d+`}},
	"fragsim report [TRACE] -o report.html": {files: []string{"report.html"}},
	"fragsim export --format memory_viz --policy expandable TRACE -o run.pickle": {want: []string{`wrote run\.pickle: .* under expandable`},
		files: []string{"run.pickle"}},
	"fragsim explain SNAPSHOT":                                       {want: []string{`(?m)^OOM: a request of .* failed`, `(fragmentation|outside|exhaustion)`}},
	"fragsim import S.pickle -o S.fst && fragsim info S.fst":         {want: []string{`imported S\.pickle`, `(?m)^trace +S\.fst`}},
	"python3 python/build_wheel.py -o dist/":                         {files: []string{"dist/fragsim-*-py3-none-*.whl"}},
	"cuda/build.sh":                                                  {files: []string{"build/fragsim", "build/libfragsim_hook.so"}},
	"go install ./cmd/fragsim":                                       {files: []string{"gobin/fragsim"}},
	"FRAGSIM_LONG=1 go test ./allocator/caching -run TestRealTraces": {want: []string{`(?m)^ok `}},
	"FRAGSIM_LONG=1 go test ./traces -run Conformance":               {want: []string{`(?m)^ok `}},
	"fragsim fleet runs/ 'oom/*.pickle.gz' --out report/ # embedded: Prism, in this process": {
		want:  []string{`Inputs: 6 analysed 6 failed 0`, `Recommended for the fleet: `, `Most imbalanced job: train, \d\.\d\dx \(rank 3 peaks`, `OOM classes: fragmentation 2`},
		files: []string{"report/traces.jsonl", "report/fleet.json", "report/settings.csv", "report/fleet.html"}},
}

// compareExample returns the lines of the README's block that shows what
// `fragsim compare` prints at its end (the one that starts "Recommended:").
func compareExample(t *testing.T) []string {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```\nRecommended: ")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("the README has no block of compare's output starting \"Recommended:\"")
	}
	return strings.Split(strings.TrimSpace("Recommended: "+block), "\n")
}

// TestREADMECommands runs every command of the README, in the order
// written, in a directory that mirrors the repository's root (each of its
// entries linked, so that traces/... and ./cmd/... are where the README
// says) and holds the files the examples name. The everyday run takes
// every fragsim command (and `go run ./cmd/fragsim compare`); with
// FRAGSIM_LONG=1 it also runs the others: the builds (cuda/build.sh, the
// wheel, go install) and the go test commands.
func TestREADMECommands(t *testing.T) {
	cmds, err := Commands(root)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, c := range cmds {
		have[c.Text] = true
	}
	for k := range expectations {
		if !have[k] {
			t.Errorf("stale expectation: the README has no command %q", k)
		}
	}
	long := os.Getenv("FRAGSIM_LONG") == "1"
	dir, env := setup(t)
	example := compareExample(t)
	for _, c := range cmds {
		t.Run(c.Text, func(t *testing.T) {
			for _, s := range skips {
				if s.re.MatchString(c.Text) {
					t.Skipf("README line %d: %s", c.Line, s.why)
				}
			}
			if heavy(c.Text) && !long {
				t.Skipf("README line %d: a build or a test run: FRAGSIM_LONG=1 runs it", c.Line)
			}
			line := c.Text
			for _, p := range placeholders {
				line = regexp.MustCompile(`(^|\s)`+regexp.QuoteMeta(p.name)+`(\s|$)`).ReplaceAllString(line, "${1}"+p.value+"${2}")
			}
			limit := 2 * time.Minute
			if long {
				limit = 15 * time.Minute
			}
			out, err := run(dir, env, line, limit)
			if err != nil {
				t.Fatalf("README line %d: %s: %v\n%s\n(a command that needs a GPU, PyTorch or the network goes in skips, with the reason; "+
					"a file it names, in fixtures or placeholders)", c.Line, line, err, tail(out))
			}
			e := expectations[c.Text]
			if c.Text == "go run ./cmd/fragsim compare" {
				for _, l := range example {
					e.want = append(e.want, "(?m)^"+regexp.QuoteMeta(l)+"$")
				}
			}
			for _, w := range e.want {
				if !regexp.MustCompile(w).MatchString(out) {
					t.Errorf("README line %d: %s: the output has no match of /%s/:\n%s", c.Line, line, w, tail(out))
				}
			}
			for _, n := range e.none {
				if regexp.MustCompile(n).MatchString(out) {
					t.Errorf("README line %d: %s: the output matches /%s/", c.Line, line, n)
				}
			}
			for _, g := range e.files {
				if m, _ := filepath.Glob(filepath.Join(dir, g)); len(m) == 0 {
					t.Errorf("README line %d: %s: no %s", c.Line, line, g)
				}
			}
		})
	}
}

// heavy says whether a command is more than a fragsim command: a build, a
// go test, a script. Those run with FRAGSIM_LONG=1.
func heavy(cmd string) bool {
	words := strings.Fields(cmd)
	for len(words) > 0 && envAssign.MatchString(words[0]) {
		words = words[1:]
	}
	line := strings.Join(words, " ")
	return !strings.HasPrefix(line, "fragsim ") && !strings.HasPrefix(line, "go run ./cmd/fragsim ")
}

// setup makes the directory the commands run in, and their environment:
// the fragsim binaries on PATH (and a pager, where the system has none).
func setup(t *testing.T) (string, []string) {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	// The go command hashes a package's directory into its build: in a
	// mirror at the same path on every run, the go commands the README
	// runs here (go run ./cmd/fragsim, and with FRAGSIM_LONG=1 go install
	// and go test) hit the build cache instead of compiling the module
	// again. The mirror is made anew, and removed after the test.
	dir := t.TempDir()
	if keep := keptDir(abs); keep != "" {
		dir = filepath.Join(keep, "mirror")
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == ".git" { // no VCS here: go builds stamp no commit
			continue
		}
		if err := os.Symlink(filepath.Join(abs, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range fixtures {
		b, err := os.ReadFile(filepath.Join(abs, src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deviceLog(t, dir)
	bin := binaries(t, abs)
	if _, err := exec.LookPath("less"); err != nil {
		pager := t.TempDir()
		os.WriteFile(filepath.Join(pager, "less"), []byte("#!/bin/sh\nexec cat \"$@\"\n"), 0o755)
		bin += string(os.PathListSeparator) + pager
	}
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "GOBIN="+filepath.Join(dir, "gobin"))
	return dir, env
}

// binaries builds ./cmd/... of the repository at abs and returns the
// directory of the binaries. go build skips the link of a binary already
// there with the build ID it would write, so the directory is one kept in
// the user's cache, one per repository: a run with nothing changed links
// nothing. GOTMPDIR beside it makes go build rename each new binary into
// place, never rewrite one that another run is executing. Without a
// user's cache directory, a test's own directory serves.
func binaries(t *testing.T, abs string) string {
	t.Helper()
	bin, tmp := t.TempDir(), ""
	if keep := keptDir(abs); keep != "" && os.MkdirAll(filepath.Join(keep, "tmp"), 0o755) == nil && os.MkdirAll(filepath.Join(keep, "bin"), 0o755) == nil {
		bin, tmp = filepath.Join(keep, "bin"), filepath.Join(keep, "tmp")
	}
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./cmd/...")
	build.Dir = abs // cgo as the tests build it: the same build cache (fragsim-fleet links Beam)
	if tmp != "" {
		build.Env = append(os.Environ(), "GOTMPDIR="+tmp)
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	return bin
}

// keptDir returns the directory this test keeps between runs for the
// repository at abs, in the user's cache ("" without one).
func keptDir(abs string) string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(abs))
	keep := filepath.Join(cache, "fragsim-readme-test", hex.EncodeToString(sum[:8]))
	if os.MkdirAll(keep, 0o755) != nil {
		return ""
	}
	return keep
}

// deviceLog writes the FILE placeholder's device log: one sample in the
// middle of the SNAPSHOT placeholder's time window.
func deviceLog(t *testing.T, dir string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "s.fst")
	if _, err := pytorch.ImportFile(filepath.Join(dir, "oom_history.pickle.gz"), tmp, pytorch.Options{}); err != nil {
		t.Fatal(err)
	}
	f, err := trace.Open(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, err := trace.Summarize(f.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mid := sum.FirstNS + (sum.LastNS-sum.FirstNS)/2
	log := fmt.Sprintf("# time_ns device free_bytes total_bytes\n%d 0 %d %d\n", mid, uint64(100)<<30, uint64(140)<<30)
	if err := os.WriteFile(filepath.Join(dir, "device.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs the command line with bash in dir, and returns its output.
func run(dir string, env []string, line string, limit time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail; "+line)
	cmd.Dir, cmd.Env = dir, env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("still running after %v", limit)
	}
	return string(out), err
}

// tail returns the end of a command's output, for a message.
func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}
