package pytorch

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/fragsim/fragsim/trace/pytorch/sizes"
)

// rseg is a segment (or a mapped range of an expandable segment) while the
// trace is undone.
type rseg struct {
	addr, size uint64
	stream     trace.StreamID
	pool       string
	expandable bool
	poolID     uint64 // trace.PoolID of segment_pool_id; 0 when not given
}

type devState struct {
	segs   map[uint64]*rseg
	ends   map[uint64]uint64 // end -> base of the expandable ranges
	active blkMap
	bad    int // entries that disagree with the state
}

func newDevState() *devState {
	return &devState{segs: map[uint64]*rseg{}, ends: map[uint64]uint64{}}
}

// finalStates returns each device's allocator state at the end of the
// trace, from the final segments: the snapshot's segments list, segs,
// read where the decoder left it, not taken as Go values first (every
// later step of the import waits for this one). A key given twice counts once,
// its last value, as in a Python dict. An address or size that is not a
// non-negative integer, or a size above most, is an error naming the
// segment or block.
func finalStates(doc *pickle.Doc, segs pickle.Value, most uint64) (map[int]*devState, error) {
	states := map[int]*devState{}
	var err error
	doc.Items(segs, func(i int, sv pickle.Value) bool {
		if k := doc.Kind(sv); k != pickle.KindDict {
			err = fmt.Errorf("segments[%d] is a %s, not a dict", i, k)
			return false
		}
		var dev int64
		var blocks pickle.Value
		hasBlocks := false
		seg := &rseg{}
		doc.Pairs(sv, func(k, v pickle.Value) bool {
			var bad string
			switch key, _ := doc.Str(k); key {
			case "device":
				dev, _ = doc.Int(v)
			case "address":
				seg.addr, bad = entryUint(doc, v, math.MaxUint64)
			case "total_size":
				seg.size, bad = entryUint(doc, v, most)
			case "stream":
				seg.stream = trace.StreamID(docUint(doc, v))
			case "segment_type":
				seg.pool, _ = doc.Str(v)
			case "segment_pool_id":
				seg.poolID = docPoolID(doc, v)
			case "is_expandable":
				x, _ := doc.Int(v)
				seg.expandable = doc.Kind(v) == pickle.KindBool && x != 0
			case "blocks":
				blocks, hasBlocks = v, true
			}
			if bad != "" {
				key, _ := doc.Str(k)
				err = fmt.Errorf("segments[%d]: %s %s", i, key, bad)
				return false
			}
			return true
		})
		if err != nil {
			return false
		}
		st := states[int(dev)]
		if st == nil {
			st = newDevState()
			states[int(dev)] = st
		}
		if seg.pool == "" {
			seg.pool = poolOf(seg.size)
		}
		if seg.expandable {
			st.putRange(seg)
		} else {
			st.segs[seg.addr] = seg
		}
		if !hasBlocks {
			return true
		}
		doc.Items(blocks, func(j int, bv pickle.Value) bool {
			if k := doc.Kind(bv); k != pickle.KindDict {
				err = fmt.Errorf("segments[%d].blocks[%d] is a %s, not a dict", i, j, k)
				return false
			}
			var state string
			var addr uint64
			var b rblk
			doc.Pairs(bv, func(k, v pickle.Value) bool {
				var bad string
				switch key, _ := doc.Str(k); key {
				case "state":
					state, _ = doc.Str(v)
				case "address":
					addr, bad = entryUint(doc, v, math.MaxUint64)
				case "size":
					b.size, bad = entryUint(doc, v, most)
				case "requested_size":
					b.req, bad = entryUint(doc, v, most)
				}
				if bad != "" {
					key, _ := doc.Str(k)
					err = fmt.Errorf("segments[%d].blocks[%d]: %s %s", i, j, key, bad)
					return false
				}
				return true
			})
			if err != nil {
				return false
			}
			if state == string(trace.BlockInactive) || state == "" {
				return true
			}
			b.pending = trace.BlockState(state) != trace.BlockAllocated
			st.active.put(addr, b)
			return true
		})
		return err == nil
	})
	return states, err
}

