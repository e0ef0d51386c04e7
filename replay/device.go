package replay

import (
	"fmt"
	"sort"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Layout of reserved (expandable) ranges that have no recorded map, and
// of laid-out segments that would overlap a live one (see LayoutBase): a
// range takes a slot of its size rounded up to LayoutSlot, slots taken
// downwards from LayoutTop, the range at its slot's start; the rest of a
// slot (its tail) takes later ones that fit, the most recent tail first.
// No range is reused.
const (
	LayoutTop  = 0x7f8000000000
	LayoutSlot = 32 << 20
)

// span is a live device range [addr, addr+size).
type span struct {
	addr, size uint64
	mapped     uint64 // bytes mapped inside a reserved range
	end        uint64 // the end of the highest bytes ever mapped in it
	// chunk is 1 + the index of a segment's chunk in the driver layout,
	// 0 for a segment the layout does not hold; off is its offset there.
	chunk int
	off   int64
}

// device is the simulated GPU of one trace device. It implements Device
// and FractionSetter.
//
// Malloc refuses a segment over the memory-fraction cap or over physical
// capacity (capacity − outside bytes); Map refuses only over physical
// capacity, since PyTorch checks its cap itself before mapping, with the
// allocation size.
type device struct {
	e        *engine
	id       trace.DeviceID
	total    uint64 // totalGlobalMem (capacity), 0 = unlimited
	outside  uint64
	fraction float64
	allowed  uint64
	capped   bool

	reserved uint64
	allocs   int64
	frees    int64

	// rec holds the recorded device events not matched yet, oldest first.
	rec []trace.Event

	lay     driverLayout // where the driver puts segments
	top     uint64       // the next range slot ends here
	up      uint64       // the next range slot past LayoutTop starts here
	tails   tails        // unused range slot tails
	segs    []span       // live cudaMalloc segments, by address
	ranges  []span       // live reserved (expandable) ranges, by address
	compare bool         // compare calls with rec
	matched int64

	// pool, when set, is device memory shared with other processes'
	// devices (Cohost): it decides fits instead of total and outside.
	pool *sharedPool

	// refuse, set during a request the recorded run ended with an OOM,
	// fails every segment allocation and mapping (see recordedFailure).
	refuse bool
}

// NewDevice returns a simulated GPU of total bytes (0: unlimited) for
// running a policy outside a replay, as the recording hook runs PyTorch's
// allocator beside its own: it lays segments out as a replay without
// recorded addresses does, refuses a segment over the memory fraction set
// with SetFraction (it implements driver.FractionSetter) or over total,
// and has no recorded events.
func NewDevice(total uint64) driver.Device {
	d := newDevice(nil, 0, total, 0, 0)
	d.compare = false
	return d
}

// ReservedBytes is the memory the policy holds from the device: its
// segments and mapped pages. NewDevice's device has it, for a caller that
// reads the policy's footprint while it runs (the recording hook's
// metrics).
func (d *device) ReservedBytes() uint64 { return d.reserved }

func newDevice(e *engine, id trace.DeviceID, total, outside uint64, fraction float64) *device {
	d := &device{e: e, id: id, total: total, outside: outside, top: LayoutTop, up: LayoutTop, compare: true,
		lay: newDriverLayout()}
	d.SetFraction(fraction)
	return d
}

// SetFraction sets the per-process memory fraction (0 or >= 1: no cap).
func (d *device) SetFraction(f float64) {
	if d.e != nil && d.e.cfg.noFraction {
		f = 0
	}
	d.fraction = f
	d.capped = f > 0 && f < 1
	if d.capped {
		t := d.total
		if t == 0 {
			t = d.TotalBytes()
		}
		d.allowed = uint64(f * float64(t))
	} else {
		d.allowed = 0
	}
}

func (d *device) Cap() (uint64, bool) { return d.allowed, d.capped }

// unlimitedTotal is the total reported for a device without capacity,
// and the most it holds.
const unlimitedTotal = 1 << 46

func (d *device) TotalBytes() uint64 {
	if d.total == 0 {
		return unlimitedTotal
	}
	return d.total
}

func (d *device) Recorded() []trace.Event { return d.rec }

func (d *device) fits(size uint64) bool {
	if d.pool != nil {
		return d.pool.fits(size)
	}
	if d.total == 0 {
		return d.reserved <= unlimitedTotal && size <= unlimitedTotal-d.reserved
	}
	limit := uint64(0)
	if d.total > d.outside {
		limit = d.total - d.outside
	}
	return size <= limit && d.reserved <= limit-size
}

// expect matches a device call with the oldest recorded event.
func (d *device) expect(kind trace.Kind, addr, size uint64, useAddr bool) (trace.Event, bool) {
	if !d.compare {
		return trace.Event{}, false
	}
	if len(d.rec) > 0 {
		h := d.rec[0]
		if h.Kind == kind && h.SizeBytes == size && (!useAddr || h.Addr == addr) {
			d.rec = d.rec[1:]
			d.matched++
			return h, true
		}
	}
	d.e.deviceMismatch(d, kind, addr, size)
	return trace.Event{}, false
}

// recordedFailure says whether the recorded run's cudaMalloc (or, for an
// expandable segment, its mapping) failed here, for memory the trace does
// not show (other processes', the CUDA context's): during a request that
// ended in an OOM (refuse), or when the recorded run's next device call
// gives memory back. PyTorch gives cached memory back before asking for
// more only through garbage collection, which the policy does before it
// asks; any other release between a request and its cudaMalloc is the
// release-and-retry after a failed one. Only a replay of the recorded
// allocator has recorded calls: a what-if never fails so.
func (d *device) recordedFailure() bool {
	if d.refuse {
		return true
	}
	if !d.compare || len(d.rec) == 0 {
		return false
	}
	k := d.rec[0].Kind
	return k == trace.KindSegmentFree || k == trace.KindSegmentUnmap
}

// The live segments and ranges are kept by address from the highest down:
// the layouts place most new ones below the last, so a new span
// is appended at the end and the most recent one freed there, rather than
// every span moved on each call (a policy that maps a terabyte 2 MiB at a
// time makes half a million of them).

// below returns the index of the first span of ss (highest first) that
// starts at or below addr, or len(ss).
func below(ss []span, addr uint64) int {
	return sort.Search(len(ss), func(i int) bool { return ss[i].addr <= addr })
}

func overlaps(ss []span, addr, size uint64) bool {
	// The highest span that starts below addr+size overlaps if any does.
	i := sort.Search(len(ss), func(i int) bool { return ss[i].addr < addr+size })
	return i < len(ss) && ss[i].addr+ss[i].size > addr
}

func insertSpan(ss []span, s span) []span {
	i := below(ss, s.addr)
	ss = append(ss, span{})
	copy(ss[i+1:], ss[i:])
	ss[i] = s
	return ss
}

// findSpan returns the index of the span holding addr, or -1.
func findSpan(ss []span, addr uint64) int {
	i := below(ss, addr)
	if i < len(ss) && ss[i].addr+ss[i].size > addr {
		return i
	}
	return -1
}

// placeRange returns where a new range of size bytes goes (see
// LayoutTop). A slot that no longer fits below LayoutTop is taken upwards
// from it. It costs O(log tails) when no other span lies in the way.
func (d *device) placeRange(size uint64) uint64 {
	need := max(size, 1)
	for i := d.tails.last(len(d.tails.s), need); i >= 0; i = d.tails.last(i, need) {
		t := &d.tails.s[i]
		if overlaps(d.segs, t.addr, size) || overlaps(d.ranges, t.addr, size) {
			continue
		}
		a := t.addr
		t.addr, t.size = t.addr+size, t.size-size
		d.tails.shrunk(i)
		return a
	}
	n := (size + LayoutSlot - 1) / LayoutSlot * LayoutSlot
	for {
		var a uint64
		if n <= d.top {
			a = d.top - n
			d.top = a
		} else {
			a = d.up
			d.up += n
		}
		if !overlaps(d.segs, a, size) && !overlaps(d.ranges, a, size) {
			if n > size {
				d.tails.push(span{addr: a + size, size: n - size})
			}
			return a
		}
	}
}

// tails holds the unused tails of slots in the order they were made, and
// a tree of the maxima of their sizes, so that the most recent tail of at
// least n bytes is found in O(log tails). A used-up tail stays, with size 0.
type tails struct {
	s   []span
	max []uint64 // max[1] is the root; the leaves are max[len(max)/2:]
}

func (t *tails) push(sp span) {
	i := len(t.s)
	t.s = append(t.s, sp)
	leaves := len(t.max) / 2
	if i < leaves {
		t.shrunk(i)
		return
	}
	leaves = max(64, 2*leaves)
	t.max = make([]uint64, 2*leaves)
	for j := range t.s {
		t.max[leaves+j] = t.s[j].size
	}
	for j := leaves - 1; j >= 1; j-- {
		t.max[j] = max(t.max[2*j], t.max[2*j+1])
	}
}

// shrunk updates the tree after tail i was pushed or made smaller.
func (t *tails) shrunk(i int) {
	j := len(t.max)/2 + i
	t.max[j] = t.s[i].size
	for j >>= 1; j >= 1; j >>= 1 {
		m := max(t.max[2*j], t.max[2*j+1])
		if t.max[j] == m {
			return
		}
		t.max[j] = m
	}
}

// last returns the largest index below lim of a tail of at least n bytes,
// or -1.
func (t *tails) last(lim int, n uint64) int {
	if lim <= 0 || len(t.max) == 0 {
		return -1
	}
	return t.find(1, 0, len(t.max)/2, lim, n)
}

func (t *tails) find(node, lo, hi, lim int, n uint64) int {
	if lo >= lim || t.max[node] < n {
		return -1
	}
	if hi-lo == 1 {
		return lo
	}
	mid := (lo + hi) / 2
	if r := t.find(2*node+1, mid, hi, lim, n); r >= 0 {
		return r
	}
	return t.find(2*node, lo, mid, lim, n)
}

func (d *device) Malloc(size uint64, stream trace.StreamID) (uint64, bool) {
	if d.capped && (size > d.allowed || d.reserved > d.allowed-size) {
		return 0, false
	}
	if d.recordedFailure() {
		return 0, false
	}
	if !d.fits(size) {
		return 0, false
	}
	// The driver layout follows every call, whichever address the
	// segment gets.
	off, c := d.lay.alloc(size)
	ev, rec := d.expect(trace.KindSegmentAlloc, 0, size, false)
	rec = rec && !overlaps(d.segs, ev.Addr, size) && !overlaps(d.ranges, ev.Addr, size)
	if !d.lay.anchored {
		d.lay.anchored = true
		if rec {
			d.lay.base = ev.Addr - uint64(off)
		}
	}
	addr := ev.Addr
	if !rec {
		addr = d.lay.addr(off)
		if overlaps(d.segs, addr, size) || overlaps(d.ranges, addr, size) {
			addr = d.placeRange(size)
		}
	}
	d.segs = insertSpan(d.segs, span{addr: addr, size: size, chunk: c + 1, off: off})
	d.reserved += size
	d.allocs++
	return addr, true
}

func (d *device) Free(addr, size uint64) {
	d.expect(trace.KindSegmentFree, addr, size, true)
	if i := findSpan(d.segs, addr); i >= 0 && d.segs[i].addr == addr {
		if c := d.segs[i].chunk; c > 0 {
			d.lay.free(c-1, d.segs[i].off, d.segs[i].size)
		}
		d.segs = append(d.segs[:i], d.segs[i+1:]...)
	} else {
		panic(fmt.Sprintf("replay: policy freed unknown segment %#x", addr))
	}
	d.reserved -= size
	d.frees++
}

// Reserve gives a new range the base of the request's first recorded map
// outside what live ranges have mapped. The range's size is PyTorch's
// (1 1/8 of the device's total), which is larger than the recorded one
// when the replay's device is larger than the recorded device: a range
// below the recorded base then ends at it, and the new range ends at the
// next range, as the driver's reservations did not overlap.
func (d *device) Reserve(size uint64, stream trace.StreamID) uint64 {
	if d.compare {
		for _, ev := range d.rec {
			if ev.Kind == trace.KindSegmentMap && d.unmapped(ev.Addr) && !overlaps(d.segs, ev.Addr, ev.SizeBytes) {
				if i := findSpan(d.ranges, ev.Addr); i >= 0 {
					d.ranges[i].size = ev.Addr - d.ranges[i].addr
				}
				// The lowest range above ev.Addr is the one just before
				// the first at or below it.
				if i := below(d.ranges, ev.Addr) - 1; i >= 0 {
					size = min(size, d.ranges[i].addr-ev.Addr)
				}
				d.ranges = insertSpan(d.ranges, span{addr: ev.Addr, size: size, end: ev.Addr})
				return ev.Addr
			}
		}
	}
	a := d.placeRange(size)
	d.ranges = insertSpan(d.ranges, span{addr: a, size: size, end: a})
	return a
}

// unmapped reports whether addr is outside every live range's mapped
// extent (from its base to the end of its highest mapped bytes) and is
// no range's base.
func (d *device) unmapped(addr uint64) bool {
	i := findSpan(d.ranges, addr)
	return i < 0 || (addr != d.ranges[i].addr && addr >= d.ranges[i].end)
}

func (d *device) Map(addr, size uint64) bool {
	if !d.fits(size) || d.recordedFailure() {
		return false
	}
	d.expect(trace.KindSegmentMap, addr, size, true)
	if i := findSpan(d.ranges, addr); i >= 0 {
		d.ranges[i].mapped += size
		d.ranges[i].end = max(d.ranges[i].end, addr+size)
	}
	d.reserved += size
	d.allocs++
	return true
}

func (d *device) Unmap(addr, size uint64) {
	d.expect(trace.KindSegmentUnmap, addr, size, true)
	if i := findSpan(d.ranges, addr); i >= 0 {
		d.ranges[i].mapped -= size
		if d.ranges[i].mapped == 0 {
			// PyTorch destroys a segment once nothing in it is mapped.
			d.ranges = append(d.ranges[:i], d.ranges[i+1:]...)
		}
	}
	d.reserved -= size
	d.frees++
}
