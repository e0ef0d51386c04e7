package analysis

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// PoolInspector is implemented by policies that keep private pools (CUDA
// graph capture, torch.cuda.MemPool) and can say which pool holds each
// segment: pool is the trace's pool ID (trace.PoolID), 0 the default pool.
type PoolInspector interface {
	PoolSegments(fn func(seg trace.Segment, pool uint64) bool)
}

// maxPoolWhatIfs bounds the "without pool X" replays analyze runs.
const maxPoolWhatIfs = 8

// PoolUsage is one pool's memory: at the run's peak reserved, and its own
// peak. A trace without private pools has none.
type PoolUsage struct {
	ID    uint64 `json:"id"` // trace.PoolID's; 0: the default pool
	Label string `json:"label"`
	Tag   string `json:"tag"` // the short label, PoolTag
	// Kind is "default", "graph" (routed by capture stream) or "mempool"
	// (routed by thread).
	Kind   string         `json:"kind"`
	Stream trace.StreamID `json:"stream,omitempty"` // the capture stream of its first capture
	// ReservedAtPeakBytes, ActiveAtPeakBytes and StrandedAtPeakBytes are the
	// pool's segments, live blocks and free bytes of split segments at the
	// run's peak reserved.
	ReservedAtPeakBytes uint64 `json:"reserved_at_peak_bytes"`
	ActiveAtPeakBytes   uint64 `json:"active_at_peak_bytes"`
	StrandedAtPeakBytes uint64 `json:"stranded_at_peak_bytes"`
	// PeakReservedBytes is the most the pool itself held at once.
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	// WithoutPeakReservedBytes is an estimate, for a private pool: the
	// run's peak reserved had the pool's captures not happened (the
	// requests routed to it, their frees and the pool's events left out).
	// The dropped graph's replays would then run eagerly and allocate as
	// eager passes do, which the trace cannot show. 0: not replayed.
	WithoutPeakReservedBytes uint64 `json:"without_peak_reserved_bytes,omitempty"`
	// SavedBytes is the run's peak reserved less WithoutPeakReservedBytes.
	SavedBytes   int64  `json:"saved_bytes,omitempty"`
	WithoutError string `json:"without_error,omitempty"`
}

// poolLabel names a pool for tables.
func poolLabel(id uint64, stream trace.StreamID) (label, kind string) {
	tag := PoolTag(id, stream)
	switch {
	case id == 0:
		return "default pool", "default"
	case stream == 0:
		return tag, "mempool"
	}
	return fmt.Sprintf("%s pool, stream %#x", tag, uint64(stream)), "graph"
}

// PoolLabel names pool id (trace.PoolID's, 0 the default pool), first
// begun on stream (0: a MemPool routed by thread), as the tables do:
// "default pool", "graph (1,0) pool, stream 0x7", "MemPool (0,1)".
func PoolLabel(id uint64, stream trace.StreamID) string {
	l, _ := poolLabel(id, stream)
	return l
}

// PoolTag is PoolLabel's short form: "default", "graph (1,0)",
// "MemPool (0,1)"; the pair is PyTorch's MempoolId_t.
func PoolTag(id uint64, stream trace.StreamID) string {
	if id == 0 {
		return "default"
	}
	pair := fmt.Sprintf("(%d,0)", id)
	if id&(1<<63) != 0 {
		pair = fmt.Sprintf("(0,%d)", id&^(1<<63))
	}
	if stream == 0 {
		return "MemPool " + pair
	}
	return "graph " + pair
}

// poolAt is one pool's part of a walk of the segments.
type poolAt struct {
	reserved, active, stranded uint64
}

// poolTracker follows the private pools of the explained replay: the
// streams they capture on, and each pool's own peak reserved. It walks
// the segments only once a pool has begun, and then only when the
// reserved bytes change, so a trace without pools costs nothing.
type poolTracker struct {
	streams  map[uint64]trace.StreamID
	order    []uint64 // pools in order of first begin
	peaks    map[uint64]uint64
	reserved uint64
	sum      map[uint64]uint64
}

func newPoolTracker() *poolTracker {
	return &poolTracker{streams: map[uint64]trace.StreamID{}, peaks: map[uint64]uint64{}, sum: map[uint64]uint64{}}
}

