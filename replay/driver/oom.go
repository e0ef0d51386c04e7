package driver

import (
	"errors"
	"fmt"

	"github.com/fragsim/fragsim/trace"
)

// ErrOOM is wrapped by errors a Policy returns when it cannot serve a request.
var ErrOOM = errors.New("out of memory")

// OOMError describes a request a policy could not serve.
type OOMError struct {
	SizeBytes  uint64 // requested bytes
	AllocBytes uint64 // bytes the policy asked of the device
	Stream     trace.StreamID
	Reason     string
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("out of memory: request of %d bytes (device asked for %d) on stream %#x: %s",
		e.SizeBytes, e.AllocBytes, uint64(e.Stream), e.Reason)
}

// Unwrap makes errors.Is(err, ErrOOM) true.
func (e *OOMError) Unwrap() error { return ErrOOM }
