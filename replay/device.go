package replay

import (
	"fmt"
	"sort"

	"github.com/fragsim/fragsim/trace"
)

// Layout of segments that have no recorded address (live recordings, RMM
// logs, synthetic traces), after the CUDA driver's placement seen in every
// real H200 trace (driver 580, PyTorch 2.11): a segment takes a slot of its
// size rounded up to LayoutSlot, slots taken downwards from LayoutTop, the
// segment at its slot's start; the rest of a slot (its tail) takes later
// segments that fit, the most recent tail first. No range is reused. Best
// fit breaks ties between equal blocks by address, so the order matters:
// laid out upwards, three of fourteen real traces stripped of their
// segment addresses replayed with a different peak reserved (up to 24 MiB
// off); laid out this way, none does.
const (
	LayoutTop  = 0x7f8000000000
	LayoutSlot = 32 << 20
)

// span is a live device range [addr, addr+size).
type span struct {
	addr, size uint64
	mapped     uint64 // bytes mapped inside a reserved range
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

	top      uint64 // the next slot ends here
	tails    []span // unused slot tails, oldest first
	segs     []span // live cudaMalloc segments, by address
	ranges   []span // live reserved (expandable) ranges, by address
	compare  bool   // compare calls with rec
	matched  int64
	mismatch bool // a mismatch was seen during the current request

	// pool, when set, is device memory shared with other processes'
	// devices (Cohost): it decides fits instead of total and outside.
	pool *sharedPool
}

func newDevice(e *engine, id trace.DeviceID, total, outside uint64, fraction float64) *device {
	d := &device{e: e, id: id, total: total, outside: outside, top: LayoutTop, compare: true}
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
		return size <= unlimitedTotal-d.reserved
	}
	limit := uint64(0)
	if d.total > d.outside {
		limit = d.total - d.outside
	}
	return d.reserved+size <= limit
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

func overlaps(ss []span, addr, size uint64) bool {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].addr+ss[i].size > addr })
	return i < len(ss) && ss[i].addr < addr+size
}

func insertSpan(ss []span, s span) []span {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].addr > s.addr })
	ss = append(ss, span{})
	copy(ss[i+1:], ss[i:])
	ss[i] = s
	return ss
}

func findSpan(ss []span, addr uint64) int {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].addr+ss[i].size > addr })
	if i < len(ss) && ss[i].addr <= addr {
		return i
	}
	return -1
}

// place returns where a new segment of size bytes goes (see LayoutTop).
func (d *device) place(size uint64) uint64 {
	for i := len(d.tails) - 1; i >= 0; i-- {
		t := &d.tails[i]
		if t.size < size || overlaps(d.segs, t.addr, size) || overlaps(d.ranges, t.addr, size) {
			continue
		}
		a := t.addr
		t.addr, t.size = t.addr+size, t.size-size
		if t.size == 0 {
			d.tails = append(d.tails[:i], d.tails[i+1:]...)
		}
		return a
	}
	n := (size + LayoutSlot - 1) / LayoutSlot * LayoutSlot
	for {
		a := d.top - n
		d.top = a
		if !overlaps(d.segs, a, size) && !overlaps(d.ranges, a, size) {
			if n > size {
				d.tails = append(d.tails, span{addr: a + size, size: n - size})
			}
			return a
		}
	}
}

func (d *device) Malloc(size uint64, stream trace.StreamID) (uint64, bool) {
	if d.capped && d.reserved+size > d.allowed {
		return 0, false
	}
	if !d.fits(size) {
		return 0, false
	}
	var addr uint64
	if ev, ok := d.expect(trace.KindSegmentAlloc, 0, size, false); ok && !overlaps(d.segs, ev.Addr, size) && !overlaps(d.ranges, ev.Addr, size) {
		addr = ev.Addr
	} else {
		addr = d.place(size)
	}
	d.segs = insertSpan(d.segs, span{addr: addr, size: size})
	d.reserved += size
	d.allocs++
	return addr, true
}

func (d *device) Free(addr, size uint64) {
	d.expect(trace.KindSegmentFree, addr, size, true)
	if i := findSpan(d.segs, addr); i >= 0 && d.segs[i].addr == addr {
		d.segs = append(d.segs[:i], d.segs[i+1:]...)
	} else {
		panic(fmt.Sprintf("replay: policy freed unknown segment %#x", addr))
	}
	d.reserved -= size
	d.frees++
}

func (d *device) Reserve(size uint64, stream trace.StreamID) uint64 {
	if d.compare {
		for _, ev := range d.rec {
			if ev.Kind == trace.KindSegmentMap && findSpan(d.ranges, ev.Addr) < 0 &&
				!overlaps(d.segs, ev.Addr, size) && !overlaps(d.ranges, ev.Addr, size) {
				d.ranges = insertSpan(d.ranges, span{addr: ev.Addr, size: size})
				return ev.Addr
			}
		}
	}
	a := d.place(size)
	d.ranges = insertSpan(d.ranges, span{addr: a, size: size})
	return a
}

func (d *device) Map(addr, size uint64) bool {
	if !d.fits(size) {
		return false
	}
	d.expect(trace.KindSegmentMap, addr, size, true)
	if i := findSpan(d.ranges, addr); i >= 0 {
		d.ranges[i].mapped += size
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
