package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/monitor"
	"github.com/fragsim/fragsim/trace/pytorch"
)

// runMonitorCLI runs fragsim monitor in-process on input.
func runMonitorCLI(t *testing.T, input []byte, args ...string) (lines []string, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	app := NewApp(&o, &e)
	app.Reader = bytes.NewReader(input)
	if err := app.Run(append([]string{"fragsim", "monitor"}, args...)); err != nil {
		code = 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		e.WriteString(err.Error())
	}
	sc := bufio.NewScanner(&o)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, e.String(), code
}

// frame encodes one frame: its header and the snapshot.
func frame(t *testing.T, timeNS int64, devs []monitorDevice, snapshot []byte) []byte {
	t.Helper()
	h, err := json.Marshal(monitorFrame{TimeNS: timeNS, SnapshotBytes: int64(len(snapshot)), Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	return append(append(h, '\n'), snapshot...)
}

type monitorReply struct {
	Records []monitor.Record `json:"records"`
	Error   string           `json:"error"`
}

// TestMonitorCommand sends four frames of a state-only snapshot: the
// figures are analyze's state report's (an implementation of its own),
// the device's arithmetic and, given memory_stats, its counters; a frame
// whose snapshot is not a pickle gets an error line and the next frame is
// still served; a bad header ends the command with exit 2.
func TestMonitorCommand(t *testing.T) {
	const snapPath = "../../trace/pytorch/testdata/state_only.p4.pickle"
	snap, err := os.ReadFile(snapPath)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pytorch.Load(bytes.NewReader(snap), snapPath, pytorch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := analysis.StateOf(s.Header())
	s.Close()
	const total, free = 1 << 30, 100 << 20
	var in []byte
	in = append(in, frame(t, 1e18, []monitorDevice{{Device: 0, FreeBytes: free, TotalBytes: total}}, snap)...)
	stats := map[string]json.RawMessage{"reserved_bytes.all.current": json.RawMessage("123"),
		"allocated_bytes.all.current": json.RawMessage("45"), "inactive_split_bytes.all.current": json.RawMessage("6"),
		"num_ooms": json.RawMessage("7"), "num_alloc_retries": json.RawMessage("8"), "active.all.current": json.RawMessage("9")}
	in = append(in, frame(t, 2e18, []monitorDevice{{Device: 0, FreeBytes: 500 << 20, TotalBytes: total, Stats: stats}, {Device: 1}}, snap)...)
	in = append(in, frame(t, 3e18, []monitorDevice{{Device: 0, FreeBytes: free, TotalBytes: total}}, []byte("not a pickle"))...)
	in = append(in, frame(t, 4e18, []monitorDevice{{Device: 0, FreeBytes: free, TotalBytes: total}}, nil)...)
	in = append(in, "{\"snapshot_bytes\": -1}\n"...)
	lines, errOut, code := runMonitorCLI(t, in)
	if code != 2 || !strings.Contains(errOut, "monitor: frame 5: snapshot_bytes -1") {
		t.Errorf("exit %d, stderr %q: want 2 naming frame 5", code, errOut)
	}
	if len(lines) != 5 {
		t.Fatalf("%d lines, want the metrics and 4 replies:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var hello struct {
		Metrics []struct{ Name, Type, Help string }
		Reserve uint64 `json:"reserve_bytes"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &hello); err != nil || len(hello.Metrics) != len(monitor.Metrics) ||
		hello.Reserve != replay.DefaultOutsideReserveBytes {
		t.Errorf("first line %s: %v", lines[0], err)
	}
	var r [4]monitorReply
	for i := range r {
		if err := json.Unmarshal([]byte(lines[i+1]), &r[i]); err != nil {
			t.Fatalf("line %d: %v", i+2, err)
		}
	}
	if len(r[0].Records) != 1 || len(r[1].Records) != 2 || r[2].Error == "" || len(r[3].Records) != 1 {
		t.Fatalf("replies %+v", r)
	}
	first := r[0].Records[0]
	m := first.Metrics
	for name, v := range map[string]uint64{
		"fragsim_reserved_bytes":           want.ReservedBytes,
		"fragsim_largest_free_block_bytes": want.LargestFreeBytes,
		"fragsim_cached_free_bytes":        want.ReservedBytes - want.ActiveBytes,
		"fragsim_inactive_split_bytes":     want.StrandedBytes,
		"fragsim_device_free_bytes":        free,
		"fragsim_outside_allocator_bytes":  total - free - want.ReservedBytes,
		"fragsim_silent_oom_risk":          1,
	} {
		if m[name] != float64(v) {
			t.Errorf("%s = %v, want %d", name, m[name], v)
		}
	}
	if m["fragsim_at_peak_pct"] != want.AtPeakPct || m["fragsim_silent_oom_margin_bytes"] != float64(free)-float64(replay.DefaultOutsideReserveBytes) {
		t.Errorf("metrics %v, want at_peak_pct %v", m, want.AtPeakPct)
	}
	if !first.RiskCrossed || !strings.Contains(first.Warning, "silent OOM risk on device 0") || first.Remedy == "" ||
		first.TimeNS != 1e18 || first.DeviceTotalBytes != total {
		t.Errorf("record %+v", first)
	}
	// memory_stats' counters win; at 500 MiB free, no risk; device 1 has
	// no segments and no device figures.
	m = r[1].Records[0].Metrics
	if m["fragsim_reserved_bytes"] != 123 || m["fragsim_allocated_bytes"] != 45 || m["fragsim_inactive_split_bytes"] != 6 ||
		m["fragsim_oom_total"] != 7 || m["fragsim_alloc_retries_total"] != 8 || m["fragsim_silent_oom_risk"] != 0 || r[1].Records[0].Remedy != "" {
		t.Errorf("with memory_stats: %v", r[1].Records[0])
	}
	if d1 := r[1].Records[1]; d1.Device != 1 || d1.Metrics["fragsim_reserved_bytes"] != 0 || len(d1.Metrics) != 9 {
		t.Errorf("device 1: %+v, want 9 metrics (none of the device's)", d1)
	}
	if !strings.HasPrefix(r[2].Error, "frame 3: ") {
		t.Errorf("error %q, want it to name frame 3", r[2].Error)
	}
	// No snapshot: an allocator that holds nothing; the risk, off at
	// frame 2, turns on again.
	if e := r[3].Records[0]; e.Metrics["fragsim_reserved_bytes"] != 0 || !e.RiskCrossed {
		t.Errorf("empty snapshot: %+v", e)
	}

	if _, errOut, code := runMonitorCLI(t, nil, "--outside-reserve", "nan"); code != 2 || !strings.Contains(errOut, "--outside-reserve") {
		t.Errorf("--outside-reserve nan: exit %d %s", code, errOut)
	}
	lines, _, code = runMonitorCLI(t, frame(t, 1, []monitorDevice{{Device: 0, FreeBytes: free, TotalBytes: total}}, nil),
		"--outside-reserve", "50MiB")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[1], `"fragsim_silent_oom_risk":0`) ||
		!strings.Contains(lines[1], fmt.Sprintf(`"fragsim_silent_oom_margin_bytes":%d`, free-50<<20)) {
		t.Errorf("--outside-reserve 50MiB: exit %d\n%s", code, strings.Join(lines, "\n"))
	}
}

// TestImportMetricsLog merges a monitor's log into an imported snapshot:
// the trace is the one the device log of the same samples gives.
func TestImportMetricsLog(t *testing.T) {
	dir := t.TempDir()
	devLog, metLog := filepath.Join(dir, "dev.log"), filepath.Join(dir, "metrics.jsonl")
	viaDev, viaMet := filepath.Join(dir, "dev.fst"), filepath.Join(dir, "met.fst")
	const samples = "1764000000000000001 0 3000 8000\n1764000000000200000 0 2000 8000\n1764000000009000000 0 1000 8000\n"
	var met strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(samples), "\n") {
		var ts, dev, free, total uint64
		fmt.Sscan(l, &ts, &dev, &free, &total)
		r := monitor.Record{TimeNS: int64(ts), Device: int(dev), DeviceTotalBytes: total,
			Metrics: map[string]float64{"fragsim_device_free_bytes": float64(free), "fragsim_reserved_bytes": 1 << 20}}
		b, _ := json.Marshal(r)
		met.Write(append(b, '\n'))
	}
	os.WriteFile(devLog, []byte(samples), 0o644)
	os.WriteFile(metLog, []byte(met.String()), 0o644)
	code, out, devErrs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", viaDev, "-q", "--device-log", devLog)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, devErrs)
	}
	code, out, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", viaMet, "-q", "--metrics-log", metLog)
	merged := regexp.MustCompile(`merged \d+ device-memory samples into \S+ \(.*\)`)
	if code != 0 || merged.FindString(errs) == "" ||
		strings.ReplaceAll(merged.FindString(errs), viaMet, "OUT") != strings.ReplaceAll(merged.FindString(devErrs), viaDev, "OUT") {
		t.Fatalf("exit %d: %s%s\n--device-log said: %s", code, out, errs, devErrs)
	}
	dk, dfree := kindsOf(t, viaDev)
	mk, mfree := kindsOf(t, viaMet)
	if fmt.Sprint(dk, dfree) != fmt.Sprint(mk, mfree) || len(mfree) == 0 {
		t.Errorf("--metrics-log gives\n%v %v\n--device-log\n%v %v", mk, mfree, dk, dfree)
	}
	if code, _, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", viaMet, "-q", "--metrics-log", devLog); code != 1 ||
		!strings.Contains(errs, "--metrics-log: "+devLog+": line 1: not a metrics record") {
		t.Errorf("a device log as --metrics-log: exit %d %s", code, errs)
	}
	if code, _, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", viaMet, "-q", "--metrics-log", metLog,
		"--device-log", devLog); code != 2 || !strings.Contains(errs, "not both") {
		t.Errorf("both logs: exit %d %s", code, errs)
	}
}
