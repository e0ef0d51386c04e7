package analysis

import (
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// origin is what analysis knows of a live block: where its request came from.
type origin struct {
	size   uint64 // requested bytes
	stream trace.StreamID
	marker string // the agent or model in force when it was allocated
	stack  string // top frames, "" without a stack
}

// initialMarker marks the blocks of the trace's initial state.
const initialMarker = "(initial state)"

// origins maps the replayed address of each live block of one policy to
// its origin, learnt from the replay's samples, so that blocks listed by
// the policy's Segments can be traced back to their requests.
type origins struct {
	in driver.Inspector
	m  map[uint64]origin
	// At this many entries, those of blocks the policy no longer holds
	// are dropped: memory stays bounded by the live blocks.
	prune int
}

const minPrune = 1024

// newOrigins starts tracking the policy of sample s, at the policy's
// first sample, with the origins of its device's initial blocks. It
// returns nil for a policy that cannot list its blocks: their origins
// would never be asked for.
func newOrigins(s *replay.Sample, h *trace.Header) *origins {
	in, ok := s.Policy.(driver.Inspector)
	if !ok {
		return nil
	}
	o := &origins{in: in, m: make(map[uint64]origin, 1024), prune: minPrune}
	if h == nil || h.Initial == nil {
		return o
	}
	_, seeds := s.Policy.(driver.Seeder)
	for _, seg := range h.Initial.Segments {
		if seg.Device != s.Event.Device {
			continue
		}
		for _, b := range seg.Blocks {
			if b.State == trace.BlockInactive {
				continue
			}
			req := b.RequestedBytes
			if seeds {
				// A seeded block keeps its address and requested bytes.
				o.m[b.Addr] = origin{size: req, stream: seg.Stream, marker: initialMarker}
				continue
			}
			// The engine served the block as a request of its requested
			// bytes (its size when none were recorded).
			if req == 0 {
				req = b.SizeBytes
			}
			if rb, r, ok := s.Replayed(b.Addr); ok {
				o.m[rb.Addr] = origin{size: r, stream: seg.Stream, marker: initialMarker}
			} else if s.HasBlock && s.Event.Addr == b.Addr && s.Event.Kind == trace.KindFreeCompleted {
				// The first event completed its free: the policy still
				// holds it until its next request.
				o.m[s.Block.Addr] = origin{size: req, stream: seg.Stream, marker: initialMarker}
			}
		}
	}
	return o
}

// served records the origin of a block an alloc was served.
func (o *origins) served(addr uint64, or origin) {
	o.m[addr] = or
	if len(o.m) >= o.prune {
		o.dropGone()
	}
}

// dropGone drops the origins of addresses where the policy holds no live
// block: their frees have completed.
func (o *origins) dropGone() {
	held := make(map[uint64]struct{}, len(o.m))
	o.in.Segments(func(seg trace.Segment) bool {
		for _, b := range seg.Blocks {
			if b.State != trace.BlockInactive {
				held[b.Addr] = struct{}{}
			}
		}
		return true
	})
	for a := range o.m {
		if _, ok := held[a]; !ok {
			delete(o.m, a)
		}
	}
	o.prune = max(2*len(o.m), minPrune)
}
