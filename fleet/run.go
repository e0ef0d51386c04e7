package fleet

import (
	"github.com/fragsim/fragsim/analysis"
)

// Run analyses the inputs one after the other in this process and sums
// them up: the fleet without an engine, for tests and for checking an
// engine's answer. progress, when set, is called after each input.
func Run(inputs []string, o Options, scratchDir string, progress func(done int, r *Row)) ([]Row, *Fleet, error) {
	p, err := o.parse()
	if err != nil {
		return nil, nil, err
	}
	rows := make([]Row, 0, len(inputs))
	var parts []Part
	for i, in := range inputs {
		r := Analyze(in, o, scratchDir)
		rows = append(rows, r)
		parts = append(parts, PartsOf(r, p.goal)...)
		if progress != nil {
			progress(i+1, &rows[len(rows)-1])
		}
	}
	SortRows(rows)
	return rows, Summarize(parts, p.goal), nil
}

// GoalOf returns the options' goal (the zero goal, reserved, when it does
// not parse: Check says why).
func (o Options) GoalOf() analysis.Goal {
	p, err := o.parse()
	if err != nil {
		return analysis.Goal{}
	}
	return p.goal
}
