package analysis

import (
	"bytes"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// TestOriginsFollowBlocks replays a trace that starts from a recorded state
// under a policy that seeds it (caching) and one the engine serves it to as
// requests (bfc), and checks the attributions learnt from the samples: the
// initial block under its replayed address, each alloc under the address
// it was served, and, once stale entries are dropped, only the blocks the
// policy still holds.
func TestAttributionsFollowBlocks(t *testing.T) {
	const base = 0x7f0000000000
	h := &trace.Header{Producer: trace.ProducerPyTorch, Initial: &trace.InitialState{Segments: []trace.Segment{{
		Stream: 5, Addr: base, SizeBytes: 2 * mib, Pool: "small",
		Blocks: []trace.Block{
			{Addr: base, SizeBytes: 1024, RequestedBytes: 1000, State: trace.BlockAllocated},
			{Addr: base + 1024, SizeBytes: 2*mib - 1024, State: trace.BlockInactive},
		},
	}}}}
	evs := []trace.Event{
		{Kind: trace.KindAlloc, TimeNS: 1, Addr: 0x10000, SizeBytes: 3 * mib, Stream: 0},
		{Kind: trace.KindAlloc, TimeNS: 2, Addr: 0x20000, SizeBytes: 4 * mib, Stream: 0},
		{Kind: trace.KindFreeRequested, TimeNS: 3, Addr: 0x10000, SizeBytes: 3 * mib},
		{Kind: trace.KindFreeCompleted, TimeNS: 4, Addr: 0x10000, SizeBytes: 3 * mib},
		{Kind: trace.KindAlloc, TimeNS: 5, Addr: 0x30000, SizeBytes: 512, Stream: 0},
	}
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"caching", "bfc"} {
		f, err := allocator.NewFactory(policy, "", h)
		if err != nil {
			t.Fatal(err)
		}
		r, err := trace.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		var o *attributions
		served := map[uint64]uint64{} // replayed address -> requested bytes
		var firstFreed uint64
		cfg := replay.Config{Observer: func(s *replay.Sample) {
			if o == nil {
				o = newAttributions(s, r.Header())
				if o == nil {
					t.Fatalf("%s: no attributions for an Inspector", policy)
				}
				b, req, ok := s.Replayed(base)
				if !ok || req != 1000 {
					t.Fatalf("%s: initial block not live at the first sample: %v %d %v", policy, b, req, ok)
				}
				if got := o.m[b.Addr]; got != (attribution{size: 1000, stream: 5, marker: initialMarker}) {
					t.Errorf("%s: initial block's attribution %+v", policy, got)
				}
			}
			switch s.Event.Kind {
			case trace.KindAlloc:
				if !s.HasBlock || s.Block.SizeBytes < s.Event.SizeBytes {
					t.Fatalf("%s: alloc sample without its block: %+v", policy, s.Block)
				}
				o.served(s.Block.Addr, attribution{size: s.Event.SizeBytes, marker: "m"})
				served[s.Block.Addr] = s.Event.SizeBytes
			case trace.KindFreeCompleted:
				if !s.HasBlock {
					t.Fatalf("%s: free sample without its block", policy)
				}
				firstFreed = s.Block.Addr
			}
		}}
		check := func() {
			if o.m[firstFreed].size != 3*mib {
				t.Fatalf("%s: freed block's attribution %+v before the drop", policy, o.m[firstFreed])
			}
			// The freed block's address is not reused by the last alloc
			// (512 B goes to the small pool), so its attribution is stale.
			o.dropGone()
			if _, ok := o.m[firstFreed]; ok {
				t.Errorf("%s: attribution of the freed block kept: %+v", policy, o.m)
			}
			if len(o.m) != 3 {
				t.Errorf("%s: %d attributions after the drop, want the initial block and two allocs: %+v", policy, len(o.m), o.m)
			}
			for a, req := range served {
				if a != firstFreed && o.m[a].size != req {
					t.Errorf("%s: attribution of %#x = %+v, want %d bytes", policy, a, o.m[a], req)
				}
			}
		}
		obs := cfg.Observer
		cfg.Observer = func(s *replay.Sample) {
			obs(s)
			// The policy is released once Run returns: check at the
			// last event.
			if s.Index == int64(len(evs)-1) {
				check()
			}
		}
		if _, err := replay.Run(r, f, cfg); err != nil {
			t.Fatal(err)
		}
	}
}
