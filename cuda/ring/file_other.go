//go:build !linux

package ring

import "errors"

// Create is Linux only: the recording hook runs on Linux.
func Create(dir string, maxChunks int) (*Region, string, error) {
	return nil, "", errors.New("recording needs Linux")
}

// Map is Linux only: the recording hook runs on Linux.
func Map(path string) (*Region, error) {
	return nil, errors.New("recording needs Linux")
}
