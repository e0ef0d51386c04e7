// Package async models CUDA's stream-ordered memory pool (cudaMallocAsync), which PyTorch uses with backend:cudaMallocAsync.
//
// The pool's internals are not public. The model's rules come from probes
// of the real pool (TestRealPoolProbes: an NVIDIA H200, driver 580,
// PyTorch 2.11.0+cu130, backend:cudaMallocAsync; block addresses from
// data_ptr, reserved from the pool's ReservedMemCurrent), from what NVIDIA
// and PyTorch publish, and, where the probes leave a choice, from four
// real workloads (the table below):
//
//   - PyTorch passes every request unchanged to cudaMallocAsync on the
//     current stream and every free to cudaFreeAsync; it does no rounding,
//     splitting or caching of its own. The pool's release threshold is set
//     to UINT64_MAX (nothing is returned to the device on its own) and all
//     reuse policies are on; empty_cache synchronizes and calls
//     cudaMemPoolTrimTo(pool, 0).
//   - One heap (probed): the pool is a single contiguous range of virtual
//     addresses (no jump in 4 GB of back-to-back 20, 100 or 300 MiB
//     requests), shared by requests of every size (a 4 KiB request lands
//     right after a 17 MiB one, a 1 MiB request in the tail of a 100 MiB
//     one). Requests are rounded up to 512 bytes and placed at the low end
//     of a free range; freed ranges merge with free neighbours.
//   - Growth in 32 MiB pieces (probed): reserved memory is always a multiple
//     of 32 MiB (one 100-byte request reserves 32 MiB, one of 100 MiB 128
//     MiB; so is every measured peak, and the 84490059776 bytes of
//     rapidsai/rmm#1245). When no free range holds a request, the heap
//     grows at its end: the request starts in the free range at the end,
//     if any, and the pieces it reaches past the end are mapped (twelve 9
//     MiB requests: the 7th spans the 64 MiB mark; option granularity_mb).
//   - Placement: the probed choices (holes of 8, 4 and 6 MiB: 3.5 MiB goes
//     to the 4, then 5 MiB to the 6, 0.5 MiB to the rest of the 4; a hole
//     before the untouched tail) are those of best fit and also of a
//     segregated fit, which the model uses: free ranges fall in size
//     classes, fit_bins (default 4) per power of two; a request is rounded
//     up to a class boundary and takes the lowest-addressed range of the
//     smallest class that can hold any such request (TLSF's good fit), so
//     it can pass over a range of its own class that would hold it.
//     fit_bins:0 is exact best fit by (size, address). The probes do not
//     tell the two apart; the workloads do (table).
//   - Remapping: NVIDIA's blog on the stream-ordered allocator says the
//     driver "defragments the pool by remapping unused memory to a
//     contiguous portion of the virtual address space". The probes show it
//     once: a growing tensor's 34 MiB step ended 99 MiB above the heap's
//     first block with 96 MiB reserved, so the memory of the first piece,
//     then idle, was moved. Option remap:true moves the memory of a piece
//     with nothing live (the lowest) whenever the heap needs a piece mapped.
//     It is off by default: applied that broadly it reserves 21% too little
//     on shared_s1, so the real pool remaps far less than that, by a rule
//     no probe has shown yet.
//   - Streams: a range freed with cudaFreeAsync is reusable by its own stream
//     at once and by other streams once the free has run (opportunistic
//     reuse). The trace's free_completed marks the moment the memory is safe
//     for every stream, so the model returns a range to the pool there and
//     lets every stream reuse it; it cannot tell a same-stream reuse that the
//     real pool would make earlier, before other streams are done.
//   - Release: with the default threshold (max) nothing goes back but on
//     empty_cache, which unmaps every piece with nothing live (TrimTo 0);
//     their addresses stay in the heap and are mapped again when used.
//     Option release_threshold_mb unmaps such pieces, from the top, after a
//     free whenever the pool holds more than the threshold.
//
// Why one heap: a chunk of its own per request (rounded up to 2 MiB)
// would put each 2.25 MiB attention weight of multi_agent.py's five BERT
// copies (baseline_s1) in a 4 MiB chunk and each 9 MiB feed-forward weight
// in a 10 MiB one; the weights live to the end, so 538 MiB of tails would
// be stranded at the peak, while the real pool holds only 100 MiB above the
// live bytes: it packs them back to back.
//
// fit_bins and remap are set from four real backend:cudaMallocAsync runs
// on an H200, the model's peak reserved against the real pool's
// (bench/RESULTS.md, "The pooled model"): a fit, not a held-out test.
//
// A memory fraction is checked as PyTorch does, against the live requested
// bytes before the pool is asked; the replay device still caps reserved
// bytes too, which the real pool does not.
//
// What it cannot model: the driver's real free-range choice (best fit and
// a segregated fit agree on every probe) and when it remaps idle memory;
// the graph-memory pool; timing, so a same-stream reuse the real pool
// makes before a free completes; and a fraction cap that only PyTorch's
// live-bytes check enforces (the replay device caps reserved bytes as
// well). Its peak reserved is to be compared with a real
// backend:cudaMallocAsync run (bench/async).
package async

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/fragsim/fragsim/allocator/internal/conf"
	"github.com/fragsim/fragsim/allocator/internal/size"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Model constants.
