package pytorch

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// TestBlkMap checks blkMap against a Go map through random puts, gets and
// deletes of clustered addresses (block-aligned, address 0 included), many
// of which probe past each other.
func TestBlkMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var m blkMap
	want := map[uint64]rblk{}
	for i := range 200000 {
		a := uint64(r.IntN(3000)) * 512
		if r.IntN(4) == 0 {
			a = uint64(r.IntN(64)) << 30
		}
		switch r.IntN(3) {
		case 0:
			b := rblk{size: uint64(i), req: a, pending: i%2 == 0}
			m.put(a, b)
			want[a] = b
		case 1:
			m.del(a)
			delete(want, a)
		}
		got, ok := m.get(a)
		w, wok := want[a]
		if ok != wok || got != w {
			t.Fatalf("op %d: get(%#x) = %v %v, want %v %v", i, a, got, ok, w, wok)
		}
		if m.len() != len(want) {
			t.Fatalf("op %d: %d blocks, want %d", i, m.len(), len(want))
		}
	}
	seen := 0
	m.each(func(a uint64, b rblk) {
		if want[a] != b {
			t.Fatalf("each: %#x is %v, want %v", a, b, want[a])
		}
		seen++
	})
	if seen != len(want) {
		t.Fatalf("each gave %d blocks, want %d", seen, len(want))
	}
}

// TestUndoParallel checks forwardUndo's undo (without the conversion)
// against undo on random entries of every kind over a few hundred
// addresses, from a random final state: the same live blocks, segments
// and count of disagreeing entries.
func TestUndoParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 20 {
		final := func() *devState {
			st := newDevState()
			rr := rand.New(rand.NewPCG(uint64(round), 1))
			for range 100 {
				st.active.put(uint64(rr.IntN(400))*512, rblk{size: 512, req: uint64(rr.IntN(512)), pending: rr.IntN(2) == 0})
			}
			for i := range 10 {
				a := uint64(i) << 21
				st.segs[a] = &rseg{addr: a, size: 2 << 20, pool: "large"}
			}
			return st
		}
		evs := make([]event, 5000)
		for i := range evs {
			k := trace.Kind(1 + r.IntN(int(trace.KindSegmentFree)))
			a := uint64(r.IntN(400)) * 512
			if k >= trace.KindSegmentAlloc {
				a = uint64(r.IntN(12)) << 21
			}
			evs[i] = event{Kind: k, Addr: a, SizeBytes: 2 << 20}
		}
		want, got := final(), final()
		want.undo(evs)
		c := &converter{snap: &Snapshot{stacks: &stackTable{}}}
		if res := c.forwardUndo(evs, 0, 2+round%5, false, got); res.ok {
			t.Fatalf("round %d: converted, not asked to", round)
		}
		if want.bad != got.bad || want.active.len() != got.active.len() || len(want.segs) != len(got.segs) {
			t.Fatalf("round %d: %d bad, %d blocks, %d segments; undo %d, %d, %d", round, got.bad, got.active.len(), len(got.segs), want.bad, want.active.len(), len(want.segs))
		}
		want.active.each(func(a uint64, b rblk) {
			if g, ok := got.active.get(a); !ok || g != b {
				t.Fatalf("round %d: block %#x is %v %v, undo %v", round, a, g, ok, b)
			}
		})
		for a := range want.segs {
			if got.segs[a] == nil {
				t.Fatalf("round %d: segment %#x missing", round, a)
			}
		}
	}
}

