//go:build !linux

package pickle

// Prefault does nothing on this system (see the Linux version).
func Prefault(tables ...[]byte) {}

// HugePages does nothing on this system (see the Linux version).
func HugePages(tables ...[]byte) {}