const (
	DefaultGranularity = 32 << 20 // the pool grows and trims in pieces of this size
	DefaultFitBins     = 4        // size classes per power of two of the segregated fit
	Alignment          = 512      // sub-allocation rounding
	vaSpan             = 1 << 46  // virtual address space reserved for the heap
)

// MappedPages is the pieces the pool maps, or unmaps, for n bytes at the
// default granularity: the device-cost model prices each piece's driver
// calls.
func MappedPages(n uint64) uint64 { return (n + DefaultGranularity - 1) / DefaultGranularity }

// Config configures the pool model.
type Config struct {
	Granularity      uint64 // the heap is mapped in pieces of this size (bytes)
	FitBins          int    // size classes per power of two (a power of two); 0: exact best fit
	ReleaseThreshold uint64 // bytes kept after a free; 0 means unlimited (UINT64_MAX)
	Remap            bool   // move the memory of a piece with nothing live instead of mapping new
}

// DefaultConfig returns the model as PyTorch configures the pool.
func DefaultConfig() Config {
	return Config{Granularity: DefaultGranularity, FitBins: DefaultFitBins}
}

// ParseConf reads the model's options: granularity_mb and
// release_threshold_mb (MiB), fit_bins (0, 1, 2, 4, ...: size classes per
// power of two; 0 is exact best fit) and remap (true|false). Keys of
// PYTORCH_CUDA_ALLOC_CONF are ignored.
func ParseConf(s string) (Config, error) {
	c := DefaultConfig()
	err := conf.Parse(s, map[string]conf.Setter{
		"granularity_mb":       conf.MiB(&c.Granularity, Alignment, Alignment),
		"release_threshold_mb": conf.MiB(&c.ReleaseThreshold, 1, 1),
		"remap":                conf.Bool(&c.Remap),
		"fit_bins": func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1<<10 || n&(n-1) != 0 {
				return fmt.Errorf("%q is not 0 or a power of two up to 1024", v)
			}
			c.FitBins = n
			return nil
		},
	})
	return c, err
}

// block is a live allocation.
type block struct {
	off, size, requested uint64
	stream               trace.StreamID
	pending              bool
}

// Policy is the pool model. It implements driver.Policy and driver.Inspector.
type Policy struct {
	dev     driver.Device
	cfg     Config
	base    uint64 // the heap's virtual address
	end     uint64 // offset where the heap's free ranges end (a multiple of Granularity)
	h       heap
	mapped  []bool   // per piece of Granularity bytes from base
	live    []uint64 // live bytes per piece
	nMapped uint64
	blocks  map[uint64]*block // by address
	used    uint64            // PyTorch's pytorch_used_bytes: live requested bytes
	retries int64
	remaps  int64
}

