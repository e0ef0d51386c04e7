// Package replay feeds a trace's requests through an allocator policy and measures what the device would hold.
package replay

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// live is a block the program holds (or whose free has not completed),
// keyed by its recorded address.
type live struct {
	addr  uint64 // the replayed address
	size  uint64 // the block size the policy handed out
	req   uint64 // requested bytes
	h     uint32 // the policy's handle (Block.Handle)
	freed bool   // free requested
}

func (l *live) block() driver.Block {
	return driver.Block{Addr: l.addr, SizeBytes: l.size, Handle: l.h}
}

// devState is the replay of one trace device.
type devState struct {
	id       trace.DeviceID
	policy   driver.Policy
	strand   driver.Strander  // the policy, when it implements driver.Strander
	comp     driver.Completer // the policy, when it implements Completer
	dev      *device
	live     liveMap             // live blocks by recorded address
	unserved map[uint64]struct{} // recorded addresses of allocations the replay could not serve
	fc       []driver.Block      // completed frees not yet passed to the policy

	active, allocated, requested uint64
}

// maxOOMEvents caps the OOMs a Result lists (all are counted).
const maxOOMEvents = 1000

type engine struct {
	cfg     Config
	factory driver.Factory
	hdr     *trace.Header
	devs    []*devState
	last    *devState
	res     Result
	index   int64       // index of the event being processed
	ev      trace.Event // the request being served, for mismatch reports
	// While fast runs, the request being served is fastEvs[fastI], not ev.
	fastEvs []trace.Event
	fastI   int
	exact   bool
	sawDev  bool
	injects bool // cfg asks for injected actions

	// immediate frees: decided from the header or from the first free.
	immediate  int8 // 0 undecided, 1 immediate, -1 deferred
	heldFree   bool // a free_requested waits for the decision
	heldEvent  trace.Event
	ahead      []trace.Event // the events decoded after the one step replays
	allocs     int64         // allocations since the last injected empty_cache (Config.EmptyCacheEvery)
	lastDefrag uint64

	// totals over devices
	reserved, active, allocated, requested uint64

	// metrics
	peakReserved uint64
	atPeakActive uint64
	// Time-weighted fragmentation, pct(active, reserved) weighted by the
	// time each state held, and its fallback, the mean over events. Both
	// are summed per stretch of constant reserved bytes, where the sum of
	// pct is 100*(weight - Σ active×weight / reserved): a multiply-add per
	// event instead of a division (see flushTime and flushCount).
	twSumTime  float64 // Σ pct×dt over flushed stretches
	twTime     int64   // Σ dt
	twSumCount float64 // Σ pct over flushed stretches' events
	twCount    int64   // events
	tRes       uint64  // reserved bytes of the open time stretch
	tW         int64   // its Σ dt
	tA         float64 // its Σ active×dt
	cRes       uint64  // reserved bytes of the open count stretch
	cN         int64   // its events
	cA         float64 // its Σ active
	prevTime   int64   // the latest nonzero event time; 0 before one
	prevActive uint64  // the state after the previous event
	prevRes    uint64
	stranded   uint64
	sample     Sample
	// The replayed block of the event apply served last, for the Sample.
	blk    driver.Block
	hasBlk bool
}