// TestForwardParallel checks forwardUndo's conversion against entry and
// stats.add over the events in order, with entries that carry no time
// (they take the time before them, across the parts) and several
// streams, its undo at the same time against undo, and inferParallel
// against the inference over every event; and that it leaves events with
// a marker or no action to forward.
func TestForwardParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	c := &converter{snap: &Snapshot{stacks: &stackTable{}}}
	for round := range 10 {
		evs := make([]event, 3000+r.IntN(3000))
		tm := int64(1000)
		for i := range evs {
			// Mostly blocks, with bursts of segment releases (empty_cache()
			// inferred or not), segment allocations and OOMs.
			kind := trace.Kind(1 + r.IntN(int(trace.KindFreeCompleted)))
			switch x := r.IntN(40); {
			case x < 4:
				kind = []trace.Kind{trace.KindSegmentAlloc, trace.KindSegmentMap, trace.KindOOM, trace.KindSnapshot}[x]
			case x < 7 || (i > 0 && x < 30 && (evs[i-1].Kind == trace.KindSegmentFree || evs[i-1].Kind == trace.KindSegmentUnmap)):
				kind = []trace.Kind{trace.KindSegmentFree, trace.KindSegmentUnmap}[x%2]
			}
			e := event{Kind: kind, Addr: uint64(r.IntN(99)) * 512, SizeBytes: uint64(1+r.IntN(3)) << 21, Stream: trace.StreamID(r.IntN(3)), frames: noFrames, set: setAction}
			if kind >= trace.KindSegmentAlloc && kind <= trace.KindSegmentUnmap {
				// Ranges apart: overlapping expandable ranges are undone
				// in no set order (rangeAt's scan of a map).
				e.Addr = uint64(i+1) << 24
			}
			if i > 0 && r.IntN(3) == 0 {
				e.TimeNS = 77 // no time: overwritten by the time before
			} else {
				tm += int64(r.IntN(50))
				e.TimeNS, e.set = tm, e.set|setTimeOK
			}
			evs[i] = e
		}
		if round%2 == 0 {
			evs[len(evs)-1].Kind = trace.KindSegmentFree // a burst at the end
		}
		if round%3 == 1 {
			// A third of the entries without a time: whole parts with
			// none, whose next part takes the time from further back.
			for i := len(evs) / 3; i < 2*len(evs)/3; i++ {
				evs[i].TimeNS, evs[i].set = 77, evs[i].set&^setTimeOK
			}
		}
		want := append([]event(nil), evs...)
		var ws stats
		var at int64
		for i := range want {
			c.snap.entry(&want[i], 3, &at)
			ws.add(&want[i])
		}
		// Undone at once, from a final state of the blocks drawn: as undo
		// of the events before their conversion.
		final := func() *devState {
			st := newDevState()
			for a := range uint64(99) {
				if a%3 == 0 {
					st.active.put(a*512, rblk{size: 512, req: a, pending: a%2 == 0})
				}
			}
			return st
		}
		wantUndo, gotUndo := final(), final()
		wantUndo.undo(evs)
		res := c.forwardUndo(evs, 3, 2+round%6, true, gotUndo)
		if !res.ok {
			t.Fatalf("round %d: not converted", round)
		}
		gs, segs := res.st, res.segs
		if gotUndo.bad != wantUndo.bad || gotUndo.active.len() != wantUndo.active.len() || len(gotUndo.segs) != len(wantUndo.segs) {
			t.Fatalf("round %d: undone with the conversion: %d bad, %d blocks, %d segments; undo %d, %d, %d", round,
				gotUndo.bad, gotUndo.active.len(), len(gotUndo.segs), wantUndo.bad, wantUndo.active.len(), len(wantUndo.segs))
		}
		wantUndo.active.each(func(a uint64, b rblk) {
			if g, ok := gotUndo.active.get(a); !ok || g != b {
				t.Fatalf("round %d: block %#x is %v %v, undo %v", round, a, g, ok, b)
			}
		})
		// The inference from the segment events alone, against the walk
		// of every event (forward's when not in parallel).
		init := &trace.InitialState{Segments: []trace.Segment{{Device: 3, SizeBytes: 40 << 20}}}
		ref := &converter{snap: &Snapshot{}, opt: Options{MemoryCapBytes: 5 << 20}}
		x := ref.newECInfer(3, init)
		for i := range want {
			x.add(&want[i])
		}
		x.finish()
		got := &converter{snap: &Snapshot{}, opt: Options{MemoryCapBytes: 5 << 20}}
		y := got.newECInfer(3, init)
		y.inferParallel(evs, segs)
		y.finish()
		if !slices.Equal(got.snap.ecs.mem, ref.snap.ecs.mem) || y.retries != x.retries || y.inferred == 0 || x.retries == 0 {
			t.Fatalf("round %d: %d empty_cache() inferred (%d retries), one by one %d (%d)", round, len(got.snap.ecs.mem), y.retries, len(ref.snap.ecs.mem), x.retries)
		}
		for i := range evs {
			if evs[i] != want[i] {
				t.Fatalf("round %d: event %d is %+v, want %+v", round, i, evs[i], want[i])
			}
		}
		if gs.n != ws.n || gs.kinds != ws.kinds || gs.first != ws.first || gs.last != ws.last || len(gs.streams) != len(ws.streams) || len(gs.devs) != 1 {
			t.Fatalf("round %d: stats %+v, want %+v", round, gs, ws)
		}
		evs[len(evs)/2].Kind = trace.KindMarker
		if res := c.forwardUndo(evs, 3, 3, true, nil); res.ok {
			t.Fatalf("round %d: a marker converted in parallel", round)
		}
	}
}