// New returns a pool model that asks dev for its memory.
func New(dev driver.Device, cfg Config) (*Policy, error) {
	if cfg.Granularity == 0 {
		cfg.Granularity = DefaultGranularity
	}
	if cfg.Granularity%Alignment != 0 {
		return nil, fmt.Errorf("granularity %d is not a multiple of %d bytes", cfg.Granularity, Alignment)
	}
	if cfg.FitBins < 0 || cfg.FitBins&(cfg.FitBins-1) != 0 {
		return nil, fmt.Errorf("fit_bins %d is not 0 or a power of two", cfg.FitBins)
	}
	return &Policy{dev: dev, cfg: cfg, h: heap{bins: cfg.FitBins}, blocks: map[uint64]*block{}}, nil
}

func roundUp(n, m uint64) uint64 { return (n + m - 1) / m * m }

// Name returns "pooled".
func (p *Policy) Name() string { return "pooled" }

// pieces returns the first and last piece that [off, off+n) touches.
func (p *Policy) pieces(off, n uint64) (uint64, uint64) {
	g := p.cfg.Granularity
	return off / g, (off + n - 1) / g
}

// mapRange maps every unmapped piece of [off, off+n); on a refusal it
// unmaps what it mapped and returns false.
func (p *Policy) mapRange(off, n uint64) bool {
	g := p.cfg.Granularity
	lo, hi := p.pieces(off, n)
	for uint64(len(p.mapped)) <= hi {
		p.mapped = append(p.mapped, false)
		p.live = append(p.live, 0)
	}
	var done []uint64
	for i := lo; i <= hi; i++ {
		if p.mapped[i] {
			continue
		}
		if p.cfg.Remap {
			if j := p.idlePiece(lo, hi); j >= 0 {
				// Remap: the memory of a piece with nothing live moves here.
				p.dev.Unmap(p.base+uint64(j)*g, g)
				p.mapped[j] = false
				p.nMapped--
				p.remaps++
			}
		}
		if !p.dev.Map(p.base+i*g, g) {
			for _, j := range done {
				p.dev.Unmap(p.base+j*g, g)
				p.mapped[j] = false
				p.nMapped--
			}
			return false
		}
		p.mapped[i] = true
		p.nMapped++
		done = append(done, i)
	}
	return true
}

// idlePiece returns a mapped piece outside [lo, hi] with nothing live, the
// lowest, or -1.
func (p *Policy) idlePiece(lo, hi uint64) int {
	for j, m := range p.mapped {
		if m && p.live[j] == 0 && (uint64(j) < lo || uint64(j) > hi) {
			return j
		}
	}
	return -1
}

