package analysis

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// CompareOptions configures Compare. Compare checks them before any
// replay: a policy the registry does not hold, or a conf or setting the
// policy refuses, is an *OptionError.
type CompareOptions struct {
	// Policies to replay; nil: those the registry replays by default
	// (allocator.Defaults).
	Policies []string
	// Conf is a PYTORCH_CUDA_ALLOC_CONF string (or policy options) given to
	// every policy; empty: the settings recorded in the trace header.
	Conf string
	// Settings are the variants considered for the verdict besides the
	// policies; nil: DefaultSettings. Use an empty non-nil slice for none.
	Settings []Setting
	// Config is the replay configuration (capacity, fraction, ...); its
	// Observer and Progress are set by Compare.
	Config replay.Config
	// Parallel bounds the replays run at once; 0: GOMAXPROCS.
	Parallel int
	// MaxPoints bounds the points of each time series; 0: DefaultMaxPoints.
	MaxPoints int
	// Progress, when set, is called now and then (from any goroutine, never
	// concurrently) with the events replayed so far over all runs and the
	// runs finished.
	Progress func(events int64, runsDone, runs int)
	// Name is the trace's name, for reports.
	Name string
	// DeviceCost prices every run's device calls; nil: H200Cost.
	DeviceCost *DeviceCost
	// Goal is what the recommendation optimises; zero: GoalReserved.
	Goal Goal
}

// AnalyzeOptions configures Analyze. As for Compare, a bad policy, conf
// or sweep is an *OptionError found before any replay.
type AnalyzeOptions struct {
	// Policy whose fragmentation is explained; "": the baseline policy.
	Policy string
	// Conf is a PYTORCH_CUDA_ALLOC_CONF string; empty: the trace's own settings.
	Conf string
	// Config is the replay configuration (capacity, fraction, ...).
	Config replay.Config
	// Top is the number of worst moments listed; 0: 5.
	Top int
	// NoAdvice skips the sweeps.
	NoAdvice bool
	// Sweep overrides the advice sweep; nil: DefaultSweep.
	Sweep []Variant
	// Parallel bounds the replays run at once; 0: GOMAXPROCS.
	Parallel int
	// Progress is as for CompareOptions.
	Progress func(events int64, runsDone, runs int)
	// Name is the trace's name, for reports.
	Name string
	// Policies are the policies the recommendation weighs besides the
	// settings; nil: as compare's.
	Policies []string
	// Goal is what the recommendation optimises; zero: GoalReserved.
	Goal Goal
	// DeviceCost prices every run's device calls; nil: H200Cost.
	DeviceCost *DeviceCost
}

// Setting is an allocator setting replayed as a variant of a policy: a
// PYTORCH_CUDA_ALLOC_CONF fragment, or emptying the cache at a rhythm.
type Setting struct {
	// Policy is the policy it applies to; "": the baseline policy
	// (PyTorch's default allocator).
	Policy string `json:"policy"`
	Conf   string `json:"conf"` // a PYTORCH_CUDA_ALLOC_CONF fragment, e.g. "max_split_size_mb:128"
	// EmptyCacheEvery calls empty_cache after every N allocations.
	EmptyCacheEvery int64 `json:"empty_cache_every,omitempty"`
}

// Name is the change the setting makes: its conf, or "empty_cache every N
// allocations".
func (s Setting) Name() string {
	if s.EmptyCacheEvery > 0 {
		name := fmt.Sprintf(emptyCachePrefix+"%d allocations", s.EmptyCacheEvery)
		if s.Conf != "" {
			name = s.Conf + "," + name
		}
		return name
	}
	return s.Conf
}

// Label names the setting as tables and verdicts show it: its policy,
// "+" and its name.
func (s Setting) Label() string { return s.policy() + "+" + s.Name() }

// policy is the policy the setting applies to.
func (s Setting) policy() string {
	if s.Policy == "" {
		return baselinePolicy()
	}
	return s.Policy
}

// needsCap reports whether a setting does something only under a memory cap.
func (s Setting) needsCap() bool { return strings.Contains(s.Conf, "garbage_collection_threshold") }