// docUint returns the int v as a uint64 (bit-cast; 0 when v is not a
// number).
func docUint(doc *pickle.Doc, v pickle.Value) uint64 {
	i, _ := doc.Int(v)
	return uint64(i)
}

// initialState lays out each device's state, undone to its first trace
// entry (see converter.scan), as the trace's initial state.
func (c *converter) initialState(states map[int]*devState) *trace.InitialState {
	devs := make([]int, 0, len(states))
	for d := range states {
		devs = append(devs, d)
	}
	sort.Ints(devs)
	out := &trace.InitialState{}
	for _, dev := range devs {
		st := states[dev]
		segsOut := c.blocks(dev, st)
		out.Segments = append(out.Segments, segsOut...)
		if st.bad > 0 {
			c.note("device %d: %d trace entries disagree with the final segments (dropped actions?): its initial state is approximate", dev, st.bad)
		}
	}
	if len(out.Segments) == 0 {
		return nil
	}
	return out
}

func poolOf(size uint64) string {
	if size == sizes.SmallBuffer {
		return "small"
	}
	return "large"
}

// undo walks a block of the device's raw entries backwards (the blocks
// last first), turning the final state into the state before the first
// entry.
func (st *devState) undo(evs []event) {
	for i := len(evs) - 1; i >= 0; i-- {
		st.undoOne(&evs[i])
	}
}

// undoOne undoes the entry e. Entries without a known action have
// KindInvalid: no case. A block's entries touch only its own address, and
// segments' entries no block, so the blocks may be undone in parts, each
// on its own goroutine (converter.forwardUndo).
func (st *devState) undoOne(e *event) {
	switch e.Kind {
	case trace.KindAlloc:
		if _, ok := st.active.get(e.Addr); !ok {
			st.bad++
		}
		st.active.del(e.Addr)
	case trace.KindFreeRequested:
		b, ok := st.active.get(e.Addr)
		switch {
		case !ok:
			st.active.put(e.Addr, rblk{req: e.SizeBytes})
		case b.pending:
			b.pending = false
			st.active.put(e.Addr, b)
		default:
			st.bad++
		}
	case trace.KindFreeCompleted:
		if _, ok := st.active.get(e.Addr); ok {
			st.bad++
			return
		}
		st.active.put(e.Addr, rblk{req: e.SizeBytes, pending: true})
	case trace.KindSegmentAlloc:
		if _, ok := st.segs[e.Addr]; !ok {
			st.bad++
		}
		delete(st.segs, e.Addr)
	case trace.KindSegmentFree:
		st.segs[e.Addr] = &rseg{addr: e.Addr, size: e.SizeBytes, stream: e.Stream, pool: poolOf(e.SizeBytes)}
	case trace.KindSegmentMap:
		st.unmapRange(e.Addr, e.SizeBytes)
	case trace.KindSegmentUnmap:
		st.mapRange(e.Addr, e.SizeBytes, e.Stream)
	}
}

// partOf returns the part, of k, of the block at address a. Its hash is
// not blkMap's: with the same one, a part's blocks would all have the
// same bits among those blkMap takes its slot from, and crowd a k-th of
// its slots, which would make undoing on k parts slower than on one.
// The hash's top 32 bits are scaled to k by a multiplication, not a
// division.
func partOf(a uint64, k int) int {
	return int(((a >> 9) * 0xc2b2ae3d27d4eb4f >> 32) * uint64(k) >> 32)
}

// putRange records an expandable mapped range.
func (st *devState) putRange(r *rseg) {
	st.segs[r.addr] = r
	st.ends[r.addr+r.size] = r.addr
}

// dropRange forgets an expandable mapped range.
func (st *devState) dropRange(r *rseg) {
	delete(st.segs, r.addr)
	if st.ends[r.addr+r.size] == r.addr {
		delete(st.ends, r.addr+r.size)
	}
}

