package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/cuda"
	"github.com/fragsim/fragsim/cuda/record"
)

func TestRecordUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"fragsim", "record", "-o", filepath.Join(t.TempDir(), "x.fst")}, &stdout, &stderr); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "no program to run") {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestRecordMissingLib(t *testing.T) {
	var stdout, stderr bytes.Buffer
	lib := filepath.Join(t.TempDir(), "nope.so")
	code := Main([]string{"fragsim", "record", "--lib", lib, "--", "true"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "nope.so") {
		t.Errorf("exit code %d, stderr %q: want 1 and the library named", code, stderr.String())
	}
}

// TestRecordExitCode runs a program that never starts recording: fragsim
// says no trace was written and exits with the program's own code.
func TestRecordExitCode(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libfragsim_hook.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main([]string{"fragsim", "record", "-o", filepath.Join(dir, "x.fst"), "--lib", lib, "--",
		"/bin/sh", "-c", `echo "trace=$FRAGSIM_TRACE"; exit 5`}, &stdout, &stderr)
	if code != 5 {
		t.Errorf("exit code %d, want the program's 5", code)
	}
	if !strings.Contains(stdout.String(), "trace="+filepath.Join(dir, "x.fst")) {
		t.Errorf("program stdout %q: FRAGSIM_TRACE not passed", stdout.String())
	}
	if !strings.Contains(stderr.String(), "no trace was written") || !strings.Contains(stderr.String(), "never started recording") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// TestProbeNoDriver checks probe's error on a machine without a driver
// (or in a build without cgo).
func TestProbeNoDriver(t *testing.T) {
	t.Setenv("FRAGSIM_LIBCUDA", filepath.Join(t.TempDir(), "libcuda.so.1"))
	var stdout, stderr bytes.Buffer
	code := Main([]string{"fragsim", "probe", "--json"}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	want := "cannot load the CUDA driver library"
	if _, err := cuda.Probe(0); err == cuda.ErrNoCgo {
		want = "built without cgo"
	}
	if !strings.Contains(stderr.String(), want) || stdout.Len() != 0 {
		t.Errorf("stdout %q stderr %q: want only an error saying %q", stdout.String(), stderr.String(), want)
	}
}

// TestProbeFakeDriver renders probe's result, text and JSON, from the fake
// driver of the hook tests (a 1 GiB limit on single blocks).
func TestProbeFakeDriver(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	fake := filepath.Join(t.TempDir(), "libcuda.so.1")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", fake, "../../cuda/hook/testdata/fakecuda.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	t.Setenv("FRAGSIM_LIBCUDA", fake)
	t.Setenv("FAKE_CUDA_LIMIT", "1073741824")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"fragsim", "probe", "--json"}, &stdout, &stderr); code != 0 {
		if strings.Contains(stderr.String(), "built without cgo") {
			t.Skip("built without cgo")
		}
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	var r struct {
		GPUName           string `json:"gpu_name"`
		FreeBytes         uint64 `json:"free_bytes"`
		TotalBytes        uint64 `json:"total_bytes"`
		LargestBlockBytes uint64 `json:"largest_block_bytes"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if r.GPUName != "Fake GPU" || r.FreeBytes != 80<<30 || r.TotalBytes != 80<<30 || r.LargestBlockBytes != 1<<30 {
		t.Errorf("probe JSON %+v", r)
	}
	stdout.Reset()
	if code := Main([]string{"fragsim", "probe"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	for _, want := range []string{"GPU 0: Fake GPU (CUDA 12.4)", "80.0 GiB of 80.0 GiB", "largest block  1.0 GiB (1.2% of free"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("probe output lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestRecordKeepsPrevious checks that a run that writes no trace (the
// program cannot start, or never starts recording) leaves the previous
// output and nothing else in its directory, and says how the program ended.
func TestRecordKeepsPrevious(t *testing.T) {
	if _, err := os.Stat("/bin/true"); err != nil {
		t.Skip("no /bin/true")
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libfragsim_hook.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prev.fst")
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"cannot start", []string{filepath.Join(dir, "no-such-program")}, 1, "cannot start"},
		{"exits 0 unrecorded", []string{"/bin/true"}, 1, "true exited with code 0"},
		{"exits 3 unrecorded", []string{"/bin/sh", "-c", "exit 3"}, 3, "sh exited with code 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(out, []byte("previous"), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := Main(append([]string{"fragsim", "record", "-o", out, "--lib", lib, "--"}, tc.args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("exit code %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.says)
			}
			if b, err := os.ReadFile(out); err != nil || string(b) != "previous" {
				t.Errorf("previous output now %q, %v", b, err)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 2 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("directory holds %v, want only the library and prev.fst", names)
			}
		})
	}
}

// TestRecordSummaryOneTruth checks that the summary's closing line makes
// one statement on how the program ended and one on the trace.
func TestRecordSummaryOneTruth(t *testing.T) {
	for _, tc := range []struct {
		s         record.Summary
		want, not string
	}{
		{record.Summary{ExitCode: 137}, "was killed by signal 9 (killed); it did not close its trace, so fragsim wrote every call the hook saw: the trace is complete", "cut short"},
		{record.Summary{ExitCode: 3, Closed: true}, "exited with code 3; the trace is complete", "did not close"},
		{record.Summary{ExitCode: 0, Closed: true, Truncated: true}, "exited with code 0; the trace was cut short", "complete"},
		{record.Summary{ExitCode: 139, Missing: 2}, "was killed by signal 11 (segmentation fault); the trace lacks 2 calls", "complete"},
	} {
		got := ended(tc.s.ExitCode) + "; " + completeness(&tc.s)
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.not) {
			t.Errorf("%+v: %q, want %q and not %q", tc.s, got, tc.want, tc.not)
		}
	}
}

// TestRecordSummaryRanks checks the summary of a run whose processes each
// wrote a trace: one block per trace, who wrote it, and at the end which
// files were written in place of -o's; a run with one trace prints as it
// did, and says when other processes recorded nothing.
func TestRecordSummaryRanks(t *testing.T) {
	s := &record.Summary{Path: "/d/run.fst", Closed: true, IdleProcesses: 1, Traces: []*record.Summary{
		{Path: "run.rank0.fst", Rank: "0", PID: 11, Devices: []int32{0}, Allocs: 3, Frees: 2, Events: 8, Closed: true},
		{Path: "run.pid12.fst", PID: 12, Devices: []int32{1}, Allocs: 5, Frees: 2, Events: 9, Closed: true},
	}}
	var b bytes.Buffer
	printRecordSummary(&b, "run.fst", "torchrun", s)
	for _, want := range []string{
		"fragsim record: run.rank0.fst: rank 0 (process 11) on device 0: 3 allocs, 2 frees",
		"fragsim record: run.pid12.fst: process 12 on device 1: 5 allocs, 2 frees",
		"fragsim record: run.rank0.fst: the trace is complete\n",
		"fragsim record: torchrun exited with code 0\n",
		"fragsim record: wrote 2 traces, one per process that used the GPU, in place of run.fst: run.rank0.fst, run.pid12.fst; " +
			"1 more process recorded and allocated nothing: no trace for it\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}

	b.Reset()
	one := &record.Summary{Path: "/d/run.fst", Allocs: 3, Closed: true}
	printRecordSummary(&b, "run.fst", "python", one)
	if got := b.String(); !strings.HasPrefix(got, "fragsim record: run.fst: 3 allocs,") || strings.Contains(got, "more process") ||
		!strings.HasSuffix(got, "fragsim record: python exited with code 0; the trace is complete\n") {
		t.Errorf("one trace's summary:\n%s", got)
	}
	b.Reset()
	one.IdleProcesses = 2
	printRecordSummary(&b, "run.fst", "python", one)
	if !strings.HasSuffix(b.String(), "fragsim record: run.fst written; 2 more processes recorded and allocated nothing: no trace for them\n") {
		t.Errorf("one trace, two idle processes:\n%s", b.String())
	}
}
