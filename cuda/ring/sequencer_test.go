package ring

import (
	"testing"
	"time"
)

func seqs(rs []rec) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.seq)
	}
	return out
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSequencer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := sequencer{gapTimeout: 2 * time.Second}
	s.add(rec{seq: 3}, rec{seq: 0}, rec{seq: 1}, rec{seq: 5})
	if got := seqs(s.release(t0, false)); !equal(got, []uint64{0, 1}) {
		t.Fatalf("first release %v, want [0 1] (2 is missing)", got)
	}
	// 2 arrives: 2 and 3 go; 4 is still missing.
	s.add(rec{seq: 2})
	if got := seqs(s.release(t0.Add(time.Second), false)); !equal(got, []uint64{2, 3}) {
		t.Fatalf("second release %v, want [2 3]", got)
	}
	// The gap at 4 opened at t0+1s; before the timeout nothing moves.
	if got := s.release(t0.Add(2*time.Second), false); len(got) != 0 {
		t.Fatalf("released %v across an open gap", seqs(got))
	}
	if got := seqs(s.release(t0.Add(3*time.Second+time.Millisecond), false)); !equal(got, []uint64{5}) || s.skipped != 1 {
		t.Fatalf("after the timeout: %v skipped %d, want [5] skipped 1", got, s.skipped)
	}
	// A late 4 is dropped; all releases everything across gaps.
	s.add(rec{seq: 4}, rec{seq: 9}, rec{seq: 7})
	if got := seqs(s.release(t0.Add(4*time.Second), true)); !equal(got, []uint64{7, 9}) || s.skipped != 3 {
		t.Fatalf("final release %v skipped %d, want [7 9] skipped 3", got, s.skipped)
	}
	if len(s.pending) != 0 || s.next != 10 {
		t.Fatalf("pending %d next %d", len(s.pending), s.next)
	}
}

// TestSequencerBacklog checks that no gap is skipped while the reader has
// records left to read, however long it stays open.
func TestSequencerBacklog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := sequencer{gapTimeout: 2 * time.Second}
	s.add(rec{seq: 0}, rec{seq: 2})
	s.backlog = true
	if got := seqs(s.release(t0, false)); !equal(got, []uint64{0}) {
		t.Fatalf("release %v, want [0]", got)
	}
	if got := s.release(t0.Add(time.Minute), false); len(got) != 0 || s.skipped != 0 {
		t.Fatalf("released %v, skipped %d across a gap with a backlog", seqs(got), s.skipped)
	}
	s.add(rec{seq: 1})
	if got := seqs(s.release(t0.Add(time.Minute), false)); !equal(got, []uint64{1, 2}) || s.skipped != 0 {
		t.Fatalf("release %v skipped %d, want [1 2] and nothing skipped", got, s.skipped)
	}
}
