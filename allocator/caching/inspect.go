package caching

import (
	"fmt"
	"sort"

	"github.com/fragsim/fragsim/trace"
)

func poolName(p uint8) string {
	if p&1 == smallPool {
		return "small"
	}
	return "large"
}

// Segments lists the allocator's segments in address order: each
// cudaMalloc segment, and each contiguous mapped range of an expandable
// segment, with its blocks (driver.Inspector).
func (a *Allocator) Segments(fn func(seg trace.Segment) bool) {
	a.PoolSegments(func(seg trace.Segment, _ uint64) bool { return fn(seg) })
}

// poolIDOf returns the ID of the private pool that owns BlockPool index
// pool, or 0 for the default pools.
func (a *Allocator) poolIDOf(pool uint8) uint64 {
	if pool < firstPrivate {
		return 0
	}
	return a.privateOf(pool).id
}

// PoolSegments lists the segments as Segments does, each with the ID of
// the private pool that holds it (trace.PoolID's; 0: the default pool).
func (a *Allocator) PoolSegments(fn func(seg trace.Segment, pool uint64) bool) {
	var heads []int32
	for i := range a.blocks {
		b := &a.blocks[i]
		if b.has(fUsed) && b.prev == none {
			heads = append(heads, int32(i))
		}
	}
	sort.Slice(heads, func(i, j int) bool { return a.blocks[heads[i]].addr < a.blocks[heads[j]].addr })
	for _, h := range heads {
		var cur *trace.Segment
		pid := a.poolIDOf(a.blocks[h].pool)
		for id := h; id != none; id = a.blocks[id].next {
			b := &a.blocks[id]
			if !b.has(fMapped) {
				if cur != nil {
					if !fn(*cur, pid) {
						return
					}
					cur = nil
				}
				continue
			}
			if cur == nil {
				cur = &trace.Segment{Stream: b.stream, Addr: b.addr, Pool: poolName(b.pool), Expandable: b.seg != none}
			}
			st := trace.BlockInactive
			var req uint64
			switch {
			case b.has(fAllocated):
				st, req = trace.BlockAllocated, b.requested
			case b.has(fPending):
				st, req = trace.BlockPendingFree, b.requested
			}
			cur.SizeBytes += b.size
			cur.Blocks = append(cur.Blocks, trace.Block{Addr: b.addr, SizeBytes: b.size, RequestedBytes: req, State: st})
		}
		if cur != nil && !fn(*cur, pid) {
			return
		}
	}
}

