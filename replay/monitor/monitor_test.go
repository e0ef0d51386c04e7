package monitor

import (
	"math"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

const mib = 1 << 20

// seg makes a segment of blocks of the given sizes, each allocated (a)
// or free (f): "8f 8a 4f".
func seg(dev trace.DeviceID, spec string) trace.Segment {
	s := trace.Segment{Device: dev, Pool: "large"}
	for _, f := range strings.Fields(spec) {
		n := uint64(0)
		for _, c := range f[:len(f)-1] {
			n = n*10 + uint64(c-'0')
		}
		st := trace.BlockInactive
		switch f[len(f)-1] {
		case 'a':
			st = trace.BlockAllocated
		case 'p':
			st = trace.BlockPendingFree
		}
		s.Blocks = append(s.Blocks, trace.Block{SizeBytes: n * mib, State: st})
		s.SizeBytes += n * mib
	}
	return s
}

func layout(segs ...trace.Segment) Layout {
	var l Layout
	for _, s := range segs {
		l.Add(s)
	}
	return l
}

// TestLayout checks each figure against a layout worked out by hand: three
// 20 MiB segments [8 free, 8 allocated, 4 free] (fragmented.py's), one
// wholly free 20 MiB segment and one whose block waits for its free.
func TestLayout(t *testing.T) {
	var segs []trace.Segment
	for range 3 {
		segs = append(segs, seg(0, "8f 8a 4f"))
	}
	segs = append(segs, seg(0, "20f"), seg(0, "2p 2f"))
	l := layout(segs...)
	want := Layout{Segments: 5, ReservedBytes: 84 * mib, ActiveBytes: 26 * mib, AllocatedBytes: 24 * mib,
		CachedFreeBytes: 58 * mib, LargestFreeBytes: 20 * mib, StrandedBytes: 38 * mib, ReleasableBytes: 20 * mib}
	if l != want {
		t.Errorf("layout\n got %+v\nwant %+v", l, want)
	}
}

// TestObserve follows one device through four samples: the gauges of
// each, the peak kept across samples, the risk turning on once, staying
// on without a second crossing, and turning on again after it went off.
func TestObserve(t *testing.T) {
	const total = 1024 * mib
	m := New(Options{})
	frag := layout(seg(0, "8f 8a 4f"), seg(0, "8f 8a 4f"), seg(0, "8f 8a 4f"), seg(0, "20f"))
	steps := []struct {
		name   string
		s      Sample
		peak   float64
		risk   int
		cross  bool
		margin int64
	}{
		{"roomy", Sample{Layout: frag, DeviceFreeBytes: 500 * mib, DeviceTotalBytes: total},
			100 * (1 - 24.0/80), 0, false, 500*mib - replay.DefaultOutsideReserveBytes},
		{"smaller, at risk", Sample{Layout: layout(seg(0, "8a")), DeviceFreeBytes: 100 * mib, DeviceTotalBytes: total},
			100 * (1 - 24.0/80), 1, true, 100*mib - replay.DefaultOutsideReserveBytes},
		{"still at risk", Sample{Layout: frag, DeviceFreeBytes: 171 * mib, DeviceTotalBytes: total},
			100 * (1 - 24.0/80), 1, false, 171*mib - replay.DefaultOutsideReserveBytes},
		{"free again", Sample{Layout: layout(seg(0, "90a 10f")), DeviceFreeBytes: 172 * mib, DeviceTotalBytes: total},
			10, 0, false, 0},
		{"at risk again", Sample{Layout: frag, DeviceFreeBytes: 0, DeviceTotalBytes: total},
			10, 1, true, -replay.DefaultOutsideReserveBytes},
	}
	for _, st := range steps {
		g := m.Observe(st.s)
		if math.Abs(g.AtPeakPct-st.peak) > 1e-9 || g.SilentOOMRisk != st.risk || g.RiskCrossed != st.cross || g.SilentOOMMarginBytes != st.margin {
			t.Errorf("%s: at_peak %.2f risk %d crossed %v margin %d, want %.2f %d %v %d", st.name, g.AtPeakPct,
				g.SilentOOMRisk, g.RiskCrossed, g.SilentOOMMarginBytes, st.peak, st.risk, st.cross, st.margin)
		}
		if w := g.Warning(); (w != "") != (st.risk == 1) {
			t.Errorf("%s: warning %q with risk %d", st.name, w, st.risk)
		}
	}

	g := m.Observe(Sample{Layout: frag, DeviceFreeBytes: 100 * mib, DeviceTotalBytes: total})
	if g.ReservedBytes != 80*mib || g.AllocatedBytes != 24*mib || g.InactiveSplitBytes != 36*mib ||
		g.LargestFreeBlockBytes != 20*mib || g.CachedFreeBytes != 56*mib || math.Abs(g.FragmentationRatio-(1-20.0/56)) > 1e-12 ||
		g.OutsideAllocatorBytes != total-80*mib-100*mib || g.DeviceFreeBytes != 100*mib {
		t.Errorf("gauges %+v", g)
	}
	w := g.Warning()
	for _, s := range []string{"device 0", "device free 100.00 MiB", "margin -72.00 MiB", "empty_cache() then",
		"returns 20.00 MiB of its 56.00 MiB cached free", "cap its cache at 8.00 MiB (set_per_process_memory_fraction(0.0078) of 1.00 GiB)"} {
		if !strings.Contains(w, s) {
			t.Errorf("warning %q lacks %q", w, s)
		}
	}
}

// TestObserveCounters: the allocator's own counters win over the layout,
// the device's figures come and go, a given peak is taken as it is, and
// HeldBytes stands for the reserved bytes in the outside memory.
func TestObserveCounters(t *testing.T) {
	m := New(Options{ReserveBytes: 10 * mib})
	l := layout(seg(1, "8f 8a 4f"))
	g := m.Observe(Sample{Device: 1, Layout: l, Counters: &Counters{ReservedBytes: 30 * mib, AllocatedBytes: 7 * mib,
		InactiveSplitBytes: 5 * mib, OOMs: 3, AllocRetries: 4}, Peak: &Peak{ReservedBytes: 100 * mib, ActiveBytes: 75 * mib}})
	if g.ReservedBytes != 30*mib || g.AllocatedBytes != 7*mib || g.InactiveSplitBytes != 5*mib || g.OOMs != 3 ||
		g.AllocRetries != 4 || g.AtPeakPct != 25 || g.DeviceKnown {
		t.Errorf("gauges %+v", g)
	}
	r := g.Record()
	for _, met := range Metrics {
		if _, ok := r.Metrics[met.Name]; ok == met.Device {
			t.Errorf("device unknown: %s in the record: %v", met.Name, ok)
		}
	}
	held := uint64(40 * mib)
	g = m.Observe(Sample{Device: 1, Layout: l, DeviceFreeBytes: 5 * mib, DeviceTotalBytes: 100 * mib, HeldBytes: &held})
	if !g.RiskCrossed || g.OutsideAllocatorBytes != 55*mib || g.SilentOOMMarginBytes != -5*mib {
		t.Errorf("gauges %+v", g)
	}
	r = g.Record()
	if len(r.Metrics) != len(Metrics) || r.Warning == "" || r.Remedy == "" || r.Metrics["fragsim_silent_oom_risk"] != 1 {
		t.Errorf("record %+v", r)
	}
	// The device unknown again: a risk after is a new crossing.
	m.Observe(Sample{Device: 1, Layout: l})
	if g := m.Observe(Sample{Device: 1, Layout: l, DeviceFreeBytes: 5 * mib, DeviceTotalBytes: 100 * mib}); !g.RiskCrossed {
		t.Error("the risk after an unknown moment is no crossing")
	}
	// Another device keeps its own state.
	if g := m.Observe(Sample{Device: 0, Layout: l, DeviceFreeBytes: 5 * mib, DeviceTotalBytes: 100 * mib}); !g.RiskCrossed {
		t.Error("device 0's first risk is no crossing")
	}
}

// TestMetricNames: Prometheus names, counters ending in _total, gauges
// not, each named once.
func TestMetricNames(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Metrics {
		if seen[m.Name] || !strings.HasPrefix(m.Name, "fragsim_") || strings.Trim(m.Name, "abcdefghijklmnopqrstuvwxyz_") != "" {
			t.Errorf("metric name %q", m.Name)
		}
		seen[m.Name] = true
		if (m.Type == "counter") != strings.HasSuffix(m.Name, "_total") || m.Type != "counter" && m.Type != "gauge" || m.Help == "" {
			t.Errorf("metric %s: type %q, help %q", m.Name, m.Type, m.Help)
		}
	}
	if len(Names()) != 13 {
		t.Errorf("%d metrics, want the issue's 13: %v", len(Names()), Names())
	}
}
