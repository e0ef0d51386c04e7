package python

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestMemLog runs fragsim_memlog against the fake torch of the recording
// tests: nothing is logged before CUDA is initialised, then one line per
// sample in the documented format, in time order, and a last one at stop.
func TestMemLog(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	fake, err := filepath.Abs("../record/testdata/faketorch")
	if err != nil {
		t.Fatal(err)
	}
	here, _ := filepath.Abs(".")
	log := filepath.Join(t.TempDir(), "mem.log")
	prog := `
import sys, time, fragsim_memlog, torch
m = fragsim_memlog.start(sys.argv[1], interval=0.01)
time.sleep(0.1)
with open(sys.argv[1]) as f:
    if f.read():
        sys.exit("logged before CUDA was initialised")
torch.cuda._initialized = True
time.sleep(0.2)
m.stop()
`
	cmd := exec.Command("python3", "-c", prog, log)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+here+string(os.PathListSeparator)+fake, "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("%d lines: %q", len(lines), b)
	}
	var lastT, lastFree uint64
	for i, l := range lines {
		f := strings.Split(l, " ")
		if len(f) != 4 {
			t.Fatalf("line %d %q: want time_ns device free total", i+1, l)
		}
		var v [4]uint64
		for j := range f {
			if v[j], err = strconv.ParseUint(f[j], 10, 64); err != nil {
				t.Fatalf("line %d %q: %v", i+1, l, err)
			}
		}
		// The fake's free memory drops 1 MiB a call, from 80 GiB.
		if v[0] < lastT || v[1] != 0 || v[3] != 80<<30 || v[2] != 80<<30-uint64(i+1)<<20 || (i > 0 && v[2] >= lastFree) {
			t.Fatalf("line %d %q after time %d: want device 0, total 80 GiB, free 80 GiB - %d MiB", i+1, l, lastT, i+1)
		}
		lastT, lastFree = v[0], v[2]
	}
}
