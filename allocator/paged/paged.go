// Package paged implements a paged allocator: fixed-size pages, a request served by any free pages, as KV-cache managers do.
//
// Every request of n bytes takes ceil(n / page) pages that need not be
// contiguous (vLLM's PagedAttention block manager works this way for KV
// caches). Freed pages are cached and reused by any later request, of any
// size and stream, so there is no external fragmentation: the only waste is
// the unused tail of each request's last page, and the cached free pages.
// Reserved bytes are the pages in use plus the cached free pages; new pages
// are asked of the device one at a time, and empty_cache returns every
// cached page.
//
// It answers "what if this workload's tensors could be split into pages?".
// Real tensors are contiguous, so a program can use it only for data it
// addresses through a page table (KV caches, paged optimizer states); for
// the rest of a trace it is an optimistic bound. Small requests waste most of
// a page: choose page_mb to suit (default 2 MiB, fractions allowed).
package paged

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/fragsim/fragsim/allocator/internal/conf"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// DefaultPageSize is the default page size.
const DefaultPageSize = 2 << 20

// Config configures the paged policy.
type Config struct {
	PageSize uint64 // bytes, a multiple of 512
}

// DefaultConfig returns 2 MiB pages.
func DefaultConfig() Config { return Config{PageSize: DefaultPageSize} }

// ParseConf reads the policy's options: page_mb (MiB, fractions allowed,
// rounded down to 512 bytes). Keys of PYTORCH_CUDA_ALLOC_CONF are ignored.
func ParseConf(s string) (Config, error) {
	c := DefaultConfig()
	err := conf.Parse(s, map[string]conf.Setter{"page_mb": conf.MiB(&c.PageSize, 512, 512)})
	return c, err
}

type alloc struct {
	pages     []uint64
	requested uint64
	stream    trace.StreamID
	pending   bool
}

// Policy is the paged allocator. It implements driver.Policy and driver.Inspector.
type Policy struct {
	dev    driver.Device
	page   uint64
	free   []uint64          // cached free pages, reused last-in first-out
	allocs map[uint64]*alloc // by the address handed out (its first page)
}

// New returns a paged policy that asks dev for its pages.
func New(dev driver.Device, cfg Config) (*Policy, error) {
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.PageSize%512 != 0 {
		return nil, fmt.Errorf("page size %d is not a multiple of 512 bytes", cfg.PageSize)
	}
	return &Policy{dev: dev, page: cfg.PageSize, allocs: make(map[uint64]*alloc)}, nil
}

// Name returns "paged".
func (p *Policy) Name() string { return "paged" }

// Malloc takes ceil(sizeBytes/page) pages, cached ones first (most recently
// freed first), new ones from the device for the rest.
func (p *Policy) Malloc(sizeBytes uint64, stream trace.StreamID) (driver.Block, error) {
	n := int(max((sizeBytes+p.page-1)/p.page, 1))
	a := &alloc{pages: make([]uint64, 0, n), requested: sizeBytes, stream: stream}
	for len(a.pages) < n && len(p.free) > 0 {
		last := len(p.free) - 1
		a.pages = append(a.pages, p.free[last])
		p.free = p.free[:last]
	}
	for len(a.pages) < n {
		addr, ok := p.dev.Malloc(p.page, stream)
		if !ok {
			// Give the pages back to the cache in their order: nothing else
			// could be released.
			for i := len(a.pages) - 1; i >= 0; i-- {
				p.free = append(p.free, a.pages[i])
			}
			return driver.Block{}, &driver.OOMError{SizeBytes: sizeBytes, AllocBytes: uint64(n) * p.page, Stream: stream,
				Reason: fmt.Sprintf("%d pages of %d bytes needed, the device refused a new page", n, p.page)}
		}
		a.pages = append(a.pages, addr)
	}
	if _, dup := p.allocs[a.pages[0]]; dup {
		panic("paged: page handed out twice")
	}
	p.allocs[a.pages[0]] = a
	return driver.Block{Addr: a.pages[0], SizeBytes: uint64(n) * p.page}, nil
}

// FreeRequested marks the allocation as freed by the program; its pages are
// reused once the free completes.
func (p *Policy) FreeRequested(blk driver.Block) {
	addr := blk.Addr
	if a, ok := p.allocs[addr]; ok {
		a.pending = true
	}
}

// FreeCompleted returns the allocation's pages to the cache.
func (p *Policy) FreeCompleted(blk driver.Block) {
	addr := blk.Addr
	a, ok := p.allocs[addr]
	if !ok {
		return
	}
	delete(p.allocs, addr)
	// Push in reverse so that the first page is reused first.
	for i := len(a.pages) - 1; i >= 0; i-- {
		p.free = append(p.free, a.pages[i])
	}
}

// EmptyCache returns every cached page to the device.
func (p *Policy) EmptyCache() {
	for _, addr := range p.free {
		p.dev.Free(addr, p.page)
	}
	p.free = p.free[:0]
}

// Stats reports the cached pages as the largest request served without the
// device (pages need not be contiguous); nothing is stranded.
func (p *Policy) Stats() driver.Stats {
	return driver.Stats{LargestFreeBytes: uint64(len(p.free)) * p.page}
}

// CachedPages returns the number of free pages held.
func (p *Policy) CachedPages() int { return len(p.free) }

// Segments lists every page as a segment, by address: pages in use hold
// their share of the request, cached pages one inactive block.
func (p *Policy) Segments(fn func(seg trace.Segment) bool) {
	segs := make([]trace.Segment, 0, len(p.free)+len(p.allocs))
	for _, a := range p.allocs {
		left := a.requested
		state := trace.BlockAllocated
		if a.pending {
			state = trace.BlockPendingFree
		}
		for _, pg := range a.pages {
			req := min(left, p.page)
			left -= req
			segs = append(segs, trace.Segment{Stream: a.stream, Addr: pg, SizeBytes: p.page, Pool: "large",
				Blocks: []trace.Block{{Addr: pg, SizeBytes: p.page, RequestedBytes: req, State: state}}})
		}
	}
	for _, pg := range p.free {
		segs = append(segs, trace.Segment{Addr: pg, SizeBytes: p.page, Pool: "large",
			Blocks: []trace.Block{{Addr: pg, SizeBytes: p.page, State: trace.BlockInactive}}})
	}
	slices.SortFunc(segs, func(x, y trace.Segment) int { return cmp.Compare(x.Addr, y.Addr) })
	for _, s := range segs {
		if !fn(s) {
			return
		}
	}
}
