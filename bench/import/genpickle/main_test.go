package main

import (
	"path/filepath"
	"testing"

	"github.com/fragsim/fragsim/trace/pytorch"
)

// TestWrite checks that a written snapshot imports with as many entries as
// asked for, each a known action, with as many frees completed as
// requested (but the last maybe), no more frees than allocs, and segments.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "s.pickle"), filepath.Join(dir, "s.fst")
	const n = 20_000
	if err := write(in, n, 1, 0); err != nil {
		t.Fatal(err)
	}
	sum, err := pytorch.ImportFile(in, out, pytorch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := sum.Kinds
	if sum.Events != n || len(sum.UnknownActs) != 0 || k["alloc"]+k["free_requested"]+k["free_completed"]+k["segment_alloc"] != n {
		t.Fatalf("%d events %v, unknown %v; want %d", sum.Events, k, sum.UnknownActs, n)
	}
	if d := k["free_requested"] - k["free_completed"]; d < 0 || d > 1 || k["free_requested"] > k["alloc"] || k["segment_alloc"] == 0 {
		t.Errorf("kinds %v", k)
	}
}
