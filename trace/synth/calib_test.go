package synth

import (
	"errors"
	"io"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// profileFile measures the Profile of a trace file.
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

func TestCalibrationPrint(t *testing.T) {
	real, n := profileFile(t, "testdata/baseline_s1.fst")
	cfg := DefaultConfig()
	cfg.Events = n
	p := NewProfiler()
	if _, err := Generate(p, cfg); err != nil {
		t.Fatal(err)
	}
	syn := p.Profile()
	t.Logf("real: %d events, %d allocs, %d freed; synth %d allocs %d freed", n, real.Allocs, real.Freed, syn.Allocs, syn.Freed)
	t.Logf("size real  %v", real.Sizes.String())
	t.Logf("size synth %v", syn.Sizes.String())
	t.Logf("life real  %v", real.Lifetimes.String())
	t.Logf("life synth %v", syn.Lifetimes.String())
	t.Logf("tvd size %.4f life %.4f", TotalVariation(real.Sizes.Fractions(), syn.Sizes.Fractions()), TotalVariation(real.Lifetimes.Fractions(), syn.Lifetimes.Fractions()))
}

func TestCalibrationNoise(t *testing.T) {
	var reals []Profile
	for _, n := range []string{"s1", "s2", "s3"} {
		p, _ := profileFile(t, "testdata/baseline_"+n+".fst")
		reals = append(reals, p)
	}
	for i := range reals {
		for j := i + 1; j < len(reals); j++ {
			t.Logf("real %d vs %d: size %.4f life %.4f", i, j, TotalVariation(reals[i].Sizes.Fractions(), reals[j].Sizes.Fractions()), TotalVariation(reals[i].Lifetimes.Fractions(), reals[j].Lifetimes.Fractions()))
		}
	}
	var all Profile
	for _, r := range reals {
		for k := range r.Sizes {
			all.Sizes[k] += r.Sizes[k]
			all.Lifetimes[k] += r.Lifetimes[k]
		}
	}
	for seed := uint64(1); seed <= 5; seed++ {
		cfg := DefaultConfig()
		cfg.Seed = seed
		cfg.Events = 123927
		p := NewProfiler()
		Generate(p, cfg)
		s := p.Profile()
		cfg.Events = 5_000_000
		p = NewProfiler()
		Generate(p, cfg)
		l := p.Profile()
		t.Logf("synth seed %d vs real s1: size %.4f life %.4f; vs all three: %.4f %.4f; long synth vs all: %.4f %.4f", seed,
			TotalVariation(reals[0].Sizes.Fractions(), s.Sizes.Fractions()), TotalVariation(reals[0].Lifetimes.Fractions(), s.Lifetimes.Fractions()),
			TotalVariation(all.Sizes.Fractions(), s.Sizes.Fractions()), TotalVariation(all.Lifetimes.Fractions(), s.Lifetimes.Fractions()),
			TotalVariation(all.Sizes.Fractions(), l.Sizes.Fractions()), TotalVariation(all.Lifetimes.Fractions(), l.Lifetimes.Fractions()))
	}
}
