package fleet

import (
	"fmt"
	"math"
	"regexp"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
)

// Options say how every input of a fleet is analysed: the flags `compare`
// takes (Goal, Policies, Conf, Settings, Capacity), those `import` takes
// for a snapshot that does not record them (GPUTotal, MemoryFraction),
// and the labels. They are plain values, so that an engine can ship them
// to its workers; Check parses them once, before any work.
type Options struct {
	Goal     string   `json:"goal"`
	Policies []string `json:"policies,omitempty"`
	Conf     string   `json:"conf,omitempty"`
	// Settings replace the default variants when non-nil ("none": no
	// variant), as compare's --setting.
	Settings []string `json:"settings,omitempty"`
	// SettingsSet says Settings were given (so that none is not nil).
	SettingsSet    bool    `json:"settings_set,omitempty"`
	Capacity       string  `json:"capacity,omitempty"`
	GPUTotal       string  `json:"gpu_total,omitempty"`
	MemoryFraction float64 `json:"memory_fraction,omitempty"`
	Label          string  `json:"label,omitempty"`
	// Stacks is how many stranding stacks a row keeps (0: 5).
	Stacks int `json:"stacks,omitempty"`
	// Parallel bounds the replays of one input run at once (0: GOMAXPROCS).
	Parallel int `json:"parallel,omitempty"`
	// ReportsDir, when set, is where each trace's HTML report is written
	// (`fragsim report`'s, from the same comparison), as ReportName names
	// it; the row's Report is then ReportsSub/that name.
	ReportsDir string `json:"reports_dir,omitempty"`
}

// ReportsSub is the directory of the fleet's outputs that --reports fills.
const ReportsSub = "reports"

// parsed is Options checked and converted.
type parsed struct {
	compare  analysis.CompareOptions
	goal     analysis.Goal
	gpuTotal uint64
	fraction float64
	label    *regexp.Regexp
	stacks   int
	reports  string
}

// Check parses the options: a bad goal, size, fraction or label is an
// error naming its flag. A bad policy, conf or setting is found by the
// comparison itself (an *analysis.OptionError), before any replay of the
// first input.
func (o Options) Check() error {
	_, err := o.parse()
	return err
}

func (o Options) parse() (*parsed, error) {
	p := &parsed{stacks: o.Stacks, fraction: o.MemoryFraction, reports: o.ReportsDir}
	if p.stacks <= 0 {
		p.stacks = 5
	}
	var err error
	if p.goal, err = analysis.ParseGoal(o.Goal); err != nil {
		return nil, fmt.Errorf("--goal: %w", err)
	}
	p.compare = analysis.CompareOptions{Policies: o.Policies, Conf: o.Conf, Goal: p.goal, Parallel: o.Parallel, MaxPoints: 2}
	if o.Capacity != "" {
		if p.compare.Config.CapacityBytes, err = replay.ParseCapacity(o.Capacity); err != nil {
			return nil, fmt.Errorf("--capacity: %w", err)
		}
	}
	if o.SettingsSet || o.Settings != nil {
		p.compare.Settings = []analysis.Setting{}
		for _, s := range o.Settings {
			if s != "none" {
				p.compare.Settings = append(p.compare.Settings, analysis.Setting{Conf: s})
			}
		}
	}
	if o.GPUTotal != "" {
		if p.gpuTotal, err = replay.ParseCapacity(o.GPUTotal); err != nil {
			return nil, fmt.Errorf("--gpu-total: %w", err)
		}
	}
	if math.IsNaN(o.MemoryFraction) || o.MemoryFraction < 0 || o.MemoryFraction > 1 {
		return nil, fmt.Errorf("--memory-fraction %v: want a fraction from 0 to 1", o.MemoryFraction)
	}
	if p.label, err = ParseLabelRE(o.Label); err != nil {
		return nil, err
	}
	return p, nil
}