// rangeAt returns the expandable range holding [a, a+n): found in constant
// time when the range starts at a or ends at a+n (growth and release happen
// at range edges), else by a bounded scan.
func (st *devState) rangeAt(a, n uint64) *rseg {
	holds := func(r *rseg) bool {
		return r != nil && r.expandable && r.addr <= a && a+n <= r.addr+r.size
	}
	if r := st.segs[a]; holds(r) {
		return r
	}
	if base, ok := st.ends[a+n]; ok && holds(st.segs[base]) {
		return st.segs[base]
	}
	scanned := 0
	for _, r := range st.segs {
		if holds(r) {
			return r
		}
		if scanned++; scanned > 4096 {
			break
		}
	}
	return nil
}

// unmapRange removes [a, a+n) from the mapped range holding it.
func (st *devState) unmapRange(a, n uint64) {
	r := st.rangeAt(a, n)
	if r == nil {
		st.bad++
		return
	}
	st.dropRange(r)
	if a > r.addr {
		st.putRange(&rseg{addr: r.addr, size: a - r.addr, stream: r.stream, pool: r.pool, expandable: true})
	}
	if end := r.addr + r.size; a+n < end {
		st.putRange(&rseg{addr: a + n, size: end - a - n, stream: r.stream, pool: r.pool, expandable: true})
	}
}

// mapRange adds [a, a+n) as mapped, joining adjacent mapped ranges.
func (st *devState) mapRange(a, n uint64, stream trace.StreamID) {
	r := &rseg{addr: a, size: n, stream: stream, expandable: true}
	if base, ok := st.ends[a]; ok {
		if o := st.segs[base]; o != nil && o.expandable && o.addr+o.size == a {
			st.dropRange(o)
			r.addr, r.size, r.pool, r.stream = o.addr, r.size+o.size, o.pool, o.stream
		}
	}
	if o := st.segs[a+n]; o != nil && o.expandable {
		st.dropRange(o)
		r.size += o.size
		if r.pool == "" {
			r.pool = o.pool
		}
	}
	if r.pool == "" {
		// Large pages are the large segment size (20 MiB by default).
		if n%(20<<20) == 0 {
			r.pool = "large"
		} else {
			r.pool = "small"
		}
	}
	st.putRange(r)
}

// blocks lays out the live blocks in their segments and fills the rest
// with inactive blocks.
func (c *converter) blocks(dev int, st *devState) []trace.Segment {
	bases := make([]uint64, 0, len(st.segs))
	for a := range st.segs {
		bases = append(bases, a)
	}
	slices.Sort(bases)
	addrs := make([]uint64, 0, st.active.len())
	st.active.each(func(a uint64, _ rblk) { addrs = append(addrs, a) })
	slices.Sort(addrs)
	ends := c.shownEnds(dev, st, bases, addrs)
	var out []trace.Segment
	k := 0
	oversize, clipped := 0, 0
	for _, base := range bases {
		r := st.segs[base]
		end := base + r.size
		seg := trace.Segment{Device: trace.DeviceID(dev), Stream: r.stream, Addr: base, SizeBytes: r.size, Pool: r.pool, Expandable: r.expandable}
		for k < len(addrs) && addrs[k] < base {
			st.bad++ // a live block outside every segment
			k++
		}
		pos := base
		for ; k < len(addrs) && addrs[k] < end; k++ {
			a := addrs[k]
			b, _ := st.active.get(a)
			next := end
			if k+1 < len(addrs) && addrs[k+1] < end {
				next = addrs[k+1]
			}
			size := b.size
			if e, ok := ends[a]; ok && size == 0 {
				size = e - a
			} else if size == 0 {
				size = c.set.roundSize(b.req)
				if a+size > next {
					size = next - a
					clipped++
				} else if gap := next - a - size; gap > 0 && r.pool == "large" && !r.expandable {
					if b.req >= c.set.maxSplit {
						oversize++
					} else if gap <= sizes.SmallSize {
						size = next - a // a remainder of at most 1 MiB is never split off
					}
				}
			}
			if a > pos {
				seg.Blocks = append(seg.Blocks, trace.Block{Addr: pos, SizeBytes: a - pos, State: trace.BlockInactive})
			}
			seg.Blocks = append(seg.Blocks, trace.Block{Addr: a, SizeBytes: size, RequestedBytes: b.req, State: b.state()})
			pos = a + size
		}
		if pos < end {
			seg.Blocks = append(seg.Blocks, trace.Block{Addr: pos, SizeBytes: end - pos, State: trace.BlockInactive})
		}
		out = append(out, seg)
	}
	st.bad += len(addrs) - k
	if oversize > 0 {
		c.note("device %d: %d blocks live at the first event were requests of at least max_split_size: their block sizes are guesses", dev, oversize)
	}
	if clipped > 0 {
		c.note("device %d: %d blocks live at the first event overlap the next block: sizes clipped", dev, clipped)
	}
	return out
}

