package report

import (
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// servedRequest is the request a live block serves.
type servedRequest struct {
	requested uint64
	stream    trace.StreamID
	stack     trace.StackID
}

// devCall is one device call a policy made (cudaMalloc, cudaFree, map,
// unmap); its device is that of the event being replayed.
type devCall struct {
	kind trace.Kind // KindSegmentAlloc, KindSegmentFree, KindSegmentMap, KindSegmentUnmap
	addr uint64
	size uint64
	strm trace.StreamID
	p    *probe // the policy that made it
}

// probe wraps a policy to learn the request behind every block it hands
// out, and tells hooks of its calls, so that its segments can be drawn and
// its replay written in other formats. Blocks are keyed by the address the
// policy gave them.
type probe struct {
	driver.Policy
	dev    trace.DeviceID // the device it serves, known from the first event observed
	devSet bool
	final  []trace.Segment // its segments as the replay ended, with hooks.keepFinal
	// finalPools are the pools of final's segments (PoolSegments').
	finalPools []uint64
	origins    map[uint64]servedRequest
	lastAddr   uint64
	lastOK     bool
	hooks      *hooks
}

// hooks receive the calls of every probed policy of a replay, in order.
// The probe still knows the block's request when freeReq and freeDone run.
type hooks struct {
	malloc   func(p *probe, b driver.Block, size uint64, s trace.StreamID)
	oom      func(p *probe, size uint64, s trace.StreamID)
	freeReq  func(p *probe, b driver.Block)
	freeDone func(p *probe, b driver.Block)
	device   func(c devCall)
	// keepFinal keeps the segments of each policy as the replay ends.
	keepFinal bool
}

func (p *probe) Malloc(n uint64, s trace.StreamID) (driver.Block, error) {
	b, err := p.Policy.Malloc(n, s)
	p.lastOK = err == nil
	if err == nil {
		p.lastAddr = b.Addr
		p.origins[b.Addr] = servedRequest{requested: n, stream: s, stack: trace.NoStack}
		if p.hooks != nil && p.hooks.malloc != nil {
			p.hooks.malloc(p, b, n, s)
		}
	} else if p.hooks != nil && p.hooks.oom != nil {
		p.hooks.oom(p, n, s)
	}
	return b, err
}

func (p *probe) FreeRequested(b driver.Block) {
	p.Policy.FreeRequested(b)
	if p.hooks != nil && p.hooks.freeReq != nil {
		p.hooks.freeReq(p, b)
	}
}

func (p *probe) FreeCompleted(b driver.Block) {
	p.Policy.FreeCompleted(b)
	if p.hooks != nil && p.hooks.freeDone != nil {
		p.hooks.freeDone(p, b)
	}
	delete(p.origins, b.Addr)
}

// Release keeps the policy's final segments when asked to, then passes
// the release on: the engine calls it once the replay is over.
func (p *probe) Release() {
	if p.hooks != nil && p.hooks.keepFinal {
		p.final, p.finalPools = p.final[:0], p.finalPools[:0]
		p.PoolSegments(func(seg trace.Segment, pool uint64) bool {
			seg.Blocks = append([]trace.Block(nil), seg.Blocks...)
			p.final = append(p.final, seg)
			p.finalPools = append(p.finalPools, pool)
			return true
		})
	}
	if r, ok := p.Policy.(driver.Releaser); ok {
		r.Release()
	}
}

// observed notes the device of the event being observed.
func (p *probe) observed(dev trace.DeviceID) {
	if !p.devSet {
		p.dev, p.devSet = dev, true
	}
}

// Segments lists the wrapped policy's segments; nothing when it cannot.
func (p *probe) Segments(fn func(trace.Segment) bool) {
	if in, ok := p.Policy.(driver.Inspector); ok {
		in.Segments(fn)
	}
}

// PoolSegments lists the wrapped policy's segments with their pools; with
// the default pool's ID, 0, for a policy that keeps no private pools.
func (p *probe) PoolSegments(fn func(seg trace.Segment, pool uint64) bool) {
	if in, ok := p.Policy.(analysis.PoolInspector); ok {
		in.PoolSegments(fn)
		return
	}
	p.Segments(func(seg trace.Segment) bool { return fn(seg, 0) })
}

// BeginPool, EndPool and ReleasePool pass the trace's pool events on to
// the wrapped policy when it keeps private pools (driver.Pooler), as the
// engine does: a probed replay then serves the requests as a plain one.
func (p *probe) BeginPool(id uint64, stream trace.StreamID) error {
	if pp, ok := p.Policy.(driver.Pooler); ok {
		return pp.BeginPool(id, stream)
	}
	return nil
}

func (p *probe) EndPool(id uint64, stream trace.StreamID) {
	if pp, ok := p.Policy.(driver.Pooler); ok {
		pp.EndPool(id, stream)
	}
}

func (p *probe) ReleasePool(id uint64) {
	if pp, ok := p.Policy.(driver.Pooler); ok {
		pp.ReleasePool(id)
	}
}

// inspects reports whether the wrapped policy can list its segments.
func (p *probe) inspects() bool {
	_, ok := p.Policy.(driver.Inspector)
	return ok
}

// noteAlloc gives the block the last Malloc handed out the stack of its
// alloc event (called by the observer, after the event).
func (p *probe) noteAlloc(ev *trace.Event) {
	if !p.lastOK {
		return
	}
	p.lastOK = false
	if o, ok := p.origins[p.lastAddr]; ok {
		o.stack = ev.Stack
		p.origins[p.lastAddr] = o
	}
}

// The wrappers keep the optional interfaces of the wrapped policy that
// change a replay's course: seeding from an initial state, and the claim
// to reproduce the recorded allocator (which turns fidelity checks on).
type probeSeeder struct{ *probe }

func (p probeSeeder) Seed(segs []trace.Segment) error {
	for _, s := range segs {
		for _, b := range s.Blocks {
			if b.State != trace.BlockInactive {
				p.origins[b.Addr] = servedRequest{requested: b.RequestedBytes, stream: s.Stream, stack: trace.NoStack}
			}
		}
	}
	return p.Policy.(driver.Seeder).Seed(segs)
}

type probeReproducer struct{ *probe }

func (p probeReproducer) Reproduces(h *trace.Header) bool {
	return p.Policy.(driver.Reproducer).Reproduces(h)
}

type probeBoth struct{ *probe }

func (p probeBoth) Seed(segs []trace.Segment) error { return probeSeeder(p).Seed(segs) }
func (p probeBoth) Reproduces(h *trace.Header) bool { return probeReproducer(p).Reproduces(h) }

// probeFactory wraps f so that every policy it builds is probed; onNew
// gets each probe. With hooks.device set, the policies' device calls are
// reported too.
func probeFactory(f driver.Factory, hk *hooks, onNew func(*probe)) driver.Factory {
	return func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
		var pd *probeDevice
		if hk != nil && hk.device != nil {
			pd = &probeDevice{Device: dev, report: hk.device}
			dev = pd
		}
		pol, err := f(dev, h)
		if err != nil {
			return nil, err
		}
		p := &probe{Policy: pol, origins: make(map[uint64]servedRequest, 1024), hooks: hk}
		if pd != nil {
			pd.p = p
		}
		onNew(p)
		_, seeds := pol.(driver.Seeder)
		_, repro := pol.(driver.Reproducer)
		switch {
		case seeds && repro:
			return probeBoth{p}, nil
		case seeds:
			return probeSeeder{p}, nil
		case repro:
			return probeReproducer{p}, nil
		}
		return p, nil
	}
}