// Malloc serves a request from the heap, growing it at its end if needed.
// A request larger than the device's total memory, or than the heap's
// address space, is refused without asking the device.
func (p *Policy) Malloc(sizeBytes uint64, stream trace.StreamID) (driver.Block, error) {
	if c, capped := p.dev.Cap(); capped && (sizeBytes > c || p.used > c-sizeBytes) {
		// PyTorch's own check, made against its live bytes before asking the pool.
		return driver.Block{}, &driver.OOMError{SizeBytes: sizeBytes, Stream: stream,
			Reason: fmt.Sprintf("allocation would exceed allowed memory: %d bytes live, limit %d", p.used, c)}
	}
	if p.base == 0 {
		p.base = p.dev.Reserve(vaSpan, stream)
	}
	n, ok := size.RoundUp(max(sizeBytes, 1), Alignment)
	if total := p.dev.TotalBytes(); !ok || n > vaSpan || total > 0 && n > total {
		// No piece could ever be mapped for it: refused without asking
		// the device, counted as a failed attempt as a refusal is.
		p.retries++
		return driver.Block{}, &driver.OOMError{SizeBytes: sizeBytes, AllocBytes: n, Stream: stream,
			Reason: fmt.Sprintf("larger than the device's %d bytes or the pool's %d of address space", total, uint64(vaSpan))}
	}
	i := p.h.find(n)
	grown := uint64(0)
	if i < 0 {
		// Grow: the free range at the end, if any, and new pieces after it.
		start := p.end
		if t := p.h.tail(p.end); t >= 0 {
			start = p.h.free[t].off
		}
		if start+n > vaSpan {
			return driver.Block{}, &driver.OOMError{SizeBytes: sizeBytes, AllocBytes: n, Stream: stream,
				Reason: fmt.Sprintf("the pool's %d bytes of address space are taken", uint64(vaSpan))}
		}
		grown = roundUp(start+n-p.end, p.cfg.Granularity)
		p.h.put(p.end, grown)
		p.end += grown
		i = p.h.tail(p.end)
	}
	off := p.h.free[i].off
	if !p.mapRange(off, n) {
		if grown > 0 {
			p.shrinkEnd()
		}
		p.retries++
		return driver.Block{}, &driver.OOMError{SizeBytes: sizeBytes, AllocBytes: n, Stream: stream,
			Reason: fmt.Sprintf("the pool holds %d bytes (%d free) and the device refused more",
				p.reserved(), p.freeMapped())}
	}
	p.h.take(i, n)
	b := &block{off: off, size: n, requested: sizeBytes, stream: stream}
	p.blocks[p.base+off] = b
	p.addLive(off, n, true)
	p.used += sizeBytes
	return driver.Block{Addr: p.base + off, SizeBytes: n}, nil
}

// addLive adds (or removes) [off, off+n) to the live bytes of its pieces.
func (p *Policy) addLive(off, n uint64, add bool) {
	g := p.cfg.Granularity
	lo, hi := p.pieces(off, n)
	for i := lo; i <= hi; i++ {
		a, b := max(off, i*g), min(off+n, (i+1)*g)
		if add {
			p.live[i] += b - a
		} else {
			p.live[i] -= b - a
		}
	}
}

// shrinkEnd drops unmapped pieces at the end of the heap from its free ranges.
func (p *Policy) shrinkEnd() {
	g := p.cfg.Granularity
	for p.end > 0 && !p.mapped[p.end/g-1] {
		t := p.h.tail(p.end)
		if t < 0 || p.h.free[t].off > p.end-g {
			return
		}
		if s := &p.h.free[t]; s.size == g {
			p.h.free = p.h.free[:t]
		} else {
			s.size -= g
		}
		p.end -= g
	}
}

func (p *Policy) reserved() uint64 { return p.nMapped * p.cfg.Granularity }

// freeMapped returns the mapped bytes that hold no live allocation.
func (p *Policy) freeMapped() uint64 {
	var n uint64
	for i, m := range p.mapped {
		if m {
			n += p.cfg.Granularity - p.live[i]
		}
	}
	return n
}

// unmapIdle unmaps pieces with nothing live, from the end of the heap
// down, until the pool holds no more than keep bytes (all of them when
// all is true).
func (p *Policy) unmapIdle(keep uint64, all bool) {
	g := p.cfg.Granularity
	for i := len(p.mapped) - 1; i >= 0; i-- {
		if !all && p.reserved() <= keep {
			return
		}
		if p.mapped[i] && p.live[i] == 0 {
			p.dev.Unmap(p.base+uint64(i)*g, g)
			p.mapped[i] = false
			p.nMapped--
		}
	}
}

// FreeRequested marks the block as freed by the program; the pool reuses
// it once the free completes.
func (p *Policy) FreeRequested(blk driver.Block) {
	addr := blk.Addr
	if b, ok := p.blocks[addr]; ok && !b.pending {
		b.pending = true
		p.used -= b.requested
	}
}

