package replay

import (
	"fmt"
	"strings"
)

// A ConfigError is a Config that cannot be replayed. Run returns it
// before reading any event; Validate returns it without a trace.
type ConfigError struct {
	// Fields are the Config fields at fault, as the type names them.
	Fields []string
	// Value is the value refused ("" when the fields conflict).
	Value string
	// Want says what would do.
	Want string
}

func (e *ConfigError) Error() string {
	s := "replay: " + strings.Join(e.Fields, " and ")
	if e.Value != "" {
		s += " " + e.Value
	}
	return s + ": want " + e.Want
}

// Validate checks the configuration: a fraction from 0 to 1, an
// empty_cache rhythm of 0 or more, a defrag threshold from 0 to 100, and
// not both injections at once. The error is a *ConfigError.
func (c Config) Validate() error {
	switch {
	case !(c.Fraction >= 0 && c.Fraction <= 1):
		return &ConfigError{Fields: []string{"Fraction"}, Value: fmt.Sprint(c.Fraction), Want: "a number in (0, 1], or 0 for none"}
	case c.EmptyCacheEvery < 0:
		return &ConfigError{Fields: []string{"EmptyCacheEvery"}, Value: fmt.Sprint(c.EmptyCacheEvery), Want: "a count of requests, 0 for none"}
	case !(c.DefragThresholdPct >= 0 && c.DefragThresholdPct <= 100):
		return &ConfigError{Fields: []string{"DefragThresholdPct"}, Value: fmt.Sprint(c.DefragThresholdPct), Want: "a percentage from 0 to 100, 0 for none"}
	case c.EmptyCacheEvery > 0 && c.DefragThresholdPct > 0:
		return &ConfigError{Fields: []string{"EmptyCacheEvery", "DefragThresholdPct"}, Want: "one or the other, not both"}
	}
	return nil
}
