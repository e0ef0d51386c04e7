package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// Block states as the segment map draws them.
const (
	stateActive     = 0 // allocated, or freed and waiting on other streams
	stateStranded   = 1 // free, in a segment that holds live blocks: empty_cache cannot return it
	stateReleasable = 2 // free, in a segment with no live block
)

// Bounds on one layout, so that a report's size does not grow with the
// trace: the largest segments are drawn, the rest summed up; a segment of
// many blocks has its neighbouring blocks of one state merged.
const (
	maxSegmentRows    = 300
	maxBlocksPerRow   = 48
	maxStackFrames    = 8
	maxLayoutsDefault = 32
)

// Layout is a policy's segment map at one moment of the replay.
type Layout struct {
	Index           int64   `json:"index"`
	TimeS           float64 `json:"t_s"`
	What            string  `json:"what,omitempty"` // "most stranded", "peak reserved", or "" for an evenly spaced moment
	ReservedBytes   uint64  `json:"reserved"`
	ActiveBytes     uint64  `json:"active"`
	StrandedBytes   uint64  `json:"stranded"`
	ReleasableBytes uint64  `json:"releasable"`
	Segments        []Row   `json:"segments"`
	// MoreSegments and MoreBytes sum up the segments left out of Segments.
	MoreSegments int    `json:"more_segments,omitempty"`
	MoreBytes    uint64 `json:"more_bytes,omitempty"`
	// Hist is the free-block histogram of every segment, in bytes.
	Hist []HistBin `json:"hist"`
}

// Row is one segment: its blocks in address order, each
// [size, state, requested bytes, stack index or -1, blocks merged].
type Row struct {
	Addr   uint64 `json:"addr"`
	Size   uint64 `json:"size"`
	Stream string `json:"stream"`
	Pool   string `json:"pool,omitempty"` // "small" or "large"
	// PoolID is the private pool (CUDA graph, MemPool) that holds the
	// segment, trace.PoolID's; 0 the default pool. PoolTag names it.
	PoolID  uint64     `json:"pool_id,omitempty"`
	PoolTag string     `json:"pool_tag,omitempty"`
	Blocks  [][5]int64 `json:"blocks"`
}

// HistBin is one log2 class of free blocks: LowBytes <= size < 2·LowBytes.
type HistBin struct {
	Log2       int    `json:"log2"`
	Stranded   uint64 `json:"stranded"`
	Releasable uint64 `json:"releasable"`
}

// layoutCapture snapshots a probed policy's segments at chosen events.
type layoutCapture struct {
	r       *trace.Reader
	targets []int64          // event indexes, ascending
	what    map[int64]string // labels of special targets
	next    int
	times   []float64 // seconds since the first event, ascending
	nextT   int
	t0      int64
	started bool
	layouts []Layout
	stacks  []string
	stackIx map[trace.StackID]int
	// poolStreams are the private pools begun so far, each with the
	// stream of its first begin.
	poolStreams map[uint64]trace.StreamID
}

func newLayoutCapture(r *trace.Reader, targets []int64, what map[int64]string) *layoutCapture {
	sort.Slice(targets, func(i, j int) bool { return targets[i] < targets[j] })
	uniq := targets[:0]
	for i, t := range targets {
		if i == 0 || t != targets[i-1] {
			uniq = append(uniq, t)
		}
	}
	return &layoutCapture{r: r, targets: uniq, what: what, stackIx: map[trace.StackID]int{}, poolStreams: map[uint64]trace.StreamID{}}
}

