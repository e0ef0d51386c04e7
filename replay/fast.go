package replay

// The fast path: the allocs and frees of a one-device replay, in one loop
// that measures only what such events change.

import (
	"fmt"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// fastOK reports whether fast may replay the next events: one device,
// frees known to complete when the trace says, nothing injected and no
// Observer.
func (e *engine) fastOK() bool {
	return len(e.devs) == 1 && e.immediate == -1 && !e.injects && e.cfg.Observer == nil
}

// fast replays the leading events of evs that are allocs and frees of the
// one device, as step does, in one loop: the device's own counters are
// the totals' (synced at the end), and only what such events change is
// measured (not the request count, which only injected actions use). It
// returns the number of events replayed; step replays the next one
// (another kind, another device, a free of an unknown address).
func (e *engine) fast(evs []trace.Event) (n int, err error) {
	ds := e.devs[0]
	pol := ds.policy
	dev := ds.dev
	id := ds.id
	r := &e.res
	e.fastEvs, e.fastI = evs, -1
	defer func() {
		ds.active, ds.allocated, ds.requested = e.active, e.allocated, e.requested
		if e.fastI >= 0 {
			e.ev = evs[e.fastI]
		}
		e.fastEvs = nil
	}()
	comp := ds.comp
	for i := 0; i < len(evs); i++ {
		ev := &evs[i]
		if ev.Device != id {
			return i, nil
		}
		idx := e.index
		switch ev.Kind {
		case trace.KindAlloc:
			e.index++
			e.fastI = i
			var blk driver.Block
			var st uint64
			var err error
			if comp != nil {
				blk, st, err = comp.MallocAfter(ds.fc, ev.SizeBytes, ev.Stream)
				ds.fc = ds.fc[:0]
			} else {
				if len(ds.fc) > 0 {
					e.dispatch(ds)
				}
				blk, err = pol.Malloc(ev.SizeBytes, ev.Stream)
				if ds.strand != nil {
					st = ds.strand.StrandedBytes()
				} else {
					st = pol.Stats().StrandedBytes
				}
			}
			if len(dev.rec) > 0 {
				e.endRequest(ds)
			}
			r.Allocs++
			if err != nil {
				ds.active, ds.allocated, ds.requested = e.active, e.allocated, e.requested
				if err := e.unserved(ds, ev, idx, err); err != nil {
					return i, err
				}
			} else {
				l, ok := ds.live.Add(ev.Addr)
				if !ok {
					return i, fmt.Errorf("event %d: alloc at %#x, which is already live", idx, ev.Addr)
				}
				// Field by field: a literal is built on the stack and copied.
				l.addr, l.size, l.req, l.h, l.freed = blk.Addr, blk.SizeBytes, ev.SizeBytes, blk.Handle, false
				if len(ds.unserved) > 0 {
					delete(ds.unserved, ev.Addr)
				}
				e.active += blk.SizeBytes
				e.allocated += blk.SizeBytes
				e.requested += ev.SizeBytes
				r.Fidelity.Allocs++
				if blk.Addr == ev.Addr {
					r.Fidelity.AllocsAtRecordedAddress++
				} else {
					e.misplaced(ds, ev, idx, blk)
				}
			}
			e.stranded = st
			if st > r.Fragmentation.MaxStrandedBytes {
				r.Fragmentation.MaxStrandedBytes = st
			}
			e.raisePeaks() // active, allocated and requested bytes grow only here
		case trace.KindFreeRequested:
			l, slot, ok := ds.live.ref(ev.Addr)
			if !ok || l.freed {
				return i, nil // step reports it
			}
			e.index++
			e.allocated -= l.size
			if j := i + 1; j < len(evs) && evs[j].Kind == trace.KindFreeCompleted && evs[j].Addr == ev.Addr && evs[j].Device == id {
				// The free completes at the next event, as it nearly
				// always does: both are replayed here, with one lookup.
				// The policy sees no call until the next request, which
				// the block's free completes before.
				if comp == nil {
					pol.FreeRequested(l.block())
					e.reserved = dev.reserved
				}
				// Without a call, reserved is over the peak only at a
				// trace's start, from its initial state.
				if e.reserved > e.peakReserved {
					e.newPeak(idx)
				}
				r.Events++
				e.measureTime(ev.TimeNS)
				if r.Events&(1<<20-1) == 0 && e.cfg.Progress != nil {
					e.cfg.Progress(r.Events)
				}
				i = j
				ev = &evs[j]
				idx = e.index
				e.index++
				e.active -= l.size
				e.requested -= l.req
				ds.fc = append(ds.fc, l.block())
				ds.live.removeAt(slot)
				break
			}
			l.freed = true
			pol.FreeRequested(l.block())
		case trace.KindFreeCompleted:
			// The block is read in its slot, and removed last.
			l, slot, ok := ds.live.takeRef(ev.Addr)
			if !ok {
				return i, nil // step replays it
			}
			e.index++
			if !l.freed {
				e.allocated -= l.size
				pol.FreeRequested(l.block())
			}
			e.active -= l.size
			e.requested -= l.req
			ds.fc = append(ds.fc, l.block())
			ds.live.removeAt(slot)
		default:
			return i, nil
		}
		e.reserved = dev.reserved
		r.Events++
		if e.reserved > e.peakReserved {
			e.newPeak(idx)
		}
		e.measureTime(ev.TimeNS)
		if r.Events&(1<<20-1) == 0 && e.cfg.Progress != nil {
			e.cfg.Progress(r.Events)
		}
	}
	return len(evs), nil
}
