package analysis

import (
	"bytes"
	"io"
	"math/rand"
	"testing"
	"time"

	"github.com/fragsim/fragsim/trace"
)

// genTrace writes a seeded multi-agent-like trace of about n events: agents
// allocate weights once, then activations of varied sizes on two streams,
// freed at random moments. Some allocations carry call stacks.
func genTrace(tb testing.TB, n int, seed int64) []byte {
	tb.Helper()
	var buf bytes.Buffer
	h := &trace.Header{Producer: trace.ProducerSynthetic, GPUName: "Test GPU", TorchVersion: "2.11.0",
		GPUTotalBytes: 80 << 30, Created: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	w, err := trace.NewWriter(&buf, h)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewSource(seed))
	agents := []trace.StringID{w.String("agent-0"), w.String("agent-1"), w.String("agent-2")}
	stacks := []trace.StackID{
		w.Stack([]trace.Frame{{Func: w.String("attention"), File: w.String("model.py"), Line: 10}, {Func: w.String("forward"), File: w.String("model.py"), Line: 50}}),
		w.Stack([]trace.Frame{{Func: w.String("mlp"), File: w.String("model.py"), Line: 20}, {Func: w.String("forward"), File: w.String("model.py"), Line: 51}}),
	}
	type blk struct{ addr, size uint64 }
	var live []blk
	var t int64 = 1e9
	next := uint64(1 << 32)
	events := 0
	emit := func(e trace.Event) {
		t += int64(rng.Intn(20000) + 1)
		e.TimeNS = t
		if err := w.WriteEvent(e); err != nil {
			tb.Fatal(err)
		}
		events++
	}
	alloc := func(size uint64, stream trace.StreamID, stack trace.StackID) {
		addr := next
		next += (size + 511) &^ 511
		emit(trace.Event{Kind: trace.KindAlloc, Addr: addr, SizeBytes: size, Stream: stream, Stack: stack})
		live = append(live, blk{addr, size})
	}
	for _, a := range agents {
		emit(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerAgent, Text: a})
		for i := 0; i < 8; i++ {
			alloc(uint64(2+rng.Intn(8))<<20, 0, trace.NoStack)
		}
	}
	weights := len(live)
	for events < n {
		if rng.Intn(200) == 0 {
			emit(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerAgent, Text: agents[rng.Intn(len(agents))]})
			continue
		}
		if len(live) > weights && (len(live) > weights+400 || rng.Intn(2) == 0) {
			i := weights + rng.Intn(len(live)-weights)
			b := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			emit(trace.Event{Kind: trace.KindFreeRequested, Addr: b.addr, SizeBytes: b.size})
			emit(trace.Event{Kind: trace.KindFreeCompleted, Addr: b.addr, SizeBytes: b.size})
			continue
		}
		var size uint64
		switch rng.Intn(4) {
		case 0:
			size = uint64(1 + rng.Intn(1<<20)) // small pool
		case 1, 2:
			size = uint64(1+rng.Intn(8)) << 20 * uint64(1+rng.Intn(3)) / 2
		default:
			size = uint64(rng.Intn(40)+1) << 20
		}
		stack := trace.NoStack
		if rng.Intn(3) == 0 {
			stack = stacks[rng.Intn(len(stacks))]
		}
		alloc(size, trace.StreamID(rng.Intn(2)), stack)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// opener returns an Opener over trace bytes.
func opener(data []byte) Opener {
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(data))
		return r, io.NopCloser(nil), err
	}
}
