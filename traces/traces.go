// Package traces holds real recorded traces and the workload scripts that made them.
package traces

import "errors"

// Baseline returns the multi-agent baseline trace embedded in the binary:
// its file name and its bytes (a fragsim trace file).
func Baseline() (name string, data []byte, err error) {
	if len(baseline) == 0 {
		return "", nil, errors.New("no baseline trace is embedded in this build")
	}
	return baselineName, baseline, nil
}

var (
	baselineName string
	baseline     []byte
)
