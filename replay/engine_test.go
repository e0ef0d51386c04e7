package replay

import (
	"bytes"
	"errors"
	"io"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

const mib = 1 << 20

// segPolicy is a test policy: every block is its own device segment,
// rounded up to 1 MiB; freed segments are cached and reused by the
// smallest cached one that fits; on a refusal it releases its cache and
// retries once.
type segPolicy struct {
	dev      driver.Device
	cached   []driver.Block // free segments
	live     map[uint64]driver.Block
	retries  int64
	exact    bool
	handles  uint32 // the last Handle handed out
	badFrees int    // frees passed a Block other than the one Malloc returned
}

func newSegPolicy(dev driver.Device, _ *trace.Header) (driver.Policy, error) {
	return &segPolicy{dev: dev, live: map[uint64]driver.Block{}}, nil
}

func (p *segPolicy) Name() string { return "seg" }

func (p *segPolicy) Malloc(size uint64, s trace.StreamID) (driver.Block, error) {
	n := (size + mib - 1) / mib * mib
	best := -1
	for i, b := range p.cached {
		if b.SizeBytes >= n && (best < 0 || b.SizeBytes < p.cached[best].SizeBytes) {
			best = i
		}
	}
	if best >= 0 {
		b := p.cached[best]
		p.cached = append(p.cached[:best], p.cached[best+1:]...)
		p.live[b.Addr] = b
		return b, nil
	}
	addr, ok := p.dev.Malloc(n, s)
	if !ok {
		p.EmptyCache()
		p.retries++
		if addr, ok = p.dev.Malloc(n, s); !ok {
			return driver.Block{}, &driver.OOMError{SizeBytes: size, AllocBytes: n, Stream: s, Reason: "test"}
		}
	}
	p.handles++
	b := driver.Block{Addr: addr, SizeBytes: n, Handle: p.handles}
	p.live[addr] = b
	return b, nil
}

func (p *segPolicy) FreeRequested(b driver.Block) { p.checkHandle(b) }

func (p *segPolicy) FreeCompleted(b driver.Block) {
	p.checkHandle(b)
	p.cached = append(p.cached, p.live[b.Addr])
	delete(p.live, b.Addr)
}

// checkHandle counts frees passed a Block other than the one Malloc returned.
func (p *segPolicy) checkHandle(b driver.Block) {
	if l, ok := p.live[b.Addr]; !ok || l != b {
		p.badFrees++
	}
}

func (p *segPolicy) EmptyCache() {
	sort.Slice(p.cached, func(i, j int) bool { return p.cached[i].Addr < p.cached[j].Addr })
	for _, b := range p.cached {
		p.dev.Free(b.Addr, b.SizeBytes)
	}
	p.cached = p.cached[:0]
}

func (p *segPolicy) Stats() driver.Stats {
	var largest uint64
	for _, b := range p.cached {
		largest = max(largest, b.SizeBytes)
	}
	return driver.Stats{LargestFreeBytes: largest, AllocRetries: p.retries}
}

func (p *segPolicy) Reproduces(h *trace.Header) bool {
	return p.exact && h.Producer == trace.ProducerPyTorch
}

func exactSegPolicy(dev driver.Device, h *trace.Header) (driver.Policy, error) {
	p, _ := newSegPolicy(dev, h)
	p.(*segPolicy).exact = true
	return p, nil
}

func traceOf(t testing.TB, h *trace.Header, evs []trace.Event) *trace.Reader {
	t.Helper()
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
	r, err := trace.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func alloc(t int64, addr, size uint64) trace.Event {
	return trace.Event{Kind: trace.KindAlloc, TimeNS: t, Addr: addr, SizeBytes: size}
}
func freeReq(t int64, addr uint64) trace.Event {
	return trace.Event{Kind: trace.KindFreeRequested, TimeNS: t, Addr: addr}
}
func freeDone(t int64, addr uint64) trace.Event {
	return trace.Event{Kind: trace.KindFreeCompleted, TimeNS: t, Addr: addr}
}

// metricsTrace: A (10 MiB) is freed and cached; B (30 MiB) makes reserved
// peak at 40 MiB with 30 MiB active; C reuses A's segment; B is freed; the
// cache is emptied.
func metricsTrace() []trace.Event {
	const A, B, C = 0xa000, 0xb000, 0xc000
	return []trace.Event{
		alloc(1000, A, 10*mib-100),
		freeReq(1010, A), freeDone(1010, A),
		alloc(1020, B, 30*mib-200),
		alloc(1030, C, 5*mib),
		freeReq(1040, B), freeDone(1040, B),
		{Kind: trace.KindEmptyCache, TimeNS: 1050},
	}
}

func TestMetrics(t *testing.T) {
	r := traceOf(t, &trace.Header{Producer: trace.ProducerSynthetic}, metricsTrace())
	res, err := Run(r, newSegPolicy, Config{})
	if err != nil {
		t.Fatal(err)
	}
	fr := res.Fragmentation
	check := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if res.Events != 8 || res.Allocs != 3 {
		t.Errorf("events %d allocs %d", res.Events, res.Allocs)
	}
	if res.PeakReservedBytes != 40*mib || fr.PeakIndex != 3 {
		t.Errorf("peak reserved %d at %d, want 40 MiB at event 3", res.PeakReservedBytes, fr.PeakIndex)
	}
	if res.FinalReservedBytes != 10*mib || res.PeakActiveBytes != 40*mib || res.PeakAllocatedBytes != 40*mib {
		t.Errorf("final reserved %d peak active %d allocated %d", res.FinalReservedBytes, res.PeakActiveBytes, res.PeakAllocatedBytes)
	}
	if res.PeakRequestedBytes != 35*mib-200 {
		t.Errorf("peak requested %d", res.PeakRequestedBytes)
	}
	check("at_peak_pct", fr.AtPeakPct, 25)
	check("peak_ratio_pct", fr.PeakRatioPct, 0)
	// frag after each event: 0, 0, 100, 25, 0, 0, 75, 0, each held 10 ns
	// except the zero-length ones: (100+25+75)*10 / 50
	check("time_weighted_pct", fr.TimeWeightedPct, 40)
	check("external_pct", fr.ExternalPct, 0)
	check("overhead_ratio", fr.OverheadRatio, float64(40*mib)/float64(35*mib-200))
	if fr.InternalBytes != 200 {
		t.Errorf("internal at peak %d, want 200", fr.InternalBytes)
	}
	if res.DeviceAllocs != 2 || res.DeviceFrees != 1 {
		t.Errorf("device allocs/frees %d/%d, want 2/1", res.DeviceAllocs, res.DeviceFrees)
	}
	if res.Fidelity.Checked {
		t.Error("fidelity checked on a synthetic trace")
	}
}

func TestTimeWeightedFallsBackToEventCount(t *testing.T) {
	evs := metricsTrace()
	for i := range evs {
		evs[i].TimeNS = 0
	}
	res, err := Run(traceOf(t, &trace.Header{}, evs), newSegPolicy, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Fragmentation.TimeWeightedPct, (100+25+75)/8.0; math.Abs(got-want) > 1e-9 {
		t.Fatalf("time_weighted_pct = %v, want %v", got, want)
	}
}

// TestFreesPassTheBlock checks that the engine passes every free the
// Block Malloc returned, handle included, with frees completing at once,
// held back, and after an OOM.
func TestFreesPassTheBlock(t *testing.T) {
	var ps []*segPolicy
	f := func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
		p, err := newSegPolicy(dev, h)
		ps = append(ps, p.(*segPolicy))
		return p, err
	}
	evs := metricsTrace()
	immediate := []trace.Event{alloc(1, 0xa, mib), alloc(2, 0xb, mib), freeReq(3, 0xa), alloc(4, 0xc, 2*mib), freeReq(5, 0xb), freeReq(6, 0xc)}
	oom := []trace.Event{alloc(1, 0xa, 10*mib), alloc(2, 0xb, 20*mib), freeReq(3, 0xb), freeDone(3, 0xb), freeReq(4, 0xa), freeDone(4, 0xa)}
	for _, r := range []*trace.Reader{
		traceOf(t, &trace.Header{}, evs),
		traceOf(t, &trace.Header{Producer: trace.ProducerLive}, immediate),
		traceOf(t, &trace.Header{}, oom),
	} {
		if _, err := Run(r, f, Config{CapacityBytes: 24 * mib}); err != nil {
			t.Fatal(err)
		}
	}
	if len(ps) != 3 {
		t.Fatalf("%d policies built, want 3", len(ps))
	}
	for i, p := range ps {
		if p.handles == 0 || p.badFrees != 0 {
			t.Errorf("trace %d: %d blocks handed out, %d frees passed another block", i, p.handles, p.badFrees)
		}
	}
}

func TestUnknownFree(t *testing.T) {
	evs := []trace.Event{alloc(1, 0x1000, 100), freeReq(2, 0x2000)}
	_, err := Run(traceOf(t, &trace.Header{}, evs), newSegPolicy, Config{})
	if err == nil || !strings.Contains(err.Error(), "event 1: free of unknown address 0x2000") {
		t.Fatalf("err = %v", err)
	}
}

func TestImmediateFreesWithoutCompletion(t *testing.T) {
	// no free_completed anywhere: frees apply at once, so B reuses A
	evs := []trace.Event{alloc(1, 0x1000, mib), freeReq(2, 0x1000), alloc(3, 0x2000, mib), freeReq(4, 0x2000)}
	res, err := Run(traceOf(t, &trace.Header{Producer: trace.ProducerLive}, evs), newSegPolicy, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if res.PeakReservedBytes != mib || res.DeviceAllocs != 1 {
		t.Fatalf("peak reserved %d device allocs %d: frees were not immediate", res.PeakReservedBytes, res.DeviceAllocs)
	}
}

func TestOOMIsReportedAndItsFreesSkipped(t *testing.T) {
	evs := []trace.Event{
		alloc(1, 0x1000, 10*mib), freeReq(2, 0x1000), freeDone(2, 0x1000),
		alloc(3, 0x2000, 20*mib), // 10 cached + 20 > 24: release, retry, fits
		alloc(4, 0x3000, 8*mib),  // 20 + 8 > 24: OOM
		freeReq(5, 0x3000), freeDone(5, 0x3000),
	}
	res, err := Run(traceOf(t, &trace.Header{}, evs), newSegPolicy, Config{CapacityBytes: 24 * mib})
	if err != nil {
		t.Fatal(err)
	}
	if res.OOMs != 1 || len(res.OOMEvents) != 1 || res.AllocRetries != 2 {
		t.Fatalf("OOMs %d retries %d", res.OOMs, res.AllocRetries)
	}
	o := res.OOMEvents[0]
	if o.Index != 4 || o.SizeBytes != 8*mib || o.ReservedBytes != 20*mib || o.FreeCachedBytes != 0 || o.Fragmentation {
		t.Fatalf("OOM %+v", o)
	}
}

func TestOutsideAndFraction(t *testing.T) {
	evs := []trace.Event{alloc(1, 0x1000, 11*mib), alloc(2, 0x2000, 11*mib)}
	res, err := Run(traceOf(t, &trace.Header{}, evs), newSegPolicy, Config{CapacityBytes: 24 * mib, OutsideBytes: 8 * mib})
	if err != nil || res.OOMs != 1 {
		t.Fatalf("outside bytes: OOMs %d err %v", res.OOMs, err)
	}
	res, err = Run(traceOf(t, &trace.Header{}, evs), newSegPolicy, Config{CapacityBytes: 40 * mib, Fraction: 0.5})
	if err != nil || res.OOMs != 1 {
		t.Fatalf("fraction: OOMs %d err %v", res.OOMs, err)
	}
	// a set_fraction event lifts the cap
	evs = []trace.Event{alloc(1, 0x1000, 10*mib),
		{Kind: trace.KindSetFraction, Aux: math.Float64bits(1)}, alloc(2, 0x2000, 10*mib)}
	res, err = Run(traceOf(t, &trace.Header{MemoryFraction: 0.5}, evs), newSegPolicy, Config{CapacityBytes: 40 * mib})
	if err != nil || res.OOMs != 0 || res.PeakReservedBytes != 20*mib {
		t.Fatalf("set_fraction: OOMs %d peak %d err %v", res.OOMs, res.PeakReservedBytes, err)
	}
}

func TestInjectedEmptyCache(t *testing.T) {
	res, err := Run(traceOf(t, &trace.Header{}, metricsTrace()), newSegPolicy, Config{EmptyCacheEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A's segment is released before B arrives: reserved peaks at 30+5 MiB
	if res.PeakReservedBytes != 35*mib || res.FinalReservedBytes != 5*mib {
		t.Fatalf("peak %d final %d", res.PeakReservedBytes, res.FinalReservedBytes)
	}
	res, err = Run(traceOf(t, &trace.Header{}, metricsTrace()), newSegPolicy, Config{DefragThresholdPct: 50})
	if err != nil {
		t.Fatal(err)
	}
	if res.PeakReservedBytes != 35*mib {
		t.Fatalf("defrag threshold: peak %d", res.PeakReservedBytes)
	}
}

func TestMinCapacity(t *testing.T) {
	evs := metricsTrace()
	open := func() (*trace.Reader, io.Closer, error) {
		return traceOf(t, &trace.Header{}, evs), io.NopCloser(nil), nil
	}
	got, err := MinCapacity(open, newSegPolicy, Config{})
	if err != nil {
		t.Fatal(err)
	}
	// B (30) with C (5) live needs 35 MiB: 36 at 2 MiB granularity
	if got != 36*mib {
		t.Fatalf("min capacity %d MiB, want 36", got/mib)
	}
}

func TestFidelity(t *testing.T) {
	h := &trace.Header{Producer: trace.ProducerPyTorch}
	good := []trace.Event{
		{Kind: trace.KindSegmentAlloc, Addr: 0x7f5500000000, SizeBytes: 2 * mib},
		alloc(1, 0x7f5500000000, 2*mib),
		{Kind: trace.KindSegmentAlloc, Addr: 0x7f5600000000, SizeBytes: 4 * mib},
		alloc(2, 0x7f5600000000, 3*mib+5),
	}
	res, err := Run(traceOf(t, h, good), exactSegPolicy, Config{})
	if err != nil {
		t.Fatal(err)
	}
	fd := res.Fidelity
	if !fd.Checked || fd.Allocs != 2 || fd.AllocsAtRecordedAddress != 2 || fd.DeviceEvents != 2 || fd.DeviceEventsMatched != 2 || fd.FirstMismatch != "" {
		t.Fatalf("fidelity %+v", fd)
	}
	// the policy is not the recorded one: not checked
	res, _ = Run(traceOf(t, h, good), newSegPolicy, Config{})
	if res.Fidelity.Checked {
		t.Fatal("checked with a policy that does not reproduce the trace")
	}
	bad := append([]trace.Event{}, good...)
	bad[2].SizeBytes = 6 * mib // the real allocator asked for 6 MiB
	res, err = Run(traceOf(t, h, bad), exactSegPolicy, Config{})
	if err != nil {
		t.Fatal(err)
	}
	fd = res.Fidelity
	if fd.AllocsAtRecordedAddress != 1 || fd.DeviceEventsMatched != 1 ||
		!strings.Contains(fd.FirstMismatch, "event 3: alloc of 3145733 bytes") ||
		!strings.Contains(fd.FirstMismatch, "recorded segment_alloc 0x7f5600000000+6291456") ||
		!strings.Contains(fd.FirstMismatch, "replayed segment_alloc") {
		t.Fatalf("fidelity %+v", fd)
	}
}

func TestObserverSeesEveryEvent(t *testing.T) {
	var n int64
	var lastReserved uint64
	cfg := Config{Observer: func(s *Sample) {
		if s.Index != n {
			t.Fatalf("sample index %d, want %d", s.Index, n)
		}
		n++
		lastReserved = s.ReservedBytes
	}}
	res, err := Run(traceOf(t, &trace.Header{}, metricsTrace()), newSegPolicy, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n != res.Events || lastReserved != res.FinalReservedBytes {
		t.Fatalf("observer saw %d events, last reserved %d", n, lastReserved)
	}
}

func TestParseCapacity(t *testing.T) {
	for s, want := range map[string]uint64{
		"24GiB": 24 << 30, "80G": 80 << 30, "150109880320": 150109880320, "h200": 150109880320,
		"rtx4090": 24 << 30, "A100-80G": 80 << 30, "1.5GiB": 3 << 29, "512MiB": 512 << 20, "2GB": 2e9,
		"256TiB": MaxSizeBytes, "281474976710656": MaxSizeBytes,
	} {
		got, err := ParseCapacity(s)
		if err != nil || got != want {
			t.Errorf("ParseCapacity(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	// Past 2^48 bytes a size would wrap the sums it enters (2 × 2^63 is 0).
	for _, s := range []string{"", "abc", "12XB", "-1", "9223372036854775808", "18446744073709551615",
		"18446744073709551616", "281474976710657", "257TiB", "1e300GiB", "NaN", "Inf", "..GiB"} {
		if _, err := ParseCapacity(s); err == nil {
			t.Errorf("ParseCapacity(%q) succeeded", s)
		}
	}
}

var _ = errors.Is

// compPolicy is segPolicy as a Completer and a Releaser: it counts the
// FreeRequested calls it gets and the MallocAfter calls, and notes any
// call after Release.
type compPolicy struct {
	segPolicy
	requested, mallocAfter, released int
	usedAfterRelease                 bool
}

func (p *compPolicy) FreeRequested(b driver.Block) {
	p.used()
	p.requested++
	p.segPolicy.FreeRequested(b)
}

func (p *compPolicy) FreeCompleted(b driver.Block) {
	p.used()
	p.segPolicy.FreeCompleted(b)
}

func (p *compPolicy) Malloc(size uint64, s trace.StreamID) (driver.Block, error) {
	p.used()
	return p.segPolicy.Malloc(size, s)
}

func (p *compPolicy) MallocAfter(freed []driver.Block, size uint64, s trace.StreamID) (driver.Block, uint64, error) {
	p.used()
	p.mallocAfter++
	for _, b := range freed {
		p.segPolicy.FreeCompleted(b)
	}
	b, err := p.segPolicy.Malloc(size, s)
	return b, p.segPolicy.Stats().StrandedBytes, err
}

func (p *compPolicy) Release() { p.released++ }

func (p *compPolicy) used() {
	if p.released > 0 {
		p.usedAfterRelease = true
	}
}

// TestCompleterGetsPairsWithTheNextAlloc checks that a Completer serves
// the allocs of a one-device replay through MallocAfter and gets no
// FreeRequested for a free_completed that directly follows its
// free_requested (but one for a free that completes later), that the
// Result is the one a plain policy gives, and that Run releases a
// Releaser once, after its last call.
func TestCompleterGetsPairsWithTheNextAlloc(t *testing.T) {
	const A, B, C, D = 0xa000, 0xb000, 0xc000, 0xd000
	evs := append(metricsTrace(),
		alloc(1060, D, 3*mib),
		freeReq(1070, C), freeReq(1075, D), freeDone(1080, C), freeDone(1085, D),
		alloc(1090, A, 2*mib),
		freeReq(1100, A), freeDone(1100, A),
	)
	h := &trace.Header{Producer: trace.ProducerSynthetic}
	want, err := Run(traceOf(t, h, evs), newSegPolicy, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var p *compPolicy
	got, err := Run(traceOf(t, h, evs), func(dev driver.Device, _ *trace.Header) (driver.Policy, error) {
		p = &compPolicy{segPolicy: segPolicy{dev: dev, live: map[uint64]driver.Block{}}}
		return p, nil
	}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := *got, *want; g.Policy != w.Policy || g.Events != w.Events || g.Fragmentation != w.Fragmentation ||
		g.PeakReservedBytes != w.PeakReservedBytes || g.FinalReservedBytes != w.FinalReservedBytes ||
		g.PeakActiveBytes != w.PeakActiveBytes || g.DeviceAllocs != w.DeviceAllocs || g.DeviceFrees != w.DeviceFrees {
		t.Errorf("Completer: %+v\nplain policy: %+v", g, w)
	}
	// The first free_requested waits for the engine to learn that frees
	// complete as recorded (step); of the rest, C and D complete later.
	if p.requested != 3 {
		t.Errorf("%d FreeRequested calls, want 3 (the first free, C and D)", p.requested)
	}
	// Every alloc after the first free goes through MallocAfter.
	if p.mallocAfter != 4 {
		t.Errorf("%d MallocAfter calls, want 4 (B, C, D and the second A)", p.mallocAfter)
	}
	if p.badFrees != 0 {
		t.Errorf("%d frees passed another Block than Malloc returned", p.badFrees)
	}
	if p.released != 1 || p.usedAfterRelease {
		t.Errorf("released %d times, used after: %v", p.released, p.usedAfterRelease)
	}
}

// TestSampleBlock checks that each sample carries the replayed block of its
// event (the block an alloc was served, the block a free returns) and that
// Replayed resolves a recorded address to it until its free completes.
func TestSampleBlock(t *testing.T) {
	evs := []trace.Event{alloc(1, 0xa, mib), alloc(2, 0xb, 3*mib), freeReq(3, 0xa), freeDone(4, 0xa),
		{Kind: trace.KindEmptyCache, TimeNS: 5}}
	served := map[uint64]driver.Block{}
	var seen int
	cfg := Config{Observer: func(s *Sample) {
		seen++
		ev := s.Event
		switch ev.Kind {
		case trace.KindAlloc:
			if !s.HasBlock || s.Block.SizeBytes < ev.SizeBytes {
				t.Fatalf("event %d: alloc sample with block %+v (has %v)", s.Index, s.Block, s.HasBlock)
			}
			served[ev.Addr] = s.Block
		case trace.KindFreeRequested, trace.KindFreeCompleted:
			if !s.HasBlock || s.Block != served[ev.Addr] {
				t.Errorf("event %d: free sample with block %+v, the alloc was served %+v", s.Index, s.Block, served[ev.Addr])
			}
		default:
			if s.HasBlock {
				t.Errorf("event %d (%v): a block %+v", s.Index, ev.Kind, s.Block)
			}
		}
		b, req, ok := s.Replayed(0xb)
		if want := s.Index >= 1; ok != want || ok && (b != served[0xb] || req != 3*mib) {
			t.Errorf("event %d: Replayed(0xb) = %+v, %d, %v", s.Index, b, req, ok)
		}
		_, _, ok = s.Replayed(0xa)
		if want := s.Index <= 2; ok != want {
			t.Errorf("event %d: Replayed(0xa) found %v, want %v", s.Index, ok, want)
		}
	}}
	if _, err := Run(traceOf(t, &trace.Header{}, evs), newSegPolicy, cfg); err != nil {
		t.Fatal(err)
	}
	if seen != len(evs) {
		t.Fatalf("%d samples for %d events", seen, len(evs))
	}
}
