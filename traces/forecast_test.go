package traces_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// servingCase is a co-hosted server's entry in serving/cases.json.
type servingCase struct {
	Name                   string `json:"name"`
	FirstFailureNS         int64  `json:"first_failure_ns"`
	Failed                 int    `json:"failed"`
	BlockerHeldBytes       uint64 `json:"blocker_held_bytes"`
	BlockerFreeBeforeBytes uint64 `json:"blocker_free_before_bytes"`
	Memlog                 string `json:"memlog"`
}

func servingCases(t *testing.T) map[string]servingCase {
	t.Helper()
	b, err := os.ReadFile("serving/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []servingCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	m := map[string]servingCase{}
	for _, c := range doc.Cases {
		m[c.Name] = c
	}
	return m
}

// withMemlog returns the trace at path with its device log merged in.
func withMemlog(t *testing.T, path, memlog string) []byte {
	t.Helper()
	samples, err := trace.ReadDeviceLogFile(memlog)
	if err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := trace.NewReader(bufio.NewReader(fh))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, r.Header())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := trace.MergeDeviceSamples(r, w, samples); err != nil || n < len(samples)/2 {
		t.Fatalf("%s: merged %d of %d samples: %v", memlog, n, len(samples), err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// cohostServing co-hosts a recording's two servers on their real clocks,
// on what the blocker left them (the device's memory before the blocker
// less what it held: its own context is outside both servers). With
// measured, each trace carries its device-memory log.
//
// It returns the merged clock's origin too: the earliest first timestamp
// of the two traces (with their device logs, the first sample).
func cohostServing(t *testing.T, leave string, measured bool) (*replay.CohostResult, [2]servingCase, int64) {
	t.Helper()
	cases := servingCases(t)
	var cs [2]servingCase
	procs := make([]replay.Process, 2)
	var t0 int64
	for i := range cs {
		name := fmt.Sprintf("cohost_%s_p%d", leave, i+1)
		c, ok := cases[name]
		if !ok {
			t.Fatalf("%s not in serving/cases.json", name)
		}
		cs[i] = c
		path := filepath.Join("serving", name+".fst")
		open := replay.OpenFile(path)
		if measured {
			data := withMemlog(t, path, filepath.Join("serving", c.Memlog))
			open = func() (*trace.Reader, io.Closer, error) {
				r, err := trace.NewReader(bytes.NewReader(data))
				return r, io.NopCloser(nil), err
			}
		}
		if t1 := firstTime(t, open); t0 == 0 || t1 < t0 {
			t0 = t1
		}
		f, err := allocator.NewFactory("caching", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = replay.Process{Name: name, Open: open, Factory: f}
	}
	capacity := cs[0].BlockerFreeBeforeBytes - cs[0].BlockerHeldBytes
	res, err := replay.Cohost(procs, replay.CohostConfig{CapacityBytes: capacity, ContextOverheadBytes: replay.DefaultContextOverheadBytes,
		SharedClock: true, Forecast: true})
	if err != nil {
		t.Fatal(err)
	}
	return res, cs, t0
}

// opener opens a trace, as replay.Process.Open does.
type opener = func() (*trace.Reader, io.Closer, error)

// cutAfter returns an opener of the trace open reads, cut before its
// first event later than end (the trace's own clock, ns). The cut holds
// every event at or before end: it fails the test if an event after the
// cut comes at or before end (a clock going back). A co-hosted replay of
// such cuts is the whole traces' replay up to end (Cohost merges the
// processes' events by time, and a process whose trace ends keeps what it
// holds), so what the forecast says of moments up to end is the whole
// replay's.
func cutAfter(t *testing.T, open opener, end int64) opener {
	t.Helper()
	r, c, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, r.Header(), trace.FastCompression())
	if err != nil {
		t.Fatal(err)
	}
	ids := trace.NewRemap(r, w)
	kept, cut := 0, false
	for {
		e, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		cut = cut || e.TimeNS > end
		if cut {
			if e.TimeNS != 0 && e.TimeNS <= end {
				t.Fatalf("an event at %d ns follows the cut after %d ns: the cut would miss it", e.TimeNS, end)
			}
			continue
		}
		e = ids.Event(e)
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
		kept++
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if kept == 0 {
		t.Fatalf("no event at or before %d ns", end)
	}
	data := buf.Bytes()
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(data))
		return r, io.NopCloser(nil), err
	}
}

// firstTime returns the first timestamp of the trace at path: the merged
// clock's origin is the earliest of the servers'.
func firstTime(t *testing.T, open func() (*trace.Reader, io.Closer, error)) int64 {
	t.Helper()
	r, c, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		e, err := r.ReadEvent()
		if err != nil {
			t.Fatalf("no timed event: %v", err)
		}
		if e.TimeNS != 0 {
			return e.TimeNS
		}
	}
}

// measuredVariants is the model alone, and the device logs too with
// FRAGSIM_LONG=1 (merging them doubles the test's time).
func measuredVariants() []bool {
	if os.Getenv("FRAGSIM_LONG") == "1" {
		return []bool{false, true}
	}
	return []bool{false}
}

// The two servers of the leave3.3 recording failed (allocator OOMs: the
// memory outside the allocators had grown into what the caches needed):
// the forecast flags each at or before its recorded first failure, from
// the outside-memory model and from the measured device logs alike.
func TestForecastServingSilentOOM(t *testing.T) {
	for _, measured := range measuredVariants() {
		res, cs, t0 := cohostServing(t, "leave3.3", measured)
		for i, p := range res.Processes {
			f := p.Forecast
			fail := cs[i].FirstFailureNS - t0
			if cs[i].FirstFailureNS < 0 {
				t.Fatalf("%s: the recording has no failure", p.Name)
			}
			if f.SilentRiskTimeNS < 0 || f.SilentRiskTimeNS > fail {
				t.Errorf("measured=%v %s: silent risk at %d ns, want one at or before the first failure at %d ns (min free %s)",
					measured, p.Name, f.SilentRiskTimeNS, fail, replay.FormatBytes(f.SilentMinFreeBytes))
			}
			if f.SilentRiskFreeBytes >= f.OutsideReserveBytes {
				t.Errorf("%s: risk with %d B free, not below the reserve %d B", p.Name, f.SilentRiskFreeBytes, f.OutsideReserveBytes)
			}
			want := "model"
			if measured {
				want = "measured"
			}
			if f.OutsideSource != want {
				t.Errorf("%s: outside memory from %q, want %q", p.Name, f.OutsideSource, want)
			}
			for _, s := range []string{"empty_cache()", "set_per_process_memory_fraction(", "CUDA_MODULE_LOADING=EAGER", "fragsim compare"} {
				if !bytes.Contains([]byte(f.SilentRisk), []byte(s)) {
					t.Errorf("%s: the risk's line names no %s: %q", p.Name, s, f.SilentRisk)
				}
			}
			t.Logf("measured=%v %s: risk %.2f s before the failure; %s", measured, p.Name, float64(fail-f.SilentRiskTimeNS)/1e9, f.SilentRisk)
		}
	}
}

// With 40 GiB left, the same servers are not flagged. With 4 GiB left
// they came within 262 MiB of the device's end and did not fail: not
// flagged either, but the forecast shows how close they came (with
// FRAGSIM_LONG=1).
func TestForecastServingRoomNoFlag(t *testing.T) {
	leaves := []string{"40"}
	if os.Getenv("FRAGSIM_LONG") == "1" {
		leaves = append(leaves, "4")
	}
	for _, measured := range measuredVariants() {
		for _, leave := range leaves {
			res, _, _ := cohostServing(t, "leave"+leave, measured)
			for _, p := range res.Processes {
				f := p.Forecast
				if f.SilentRiskTimeNS != -1 || f.SilentRisk != "" {
					t.Errorf("leave %s measured=%v %s: flagged at %d ns with %s free: %s", leave, measured, p.Name,
						f.SilentRiskTimeNS, replay.FormatBytes(f.SilentRiskFreeBytes), f.SilentRisk)
				}
				t.Logf("leave %s measured=%v %s: min free %s", leave, measured, p.Name, replay.FormatBytes(f.SilentMinFreeBytes))
				if leave == "4" && !(f.SilentMinFreeBytes >= f.OutsideReserveBytes && f.SilentMinFreeBytes < 512<<20) {
					t.Errorf("leave 4 measured=%v %s: min free %s, want between the reserve and 512 MiB (the run came within 262 MiB)",
						measured, p.Name, replay.FormatBytes(f.SilentMinFreeBytes))
				}
				if leave == "40" && f.SilentMinFreeBytes < 30<<30 {
					t.Errorf("leave 40 %s: min free %s", p.Name, replay.FormatBytes(f.SilentMinFreeBytes))
				}
			}
		}
	}
}

// The same scenario recorded live by fragsim record, whose hook samples
// the device's memory itself (device_mem events): co-hosted on what the
// blocker left, each server is flagged from those samples before its
// first recorded OOM.
func TestForecastLiveRecordings(t *testing.T) {
	cs := servingCases(t)["cohost_leave3.3_p1"]
	procs := make([]replay.Process, 2)
	firstOOM := make([]int64, 2)
	var t0 int64
	for i := range procs {
		path := filepath.Join("serving", fmt.Sprintf("cohost_leave3.3_p%d.live.fst", i+1))
		tf, err := trace.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		h := tf.Header()
		samples := 0
		for {
			e, err := tf.ReadEvent()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case e.Kind == trace.KindDeviceMem:
				samples++
			case e.Kind == trace.KindOOM && firstOOM[i] == 0:
				firstOOM[i] = e.TimeNS
			}
			if e.TimeNS != 0 && (t0 == 0 || e.TimeNS < t0) {
				t0 = e.TimeNS
			}
		}
		tf.Close()
		if samples < 100 || firstOOM[i] == 0 || h.Producer != trace.ProducerLive {
			t.Fatalf("%s: %d device samples, first OOM at %d, producer %q: not the live recording of a failing server", path, samples, firstOOM[i], h.Producer)
		}
		f, err := allocator.NewFactory("caching", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = replay.Process{Name: filepath.Base(path), Open: replay.OpenFile(path), Factory: f}
	}
	if !longTests() {
		// The checks are of the moments up to the first OOMs: the everyday
		// pass replays the traces cut after the later one (cutAfter).
		end := max(firstOOM[0], firstOOM[1])
		for i := range procs {
			procs[i].Open = cutAfter(t, procs[i].Open, end)
		}
	}
	res, err := replay.Cohost(procs, replay.CohostConfig{CapacityBytes: cs.BlockerFreeBeforeBytes - cs.BlockerHeldBytes,
		ContextOverheadBytes: replay.DefaultContextOverheadBytes, SharedClock: true, Forecast: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range res.Processes {
		f := p.Forecast
		fail := firstOOM[i] - t0
		if f.OutsideSource != "measured" || f.SilentRiskTimeNS < 0 || f.SilentRiskTimeNS > fail {
			t.Errorf("%s: risk at %d ns from %q outside memory, want one from the samples at or before the first OOM at %d ns",
				p.Name, f.SilentRiskTimeNS, f.OutsideSource, fail)
		}
		t.Logf("%s: risk %.2f s before the first OOM", p.Name, float64(fail-f.SilentRiskTimeNS)/1e9)
	}
}