// active reports whether a private pool has begun.
func (p *poolTracker) active() bool { return len(p.order) > 0 }

func (p *poolTracker) observe(s *replay.Sample, in PoolInspector) {
	ev := &s.Event
	if ev.Kind == trace.KindPoolBegin {
		if _, ok := p.streams[ev.Aux]; !ok {
			p.streams[ev.Aux] = ev.Stream
			p.order = append(p.order, ev.Aux)
		}
	}
	if !p.active() || in == nil {
		p.peaks[0] = max(p.peaks[0], s.ReservedBytes)
		p.reserved = s.ReservedBytes
		return
	}
	if s.ReservedBytes == p.reserved {
		return
	}
	p.reserved = s.ReservedBytes
	clear(p.sum)
	in.PoolSegments(func(seg trace.Segment, pool uint64) bool {
		p.sum[pool] += seg.SizeBytes
		return true
	})
	for id, b := range p.sum {
		p.peaks[id] = max(p.peaks[id], b)
	}
}

// usage returns the pools' table from the walk at the peak: the default
// pool, then the private pools in order of first capture.
func (p *poolTracker) usage(at map[uint64]*poolAt) []PoolUsage {
	ids := append([]uint64{0}, p.order...)
	for id := range at { // a pool of the initial state, never begun
		if _, ok := p.streams[id]; !ok && id != 0 {
			ids = append(ids, id)
		}
	}
	sort.SliceStable(ids[1+len(p.order):], func(i, j int) bool { return ids[1+len(p.order)+i] < ids[1+len(p.order)+j] })
	out := make([]PoolUsage, 0, len(ids))
	for _, id := range ids {
		u := PoolUsage{ID: id, Stream: p.streams[id], PeakReservedBytes: p.peaks[id]}
		u.Label, u.Kind = poolLabel(id, u.Stream)
		u.Tag = PoolTag(id, u.Stream)
		if a := at[id]; a != nil {
			u.ReservedAtPeakBytes, u.ActiveAtPeakBytes, u.StrandedAtPeakBytes = a.reserved, a.active, a.stranded
		}
		out = append(out, u)
	}
	return out
}

// PrivateAtPeakBytes is what the private pools hold at the run's peak.
func (a *Analysis) PrivateAtPeakBytes() uint64 {
	var n uint64
	for _, p := range a.Pools {
		if p.ID != 0 {
			n += p.ReservedAtPeakBytes
		}
	}
	return n
}

// withoutPoolJobs returns, for each private pool (at most
// maxPoolWhatIfs), a replay of the trace with that pool's captures left
// out.
func withoutPoolJobs(open Opener, base *job, pools []PoolUsage) []*job {
	var jobs []*job
	for _, p := range pools {
		if p.ID == 0 || len(jobs) == maxPoolWhatIfs {
			continue
		}
		run := &Run{Label: "without " + p.Label, Policy: base.run.Policy, Conf: base.run.Conf}
		jobs = append(jobs, &job{run: run, factory: base.factory, cfg: base.cfg, noSeries: true, open: withoutPool(open, p.ID)})
	}
	return jobs
}

// withoutPool returns an opener of the trace open gives without private
// pool id: the requests routed to it (as the policy routes them: the
// newest pool_begin of the device that matches the request's stream, or
// any stream for a pool routed by thread), their frees, and the pool's
// own events.
func withoutPool(open Opener, id uint64) Opener {
	return transformTrace(open, func(src *trace.Reader, w io.Writer) error {
		type route struct {
			id     uint64
			stream trace.StreamID
		}
		type key struct {
			dev  trace.DeviceID
			addr uint64
		}
		routes := map[trace.DeviceID][]route{}
		dropped := map[key]bool{}
		routedHere := func(e *trace.Event) bool {
			rs := routes[e.Device]
			for i := len(rs) - 1; i >= 0; i-- {
				if rs[i].stream == 0 || rs[i].stream == e.Stream {
					return rs[i].id == id
				}
			}
			return false
		}
		note := fmt.Sprintf("private pool %d left out by fragsim analyze", id)
		return copyEdited(src, w, note, func(e *trace.Event) bool {
			k := key{e.Device, e.Addr}
			switch e.Kind {
			case trace.KindPoolBegin:
				routes[e.Device] = append(routes[e.Device], route{e.Aux, e.Stream})
				return e.Aux != id
			case trace.KindPoolEnd:
				rs := routes[e.Device]
				for i := len(rs) - 1; i >= 0; i-- {
					if rs[i].id == e.Aux && rs[i].stream == e.Stream {
						routes[e.Device] = append(rs[:i], rs[i+1:]...)
						break
					}
				}
				return e.Aux != id
			case trace.KindPoolRelease:
				return e.Aux != id
			case trace.KindAlloc:
				if routedHere(e) {
					dropped[k] = true
					return false
				}
			case trace.KindOOM:
				return !routedHere(e)
			case trace.KindFreeRequested:
				return !dropped[k]
			case trace.KindFreeCompleted:
				if dropped[k] {
					delete(dropped, k)
					return false
				}
			}
			return true
		})
	})
}