// unwrapProbe returns the probe behind a policy built by probeFactory.
func unwrapProbe(p driver.Policy) *probe {
	switch t := p.(type) {
	case *probe:
		return t
	case probeSeeder:
		return t.probe
	case probeReproducer:
		return t.probe
	case probeBoth:
		return t.probe
	}
	return nil
}

// probeDevice reports the device calls that succeed, with the probe of
// the policy that made them.
type probeDevice struct {
	driver.Device
	report func(devCall)
	p      *probe
}

func (d *probeDevice) Malloc(n uint64, s trace.StreamID) (uint64, bool) {
	addr, ok := d.Device.Malloc(n, s)
	if ok {
		d.report(devCall{kind: trace.KindSegmentAlloc, addr: addr, size: n, strm: s, p: d.p})
	}
	return addr, ok
}

func (d *probeDevice) Free(addr, n uint64) {
	d.Device.Free(addr, n)
	d.report(devCall{kind: trace.KindSegmentFree, addr: addr, size: n, p: d.p})
}

func (d *probeDevice) Map(addr, n uint64) bool {
	ok := d.Device.Map(addr, n)
	if ok {
		d.report(devCall{kind: trace.KindSegmentMap, addr: addr, size: n, p: d.p})
	}
	return ok
}

func (d *probeDevice) Unmap(addr, n uint64) {
	d.Device.Unmap(addr, n)
	d.report(devCall{kind: trace.KindSegmentUnmap, addr: addr, size: n, p: d.p})
}

// SetFraction passes a policy's memory fraction on to the engine's device.
func (d *probeDevice) SetFraction(f float64) {
	if fs, ok := d.Device.(driver.FractionSetter); ok {
		fs.SetFraction(f)
	}
}
