package driver

import "github.com/fragsim/fragsim/trace"

// The interfaces of this file are optional: the engine uses them when a
// policy implements them, and does without otherwise.

// Completer is implemented by policies that take a request together with
// the frees completed before it, in one call, and for which a completed
// free implies its request. The engine then passes the frees of a block
// whose free_completed directly follows its free_requested to
// FreeCompleted or MallocAfter alone, with no FreeRequested, and serves
// the allocs of a one-device replay through MallocAfter.
type Completer interface {
	// MallocAfter does what FreeCompleted(b) for each b of freed, in
	// order, then Malloc(sizeBytes, stream) do, and returns Malloc's
	// results with Stats().StrandedBytes after them. A block of freed need
	// not have been passed to FreeRequested.
	MallocAfter(freed []Block, sizeBytes uint64, stream trace.StreamID) (b Block, strandedBytes uint64, err error)
}

// Strander is implemented by policies that report Stats().StrandedBytes
// alone, more cheaply than Stats: the engine asks for it after every
// request.
type Strander interface {
	StrandedBytes() uint64
}

// Releaser is implemented by policies that can hand their memory to the
// policies of later replays. The engine calls Release on the policies it
// built once the replay is over and its result complete; a policy must not
// be used after Release.
type Releaser interface {
	Release()
}

// Seeder is implemented by policies that can start from a trace's initial
// state (live blocks and segments at the first event). A seeded block keeps
// its recorded address.
type Seeder interface {
	Seed(segs []trace.Segment) error
}

// Inspector is implemented by policies that can list their segments and
// blocks, for fragmentation breakdowns and histograms. fn returns false to stop.
type Inspector interface {
	Segments(fn func(seg trace.Segment) bool)
}

// Reproducer is implemented by policies that claim to reproduce the
// allocator a trace was recorded with. The engine checks fidelity (every
// device call and every allocation's address against the recorded ones)
// only when the trace carries device events and the policy's Reproduces
// returns true for the trace's header.
type Reproducer interface {
	Reproduces(h *trace.Header) bool
}

// Pooler is implemented by policies that keep private pools, as PyTorch's
// caching allocator does for CUDA graph capture and torch.cuda.MemPool.
// The engine passes a trace's pool_begin, pool_end and pool_release events
// to it; a policy without it serves every request from its one pool.
type Pooler interface {
	// BeginPool routes the requests on stream (every request when stream
	// is 0: a MemPool routed by thread) to private pool id, made if new,
	// until EndPool(id, stream). The newest route that matches wins.
	BeginPool(id uint64, stream trace.StreamID) error
	// EndPool ends the route begun by BeginPool(id, stream).
	EndPool(id uint64, stream trace.StreamID)
	// ReleasePool says pool id's last user let it go (its graph or
	// MemPool was destroyed): its free memory may go back to the device.
	ReleasePool(id uint64)
}
