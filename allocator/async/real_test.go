package async_test

import (
	"math"
	"testing"

	"github.com/fragsim/fragsim/allocator/async"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// realBaselinePeak is the pool's ReservedMemHigh (memory_stats
// reserved_bytes.all.peak) of a real run of traces/workloads/multi_agent.py
// --seed 1 under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync on an
// NVIDIA H200 (PyTorch 2.11.0+cu130, driver 580): key baseline_async of the
// run's timings.json (traces/workloads/record_snapshots.sh).
// traces/baseline_s1.fst is the import of the same seeded workload's
// native-allocator snapshot: the same request stream.
const realBaselinePeak = 2449473536

// TestRealBaselinePeak replays the real trace through the model and checks
// its peak reserved against the real pool's.
func TestRealBaselinePeak(t *testing.T) {
	res, err := replay.RunFile("../../traces/baseline_s1.fst", func(dev driver.Device, _ *trace.Header) (driver.Policy, error) {
		return async.New(dev, async.DefaultConfig())
	}, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if res.OOMs != 0 {
		t.Fatalf("%d OOMs", res.OOMs)
	}
	p := res.PeakReservedBytes
	if e := 100 * (float64(p)/realBaselinePeak - 1); math.Abs(e) > 10 {
		t.Errorf("model peak %d bytes, %+.1f%% off the real %d", p, e, uint64(realBaselinePeak))
	}
	if p%(32<<20) != 0 {
		t.Errorf("model peak %d bytes is not a multiple of 32 MiB, as every real peak is", p)
	}
}
