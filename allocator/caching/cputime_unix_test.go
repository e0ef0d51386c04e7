//go:build unix

package caching_test

import "syscall"

// cpuSeconds returns the CPU time the process has used, so that benchmarks
// can report rates per CPU-second, unskewed by other load on the machine.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
