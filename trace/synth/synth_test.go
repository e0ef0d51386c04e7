package synth

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// checker is a Sink that validates the stream as it goes and hashes it.
type checker struct {
	t        testing.TB
	live     map[uint64]uint64 // addr -> size
	liveB    uint64
	peak     uint64
	lastTime int64
	n        int64
	pending  map[uint64]bool // free requested, not yet completed
	strings  []string
	stacks   int
	kinds    [trace.NumKinds]int64
	markers  map[trace.MarkerKind]int64
	hash     hashWriter
	err      error
}

type hashWriter struct{ h uint64 }

func newChecker(t testing.TB) *checker {
	return &checker{t: t, live: map[uint64]uint64{}, pending: map[uint64]bool{},
		strings: []string{""}, markers: map[trace.MarkerKind]int64{}, hash: hashWriter{h: 14695981039346656037}}
}

func (c *checker) failf(format string, args ...any) error {
	if c.err == nil {
		c.err = fmt.Errorf("event %d: "+format, append([]any{c.n}, args...)...)
	}
	return c.err
}

func (c *checker) mix(vals ...uint64) {
	for _, v := range vals {
		c.hash.h ^= v
		c.hash.h *= 1099511628211
	}
}

func (c *checker) WriteEvent(e trace.Event) error {
	defer func() { c.n++ }()
	c.mix(uint64(e.Kind), uint64(e.Marker), uint64(e.Stream), uint64(e.TimeNS), e.Addr, e.SizeBytes, e.Aux, uint64(e.Text), uint64(e.Stack))
	c.kinds[e.Kind]++
	if e.TimeNS < c.lastTime {
		return c.failf("time %d goes back from %d", e.TimeNS, c.lastTime)
	}
	c.lastTime = e.TimeNS
	if e.Kind.IsDevice() {
		return c.failf("device event %v in a synthetic trace", e.Kind)
	}
	if e.Kind != trace.KindFreeCompleted && len(c.pending) > 0 {
		return c.failf("%v while a free waits for its completion", e.Kind)
	}
	switch e.Kind {
	case trace.KindAlloc:
		if e.SizeBytes == 0 {
			return c.failf("zero-byte alloc")
		}
		if _, ok := c.live[e.Addr]; ok {
			return c.failf("alloc at %#x, already live", e.Addr)
		}
		c.live[e.Addr] = e.SizeBytes
		c.liveB += e.SizeBytes
		c.peak = max(c.peak, c.liveB)
	case trace.KindFreeRequested:
		s, ok := c.live[e.Addr]
		if !ok {
			return c.failf("free of %#x, not live", e.Addr)
		}
		if s != e.SizeBytes {
			return c.failf("free of %#x with size %d, allocated %d", e.Addr, e.SizeBytes, s)
		}
		delete(c.live, e.Addr)
		c.liveB -= s
		c.pending[e.Addr] = true
	case trace.KindFreeCompleted:
		if !c.pending[e.Addr] {
			return c.failf("free completed of %#x, not requested", e.Addr)
		}
		delete(c.pending, e.Addr)
	case trace.KindMarker:
		c.markers[e.Marker]++
		if int(e.Text) >= len(c.strings) {
			return c.failf("marker text %d undefined", e.Text)
		}
	default:
		return c.failf("unexpected kind %v", e.Kind)
	}
	if e.Stack != trace.NoStack && int(e.Stack) > c.stacks {
		return c.failf("stack %d undefined", e.Stack)
	}
	return nil
}

func (c *checker) String(s string) trace.StringID {
	if s == "" {
		return trace.NoString
	}
	for i, x := range c.strings {
		if x == s {
			return trace.StringID(i)
		}
	}
	c.strings = append(c.strings, s)
	return trace.StringID(len(c.strings) - 1)
}

func (c *checker) Stack(frames []trace.Frame) trace.StackID {
	if len(frames) == 0 {
		return trace.NoStack
	}
	c.stacks++
	return trace.StackID(c.stacks)
}

