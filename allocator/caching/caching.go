// Package caching reproduces PyTorch 2.11's CUDA caching allocator, including its expandable-segments mode.
package caching

import (
	"fmt"
	"sort"
	"sync"

	"github.com/fragsim/fragsim/allocator/internal/addrmap"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

const (
	largePool = 0
	smallPool = 1
	none      = int32(-1)
)

// block is one block of a segment's chain.
type block struct {
	addr, size uint64
	requested  uint64
	gcBase     uint64
	stream     trace.StreamID
	prev, next int32
	seg        int32 // expandable segment index, or -1 for a cudaMalloc segment
	// bnext and bprev link the block in its free set's bin (see freeSet),
	// and bin is that bin while it is in the set.
	bnext, bprev int32
	bin          uint16
	pool         uint8
	flags        uint8 // fUsed, fAllocated, fPending, fMapped, fInSet
}

// Block flags (one byte, so that a block takes 64 bytes).
const (
	fUsed      uint8 = 1 << iota // the arena slot holds a block
	fAllocated                   // handed out and not freed by the program
	fPending                     // freed by the program, waiting for its free to complete
	fMapped                      // backed by memory (always true outside expandable segments)
	fInSet                       // in its pool's free set
)

// has reports whether b has any of the flags f.
func (b *block) has(f uint8) bool { return b.flags&f != 0 }

// streamPool holds the free blocks of one (pool, stream).
type streamPool struct {
	stream   trace.StreamID
	free     freeSet
	unmapped addrSet
}

// blockPool is PyTorch's BlockPool: free blocks ordered by (stream, size, addr).
type blockPool struct {
	streams []*streamPool // sorted by stream
	last    *streamPool   // the one found last, or nil
	gcCalls uint64        // get_free_blocks_call_count
}

// expSeg is one expandable segment: a virtual range of whole pages.
type expSeg struct {
	base, size, page uint64
	stream           trace.StreamID
	pool             uint8
	alive            bool
}

// Allocator is PyTorch's DeviceCachingAllocator for one device. It
// implements driver.Policy, driver.Seeder and driver.Inspector.
type Allocator struct {
	cfg    Config
	dev    driver.Device
	name   string
	blocks []block
	spare  []int32
	// pools are the BlockPools: the default large and small pools at
	// largePool and smallPool, then each private pool's large and small
	// pair (see privatePool). A block's pool indexes it; an even index is
	// a large pool.
	pools []blockPool
	// seeded holds the live blocks of the initial state (Seed) by
	// address, until their frees complete: the engine passes their frees
	// no Handle. Blocks Malloc hands out are found by their Handle.
	seeded addrmap.Map
	segs   []expSeg
	// private are the live private pools, by ID; routes the pools that
	// requests are routed to now, oldest first (see pools.go).
	private  []privatePool
	routes   []route
	freeable freeableSet

	reserved      uint64
	stranded      uint64 // inactive_split_bytes
	strandedCount int64  // inactive_split
	retries       int64
	ooms          int64

	// completions are frees completed by the trace but not yet applied:
	// see FreeCompleted.
	completions []int32
	scratch     []entry
}

// New returns a caching allocator for dev configured by cfg.
func New(dev driver.Device, cfg Config) (*Allocator, error) {
	if cfg.LargeSegmentSize == 0 {
		cfg.LargeSegmentSize = LargeBuffer
	}
	if cfg.MaxSplitSize == 0 {
		cfg.MaxSplitSize = DefaultConfig().MaxSplitSize
	}
	if cfg.MaxNonSplitRounding == 0 {
		cfg.MaxNonSplitRounding = cfg.LargeSegmentSize
	}
	if cfg.Backend == "cudaMallocAsync" {
		return nil, fmt.Errorf("caching: backend:cudaMallocAsync is not the caching allocator (use the async policy)")
	}
	name := "caching"
	if cfg.Expandable {
		name = "expandable"
	}
	a := &Allocator{cfg: cfg, dev: dev, name: name, pools: make([]blockPool, 2)}
	if p, ok := arenas.Get().(*[]block); ok {
		a.blocks = (*p)[:0]
	}
	if cfg.Fraction > 0 {
		if fs, ok := dev.(driver.FractionSetter); ok {
			fs.SetFraction(cfg.Fraction)
		}
	}
	return a, nil
}

// arenas holds the block arenas of released allocators (*[]block), so
// that a replay does not grow its own from nothing: newBlock appends zero
// blocks, so what a released arena held is never read.
var arenas sync.Pool

// Release gives the allocator's block arena to allocators made later
// (driver.Releaser); the allocator must not be used afterwards.
func (a *Allocator) Release() {
	if cap(a.blocks) > 0 {
		b := a.blocks[:0]
		arenas.Put(&b)
	}
	a.blocks, a.spare = nil, nil
}

// Config returns the allocator's configuration.
func (a *Allocator) Config() Config { return a.cfg }

// Name returns "caching", or "expandable" in expandable-segments mode.
func (a *Allocator) Name() string { return a.name }

// newBlock returns the index of a zeroed block slot.
func (a *Allocator) newBlock() int32 {
	if n := len(a.spare); n > 0 {
		id := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return id
	}
	a.blocks = append(a.blocks, block{})
	return int32(len(a.blocks) - 1)
}

func (a *Allocator) dropBlock(id int32) {
	a.blocks[id] = block{}
	a.spare = append(a.spare, id)
}

func (a *Allocator) isSplit(id int32) bool {
	b := &a.blocks[id]
	return b.prev != none || b.next != none
}

// streamPool returns the (pool, stream) free lists, creating them
// (empty) when the stream has none yet.
func (a *Allocator) streamPool(pool uint8, stream trace.StreamID) *streamPool {
	l := a.pools[pool].last
	if l == nil || l.stream != stream {
		l = a.findStreamPool(pool, stream)
	}
	return l
}

// findStreamPool is streamPool for another stream than the last one found.
func (a *Allocator) findStreamPool(pool uint8, stream trace.StreamID) *streamPool {
	bp := &a.pools[pool]
	ss := bp.streams
	for _, sp := range ss {
		if sp.stream == stream {
			bp.last = sp
			return sp
		}
	}
	sp := &streamPool{stream: stream}
	i := sort.Search(len(ss), func(i int) bool { return ss[i].stream > stream })
	bp.streams = append(bp.streams, nil)
	copy(bp.streams[i+1:], bp.streams[i:])
	bp.streams[i] = sp
	bp.last = sp
	return sp
}

func (a *Allocator) insertFree(id int32) {
	b := &a.blocks[id]
	bp := &a.pools[b.pool]
	b.gcBase = bp.gcCalls
	b.flags |= fInSet
	sp := bp.last // streamPool, inlined
	if sp == nil || sp.stream != b.stream {
		sp = a.findStreamPool(b.pool, b.stream)
	}
	sp.free.insert(a.blocks, id)
}

func (a *Allocator) eraseFree(id int32) {
	b := &a.blocks[id]
	if !b.has(fInSet) {
		panic(fmt.Sprintf("caching: block %#x not in its free set", b.addr))
	}
	b.flags &^= fInSet
	sp := a.pools[b.pool].last // streamPool, inlined
	if sp == nil || sp.stream != b.stream {
		sp = a.findStreamPool(b.pool, b.stream)
	}
	sp.free.remove(a.blocks, id)
}

func (a *Allocator) insertUnmapped(id int32) {
	b := &a.blocks[id]
	a.streamPool(b.pool, b.stream).unmapped.insert(b.addr, id)
}

func (a *Allocator) eraseUnmapped(id int32) {
	b := &a.blocks[id]
	if !a.streamPool(b.pool, b.stream).unmapped.remove(b.addr) {
		panic(fmt.Sprintf("caching: unmapped block %#x missing from its set", b.addr))
	}
}

func (a *Allocator) gcEnabled() bool {
	if a.cfg.GCThreshold <= 0 {
		return false
	}
	_, capped := a.dev.Cap()
	return capped
}

// MaxRequest is the largest request the allocator serves. A larger one
// is refused as an OOM at once: no device holds it, and its rounding
// would overflow.
const MaxRequest = 1 << 62

// tooLarge refuses a request over MaxRequest.
func (a *Allocator) tooLarge(size uint64, stream trace.StreamID) error {
	a.ooms++
	return &driver.OOMError{SizeBytes: size, AllocBytes: size, Stream: stream,
		Reason: fmt.Sprintf("the request is over the largest one served (%d bytes)", uint64(MaxRequest))}
}

// Malloc serves a request as PyTorch's malloc does.
func (a *Allocator) Malloc(size uint64, stream trace.StreamID) (driver.Block, error) {
	if size > MaxRequest {
		return driver.Block{}, a.tooLarge(size, stream)
	}
	if len(a.completions) > 0 {
		return a.malloc(size, stream, a.chooseReading(size, stream))
	}
	// malloc's path with no held-back frees and a cached block that fits,
	// one call shallower.
	s := a.cfg.RoundSize(size)
	pool := a.poolOf(s, stream)
	if id, fs, ok := a.getFreeBlock(pool, stream, s); ok {
		return a.allocFound(id, s, size, fs), nil
	}
	return a.mallocNew(size, stream, s, pool)
}

func (a *Allocator) malloc(orig uint64, stream trace.StreamID, k int) (driver.Block, error) {
	// process_events: the frees that completed before the search.
	if k > 0 {
		a.applyCompletions(k)
	}
	s := a.cfg.RoundSize(orig)
	pool := a.poolOf(s, stream)
	if id, fs, ok := a.getFreeBlock(pool, stream, s); ok {
		return a.allocFound(id, s, orig, fs), nil
	}
	return a.mallocNew(orig, stream, s, pool)
}

// poolOf returns the pool a request of rounded size s on stream is served
// from: the small or the large pool, or the private pool a route sends
// it to.
func (a *Allocator) poolOf(s uint64, stream trace.StreamID) uint8 {
	pool := uint8(largePool)
	if s <= SmallSize {
		pool = smallPool
	}
	if len(a.routes) > 0 {
		pool = a.route(pool, stream)
	}
	return pool
}

// mallocNew is malloc once no cached block fits the rounded size s:
// a new segment, after garbage collection, release and retry as needed.
func (a *Allocator) mallocNew(orig uint64, stream trace.StreamID, s uint64, pool uint8) (driver.Block, error) {
	allocSize := a.cfg.AllocationSize(s)
	if a.gcEnabled() {
		a.garbageCollect()
	}
	id, ok := a.allocBlock(pool, stream, s, allocSize, false)
	if !ok && a.releaseAvailable(pool, stream, s) {
		id, ok = a.allocBlock(pool, stream, s, allocSize, false)
	}
	// No release and retry while requests are routed to a private pool
	// (a capture, or use_mem_pool, is underway).
	if !ok && len(a.routes) == 0 {
		a.releaseCached()
		id, ok = a.allocBlock(pool, stream, s, allocSize, true)
	}
	if !ok {
		a.ooms++
		return driver.Block{}, &driver.OOMError{SizeBytes: orig, AllocBytes: allocSize, Stream: stream,
			Reason: a.oomReason(allocSize)}
	}
	return a.allocFound(id, s, orig, nil), nil
}

func (a *Allocator) oomReason(allocSize uint64) string {
	allowed, capped := a.dev.Cap()
	if capped && a.reserved+allocSize > allowed {
		return fmt.Sprintf("%d bytes reserved + %d would pass the memory-fraction cap of %d bytes", a.reserved, allocSize, allowed)
	}
	return fmt.Sprintf("the device refused %d bytes with %d bytes reserved", allocSize, a.reserved)
}

// getFreeBlock is get_free_block: best fit by (stream, size, addr). It
// leaves the block in its free set fs, for allocFound.
func (a *Allocator) getFreeBlock(pool uint8, stream trace.StreamID, s uint64) (int32, *freeSet, bool) {
	if a.gcEnabled() {
		a.pools[pool].gcCalls++
	}
	sp := a.pools[pool].last // streamPool, inlined
	if sp == nil || sp.stream != stream {
		sp = a.findStreamPool(pool, stream)
	}
	if sp.free.n == 0 {
		return none, nil, false
	}
	fs := &sp.free
	id := fs.bestFit(a.blocks, s)
	if id == none {
		return none, nil, false
	}
	if a.blocks[id].seg != none {
		if a.cfg.Expandable {
			for a.blocks[id].seg != none {
				nid := fs.next(a.blocks, id)
				if nid == none || a.expandableSize(nid) >= a.expandableSize(id) {
					break
				}
				id = nid
			}
		} else {
			for id != none && a.blocks[id].seg != none {
				id = fs.next(a.blocks, id)
			}
			if id == none {
				return none, nil, false
			}
		}
	}
	size := a.blocks[id].size
	m := a.cfg.MaxSplitSize
	if s < m && size >= m {
		return none, nil, false
	}
	if s >= m && size >= s+a.cfg.MaxNonSplitRounding {
		return none, nil, false
	}
	return id, fs, true
}

func (a *Allocator) expandableSize(id int32) uint64 {
	b := &a.blocks[id]
	if b.next != none && !a.blocks[b.next].has(fMapped) {
		return b.size + a.blocks[b.next].size
	}
	return b.size
}

// allocBlock is alloc_block: a new segment, or expandable growth.
func (a *Allocator) allocBlock(pool uint8, stream trace.StreamID, s, allocSize uint64, retry bool) (int32, bool) {
	if retry {
		a.retries++
	}
	if allowed, capped := a.dev.Cap(); capped && a.reserved+allocSize > allowed {
		return none, false
	}
	if a.cfg.Expandable {
		return a.tryAllocateExpandable(pool, stream, s)
	}
	addr, ok := a.dev.Malloc(allocSize, stream)
	if !ok {
		return none, false
	}
	a.reserved += allocSize
	if pool >= firstPrivate {
		a.privateOf(pool).segments++
	}
	id := a.newBlock()
	a.blocks[id] = block{addr: addr, size: allocSize, stream: stream, prev: none, next: none, seg: none,
		pool: pool, flags: fUsed | fMapped}
	return id, true
}

func (a *Allocator) shouldSplit(id int32, s uint64) bool {
	b := &a.blocks[id]
	remaining := b.size - s
	if b.pool&1 == smallPool || a.cfg.Expandable {
		return remaining >= MinBlockSize
	}
	return s < a.cfg.MaxSplitSize && remaining > SmallSize
}

// allocFound is alloc_found_block: front carving and inactive_split
// accounting. fs is nil for a new block; otherwise the block is in fs,
// and the remainder of a split goes back to it.
func (a *Allocator) allocFound(id int32, s, orig uint64, fs *freeSet) driver.Block {
	split := a.shouldSplit(id, s)
	alreadySplit := a.isSplit(id)
	expandable := a.blocks[id].seg != none
	if fs != nil {
		fs.remove(a.blocks, id)
		a.blocks[id].flags &^= fInSet
	}
	if split {
		nid := a.newBlock()
		rem := &a.blocks[id]
		// Field by field into the zeroed slot newBlock gives: a literal is
		// built on the stack and copied.
		nb := &a.blocks[nid]
		nb.addr, nb.size, nb.stream, nb.prev, nb.next = rem.addr, s, rem.stream, rem.prev, id
		nb.seg, nb.pool, nb.flags = rem.seg, rem.pool, fUsed|fMapped
		if rem.prev != none {
			a.blocks[rem.prev].next = nid
		}
		rem.prev = nid
		rem.addr += s
		rem.size -= s
		remSize := rem.size
		if fs != nil {
			// The remainder goes back to the set it came from.
			rem.gcBase = a.pools[rem.pool].gcCalls
			rem.flags |= fInSet
			fs.insert(a.blocks, id)
		} else {
			a.insertFree(id)
		}
		if !expandable {
			if alreadySplit {
				a.stranded -= s
			} else {
				a.stranded += remSize
				a.strandedCount++
			}
		}
		id = nid
	} else {
		if alreadySplit && !expandable {
			a.stranded -= a.blocks[id].size
			a.strandedCount--
		}
	}
	b := &a.blocks[id]
	b.flags |= fAllocated
	b.requested = orig
	return driver.Block{Addr: b.addr, SizeBytes: b.size, Handle: uint32(id) + 1}
}

// byHandle returns the live (allocated or pending) block blk names by
// its Handle; findSlow finds the others. byHandle is small enough to be
// inlined where blocks are freed.
func (a *Allocator) byHandle(blk driver.Block) (int32, bool) {
	// Handle 0 wraps around to the largest index.
	if i := uint(blk.Handle) - 1; i < uint(len(a.blocks)) {
		b := &a.blocks[i]
		if b.addr == blk.Addr && b.flags&fUsed != 0 && b.flags&(fAllocated|fPending) != 0 {
			return int32(i), true
		}
	}
	return none, false
}

// findSlow returns the live block blk names when its Handle does not: a
// seeded block, else by a walk over all blocks.
func (a *Allocator) findSlow(blk driver.Block) (int32, bool) {
	if id, ok := a.seeded.Get(blk.Addr); ok {
		return id, true
	}
	for id := range a.blocks {
		b := &a.blocks[id]
		if b.addr == blk.Addr && b.has(fUsed) && b.has(fAllocated|fPending) {
			return int32(id), true
		}
	}
	return none, false
}

// FreeRequested marks block blk freed by the program; it stays active
// until FreeCompleted.
func (a *Allocator) FreeRequested(blk driver.Block) {
	id, ok := a.byHandle(blk)
	if !ok {
		if id, ok = a.findSlow(blk); !ok {
			return
		}
	}
	b := &a.blocks[id]
	b.flags = b.flags&^fAllocated | fPending
}

// FreeCompleted returns block blk to its free list. When the device's
// recorded events show that the next request releases memory, the free is
// held back until that request, which decides whether it completed before
// the request's search or in its release.
func (a *Allocator) FreeCompleted(blk driver.Block) {
	id, ok := a.byHandle(blk)
	if !ok {
		if id, ok = a.findSlow(blk); !ok {
			return
		}
	}
	if a.seeded.Len() > 0 {
		a.seeded.Delete(blk.Addr)
	}
	if b := &a.blocks[id]; b.has(fAllocated) {
		b.flags = b.flags&^fAllocated | fPending
	}
	if len(a.completions) > 0 || recordedRelease(a.dev.Recorded()) {
		a.completions = append(a.completions, id)
		return
	}
	a.freeBlock(id)
}

// MallocAfter is FreeCompleted of each block of freed, then Malloc; it
// returns StrandedBytes too (driver.Completer). A completed free implies
// its request, as in FreeCompleted.
func (a *Allocator) MallocAfter(freed []driver.Block, size uint64, stream trace.StreamID) (driver.Block, uint64, error) {
	if len(freed) > 0 {
		a.completeAll(freed)
	}
	if size > MaxRequest {
		return driver.Block{}, a.stranded, a.tooLarge(size, stream)
	}
	if len(a.completions) > 0 {
		b, err := a.malloc(size, stream, a.chooseReading(size, stream))
		return b, a.stranded, err
	}
	// As Malloc.
	s := a.cfg.RoundSize(size)
	pool := uint8(largePool)
	if s <= SmallSize {
		pool = smallPool
	}
	if len(a.routes) > 0 {
		pool = a.route(pool, stream)
	}
	if id, fs, ok := a.getFreeBlock(pool, stream, s); ok {
		b := a.allocFound(id, s, size, fs)
		return b, a.stranded, nil
	}
	b, err := a.mallocNew(size, stream, s, pool)
	return b, a.stranded, err
}

// completeAll is FreeCompleted of each block of freed. Whether they are
// held back is decided once: freeing blocks makes no device call, so the
// recorded events do not change between them. (The block's lookup is
// FreeCompleted's, written out again: shared in a method, it cost the
// replay 5.5 instructions an event, cachegrind, BenchmarkReplayReal, with
// and without the profile.)
func (a *Allocator) completeAll(freed []driver.Block) {
	hold := len(a.completions) > 0 || recordedRelease(a.dev.Recorded())
	for _, blk := range freed {
		id, ok := a.byHandle(blk)
		if !ok {
			if id, ok = a.findSlow(blk); !ok {
				continue
			}
		}
		if a.seeded.Len() > 0 {
			a.seeded.Delete(blk.Addr)
		}
		if hold {
			if b := &a.blocks[id]; b.has(fAllocated) {
				b.flags = b.flags&^fAllocated | fPending
			}
			a.completions = append(a.completions, id)
			continue
		}
		a.freeBlock(id)
	}
}

func recordedRelease(rec []trace.Event) bool {
	for i := range rec {
		if k := rec[i].Kind; k == trace.KindSegmentFree || k == trace.KindSegmentUnmap {
			return true
		}
	}
	return false
}

// applyCompletions applies the first k held-back completions and keeps the rest.
func (a *Allocator) applyCompletions(k int) {
	if len(a.completions) == 0 {
		return
	}
	if k > len(a.completions) {
		k = len(a.completions)
	}
	for _, id := range a.completions[:k] {
		a.freeBlock(id)
	}
	n := copy(a.completions, a.completions[k:])
	a.completions = a.completions[:n]
}

// freeBlock is free_block: merge with prev, then next, and back to the free set.
func (a *Allocator) freeBlock(id int32) {
	b := &a.blocks[id]
	b.flags &^= fAllocated | fPending
	b.requested = 0
	expandable := b.seg != none
	// The block's free set, found once for its neighbours and itself
	// (streamPool, inlined).
	pool, stream := b.pool, b.stream
	sp := a.pools[pool].last
	if sp == nil || sp.stream != stream {
		sp = a.findStreamPool(pool, stream)
	}
	var netCount int64
	var netBytes int64
	prev, next := b.prev, b.next
	if a.mergeable(id, prev) {
		netCount--
		netBytes -= int64(a.mergeFrom(id, prev, sp))
	}
	if a.mergeable(id, next) {
		netCount--
		netBytes -= int64(a.mergeFrom(id, next, sp))
	}
	b = &a.blocks[id]
	b.gcBase = a.pools[pool].gcCalls
	b.flags |= fInSet
	sp.free.insert(a.blocks, id)
	if b.prev != none || b.next != none { // isSplit
		netCount++
		netBytes += int64(b.size)
	}
	if !expandable {
		a.strandedCount += netCount
		a.stranded = uint64(int64(a.stranded) + netBytes)
	}
}

// mergeFrom is merge for a dst whose free set is sp's.
func (a *Allocator) mergeFrom(dst, src int32, sp *streamPool) uint64 {
	s := &a.blocks[src]
	if s.flags&fMapped == 0 || s.stream != sp.stream || s.pool != a.blocks[dst].pool {
		return a.merge(dst, src)
	}
	if s.flags&fInSet == 0 {
		panic(fmt.Sprintf("caching: block %#x not in its free set", s.addr))
	}
	s.flags &^= fInSet
	sp.free.remove(a.blocks, src)
	return a.absorb(dst, src)
}

// tryMerge is try_merge_blocks: dst absorbs src when src is free and has
// the same mapped state. It returns the bytes absorbed.
func (a *Allocator) tryMerge(dst, src int32) uint64 {
	if !a.mergeable(dst, src) {
		return 0
	}
	return a.merge(dst, src)
}

// merge is try_merge_blocks once mergeable(dst, src) holds: dst absorbs
// src, which leaves its set. It returns the bytes absorbed.
func (a *Allocator) merge(dst, src int32) uint64 {
	if a.blocks[src].has(fMapped) {
		a.eraseFree(src)
	} else {
		a.eraseUnmapped(src)
	}
	return a.absorb(dst, src)
}

// mergeable reports whether dst can absorb src: src is free and has the
// same mapped state.
func (a *Allocator) mergeable(dst, src int32) bool {
	if src == none {
		return false
	}
	s := &a.blocks[src]
	return !s.has(fAllocated|fPending) && (s.flags^a.blocks[dst].flags)&fMapped == 0
}

// absorb gives dst the range of its neighbour src, which is out of every
// set, and drops src. It returns the bytes absorbed.
func (a *Allocator) absorb(dst, src int32) uint64 {
	s := &a.blocks[src]
	d := &a.blocks[dst]
	if d.prev == src {
		d.addr = s.addr
		d.prev = s.prev
		if d.prev != none {
			a.blocks[d.prev].next = dst
		}
	} else {
		d.next = s.next
		if d.next != none {
			a.blocks[d.next].prev = dst
		}
	}
	sub := s.size
	d.size += sub
	a.dropBlock(src)
	return sub
}

// releaseBlock is release_block: cudaFree of a whole free block.
func (a *Allocator) releaseBlock(id int32) {
	b := &a.blocks[id]
	if b.has(fInSet) {
		a.eraseFree(id)
	}
	a.dev.Free(b.addr, b.size)
	a.reserved -= b.size
	if b.pool >= firstPrivate {
		a.privateOf(b.pool).segments--
	}
	a.dropBlock(id)
}

// garbageCollect is garbage_collect_cached_blocks: when reserved bytes
// exceed the garbage-collection threshold, it releases the large pool's
// unsplit cached blocks of cudaMalloc segments that are at least as old as
// their mean age, again and again, until enough is reclaimed or a pass
// frees nothing. mallocNew calls it before it asks for a new segment.
func (a *Allocator) garbageCollect() {
	allowed, _ := a.dev.Cap()
	threshold := uint64(a.cfg.GCThreshold * float64(allowed))
	if a.reserved <= threshold {
		return
	}
	target := a.reserved - threshold
	bp := &a.pools[largePool]
	var totalAge uint64
	count := 0
	cands := a.scratch[:0]
	for _, sp := range bp.streams {
		sp.free.each(a.blocks, func(e entry) {
			if !a.isSplit(e.id) && a.blocks[e.id].seg == none {
				cands = append(cands, e)
				totalAge += bp.gcCalls - a.blocks[e.id].gcBase
				count++
			}
		})
	}
	if count == 0 {
		a.scratch = cands
		return
	}
	var reclaimed uint64
	freed := true
	for reclaimed < target && freed && count > 0 {
		threshold := float64(totalAge) / float64(count)
		freed = false
		kept := cands[:0]
		for _, e := range cands {
			age := bp.gcCalls - a.blocks[e.id].gcBase
			if float64(age) >= threshold {
				freed = true
				reclaimed += e.size
				totalAge -= age
				count--
				a.releaseBlock(e.id)
			} else {
				kept = append(kept, e)
			}
		}
		cands = kept
	}
	a.scratch = cands[:0]
}

// releaseAvailable is release_available_cached_blocks, for a request of
// rounded size s that no new segment could serve, with max_split_size set:
// it releases the stream pool's smallest cached block of at least
// max(s, max_split_size) when it is a cudaMalloc segment's, or else the
// cudaMalloc segments' cached blocks of at least max_split_size below it,
// largest first, until that many bytes are released. It reports whether
// they were.
func (a *Allocator) releaseAvailable(pool uint8, stream trace.StreamID, s uint64) bool {
	m := a.cfg.MaxSplitSize
	if m == DefaultConfig().MaxSplitSize {
		return false
	}
	key := s
	if key < m {
		key = m
	}
	sp := a.streamPool(pool, stream)
	if sp == nil || sp.free.n == 0 {
		return false
	}
	fs := &sp.free
	p := fs.bestFit(a.blocks, key)
	if p != none && a.blocks[p].seg == none {
		a.releaseBlock(p)
		return true
	}
	it, ok := fs.prev(a.blocks, p)
	if !ok {
		return false
	}
	var released uint64
	for released < key {
		size := a.blocks[it].size
		if size < m {
			break
		}
		prev, hasPrev := fs.prev(a.blocks, it)
		if a.blocks[it].seg == none {
			// Releasing it takes it out of its list; prev stays.
			a.releaseBlock(it)
			released += size
		}
		if !hasPrev {
			break
		}
		it = prev
	}
	return released >= key
}

// releaseCached is release_cached_blocks: unless requests are routed to
// a private pool, complete every pending free and release every whole
// free segment of the default pools (large, then small, each in (stream,
// size, addr) order), unmapping the free pages of expandable segments
// after each pool's walk; then the same for each freeable private pool
// (small, then large), which goes once it holds no segment.
func (a *Allocator) releaseCached() {
	if len(a.routes) == 0 {
		a.applyCompletions(len(a.completions))
		a.releasePool(largePool)
		a.releasePool(smallPool)
	}
	if len(a.private) > 0 {
		a.releaseFreeable()
	}
}

// releasePool is release_blocks of one BlockPool.
func (a *Allocator) releasePool(pool uint8) {
	bp := &a.pools[pool]
	ents := a.scratch[:0]
	for _, sp := range bp.streams {
		ents = sp.free.entries(a.blocks, ents)
	}
	var unmap []int32
	for _, e := range ents {
		b := &a.blocks[e.id]
		if b.seg != none {
			unmap = append(unmap, e.id)
		} else if b.prev == none && b.next == none {
			a.releaseBlock(e.id)
		}
	}
	a.scratch = ents[:0]
	for _, id := range unmap {
		a.unmapBlock(id)
		b := &a.blocks[id]
		if !b.has(fMapped) && b.prev == none && b.next == none {
			a.eraseUnmapped(id)
			a.segs[b.seg].alive = false
			if b.pool >= firstPrivate {
				a.privateOf(b.pool).segments--
			}
			a.dropBlock(id)
		}
	}
}

// EmptyCache is torch.cuda.empty_cache().
func (a *Allocator) EmptyCache() { a.releaseCached() }

// Stats returns the allocator's counters; it walks only the per-stream set heads.
func (a *Allocator) Stats() driver.Stats {
	var largest uint64
	for p := range a.pools {
		for _, sp := range a.pools[p].streams {
			if id, ok := sp.free.last(a.blocks); ok && a.blocks[id].size > largest {
				largest = a.blocks[id].size
			}
		}
	}
	return driver.Stats{LargestFreeBytes: largest, StrandedBytes: a.stranded, AllocRetries: a.retries}
}

// StrandedBytes is Stats().StrandedBytes, without the walk for the largest free block.
func (a *Allocator) StrandedBytes() uint64 { return a.stranded }

// ReservedBytes is the allocator's reserved memory (segments plus mapped pages).
func (a *Allocator) ReservedBytes() uint64 { return a.reserved }
