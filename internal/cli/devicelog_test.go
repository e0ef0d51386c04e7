package cli

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// kindsOf reads the trace at path and returns its events' kinds, with the
// free bytes of each device_mem.
func kindsOf(t *testing.T, path string) (kinds []string, free []uint64) {
	t.Helper()
	r, c, err := replay.OpenFile(path)()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		e, err := r.ReadEvent()
		if err != nil {
			break
		}
		kinds = append(kinds, e.Kind.String())
		if e.Kind == trace.KindDeviceMem {
			free = append(free, e.SizeBytes)
		}
	}
	return kinds, free
}

func TestImportDeviceLog(t *testing.T) {
	dir := t.TempDir()
	plain, merged := filepath.Join(dir, "plain.fst"), filepath.Join(dir, "merged.fst")
	if code, out, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", plain, "-q"); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	log := filepath.Join(dir, "dev.log")
	// decades before the trace, before its first event, between events,
	// after its last: only the one inside its window is merged (the others
	// would stretch its time)
	const samples = "1000 0 4000 8000\n1764000000000000001 0 3000 8000\n1764000000000200000 0 2000 8000\n1764000000009000000 0 1000 8000\n"
	if err := os.WriteFile(log, []byte(samples), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", merged, "-q", "--device-log", log)
	if code != 0 || !strings.Contains(errs, "merged 1 device-memory samples") ||
		!strings.Contains(errs, "(2 before the trace's first event and 1 after the trace's last event left out)") {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	pk, _ := kindsOf(t, plain)
	mk, free := kindsOf(t, merged)
	if len(mk) != len(pk)+1 || mk[0] == "device_mem" {
		t.Fatalf("merged kinds %v from %v", mk, pk)
	}
	if len(free) != 1 || free[0] != 2000 {
		t.Errorf("samples' free bytes %v, want [2000]", free)
	}
	if sum, err := summarizeFile(merged); err != nil || sum.DurationNS > 1e9 {
		t.Errorf("merged trace spans %v ns (%v)", sum, err)
	}
	var rest []string
	for _, k := range mk {
		if k != "device_mem" {
			rest = append(rest, k)
		}
	}
	if strings.Join(rest, " ") != strings.Join(pk, " ") {
		t.Errorf("the trace's own events changed order:\n%v\n%v", rest, pk)
	}
	// the samples change no replay
	f, err := allocator.NewFactory("caching", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := replay.RunFile(plain, f, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := replay.RunFile(merged, f, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := a.Fragmentation, b.Fragmentation
	tw := math.Abs(fa.TimeWeightedPct-fb.TimeWeightedPct) <= 1e-9*math.Abs(fa.TimeWeightedPct)
	fa.TimeWeightedPct, fb.TimeWeightedPct = 0, 0
	if a.PeakReservedBytes != b.PeakReservedBytes || a.PeakActiveBytes != b.PeakActiveBytes || a.OOMs != b.OOMs || fa != fb || !tw {
		t.Errorf("replay changed by the samples: %+v vs %+v", a, b)
	}
}

// A sample of a device the trace does not have would stand in for
// another device's memory: refused, naming the log and the device, and
// the previous output is left as it was.
func TestImportDeviceLogOtherDevice(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.fst")
	if code, o, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", out, "-q"); code != 0 {
		t.Fatalf("exit %d: %s%s", code, o, errs)
	}
	before := mustRead(t, out)
	log := filepath.Join(dir, "dev7.log")
	os.WriteFile(log, []byte("1764000000000200000 7 2000 8000\n"), 0o644)
	code, _, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", out, "-q", "--device-log", log)
	if code != 1 || !strings.Contains(errs, "dev7.log: the sample at time_ns 1764000000000200000 names device 7, which the trace does not have") ||
		!strings.Contains(errs, "nothing was written to "+out) {
		t.Fatalf("exit %d: %q", code, errs)
	}
	if after := mustRead(t, out); string(after) != string(before) {
		t.Errorf("the trace changed")
	}
	if names, _ := os.ReadDir(dir); len(names) != 2 {
		t.Errorf("the directory holds %d files, want x.fst and the log", len(names))
	}
}

// A failed import with a device log writes nothing: an earlier output is
// left as it was, a device output gets nothing and the exit is 1, and the
// log itself is an input the output may not be.
func TestImportDeviceLogFailureWritesNothing(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pickle")
	os.WriteFile(bad, []byte("garbage"), 0o644)
	log := filepath.Join(dir, "dev.log")
	const sample = "1764000000000200000 0 2000 8000\n"
	os.WriteFile(log, []byte(sample), 0o644)
	old := filepath.Join(dir, "old.fst")
	if code, o, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", old, "-q"); code != 0 {
		t.Fatalf("exit %d: %s%s", code, o, errs)
	}
	before := mustRead(t, old)
	for _, out := range []string{old, os.DevNull} {
		code, _, errs := runImportCLI(t, bad, "--device-log", log, "-o", out, "-q")
		if code != 1 || !strings.Contains(errs, "nothing was written to "+out) || strings.Contains(errs, "merged") {
			t.Errorf("-o %s: exit %d, %q", out, code, errs)
		}
	}
	if string(mustRead(t, old)) != string(before) {
		t.Errorf("a failed import with --device-log changed the earlier output")
	}
	code, _, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "--device-log", log, "-o", log, "-q")
	if code != 1 || !strings.Contains(errs, "the output is the input") {
		t.Errorf("-o the device log: exit %d, %q", code, errs)
	}
	if string(mustRead(t, log)) != sample {
		t.Errorf("the device log changed")
	}
	if names, _ := os.ReadDir(dir); len(names) != 3 {
		t.Errorf("the directory holds %d files, want bad.pickle, dev.log and old.fst", len(names))
	}
}

// The merged trace goes straight into a FIFO, read once, as into a file.
func TestImportDeviceLogIntoFifo(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no fifo:", err)
	}
	log := filepath.Join(dir, "dev.log")
	os.WriteFile(log, []byte("1764000000000200000 0 2000 8000\n"), 0o644)
	got := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	code, _, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "--device-log", log, "-o", fifo, "-q")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b := <-got
	r, err := trace.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the FIFO's reader got no trace: %v", err)
	}
	sum, err := trace.Summarize(r)
	if err != nil || sum.ByKind["device_mem"] != 1 {
		t.Fatalf("the FIFO's trace: %v, %v", err, sum)
	}
}

// TestImportDeviceLogRefused: a corrupt device log is a failure (exit 1,
// as any corrupt input), named with its line, and nothing is written.
func TestImportDeviceLogRefused(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.fst")
	log := filepath.Join(dir, "bad.log")
	if err := os.WriteFile(log, []byte("1 0 5 10\n2 0 NaN 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runImportCLI(t, importTestdata+"midrun.p4.pickle", "-o", out, "-q", "--device-log", log)
	if code != 1 || !strings.Contains(errs, "bad.log: line 2") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("exit %d: %q", code, errs)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a trace was written despite the bad device log")
	}
}