// Run replays the trace r to its end through policies built by f, one
// policy per trace device, and returns what it measured. Memory is bounded
// by the live blocks, not by the trace's length.
//
// Requests: alloc calls Malloc; free_requested FreeRequested;
// free_completed FreeCompleted, passed on just before the device's next
// request so that a policy sees that request's recorded device events
// first. A PyTorch snapshot's frees complete when its free_completed
// events say, even after later requests (a block freed after
// record_stream waits for the other stream). Another trace has every free
// completed at once when its header says frees were not recorded
// completing (RMM logs), or when no free_completed follows its first
// free_requested in the events decoded with it.
// empty_cache calls EmptyCache; an oom event replays its request (and
// frees it at once if the replay serves it); set_fraction changes the
// device's cap; markers pass through. A free of an address no alloc
// returned is an error naming the event, unless the replay could not
// serve that alloc (OOM).
//
// Device events (segment_alloc, ...) are the recorded allocator's moves.
// When the policy implements Reproducer and reproduces the trace's
// allocator under its settings (and nothing is injected), they give new
// segments their recorded addresses, the policy reads them through
// Device.Recorded, and every device call and allocation address is
// checked against them (Result.Fidelity). Any other replay (a what-if)
// does not see them: its result depends on the requests alone.
//
// When GOMAXPROCS > 1 and cfg has no Observer, the trace is decoded on a
// second goroutine, a few batches ahead of the replay.
//
// A trace cut short (an error that Is trace.ErrTruncated) still gives a
// complete Result for every event read, with the error saying what was lost.
// A cfg that Validate refuses is a *ConfigError, before any event.
func Run(r *trace.Reader, f driver.Factory, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &engine{cfg: cfg, factory: f, hdr: r.Header(), injects: cfg.EmptyCacheEvery > 0 || cfg.DefragThresholdPct > 0}
	if e.hdr == nil {
		e.hdr = &trace.Header{}
	}
	if err := e.start(); err != nil {
		return nil, err
	}
	var err error
	if cfg.Observer == nil && runtime.GOMAXPROCS(0) > 1 {
		err = e.runPipelined(r)
	} else {
		err = e.runSerial(r)
	}
	defer e.release()
	if err != nil {
		// A trace cut short still gives the result of every event read.
		if errors.Is(err, trace.ErrTruncated) && e.finish() == nil {
			return &e.res, err
		}
		return e.partial(), err
	}
	if err := e.finish(); err != nil {
		return e.partial(), err
	}
	return &e.res, nil
}

// release gives the devices' live maps, and the memory of their policies
// that implement Releaser, to later replays, once the replay is over.
func (e *engine) release() {
	for _, d := range e.devs {
		d.live.release()
		if r, ok := d.policy.(driver.Releaser); ok {
			r.Release()
		}
	}
}

func (e *engine) start() error {
	h := e.hdr
	switch {
	case h.Producer == trace.ProducerRMM:
		e.immediate = 1
	default:
		// A PyTorch snapshot records when each free completed: a block
		// freed after record_stream stays unavailable until then.
		if h.Producer == trace.ProducerPyTorch {
			e.immediate = -1
		}
		for _, a := range h.Approximate {
			if strings.Contains(a, "free_completed") {
				e.immediate = 1
			}
		}
	}
	if h.Initial != nil {
		byDev := map[trace.DeviceID][]trace.Segment{}
		var order []trace.DeviceID
		for _, s := range h.Initial.Segments {
			if _, ok := byDev[s.Device]; !ok {
				order = append(order, s.Device)
			}
			byDev[s.Device] = append(byDev[s.Device], s)
		}
		for _, id := range order {
			ds, err := e.device(id)
			if err != nil {
				return err
			}
			if err := e.seed(ds, byDev[id]); err != nil {
				return err
			}
		}
	}
	e.res.Fidelity.Checked = false
	return nil
}

