package caching

import (
	"errors"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// state is a copy of everything a malloc can change, for trying a reading.
type state struct {
	blocks        []block
	spare         []int32
	pools         []blockPool
	private       []privatePool
	routes        []route
	freeable      freeableSet
	segs          []expSeg
	reserved      uint64
	stranded      uint64
	strandedCount int64
	retries       int64
	ooms          int64
	completions   []int32
}

func clonePool(p *blockPool) blockPool {
	c := blockPool{gcCalls: p.gcCalls, streams: make([]*streamPool, len(p.streams))}
	for i, sp := range p.streams {
		n := &streamPool{stream: sp.stream}
		n.free = sp.free.clone()
		n.unmapped.addrs = append([]uint64(nil), sp.unmapped.addrs...)
		n.unmapped.ids = append([]int32(nil), sp.unmapped.ids...)
		c.streams[i] = n
	}
	return c
}

func clonePools(ps []blockPool) []blockPool {
	c := make([]blockPool, len(ps))
	for i := range ps {
		c[i] = clonePool(&ps[i])
	}
	return c
}

func (a *Allocator) save() *state {
	return &state{
		blocks: append([]block(nil), a.blocks...), spare: append([]int32(nil), a.spare...),
		pools:    clonePools(a.pools),
		private:  append([]privatePool(nil), a.private...),
		routes:   append([]route(nil), a.routes...),
		freeable: a.freeable.clone(),
		segs:     append([]expSeg(nil), a.segs...),
		reserved: a.reserved, stranded: a.stranded, strandedCount: a.strandedCount,
		retries: a.retries, ooms: a.ooms, completions: append([]int32(nil), a.completions...),
	}
}

// restore puts back a saved state; s must not be used afterwards.
func (a *Allocator) restore(s *state) {
	a.blocks, a.spare, a.pools, a.segs = s.blocks, s.spare, s.pools, s.segs
	a.private, a.routes, a.freeable = s.private, s.routes, s.freeable
	a.reserved, a.stranded, a.strandedCount = s.reserved, s.stranded, s.strandedCount
	a.retries, a.ooms, a.completions = s.retries, s.ooms, s.completions
}

// trialDevice answers a trial malloc from the recorded device events: a
// call succeeds only as the next recorded event.
type trialDevice struct {
	real   driver.Device
	rec    []trace.Event
	pos    int
	failed bool
}

func (d *trialDevice) next(kind trace.Kind, addr, size uint64, useAddr bool) (trace.Event, bool) {
	if d.failed || d.pos >= len(d.rec) {
		d.failed = true
		return trace.Event{}, false
	}
	e := d.rec[d.pos]
	if e.Kind != kind || e.SizeBytes != size || (useAddr && e.Addr != addr) {
		d.failed = true
		return trace.Event{}, false
	}
	d.pos++
	return e, true
}

func (d *trialDevice) Malloc(size uint64, _ trace.StreamID) (uint64, bool) {
	e, ok := d.next(trace.KindSegmentAlloc, 0, size, false)
	return e.Addr, ok
}
func (d *trialDevice) Free(addr, size uint64) { d.next(trace.KindSegmentFree, addr, size, true) }
func (d *trialDevice) Reserve(size uint64, _ trace.StreamID) uint64 {
	for _, e := range d.rec[d.pos:] {
		if e.Kind == trace.KindSegmentMap {
			return e.Addr
		}
	}
	d.failed = true
	return 0
}
func (d *trialDevice) Map(addr, size uint64) bool {
	_, ok := d.next(trace.KindSegmentMap, addr, size, true)
	return ok
}
func (d *trialDevice) Unmap(addr, size uint64) { d.next(trace.KindSegmentUnmap, addr, size, true) }
func (d *trialDevice) Cap() (uint64, bool)     { return d.real.Cap() }
func (d *trialDevice) TotalBytes() uint64      { return d.real.TotalBytes() }
func (d *trialDevice) Recorded() []trace.Event {
	return d.rec[d.pos:]
}

// chooseReading returns how many held-back completions took effect before
// the search of the next malloc. Completions are held
// back only when the recorded events of the malloc release memory; then a
// completion may have come from the malloc's own release
// (synchronize_and_free_events), so that its block was still pending when
// the malloc searched the free lists. The trace does not say which: each
// reading, from "all before the search" down to "none", is tried on a copy
// of the state against the recorded device events, and the first that
// reproduces them wins.
func (a *Allocator) chooseReading(size uint64, stream trace.StreamID) int {
	n := len(a.completions)
	if n == 0 {
		return 0
	}
	rec := a.dev.Recorded()
	if len(rec) == 0 {
		return n
	}
	real := a.dev
	defer func() { a.dev = real }()
	for k := n; k >= 0; k-- {
		s := a.save()
		td := &trialDevice{real: real, rec: rec}
		a.dev = td
		// The device calls decide, not the outcome: an OOM may be what
		// the recorded malloc did too. Any other error fails the trial.
		_, err := a.malloc(size, stream, k)
		var oom *driver.OOMError
		// A later completion can only have come from the release, which
		// applies every one held back.
		ok := (err == nil || errors.As(err, &oom)) && !td.failed && td.pos == len(rec) && (k == n || len(a.completions) == 0)
		a.restore(s)
		if ok {
			return k
		}
	}
	return n
}
