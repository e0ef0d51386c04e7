package replay_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

const mib = 1 << 20

// op is one event of a hand-made trace: kind 'm' alloc, 'f' free
// (requested then completed), at time t (ms), block id, size.
type op struct {
	kind byte
	t    int64
	id   int
	size uint64
}

// traceBytes writes ops as a trace.
func traceBytes(t testing.TB, ops []op) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic})
	if err != nil {
		t.Fatal(err)
	}
	size := map[int]uint64{}
	addr := func(id int) uint64 { return 0x7f0000000000 + uint64(id)<<32 }
	for i, o := range ops {
		if i%2048 == 2047 {
			// many chunks: readers of long traces read as they go
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		ev := trace.Event{TimeNS: 1e12 + o.t*1e6, Addr: addr(o.id)}
		switch o.kind {
		case 'm':
			size[o.id] = o.size
			ev.Kind, ev.SizeBytes = trace.KindAlloc, o.size
		case 'f':
			ev.Kind, ev.SizeBytes = trace.KindFreeRequested, size[o.id]
			if err := w.WriteEvent(ev); err != nil {
				t.Fatal(err)
			}
			ev.Kind = trace.KindFreeCompleted
		}
		if err := w.WriteEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func opener(b []byte) func() (*trace.Reader, io.Closer, error) {
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(b))
		return r, io.NopCloser(nil), err
	}
}

