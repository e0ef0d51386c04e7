package fakedev

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/fragsim/fragsim/replay/driver"
)

// HugeSizes are request sizes a trace may carry that no device holds, and
// one (32 GiB) that the devices of CheckHuge serve.
var HugeSizes = []uint64{32 << 30, 1 << 40, 1 << 47, 1 << 62, math.MaxUint64}

// CheckHuge builds a policy with build on a device of 80 GiB and on one
// without a capacity that reports 64 GiB in all, and asks each for
// every size of HugeSizes. A size above the device's total must be an OOM
// that leaves the device as it was; one within it must be served with a
// block at least as large. Then the block is freed, and a 1 MiB request
// must be served. Nothing may panic or report a misuse of the device.
func CheckHuge(t *testing.T, build func(d *Device) driver.Policy) {
	t.Helper()
	for _, dev := range []struct {
		name            string
		capacity, total uint64
	}{{"80GiB", 80 << 30, 80 << 30}, {"no capacity", 0, 64 << 30}} {
		for _, s := range HugeSizes {
			t.Run(fmt.Sprintf("%s/%d", dev.name, s), func(t *testing.T) {
				d := &Device{Capacity: dev.capacity, Total: dev.total, NoLog: true}
				p := build(d)
				b, err := p.Malloc(s, 0)
				switch {
				case s > dev.total:
					if !errors.Is(err, driver.ErrOOM) {
						t.Fatalf("Malloc(%d) = %+v, %v; want an OOM", s, b, err)
					}
					if d.Used != 0 {
						t.Errorf("the refused request left %d bytes taken", d.Used)
					}
				case err != nil:
					t.Fatalf("Malloc(%d): %v", s, err)
				default:
					if b.SizeBytes < s {
						t.Fatalf("Malloc(%d) = a block of %d bytes", s, b.SizeBytes)
					}
					p.FreeRequested(b)
					p.FreeCompleted(b)
				}
				if b, err := p.Malloc(1<<20, 0); err != nil || b.SizeBytes < 1<<20 {
					t.Errorf("Malloc(1 MiB) after it = %+v, %v", b, err)
				}
				if len(d.Errors) > 0 {
					t.Errorf("device misuse: %v", d.Errors)
				}
			})
		}
	}
}
