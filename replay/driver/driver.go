// Package driver is the contract between the replay engine and allocator
// policies, as database/sql/driver is to database/sql: a policy package
// implements Policy (and any optional interfaces it supports) against a
// Device, and imports this package alone of the engine's.
package driver

import "github.com/fragsim/fragsim/trace"

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

// Factory builds a fresh policy for one device of a trace. The engine calls
// it once per device, and again for every run of a sweep or bisection.
type Factory func(dev Device, h *trace.Header) (Policy, error)
