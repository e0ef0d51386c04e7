// Package replay feeds a trace's requests through an allocator policy and measures what the device would hold.
package replay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/fragsim/fragsim/trace"
)

// Reproducer is implemented by policies that claim to reproduce the
// allocator a trace was recorded with. The engine checks fidelity (every
// device call and every allocation's address against the recorded ones)
// only when the trace carries device events and the policy's Reproduces
// returns true for the trace's header.
type Reproducer interface {
	Reproduces(h *trace.Header) bool
}

// strander is implemented by policies that report Stats().StrandedBytes
// alone, more cheaply than Stats: the engine asks for it after every request.
type strander interface {
	StrandedBytes() uint64
}

// live is a block the program holds (or whose free has not completed),
// keyed by its recorded address.
type live struct {
	addr  uint64 // the replayed address
	size  uint64 // the block size the policy handed out
	req   uint64 // requested bytes
	h     uint32 // the policy's handle (Block.Handle)
	freed bool   // free requested
}

func (l *live) block() Block { return Block{Addr: l.addr, SizeBytes: l.size, Handle: l.h} }

// devState is the replay of one trace device.
type devState struct {
	id       trace.DeviceID
	policy   Policy
	strand   strander  // the policy, when it implements strander
	comp     Completer // the policy, when it implements Completer
	dev      *device
	live     liveMap             // live blocks by recorded address
	unserved map[uint64]struct{} // recorded addresses of allocations the replay could not serve
	fc       []Block             // completed frees not yet passed to the policy

	active, allocated, requested uint64
}

// maxOOMEvents caps the OOMs a Result lists (all are counted).
const maxOOMEvents = 1000

type engine struct {
	cfg     Config
	factory Factory
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
	requests   int64
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
	err        error
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
func Run(r *trace.Reader, f Factory, cfg Config) (*Result, error) {
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
		if r, ok := d.policy.(Releaser); ok {
			r.Release()
		}
	}
}

// batchLen is the number of events decoded at a time.
const batchLen = 2048

// serialLen is the number of events runSerial decodes at a time (16 KiB
// of events).
const serialLen = 256

// batches holds idle batches (*batch), so that a run does not allocate
// (and page in) fresh event buffers.
var batches = sync.Pool{New: func() any { return &batch{evs: make([]trace.Event, batchLen)} }}

// runSerial decodes and replays on the calling goroutine.
func (e *engine) runSerial(r *trace.Reader) error {
	b := batches.Get().(*batch)
	defer batches.Put(b)
	// A short run at a time, so that the decoded events are still in the
	// first-level cache when they are replayed.
	buf := b.evs[:serialLen]
	for {
		n, err := r.ReadEvents(buf)
		if err := e.replay(buf[:n]); err != nil {
			return err
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replay: after event %d: %w", e.index, err)
		}
	}
}

// batch is a run of decoded events and the error that ended the decoding.
type batch struct {
	evs []trace.Event
	n   int
	err error
}

// pipelineBatches is the number of batches in flight between the decoder
// and the engine.
const pipelineBatches = 4

// runPipelined decodes on a second goroutine, a few batches ahead of the
// replay, recycling a small ring of batches: decoding overlaps replay on
// another core. The decoder is stopped and waited for before it returns,
// so r is no longer used once Run returns. Run does not use it when an
// Observer is set, since an Observer may read r's string and stack tables,
// which decoding extends.
func (e *engine) runPipelined(r *trace.Reader) error {
	full := make(chan *batch, pipelineBatches)
	free := make(chan *batch, pipelineBatches)
	for i := 0; i < pipelineBatches; i++ {
		free <- batches.Get().(*batch)
	}
	done := make(chan struct{})
	go func() {
		defer close(full)
		for {
			var b *batch
			select {
			case b = <-free:
			case <-done:
				return
			}
			b.n, b.err = r.ReadEvents(b.evs)
			full <- b // never blocks: at most pipelineBatches exist
			if b.err != nil {
				return
			}
		}
	}()
	defer func() {
		close(done)
		for b := range full {
			batches.Put(b)
		}
		for len(free) > 0 {
			batches.Put(<-free)
		}
	}()
	for b := range full {
		if err := e.replay(b.evs[:b.n]); err != nil {
			return err
		}
		if err := b.err; err != nil {
			free <- b
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("replay: after event %d: %w", e.index, err)
		}
		free <- b
	}
	return nil
}

