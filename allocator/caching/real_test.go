package caching_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// realRun is what testdata/real/manifest.json records of each run: the
// settings and the real allocator's own counters (torch.cuda.memory_stats).
type realRun struct {
	AllocConf         string  `json:"alloc_conf"`
	Fraction          float64 `json:"fraction"`
	TotalGlobalMem    uint64  `json:"total_global_mem"`
	RealReservedPeak  uint64  `json:"real_reserved_peak"`
	RealReservedFinal uint64  `json:"real_reserved_final"`
	RealActivePeak    uint64  `json:"real_active_peak"`
	NumAllocRetries   int64   `json:"num_alloc_retries"`
	NumOOMs           int64   `json:"num_ooms"`
	NumDeviceAlloc    int64   `json:"num_device_alloc"`
	NumDeviceFree     int64   `json:"num_device_free"`
	RingBuffer        bool    `json:"ring_buffer"` // the trace starts mid-run
	// File is the trace's path relative to testdata/real when it is not
	// NAME.fst there (the workload traces live in the repository's traces/).
	File string `json:"file,omitempty"`
	// NotInBench keeps the trace out of BenchmarkReplayReal, whose set (13
	// traces, 1.07 M events) stays the one its published figures were
	// measured on.
	NotInBench bool `json:"not_in_bench,omitempty"`
}

// path returns the trace file of the run named name in dir.
func (r realRun) path(dir, name string) string {
	if r.File != "" {
		return filepath.Join(dir, r.File)
	}
	return filepath.Join(dir, name+".fst")
}

// TestRealTraces replays PyTorch 2.11 snapshots recorded on an H200
// (imported with fragsim import) under their recorded settings and checks
// that the replay is exact: every allocation at its recorded address, every
// device event matched, and peak reserved, final reserved, peak active,
// retries, OOMs and device calls equal to the real allocator's counters.
// The everyday pass leaves out kv_decode_s1 (601,000 events, as many as
// all the others together; the default setting, as the other workload
// traces of traces/), which the long pass (FRAGSIM_LONG=1) replays.
func TestRealTraces(t *testing.T) {
	dir, runs := readRuns(t)
	if !longTests() {
		delete(runs, "kv_decode_s1")
	}
	var names []string
	for n := range runs {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no real traces")
	}
	for _, name := range names {
		run := runs[name]
		t.Run(name, func(t *testing.T) {
			path := run.path(dir, name)
			f := func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
				cfg, err := caching.FromHeader(h)
				if err != nil {
					return nil, err
				}
				if run.AllocConf != "" {
					want, err := caching.ParseConf(run.AllocConf)
					if err != nil {
						return nil, err
					}
					if want.Expandable != cfg.Expandable || want.MaxSplitSize != cfg.MaxSplitSize ||
						want.RoundupPower2Divisions != cfg.RoundupPower2Divisions || want.GCThreshold != cfg.GCThreshold {
						t.Errorf("settings from the trace header %+v differ from the run's %q", cfg, run.AllocConf)
					}
				}
				return caching.New(dev, cfg)
			}
			res, err := replay.RunFile(path, f, replay.Config{CapacityBytes: run.TotalGlobalMem, Fraction: run.Fraction})
			if err != nil {
				t.Fatal(err)
			}
			fd := res.Fidelity
			if !fd.Checked || fd.Allocs == 0 || fd.AllocsAtRecordedAddress != fd.Allocs {
				t.Errorf("allocs at recorded address %d/%d (checked %v): %s", fd.AllocsAtRecordedAddress, fd.Allocs, fd.Checked, fd.FirstMismatch)
			}
			if fd.DeviceEventsMatched != fd.DeviceEvents || fd.FirstMismatch != "" {
				t.Errorf("device events matched %d/%d: %s", fd.DeviceEventsMatched, fd.DeviceEvents, fd.FirstMismatch)
			}
			if res.PeakReservedBytes != run.RealReservedPeak {
				t.Errorf("peak reserved %d, real %d", res.PeakReservedBytes, run.RealReservedPeak)
			}
			if res.FinalReservedBytes != run.RealReservedFinal {
				t.Errorf("final reserved %d, real %d", res.FinalReservedBytes, run.RealReservedFinal)
			}
			if run.RingBuffer {
				return // counters and peaks before the window are not in the trace
			}
			if fd.DeviceEvents == 0 {
				t.Errorf("no device events in a full trace")
			}
			if res.PeakActiveBytes != run.RealActivePeak {
				t.Errorf("peak active %d, real %d", res.PeakActiveBytes, run.RealActivePeak)
			}
			if res.AllocRetries != run.NumAllocRetries || res.OOMs != run.NumOOMs {
				t.Errorf("retries %d OOMs %d, real %d and %d", res.AllocRetries, res.OOMs, run.NumAllocRetries, run.NumOOMs)
			}
			if res.DeviceAllocs != run.NumDeviceAlloc || res.DeviceFrees != run.NumDeviceFree {
				t.Errorf("device allocs/frees %d/%d, real %d/%d", res.DeviceAllocs, res.DeviceFrees, run.NumDeviceAlloc, run.NumDeviceFree)
			}
		})
	}
}

