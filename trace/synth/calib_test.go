package synth

import (
	"errors"
	"io"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// The real traces in traces/ are the multi-agent baseline
// (traces/workloads/multi_agent.py, seeds 1, 2 and 3: five BERT-base agents,
// 200 requests) recorded as PyTorch 2.11 memory snapshots on an H200 and
// converted with `fragsim import`.
var realBaselines = []string{"../../traces/baseline_s1.fst", "../../traces/baseline_s2.fst", "../../traces/baseline_s3.fst"}

const realRequests = 200 // requests in each real baseline run

// Tolerances of the calibration (stated in the package documentation).
const (
	tolDecodeSize = 0.12 // decode: size distribution, long synthetic trace vs the real run
	tolDecodeLife = 0.02 // decode: lifetime distribution, same
	tolTrainSize  = 0.10 // train: size distribution, long synthetic trace vs the real run
	tolTrainLife  = 0.05 // train: lifetime distribution, same
	tolSizeLong   = 0.10 // size distribution, long synthetic trace vs the real runs pooled
	tolLifeLong   = 0.02 // lifetime distribution, same
	tolRun        = 0.15 // either distribution, a synthetic run as long as a real one vs the real runs pooled
	tolPeak       = 0.02 // peak live bytes of such a run vs the real runs' mean
)

// profileFile measures the Profile of a trace file and counts its events.
func profileFile(t testing.TB, path string) (Profile, int64) {
	t.Helper()
	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := NewProfiler()
	var n int64
	for {
		e, err := f.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		p.WriteEvent(e)
	}
	return p.Profile(), n
}

func profileConfig(t testing.TB, cfg Config) (Profile, *Stats) {
	t.Helper()
	p := NewProfiler()
	st, err := Generate(p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p.Profile(), st
}

// TestCalibratedOnRealTrace checks that the default workload's request sizes
// and lifetimes agree with real multi-agent BERT traces.
func TestCalibratedOnRealTrace(t *testing.T) {
	var pooled Profile
	var reals []Profile
	var realEvents int64
	var realPeak float64
	for _, path := range realBaselines {
		p, n := profileFile(t, path)
		reals = append(reals, p)
		realEvents = max(realEvents, n)
		realPeak += float64(p.PeakLiveBytes) / float64(len(realBaselines))
		for k := range p.Sizes {
			pooled.Sizes[k] += p.Sizes[k]
			pooled.Lifetimes[k] += p.Lifetimes[k]
		}
	}
	for i := range reals {
		for j := i + 1; j < len(reals); j++ {
			t.Logf("real run %d vs %d: size TVD %.4f, lifetime TVD %.4f", i+1, j+1,
				TotalVariation(reals[i].Sizes.Fractions(), reals[j].Sizes.Fractions()),
				TotalVariation(reals[i].Lifetimes.Fractions(), reals[j].Lifetimes.Fractions()))
		}
	}

	// A long synthetic trace: its distributions are those of the model.
	cfg := DefaultConfig()
	cfg.Events = 2_000_000
	long, st := profileConfig(t, cfg)
	ds := TotalVariation(pooled.Sizes.Fractions(), long.Sizes.Fractions())
	dl := TotalVariation(pooled.Lifetimes.Fractions(), long.Lifetimes.Fractions())
	t.Logf("synthetic (%d events) vs real pooled: size TVD %.4f (tolerance %.2f), lifetime TVD %.4f (tolerance %.2f)",
		st.Events, ds, tolSizeLong, dl, tolLifeLong)
	t.Logf("sizes real:  %v", pooled.Sizes.String())
	t.Logf("sizes synth: %v", long.Sizes.String())
	t.Logf("lifetimes real:  %v", pooled.Lifetimes.String())
	t.Logf("lifetimes synth: %v", long.Lifetimes.String())
	if ds >= tolSizeLong {
		t.Errorf("size distribution: TVD %.4f, tolerance %.2f", ds, tolSizeLong)
	}
	if dl >= tolLifeLong {
		t.Errorf("lifetime distribution: TVD %.4f, tolerance %.2f", dl, tolLifeLong)
	}

	// Synthetic runs as long as a real one, several seeds.
	for seed := uint64(1); seed <= 3; seed++ {
		cfg := DefaultConfig()
		cfg.Seed, cfg.Events = seed, realEvents
		p, _ := profileConfig(t, cfg)
		ds := TotalVariation(pooled.Sizes.Fractions(), p.Sizes.Fractions())
		dl := TotalVariation(pooled.Lifetimes.Fractions(), p.Lifetimes.Fractions())
		dp := float64(p.PeakLiveBytes)/realPeak - 1
		t.Logf("seed %d, %d events: size TVD %.4f, lifetime TVD %.4f, peak live %d bytes (%+.2f%% from the real runs' mean)",
			seed, cfg.Events, ds, dl, p.PeakLiveBytes, 100*dp)
		if ds >= tolRun || dl >= tolRun {
			t.Errorf("seed %d: size TVD %.4f, lifetime TVD %.4f, tolerance %.2f", seed, ds, dl, tolRun)
		}
		if dp > tolPeak || dp < -tolPeak {
			t.Errorf("seed %d: peak live %d bytes, real runs' mean %.0f (tolerance %.0f%%)", seed, p.PeakLiveBytes, realPeak, 100*tolPeak)
		}
	}

	// The model's structure, exactly: what stays live (weights, buffers,
	// cuBLAS workspaces) and allocations per request.
	real := reals[0]
	if real.LiveBytes != st.PersistentBytes || real.LiveBytes != long.LiveBytes {
		t.Errorf("live at the end: real %d bytes, synthetic %d (persistent %d)", real.LiveBytes, long.LiveBytes, st.PersistentBytes)
	}
	persistentAllocs := real.Allocs - real.Freed
	realPer := float64(real.Allocs-persistentAllocs) / realRequests
	synPer := float64(long.Allocs-persistentAllocs) / float64(st.Requests)
	t.Logf("allocations per request: real %.2f, synthetic %.2f", realPer, synPer)
	if d := synPer/realPer - 1; d > 0.01 || d < -0.01 {
		t.Errorf("allocations per request: real %.2f, synthetic %.2f", realPer, synPer)
	}
}

// TestCalibratedOnRealDecodeTrace checks Decode agents against a real trace
// of traces/workloads/kv_decode.py (seed 1: three GPT-2 models, four
// sessions of batch 1..4, prompts of 16..256 tokens, 16..128 tokens
// generated, 700 decode steps), recorded and converted like the baselines.
func TestCalibratedOnRealDecodeTrace(t *testing.T) {
	real, _ := profileFile(t, "../../traces/kv_decode_s1.fst")
	cfg := DefaultConfig()
	cfg.Kinds = []AgentKind{Decode}
	cfg.Agents = 4
	cfg.BatchSizes = []int{1, 2, 3, 4}
	cfg.SeqMin, cfg.SeqMax = 16, 256
	cfg.DecodeMin, cfg.DecodeMax = 16, 128
	cfg.Events = 4_000_000
	syn, st := profileConfig(t, cfg)
	ds := TotalVariation(real.Sizes.Fractions(), syn.Sizes.Fractions())
	dl := TotalVariation(real.Lifetimes.Fractions(), syn.Lifetimes.Fractions())
	t.Logf("decode: synthetic (%d events, %d requests) vs real: size TVD %.4f (tolerance %.2f), lifetime TVD %.4f (tolerance %.2f)",
		st.Events, st.Requests, ds, tolDecodeSize, dl, tolDecodeLife)
	t.Logf("sizes real:  %v", real.Sizes.String())
	t.Logf("sizes synth: %v", syn.Sizes.String())
	t.Logf("lifetimes real:  %v", real.Lifetimes.String())
	t.Logf("lifetimes synth: %v", syn.Lifetimes.String())
	if ds >= tolDecodeSize {
		t.Errorf("decode size distribution: TVD %.4f, tolerance %.2f", ds, tolDecodeSize)
	}
	if dl >= tolDecodeLife {
		t.Errorf("decode lifetime distribution: TVD %.4f, tolerance %.2f", dl, tolDecodeLife)
	}
}

// TestCalibratedOnRealTrainTrace checks Train agents against a real trace of
// traces/workloads/train.py (seed 1: a 6-layer BERT with a 4-label head,
// AdamW, 60 steps of batch 8..32 and 32..512 tokens).
func TestCalibratedOnRealTrainTrace(t *testing.T) {
	real, _ := profileFile(t, "../../traces/train_s1.fst")
	cfg := DefaultConfig()
	cfg.Kinds = []AgentKind{Train}
	cfg.Agents = 1
	cfg.Encoder.Layers = 6
	cfg.BatchSizes = nil
	for b := 8; b <= 32; b++ {
		cfg.BatchSizes = append(cfg.BatchSizes, b)
	}
	cfg.SeqMin, cfg.SeqMax = 32, 512
	cfg.Events = 1_000_000
	syn, st := profileConfig(t, cfg)
	ds := TotalVariation(real.Sizes.Fractions(), syn.Sizes.Fractions())
	dl := TotalVariation(real.Lifetimes.Fractions(), syn.Lifetimes.Fractions())
	t.Logf("train: synthetic (%d events, %d steps) vs real: size TVD %.4f (tolerance %.2f), lifetime TVD %.4f (tolerance %.2f)",
		st.Events, st.Requests, ds, tolTrainSize, dl, tolTrainLife)
	t.Logf("lifetimes real:  %v", real.Lifetimes.String())
	t.Logf("lifetimes synth: %v", syn.Lifetimes.String())
	if ds >= tolTrainSize {
		t.Errorf("train size distribution: TVD %.4f, tolerance %.2f", ds, tolTrainSize)
	}
	if dl >= tolTrainLife {
		t.Errorf("train lifetime distribution: TVD %.4f, tolerance %.2f", dl, tolTrainLife)
	}
	// What stays: weights, buffers, both cuBLAS workspaces, AdamW's state.
	if real.LiveBytes != st.PersistentBytes || syn.LiveBytes != st.PersistentBytes {
		t.Errorf("live at the end: real %d bytes, synthetic %d (persistent %d)", real.LiveBytes, syn.LiveBytes, st.PersistentBytes)
	}
}