// seed gives a device its initial state: through Seeder when the policy
// has it, else by serving the live blocks as requests.
func (e *engine) seed(ds *devState, segs []trace.Segment) error {
	if sd, ok := ds.policy.(driver.Seeder); ok {
		if err := sd.Seed(segs); err != nil {
			return fmt.Errorf("replay: initial state of device %d: %w", ds.id, err)
		}
		for _, s := range segs {
			ds.dev.reserved += s.SizeBytes
			e.reserved += s.SizeBytes
			if s.Expandable {
				ds.dev.ranges = insertSpan(ds.dev.ranges, span{addr: s.Addr, size: s.SizeBytes, mapped: s.SizeBytes, end: s.Addr + s.SizeBytes})
			} else {
				ds.dev.segs = insertSpan(ds.dev.segs, span{addr: s.Addr, size: s.SizeBytes})
			}
			for _, b := range s.Blocks {
				if b.State == trace.BlockInactive {
					continue
				}
				l := live{addr: b.Addr, size: b.SizeBytes, req: b.RequestedBytes, freed: b.State == trace.BlockPendingFree}
				ds.live.Set(b.Addr, l)
				e.addActive(ds, l)
			}
		}
		return nil
	}
	ds.dev.compare = false
	for _, s := range segs {
		for _, b := range s.Blocks {
			if b.State == trace.BlockInactive {
				continue
			}
			req := b.RequestedBytes
			if req == 0 {
				req = b.SizeBytes
			}
			blk, err := ds.policy.Malloc(req, s.Stream)
			if err != nil {
				return fmt.Errorf("replay: initial block %#x of device %d: %w", b.Addr, ds.id, err)
			}
			l := live{addr: blk.Addr, size: blk.SizeBytes, req: req, h: blk.Handle}
			e.addActive(ds, l)
			if b.State == trace.BlockPendingFree {
				ds.policy.FreeRequested(blk)
				l.freed = true
				ds.allocated -= l.size
				e.allocated -= l.size
			}
			ds.live.Set(b.Addr, l)
		}
	}
	e.syncReserved(ds)
	ds.dev.compare = true
	return nil
}

func (e *engine) addActive(ds *devState, l live) {
	ds.active += l.size
	e.active += l.size
	ds.requested += l.req
	e.requested += l.req
	if !l.freed {
		ds.allocated += l.size
		e.allocated += l.size
	}
}

// syncReserved recomputes the total reserved bytes.
func (e *engine) syncReserved(_ *devState) {
	var r uint64
	for _, d := range e.devs {
		r += d.dev.reserved
	}
	e.reserved = r
}

func (e *engine) device(id trace.DeviceID) (*devState, error) {
	if l := e.last; l != nil && l.id == id {
		return l, nil
	}
	for _, d := range e.devs {
		if d.id == id {
			e.last = d
			return d, nil
		}
	}
	total := e.cfg.CapacityBytes
	if total == 0 {
		total = e.hdr.GPUTotalBytes
	}
	frac := e.cfg.Fraction
	if frac == 0 {
		frac = e.hdr.MemoryFraction
	}
	if e.cfg.noFraction {
		frac = 0
	}
	ds := &devState{id: id, unserved: map[uint64]struct{}{}}
	ds.live.reuse()
	ds.dev = newDevice(e, id, total, e.cfg.OutsideBytes, frac)
	p, err := e.factory(ds.dev, e.hdr)
	if err != nil {
		return nil, fmt.Errorf("replay: device %d: %w", id, err)
	}
	ds.policy = p
	ds.strand, _ = p.(driver.Strander)
	ds.comp, _ = p.(driver.Completer)
	if e.res.Policy == "" {
		e.res.Policy = p.Name()
		if rp, ok := p.(driver.Reproducer); ok {
			e.exact = rp.Reproduces(e.hdr)
		}
	}
	if e.cfg.EmptyCacheEvery > 0 || e.cfg.DefragThresholdPct > 0 {
		e.exact = false
	}
	e.devs = append(e.devs, ds)
	e.last = ds
	return ds, nil
}

func (e *engine) partial() *Result {
	r := e.res
	return &r
}

// step processes one event.
func (e *engine) step(ev *trace.Event) error {
	if e.heldFree {
		e.heldFree = false
		if e.immediate == 0 {
			if ev.Kind == trace.KindFreeCompleted || completes(e.ahead) {
				e.immediate = -1
			} else {
				e.immediate = 1
			}
		}
		if e.immediate == 1 {
			held := e.heldEvent
			held.Kind = trace.KindFreeCompleted
			if err := e.apply(&held, e.index-1); err != nil {
				return err
			}
		}
	}
	idx := e.index
	e.index++
	if err := e.apply(ev, idx); err != nil {
		return err
	}
	if ev.Kind == trace.KindFreeRequested && e.immediate == 0 {
		e.heldFree = true
		e.heldEvent = *ev
	}
	e.res.Events++
	e.measure(ev, idx)
	return nil
}

