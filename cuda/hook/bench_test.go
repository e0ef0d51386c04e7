//go:build cgo

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var benchOnce struct {
	sync.Once
	dir  string
	skip string
}

// benchDriver points the in-process library at a fake driver.
func benchDriver(b *testing.B) {
	benchOnce.Do(func() {
		if _, err := exec.LookPath("gcc"); err != nil {
			benchOnce.skip = "gcc not found"
			return
		}
		d, err := os.MkdirTemp("", "fragsim-hook-bench")
		if err != nil {
			benchOnce.skip = err.Error()
			return
		}
		benchOnce.dir = d
		lib := filepath.Join(d, "libcuda.so.1")
		if out, err := exec.Command("gcc", "-O2", "-shared", "-fPIC", "-o", lib, "testdata/fakecuda.c").CombinedOutput(); err != nil {
			benchOnce.skip = "gcc: " + string(out)
			return
		}
		os.Setenv("FRAGSIM_LIBCUDA", lib)
	})
	if benchOnce.skip != "" {
		b.Skip(benchOnce.skip)
	}
}

// BenchmarkAllocFree measures one alloc/free pair through the hook (the
// fake driver's malloc included), without and then with recording; the
// difference is the cost of recording two calls.
func BenchmarkAllocFree(b *testing.B) {
	benchDriver(b)
	b.Run("off", func(b *testing.B) {
		allocFreePairs(b.N)
	})
	b.Run("recording", func(b *testing.B) {
		stateMu.Lock()
		open := cur != nil
		stateMu.Unlock()
		if !open {
			if err := openForBench(filepath.Join(benchOnce.dir, "bench.fst")); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		allocFreePairs(b.N)
		b.StopTimer()
		fragsim_flush()
	})
	// With the metrics served (FRAGSIM_METRICS_ADDR) every call also goes
	// to the model of PyTorch's allocator (model.go), without a fraction;
	// it stays on.
	b.Run("recording, metrics", func(b *testing.B) {
		metricsModelForBench()
		b.ResetTimer()
		allocFreePairs(b.N)
		b.StopTimer()
		fragsim_flush()
	})
	// Under a memory fraction the model also decides the OOMs.
	b.Run("recording, fraction", func(b *testing.B) {
		setFractionForBench(0.5)
		b.ResetTimer()
		allocFreePairs(b.N)
		b.StopTimer()
		fragsim_flush()
	})
}

// BenchmarkModelPair measures what the model of PyTorch's allocator adds
// to one alloc/free pair when it runs (under a fraction, or with the
// metrics served): the calls the hook makes into model.go, on a model of
// its own (device 63, which the other benchmarks never use).
func BenchmarkModelPair(b *testing.B) {
	if !modelPairsForBench(63, 1) {
		b.Fatal("the model did not start")
	}
	b.ResetTimer()
	modelPairsForBench(63, b.N)
}