func factory(t testing.TB, policy string) driver.Factory {
	t.Helper()
	f, err := allocator.NewFactory(policy, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// twoProcs: A allocates 100 MiB and frees it at 10 ms (its allocator
// caches the segment), then asks for 10 MiB at 30 ms; B, started 20 ms
// after A, asks for 100 MiB at once and frees it 20 ms later. The device
// leaves 150 MiB to the allocators.
func twoProcs(t testing.TB, policyA string, aFrees bool) []replay.Process {
	a := []op{{'m', 0, 1, 100 * mib}}
	if aFrees {
		a = append(a, op{'f', 10, 1, 0})
	}
	a = append(a, op{'m', 30, 2, 10 * mib})
	b := []op{{'m', 0, 1, 100 * mib}, {'f', 20, 1, 0}}
	return []replay.Process{
		{Name: "A", Open: opener(traceBytes(t, a)), Factory: factory(t, policyA)},
		{Name: "B", Open: opener(traceBytes(t, b)), Factory: factory(t, "caching"), OffsetNS: 20e6},
	}
}

const overhead = 10 * mib

func capacity() uint64 { return 150*mib + 2*overhead }

func TestCohostBlamesTheCachingProcess(t *testing.T) {
	res, err := replay.Cohost(twoProcs(t, "caching", true), replay.CohostConfig{CapacityBytes: capacity(), ContextOverheadBytes: overhead, Forecast: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.OOMs != 1 || len(res.OOMEvents) != 1 {
		t.Fatalf("OOMs = %d (%d listed), want 1", res.Total.OOMs, len(res.OOMEvents))
	}
	o := res.OOMEvents[0]
	if o.Process != 1 || o.Name != "B" || o.OOM.SizeBytes != 100*mib {
		t.Fatalf("OOM of process %d (%s), %d bytes; want B's 100 MiB", o.Process, o.Name, o.OOM.SizeBytes)
	}
	// A holds its 100 MiB segment cached; 50 MiB are left on the device.
	if o.AskedBytes != 100*mib || o.DeviceFreeBytes != 50*mib || o.ShortfallBytes != 50*mib {
		t.Errorf("asked %d, device free %d, shortfall %d; want 100, 50, 50 MiB", o.AskedBytes/mib, o.DeviceFreeBytes/mib, o.ShortfallBytes/mib)
	}
	if len(o.Holders) != 1 || o.Holders[0].Process != 0 || o.Holders[0].CachedFreeBytes != 100*mib ||
		o.Holders[0].ReleasableBytes != 100*mib || o.Holders[0].ActiveBytes != 0 {
		t.Errorf("holders = %+v, want A with 100 MiB cached free", o.Holders)
	}
	if !o.Avoidable || len(o.Blamed) != 1 || o.Blamed[0] != 0 || res.Total.AvoidableOOMs != 1 {
		t.Errorf("avoidable %v, blamed %v; want true, [0]", o.Avoidable, o.Blamed)
	}
	if got := res.Processes[1].Result.OOMs; got != 1 {
		t.Errorf("B's own result counts %d OOMs, want 1", got)
	}
	if got := res.Processes[0].Result.OOMs; got != 0 {
		t.Errorf("A's own result counts %d OOMs, want 0", got)
	}
	// B's forecast: short at its first event (the OOM, 50 MiB left).
	// A's: short at once (holding 100 MiB, 50 MiB left, it could not ask
	// for 100 MiB again); once it freed, its cached segment plus the free
	// 50 MiB make 150 MiB; after its 10 MiB split that segment, 90 MiB.
	fb, fa := res.Processes[1].Forecast, res.Processes[0].Forecast
	if fb == nil || fa == nil || fb.FirstShortfallIndex != 0 || fb.ShortfallHeadroomBytes != 50*mib ||
		fa.FirstShortfallIndex != 0 || fa.ShortfallHeadroomBytes != 50*mib {
		t.Fatalf("forecasts: B %+v, A %+v; want both short at 0 with 50 MiB", fb, fa)
	}
	var afterFree, afterSplit bool
	for _, p := range fa.Series {
		afterFree = afterFree || p.Index == 2 && p.HeadroomBytes == 150*mib
		afterSplit = afterSplit || p.Index == 3 && p.HeadroomBytes == 90*mib
	}
	if !afterFree || !afterSplit {
		t.Errorf("A's series %+v: want 150 MiB after its free, 90 MiB after its split", fa.Series)
	}
	// merged order: A's alloc and free (3 events) come before B's alloc
	if o.MergedIndex != 3 || o.MergedTimeNS != 20e6 {
		t.Errorf("merged index %d at %d ns, want 3 at 20 ms", o.MergedIndex, o.MergedTimeNS)
	}
}

func TestCohostIdealFreesInTime(t *testing.T) {
	res, err := replay.Cohost(twoProcs(t, "ideal", true), replay.CohostConfig{CapacityBytes: capacity(), ContextOverheadBytes: overhead})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.OOMs != 0 {
		t.Fatalf("OOMs = %d with A under ideal, want 0: %+v", res.Total.OOMs, res.OOMEvents)
	}
	// A's 10 MiB at 30 ms lands while B holds 100 MiB.
	if res.Total.PeakReservedBytes != 110*mib || res.Total.PeakUsedBytes != 110*mib+2*overhead {
		t.Errorf("total peak reserved %d MiB, used %d MiB; want 110, 130", res.Total.PeakReservedBytes/mib, res.Total.PeakUsedBytes/mib)
	}
}

func TestCohostNotAvoidableWhenLive(t *testing.T) {
	res, err := replay.Cohost(twoProcs(t, "caching", false), replay.CohostConfig{CapacityBytes: capacity(), ContextOverheadBytes: overhead})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OOMEvents) == 0 {
		t.Fatal("no OOM")
	}
	o := res.OOMEvents[0]
	if o.Avoidable || o.CachedFreeCovers || len(o.Blamed) != 0 || o.OthersCachedFreeBytes != 0 {
		t.Errorf("A holds its block live: avoidable %v blamed %v others cached %d; want false, none, 0", o.Avoidable, o.Blamed, o.OthersCachedFreeBytes)
	}
}

func TestCohostSharedClock(t *testing.T) {
	// recorded together: B's alloc happened 20 ms after A's first event
	// in the traces themselves (traceBytes times are absolute).
	ps := twoProcs(t, "caching", true)
	ps[1].OffsetNS = 0
	b := []op{{'m', 20, 1, 100 * mib}, {'f', 40, 1, 0}}
	ps[1].Open = opener(traceBytes(t, b))
	res, err := replay.Cohost(ps, replay.CohostConfig{CapacityBytes: capacity(), ContextOverheadBytes: overhead, SharedClock: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OOMEvents) != 1 || res.OOMEvents[0].MergedIndex != 3 || res.OOMEvents[0].MergedTimeNS != 20e6 || !res.OOMEvents[0].Avoidable {
		t.Fatalf("OOMs %+v: want B's at merged 3, 20 ms, avoidable", res.OOMEvents)
	}
	// without the shared clock both start at 0: B's alloc comes before
	// A's free, A's block is live, nothing to blame.
	res, err = replay.Cohost(ps, replay.CohostConfig{CapacityBytes: capacity(), ContextOverheadBytes: overhead})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OOMEvents) != 1 || res.OOMEvents[0].MergedIndex != 1 || res.OOMEvents[0].Avoidable {
		t.Fatalf("OOMs %+v: want B's at merged 1, not avoidable", res.OOMEvents)
	}
}

func TestCohostStrandedCacheNotReleasable(t *testing.T) {
	// B started at 100 ms: A has split its cached 100 MiB segment for its
	// 10 MiB request. A's 90 free MiB are cached but stranded: releasing
	// A's cache would not give them back.
	ps := twoProcs(t, "caching", true)
	ps[1].OffsetNS = 100e6
	res, err := replay.Cohost(ps, replay.CohostConfig{CapacityBytes: capacity(), ContextOverheadBytes: overhead})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OOMEvents) != 1 {
		t.Fatalf("OOMs %d, want 1", len(res.OOMEvents))
	}
	o := res.OOMEvents[0]
	if o.MergedIndex != 4 || o.MergedTimeNS != 100e6 {
		t.Errorf("merged index %d time %d, want 4 and 100 ms", o.MergedIndex, o.MergedTimeNS)
	}
	h := o.Holders[0]
	if h.ReservedBytes != 100*mib || h.CachedFreeBytes != 90*mib || h.ReleasableBytes != 0 || o.Avoidable {
		t.Errorf("A: %+v, avoidable %v; want 100 MiB reserved, 90 cached free, 0 releasable, not avoidable", h, o.Avoidable)
	}
	// 50 MiB short: A's 90 cached-free MiB would cover it, were they not stranded
	if o.ShortfallBytes != 50*mib || !o.CachedFreeCovers {
		t.Errorf("shortfall %d MiB, cached free covers %v; want 50 MiB, true", o.ShortfallBytes/mib, o.CachedFreeCovers)
	}
}

func TestCohostMinCapacity(t *testing.T) {
	ps := twoProcs(t, "caching", true)
	cfg := replay.CohostConfig{ContextOverheadBytes: overhead}
	mc, err := replay.CohostMinCapacity(ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ok := func(c uint64) bool {
		cc := cfg
		cc.CapacityBytes = c
		res, err := replay.Cohost(ps, cc)
		if err != nil {
			t.Fatal(err)
		}
		return res.Total.OOMs == 0
	}
	if mc%(2*mib) != 0 || !ok(mc) || ok(mc-2*mib) {
		t.Fatalf("min capacity %d MiB: completes %v, 2 MiB less completes %v", mc/mib, ok(mc), ok(mc-2*mib))
	}
	// caching: A's cached 100 MiB and B's 100 MiB at once, plus contexts
	if mc != 200*mib+2*overhead {
		t.Errorf("min capacity %d MiB, want 220", mc/mib)
	}
	// under ideal for A, A's free gives its 100 MiB back: B's 100 and
	// A's 10 MiB at once.
	ps[0].Factory = factory(t, "ideal")
	mi, err := replay.CohostMinCapacity(ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if mi != 110*mib+2*overhead {
		t.Errorf("min capacity with A ideal %d MiB, want 130", mi/mib)
	}
}

// realTrace returns the path of a real workload trace in traces/.
func realTrace(t testing.TB, name string) string {
	p := filepath.Join("..", "traces", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCohostRealMinCapacity co-hosts two real traces: in the everyday
// pass two short H200 recordings of the conformance set (empty_cache_mixed,
// whose empty_cache() calls give memory back mid-run, and ring_mixed, a
// ring buffer that starts mid-run with segments live: 21,000 events), in
// the long pass (FRAGSIM_LONG=1, without the race detector) the baseline
// and training workloads (227,000). The search and the replays are the
// same code at either length; TestCohostMinCapacity runs them on
// hand-made traces too.
func TestCohostRealMinCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	a, b := realTrace(t, "conformance/empty_cache_mixed.fst"), realTrace(t, "conformance/ring_mixed.fst")
	if os.Getenv("FRAGSIM_LONG") == "1" {
		a, b = realTrace(t, "baseline_s1.fst"), realTrace(t, "train_s1.fst")
	}
	fa, err := allocator.NewFactory("caching", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := []replay.Process{
		{Name: "baseline", Open: replay.OpenFile(a), Factory: fa},
		{Name: "train", Open: replay.OpenFile(b), Factory: fa},
	}
	cfg := replay.CohostConfig{ContextOverheadBytes: replay.DefaultContextOverheadBytes}
	free, err := replay.Cohost(ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if free.Total.OOMs != 0 {
		t.Fatalf("OOMs on an unlimited device: %d", free.Total.OOMs)
	}
	// each process alone, unconstrained, as replay measures it
	var sumPeaks uint64
	for i, p := range ps {
		r, err := replay.RunFile([]string{a, b}[i], p.Factory, replay.Config{CapacityBytes: 1 << 50})
		if err != nil {
			t.Fatal(err)
		}
		if r.PeakReservedBytes != free.Processes[i].Result.PeakReservedBytes {
			t.Errorf("%s: co-hosted unconstrained peak %d != alone %d", p.Name, free.Processes[i].Result.PeakReservedBytes, r.PeakReservedBytes)
		}
		sumPeaks += r.PeakReservedBytes
	}
	mc, err := replay.CohostMinCapacity(ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if limit := free.Total.PeakUsedBytes + 2*mib; mc > limit || free.Total.PeakReservedBytes > sumPeaks {
		t.Errorf("min capacity %d above the unconstrained peak used %d (+2 MiB rounding)", mc, free.Total.PeakUsedBytes)
	}
	run := func(c uint64) int64 {
		cc := cfg
		cc.CapacityBytes = c
		r, err := replay.Cohost(ps, cc)
		if err != nil {
			t.Fatal(err)
		}
		return r.Total.OOMs
	}
	if n := run(mc); n != 0 {
		t.Errorf("at min capacity %d: %d OOMs", mc, n)
	}
	if n := run(mc - 2*mib); n == 0 {
		t.Errorf("at min capacity − 2 MiB: no OOM")
	}
	t.Logf("peak used %d, sum of peaks %d + contexts, min capacity %d", free.Total.PeakUsedBytes, sumPeaks, mc)
}

// TestCohostMemoryBounded merges traces ten times longer than others
// and checks that the live heap during the merge does not grow with them.
func TestCohostMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	// mk writes the trace of n allocations and their frees to the files
	// named, once: the processes run the same trace. (Under -race every
	// freed object costs the detector its size at the next GC, and the
	// test collects hundreds of times: the garbage of building the trace
	// once per file, its op slice grown by doubling, was most of its
	// cost.)
	mk := func(n int, names ...string) []string {
		ops := make([]op, 0, 2*n)
		for i := 0; i < n; i++ {
			ops = append(ops, op{'m', int64(2 * i), i, uint64(1+i%7) * mib}, op{'f', int64(2*i + 1), i, 0})
		}
		data := traceBytes(t, ops)
		var paths []string
		for _, name := range names {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		return paths
	}
	peakHeap := func(n int) uint64 {
		ab := mk(n, "a.fst", "b.fst")
		a, b := ab[0], ab[1]
		runtime.GC()
		runtime.GC() // pooled encoders from the writing go at the second
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		var peak uint64
		reads := 0
		sample := func() {
			reads++
			if reads%2 != 0 {
				return
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base {
				peak = max(peak, ms.HeapAlloc-base)
			}
		}
		ps := []replay.Process{
			{Name: "a", Open: sampledOpen(a, sample), Factory: factory(t, "caching")},
			{Name: "b", Open: sampledOpen(b, sample), Factory: factory(t, "caching"), OffsetNS: 1},
		}
		res, err := replay.Cohost(ps, replay.CohostConfig{CapacityBytes: 1 << 30, Forecast: true})
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(2 * 3 * n); res.Total.Events != want {
			t.Errorf("merged %d events, want %d", res.Total.Events, want)
		}
		return peak
	}
	short, long := peakHeap(10000), peakHeap(100000)
	if short == 0 {
		t.Fatal("no heap sample taken")
	}
	t.Logf("peak live heap: %d B for 2×30k events, %d B for 2×300k", short, long)
	if long > 2*short+8<<20 {
		t.Errorf("live heap grows with trace length: %d B for 10× the events vs %d B", long, short)
	}
}

// BenchmarkCohost merges two hand-made traces of 60k events each.
func BenchmarkCohost(b *testing.B) {
	var ops []op
	for i := 0; i < 20000; i++ {
		ops = append(ops, op{'m', int64(2 * i), i, uint64(1+i%7) * mib}, op{'f', int64(2*i + 1), i, 0})
	}
	tb := traceBytes(b, ops)
	ps := []replay.Process{
		{Name: "a", Open: opener(tb), Factory: factory(b, "caching")},
		{Name: "b", Open: opener(tb), Factory: factory(b, "caching"), OffsetNS: 1},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := replay.Cohost(ps, replay.CohostConfig{CapacityBytes: 1 << 30, Forecast: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*120000)/b.Elapsed().Seconds()/1e6, "Mevents/s")
}

// sampledReader calls sample before every read of its file.
type sampledReader struct {
	f      *os.File
	sample func()
}

func (r *sampledReader) Read(p []byte) (int, error) {
	r.sample()
	return r.f.Read(p)
}

// sampledOpen opens path through small reads, each preceded by sample.
func sampledOpen(path string, sample func()) func() (*trace.Reader, io.Closer, error) {
	return func() (*trace.Reader, io.Closer, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		r, err := trace.NewReader(bufio.NewReaderSize(&sampledReader{f, sample}, 512))
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		return r, f, nil
	}
}

// TestCohostClockOverflow checks offsets and scales that put an event out of
// the merged clock's range: an error wrapping ErrClock, as a usage
// mistake, never a clock that wraps around and reorders the processes
// (which would blame the wrong one for an OOM).
func TestCohostClockOverflow(t *testing.T) {
	for _, tt := range []struct {
		name   string
		offset int64
		scale  float64
		bad    bool
	}{
		{"offset near the end", math.MaxInt64 - 5e6, 0, true},
		{"scale 1e300", 0, 1e300, true},
		{"scale 1e9", 20e6, 1e9, false},
		{"offset of 200 years", 200 * 365 * 24 * 3600 * 1e9, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ps := twoProcs(t, "caching", true)
			ps[1].OffsetNS, ps[1].Scale = tt.offset, tt.scale
			res, err := replay.Cohost(ps, replay.CohostConfig{CapacityBytes: capacity(), ContextOverheadBytes: overhead})
			if tt.bad {
				if !errors.Is(err, replay.ErrClock) || !strings.Contains(err.Error(), "B:") {
					t.Fatalf("err = %v, want one naming B and wrapping ErrClock", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// B's 100 MiB comes after A's free (B starts at 20 ms or
			// later): A's cache leaves it too little. A clock that
			// wrapped around would start B first, and A would fail.
			if res.Total.OOMs != 1 || res.OOMEvents[0].Name != "B" {
				t.Errorf("%d OOMs %+v, want one, of B", res.Total.OOMs, res.OOMEvents)
			}
		})
	}
}

// An overhead of 2^63 bytes for each of two processes sums to 0 in 64
// bits: a device with no room would then report no OOM. It is refused.
func TestCohostRefusesSizesThatWrap(t *testing.T) {
	for _, cfg := range []replay.CohostConfig{
		{CapacityBytes: capacity(), ContextOverheadBytes: 1 << 63},
		{CapacityBytes: 1 << 63},
		{CapacityBytes: capacity(), Outside: replay.OutsideModel{ReserveBytes: 1 << 62}},
	} {
		res, err := replay.Cohost(twoProcs(t, "caching", true), cfg)
		if err == nil || !strings.Contains(err.Error(), "above the largest size") {
			t.Errorf("%+v: %v, %v; want an error on the size", cfg, res, err)
		}
	}
}