// Seed starts the allocator from a trace's initial state. Expandable
// ranges of one (pool, stream) are placed in one virtual segment that
// begins at the lowest range.
func (a *Allocator) Seed(segs []trace.Segment) error {
	if len(a.blocks)-len(a.spare) > 0 {
		return fmt.Errorf("caching: Seed on an allocator in use")
	}
	type key struct {
		pool   uint8
		stream trace.StreamID
	}
	expGroups := map[key][]trace.Segment{}
	var order []key
	for i, sg := range segs {
		pool := uint8(largePool)
		if sg.Pool == "small" {
			pool = smallPool
		}
		var sum uint64
		for _, bl := range sg.Blocks {
			sum += bl.SizeBytes
		}
		if sum != sg.SizeBytes || len(sg.Blocks) == 0 {
			return fmt.Errorf("initial segment %d at %#x: blocks sum to %d bytes, segment is %d", i, sg.Addr, sum, sg.SizeBytes)
		}
		if sg.Expandable {
			k := key{pool, sg.Stream}
			if _, ok := expGroups[k]; !ok {
				order = append(order, k)
			}
			expGroups[k] = append(expGroups[k], sg)
			continue
		}
		a.seedChain(sg, pool, none, none)
		a.reserved += sg.SizeBytes
	}
	for _, k := range order {
		g := expGroups[k]
		sort.Slice(g, func(i, j int) bool { return g[i].Addr < g[j].Addr })
		page := uint64(SmallBuffer)
		if k.pool == largePool {
			page = a.cfg.LargeSegmentSize
		}
		total := a.dev.TotalBytes()
		size := (total + total/8 + page - 1) / page * page
		base := g[0].Addr
		end := g[len(g)-1].Addr + g[len(g)-1].SizeBytes
		if end-base > size {
			return fmt.Errorf("initial expandable ranges of stream %#x span %d bytes, more than one segment's %d", uint64(k.stream), end-base, size)
		}
		a.segs = append(a.segs, expSeg{base: base, size: size, page: page, stream: k.stream, pool: k.pool, alive: true})
		si := int32(len(a.segs) - 1)
		pos := base
		last := none
		addGap := func(to uint64) {
			if to <= pos {
				return
			}
			id := a.newBlock()
			a.blocks[id] = block{addr: pos, size: to - pos, stream: k.stream, prev: last, next: none, seg: si, pool: k.pool, flags: fUsed}
			if last != none {
				a.blocks[last].next = id
			}
			a.insertUnmapped(id)
			last = id
		}
		for _, sg := range g {
			if sg.Addr < pos || (sg.Addr-base)%page != 0 || sg.SizeBytes%page != 0 {
				return fmt.Errorf("initial expandable range at %#x (%d bytes) is not page-aligned or overlaps", sg.Addr, sg.SizeBytes)
			}
			addGap(sg.Addr)
			last = a.seedChain(sg, k.pool, si, last)
			a.reserved += sg.SizeBytes
			pos = sg.Addr + sg.SizeBytes
		}
		addGap(base + size)
	}
	return nil
}

// seedChain adds the blocks of one initial segment after block last and
// returns the last block added.
func (a *Allocator) seedChain(sg trace.Segment, pool uint8, seg, last int32) int32 {
	first := last
	var ids []int32
	for _, bl := range sg.Blocks {
		id := a.newBlock()
		a.blocks[id] = block{addr: bl.Addr, size: bl.SizeBytes, stream: sg.Stream, prev: last, next: none,
			seg: seg, pool: pool, flags: fUsed | fMapped}
		if last != none {
			a.blocks[last].next = id
		}
		switch bl.State {
		case trace.BlockAllocated:
			a.blocks[id].flags |= fAllocated
			a.blocks[id].requested = bl.RequestedBytes
			a.seeded.Set(bl.Addr, id)
		case trace.BlockPendingFree:
			a.blocks[id].flags |= fPending
			a.blocks[id].requested = bl.RequestedBytes
			a.seeded.Set(bl.Addr, id)
		}
		ids = append(ids, id)
		last = id
	}
	_ = first
	for _, id := range ids {
		b := &a.blocks[id]
		if b.has(fAllocated | fPending) {
			continue
		}
		a.insertFree(id)
		if seg == none && a.isSplit(id) {
			a.stranded += b.size
			a.strandedCount++
		}
	}
	return last
}

// Reproduces reports whether the allocator runs with the settings the
// trace was recorded with, by PyTorch's caching allocator (a PyTorch
// snapshot or a live recording): then the replay can be checked against
// the recorded device events.
func (a *Allocator) Reproduces(h *trace.Header) bool {
	if h == nil || (h.Producer != trace.ProducerPyTorch && h.Producer != trace.ProducerLive) {
		return false
	}
	rc, err := FromHeader(h)
	if err != nil {
		return false
	}
	c := a.cfg
	return rc.Backend != "cudaMallocAsync" && rc.MaxSplitSize == c.MaxSplitSize && rc.MaxNonSplitRounding == c.MaxNonSplitRounding &&
		rc.RoundupPower2Divisions == c.RoundupPower2Divisions && rc.GCThreshold == c.GCThreshold &&
		rc.Expandable == c.Expandable && rc.LargeSegmentSize == c.LargeSegmentSize
}