// completes reports whether evs holds a free_completed: a trace that
// records any records them all, and its frees complete when it says, even
// when the first one completes after later requests.
func completes(evs []trace.Event) bool {
	for i := range evs {
		if evs[i].Kind == trace.KindFreeCompleted {
			return true
		}
	}
	return false
}

// unserved records an alloc the policy could not serve (err).
func (e *engine) unserved(ds *devState, ev *trace.Event, idx int64, err error) error {
	if !errors.Is(err, driver.ErrOOM) {
		return fmt.Errorf("event %d: %w", idx, err)
	}
	e.oom(ds, *ev, idx)
	ds.unserved[ev.Addr] = struct{}{}
	return nil
}

// misplaced records an alloc served at another address than the recorded one.
func (e *engine) misplaced(ds *devState, ev *trace.Event, idx int64, blk driver.Block) {
	if e.res.Fidelity.FirstMismatch == "" && e.exact {
		e.res.Fidelity.FirstMismatch = fmt.Sprintf("event %d: alloc of %d bytes on stream %#x: recorded at %#x, replayed at %#x (block of %d bytes)%s",
			idx, ev.SizeBytes, uint64(ev.Stream), ev.Addr, blk.Addr, blk.SizeBytes, e.context(ds, ev.SizeBytes))
	}
}

// replay replays a run of events: through fast while it can, else
// through step, one event at a time.
func (e *engine) replay(evs []trace.Event) error {
	for len(evs) > 0 {
		if e.fastOK() {
			n, err := e.fast(evs)
			if err != nil {
				return err
			}
			evs = evs[n:]
			if len(evs) == 0 {
				break
			}
		}
		e.ahead = evs[1:]
		err := e.step(&evs[0])
		e.ahead = nil
		if err != nil {
			return err
		}
		evs = evs[1:]
	}
	return nil
}

func (e *engine) finish() error {
	if e.heldFree {
		e.heldFree = false
		held := e.heldEvent
		held.Kind = trace.KindFreeCompleted
		if err := e.apply(&held, e.index-1); err != nil {
			return err
		}
	}
	var final uint64
	for _, ds := range e.devs {
		e.dispatch(ds)
		e.endRequest(ds)
		final += ds.dev.reserved
		e.res.DeviceAllocs += ds.dev.allocs
		e.res.DeviceFrees += ds.dev.frees
		e.res.AllocRetries += ds.policy.Stats().AllocRetries
		e.res.Fidelity.DeviceEventsMatched += ds.dev.matched
	}
	e.res.FinalReservedBytes = final
	fr := &e.res.Fragmentation
	fr.AtPeakPct = pct(e.atPeakActive, e.peakReserved)
	fr.PeakRatioPct = pct(e.res.PeakActiveBytes, e.res.PeakReservedBytes)
	e.flushTime()
	e.flushCount()
	if e.twTime > 0 {
		fr.TimeWeightedPct = e.twSumTime / float64(e.twTime)
	} else if e.twCount > 0 {
		fr.TimeWeightedPct = e.twSumCount / float64(e.twCount)
	}
	if e.res.PeakRequestedBytes > 0 {
		fr.OverheadRatio = float64(e.res.PeakReservedBytes) / float64(e.res.PeakRequestedBytes)
	}
	// A trace without device events can still be checked by its
	// allocation addresses when it starts from a recorded state.
	e.res.Fidelity.Checked = e.exact && (e.sawDev || (e.hdr.Initial != nil && e.res.Fidelity.Allocs > 0))
	if !e.res.Fidelity.Checked {
		e.res.Fidelity.Allocs = 0
		e.res.Fidelity.AllocsAtRecordedAddress = 0
		e.res.Fidelity.DeviceEvents = 0
		e.res.Fidelity.DeviceEventsMatched = 0
		e.res.Fidelity.FirstMismatch = ""
	}
	return nil
}

