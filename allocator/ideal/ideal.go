// Package ideal implements the physical limit of any allocator: memory reserved equals the bytes the program holds.
//
// Every request asks the device for exactly its requested bytes and every
// free gives them back at once: nothing is rounded, cached or split, so the
// reserved bytes equal the live requested bytes at every event, and its peak
// reserved equals the trace's peak live requested bytes. No real allocator
// reserves less; the distance to it is what rounding, caching and
// fragmentation cost.
//
// A block counts as live from its alloc to its free_completed, as memory
// another stream still reads must and as PyTorch's requested_bytes counts
// it (the replay's peak requested bytes). With the option
// free_at_request:true it is released at its free_requested instead, a bound
// below the trace's peak requested bytes when frees wait on other streams.
// A zero-byte request (PyTorch never passes one to its allocator) takes one
// byte so that its address is its own.
package ideal

import (
	"cmp"
	"slices"

	"github.com/fragsim/fragsim/allocator/internal/conf"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Config configures the ideal policy.
type Config struct {
	// FreeAtRequest releases a block's memory when the program frees it
	// instead of when the free completes.
	FreeAtRequest bool
}

// ParseConf reads the policy's options (free_at_request:true|false).
// PYTORCH_CUDA_ALLOC_CONF keys are ignored.
func ParseConf(s string) (Config, error) {
	var c Config
	err := conf.Parse(s, map[string]conf.Setter{
		"free_at_request": conf.Bool(&c.FreeAtRequest),
	})
	return c, err
}

// smallMax is the largest block reported in the "small" pool, as PyTorch.
const smallMax = 1 << 20

type block struct {
	size    uint64
	stream  trace.StreamID
	pending bool // freed by the program, held until the free completes
}

// Policy is the ideal allocator. It implements driver.Policy and driver.Inspector.
type Policy struct {
	dev    driver.Device
	cfg    Config
	blocks map[uint64]block // device allocations by address
}

// New returns an ideal policy that asks dev for its memory.
func New(dev driver.Device, cfg Config) (*Policy, error) {
	return &Policy{dev: dev, cfg: cfg, blocks: make(map[uint64]block)}, nil
}

// Name returns "ideal".
func (p *Policy) Name() string { return "ideal" }

// Malloc asks the device for exactly sizeBytes (one byte for zero).
func (p *Policy) Malloc(sizeBytes uint64, stream trace.StreamID) (driver.Block, error) {
	n := max(sizeBytes, 1)
	addr, ok := p.dev.Malloc(n, stream)
	if !ok {
		return driver.Block{}, &driver.OOMError{SizeBytes: sizeBytes, AllocBytes: n, Stream: stream,
			Reason: "the device has not enough free memory (the ideal policy caches nothing to release)"}
	}
	if _, dup := p.blocks[addr]; dup {
		panic("ideal: device returned an address already in use")
	}
	p.blocks[addr] = block{size: n, stream: stream}
	return driver.Block{Addr: addr, SizeBytes: n}, nil
}

// FreeRequested marks the block as freed; it releases it at once with
// free_at_request.
func (p *Policy) FreeRequested(blk driver.Block) {
	addr := blk.Addr
	if p.cfg.FreeAtRequest {
		p.release(addr)
		return
	}
	if b, ok := p.blocks[addr]; ok {
		b.pending = true
		p.blocks[addr] = b
	}
}

// FreeCompleted releases the block if FreeRequested did not.
func (p *Policy) FreeCompleted(blk driver.Block) { p.release(blk.Addr) }

func (p *Policy) release(addr uint64) {
	b, ok := p.blocks[addr]
	if !ok {
		return // already released at FreeRequested, or never handed out
	}
	delete(p.blocks, addr)
	p.dev.Free(addr, b.size)
}

// EmptyCache does nothing: the policy caches nothing.
func (p *Policy) EmptyCache() {}

// Stats reports no free or stranded bytes and no retries.
func (p *Policy) Stats() driver.Stats { return driver.Stats{} }

// Segments lists every live block as a segment of its own, by address.
func (p *Policy) Segments(fn func(seg trace.Segment) bool) {
	addrs := make([]uint64, 0, len(p.blocks))
	for a := range p.blocks {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, cmp.Compare)
	for _, a := range addrs {
		b := p.blocks[a]
		pool := "large"
		if b.size <= smallMax {
			pool = "small"
		}
		state := trace.BlockAllocated
		if b.pending {
			state = trace.BlockPendingFree
		}
		seg := trace.Segment{Stream: b.stream, Addr: a, SizeBytes: b.size, Pool: pool,
			Blocks: []trace.Block{{Addr: a, SizeBytes: b.size, RequestedBytes: b.size, State: state}}}
		if !fn(seg) {
			return
		}
	}
}
