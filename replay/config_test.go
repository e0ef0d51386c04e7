package replay

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestRunValidatesConfig checks that Run refuses a configuration it
// cannot replay with a *ConfigError naming the fields, before it reads an
// event, and that Validate gives the same error without a trace.
func TestRunValidatesConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg    Config
		fields []string
	}{
		{Config{Fraction: math.NaN()}, []string{"Fraction"}},
		{Config{Fraction: 1.5}, []string{"Fraction"}},
		{Config{Fraction: -0.1}, []string{"Fraction"}},
		{Config{EmptyCacheEvery: -1}, []string{"EmptyCacheEvery"}},
		{Config{DefragThresholdPct: 101}, []string{"DefragThresholdPct"}},
		{Config{DefragThresholdPct: math.NaN()}, []string{"DefragThresholdPct"}},
		{Config{EmptyCacheEvery: 3, DefragThresholdPct: 50}, []string{"EmptyCacheEvery", "DefragThresholdPct"}},
	} {
		r := traceOf(t, &trace.Header{}, metricsTrace())
		res, err := Run(r, newSegPolicy, tc.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || !slices.Equal(ce.Fields, tc.fields) || res != nil {
			t.Errorf("Run(%+v) = %v, %v; want a ConfigError of %v and no result", tc.cfg, res, err, tc.fields)
			continue
		}
		if verr := tc.cfg.Validate(); verr == nil || verr.Error() != err.Error() {
			t.Errorf("Validate(%+v) = %v, Run said %v", tc.cfg, verr, err)
		}
	}
	for _, ok := range []Config{{}, {Fraction: 1}, {Fraction: 0.5, EmptyCacheEvery: 10}, {DefragThresholdPct: 100}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", ok, err)
		}
	}
}