// ecInfer finds, in a device's events in order, the release bursts taken
// for a user empty_cache() (see the package doc), and appends a
// KindEmptyCache event for each to the snapshot's ecs, its Addr the
// number of the device's events before which it goes.
type ecInfer struct {
	c        *converter
	st       *stats // when set, takes the inferred events
	dev      trace.DeviceID
	reserved uint64
	capBytes uint64

	inBurst        bool
	before         uint64 // reserved bytes before the burst
	onlyLargeWhole bool
	lastNS         int64 // the burst's last time
	n              int   // the device's events so far

	ambiguous, retries, inferred int
	capLike                      int    // bursts right before a new segment, with no cap known
	peak                         uint64 // the most bytes reserved
}

func (c *converter) newECInfer(dev trace.DeviceID, init *trace.InitialState) *ecInfer {
	x := &ecInfer{c: c, dev: dev, capBytes: c.opt.capBytes()}
	if init != nil {
		for _, s := range init.Segments {
			if s.Device == dev {
				x.reserved += s.SizeBytes
			}
		}
	}
	x.peak = x.reserved
	return x
}

// add takes the device's next event.
func (x *ecInfer) add(e *event) {
	switch e.Kind {
	case trace.KindSegmentFree, trace.KindSegmentUnmap:
		if !x.inBurst {
			x.inBurst, x.before, x.onlyLargeWhole = true, x.reserved, true
		}
		if e.Kind == trace.KindSegmentUnmap || e.SizeBytes == sizes.SmallBuffer {
			x.onlyLargeWhole = false
		}
		x.reserved -= min(x.reserved, e.SizeBytes)
		x.lastNS = e.TimeNS
	default:
		if x.inBurst {
			x.end(e)
		}
		if e.Kind == trace.KindSegmentAlloc || e.Kind == trace.KindSegmentMap {
			x.reserved += e.SizeBytes
			x.peak = max(x.peak, x.reserved)
		}
	}
	x.n++
}

// end decides on the burst that next (nil: none) follows.
func (x *ecInfer) end(next *event) {
	x.inBurst = false
	c := x.c
	isEC := true
	if next != nil {
		switch next.Kind {
		case trace.KindOOM:
			isEC = false
		case trace.KindSegmentAlloc, trace.KindSegmentMap:
			switch {
			case x.capBytes > 0 && x.before+next.SizeBytes > x.capBytes:
				isEC = false // the malloc's own retry after a failed attempt
				x.retries++
			case c.set.gcThreshold > 0 && x.onlyLargeWhole &&
				(x.capBytes == 0 || float64(x.before) > c.set.gcThreshold*float64(x.capBytes)):
				isEC = false // may be garbage collection
				x.ambiguous++
			case x.capBytes == 0:
				x.capLike++ // may be a malloc's retry under a cap not known
			}
		}
	}
	if isEC {
		e := event{Kind: trace.KindEmptyCache, Device: x.dev, TimeNS: x.lastNS, Addr: uint64(x.n), frames: noFrames}
		c.snap.ecs.push(e)
		if x.st != nil {
			x.st.add(&e)
		}
		x.inferred++
	}
}

// finish ends the device's events.
func (x *ecInfer) finish() {
	if x.inBurst {
		x.end(nil)
	}
	sum := &x.c.snap.summary
	sum.EmptyCaches += x.inferred
	sum.CapLikeBursts += x.ambiguous + x.capLike
	sum.PeakReserved = max(sum.PeakReserved, x.peak)
	if x.ambiguous > 0 {
		x.c.note("device %d: %d release bursts before a new segment may be garbage collection or empty_cache(): no empty_cache inferred for them", x.dev, x.ambiguous)
	}
}
