package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// writeTrace writes events (times in ms) as a trace file in dir.
func writeTrace(t *testing.T, dir, name string, evs []trace.Event) string {
	t.Helper()
	p := filepath.Join(dir, name)
	w, err := trace.Create(p, &trace.Header{Producer: trace.ProducerSynthetic})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		e.TimeNS = 1e12 + e.TimeNS*1e6
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// cohostPair: A frees its 100 MiB at 10 ms and keeps it cached; B asks
// for 100 MiB at its start.
func cohostPair(t *testing.T) (string, string) {
	dir := t.TempDir()
	const mib = 1 << 20
	a := writeTrace(t, dir, "a.fst", []trace.Event{
		{Kind: trace.KindAlloc, Addr: 0x1000, SizeBytes: 100 * mib},
		{Kind: trace.KindFreeRequested, TimeNS: 10, Addr: 0x1000, SizeBytes: 100 * mib},
		{Kind: trace.KindFreeCompleted, TimeNS: 10, Addr: 0x1000, SizeBytes: 100 * mib},
	})
	b := writeTrace(t, dir, "b.fst", []trace.Event{
		{Kind: trace.KindAlloc, Addr: 0x1000, SizeBytes: 100 * mib},
		{Kind: trace.KindFreeRequested, TimeNS: 5, Addr: 0x1000, SizeBytes: 100 * mib},
		{Kind: trace.KindFreeCompleted, TimeNS: 5, Addr: 0x1000, SizeBytes: 100 * mib},
	})
	return a, b
}

func TestCohostJSONBlame(t *testing.T) {
	a, b := cohostPair(t)
	out, errs, code := runReplayCLI(t, "cohost", a, b, "--capacity", "170MiB", "--context-overhead", "10MiB",
		"--offset", "0,20ms", "--min-capacity", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		MinCapacityBytes uint64 `json:"min_capacity_bytes"`
		Processes        []struct {
			Name     string
			OffsetNS int64 `json:"offset_ns"`
			Result   struct{ OOMs int64 }
			Forecast map[string]any
		}
		Total struct {
			OOMs              int64
			PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
		}
		OOMEvents []struct {
			Process        int
			Blamed         []int
			ShortfallBytes uint64 `json:"shortfall_bytes"`
			Holders        []struct {
				Name            string
				CachedFreeBytes uint64 `json:"cached_free_bytes"`
			}
		} `json:"oom_events"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(r.Processes) != 2 || r.Processes[0].Name != "a" || r.Processes[1].OffsetNS != 20e6 {
		t.Fatalf("processes %+v", r.Processes)
	}
	if r.Total.OOMs != 1 || len(r.OOMEvents) != 1 {
		t.Fatalf("OOMs %d", r.Total.OOMs)
	}
	o := r.OOMEvents[0]
	if o.Process != 1 || len(o.Blamed) != 1 || o.Blamed[0] != 0 || o.ShortfallBytes != 50<<20 ||
		o.Holders[0].Name != "a" || o.Holders[0].CachedFreeBytes != 100<<20 {
		t.Errorf("OOM %+v: want B's, blamed on a (100 MiB cached), short by 50 MiB", o)
	}
	// both 100 MiB at once plus two contexts
	if r.MinCapacityBytes != 220<<20 {
		t.Errorf("min_capacity_bytes %d, want 220 MiB", r.MinCapacityBytes)
	}
	for _, k := range []string{"first_shortfall_index", "first_shortfall_time_ns", "min_headroom_bytes", "series"} {
		if _, ok := r.Processes[1].Forecast[k]; !ok {
			t.Errorf("forecast lacks %q", k)
		}
	}
	// a under ideal gives its 100 MiB back at its free: no OOM.
	out, errs, code = runReplayCLI(t, "cohost", a, b, "--capacity", "170MiB", "--context-overhead", "10MiB", "--offset", "0,20ms", "--policy", "ideal,caching", "--json")
	if code != 0 || !strings.Contains(out, `"ooms": 0`) || strings.Contains(out, "oom_events") {
		t.Errorf("with a under ideal: exit %d, %s\n%s", code, errs, out)
	}
}

func TestCohostHumanRealAndPlot(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(workloadDir, "baseline_s1.fst"), filepath.Join(workloadDir, "train_s1.fst")
	out, errs, code := runReplayCLI(t, "cohost", "--capacity", "8GiB", a, b, "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"device 8.00 GiB", "baseline_s1", "train_s1", "total", "OOM: ", "avoidable"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"forecast.png", "forecast.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestCohostBadFlags(t *testing.T) {
	a, b := cohostPair(t)
	for _, args := range [][]string{
		{"cohost"},
		{"cohost", a, b, "--policy", "caching,ideal,bfc"},
		{"cohost", a, b, "--scale", "1,-1"},
		{"cohost", a, b, "--offset", "soon"},
		{"cohost", a, b, "--capacity", "lots"},
		{"cohost", a, b, "--policy", "nosuch"},
		// Offsets and scales that overflow the merged clock (int64 ns).
		{"cohost", a, b, "--offset", "0,9300000000"},
		{"cohost", a, b, "--offset", "0,NaN"},
		{"cohost", a, b, "--offset", "-Inf"},
		{"cohost", a, b, "--scale", "1,Inf"},
		{"cohost", a, b, "--scale", "1e300"},
	} {
		_, errs, code := runReplayCLI(t, args...)
		if code != 2 || !strings.HasPrefix(errs, "fragsim: cohost") {
			t.Errorf("%v: exit %d, %q; want 2 and a cohost error", args, code, errs)
		}
	}
	_, errs, code := runReplayCLI(t, "cohost", a, filepath.Join(t.TempDir(), "missing.fst"))
	if code == 0 || !strings.Contains(errs, "missing.fst") {
		t.Errorf("missing trace: exit %d, %q", code, errs)
	}
}

// The silent-OOM risk: --context-overhead 10MiB replaces the model's
// context and libraries, so each process holds 10 MiB outside (and its
// lazy growth, 30 KiB in 20 ms); when b starts (20 ms), both caches hold
// 100 MiB and a 400 MiB device has 180 MiB free: above the default 172 MiB
// reserve, below a 200 MiB one.
func TestCohostSilentRisk(t *testing.T) {
	a, b := cohostPair(t)
	args := []string{"cohost", a, b, "--capacity", "400MiB", "--context-overhead", "10MiB", "--offset", "0,20ms"}
	type fc struct {
		SilentRiskTimeNS    int64  `json:"silent_risk_time_ns"`
		SilentRiskFreeBytes uint64 `json:"silent_risk_free_bytes"`
		SilentMinFreeBytes  uint64 `json:"silent_min_free_bytes"`
		OutsideSource       string `json:"outside_source"`
		SilentRisk          string `json:"silent_risk"`
	}
	parse := func(out string) []fc {
		var r struct{ Processes []struct{ Forecast fc } }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var fs []fc
		for _, p := range r.Processes {
			fs = append(fs, p.Forecast)
		}
		return fs
	}
	out, errs, code := runReplayCLI(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for i, f := range parse(out) {
		if f.SilentRiskTimeNS != -1 || f.SilentRisk != "" || f.OutsideSource != "model" {
			t.Errorf("process %d flagged with the default reserve: %+v", i, f)
		}
		if lo, hi := uint64(179<<20), uint64(180<<20); f.SilentMinFreeBytes < lo || f.SilentMinFreeBytes >= hi {
			t.Errorf("process %d: min free %d, want 400 - 200 - 20 MiB less the growth", i, f.SilentMinFreeBytes)
		}
	}
	out, errs, code = runReplayCLI(t, append(args, "--outside-reserve", "200MiB", "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for i, f := range parse(out) {
		if f.SilentRiskTimeNS != 20e6 || f.SilentRiskFreeBytes >= 180<<20 || !strings.Contains(f.SilentRisk, "empty_cache()") {
			t.Errorf("process %d with a 200 MiB reserve: %+v, want flagged at 20 ms", i, f)
		}
	}
	out, _, _ = runReplayCLI(t, append(args, "--outside-reserve", "200MiB")...)
	if !strings.Contains(out, "b: at 0.02 s: silent OOM risk at event 0") || !strings.Contains(out, "CUDA_MODULE_LOADING=EAGER") {
		t.Errorf("human output lacks b's risk line:\n%s", out)
	}
	for _, bad := range []string{"NaN", "-5MiB", "1GiB", "inf"} {
		if _, errs, code := runReplayCLI(t, append(args, "--outside-reserve", bad)...); code != 2 || !strings.Contains(errs, "--outside-reserve") {
			t.Errorf("--outside-reserve %s: exit %d, %s", bad, code, errs)
		}
	}
}

// replay --forecast: a's 100 MiB and its 10 MiB outside leave 290 MiB of
// 400 MiB free (no risk), 140 MiB of 250 MiB (below the 172 MiB reserve).
func TestReplayForecastSilentRisk(t *testing.T) {
	a, _ := cohostPair(t)
	out, errs, code := runReplayCLI(t, "replay", a, "--forecast", "--outside", "10MiB", "--capacity", "400MiB")
	if code != 0 || !strings.Contains(out, "forecast: no silent-OOM risk: the device's free memory stayed at or above 289.99 MiB") { // less 10 ms of growth
		t.Errorf("400 MiB: exit %d, %s\n%s", code, errs, out)
	}
	out, errs, code = runReplayCLI(t, "replay", a, "--forecast", "--outside", "10MiB", "--capacity", "250MiB", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Forecast struct {
			SilentRiskTimeNS    int64  `json:"silent_risk_time_ns"`
			SilentRiskFreeBytes uint64 `json:"silent_risk_free_bytes"`
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Forecast.SilentRiskTimeNS != 1e12 || r.Forecast.SilentRiskFreeBytes != 140<<20 {
		t.Errorf("250 MiB: %+v, want a risk at the first event with 140 MiB free", r.Forecast)
	}
}
