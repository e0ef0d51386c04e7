package trace

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
)

// transformerStream writes about n events shaped like the forward passes
// of a transformer as PyTorch's caching allocator serves them: tensors of
// a few shapes, most freed by the next op or two, some kept to the end of
// the pass; blocks reused at the same addresses pass after pass; new
// segments when the pool grows; times in whole microseconds, as PyTorch
// records them, with jitter. It returns the events written.
func transformerStream(rng *rand.Rand, s Sink, n int) []Event {
	const (
		layers = 24
		hidden = 4096
		heads  = 32
		elem   = 2 // bf16
		stream = StreamID(0x7f3c5a000400)
	)
	seqs := []uint64{512, 1024, 2048} // sequence length varies from step to step
	evs := make([]Event, 0, n+64)
	t := int64(1_732_900_000_000_000) * 1000 / 1000 // µs since epoch, in ns below
	t *= 1000
	emit := func(e Event) {
		e.Stream = stream
		e.TimeNS = t
		evs = append(evs, e)
		if err := s.WriteEvent(e); err != nil {
			panic(err)
		}
	}
	tick := func(baseUS, jitterUS int) {
		t += int64(baseUS+rng.IntN(jitterUS+1)) * 1000
	}
	// A toy caching allocator: exact-size free lists, segments bumped from
	// a high address.
	free := map[uint64][]uint64{}
	next := uint64(0x7f3c60000000)
	segLeft := uint64(0)
	round := func(sz uint64) uint64 { return (sz + 511) &^ 511 }
	alloc := func(sz uint64) uint64 {
		r := round(sz)
		var a uint64
		if l := free[r]; len(l) > 0 {
			a = l[len(l)-1]
			free[r] = l[:len(l)-1]
		} else {
			if segLeft < r {
				seg := (r + 2<<20 - 1) &^ (2<<20 - 1)
				if r < 1<<20 {
					seg = 2 << 20
				}
				next = (next + 2<<20 - 1) &^ (2<<20 - 1)
				emit(Event{Kind: KindSegmentAlloc, Addr: next, SizeBytes: seg})
				segLeft = seg
			}
			a = next
			next += r
			segLeft -= r
		}
		emit(Event{Kind: KindAlloc, Addr: a, SizeBytes: sz})
		tick(3, 4)
		return a
	}
	type blk struct{ a, sz uint64 }
	release := func(b blk) {
		emit(Event{Kind: KindFreeRequested, Addr: b.a, SizeBytes: b.sz})
		emit(Event{Kind: KindFreeCompleted, Addr: b.a, SizeBytes: b.sz})
		free[round(b.sz)] = append(free[round(b.sz)], b.a)
		tick(2, 3)
	}
	step := 0
	for len(evs) < n {
		step++
		seq := seqs[rng.IntN(len(seqs))]
		batch := uint64(4)
		act := batch * seq * hidden * elem
		var saved []blk
		x := blk{alloc(act), act}
		for range layers {
			ln := blk{alloc(act), act}
			stats := blk{alloc(batch * seq * 4), batch * seq * 4}
			tick(20, 15)
			qkv := blk{alloc(3 * act), 3 * act}
			tick(40, 30)
			scores := blk{alloc(batch * heads * seq * seq * elem), batch * heads * seq * seq * elem}
			tick(60, 40)
			probs := blk{alloc(batch * heads * seq * seq * elem), batch * heads * seq * seq * elem}
			release(scores)
			attn := blk{alloc(act), act}
			tick(30, 20)
			proj := blk{alloc(act), act}
			release(attn)
			res := blk{alloc(act), act}
			release(proj)
			ln2 := blk{alloc(act), act}
			up := blk{alloc(4 * act), 4 * act}
			tick(50, 30)
			gelu := blk{alloc(4 * act), 4 * act}
			down := blk{alloc(act), act}
			tick(50, 30)
			release(up)
			out := blk{alloc(act), act}
			release(down)
			release(x)
			x = out
			// Kept for the backward pass.
			saved = append(saved, ln, stats, qkv, probs, res, ln2, gelu)
		}
		release(x)
		tick(200, 100)
		for i := len(saved) - 1; i >= 0; i-- {
			release(saved[i])
		}
		tick(500, 300)
	}
	return evs
}

func encodeStream(tb testing.TB, n int, opts ...WriterOption) ([]byte, []Event) {
	tb.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, &Header{Producer: ProducerSynthetic}, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	evs := transformerStream(rand.New(rand.NewPCG(1, 2)), w, n)
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes(), evs
}

func BenchmarkDecode(b *testing.B) {
	data, evs := encodeStream(b, 1<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	var n int
	cpu0 := cpuSeconds()
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		n = 0
		for {
			_, err := r.ReadEvent()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		r.Close()
	}
	if n != len(evs) {
		b.Fatalf("decoded %d events, want %d", n, len(evs))
	}
	reportRates(b, n*b.N, cpuSeconds()-cpu0)
	b.ReportMetric(float64(len(data))/float64(len(evs)), "bytes/event")
}

func BenchmarkEncode(b *testing.B) {
	var buf bytes.Buffer
	evs := transformerStream(rand.New(rand.NewPCG(1, 2)), discardSink{}, 1<<20)
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for b.Loop() {
		buf.Reset()
		w, err := NewWriter(&buf, &Header{Producer: ProducerSynthetic})
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range evs {
			if err := w.WriteEvent(e); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	reportRates(b, len(evs)*b.N, cpuSeconds()-cpu0)
	b.ReportMetric(float64(buf.Len())/float64(len(evs)), "bytes/event")
}

type discardSink struct{}

func (discardSink) WriteEvent(Event) error { return nil }
func (discardSink) String(string) StringID { return 0 }
func (discardSink) Stack([]Frame) StackID  { return 0 }

// BenchmarkDecodeBatch decodes with ReadEvents, the way a replay engine
// consumes a trace.
func BenchmarkDecodeBatch(b *testing.B) {
	data, evs := encodeStream(b, 1<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	buf := make([]Event, 1024)
	b.ResetTimer()
	var n int
	cpu0 := cpuSeconds()
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		n = 0
		for {
			k, err := r.ReadEvents(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += k
		}
		r.Close()
	}
	if n != len(evs) {
		b.Fatalf("decoded %d events, want %d", n, len(evs))
	}
	reportRates(b, n*b.N, cpuSeconds()-cpu0)
	b.ReportMetric(float64(len(data))/float64(len(evs)), "bytes/event")
}

// reportRates reports events per wall-clock second and, where measured,
// per CPU-second of the process (the rate on one unshared core when run
// with -cpu 1).
func reportRates(b *testing.B, events int, cpu float64) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	if cpu > 0 {
		b.ReportMetric(float64(events)/cpu, "events/cpu-s")
	}
}
