// Package traces holds real recorded traces and the workload scripts that made them.
package traces

import (
	_ "embed"
)

// BaselineName is the file name of the embedded multi-agent baseline.
const BaselineName = "baseline_s1.fst"

// baseline is five agents, each with its own BERT-base copy, recorded on an
// H200 with PyTorch 2.11 (traces/workloads/multi_agent.py --seed 1).
//
//go:embed baseline_s1.fst
var baseline []byte

// Baseline returns the multi-agent baseline trace embedded in the binary:
// its file name and its bytes (a fragsim trace file).
func Baseline() (name string, data []byte, err error) {
	return BaselineName, baseline, nil
}
