package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/cuda"
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