// candidate returns the replay of the setting, given the conf of the policies
// and the base its conf is joined to, with how to apply it.
func (s Setting) candidate(conf, base string) *Run {
	r := &Run{Label: s.Label(), Policy: s.policy(), Setting: s.Name(), EmptyCacheEvery: s.EmptyCacheEvery, Conf: conf,
		Apply: settingHint(s.Name())}
	if s.Conf != "" {
		r.Conf = joinConf(base, s.Conf)
	}
	return r
}

// confEnv is the line that sets a PYTORCH_CUDA_ALLOC_CONF value.
func confEnv(conf string) string { return "PYTORCH_CUDA_ALLOC_CONF=" + conf }

// emptyCachePrefix begins the name of a setting that empties the cache
// at a rhythm (Setting.Name).
const emptyCachePrefix = "empty_cache every "

// settingHint says how to get a setting (a Setting.Name) in PyTorch.
func settingHint(setting string) string {
	conf, every := setting, ""
	if i := strings.Index(setting, emptyCachePrefix); i >= 0 {
		conf, every = strings.TrimRight(setting[:i], ","), setting[i+len(emptyCachePrefix):]
		every = strings.TrimSuffix(every, " allocations")
	}
	var parts []string
	if conf != "" {
		parts = append(parts, confEnv(conf))
	}
	if every != "" {
		parts = append(parts, "call torch.cuda.empty_cache() every "+every+" allocations (e.g. between requests)")
	}
	return strings.Join(parts, " and ")
}

// joinConf appends a setting to a base PYTORCH_CUDA_ALLOC_CONF string; the
// later key wins, as in PyTorch.
func joinConf(base, setting string) string {
	base = strings.Trim(base, ", ")
	if base == "" {
		return setting
	}
	return base + "," + setting
}

// The options an OptionError names.
const (
	OptionPolicy  = "policy"  // CompareOptions.Policies, AnalyzeOptions.Policy and Policies
	OptionConf    = "conf"    // the Conf given to every policy
	OptionSetting = "setting" // CompareOptions.Settings, AnalyzeOptions.Sweep
)

// An OptionError is an option Compare or Analyze cannot replay: a policy
// the registry does not hold, or a conf or setting its policy refuses. It
// is returned before any replay; match it with errors.As.
type OptionError struct {
	Option string // OptionPolicy, OptionConf or OptionSetting
	Value  string // the policy, conf or setting refused
	Err    error  // why, from the allocator registry
}

func (e *OptionError) Error() string {
	if e.Option == OptionSetting {
		return e.Value + ": " + e.Err.Error()
	}
	return e.Err.Error()
}

func (e *OptionError) Unwrap() error { return e.Err }

// optionError is the OptionError of a factory the registry refused to
// build for a policy under conf; setting, when set, is the setting that
// conf stands for.
func optionError(policy, conf, setting string, err error) error {
	var se *trace.SettingError
	switch {
	case errors.As(err, &se):
		return err // the trace's own setting: no option of the caller's

	case setting != "":
		return &OptionError{Option: OptionSetting, Value: setting, Err: err}
	case errors.Is(err, allocator.ErrUnknownPolicy):
		return &OptionError{Option: OptionPolicy, Value: policy, Err: err}
	}
	return &OptionError{Option: OptionConf, Value: conf, Err: err}
}

// checkSettings refuses, as a *trace.SettingError, a trace whose header
// holds a setting the baseline policy cannot use, when conf (the
// caller's, which replaces the trace's) is empty: the candidates built on
// the trace's settings would otherwise fail as if the caller had given a
// bad option.
func checkSettings(h *trace.Header, conf string) error {
	if conf != "" || h == nil {
		return nil
	}
	_, err := allocator.NewFactory(baselinePolicy(), "", h)
	var se *trace.SettingError
	if errors.As(err, &se) {
		return err
	}
	return nil
}

// NewFactory builds the allocator registry's factory of a policy under
// conf (allocator.NewFactory), for the trace whose header is h; a policy
// or conf the registry refuses is an *OptionError.
func NewFactory(policy, conf string, h *trace.Header) (driver.Factory, error) {
	f, err := allocator.NewFactory(policy, conf, h)
	if err != nil {
		return nil, optionError(policy, conf, "", err)
	}
	return f, nil
}
