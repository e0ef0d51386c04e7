package trace

import (
	"errors"
	"fmt"
)

// ErrCorrupt is matched (errors.Is) by every error that reports a malformed,
// truncated or unsupported trace.
var ErrCorrupt = errors.New("corrupt trace")

// ErrTruncated is matched by the error of a file cut short: every whole
// chunk before the cut was returned first. It also matches ErrCorrupt.
var ErrTruncated = errors.New("trace truncated")

// ErrVersion is matched by the error of a file written in a format version
// this package does not know. It also matches ErrCorrupt.
var ErrVersion = errors.New("unsupported trace format version")

// SettingError is the error of a setting stored in a trace's header that
// cannot be used: an allocator setting no policy accepts (an unknown key
// of PYTORCH_CUDA_ALLOC_CONF, a threshold that is not a number). The
// trace, not the command line, is at fault: it matches ErrCorrupt.
type SettingError struct {
	Err error // what is wrong with the setting
}

func (e *SettingError) Error() string { return "trace header: " + e.Err.Error() }

// Unwrap returns what is wrong with the setting.
func (e *SettingError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *SettingError) Is(target error) bool { return target == ErrCorrupt }

// FormatError describes bad trace data and where it is.
type FormatError struct {
	File   string // file name; empty when reading an unnamed stream
	Offset int64  // byte offset of the chunk (or field) at fault
	Chunk  int64  // index of that chunk; the header chunk is chunk 0
	Event  int64  // index of the event at fault, or the number of events read before
	Msg    string // what was expected and what was found
	Err    error  // ErrTruncated, ErrVersion, or nil
}

// Error returns a one-line message naming the file, offset, chunk and event.
func (e *FormatError) Error() string {
	prefix := ""
	if e.File != "" {
		prefix = e.File + ": "
	}
	if e.Err == ErrTruncated {
		return fmt.Sprintf("%struncated at byte offset %d (chunk %d, after event %d): %s",
			prefix, e.Offset, e.Chunk, e.Event, e.Msg)
	}
	return fmt.Sprintf("%scorrupt trace at byte offset %d (chunk %d, event %d): %s",
		prefix, e.Offset, e.Chunk, e.Event, e.Msg)
}

// Is reports whether target is ErrCorrupt.
func (e *FormatError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the error's class beyond ErrCorrupt, if any.
func (e *FormatError) Unwrap() error { return e.Err }
