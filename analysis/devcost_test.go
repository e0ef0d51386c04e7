package analysis

import (
	"math"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

func TestDeviceCostInterpolation(t *testing.T) {
	c := &H200Cost
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	for _, p := range c.Malloc {
		if got := c.MallocUs(p.Bytes); !near(got, p.Us) {
			t.Errorf("MallocUs(%d) = %v, want the measured %v", p.Bytes, got, p.Us)
		}
	}
	// Below the smallest size: the smallest size's time.
	if got := c.MallocUs(512); !near(got, c.Malloc[0].Us) {
		t.Errorf("MallocUs(512) = %v, want %v", got, c.Malloc[0].Us)
	}
	// Half way between 256 MiB and 1 GiB: the mean of the two.
	mid := uint64(256<<20+1<<30) / 2
	if got, want := c.FreeUs(mid), (191.5+672.1)/2; !near(got, want) {
		t.Errorf("FreeUs(%d) = %v, want %v", mid, got, want)
	}
	// Beyond the largest: the last slope goes on.
	slope := (2962.5 - 672.1) / float64(3<<30)
	if got, want := c.FreeUs(8<<30), 2962.5+slope*float64(4<<30); !near(got, want) {
		t.Errorf("FreeUs(8 GiB) = %v, want %v", got, want)
	}
}

// costTestDevice is a device that grants everything.
type costTestDevice struct {
	next     uint64
	fraction float64
}

func (d *costTestDevice) Malloc(n uint64, _ trace.StreamID) (uint64, bool) {
	d.next += n
	return d.next, n < 1<<40
}
func (d *costTestDevice) Free(addr, n uint64)                       {}
func (d *costTestDevice) Reserve(n uint64, _ trace.StreamID) uint64 { return 1 << 40 }
func (d *costTestDevice) Map(addr, n uint64) bool                   { return true }
func (d *costTestDevice) Unmap(addr, n uint64)                      {}
func (d *costTestDevice) Cap() (uint64, bool)                       { return 0, false }
func (d *costTestDevice) TotalBytes() uint64                        { return 1 << 40 }
func (d *costTestDevice) Recorded() []trace.Event                   { return nil }
func (d *costTestDevice) SetFraction(f float64)                     { d.fraction = f }

func TestCostFactoryPricesEveryCall(t *testing.T) {
	var got driver.Device
	f := func(dev driver.Device, _ *trace.Header) (driver.Policy, error) {
		got = dev
		return nil, nil
	}
	var acc AllocatorCost
	dev := &costTestDevice{}
	if _, err := costFactory(f, &H200Cost, caching.MappedPages, &acc)(dev, nil); err != nil {
		t.Fatal(err)
	}
	fs, ok := got.(driver.FractionSetter)
	if !ok {
		t.Fatal("the wrapped device lost SetFraction")
	}
	fs.SetFraction(0.5)
	if dev.fraction != 0.5 {
		t.Errorf("SetFraction reached the device as %v, want 0.5", dev.fraction)
	}
	a, _ := got.Malloc(2<<20, 0)
	got.Free(a, 2<<20)
	got.Map(got.Reserve(1<<30, 0), 60<<20) // three 20 MiB pages
	got.Unmap(1<<40, 20<<20)
	got.Malloc(1<<41, 0) // refused: still a call
	want := 48.4 + 39.1 + 3*49.4 + 39.8 + H200Cost.MallocUs(1<<41)
	if acc.Calls != 5 || acc.Pages != 4 || math.Abs(acc.Ms*1000-want) > 1e-6 || !acc.Mapped || acc.GPU != "NVIDIA H200" {
		t.Errorf("cost %+v, want 5 calls of 4 pages, %.1f us, mapped, on the H200", acc, want)
	}
}

// TestCompareRealCostVerdict checks the verdict's cost line on the real
// multi-agent trace: the estimate prices the very device calls the replays
// made, and the wall times come from the trace header.
func TestCompareRealCostVerdict(t *testing.T) {
	c, err := Compare(opener(realTrace(t)), CompareOptions{Policies: []string{"caching", "expandable", "ideal"},
		Settings: []Setting{}})
	if err != nil {
		t.Fatal(err)
	}
	v := c.Cost
	if v == nil {
		t.Fatal("no cost verdict")
	}
	before := c.Run("caching").Result
	if v.Before.Calls != before.DeviceAllocs+before.DeviceFrees || v.Before.Mapped {
		t.Errorf("before: %+v, want the caching replay's %d cudaMalloc/cudaFree calls", v.Before,
			before.DeviceAllocs+before.DeviceFrees)
	}
	if v.Before.Ms < float64(v.Before.Calls)*0.039 || v.Before.Ms > float64(v.Before.Calls)*3 {
		t.Errorf("before: %.1f ms for %d calls, outside the measured per-call range", v.Before.Ms, v.Before.Calls)
	}
	after := c.Run("expandable").Result
	if c.After != "expandable" || !v.After.Mapped || v.After.Calls != after.DeviceAllocs+after.DeviceFrees || v.After.Pages < v.After.Calls {
		t.Errorf("after %s: %+v, want expandable's %d maps and unmaps, of a page or more each", c.After, v.After,
			after.DeviceAllocs+after.DeviceFrees)
	}
	if c.Run("ideal").Cost != nil {
		t.Error("the physical limit was priced")
	}
	if v.MeasuredArm != "expandable" || v.MeasuredBeforeS <= 0 || v.MeasuredAfterS <= 0 || v.Agree == nil {
		t.Fatalf("measured: %+v, want the header's native and expandable wall times", v)
	}
	if want := (v.DeltaMs >= 0) == (v.MeasuredAfterS >= v.MeasuredBeforeS); *v.Agree != want {
		t.Errorf("agree = %v, want %v", *v.Agree, want)
	}
	lines := c.VerdictLines()
	if !strings.HasPrefix(lines[2], "Allocator cost (estimated): ") || !strings.Contains(lines[2], "measured on the GPU") {
		t.Errorf("verdict line %q", lines[2])
	}
}