// RunFile replays the trace file at path.
func RunFile(path string, f Factory, cfg Config) (*Result, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	r, err := trace.NewReader(bufio.NewReaderSize(fh, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	res, err := Run(r, f, cfg)
	if err != nil {
		return res, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

// OpenFile returns an opener of the trace at path, for MinCapacity.
func OpenFile(path string) func() (*trace.Reader, io.Closer, error) {
	return func() (*trace.Reader, io.Closer, error) {
		fh, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		r, err := trace.NewReader(bufio.NewReaderSize(fh, 1<<20))
		if err != nil {
			fh.Close()
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		return r, fh, nil
	}
}

// MinCapacity returns the smallest device capacity, to 2 MiB, on which the
// trace completes with no OOM under the policies f builds. cfg's other
// settings apply, except CapacityBytes and memory fractions (the config's,
// the trace's and any a policy's configuration sets), which are ignored:
// the device itself is sized.
func MinCapacity(open func() (*trace.Reader, io.Closer, error), f Factory, cfg Config) (uint64, error) {
	run := func(capacity uint64) (*Result, error) {
		r, c, err := open()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		cc := cfg
		cc.CapacityBytes = capacity
		cc.Observer = nil
		cc.noFraction = true
		return Run(r, f, cc)
	}
	free, err := run(math.MaxUint64 / 2)
	if err != nil {
		return 0, err
	}
	if free.OOMs > 0 {
		return 0, fmt.Errorf("replay: the trace has OOMs even on an unlimited device")
	}
	const step = 2 << 20
	hi := (free.PeakReservedBytes + cfg.OutsideBytes + step - 1) / step * step
	if hi == 0 {
		return 0, nil
	}
	return bisect(0, hi, step, func(c uint64) (bool, error) {
		res, err := run(c)
		return err == nil && res.OOMs == 0, err
	})
}

// bisect returns the smallest multiple of step in (lo, hi] for which fits
// holds, taking lo as failing and hi as fitting, to within step.
func bisect(lo, hi, step uint64, fits func(uint64) (bool, error)) (uint64, error) {
	for hi-lo > step {
		mid := (lo + (hi-lo)/2) / step * step
		if mid <= lo {
			mid = lo + step
		}
		ok, err := fits(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
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
	if sd, ok := ds.policy.(Seeder); ok {
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
	ds.strand, _ = p.(strander)
	ds.comp, _ = p.(Completer)
	if e.res.Policy == "" {
		e.res.Policy = p.Name()
		if rp, ok := p.(Reproducer); ok {
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
	if !errors.Is(err, ErrOOM) {
		return fmt.Errorf("event %d: %w", idx, err)
	}
	e.oom(ds, *ev, idx)
	ds.unserved[ev.Addr] = struct{}{}
	return nil
}

// misplaced records an alloc served at another address than the recorded one.
func (e *engine) misplaced(ds *devState, ev *trace.Event, idx int64, blk Block) {
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
			var blk Block
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
			// Active, allocated and requested bytes grow only here.
			if e.active > r.PeakActiveBytes {
				r.PeakActiveBytes = e.active
			}
			if e.allocated > r.PeakAllocatedBytes {
				r.PeakAllocatedBytes = e.allocated
			}
			if e.requested > r.PeakRequestedBytes {
				r.PeakRequestedBytes = e.requested
			}
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

// measureTime adds the state before an event at time t to the
// time-weighted sums, and the state after it to the per-event ones.
func (e *engine) measureTime(t int64) {
	// The state before this event held from the previous event's time
	// to this one's. A zero or negative time step adds nothing, so it is
	// added without a branch; a stretch is closed only on a positive one.
	dt := t - e.prevTime
	if dt < 0 || e.prevTime == 0 {
		dt = 0
	}
	if e.prevRes != e.tRes && dt > 0 {
		e.flushTime()
		e.tRes = e.prevRes
	}
	e.tW += dt
	e.tA += float64(int64(e.prevActive)) * float64(dt)
	if t != 0 {
		e.prevTime = t
	}
	e.prevActive, e.prevRes = e.active, e.reserved
	// The per-event sums are the fallback of a trace whose time never
	// advances: once it has, they will not be used.
	if e.tW > 0 || e.twTime > 0 {
		return
	}
	if e.reserved != e.cRes {
		e.flushCount()
		e.cRes = e.reserved
	}
	e.cN++
	e.cA += float64(int64(e.active))
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

func pct(active, reserved uint64) float64 {
	if reserved == 0 {
		return 0
	}
	// Byte counts are below 2^63: the signed conversions give the same
	// values as the unsigned ones, in one instruction each.
	return 100 * (1 - float64(int64(active))/float64(int64(reserved)))
}

// dispatch passes the completed frees held back to the policy. They are
// held until the next request so that the recorded device events of that
// request are known to the policy when it applies them (spec §12.3-12.4).
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
	ds := e.last
	if ds == nil || ds.id != ev.Device {
		var err error
		if ds, err = e.device(ev.Device); err != nil {
			return err
		}
	}
	switch ev.Kind {
	case trace.KindAlloc:
		e.requests++
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
		e.res.Fidelity.Allocs++
		if blk.Addr == ev.Addr {
			e.res.Fidelity.AllocsAtRecordedAddress++
		} else {
			e.misplaced(ds, ev, idx, blk)
		}
		e.updateStats(ds)
	case trace.KindFreeRequested:
		e.requests++
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
		ds.policy.FreeRequested(l.block())
	case trace.KindFreeCompleted:
		e.requests++
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
		ds.fc = append(ds.fc, l.block())
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
		e.requests++
		e.ev = *ev
		e.dispatch(ds)
		ds.policy.EmptyCache()
		e.endRequest(ds)
		e.updateStats(ds)
	case trace.KindOOM:
		e.requests++
		e.ev = *ev
		e.dispatch(ds)
		blk, err := ds.policy.Malloc(ev.SizeBytes, ev.Stream)
		e.endRequest(ds)
		if err == nil {
			ds.policy.FreeRequested(blk)
			ds.policy.FreeCompleted(blk)
		} else if !errors.Is(err, ErrOOM) {
			return fmt.Errorf("event %d: %w", idx, err)
		} else {
			e.oom(ds, *ev, idx)
		}
		e.updateStats(ds)
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

// inject carries out the actions Config asks for.
func (e *engine) inject(ds *devState) {
	if n := e.cfg.EmptyCacheEvery; n > 0 && e.requests >= n {
		e.requests = 0
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

func (e *engine) updateStats(ds *devState) {
	var st uint64
	for _, d := range e.devs {
		if d.strand != nil {
			st += d.strand.StrandedBytes()
		} else {
			st += d.policy.Stats().StrandedBytes
		}
	}
	e.stranded = st
	if st > e.res.Fragmentation.MaxStrandedBytes {
		e.res.Fragmentation.MaxStrandedBytes = st
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

// measure updates the metrics after event idx.
func (e *engine) measure(ev *trace.Event, idx int64) {
	r := &e.res
	if e.reserved > e.peakReserved {
		e.newPeak(idx)
	}
	if e.active > r.PeakActiveBytes {
		r.PeakActiveBytes = e.active
	}
	if e.allocated > r.PeakAllocatedBytes {
		r.PeakAllocatedBytes = e.allocated
	}
	if e.requested > r.PeakRequestedBytes {
		r.PeakRequestedBytes = e.requested
	}
	e.measureTime(ev.TimeNS)
	if e.cfg.Observer != nil {
		s := &e.sample
		s.Index = idx
		s.TimeNS = ev.TimeNS
		s.Event = *ev
		s.ReservedBytes = e.reserved
		s.ActiveBytes = e.active
		s.AllocatedBytes = e.allocated
		s.RequestedBytes = e.requested
		if ds, err := e.device(ev.Device); err == nil {
			s.Policy = ds.policy
		}
		e.cfg.Observer(s)
	}
	if e.cfg.Progress != nil && e.res.Events&(1<<20-1) == 0 {
		e.cfg.Progress(e.res.Events)
	}
}

// newPeak records a new peak of reserved bytes, reached at event idx.
func (e *engine) newPeak(idx int64) {
	e.peakReserved = e.reserved
	e.res.PeakReservedBytes = e.reserved
	e.res.Fragmentation.PeakIndex = idx
	e.atPeak()
}

// stretchPct returns Σ pct(active_i, reserved) over a stretch of constant
// reserved bytes, from the stretch's Σ weight_i and Σ active_i×weight_i.
func stretchPct(reserved uint64, weight, activeSum float64) float64 {
	if reserved == 0 {
		return 0
	}
	// Byte counts are below 2^63 (see pct).
	return 100 * (weight - activeSum/float64(int64(reserved)))
}

// flushTime closes the open time stretch.
func (e *engine) flushTime() {
	e.twSumTime += stretchPct(e.tRes, float64(e.tW), e.tA)
	e.twTime += e.tW
	e.tW, e.tA = 0, 0
}

// flushCount closes the open count stretch.
func (e *engine) flushCount() {
	e.twSumCount += stretchPct(e.cRes, float64(e.cN), e.cA)
	e.twCount += e.cN
	e.cN, e.cA = 0, 0
}

func (e *engine) atPeak() {
	var largest, stranded uint64
	for _, d := range e.devs {
		st := d.policy.Stats()
		if st.LargestFreeBytes > largest {
			largest = st.LargestFreeBytes
		}
		stranded += st.StrandedBytes
	}
	e.atPeakActive = e.active
	fr := &e.res.Fragmentation
	freeCached := e.reserved - e.active
	if freeCached > 0 {
		fr.ExternalPct = 100 * (1 - float64(largest)/float64(freeCached))
		if fr.ExternalPct < 0 {
			fr.ExternalPct = 0
		}
	} else {
		fr.ExternalPct = 0
	}
	fr.InternalBytes = e.allocated - min(e.allocated, e.requested)
	fr.StrandedBytes = stranded
}
