package pytorch

import (
	"sort"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// Private pools in a snapshot. PyTorch's trace entries carry a stream but
// no pool: the pools of CUDA graph capture and torch.cuda.MemPool are
// inferred here from what the snapshot does show.
//   - The final segments' segment_pool_id names the pool of every segment
//     alive at the end (FinalSegment).
//   - A capture takes a fresh pool, whose segments are made during the
//     capture and serve only its stream's requests there: on a capture
//     stream, a run of allocations landing only in segments made within
//     the run, and used by no allocation outside it, is a capture. This
//     finds the pools of segments freed before the end (a graph released
//     and captured again), which the final segments cannot name.
//   - A pool's routing begins before its first allocation and ends after
//     its last one, for each maximal run of its allocations on its stream
//     (every stream for a pool whose allocations are on the default
//     stream: a MemPool routed by thread; no capture runs there).
//   - A pool whose segments are all freed before the end was released
//     just before the release that freed its first segment.
//   - torch.cuda.graph calls empty_cache before each capture; where that
//     freed nothing, the snapshot shows no trace of it, and one is added.

// FinalSegment is a segment of the snapshot's final state and its pool.
type FinalSegment struct {
	Device          trace.DeviceID
	Addr, SizeBytes uint64
	// Pool is trace.PoolID of the segment's segment_pool_id; DefaultPool
	// for (0, 0).
	Pool uint64
}

// DefaultPool is trace.PoolID(0, 0), the default pool's ID.
var DefaultPool = trace.PoolID(0, 0)

// poolSeg is one segment (or mapped range of an expandable segment) seen
// in the events.
type poolSeg struct {
	dev        trace.DeviceID
	addr, size uint64
	stream     trace.StreamID
	freed      int    // index of the event that freed it, or -1
	pool       uint64 // 0: not known yet
	isDefault  bool   // known to be in the default pool
}

// poolInfer holds the state of one InferPools.
type poolInfer struct {
	evs      []trace.Event
	segs     []poolSeg
	allocSeg []int32 // by event index: the segment an alloc landed in, or -1
}

// insert is an event to add before evs[pos]; rank orders the inserts at
// one position.
type insert struct {
	pos, rank int
	ev        trace.Event
}

// InferPools returns evs with the pool events of the private pools they
// used (see above), and the number of pools found. final holds the
// snapshot's final segments; segments it does not name are inferred from
// the events alone. evs is not changed.
func InferPools(evs []trace.Event, final []FinalSegment) ([]trace.Event, int) {
	x := &poolInfer{evs: evs, allocSeg: make([]int32, len(evs))}
	x.track()
	x.named(final)
	x.captures()
	pools := map[uint64]bool{}
	for i := range x.segs {
		if p := x.segs[i].pool; p != 0 {
			pools[p] = true
		}
	}
	if len(pools) == 0 {
		return evs, 0
	}
	ids := make([]uint64, 0, len(pools))
	for p := range pools {
		ids = append(ids, p)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var ins []insert
	for _, p := range ids {
		ins = x.routes(p, ins)
		ins = x.release(p, ins)
	}
	return merge(evs, ins), len(ids)
}

// track finds the segment each allocation landed in.
func (x *poolInfer) track() {
	live := map[trace.DeviceID][]int32{} // by address
	find := func(l []int32, addr uint64) int {
		return sort.Search(len(l), func(i int) bool { return x.segs[l[i]].addr > addr }) - 1
	}
	for i := range x.evs {
		e := &x.evs[i]
		x.allocSeg[i] = -1
		switch e.Kind {
		case trace.KindSegmentAlloc, trace.KindSegmentMap:
			l := live[e.Device]
			j := find(l, e.Addr) + 1
			x.segs = append(x.segs, poolSeg{dev: e.Device, addr: e.Addr, size: e.SizeBytes, stream: e.Stream, freed: -1})
			l = append(l, 0)
			copy(l[j+1:], l[j:])
			l[j] = int32(len(x.segs) - 1)
			live[e.Device] = l
		case trace.KindSegmentFree, trace.KindSegmentUnmap:
			// Every range inside the freed one goes.
			l := live[e.Device]
			j := find(l, e.Addr)
			if j < 0 || x.segs[l[j]].addr < e.Addr {
				j++
			}
			k := j
			for k < len(l) && x.segs[l[k]].addr+x.segs[l[k]].size <= e.Addr+e.SizeBytes {
				x.segs[l[k]].freed = i
				k++
			}
			live[e.Device] = append(l[:j], l[k:]...)
		case trace.KindAlloc:
			l := live[e.Device]
			if j := find(l, e.Addr); j >= 0 {
				if s := &x.segs[l[j]]; e.Addr < s.addr+s.size {
					x.allocSeg[i] = l[j]
				}
			}
		}
	}
}

// named gives the segments alive at the end the pools final names.
func (x *poolInfer) named(final []FinalSegment) {
	for _, f := range final {
		for i := range x.segs {
			s := &x.segs[i]
			if s.freed >= 0 || s.dev != f.Device || s.addr < f.Addr || s.addr+s.size > f.Addr+f.SizeBytes {
				continue
			}
			if f.Pool == DefaultPool {
				s.isDefault = true
			} else {
				s.pool = f.Pool
			}
		}
	}
}

// captures finds the captures of segments no final segment names: on
// each non-default stream, the shortest runs of allocations (more than
// one) that land only in segments made within the run and used nowhere
// else. Each takes the pool a segment of it is known by, else the next
// unused graph pool ID, in capture order.
func (x *poolInfer) captures() {
	type key struct {
		dev    trace.DeviceID
		stream trace.StreamID
	}
	byStream := map[key][]int{} // allocation event indices
	var keys []key
	for i := range x.evs {
		if x.evs[i].Kind != trace.KindAlloc || x.evs[i].Stream == trace.DefaultStream || x.allocSeg[i] < 0 {
			continue
		}
		k := key{x.evs[i].Device, x.evs[i].Stream}
		if _, ok := byStream[k]; !ok {
			keys = append(keys, k)
		}
		byStream[k] = append(byStream[k], i)
	}
	type window struct{ from, to int } // event indices, inclusive
	var wins []window
	for _, k := range keys {
		xs := byStream[k]
		first, last := map[int32]int{}, map[int32]int{}
		for n, i := range xs {
			s := x.allocSeg[i]
			if _, ok := first[s]; !ok {
				first[s] = n
			}
			last[s] = n
		}
		var found []window // by alloc position in xs
		for i := range xs {
			if first[x.allocSeg[xs[i]]] != i {
				continue
			}
			j, ok := last[x.allocSeg[xs[i]]], true
			for n := i; n <= j && ok; n++ {
				s := x.allocSeg[xs[n]]
				ok = first[s] >= i && !x.segs[s].isDefault
				j = max(j, last[s])
			}
			if ok && j > i {
				found = append(found, window{i, j})
			}
		}
		// The shortest: drop a window that holds another.
		for a, w := range found {
			inner := false
			for b, v := range found {
				if a != b && v.from >= w.from && v.to <= w.to {
					inner = true
					break
				}
			}
			if !inner {
				wins = append(wins, window{xs[w.from], xs[w.to]})
			}
		}
	}
	sort.Slice(wins, func(i, j int) bool { return wins[i].from < wins[j].from })
	used := map[uint64]bool{}
	for i := range x.segs {
		if x.segs[i].pool != 0 {
			used[x.segs[i].pool] = true
		}
	}
	next := uint64(1)
	for _, w := range wins {
		var pool uint64
		for i := w.from; i <= w.to; i++ {
			if s := x.allocSeg[i]; s >= 0 && x.evs[i].Stream == x.evs[w.from].Stream && x.segs[s].pool != 0 {
				pool = x.segs[s].pool
				break
			}
		}
		if pool == 0 {
			for used[next] {
				next++
			}
			pool = next
			used[pool] = true
		}
		for i := w.from; i <= w.to; i++ {
			if s := x.allocSeg[i]; s >= 0 && x.evs[i].Stream == x.evs[w.from].Stream {
				x.segs[s].pool = pool
			}
		}
	}
}

// routes adds pool p's pool_begin and pool_end around each maximal run of
// its allocations, and the empty_cache torch.cuda.graph calls before a
// capture where the events show none.
func (x *poolInfer) routes(p uint64, ins []insert) []insert {
	dev, stream, seen := trace.DeviceID(0), trace.DefaultStream, false
	for i := range x.evs {
		if s := x.allocSeg[i]; s >= 0 && x.segs[s].pool == p {
			if !seen {
				dev, stream, seen = x.evs[i].Device, x.evs[i].Stream, true
			} else if x.evs[i].Stream != stream {
				stream = trace.DefaultStream
			}
		}
	}
	in := func(i int) bool {
		e := &x.evs[i]
		return e.Kind == trace.KindAlloc && e.Device == dev && (stream == trace.DefaultStream || e.Stream == stream)
	}
	from := -1
	for i := 0; i <= len(x.evs); i++ {
		if i < len(x.evs) && !in(i) {
			continue
		}
		mine := i < len(x.evs) && x.allocSeg[i] >= 0 && x.segs[x.allocSeg[i]].pool == p
		switch {
		case mine && from < 0:
			from = i
		case !mine && from >= 0:
			ins = x.route(p, dev, stream, from, x.lastOf(p, from, i), ins)
			from = -1
		}
	}
	return ins
}

// lastOf returns the last allocation of pool p before index to.
func (x *poolInfer) lastOf(p uint64, from, to int) int {
	last := from
	for i := from; i < to; i++ {
		if s := x.allocSeg[i]; s >= 0 && x.segs[s].pool == p {
			last = i
		}
	}
	return last
}

// route adds one routing of pool p, from the allocation at index from to
// the one at last.
func (x *poolInfer) route(p uint64, dev trace.DeviceID, stream trace.StreamID, from, last int, ins []insert) []insert {
	// Begin before the device events of the first allocation.
	pos, t := x.beforeDeviceRun(from, dev)
	if stream != trace.DefaultStream && !x.emptiedBefore(pos, dev, stream) {
		ins = append(ins, insert{pos, 2, trace.Event{Kind: trace.KindEmptyCache, Device: dev, TimeNS: t}})
	}
	ins = append(ins, insert{pos, 3, trace.Event{Kind: trace.KindPoolBegin, Device: dev, Stream: stream, TimeNS: t, Aux: p}})
	ins = append(ins, insert{last + 1, 0, trace.Event{Kind: trace.KindPoolEnd, Device: dev, Stream: stream, TimeNS: x.evs[last].TimeNS, Aux: p}})
	return ins
}

// beforeDeviceRun returns the index at which the run of device dev's
// device events just before index i starts (i when there is none), and
// the time of the event before that index (of the one at it, for the
// first event): where an event inserted before the run goes, and its time.
func (x *poolInfer) beforeDeviceRun(i int, dev trace.DeviceID) (int, int64) {
	for i > 0 && x.evs[i-1].Kind.IsDevice() && x.evs[i-1].Device == dev {
		i--
	}
	t := x.evs[i].TimeNS
	if i > 0 {
		t = x.evs[i-1].TimeNS
	}
	return i, t
}

// emptiedBefore reports whether an empty_cache comes just before index
// pos: only frees, device events and the allocations of the capture's
// generator prologue (its seed and offset, made on the capture stream
// before the pool begins) lie between.
func (x *poolInfer) emptiedBefore(pos int, dev trace.DeviceID, stream trace.StreamID) bool {
	prologue := 0
	for i := pos - 1; i >= 0; i-- {
		e := &x.evs[i]
		if e.Device != dev {
			continue
		}
		switch e.Kind {
		case trace.KindEmptyCache:
			return true
		case trace.KindAlloc:
			if prologue++; e.Stream != stream || prologue > 2 {
				return false
			}
		case trace.KindFreeRequested, trace.KindFreeCompleted:
		default:
			if !e.Kind.IsDevice() {
				return false
			}
		}
	}
	return false
}

// release adds pool p's pool_release when all its segments are freed
// before the end: just before the run of device events that freed the
// first of them.
func (x *poolInfer) release(p uint64, ins []insert) []insert {
	first := -1
	for i := range x.segs {
		s := &x.segs[i]
		if s.pool != p {
			continue
		}
		if s.freed < 0 {
			return ins
		}
		if first < 0 || s.freed < first {
			first = s.freed
		}
	}
	if first < 0 {
		return ins
	}
	dev := x.evs[first].Device
	pos, t := x.beforeDeviceRun(first, dev)
	return append(ins, insert{pos, 1, trace.Event{Kind: trace.KindPoolRelease, Device: dev, TimeNS: t, Aux: p}})
}

// merge returns evs with each insert placed before evs[pos].
func merge(evs []trace.Event, ins []insert) []trace.Event {
	sort.SliceStable(ins, func(i, j int) bool {
		if ins[i].pos != ins[j].pos {
			return ins[i].pos < ins[j].pos
		}
		return ins[i].rank < ins[j].rank
	})
	out := make([]trace.Event, 0, len(evs)+len(ins))
	k := 0
	for i := range evs {
		for k < len(ins) && ins[k].pos == i {
			out = append(out, ins[k].ev)
			k++
		}
		out = append(out, evs[i])
	}
	for ; k < len(ins); k++ {
		out = append(out, ins[k].ev)
	}
	return out
}

// docPoolID reads a segment's segment_pool_id, a pair (a, b), as
// trace.PoolID; 0 when it is not a pair of numbers.
func docPoolID(doc *pickle.Doc, v pickle.Value) uint64 {
	var ab [2]uint64
	n := 0
	doc.Items(v, func(i int, item pickle.Value) bool {
		if i < 2 {
			ab[i] = docUint(doc, item)
			n++
		}
		return true
	})
	if n != 2 {
		return 0
	}
	return trace.PoolID(ab[0], ab[1])
}

// finalPools lists the final segments whose pool the snapshot names.
func finalPools(states map[int]*devState) []FinalSegment {
	var out []FinalSegment
	for dev, st := range states {
		for _, sg := range st.segs {
			if sg.poolID != 0 {
				out = append(out, FinalSegment{Device: trace.DeviceID(dev), Addr: sg.addr, SizeBytes: sg.size, Pool: sg.poolID})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].Addr < out[j].Addr
	})
	return out
}

// poolEvents is a sink that keeps a snapshot's events, for InferPools to
// add the pool events before they go to the sink it wraps. Texts and
// stacks go to that sink at once.
type poolEvents struct {
	trace.Sink
	evs []trace.Event
}

func (p *poolEvents) WriteEvent(e trace.Event) error {
	p.evs = append(p.evs, e)
	return nil
}

// poolSink returns the sink Emit writes to when the snapshot's final
// segments name a private pool; ok is false otherwise (and for the
// sink it returns itself, to emit to).
func (s *Snapshot) poolSink(sink trace.Sink) (*poolEvents, bool) {
	if _, inner := sink.(*poolEvents); inner {
		return nil, false
	}
	for _, f := range s.pools {
		if f.Pool != DefaultPool {
			return &poolEvents{Sink: sink}, true
		}
	}
	return nil, false
}

// emit writes the snapshot's events with their pools to the wrapped sink.
func (p *poolEvents) emit(s *Snapshot, progress func(string, int64, int64)) error {
	if err := s.emit(p, progress, false); err != nil {
		return err
	}
	evs, _ := InferPools(p.evs, s.pools)
	p.evs = nil
	for _, e := range evs {
		if err := p.Sink.WriteEvent(e); err != nil {
			return err
		}
	}
	return nil
}
