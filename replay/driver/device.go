package driver

import "github.com/fragsim/fragsim/trace"

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

// FractionSetter is implemented by the engine's devices: a policy whose
// configuration carries a memory fraction (PyTorch's
// per_process_memory_fraction key) sets it through it.
type FractionSetter interface {
	SetFraction(f float64)
}
