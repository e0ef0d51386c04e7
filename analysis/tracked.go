package analysis

import (
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// attribution is what a breakdown attributes a live block's share of the
// stranded bytes to: its request's size, stream, marker and stack.
type attribution struct {
	size   uint64 // requested bytes
	stream trace.StreamID
	marker string // the agent or model in force when it was allocated
	stack  string // top frames, "" without a stack
}

// initialMarker marks the blocks of the trace's initial state.
const initialMarker = "(initial state)"

// attributions maps the replayed address of each live block of one policy
// to its attribution, learnt from the replay's samples, so that blocks
// listed by the policy's Segments can be traced back to their requests.
type attributions struct {
	in driver.Inspector
	m  map[uint64]attribution
	// At this many entries, those of blocks the policy no longer holds
	// are dropped: memory stays bounded by the live blocks.
	prune int
}

const minPrune = 1024

// newAttributions starts tracking the policy of sample s, at the policy's
// first sample, with the attributions of its device's initial blocks. It
// returns nil for a policy that cannot list its blocks: their attributions
// would never be asked for.
func newAttributions(s *replay.Sample, h *trace.Header) *attributions {
	in, ok := s.Policy.(driver.Inspector)
	if !ok {
		return nil
	}
	o := &attributions{in: in, m: make(map[uint64]attribution, 1024), prune: minPrune}
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
				o.m[b.Addr] = attribution{size: req, stream: seg.Stream, marker: initialMarker}
				continue
			}
			// The engine served the block as a request of its requested
			// bytes (its size when none were recorded).
			if req == 0 {
				req = b.SizeBytes
			}
			if rb, r, ok := s.Replayed(b.Addr); ok {
				o.m[rb.Addr] = attribution{size: r, stream: seg.Stream, marker: initialMarker}
			} else if s.HasBlock && s.Event.Addr == b.Addr && s.Event.Kind == trace.KindFreeCompleted {
				// The first event completed its free: the policy still
				// holds it until its next request.
				o.m[s.Block.Addr] = attribution{size: req, stream: seg.Stream, marker: initialMarker}
			}
		}
	}
	return o
}

// served records the attribution of a block an alloc was served.
func (o *attributions) served(addr uint64, or attribution) {
	o.m[addr] = or
	if len(o.m) >= o.prune {
		o.dropGone()
	}
}

// dropGone drops the attributions of addresses where the policy holds no live
// block: their frees have completed.
func (o *attributions) dropGone() {
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
