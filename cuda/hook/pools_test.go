//go:build cgo

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// runCxxHarness builds the library and the fake driver (see build) and the
// C++ harness testdata/NAME.cc, runs the harness (harnessCmd, plus env),
// and returns its output and the path of the trace it recorded; it stops
// the test when the harness fails.
func runCxxHarness(t *testing.T, name string, env ...string) (out, path string) {
	t.Helper()
	dir, lib, _ := build(t)
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ not found")
	}
	harness := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("g++", "-O2", "-std=c++17", "-o", harness, "testdata/"+name+".cc", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	path = filepath.Join(t.TempDir(), name+".fst")
	cmd := harnessCmd(dir, harness, lib, path)
	cmd.Env = append(cmd.Env, env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, b)
	}
	return string(b), path
}

// TestPoolHooks drives the private-pool hooks as PyTorch's pluggable
// allocator calls them (testdata/pools_harness.cc) and checks the pool
// events recorded around the allocations.
func TestPoolHooks(t *testing.T) {
	t.Parallel()
	_, path := runCxxHarness(t, "pools_harness")
	_, evs, err := trace.ReadAll(mustOpen(t, path))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		switch e.Kind {
		case trace.KindAlloc:
			got = append(got, fmt.Sprintf("alloc %#x %d", e.Stream, e.SizeBytes))
		case trace.KindPoolBegin, trace.KindPoolEnd, trace.KindPoolRelease:
			got = append(got, fmt.Sprintf("%s %#x %#x", e.Kind, e.Stream, e.Aux))
		}
	}
	want := []string{
		"alloc 0x300 1000",
		"pool_begin 0x200 0x1", "alloc 0x200 2000", "pool_end 0x200 0x1",
		"alloc 0x200 3000",
		"pool_begin 0x100 0x8000000000000001", "alloc 0x100 4000", "pool_end 0x100 0x8000000000000001",
		"pool_release 0x0 0x1", "pool_release 0x0 0x8000000000000001",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