// pk builds a protocol 2 pickle of v, made of []any, map entries as
// [][2]any (in order, keys may repeat), strings, ints and bools.
func pk(v any) []byte {
	var b []byte
	var put func(v any)
	put = func(v any) {
		switch x := v.(type) {
		case string:
			b = append(b, 'X', byte(len(x)), 0, 0, 0)
			b = append(b, x...)
		case int:
			b = append(b, 'J', byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
		case bool:
			b = append(b, map[bool]byte{true: 0x88, false: 0x89}[x])
		case []any:
			b = append(b, ']', '(')
			for _, it := range x {
				put(it)
			}
			b = append(b, 'e')
		case [][2]any:
			b = append(b, '}', '(')
			for _, p := range x {
				put(p[0])
				put(p[1])
			}
			b = append(b, 'u')
		}
	}
	b = append(b, 0x80, 2)
	put(v)
	return append(b, '.')
}

// TestFinalStates checks finalStates on the segments list as the decoder
// leaves it: a key given twice counts with its last value (as Python's
// dict), only a bool makes a segment expandable, inactive blocks are not
// live, and a segment or block that is not a dict is an error naming it.
func TestFinalStates(t *testing.T) {
	blk := func(addr int, state string) [][2]any {
		return [][2]any{{"address", addr}, {"size", 512}, {"requested_size", 500}, {"state", state}}
	}
	segs := []any{
		[][2]any{{"device", 0}, {"address", 1}, {"total_size", 20 << 20}, {"address", 1 << 21}, {"stream", 7},
			{"blocks", []any{blk(1<<21, "active_allocated"), blk(1<<21+512, "inactive"), blk(1<<21+1024, "active_pending_free")}}},
		[][2]any{{"device", 1}, {"address", 1 << 22}, {"total_size", 4 << 20}, {"is_expandable", 1}, {"segment_type", "small"}},
		[][2]any{{"device", 1}, {"address", 1 << 23}, {"total_size", 4 << 20}, {"is_expandable", true}},
	}
	states0 := func(v any) (map[int]*devState, error) {
		doc, err := pickle.NewDecoder(pk(v)).DecodeDoc()
		if err != nil {
			t.Fatal(err)
		}
		return finalStates(doc, doc.Root(), DefaultMaxSizeBytes)
	}
	states, err := states0(segs)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := states[0], states[1]
	if s0 == nil || s1 == nil || len(states) != 2 {
		t.Fatalf("states %v", states)
	}
	if sg := s0.segs[1<<21]; sg == nil || sg.size != 20<<20 || sg.stream != 7 || sg.pool != "large" || len(s0.segs) != 1 {
		t.Fatalf("device 0 segments %v", s0.segs)
	}
	a, okA := s0.active.get(1 << 21)
	p, okP := s0.active.get(1<<21 + 1024)
	if _, in := s0.active.get(1<<21 + 512); in || !okA || !okP || a != (rblk{size: 512, req: 500}) || !p.pending || s0.active.len() != 2 {
		t.Fatalf("device 0 blocks %v %v %v %v", a, okA, p, okP)
	}
	if sg := s1.segs[1<<22]; sg == nil || sg.expandable || sg.pool != "small" {
		t.Fatalf("an int is_expandable: %+v", sg)
	}
	if sg := s1.segs[1<<23]; sg == nil || !sg.expandable || s1.ends[1<<23+4<<20] != 1<<23 {
		t.Fatalf("expandable segment %+v, ends %v", sg, s1.ends)
	}
	for _, c := range []struct {
		v    any
		want string
	}{
		{[]any{segs[0], "x"}, "segments[1] is a str, not a dict"},
		{[]any{[][2]any{{"blocks", []any{blk(0, "inactive"), 5}}}}, "segments[0].blocks[1] is a int, not a dict"},
		{[]any{segs[0], [][2]any{{"address", "0x1000"}}}, "segments[1]: address is a str, not an integer"},
		{[]any{[][2]any{{"total_size", -1}}}, "segments[0]: total_size is negative (-1)"},
		{[]any{[][2]any{{"blocks", []any{[][2]any{{"size", []any{}}}}}}}, "segments[0].blocks[0]: size is a list, not an integer"},
	} {
		if _, err := states0(c.v); err == nil || err.Error() != c.want {
			t.Errorf("finalStates: %v, want %q", err, c.want)
		}
	}
}
