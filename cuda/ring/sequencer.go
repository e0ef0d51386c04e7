package ring

import (
	"slices"
	"time"
)

// rec is one recorded call, copied out of the C buffers. It holds no
// pointers (a marker's text is kept by the recorder, keyed by seq), so
// large batches cost the garbage collector nothing.
type rec struct {
	seq    uint64
	timeNS int64
	addr   uint64
	size   uint64
	stream uint64
	aux    uint64
	device int32
	tid    int32
	kind   uint8
	marker uint8
}

// sequencer restores the global call order from per-thread buffers.
//
// Every sequence number the C side hands out is published, but a thread
// may be between taking its number and publishing the record when the
// drainer passes by. The sequencer therefore releases only the contiguous
// run of numbers that starts at next and holds later records back until the
// gap fills; a gap that stays open longer than gapTimeout while the
// reader has nothing more to read (a record that can never come) is skipped
// and counted.
type sequencer struct {
	next       uint64
	pending    []rec
	gapSince   time.Time
	gapTimeout time.Duration
	skipped    uint64
	out        []rec
	// backlog is set while the reader has records it did not read yet: a
	// missing number may be among them, so no gap is skipped.
	backlog bool
}

// add queues records in any order.
func (s *sequencer) add(rs ...rec) { s.pending = append(s.pending, rs...) }

// release returns the records that can be written now, in sequence order,
// in a slice valid until the next call. With all set, it returns every
// pending record, skipping any gaps.
func (s *sequencer) release(now time.Time, all bool) []rec {
	if len(s.pending) == 0 {
		s.gapSince = time.Time{}
		return nil
	}
	slices.SortFunc(s.pending, func(a, b rec) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	out := s.out[:0]
	i := 0
	for ; i < len(s.pending); i++ {
		r := s.pending[i]
		if r.seq < s.next { // a number seen twice: only a broken C side does that
			continue
		}
		if r.seq > s.next {
			if !all {
				if s.gapSince.IsZero() {
					s.gapSince = now
				}
				if now.Sub(s.gapSince) < s.gapTimeout || s.backlog {
					break
				}
			}
			s.skipped += r.seq - s.next
			s.next = r.seq
		}
		s.gapSince = time.Time{}
		out = append(out, r)
		s.next++
	}
	s.pending = s.pending[:copy(s.pending, s.pending[i:])]
	s.out = out
	return out
}