func generate(t testing.TB, cfg Config) (*checker, *Stats) {
	t.Helper()
	c := newChecker(t)
	st, err := Generate(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c, st
}

func smallConfig(kinds ...AgentKind) Config {
	cfg := DefaultConfig()
	cfg.Events = 60_000
	if len(kinds) > 0 {
		cfg.Kinds = kinds
	}
	return cfg
}

func TestStreamIsValid(t *testing.T) {
	for _, kinds := range [][]AgentKind{{Encode}, {Decode}, {Train}, {Encode, Decode, Train}} {
		for _, eager := range []bool{true, false} {
			name := fmt.Sprintf("%v/eager=%t", kinds, eager)
			t.Run(name, func(t *testing.T) {
				cfg := smallConfig(kinds...)
				cfg.EagerAttention = eager
				cfg.StreamPerAgent = len(kinds) > 1
				c, st := generate(t, cfg)
				if st.Events != c.n {
					t.Errorf("stats say %d events, sink saw %d", st.Events, c.n)
				}
				if st.Events < cfg.Events {
					t.Errorf("%d events, want at least the target %d", st.Events, cfg.Events)
				}
				if st.Allocs != c.kinds[trace.KindAlloc] || st.Frees != c.kinds[trace.KindFreeRequested] ||
					st.Frees != c.kinds[trace.KindFreeCompleted] {
					t.Errorf("stats %+v disagree with events %v", st, c.kinds)
				}
				if c.peak != st.PeakLiveBytes {
					t.Errorf("peak live %d, stats say %d", c.peak, st.PeakLiveBytes)
				}
				// Everything but the persistent state is freed by the end.
				if c.liveB != st.PersistentBytes || st.FinalLiveBytes != st.PersistentBytes {
					t.Errorf("live at end %d (stats %d), want the persistent %d", c.liveB, st.FinalLiveBytes, st.PersistentBytes)
				}
				if st.WeightBytes == 0 || st.PersistentBytes < st.WeightBytes {
					t.Errorf("weights %d, persistent %d", st.WeightBytes, st.PersistentBytes)
				}
				if c.markers[trace.MarkerStep] != st.Requests || st.Requests == 0 {
					t.Errorf("%d step markers, %d requests", c.markers[trace.MarkerStep], st.Requests)
				}
				if c.markers[trace.MarkerAgent] < int64(cfg.Agents) {
					t.Errorf("%d agent markers for %d agents", c.markers[trace.MarkerAgent], cfg.Agents)
				}
				if st.DurationNS <= 0 || st.DurationNS != c.lastTime {
					t.Errorf("duration %d, last event at %d", st.DurationNS, c.lastTime)
				}
			})
		}
	}
}

func TestWeightsAreTheModel(t *testing.T) {
	cfg := smallConfig()
	cfg.Events = 1
	_, st := generate(t, cfg)
	// BERT-base: 109,482,240 parameters (without buffers) in fp32.
	const bertParams = 109_482_240
	buffers := uint64(2 * 512 * 8)
	want := uint64(cfg.Agents) * (bertParams*4 + buffers)
	if st.WeightBytes != want {
		t.Errorf("weights of %d BERT-base: %d bytes, want %d", cfg.Agents, st.WeightBytes, want)
	}
	cfg.Kinds = []AgentKind{Decode}
	_, st = generate(t, cfg)
	const gpt2Params = 124_439_808
	if want := uint64(cfg.Agents) * gpt2Params * 4; st.WeightBytes != want {
		t.Errorf("weights of %d GPT-2: %d bytes, want %d", cfg.Agents, st.WeightBytes, want)
	}
	// Training keeps AdamW's two moments of every parameter (with the
	// classification head) on top of the weights.
	cfg.Kinds = []AgentKind{Train}
	cfg.Events = 5000
	_, st = generate(t, cfg)
	trainParams := uint64(bertParams + 768*numLabels + numLabels)
	if want := uint64(cfg.Agents) * (trainParams*4 + buffers); st.WeightBytes != want {
		t.Errorf("weights of %d training BERTs: %d bytes, want %d", cfg.Agents, st.WeightBytes, want)
	}
	// Not every agent may have stepped yet: the state is a whole number of
	// agents' worth, at least one.
	if st.WorkspaceBytes != 65<<20 {
		t.Errorf("cuBLAS workspaces %d bytes, want 33 MiB on the one stream and 32 MiB on autograd's thread", st.WorkspaceBytes)
	}
	opt := st.PersistentBytes - st.WeightBytes - st.WorkspaceBytes
	per := 2 * trainParams * 4
	if opt == 0 || opt%per != 0 || opt/per > uint64(cfg.Agents) {
		t.Errorf("optimizer state %d bytes, want a multiple (1..%d) of %d", opt, cfg.Agents, per)
	}
}

func TestDeterministic(t *testing.T) {
	for _, kinds := range [][]AgentKind{{Encode}, {Encode, Decode, Train}} {
		cfg := smallConfig(kinds...)
		a, sa := generate(t, cfg)
		b, sb := generate(t, cfg)
		if a.hash.h != b.hash.h || *sa != *sb {
			t.Errorf("%v: same seed, different streams (%x vs %x)", kinds, a.hash.h, b.hash.h)
		}
		cfg.Seed++
		c, _ := generate(t, cfg)
		if c.hash.h == a.hash.h {
			t.Errorf("%v: seeds %d and %d give the same stream", kinds, cfg.Seed-1, cfg.Seed)
		}
	}
}

// TestWritesATrace goes through the trace writer and reader: the file reads
// back with the same events and a synthetic header.
func TestWritesATrace(t *testing.T) {
	cfg := smallConfig(Encode, Decode)
	cfg.Events = 20_000
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, cfg.Header())
	if err != nil {
		t.Fatal(err)
	}
	st, err := Generate(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := trace.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	h := r.Header()
	if h.Producer != trace.ProducerSynthetic || h.Tags["seed"] != "1" || !strings.Contains(h.Tags["synth"], "kinds=encode,decode") {
		t.Errorf("header %+v", h)
	}
	c := newChecker(t)
	c.strings = nil
	var n int64
	agents := map[string]bool{}
	for {
		e, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if e.Kind == trace.KindMarker && e.Marker == trace.MarkerAgent {
			agents[r.String(e.Text)] = true
		}
		if e.Kind == trace.KindAlloc && e.Stack != trace.NoStack {
			if fr := r.Stack(e.Stack); len(fr) != 2 || !strings.HasPrefix(r.String(fr[0].Func), "aten::") {
				t.Fatalf("event %d: stack %v", n, fr)
			}
		}
	}
	if n != st.Events {
		t.Errorf("read %d events, wrote %d", n, st.Events)
	}
	if len(agents) != cfg.Agents {
		t.Errorf("agents %v, want %d", agents, cfg.Agents)
	}
}

func TestValidate(t *testing.T) {
	bad := map[string]func(*Config){
		"events":     func(c *Config) { c.Events = 0 },
		"agents":     func(c *Config) { c.Agents = 0 },
		"batch":      func(c *Config) { c.BatchSizes = []int{0} },
		"weights":    func(c *Config) { c.BatchWeights = []float64{1} },
		"seq":        func(c *Config) { c.SeqMin, c.SeqMax = 10, 5 },
		"seqmax":     func(c *Config) { c.SeqMax = 513 },
		"freeprob":   func(c *Config) { c.FreeProb = 1 },
		"heads":      func(c *Config) { c.Encoder.Heads = 7 },
		"decode len": func(c *Config) { c.Kinds = []AgentKind{Decode}; c.DecodeMax = 1000 },
		"kind":       func(c *Config) { c.Kinds = []AgentKind{9} },
		"nan prob":   func(c *Config) { c.FreeProb = math.NaN() },
		"inf weight": func(c *Config) { c.BatchWeights = []float64{1, math.Inf(1), 1} },
		"nan weight": func(c *Config) { c.BatchWeights = []float64{1, math.NaN(), 1} },
		"inf flops":  func(c *Config) { c.FLOPS = math.Inf(1) },
		"nan bw":     func(c *Config) { c.MemBW = math.NaN() },
		// Past these the generator's memory or the trace's sizes blow up
		// (10M agents died of a fatal out-of-memory error).
		"10M agents":   func(c *Config) { c.Agents = 10_000_000 },
		"many agents":  func(c *Config) { c.Agents = MaxAgents + 1 },
		"many events":  func(c *Config) { c.Events = MaxEvents + 1 },
		"layers":       func(c *Config) { c.Encoder.Layers = 1 << 30 },
		"hidden":       func(c *Config) { c.Encoder.Hidden, c.Encoder.Heads = 1<<30, 1 },
		"vocab":        func(c *Config) { c.Kinds = []AgentKind{Decode}; c.Decoder.Vocab = 1 << 40 },
		"huge weights": func(c *Config) { c.Agents = MaxAgents; c.Encoder.Vocab, c.Encoder.Hidden = MaxVocab, MaxHidden },
		"huge logits": func(c *Config) {
			c.Kinds, c.BatchSizes, c.Decoder.MaxPositions, c.SeqMax = []AgentKind{Decode}, []int{65536}, MaxPositions, 1<<19
		},
		"huge scores": func(c *Config) {
			c.EagerAttention, c.BatchSizes, c.Encoder.MaxPositions, c.SeqMax = true, []int{65536}, 1<<16, 1<<16
		},
		"decode neg": func(c *Config) { c.DecodeMin = -1 },
	}
	for name, mod := range bad {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := Generate(newChecker(t), cfg); err == nil {
			t.Errorf("%s: Generate took it", name)
		}
	}
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
	cfg.Agents = MaxAgents
	if err := cfg.Validate(); err != nil {
		t.Errorf("%d agents: %v", MaxAgents, err)
	}
}

// discard is a Sink that keeps nothing.
type discard struct{ n trace.StringID }

func (d *discard) WriteEvent(trace.Event) error { return nil }
func (d *discard) String(string) trace.StringID { d.n++; return d.n }
func (d *discard) Stack([]trace.Frame) trace.StackID {
	d.n++
	return trace.StackID(d.n)
}

// TestMemoryDoesNotGrow generates a short and a ten-times longer trace to a
// discarding sink: the heap in use after each must stay under a bound that
// does not depend on the length.
func TestMemoryDoesNotGrow(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a million events")
	}
	heapAfter := func(events int64) uint64 {
		cfg := DefaultConfig()
		cfg.Kinds = []AgentKind{Encode, Decode, Train}
		cfg.Events = events
		runtime.GC()
		var st *Stats
		var ms runtime.MemStats
		var err error
		d := &discard{}
		// Sample the heap while the generator is live, from the sink.
		s := &sampler{Sink: d, every: events / 16}
		st, err = Generate(s, cfg)
		if err != nil || st.Events < events {
			t.Fatal(err, st)
		}
		runtime.ReadMemStats(&ms)
		return max(s.maxHeap, ms.HeapInuse)
	}
	small, large := heapAfter(100_000), heapAfter(1_000_000)
	const bound = 64 << 20
	if large > bound {
		t.Errorf("heap %d MiB generating a million events, bound %d MiB", large>>20, bound>>20)
	}
	t.Logf("heap in use: %d KiB at 100k events, %d KiB at 1M", small>>10, large>>10)
}

