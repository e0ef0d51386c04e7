// Package bfc implements the best-fit-with-coalescing allocator of TensorFlow and XLA (JAX's default on GPUs).
//
// The rules follow the public source (tsl/framework/bfc_allocator.cc, as in
// TensorFlow and openxla/xla):
//
//   - Sizes: a request of n bytes is rounded up to a multiple of
//     kMinAllocationSize = 256 bytes (RoundedBytes).
//   - Bins: 21 bins, bin k holding free chunks of [256<<k, 256<<(k+1)) bytes,
//     the last one unbounded; each bin is ordered by (size, address). A
//     request searches its own bin and the ones above and takes the first
//     chunk large enough: the smallest fitting free chunk, lowest address
//     first. (One set ordered by (size, address) gives the same answer; that
//     is how it is kept here.)
//   - Splitting: a chunk is split, the remainder staying free, when it is at
//     least twice the rounded size or when the remainder would be at least
//     max_internal_fragmentation_bytes (128 MiB unless fragmentation_fraction
//     is set). Otherwise the whole chunk is handed out.
//   - Coalescing: a freed chunk merges with free neighbours of its region.
//   - Growth (allow_growth=true): when no chunk fits, a new region of
//     curr_region_allocation_bytes is asked of the device (at most the
//     memory limit less what is held). curr_region_allocation_bytes starts at
//     2 MiB (1 MiB in older releases: option initial_region_mb) and doubles
//     until the request fits; when it did not have to grow for this request,
//     it doubles after the extension. When the device refuses, the size is
//     backed off by 10% at a time down to the request. Regions are never
//     coalesced with each other (GPU sub-allocators do not support it).
//   - allow_growth=false: the first extension asks for the whole memory
//     limit at once, as TensorFlow does without allow_growth.
//   - Garbage collection (TF_ENABLE_GPU_GARBAGE_COLLECTION, on by default):
//     when extension fails, every region with no chunk in use is returned to
//     the device, if that can make room, and the extension is retried.
//
// The memory limit is option memory_limit_mb when given, else the device cap
// in force (it follows the trace's set_fraction events), else the device's
// total memory. What is not modelled: BFC is a
// single-stream allocator (TensorFlow orders all frees on its compute
// stream), so streams are ignored and every free chunk serves every stream; a
// chunk is reused once its free completes (free_completed), not when the
// program drops it; the freed-at-count timestamps, spatial partitioning and
// the 10-second retry-with-backoff loop of AllocateRawWithRetry (a replay has
// no other threads to wait for) are left out. BFC has no empty_cache: the
// trace's empty-cache calls return fully free regions, as garbage collection
// does.
package bfc

