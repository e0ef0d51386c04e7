package caching

import (
	"github.com/fragsim/fragsim/trace"
)

func (a *Allocator) allocatable(id int32) bool {
	if id == none {
		return false
	}
	b := &a.blocks[id]
	return !b.has(fAllocated | fPending)
}

// findExpandable is find_expandable_block: the lowest-address place in a
// segment of (pool, stream) with s contiguous free or unmapped bytes, or a
// new segment; none when s is larger than a new segment.
func (a *Allocator) findExpandable(pool uint8, stream trace.StreamID, s uint64) int32 {
	if sp := a.streamPool(pool, stream); sp != nil {
		for _, c := range sp.unmapped.ids {
			if p := a.blocks[c].prev; a.allocatable(p) {
				c = p
			}
			var bytes uint64
			for b := c; bytes < s && a.allocatable(b); b = a.blocks[b].next {
				bytes += a.blocks[b].size
			}
			if bytes >= s {
				return c
			}
		}
	}
	page := uint64(SmallBuffer)
	if pool&1 == largePool {
		page = a.cfg.LargeSegmentSize
	}
	total := a.dev.TotalBytes()
	pages := (total + total/8 + page - 1) / page
	size := pages * page
	if s > size {
		return none
	}
	base := a.dev.Reserve(size, stream)
	if pool >= firstPrivate {
		a.privateOf(pool).segments++
	}
	a.segs = append(a.segs, expSeg{base: base, size: size, page: page, stream: stream, pool: pool, alive: true})
	id := a.newBlock()
	a.blocks[id] = block{addr: base, size: size, stream: stream, prev: none, next: none,
		seg: int32(len(a.segs) - 1), pool: pool, flags: fUsed}
	a.insertUnmapped(id)
	return id
}

// tryAllocateExpandable is try_allocate_expandable_block.
func (a *Allocator) tryAllocateExpandable(pool uint8, stream trace.StreamID, s uint64) (int32, bool) {
	c := a.findExpandable(pool, stream, s)
	if c == none {
		return none, false
	}
	if !a.blocks[c].has(fMapped) {
		if !a.mapBlock(c, min(a.blocks[c].size, s)) {
			return none, false
		}
	}
	for a.blocks[c].size < s {
		rem := s - a.blocks[c].size
		nc := a.blocks[c].next
		if !a.mapBlock(nc, min(rem, a.blocks[nc].size)) {
			return none, false
		}
		c = nc
	}
	a.eraseFree(c)
	return c, true
}

// mapBlock is map_block: map the whole pages covering the first size
// bytes of the unmapped block id, and merge them with free neighbours.
func (a *Allocator) mapBlock(id int32, size uint64) bool {
	b := &a.blocks[id]
	seg := &a.segs[b.seg]
	begin := (b.addr - seg.base) / seg.page
	end := (b.addr + size - seg.base + seg.page - 1) / seg.page
	bytes := (end - begin) * seg.page
	if bytes == 0 || !a.dev.Map(b.addr, bytes) {
		return false
	}
	a.eraseUnmapped(id)
	b = &a.blocks[id]
	b.flags |= fMapped
	if bytes < b.size {
		rid := a.newBlock()
		b = &a.blocks[id]
		a.blocks[rid] = block{addr: b.addr + bytes, size: b.size - bytes, stream: b.stream, prev: id, next: b.next,
			seg: b.seg, pool: b.pool, flags: fUsed}
		if b.next != none {
			a.blocks[b.next].prev = rid
		}
		b.next = rid
		b.size = bytes
		a.insertUnmapped(rid)
	}
	a.tryMerge(id, a.blocks[id].prev)
	a.tryMerge(id, a.blocks[id].next)
	a.insertFree(id)
	a.reserved += bytes
	return true
}

// unmapBlock is unmap_block: unmap the pages lying wholly inside the free
// block id; partial pages at either end stay mapped as free blocks.
func (a *Allocator) unmapBlock(id int32) {
	b := &a.blocks[id]
	seg := &a.segs[b.seg]
	begin := (b.addr - seg.base + seg.page - 1) / seg.page
	end := (b.addr + b.size - seg.base) / seg.page
	if begin >= end {
		return
	}
	a.eraseFree(id)
	ua := seg.base + begin*seg.page
	us := (end - begin) * seg.page
	b = &a.blocks[id]
	if before := ua - b.addr; before > 0 {
		nid := a.newBlock()
		b = &a.blocks[id]
		a.blocks[nid] = block{addr: b.addr, size: before, stream: b.stream, prev: b.prev, next: id,
			seg: b.seg, pool: b.pool, flags: fUsed | fMapped}
		if b.prev != none {
			a.blocks[b.prev].next = nid
		}
		b.prev = nid
		a.insertFree(nid)
	}
	b = &a.blocks[id]
	if after := b.addr + b.size - (ua + us); after > 0 {
		nid := a.newBlock()
		b = &a.blocks[id]
		a.blocks[nid] = block{addr: ua + us, size: after, stream: b.stream, prev: id, next: b.next,
			seg: b.seg, pool: b.pool, flags: fUsed | fMapped}
		if b.next != none {
			a.blocks[b.next].prev = nid
		}
		b.next = nid
		a.insertFree(nid)
	}
	b = &a.blocks[id]
	b.addr = ua
	b.size = us
	b.flags &^= fMapped
	a.tryMerge(id, a.blocks[id].prev)
	a.tryMerge(id, a.blocks[id].next)
	a.insertUnmapped(id)
	a.reserved -= us
	a.dev.Unmap(ua, us)
}

// MappedPages is the physical pages an expandable segment maps, or
// unmaps, for n bytes: pages of LargeBuffer (20 MiB) in the large pool,
// of SmallBuffer (2 MiB) in the small one. Each page is its own driver
// calls (cuMemCreate, cuMemMap, cuMemSetAccess; cuMemUnmap,
// cuMemRelease), which is how the device-cost model prices a map.
func MappedPages(n uint64) uint64 {
	if n%LargeBuffer == 0 {
		return n / LargeBuffer
	}
	return (n + SmallBuffer - 1) / SmallBuffer
}