// sampler reads the heap size every so many events.
type sampler struct {
	trace.Sink
	every, n int64
	maxHeap  uint64
}

func (s *sampler) WriteEvent(e trace.Event) error {
	s.n++
	if s.every > 0 && s.n%s.every == 0 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.maxHeap = max(s.maxHeap, ms.HeapInuse)
	}
	return s.Sink.WriteEvent(e)
}

func TestSinkErrorStops(t *testing.T) {
	cfg := smallConfig()
	s := &failing{after: 1000}
	st, err := Generate(s, cfg)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err %v", err)
	}
	if st.Events != 1001 || s.calls != 1001 {
		t.Errorf("%d events counted, %d written after the error at 1001", st.Events, s.calls)
	}
}

type failing struct {
	discard
	after, calls int64
}

func (f *failing) WriteEvent(trace.Event) error {
	f.calls++
	if f.calls > f.after {
		return fmt.Errorf("disk full")
	}
	return nil
}

func TestHistAndDistance(t *testing.T) {
	var a, b Hist
	for _, v := range []uint64{0, 1, 2, 3, 4, 1 << 40} {
		a.Add(v)
	}
	if a[0] != 1 || a[1] != 1 || a[2] != 2 || a[3] != 1 || a[41] != 1 || a.Total() != 6 {
		t.Errorf("buckets %v", a)
	}
	b.Add(1 << 40)
	if d := TotalVariation(a.Fractions(), b.Fractions()); d < 0.8333 || d > 0.8334 {
		t.Errorf("distance %v, want 5/6", d)
	}
	if d := TotalVariation(a.Fractions(), a.Fractions()); d != 0 {
		t.Errorf("self distance %v", d)
	}
}
