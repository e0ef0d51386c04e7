package analysis

import (
	"fmt"

	"github.com/fragsim/fragsim/allocator"
)

// The analysis asks the allocator registry for every fact of a policy
// (allocator.Facts): its role, its PyTorch setting, how to apply it, how
// far to trust it, and its device-cost model. It names none.

// factsOf returns the registry's facts of a policy or alias; a name the
// registry does not hold gets facts that hold its name alone (a model,
// unmeasured, priced one page a map).
func factsOf(policy string) allocator.Facts {
	if f, ok := allocator.Lookup(policy); ok {
		return f
	}
	return allocator.Facts{Name: policy}
}

// baselinePolicy is the name of the baseline policy: PyTorch's default
// allocator, which settings vary and the others are measured against.
func baselinePolicy() string { return allocator.BaselineFacts().Name }

// trust returns, from the allocator registry, whether a policy is
// PyTorch's allocator replayed exactly and, for a model, its measured
// error of peak reserved, in percent (0: not measured).
func trust(policy string) (exact bool, errorPct float64) {
	f := factsOf(policy)
	if f.Exact {
		return true, 0
	}
	return false, f.ErrorPct
}

// Exact reports whether a policy reproduces a real allocator exactly
// (the registry's Facts.Exact); the others are models.
func Exact(policy string) bool { return factsOf(policy).Exact }

// settingOf is the change a run stands for, "" for the trace's own
// settings: its setting, or the PyTorch setting of its policy, or the
// policy's name when PyTorch has no setting for it.
func settingOf(r *Run) string {
	if r.Setting != "" {
		return r.Setting
	}
	f := factsOf(r.Policy)
	switch {
	case f.Role == allocator.Baseline:
		return ""
	case f.TorchConf != "":
		return f.TorchConf
	}
	return r.Policy
}

// applyHint says how to get a policy, or a setting of it, in PyTorch.
func applyHint(policy, setting string) string {
	if setting == "" {
		return factsOf(policy).Apply
	}
	return settingHint(setting)
}

// measuredArm is the arm of the wall times measured on the GPU (trace
// header tags wall_<arm>_s) that stands for a run: that of the policy
// whose PyTorch setting is the change the run stands for, "" when none.
func measuredArm(r *Run) string {
	if r.EmptyCacheEvery > 0 {
		return ""
	}
	s := settingOf(r)
	for _, f := range allocator.All() {
		if f.WallArm == "" || f.Role == allocator.Limit {
			continue
		}
		if (f.Role == allocator.Baseline && s == "") || (f.TorchConf != "" && f.TorchConf == s) {
			return f.WallArm
		}
	}
	return ""
}

// limitNote names the physical limit in the verdict's methods.
func limitNote(pct float64) string {
	if f, ok := allocator.LimitFacts(); ok {
		return fmt.Sprintf("%s %.1f%% is the physical limit", f.Name, pct)
	}
	return fmt.Sprintf("the physical limit is %.1f%%", pct)
}
