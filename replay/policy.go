package replay

import (
	"errors"
	"fmt"

	"github.com/fragsim/fragsim/trace"
)

// Policy is an allocator policy: it serves a trace's requests from memory it
// asks of a Device. One Policy serves one device of a trace. The engine calls
// its methods in trace order, from one goroutine.
type Policy interface {
	// Name is the policy's name as given to --policy (e.g. "caching").
	Name() string
	// Malloc serves a request of sizeBytes on stream. It returns the block
	// handed out, or an error wrapping ErrOOM when even releasing its cache
	// and retrying leaves the device unable to serve it.
	Malloc(sizeBytes uint64, stream trace.StreamID) (Block, error)
	// FreeRequested tells the policy the program freed block b, as Malloc
	// returned it (or, for a block of the initial state given to Seed,
	// with its address and a zero Handle). The block stops counting as
	// allocated but stays active until FreeCompleted (PyTorch waits for
	// other streams that used it).
	FreeRequested(b Block)
	// FreeCompleted returns block b, passed as to FreeRequested, to the
	// policy's free lists.
	FreeCompleted(b Block)
	// EmptyCache releases what the policy caches, as torch.cuda.empty_cache().
	EmptyCache()
	// Stats returns the policy's view of its state. It must be cheap
	// (no walk over all blocks): the engine calls it often.
	Stats() Stats
}

// Block is what Malloc hands out.
type Block struct {
	Addr      uint64
	SizeBytes uint64 // the block's size: rounded, or larger when not split
	// Handle is the policy's own reference to the block, or zero. Callers
	// pass the Block back to FreeRequested and FreeCompleted, so that a
	// policy need not look the block up by its address; a policy must
	// still accept a zero Handle and find the block by Addr.
	Handle uint32
}

// Stats is a policy's own view of its state and counters.
type Stats struct {
	// LargestFreeBytes is the largest free block a request could be served
	// from without asking the device.
	LargestFreeBytes uint64
	// StrandedBytes are free bytes inside segments that still hold live
	// blocks (PyTorch's inactive_split_bytes).
	StrandedBytes uint64
	// AllocRetries counts release-and-retry attempts (num_alloc_retries).
	AllocRetries int64
}

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

// Releaser is implemented by policies that can hand their memory to the
// policies of later replays. Run calls Release on the policies it built
// once the replay is over and its Result complete; a policy must not be
// used after Release.
type Releaser interface {
	Release()
}

// Seeder is implemented by policies that can start from a trace's initial
// state (live blocks and segments at the first event).
type Seeder interface {
	Seed(segs []trace.Segment) error
}

// Inspector is implemented by policies that can list their segments and
// blocks, for fragmentation breakdowns and histograms. fn returns false to stop.
type Inspector interface {
	Segments(fn func(seg trace.Segment) bool)
}

// Device is the simulated GPU a policy asks for memory. The engine
// implements it: it enforces the capacity and the memory fraction, counts
// device calls, gives new segments the addresses the recorded allocator got
// when the trace has them (deterministic ones otherwise), and checks every
// call against the recorded device events.
type Device interface {
	// Malloc asks for a segment of sizeBytes (cudaMalloc). ok is false when
	// the device refuses: over the memory-fraction cap, or over capacity.
	Malloc(sizeBytes uint64, stream trace.StreamID) (addr uint64, ok bool)
	// Free returns a segment obtained from Malloc (cudaFree).
	Free(addr, sizeBytes uint64)
	// Reserve reserves virtual address space for an expandable segment.
	// It uses no memory and never fails.
	Reserve(sizeBytes uint64, stream trace.StreamID) (base uint64)
	// Map backs [addr, addr+sizeBytes) with memory (whole pages). ok is false
	// when the device refuses, as for Malloc.
	Map(addr, sizeBytes uint64) (ok bool)
	// Unmap releases pages mapped by Map.
	Unmap(addr, sizeBytes uint64)
	// Cap returns the allocator's own limit (memory fraction × total) and
	// whether one is set (fraction < 1).
	Cap() (allowedBytes uint64, capped bool)
	// TotalBytes is the device's total memory (totalGlobalMem).
	TotalBytes() uint64
	// Recorded returns the recorded device events that no call has matched
	// yet, oldest first: the real allocator's next moves, when the trace
	// has them. Policies may use them to choose between readings of an
	// ambiguous trace; they must not depend on them otherwise.
	Recorded() []trace.Event
}

// ErrOOM is wrapped by errors a Policy returns when it cannot serve a request.
var ErrOOM = errors.New("out of memory")

// OOMError describes a request a policy could not serve.
type OOMError struct {
	SizeBytes  uint64 // requested bytes
	AllocBytes uint64 // bytes the policy asked of the device
	Stream     trace.StreamID
	Reason     string
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("out of memory: request of %d bytes (device asked for %d) on stream %#x: %s",
		e.SizeBytes, e.AllocBytes, uint64(e.Stream), e.Reason)
}

// Unwrap makes errors.Is(err, ErrOOM) true.
func (e *OOMError) Unwrap() error { return ErrOOM }

// Factory builds a fresh policy for one device of a trace. The engine calls
// it once per device, and again for every run of a sweep or bisection.
type Factory func(dev Device, h *trace.Header) (Policy, error)
