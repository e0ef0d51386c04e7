package analysis

import (
	"fmt"
	"strings"

	"github.com/fragsim/fragsim/replay"
)

// GoalKind is what a recommendation optimises.
type GoalKind string

const (
	// GoalReserved picks the lowest peak reserved: the memory the process
	// holds, and so what the other processes on the GPU cannot have.
	GoalReserved GoalKind = "reserved"
	// GoalFragmentation picks the lowest at_peak_pct.
	GoalFragmentation GoalKind = "fragmentation"
	// GoalFit picks, among the candidates whose min capacity is within
	// the goal's size (no OOM on a device that large), the cheapest.
	GoalFit GoalKind = "fit"
)

// Goal is a recommendation's goal, as --goal gives it.
type Goal struct {
	Kind GoalKind `json:"kind"`
	// FitBytes is the device size a fit goal must stay within.
	FitBytes uint64 `json:"fit_bytes,omitempty"`
	// text is the goal as given, for reports.
	text string
}

// String is the goal as --goal takes it: "reserved", "fragmentation",
// "fit:24GiB".
func (g Goal) String() string {
	switch {
	case g.text != "":
		return g.text
	case g.Kind == "":
		return string(GoalReserved)
	case g.Kind == GoalFit:
		return "fit:" + fmt.Sprint(g.FitBytes)
	}
	return string(g.Kind)
}

// ParseGoal parses --goal: "reserved" (also ""), "fragmentation", or
// "fit:SIZE" with SIZE as replay.ParseCapacity takes it (24GiB, a100-80g).
func ParseGoal(s string) (Goal, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch {
	case t == "" || t == string(GoalReserved):
		return Goal{Kind: GoalReserved, text: string(GoalReserved)}, nil
	case t == string(GoalFragmentation):
		return Goal{Kind: GoalFragmentation, text: t}, nil
	case strings.HasPrefix(t, "fit:"):
		size := strings.TrimSpace(s)[len("fit:"):]
		n, err := replay.ParseCapacity(size)
		if err != nil {
			return Goal{}, fmt.Errorf("goal %q: %w", s, err)
		}
		if n == 0 {
			return Goal{}, fmt.Errorf("goal %q: the size must not be zero", s)
		}
		return Goal{Kind: GoalFit, FitBytes: n, text: "fit:" + strings.TrimSpace(size)}, nil
	}
	return Goal{}, fmt.Errorf("unknown goal %q (valid: reserved, fragmentation, fit:SIZE such as fit:24GiB)", s)
}
