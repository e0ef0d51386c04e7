package pytorch

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// poolScript writes events as one line of short names: the allocator's
// events by the segment (A-E) they touch, the pool events with their
// stream (0 or S) and pool.
func poolScript(evs []trace.Event) string {
	const base, side = 0x7F3A_0000_0000, 0x55D0_1234_5670
	seg := func(addr uint64) string { return string(rune('A' + (addr-base)/0x4000000)) }
	stream := func(s trace.StreamID) string {
		if s == side {
			return "S"
		}
		return fmt.Sprint(uint64(s))
	}
	pool := func(id uint64) string {
		if id&(1<<63) != 0 {
			return fmt.Sprintf("(0,%d)", id&^(1<<63))
		}
		return fmt.Sprintf("(%d,0)", id)
	}
	var out []string
	for _, e := range evs {
		switch e.Kind {
		case trace.KindSegmentAlloc:
			out = append(out, "seg"+seg(e.Addr))
		case trace.KindAlloc:
			out = append(out, "alloc"+seg(e.Addr))
		case trace.KindFreeRequested:
			out = append(out, "free"+seg(e.Addr))
		case trace.KindFreeCompleted:
		case trace.KindEmptyCache:
			out = append(out, "empty")
		case trace.KindPoolBegin:
			out = append(out, "begin"+stream(e.Stream)+pool(e.Aux))
		case trace.KindPoolEnd:
			out = append(out, "end"+stream(e.Stream)+pool(e.Aux))
		case trace.KindPoolRelease:
			out = append(out, "release"+pool(e.Aux))
		default:
			out = append(out, e.Kind.String())
		}
	}
	return strings.Join(out, " ")
}

// TestImportPools imports a snapshot of two graph captures and a MemPool
// used twice (testdata/gen_pools.py), whose final segments name their
// pools: each pool's routing wraps its allocations, torch.cuda.graph's
// empty_cache comes before each capture, and the MemPool, on the default
// stream, routes every stream.
func TestImportPools(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pools.fst")
	if _, err := ImportFile("testdata/pools.p4.pickle", out, Options{}); err != nil {
		t.Fatal(err)
	}
	f, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []trace.Event
	for {
		e, err := f.ReadEvent()
		if err != nil {
			break
		}
		evs = append(evs, e)
	}
	want := "segA allocA " +
		"empty beginS(1,0) segB allocB allocB endS(1,0) freeB " +
		"segC allocC " +
		"empty beginS(2,0) segD allocD allocD endS(2,0) " +
		"begin0(0,1) segE allocE allocE end0(0,1) freeE allocA begin0(0,1) allocE end0(0,1)"
	if got := poolScript(evs); got != want {
		t.Errorf("imported\n got %s\nwant %s", got, want)
	}
}

// TestInferPoolsReleased infers, from the events alone, two captures of
// fresh pools on a side stream, the first released and its segment freed
// by the empty_cache before the second: the release comes before that
// empty_cache's frees, and no empty_cache is added where one is.
func TestInferPoolsReleased(t *testing.T) {
	const S = trace.StreamID(0x55D0_1234_5670)
	const A, B, C = 0x7F3A_0000_0000, 0x7F3A_0400_0000, 0x7F3A_0800_0000
	ev := func(k trace.Kind, addr uint64, s trace.StreamID) trace.Event {
		return trace.Event{Kind: k, Addr: addr, SizeBytes: 512, Stream: s}
	}
	evs := []trace.Event{
		{Kind: trace.KindSegmentAlloc, Addr: A, SizeBytes: 2 << 20},
		ev(trace.KindAlloc, A, 0),
		{Kind: trace.KindSegmentAlloc, Addr: B, SizeBytes: 2 << 20, Stream: S},
		ev(trace.KindAlloc, B, S), ev(trace.KindAlloc, B+512, S),
		ev(trace.KindFreeRequested, B, S), ev(trace.KindFreeCompleted, B, S),
		ev(trace.KindFreeRequested, B+512, S), ev(trace.KindFreeCompleted, B+512, S),
		ev(trace.KindAlloc, A+512, 0),
		{Kind: trace.KindSegmentFree, Addr: B, SizeBytes: 2 << 20, Stream: S},
		{Kind: trace.KindEmptyCache},
		{Kind: trace.KindSegmentAlloc, Addr: C, SizeBytes: 2 << 20, Stream: S},
		ev(trace.KindAlloc, C, S), ev(trace.KindAlloc, C+512, S),
	}
	got, n := InferPools(evs, nil)
	if n != 2 {
		t.Errorf("%d pools, want 2", n)
	}
	want := "segA allocA empty beginS(1,0) segB allocB allocB endS(1,0) freeB freeB allocA " +
		"release(1,0) segment_free empty beginS(2,0) segC allocC allocC endS(2,0)"
	if s := poolScript(got); s != want {
		t.Errorf("inferred\n got %s\nwant %s", s, want)
	}
	// A trace with no capture is left as it is.
	plain := evs[:2]
	if got, n := InferPools(plain, nil); n != 0 || len(got) != 2 {
		t.Errorf("no capture: %d pools, %d events", n, len(got))
	}
}
