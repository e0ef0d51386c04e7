//go:build cgo

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLateFractionWarns: a fraction set after allocations starts the model
// of PyTorch's allocator without them, and the hook says so once.
func TestLateFractionWarns(t *testing.T) {
	dir, lib, harness := cxxHarness(t, "late_fraction_harness")
	out, err := harnessCmd(dir, harness, lib, filepath.Join(t.TempDir(), "late.fst")).CombinedOutput()
	if err != nil {
		t.Fatalf("late_fraction_harness: %v\n%s", err, out)
	}
	want := "set_per_process_memory_fraction(0.5) on device 0 with 10.00 MiB already allocated"
	if n := strings.Count(string(out), "set_per_process_memory_fraction("); !strings.Contains(string(out), want) || n != 1 {
		t.Errorf("stderr:\n%s\nwant one warning with %q", out, want)
	}
}