import (
	"fmt"
	"strconv"

	"github.com/fragsim/fragsim/allocator/internal/arena"
	"github.com/fragsim/fragsim/allocator/internal/conf"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Constants of the TensorFlow source.
const (
	MinAllocationSize        = 256       // kMinAllocationSize
	NumBins                  = 21        // kNumBins
	MaxInternalFragmentation = 128 << 20 // default max_internal_fragmentation_bytes
	DefaultInitialRegion     = 2 << 20   // curr_region_allocation_bytes at start (allow_growth)
	backpedalFactor          = 0.9       // kBackpedalFactor
)

// Config configures the BFC policy.
type Config struct {
	AllowGrowth       bool    // grow region by region (true) or take the whole limit at once
	GarbageCollection bool    // return free regions when extension fails
	InitialRegion     uint64  // first region size with allow_growth (bytes)
	MemoryLimit       uint64  // bytes; 0 takes the device cap or total
	FragFraction      float64 // fragmentation_fraction; 0 means 128 MiB
}

// DefaultConfig returns TensorFlow's GPU defaults with allow_growth=true.
func DefaultConfig() Config {
	return Config{AllowGrowth: true, GarbageCollection: true, InitialRegion: DefaultInitialRegion}
}

// ParseConf reads the policy's options: allow_growth, garbage_collection
// (true|false), initial_region_mb, memory_limit_mb (MiB) and
// fragmentation_fraction (of the memory limit, in (0, 1)). Keys of
// PYTORCH_CUDA_ALLOC_CONF are ignored.
func ParseConf(s string) (Config, error) {
	c := DefaultConfig()
	err := conf.Parse(s, map[string]conf.Setter{
		"fragmentation_fraction": func(v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 || f >= 1 {
				return fmt.Errorf("%q is not a fraction in (0, 1)", v)
			}
			c.FragFraction = f
			return nil
		},
		"allow_growth":       conf.Bool(&c.AllowGrowth),
		"garbage_collection": conf.Bool(&c.GarbageCollection),
		"initial_region_mb":  conf.MiB(&c.InitialRegion, MinAllocationSize, MinAllocationSize),
		"memory_limit_mb":    conf.MiB(&c.MemoryLimit, MinAllocationSize, MinAllocationSize),
	})
	return c, err
}

// RoundedBytes rounds n up to a multiple of MinAllocationSize (at least one).
func RoundedBytes(n uint64) uint64 {
	n = max(n, 1)
	return (n + MinAllocationSize - 1) / MinAllocationSize * MinAllocationSize
}

// BinFor returns the bin of a chunk of size bytes.
func BinFor(size uint64) int {
	b := 0
	for v := max(size, MinAllocationSize) >> 9; v > 0 && b < NumBins-1; v >>= 1 {
		b++
	}
	return b
}

// Policy is the BFC allocator. It implements driver.Policy and driver.Inspector.
type Policy struct {
	dev     driver.Device
	cfg     Config
	a       *arena.Arena
	curr    uint64 // curr_region_allocation_bytes_
	maxFrag uint64 // max_internal_fragmentation_bytes_
	retries int64
}

// New returns a BFC policy that asks dev for its regions.
func New(dev driver.Device, cfg Config) (*Policy, error) {
	limit := memoryLimit(dev, cfg)
	if cfg.InitialRegion == 0 {
		cfg.InitialRegion = DefaultInitialRegion
	}
	p := &Policy{dev: dev, cfg: cfg, a: arena.New(), maxFrag: MaxInternalFragmentation}
	if cfg.FragFraction > 0 {
		p.maxFrag = uint64(cfg.FragFraction * float64(limit))
	}
	if cfg.AllowGrowth {
		p.curr = RoundedBytes(min(limit, cfg.InitialRegion))
	} else {
		p.curr = RoundedBytes(limit)
	}
	return p, nil
}

// Name returns "bfc".
func (p *Policy) Name() string { return "bfc" }

// Malloc serves a request as AllocateRawInternal does.
func (p *Policy) Malloc(sizeBytes uint64, stream trace.StreamID) (driver.Block, error) {
	rounded := RoundedBytes(sizeBytes)
	if r := p.find(rounded, sizeBytes, stream); r != nil {
		return driver.Block{Addr: r.Addr, SizeBytes: r.Size}, nil
	}
	if p.extend(rounded, stream) {
		if r := p.find(rounded, sizeBytes, stream); r != nil {
			return driver.Block{Addr: r.Addr, SizeBytes: r.Size}, nil
		}
	}
	if p.cfg.GarbageCollection && p.deallocateFreeRegions(rounded) {
		p.retries++
		if p.extend(rounded, stream) {
			if r := p.find(rounded, sizeBytes, stream); r != nil {
				return driver.Block{Addr: r.Addr, SizeBytes: r.Size}, nil
			}
		}
	}
	return driver.Block{}, &driver.OOMError{SizeBytes: sizeBytes, AllocBytes: rounded, Stream: stream,
		Reason: fmt.Sprintf("no free chunk of %d bytes and no region could be added (%d bytes held, limit %d)",
			rounded, p.a.ReservedBytes(), p.memoryLimit())}
}

// find is FindChunkPtr: best fit, then split when ShouldSplit says so.
func (p *Policy) find(rounded, requested uint64, stream trace.StreamID) *arena.Range {
	r := p.a.BestFit(rounded)
	if r == nil {
		return nil
	}
	split := r.Size >= 2*rounded || r.Size-rounded >= p.maxFrag
	return p.a.Take(r, rounded, requested, stream, split)
}

// memoryLimit is memory_limit_: the configured limit, else the device cap
// in force now (a trace's set_fraction events move it), else the device's
// total memory.
func (p *Policy) memoryLimit() uint64 {
	return memoryLimit(p.dev, p.cfg)
}

func memoryLimit(dev driver.Device, cfg Config) uint64 {
	if cfg.MemoryLimit > 0 {
		return cfg.MemoryLimit
	}
	if c, capped := dev.Cap(); capped {
		return c
	}
	if t := dev.TotalBytes(); t > 0 {
		return t
	}
	return 1 << 62 // no limit known: the device decides
}

// extend is Extend: add one region big enough for rounded bytes.
func (p *Policy) extend(rounded uint64, stream trace.StreamID) bool {
	held, limit := p.a.ReservedBytes(), p.memoryLimit()
	if held >= limit {
		return false
	}
	available := (limit - held) / MinAllocationSize * MinAllocationSize
	if rounded > available {
		return false
	}
	increased := false
	for rounded > p.curr {
		p.curr *= 2
		increased = true
	}
	bytes := min(p.curr, available)
	addr, ok := p.dev.Malloc(bytes, stream)
	for !ok {
		back := RoundedBytes(uint64(float64(bytes) * backpedalFactor))
		if back >= bytes {
			back = bytes - MinAllocationSize
		}
		bytes = back
		if bytes < rounded {
			return false
		}
		addr, ok = p.dev.Malloc(bytes, stream)
	}
	if !increased {
		p.curr *= 2
	}
	p.a.AddSegment(addr, bytes, stream, "large")
	return true
}

// deallocateFreeRegions is DeallocateFreeRegions: return every region with
// no chunk in use, when that can make room for rounded bytes.
func (p *Policy) deallocateFreeRegions(rounded uint64) bool {
	free := p.a.FullyFreeBytes()
	if free == 0 {
		return false
	}
	limit := p.memoryLimit()
	if rounded > limit-min(limit, p.a.ReservedBytes())+free {
		return false
	}
	p.releaseFree()
	return true
}

func (p *Policy) releaseFree() {
	for _, s := range p.a.FullyFreeSegs() {
		addr, size := s.Addr, s.Size
		p.a.RemoveSegment(s)
		p.dev.Free(addr, size)
	}
}

// FreeRequested marks the chunk as freed by the program; it is reused once
// the free completes.
func (p *Policy) FreeRequested(blk driver.Block) {
	addr := blk.Addr
	if r, ok := p.a.Lookup(addr); ok {
		r.Pending = true
	}
}

// FreeCompleted returns the chunk and merges it with free neighbours.
func (p *Policy) FreeCompleted(blk driver.Block) {
	addr := blk.Addr
	if r, ok := p.a.Lookup(addr); ok {
		p.a.Release(r)
	}
}

// EmptyCache returns every region with no chunk in use to the device.
func (p *Policy) EmptyCache() { p.releaseFree() }

// Stats reports the largest free chunk and the free bytes of regions in use.
func (p *Policy) Stats() driver.Stats {
	return driver.Stats{LargestFreeBytes: p.a.LargestFree(), StrandedBytes: p.a.StrandedBytes(), AllocRetries: p.retries}
}

// Segments lists the regions and their chunks, by address.
func (p *Policy) Segments(fn func(seg trace.Segment) bool) { p.a.Segments(fn) }

// RegionAllocationBytes returns the size the next region will be asked for
// (curr_region_allocation_bytes_).
func (p *Policy) RegionAllocationBytes() uint64 { return p.curr }

// Check verifies the policy's internal invariants (for tests); "" when sound.
func (p *Policy) Check() string { return p.a.Check() }