// BenchmarkReplayReal replays every real trace in testdata/real (about a
// million events in all) through the caching allocator under its recorded
// settings, decoding included; events/s is the figure to watch, and
// events/cpu-s the rate per CPU-second (with -cpu 1, the rate of one core,
// unskewed by other load on the machine).
func BenchmarkReplayReal(b *testing.B) {
	dir, runs := readRuns(b)
	type tr struct {
		data []byte
		run  realRun
	}
	var trs []tr
	for n, r := range runs {
		if r.NotInBench {
			continue
		}
		data, err := os.ReadFile(r.path(dir, n))
		if err != nil {
			b.Fatal(err)
		}
		trs = append(trs, tr{data, r})
	}
	f := func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
		cfg, err := caching.FromHeader(h)
		if err != nil {
			return nil, err
		}
		return caching.New(dev, cfg)
	}
	b.ResetTimer()
	cpu0 := cpuSeconds()
	var n int64
	for i := 0; i < b.N; i++ {
		for _, t := range trs {
			r, err := trace.NewReader(bytes.NewReader(t.data))
			if err != nil {
				b.Fatal(err)
			}
			res, err := replay.Run(r, f, replay.Config{CapacityBytes: t.run.TotalGlobalMem, Fraction: t.run.Fraction})
			if err != nil {
				b.Fatal(err)
			}
			n += res.Events
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(float64(n)/cpu, "events/cpu-s")
	}
}

// TestRealTracesObserved checks that a replay with an Observer, which
// replays every event through the engine's general path, gives the same
// Result as one without, which replays allocs and frees through its fast
// path, on every real trace: in the everyday pass, the eleven of
// testdata/real, which hold every setting, fraction and the ring buffer;
// in the long pass (FRAGSIM_LONG=1, without the race detector), the five
// workload traces of traces/ too, which repeat the default setting on
// more events.
func TestRealTracesObserved(t *testing.T) {
	dir, runs := readRuns(t)
	if !longTests() {
		maps.DeleteFunc(runs, func(_ string, r realRun) bool { return r.File != "" })
	}
	f := func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
		cfg, err := caching.FromHeader(h)
		if err != nil {
			return nil, err
		}
		return caching.New(dev, cfg)
	}
	for name, run := range runs {
		t.Run(name, func(t *testing.T) {
			path := run.path(dir, name)
			cfg := replay.Config{CapacityBytes: run.TotalGlobalMem, Fraction: run.Fraction}
			fast, err := replay.RunFile(path, f, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var seen int64
			cfg.Observer = func(s *replay.Sample) { seen++ }
			slow, err := replay.RunFile(path, f, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if seen != slow.Events || seen == 0 {
				t.Errorf("observer saw %d of %d events", seen, slow.Events)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Errorf("results differ:\nwithout observer %+v\nwith observer    %+v", *fast, *slow)
			}
		})
	}
}

// readRuns reads testdata/real/manifest.json: the real traces and their
// recorded runs, and the directory their paths are relative to.
func readRuns(tb testing.TB) (string, map[string]realRun) {
	tb.Helper()
	dir := filepath.Join("testdata", "real")
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		tb.Fatal(err)
	}
	runs := map[string]realRun{}
	if err := json.Unmarshal(raw, &runs); err != nil {
		tb.Fatal(err)
	}
	return dir, runs
}

// longTests reports whether the long sweeps run (FRAGSIM_LONG=1).
func longTests() bool { return os.Getenv("FRAGSIM_LONG") == "1" }