// dispatch passes the completed frees held back to the policy. They are
// held until the next request so that the recorded device events of that
// request are known to the policy when it applies them.
func (e *engine) dispatch(ds *devState) {
	if len(ds.fc) == 0 {
		return
	}
	for _, b := range ds.fc {
		ds.policy.FreeCompleted(b)
	}
	ds.fc = ds.fc[:0]
}

// endRequest closes a request: recorded device events it did not match
// are mismatches.
func (e *engine) endRequest(ds *devState) {
	if len(ds.dev.rec) > 0 {
		if ds.dev.compare {
			e.deviceMismatch(ds.dev, trace.KindInvalid, 0, 0)
		}
		ds.dev.rec = ds.dev.rec[:0]
	}
}

func (e *engine) apply(ev *trace.Event, idx int64) error {
	e.hasBlk = false
	ds := e.last
	if ds == nil || ds.id != ev.Device {
		var err error
		if ds, err = e.device(ev.Device); err != nil {
			return err
		}
	}
	switch ev.Kind {
	case trace.KindAlloc:
		e.allocs++
		e.ev = *ev
		e.dispatch(ds)
		blk, err := ds.policy.Malloc(ev.SizeBytes, ev.Stream)
		e.endRequest(ds)
		e.res.Allocs++
		if err != nil {
			if err := e.unserved(ds, ev, idx, err); err != nil {
				return err
			}
			break
		}
		l := live{addr: blk.Addr, size: blk.SizeBytes, req: ev.SizeBytes, h: blk.Handle}
		if !ds.live.Insert(ev.Addr, l) {
			return fmt.Errorf("event %d: alloc at %#x, which is already live", idx, ev.Addr)
		}
		if len(ds.unserved) > 0 {
			delete(ds.unserved, ev.Addr)
		}
		e.addActive(ds, l)
		e.blk, e.hasBlk = blk, true
		e.res.Fidelity.Allocs++
		if blk.Addr == ev.Addr {
			e.res.Fidelity.AllocsAtRecordedAddress++
		} else {
			e.misplaced(ds, ev, idx, blk)
		}
		e.updateStats(ds)
	case trace.KindFreeRequested:
		l, ok := ds.live.Get(ev.Addr)
		if !ok {
			if _, skip := ds.unserved[ev.Addr]; skip {
				break
			}
			return fmt.Errorf("event %d: free of unknown address %#x", idx, ev.Addr)
		}
		if l.freed {
			return fmt.Errorf("event %d: second free of address %#x", idx, ev.Addr)
		}
		l.freed = true
		ds.allocated -= l.size
		e.allocated -= l.size
		e.blk, e.hasBlk = l.block(), true
		ds.policy.FreeRequested(e.blk)
	case trace.KindFreeCompleted:
		l, ok := ds.live.Take(ev.Addr)
		if !ok {
			if _, skip := ds.unserved[ev.Addr]; skip {
				delete(ds.unserved, ev.Addr)
				break
			}
			return fmt.Errorf("event %d: free of unknown address %#x", idx, ev.Addr)
		}
		if !l.freed {
			ds.allocated -= l.size
			e.allocated -= l.size
			ds.policy.FreeRequested(l.block())
		}
		ds.active -= l.size
		e.active -= l.size
		ds.requested -= l.req
		e.requested -= l.req
		e.blk, e.hasBlk = l.block(), true
		ds.fc = append(ds.fc, e.blk)
	case trace.KindSegmentAlloc, trace.KindSegmentFree, trace.KindSegmentMap, trace.KindSegmentUnmap:
		e.sawDev = true
		e.res.Fidelity.DeviceEvents++
		// Only a replay of the recorded allocator sees them: a what-if
		// depends on the requests alone.
		if e.exact {
			ds.dev.rec = append(ds.dev.rec, *ev)
		}
		return nil
	case trace.KindEmptyCache:
		e.ev = *ev
		e.dispatch(ds)
		ds.policy.EmptyCache()
		e.endRequest(ds)
		e.updateStats(ds)
	case trace.KindOOM:
		e.ev = *ev
		e.dispatch(ds)
		// PyTorch's allocator failed this request: replayed under its
		// own settings, so does the replay (memory the trace does not
		// show, such as another process's, took the room). A live
		// recording's OOMs are the recording allocator's, not PyTorch's.
		ds.dev.refuse = e.exact && e.hdr.Producer == trace.ProducerPyTorch
		blk, err := ds.policy.Malloc(ev.SizeBytes, ev.Stream)
		ds.dev.refuse = false
		e.endRequest(ds)
		if err == nil {
			ds.policy.FreeRequested(blk)
			ds.policy.FreeCompleted(blk)
		} else if !errors.Is(err, driver.ErrOOM) {
			return fmt.Errorf("event %d: %w", idx, err)
		} else {
			e.oom(ds, *ev, idx)
		}
		e.updateStats(ds)
	case trace.KindPoolBegin, trace.KindPoolEnd, trace.KindPoolRelease:
		if err := poolEvent(ds.policy, ev); err != nil {
			return fmt.Errorf("event %d: %w", idx, err)
		}
	case trace.KindSetFraction:
		if !e.cfg.noFraction {
			ds.dev.SetFraction(math.Float64frombits(ev.Aux))
		}
	default:
		// markers and snapshots pass through
	}
	if len(e.devs) == 1 {
		e.reserved = ds.dev.reserved
	} else {
		e.syncReserved(ds)
	}
	if e.injects {
		e.inject(ds)
	}
	return nil
}