// applyWithout fills the pools' what-ifs from their replays.
func applyWithout(pools []PoolUsage, jobs []*job, peak uint64) {
	for _, j := range jobs {
		for i := range pools {
			if j.run.Label != "without "+pools[i].Label {
				continue
			}
			switch {
			case j.run.OK() && j.run.Result.OOMs == 0:
				pools[i].WithoutPeakReservedBytes = j.run.Result.PeakReservedBytes
				pools[i].SavedBytes = int64(peak) - int64(pools[i].WithoutPeakReservedBytes)
			case j.run.OK():
				pools[i].WithoutError = fmt.Sprintf("%d OOMs", j.run.Result.OOMs)
			default:
				pools[i].WithoutError = j.run.Error
			}
		}
	}
}

// writePools writes the "Memory by pool" table.
func (a *Analysis) writePools(w io.Writer) {
	if len(a.Pools) == 0 {
		return
	}
	fmt.Fprintf(w, "\nMemory by pool at peak reserved (event %s):\n", fmtCount(a.Result.Fragmentation.PeakIndex))
	fmt.Fprintf(w, "  %-36s %10s %10s %10s %10s  %s\n", "pool", "reserved", "active", "stranded", "own peak", "without it (estimate)")
	for _, p := range a.Pools {
		what := ""
		switch {
		case p.ID == 0:
		case p.WithoutError != "":
			what = "failed: " + truncate(p.WithoutError, 20)
		case p.WithoutPeakReservedBytes > 0:
			what = FmtBytes(p.WithoutPeakReservedBytes) + ", " + savedText(p.SavedBytes)
		}
		line := fmt.Sprintf("  %-36s %10s %10s %10s %10s  %s", truncate(trace.Printable(p.Label), 36), FmtBytes(p.ReservedAtPeakBytes),
			FmtBytes(p.ActiveAtPeakBytes), FmtBytes(p.StrandedAtPeakBytes), FmtBytes(p.PeakReservedBytes), what)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	priv := a.PrivateAtPeakBytes()
	fmt.Fprintln(w, wrap(fmt.Sprintf("The private pools (CUDA graphs, MemPools) hold %s of the %s reserved at the peak (%.1f%%).",
		FmtBytes(priv), FmtBytes(a.Result.PeakReservedBytes), pctOf(priv, a.Result.PeakReservedBytes)), TableWidth))
	fmt.Fprintln(w, wrap("Without it: the run's peak reserved had the pool's captures not happened (replayed with the "+
		"requests routed to the pool left out), and what capturing without that graph would save. An estimate: "+
		"the dropped graph's replays would then run eagerly and allocate as eager passes do.", TableWidth))
}

func pctOf(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// savedText says what leaving a pool out saves: "saves 20.0 MiB", "adds 2.0 MiB".
func savedText(d int64) string {
	if d < 0 {
		return "adds " + FmtBytes(uint64(-d))
	}
	return "saves " + FmtBytes(uint64(d))
}

// inactiveBlocks counts a segment's free blocks.
func inactiveBlocks(seg trace.Segment) int64 {
	var n int64
	for _, b := range seg.Blocks {
		if b.State == trace.BlockInactive {
			n++
		}
	}
	return n
}