// FreeCompleted returns the block to the heap.
func (p *Policy) FreeCompleted(blk driver.Block) {
	addr := blk.Addr
	b, ok := p.blocks[addr]
	if !ok {
		return
	}
	if !b.pending {
		p.used -= b.requested
	}
	delete(p.blocks, addr)
	p.addLive(b.off, b.size, false)
	p.h.put(b.off, b.size)
	if t := p.cfg.ReleaseThreshold; t > 0 && p.reserved() > t {
		p.unmapIdle(t, false)
	}
}

// EmptyCache trims the pool to zero: every piece with nothing live is unmapped.
func (p *Policy) EmptyCache() { p.unmapIdle(0, true) }

// Stats reports the largest free range the pool can serve without new
// memory and the free bytes of pieces that hold live allocations.
func (p *Policy) Stats() driver.Stats {
	g := p.cfg.Granularity
	var largest, stranded uint64
	for _, s := range p.h.free {
		// the longest run of mapped bytes in s
		var run uint64
		for off := s.off; off < s.off+s.size; {
			next := min((off/g+1)*g, s.off+s.size)
			if p.mapped[off/g] {
				run += next - off
				largest = max(largest, run)
			} else {
				run = 0
			}
			off = next
		}
	}
	for i, m := range p.mapped {
		if m && p.live[i] > 0 {
			stranded += g - p.live[i]
		}
	}
	return driver.Stats{LargestFreeBytes: largest, StrandedBytes: stranded, AllocRetries: p.retries}
}

// Remaps returns how many pieces had their memory moved to serve a request.
func (p *Policy) Remaps() int64 { return p.remaps }

// Segments reports the heap as one segment, its blocks by address.
func (p *Policy) Segments(fn func(seg trace.Segment) bool) {
	if p.end == 0 {
		return
	}
	seg := trace.Segment{Addr: p.base, SizeBytes: p.end, Pool: "large", Expandable: true}
	var used []*block
	for _, b := range p.blocks {
		used = append(used, b)
	}
	slices.SortFunc(used, func(x, y *block) int { return cmp.Compare(x.off, y.off) })
	fi := 0
	for _, b := range used {
		for fi < len(p.h.free) && p.h.free[fi].off < b.off {
			f := p.h.free[fi]
			seg.Blocks = append(seg.Blocks, trace.Block{Addr: p.base + f.off, SizeBytes: f.size, State: trace.BlockInactive})
			fi++
		}
		st := trace.BlockAllocated
		if b.pending {
			st = trace.BlockPendingFree
		}
		seg.Blocks = append(seg.Blocks, trace.Block{Addr: p.base + b.off, SizeBytes: b.size, RequestedBytes: b.requested, State: st})
	}
	for ; fi < len(p.h.free); fi++ {
		f := p.h.free[fi]
		seg.Blocks = append(seg.Blocks, trace.Block{Addr: p.base + f.off, SizeBytes: f.size, State: trace.BlockInactive})
	}
	fn(seg)
}

// Check verifies the policy's internal invariants (for tests); "" when sound.
func (p *Policy) Check() string {
	var covered uint64
	for i, s := range p.h.free {
		if s.size == 0 || (i > 0 && p.h.free[i-1].off+p.h.free[i-1].size >= s.off) {
			return fmt.Sprintf("free range %d at %d (%d bytes) overlaps or touches its neighbour", i, s.off, s.size)
		}
		covered += s.size
	}
	live := make([]uint64, len(p.live))
	for _, b := range p.blocks {
		covered += b.size
		g := p.cfg.Granularity
		lo, hi := p.pieces(b.off, b.size)
		for i := lo; i <= hi; i++ {
			if !p.mapped[i] {
				return fmt.Sprintf("block at %d lies on unmapped piece %d", b.off, i)
			}
			live[i] += min(b.off+b.size, (i+1)*g) - max(b.off, i*g)
		}
	}
	if covered != p.end {
		return fmt.Sprintf("free and live ranges cover %d bytes, heap end %d", covered, p.end)
	}
	for i := range live {
		if live[i] != p.live[i] {
			return fmt.Sprintf("piece %d: %d live bytes counted, %d found", i, p.live[i], live[i])
		}
	}
	return ""
}