// poolEvent passes a pool event to a policy that keeps private pools.
func poolEvent(p driver.Policy, ev *trace.Event) error {
	pp, ok := p.(driver.Pooler)
	if !ok {
		return nil
	}
	switch ev.Kind {
	case trace.KindPoolBegin:
		return pp.BeginPool(ev.Aux, ev.Stream)
	case trace.KindPoolEnd:
		pp.EndPool(ev.Aux, ev.Stream)
	default:
		pp.ReleasePool(ev.Aux)
	}
	return nil
}

// inject carries out the actions Config asks for.
func (e *engine) inject(ds *devState) {
	if n := e.cfg.EmptyCacheEvery; n > 0 && e.allocs >= n {
		e.allocs = 0
		e.dispatch(ds)
		ds.policy.EmptyCache()
		e.endRequest(ds)
		e.syncReserved(ds)
		e.updateStats(ds)
	}
	if t := e.cfg.DefragThresholdPct; t > 0 && e.reserved > 0 && e.reserved != e.lastDefrag && pct(e.active, e.reserved) > t {
		e.dispatch(ds)
		ds.policy.EmptyCache()
		e.endRequest(ds)
		e.syncReserved(ds)
		e.lastDefrag = e.reserved
		e.updateStats(ds)
	}
}

func (e *engine) oom(ds *devState, ev trace.Event, idx int64) {
	e.res.OOMs++
	if len(e.res.OOMEvents) >= maxOOMEvents {
		return
	}
	st := ds.policy.Stats()
	freeCached := ds.dev.reserved - ds.active
	e.res.OOMEvents = append(e.res.OOMEvents, OOM{
		Index: idx, TimeNS: ev.TimeNS, Device: ds.id, Stream: ev.Stream, SizeBytes: ev.SizeBytes,
		ReservedBytes: ds.dev.reserved, FreeCachedBytes: freeCached, LargestFreeBytes: st.LargestFreeBytes,
		StrandedBytes: st.StrandedBytes,
		Fragmentation: freeCached >= ev.SizeBytes && st.LargestFreeBytes < ev.SizeBytes,
	})
}
