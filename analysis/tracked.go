package analysis

import (
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// origin is what analysis knows of a live block: where its request came from.
type origin struct {
	size   uint64 // requested bytes
	stream trace.StreamID
	marker string // the agent or model in force when it was allocated
	stack  string // top frames, "" without a stack
}

// tracked wraps a policy to learn the address of every block it hands out,
// so that blocks listed by Inspector can be traced back to their requests.
type tracked struct {
	replay.Policy
	origins  map[uint64]origin
	lastAddr uint64
	lastOK   bool
	mallocs  int64
}

func (t *tracked) Malloc(n uint64, s trace.StreamID) (replay.Block, error) {
	b, err := t.Policy.Malloc(n, s)
	t.mallocs++
	t.lastOK = err == nil
	if err == nil {
		t.lastAddr = b.Addr
		// Until the alloc event is observed the block counts as seeded.
		t.origins[b.Addr] = origin{size: n, stream: s, marker: "(initial state)"}
	}
	return b, err
}

func (t *tracked) FreeCompleted(b replay.Block) {
	t.Policy.FreeCompleted(b)
	delete(t.origins, b.Addr)
}

func (t *tracked) Segments(fn func(trace.Segment) bool) {
	if in, ok := t.Policy.(replay.Inspector); ok {
		in.Segments(fn)
	}
}

type trackedSeeder struct{ *tracked }

func (t trackedSeeder) Seed(segs []trace.Segment) error {
	for _, s := range segs {
		for _, b := range s.Blocks {
			if b.State != trace.BlockInactive {
				t.origins[b.Addr] = origin{size: b.RequestedBytes, stream: s.Stream, marker: "(initial state)"}
			}
		}
	}
	return t.Policy.(replay.Seeder).Seed(segs)
}

type trackedReproducer struct{ *tracked }

func (t trackedReproducer) Reproduces(h *trace.Header) bool {
	return t.Policy.(replay.Reproducer).Reproduces(h)
}

type trackedBoth struct{ *tracked }

func (t trackedBoth) Seed(segs []trace.Segment) error { return trackedSeeder(t).Seed(segs) }
func (t trackedBoth) Reproduces(h *trace.Header) bool { return trackedReproducer(t).Reproduces(h) }

// trackFactory wraps f so that every policy it builds is tracked; the
// tracked policies are passed to onNew.
func trackFactory(f replay.Factory, onNew func(*tracked)) replay.Factory {
	return func(dev replay.Device, h *trace.Header) (replay.Policy, error) {
		p, err := f(dev, h)
		if err != nil {
			return nil, err
		}
		t := &tracked{Policy: p, origins: make(map[uint64]origin, 1024)}
		onNew(t)
		_, seeds := p.(replay.Seeder)
		_, repro := p.(replay.Reproducer)
		switch {
		case seeds && repro:
			return trackedBoth{t}, nil
		case seeds:
			return trackedSeeder{t}, nil
		case repro:
			return trackedReproducer{t}, nil
		}
		return t, nil
	}
}

// unwrap returns the tracked policy behind a policy built by trackFactory.
func unwrap(p replay.Policy) *tracked {
	switch t := p.(type) {
	case *tracked:
		return t
	case trackedSeeder:
		return t.tracked
	case trackedReproducer:
		return t.tracked
	case trackedBoth:
		return t.tracked
	}
	return nil
}
