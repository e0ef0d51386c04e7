package allocator

import (
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Entry is one policy of the registry: what it is, and how to build it.
type Entry struct {
	Facts
	// Build parses conf (see NewFactory) and returns the factory of the
	// policy under it; h is the trace's header, nil when not known. A bad
	// conf is an error here, before any replay.
	Build func(conf string, h *trace.Header) (driver.Factory, error)
}

// Facts are what the registry knows of a policy: everything the analysis
// needs to weigh it, explain it and say how to get it, so that the
// analysis never names a policy. PageBytes is that of the policy's default
// options (granularity_mb and page_mb change it).
type Facts struct {
	Name     string   // canonical name, as Names lists it
	Aliases  []string // other accepted names (async for pooled)
	Describe string   // one line, for --help
	// Role is the part the policy plays in a comparison.
	Role Role
	// Default marks the policies a comparison replays when it is given
	// none.
	Default bool

	// Exact is set for a policy that replays PyTorch's own allocator
	// exactly (caching, expandable); the others are models.
	Exact bool
	// ErrorPct is a model's measured error of peak reserved against real
	// runs, in percent; 0 when exact or not measured.
	ErrorPct  float64
	PageBytes uint64 // granularity of its device requests; 0 when it has none

	// TorchConf is the PYTORCH_CUDA_ALLOC_CONF fragment that gives the
	// policy in PyTorch: what switching to it changes. "" for the baseline
	// (PyTorch's default) and for allocators PyTorch has no setting for.
	TorchConf string
	// Apply says how to get the policy in PyTorch, in a few words.
	Apply string

	// MapPages is the policy's device-cost model: the physical pages a map
	// or unmap of n bytes takes, each priced as its own driver calls; nil
	// for a policy whose maps are one page each (or that never maps).
	MapPages func(n uint64) uint64
	// WallArm names the arm of the wall times measured on the GPU that
	// stands for the policy: a trace header's tag wall_<arm>_s, written by
	// the workload scripts in traces/workloads. "" when none does.
	WallArm string
}

// Env is the line to put in the environment to get the policy in
// PyTorch, "" when no variable gives it.
func (f Facts) Env() string {
	if f.TorchConf == "" {
		return ""
	}
	return "PYTORCH_CUDA_ALLOC_CONF=" + f.TorchConf
}

// Role is the part a policy plays in a comparison.
type Role int

const (
	// Candidate is a policy one can switch to, weighed for the
	// recommendation.
	Candidate Role = iota
	// Baseline is PyTorch's default allocator: a comparison measures the
	// others against it and varies its settings. One policy has it.
	Baseline
	// Limit is the physical limit: shown beside the others, never
	// recommended, its device calls never priced. At most one policy has
	// it.
	Limit
)

func (r Role) String() string {
	switch r {
	case Baseline:
		return "baseline"
	case Limit:
		return "limit"
	}
	return "candidate"
}
