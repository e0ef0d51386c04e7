package replay

import (
	"fmt"
	"io"
	"math"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// MinCapacity returns the smallest device capacity, to 2 MiB, on which the
// trace completes with no OOM under the policies f builds. cfg's other
// settings apply, except CapacityBytes and memory fractions (the config's,
// the trace's and any a policy's configuration sets), which are ignored:
// the device itself is sized.
func MinCapacity(open func() (*trace.Reader, io.Closer, error), f driver.Factory, cfg Config) (uint64, error) {
	run := func(capacity uint64) (*Result, error) {
		r, c, err := open()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		cc := cfg
		cc.CapacityBytes = capacity
		cc.Observer = nil
		cc.noFraction = true
		return Run(r, f, cc)
	}
	free, err := run(math.MaxUint64 / 2)
	if err != nil {
		return 0, err
	}
	if free.OOMs > 0 {
		return 0, fmt.Errorf("replay: the trace has OOMs even on an unlimited device")
	}
	const step = 2 << 20
	hi := (free.PeakReservedBytes + cfg.OutsideBytes + step - 1) / step * step
	if hi == 0 {
		return 0, nil
	}
	return bisect(0, hi, step, func(c uint64) (bool, error) {
		res, err := run(c)
		return err == nil && res.OOMs == 0, err
	})
}

// bisect returns the smallest multiple of step in (lo, hi] for which fits
// holds, taking lo as failing and hi as fitting, to within step.
func bisect(lo, hi, step uint64, fits func(uint64) (bool, error)) (uint64, error) {
	for hi-lo > step {
		mid := (lo + (hi-lo)/2) / step * step
		if mid <= lo {
			mid = lo + step
		}
		ok, err := fits(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}
