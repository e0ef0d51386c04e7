package replay_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

func TestHeadroom(t *testing.T) {
	cases := []struct {
		largest, devFree, cached, stranded, want uint64
	}{
		{0, 60 * mib, 0, 0, 60 * mib},
		{40 * mib, 30 * mib, 40 * mib, 0, 70 * mib},        // release the free segment
		{40 * mib, 30 * mib, 40 * mib, 40 * mib, 40 * mib}, // all stranded: the free block
		{0, 3*mib + 5, 0, 0, 2 * mib},                      // 2 MiB granularity
		{0, 0, mib, 2 * mib, 0},
	}
	for _, c := range cases {
		if got := replay.Headroom(c.largest, c.devFree, c.cached, c.stranded); got != c.want {
			t.Errorf("Headroom(%d, %d, %d, %d) = %d, want %d", c.largest, c.devFree, c.cached, c.stranded, got, c.want)
		}
	}
}

// On a 100 MiB device: 40 MiB (headroom 60 MiB), 30 MiB (headroom 30 MiB,
// below the 40 MiB asked before: the first shortfall, event 1), then the
// 40 MiB block freed (its cached segment can be released: 70 MiB).
func TestForecastFirstShortfall(t *testing.T) {
	b := traceBytes(t, []op{{'m', 0, 1, 40 * mib}, {'m', 1, 2, 30 * mib}, {'f', 2, 1, 0}})
	r, err := trace.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	fc := replay.NewForecaster(0)
	const capacity = 100 * mib
	res, err := replay.Run(r, factory(t, "caching"), replay.Config{CapacityBytes: capacity, Observer: fc.ForecastObserver(capacity, 0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if res.OOMs != 0 {
		t.Fatalf("OOMs %d", res.OOMs)
	}
	f := fc.Result()
	if f.FirstShortfallIndex != 1 || f.ShortfallHeadroomBytes != 30*mib || f.ShortfallRequestBytes != 40*mib {
		t.Errorf("first shortfall at %d (headroom %d, demand %d), want 1 (30 MiB, 40 MiB)", f.FirstShortfallIndex, f.ShortfallHeadroomBytes, f.ShortfallRequestBytes)
	}
	if f.MinHeadroomBytes != 30*mib || f.MaxRequestBytes != 40*mib || f.Shortfalls != 2 {
		t.Errorf("min headroom %d, max request %d, shortfalls %d; want 30 MiB, 40 MiB, 2 (events 1 and 2)", f.MinHeadroomBytes, f.MaxRequestBytes, f.Shortfalls)
	}
	want := []uint64{60 * mib, 30 * mib, 30 * mib, 70 * mib}
	if len(f.Series) != len(want) {
		t.Fatalf("series %+v, want %d points", f.Series, len(want))
	}
	for i, p := range f.Series {
		if p.HeadroomBytes != want[i] || p.Index != int64(i) {
			t.Errorf("point %d: %+v, want index %d headroom %d MiB", i, p, i, want[i]/mib)
		}
	}
}

func TestRunForecastUsesHeaderCapacity(t *testing.T) {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic, GPUTotalBytes: 100 * mib})
	if err != nil {
		t.Fatal(err)
	}
	for i, sz := range []uint64{40 * mib, 30 * mib} {
		if err := w.WriteEvent(trace.Event{Kind: trace.KindAlloc, TimeNS: int64(i + 1), Addr: uint64(i+1) << 32, SizeBytes: sz}); err != nil {
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
	calls := 0
	res, f, err := replay.RunForecast(r, factory(t, "caching"), replay.Config{OutsideBytes: 10 * mib, Observer: func(*replay.Sample) { calls++ }}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// 100 − 10 outside − 70 reserved: 20 MiB left after the second alloc
	if res.Events != 2 || calls != 2 || f.FirstShortfallIndex != 1 || f.MinHeadroomBytes != 20*mib {
		t.Errorf("events %d, observer calls %d, forecast %+v; want 2, 2, short at 1 with 20 MiB", res.Events, calls, f)
	}
}

// Without a capacity, the headroom has no bound: the forecast says the
// device is unlimited rather than report the engine's stand-in total.
func TestRunForecastUnlimited(t *testing.T) {
	for _, gpu := range []uint64{0, 100 * mib} {
		var buf bytes.Buffer
		w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic, GPUTotalBytes: gpu})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteEvent(trace.Event{Kind: trace.KindAlloc, TimeNS: 1, Addr: 1 << 32, SizeBytes: 40 * mib}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := trace.NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		_, f, err := replay.RunForecast(r, factory(t, "caching"), replay.Config{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := gpu == 0; f.Unlimited != want || want && (f.MinHeadroomBytes != 0 || len(f.Series) != 0) ||
			!want && f.MinHeadroomBytes != 60*mib {
			t.Errorf("gpu %d: forecast %+v; want unlimited %v", gpu, f, want)
		}
	}
}

func TestForecasterDownsamplesKeepingMinimum(t *testing.T) {
	fc := replay.NewForecaster(10)
	fc.Request(5)
	for i := 0; i < 1000; i++ {
		h := uint64(100 + i%50)
		if i == 537 {
			h = 3 // the one dip below demand
		}
		fc.Observe(int64(i), int64(i)*10, h)
	}
	f := fc.Result()
	if len(f.Series) > 10 || len(f.Series) < 3 {
		t.Fatalf("%d points, want at most 10", len(f.Series))
	}
	found := false
	for _, p := range f.Series {
		if p.HeadroomBytes == 3 && p.Index == 537 {
			found = true
		}
	}
	if !found || f.FirstShortfallIndex != 537 || f.Shortfalls != 1 || f.MinHeadroomBytes != 3 {
		t.Errorf("dip kept %v, first shortfall %d, shortfalls %d, min %d", found, f.FirstShortfallIndex, f.Shortfalls, f.MinHeadroomBytes)
	}
}

func TestOutsideModelAt(t *testing.T) {
	m := replay.OutsideModel{ContextBytes: 500 * mib, LibraryBytes: 100 * mib, GrowthBytesPerS: 2 * mib, GrowthCapBytes: 10 * mib}
	for _, c := range []struct {
		ns   int64
		want uint64
	}{{-5, 600 * mib}, {0, 600 * mib}, {1e9, 602 * mib}, {4.5e9, 609 * mib}, {5e9, 610 * mib}, {1e15, 610 * mib}} {
		if got := m.At(c.ns); got != c.want {
			t.Errorf("At(%d) = %d, want %d", c.ns, got, c.want)
		}
	}
	d := replay.DefaultOutsideModel()
	if d.At(0) != replay.DefaultOutsideContextBytes+replay.DefaultOutsideLibraryBytes || d.ReserveBytes != replay.DefaultOutsideLibraryBytes {
		t.Errorf("default model %+v", d)
	}
}

// silentTrace: 40 MiB at 1 s, freed (cached) at 2 s, 30 MiB at 3 s; with
// samples, the device's free memory is given before each request.
func silentTrace(t *testing.T, samples bool, free ...uint64) *trace.Reader {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic, GPUTotalBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	const s = int64(1e9)
	evs := []trace.Event{
		{Kind: trace.KindAlloc, TimeNS: s, Addr: 0x1000, SizeBytes: 40 * mib},
		{Kind: trace.KindFreeRequested, TimeNS: 2 * s, Addr: 0x1000, SizeBytes: 40 * mib},
		{Kind: trace.KindFreeCompleted, TimeNS: 2 * s, Addr: 0x1000, SizeBytes: 40 * mib},
		{Kind: trace.KindAlloc, TimeNS: 3 * s, Addr: 0x9000000, SizeBytes: 30 * mib},
	}
	for i, e := range evs {
		if samples && i < len(free) && evs[i].Kind != trace.KindFreeCompleted {
			if err := w.WriteEvent(trace.Event{Kind: trace.KindDeviceMem, TimeNS: e.TimeNS - 1, SizeBytes: free[i], Aux: 1 << 30}); err != nil {
				t.Fatal(err)
			}
		}
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

func TestForecastSilentRisk(t *testing.T) {
	// model: 600 MiB outside at the first event (1 s), growing 2 MiB/s;
	// 40 MiB reserved on a 700 MiB device: 60 MiB free at 1 s, 58 MiB at
	// 2 s, below a 59 MiB reserve.
	m := replay.OutsideModel{ContextBytes: 500 * mib, LibraryBytes: 100 * mib, GrowthBytesPerS: 2 * mib, GrowthCapBytes: 10 * mib, ReserveBytes: 59 * mib}
	_, f, err := replay.RunForecastOutside(silentTrace(t, false), factory(t, "caching"), replay.Config{CapacityBytes: 700 * mib}, 0, m)
	if err != nil {
		t.Fatal(err)
	}
	if f.OutsideSource != "model" || f.SilentRiskIndex != 1 || f.SilentRiskFreeBytes != 58*mib {
		t.Errorf("model: %+v, want a risk at event 1 with 58 MiB free", f)
	}
	if f.SilentRiskTimeNS != 2e9 || !strings.Contains(f.SilentRisk, "empty_cache()") {
		t.Errorf("model: risk at %d: %q", f.SilentRiskTimeNS, f.SilentRisk)
	}
	// a 20 MiB reserve: the smallest free is 700-604-40 = 56 MiB at 3 s
	// (the 30 MiB request reuses the cached 40 MiB segment)
	m.ReserveBytes = 20 * mib
	_, f, err = replay.RunForecastOutside(silentTrace(t, false), factory(t, "caching"), replay.Config{CapacityBytes: 700 * mib}, 0, m)
	if err != nil {
		t.Fatal(err)
	}
	if f.SilentRiskTimeNS != -1 || f.SilentMinFreeBytes != 56*mib || f.SilentMinFreeTimeNS != 3e9 || f.SilentRisk != "" {
		t.Errorf("model, 20 MiB reserve: %+v, want no risk and 56 MiB free at 3 s", f)
	}

	// measured: samples of 900, 800 and 500 MiB free on the 1 GiB device
	// (the header's total); the last, with 40 MiB reserved, puts the
	// outside at 1024-500-40 = 484 MiB: 500 MiB free, below a 510 MiB
	// reserve (the 30 MiB request then reuses the cached segment).
	m.ReserveBytes = 510 * mib
	_, f, err = replay.RunForecastOutside(silentTrace(t, true, 900*mib, 800*mib, 800*mib, 500*mib), factory(t, "caching"), replay.Config{}, 0, m)
	if err != nil {
		t.Fatal(err)
	}
	if f.OutsideSource != "measured" || f.SilentRiskFreeBytes != 500*mib || f.SilentRiskTimeNS != 3e9-1 || f.OutsideBytes != 484*mib {
		t.Errorf("measured: %+v, want a risk at the last sample with 500 MiB free, 484 MiB outside", f)
	}
}