func (c *layoutCapture) observe(s *replay.Sample) {
	if !c.started {
		c.t0, c.started = s.TimeNS, true
	}
	p := unwrapProbe(s.Policy)
	if p == nil {
		return
	}
	switch s.Event.Kind {
	case trace.KindAlloc:
		p.noteAlloc(&s.Event)
	case trace.KindPoolBegin:
		if _, ok := c.poolStreams[s.Event.Aux]; !ok {
			c.poolStreams[s.Event.Aux] = s.Event.Stream
		}
	}
	t := float64(s.TimeNS-c.t0) / 1e9
	dueT := c.nextT < len(c.times) && t >= c.times[c.nextT]
	for c.nextT < len(c.times) && t >= c.times[c.nextT] {
		c.nextT++
	}
	if !dueT && (c.next >= len(c.targets) || s.Index < c.targets[c.next]) {
		return
	}
	what := ""
	for c.next < len(c.targets) && c.targets[c.next] <= s.Index {
		if w := c.what[c.targets[c.next]]; w != "" && what == "" {
			what = w
		}
		c.next++
	}
	if !p.inspects() {
		return
	}
	c.layouts = append(c.layouts, c.snapshot(p, s, what))
}

// stack returns the index of the stack's text in c.stacks, -1 for none.
func (c *layoutCapture) stack(id trace.StackID) int64 {
	if id == trace.NoStack {
		return -1
	}
	if i, ok := c.stackIx[id]; ok {
		return int64(i)
	}
	var b strings.Builder
	for i, f := range c.r.Stack(id) {
		if i == maxStackFrames {
			b.WriteString("\n…")
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		fr := c.r.String(f.Func)
		if file := c.r.String(f.File); file != "" && f.Line > 0 {
			fr += fmt.Sprintf(" (%s:%d)", file, f.Line)
		}
		b.WriteString(clipLabel(fr))
	}
	c.stackIx[id] = len(c.stacks)
	c.stacks = append(c.stacks, b.String())
	return int64(len(c.stacks) - 1)
}

// snapshot lists the policy's segments now.
func (c *layoutCapture) snapshot(p *probe, s *replay.Sample, what string) Layout {
	// Segments and Hist are never null: a moment with no segment is drawn
	// as such.
	l := Layout{Index: s.Index, TimeS: float64(s.TimeNS-c.t0) / 1e9, What: what,
		ReservedBytes: s.ReservedBytes, ActiveBytes: s.ActiveBytes, Segments: []Row{}, Hist: []HistBin{}}
	var bins [64]HistBin
	var segs []trace.Segment
	pools := map[uint64]uint64{} // by segment address
	p.PoolSegments(func(seg trace.Segment, pool uint64) bool {
		if pool != 0 {
			pools[seg.Addr] = pool
		}
		live := false
		for _, b := range seg.Blocks {
			if b.State != trace.BlockInactive {
				live = true
				break
			}
		}
		for _, b := range seg.Blocks {
			if b.State != trace.BlockInactive || b.SizeBytes == 0 {
				continue
			}
			k := analysis.Log2Class(b.SizeBytes)
			if live {
				bins[k].Stranded += b.SizeBytes
				l.StrandedBytes += b.SizeBytes
			} else {
				bins[k].Releasable += b.SizeBytes
				l.ReleasableBytes += b.SizeBytes
			}
		}
		seg.Blocks = append([]trace.Block(nil), seg.Blocks...)
		segs = append(segs, seg)
		return true
	})
	for k := range bins {
		if bins[k].Stranded+bins[k].Releasable > 0 {
			bins[k].Log2 = k
			l.Hist = append(l.Hist, bins[k])
		}
	}
	sort.SliceStable(segs, func(i, j int) bool {
		if segs[i].SizeBytes != segs[j].SizeBytes {
			return segs[i].SizeBytes > segs[j].SizeBytes
		}
		return segs[i].Addr < segs[j].Addr
	})
	for i, seg := range segs {
		if i >= maxSegmentRows {
			l.MoreSegments++
			l.MoreBytes += seg.SizeBytes
			continue
		}
		r := c.row(p, seg)
		if id := pools[seg.Addr]; id != 0 {
			r.PoolID, r.PoolTag = id, analysis.PoolTag(id, c.poolStreams[id])
		}
		l.Segments = append(l.Segments, r)
	}
	// The default pool's segments first, then each private pool's
	// together, largest first within each.
	sort.SliceStable(l.Segments, func(i, j int) bool { return l.Segments[i].PoolID < l.Segments[j].PoolID })
	return l
}

// row draws one segment, merging neighbouring blocks of one state when
// it has more than maxBlocksPerRow.
func (c *layoutCapture) row(p *probe, seg trace.Segment) Row {
	r := Row{Addr: seg.Addr, Size: seg.SizeBytes, Stream: fmt.Sprintf("%#x", uint64(seg.Stream)), Pool: seg.Pool}
	live := false
	for _, b := range seg.Blocks {
		if b.State != trace.BlockInactive {
			live = true
			break
		}
	}
	merge := len(seg.Blocks) > maxBlocksPerRow
	for _, b := range seg.Blocks {
		st := int64(stateActive)
		if b.State == trace.BlockInactive {
			st = stateReleasable
			if live {
				st = stateStranded
			}
		}
		req, stack := int64(0), int64(-1)
		if st == stateActive {
			req = int64(b.RequestedBytes)
			if o, ok := p.origins[b.Addr]; ok {
				req = int64(o.requested)
				stack = c.stack(o.stack)
			}
		}
		if n := len(r.Blocks); merge && n > 0 && r.Blocks[n-1][1] == st {
			last := &r.Blocks[n-1]
			last[0] += int64(b.SizeBytes)
			last[2] += req
			if last[3] != stack {
				last[3] = -1
			}
			last[4]++
			continue
		}
		r.Blocks = append(r.Blocks, [5]int64{int64(b.SizeBytes), st, req, stack, 1})
	}
	if len(r.Blocks) > maxBlocksPerRow {
		r.Blocks = coarsen(r.Blocks, seg.SizeBytes)
	}
	return r
}

// coarsen merges the neighbouring blocks that fall in one of
// maxBlocksPerRow equal slices of the segment (far less than a pixel
// each on a drawn row); a merged entry takes the state that holds most of
// its bytes. The entries still sum to the segment's size.
func coarsen(blocks [][5]int64, size uint64) [][5]int64 {
	slot := int64(size) / maxBlocksPerRow
	if slot < 1 {
		slot = 1
	}
	var out [][5]int64
	var byState [3]int64
	var off, start int64
	flush := func(cur [5]int64) {
		best := int64(0)
		for st := range byState {
			if byState[st] > byState[best] {
				best = int64(st)
			}
		}
		cur[1] = best
		out = append(out, cur)
		byState = [3]int64{}
	}
	var cur [5]int64
	open := false
	for _, b := range blocks {
		if open && (off/slot != start/slot || b[0] >= slot) {
			flush(cur)
			open = false
		}
		if !open {
			cur, start, open = [5]int64{0, 0, 0, b[3], 0}, off, true
		}
		cur[0] += b[0]
		cur[2] += b[2]
		cur[4] += b[4]
		if cur[3] != b[3] {
			cur[3] = -1
		}
		byState[b[1]] += b[0]
		off += b[0]
	}
	if open {
		flush(cur)
	}
	return out
}

// timeTargets returns k evenly spaced times over [0, durationS].
func timeTargets(durationS float64, k int) []float64 {
	if durationS <= 0 || k <= 0 {
		return nil
	}
	out := make([]float64, 0, k)
	for i := 0; i < k; i++ {
		out = append(out, (float64(i)+0.5)*durationS/float64(k))
	}
	return out
}

// layoutTargets returns k evenly spaced event indexes over events events.
func layoutTargets(events int64, k int) []int64 {
	if events <= 0 || k <= 0 {
		return nil
	}
	out := make([]int64, 0, k)
	for i := 0; i < k; i++ {
		out = append(out, (int64(i)*2+1)*events/int64(2*k))
	}
	return out
}
