//go:build cgo

package main

import (
	"strings"
	"testing"
)

// TestLateFractionWarns: a fraction set after allocations starts the model
// of PyTorch's allocator without them, and the hook says so once.
func TestLateFractionWarns(t *testing.T) {
	t.Parallel()
	out, _ := runCxxHarness(t, "late_fraction_harness")
	want := "set_per_process_memory_fraction(0.5) on device 0 with 10.00 MiB already allocated"
	if n := strings.Count(out, "set_per_process_memory_fraction("); !strings.Contains(out, want) || n != 1 {
		t.Errorf("stderr:\n%s\nwant one warning with %q", out, want)
	}
}
