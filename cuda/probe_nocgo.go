//go:build !cgo

package cuda

// Probe needs cgo; without it, it returns ErrNoCgo.
func Probe(device int) (*ProbeResult, error) { return nil, ErrNoCgo }
