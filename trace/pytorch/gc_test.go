package pytorch

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestTuneGC checks that TuneGC turns the collector off for a plain
// pickle only, that what it returns restores the settings, and that it
// leaves a collector set otherwise (GOGC, GOMEMLIMIT) alone.
func TestTuneGC(t *testing.T) {
	pct := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(math.MaxInt64)
	defer func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(limit)
	}()
	for _, c := range []struct {
		path string
		off  bool
	}{
		{"testdata/basic.p5.pickle", true},
		{"testdata/basic.p5.pickle.gz", false}, // its pickle may be far larger
		{"testdata/missing.pickle", false},
		{"testdata", false}, // not a regular file
	} {
		restore := TuneGC(c.path)
		now := debug.SetGCPercent(-1)
		debug.SetGCPercent(now)
		lim := debug.SetMemoryLimit(-1)
		restore()
		if off := now < 0 && lim == gcOffLimitBytes; off != c.off {
			t.Errorf("%s: collector off %v (percent %d, limit %d), want %v", c.path, off, now, lim, c.off)
		}
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("%s: percent %d after the import, was 100", c.path, got)
		}
		if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
			t.Errorf("%s: memory limit %d after the import, was none", c.path, got)
		}
	}
	debug.SetGCPercent(50) // as GOGC=50 would
	restore := TuneGC("testdata/basic.p5.pickle")
	now := debug.SetGCPercent(50)
	restore()
	if now != 50 {
		t.Errorf("with the collector set to 50%% it became %d%%", now)
	}
}

func TestDetectFormat(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, data, want string
	}{
		{"log.csv", "anything", FormatRMM},
		{"log.txt", "Thread,Time,Action,Pointer,Size,Stream\n", FormatRMM},
		{"bom.txt", "\ufeffThread,Time,Action,Pointer,Size,Stream\n", FormatRMM},
		{"snap.pickle", "\x80\x05}q", FormatPyTorch},
		{"short", "Th", FormatPyTorch},
	} {
		path := dir + "/" + c.name
		if err := os.WriteFile(path, []byte(c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := DetectFormat(path); got != c.want {
			t.Errorf("DetectFormat(%s) = %s, want %s", c.name, got, c.want)
		}
	}
	if got := DetectFormat("-"); got != FormatPyTorch {
		t.Errorf("DetectFormat(-) = %s", got)
	}
	if got := DetectFormat(dir + "/missing"); got != FormatPyTorch {
		t.Errorf("DetectFormat(missing) = %s", got)
	}
}

// TestCapAdvice checks the advice of an import whose bursts look like a
// cap's retries: the least fraction from the peak and the GPU's memory,
// none when the cap was given.
func TestCapAdvice(t *testing.T) {
	s := &Summary{CapLikeBursts: 3, PeakReserved: 1_500_000_000}
	if a := s.CapAdvice(); a == nil || a.Fraction != "" || a.Bursts != 3 {
		t.Errorf("no GPU known: %+v", a)
	}
	s.Header = &trace.Header{GPUTotalBytes: 150109880320}
	if a := s.CapAdvice(); a == nil || a.Fraction != "0.01" || a.GPUTotalBytes != 150109880320 {
		t.Errorf("GPU known: %+v, want the fraction 0.01", a)
	}
	s.PeakReserved = 1_600_000_000
	if a := s.CapAdvice(); a == nil || a.Fraction != "0.0107" {
		t.Errorf("GPU known: %+v, want the fraction 0.0107 (rounded up)", a)
	}
	s.capKnown = true
	if a := s.CapAdvice(); a != nil {
		t.Errorf("cap given: advice %+v", a)
	}
	o := Options{MemoryFraction: 0.5, Meta: &trace.Header{GPUTotalBytes: 1000}}
	if got := o.capBytes(); got != 500 {
		t.Errorf("capBytes = %d, want the fraction of the GPU's 500", got)
	}
	o.MemoryCapBytes = 7
	if got := o.capBytes(); got != 7 {
		t.Errorf("capBytes = %d, want the cap given, 7", got)
	}
}
