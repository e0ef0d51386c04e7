package record

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fragsim/fragsim/cuda/ring"
)

// AttachConfig says which running process records and where its trace
// goes: a process that installs the recording allocator itself (the
// fragsim Python package's recording()), rather than one Run starts.
type AttachConfig struct {
	// Output is the trace file to write (required).
	Output string
	// PID is the recording process.
	PID int
	// Ready is called with the record region's path once it exists; the
	// process records into it once it has $FRAGSIM_SHM set to that path
	// and opens its recording. An error from Ready ends Attach.
	Ready func(region string) error
	// Gone, when not nil, is closed once the process is known to have
	// ended (its end of a pipe closed): sooner than PID's polling sees it.
	Gone <-chan struct{}
}

// Attach records the process cfg.PID as Run records the program it
// starts: it makes a record region, hands its path to cfg.Ready, drains
// it into a temporary file beside cfg.Output, and once the process closes
// its recording or ends, however it ends (exit, os._exit, a signal, a
// crash), drains what is left, closes the trace and renames it over
// cfg.Output. A process that never opens its recording leaves the
// previous output and gives ErrNoTrace.
func Attach(cfg AttachConfig) (*Summary, error) {
	if cfg.Output == "" {
		return nil, errors.New("no output file")
	}
	if cfg.PID <= 0 || !alive(cfg.PID) {
		return nil, fmt.Errorf("no process %d to record", cfg.PID)
	}
	out, err := filepath.Abs(cfg.Output)
	if err != nil {
		return nil, err
	}
	reg, regPath, err := ring.Create("/dev/shm", ring.DefaultMaxChunks)
	if err != nil { // no tmpfs: a file in the temporary directory works the same
		if reg, regPath, err = ring.Create(os.TempDir(), ring.DefaultMaxChunks); err != nil {
			return nil, err
		}
	}
	defer os.Remove(regPath)
	defer reg.Close()
	tw, err := newTraceWriter(reg, out)
	if err != nil {
		return nil, err
	}
	defer tw.abort()
	if cfg.Ready != nil {
		if err := cfg.Ready(regPath); err != nil {
			return nil, err
		}
	}
	tick := time.NewTicker(drainEvery)
	defer tick.Stop()
wait:
	for {
		select {
		case <-cfg.Gone:
			break wait
		case now := <-tick.C:
			tw.step(now, nil)
			if reg.State() == ring.StateClosed || !alive(cfg.PID) {
				break wait
			}
		}
	}
	closed := reg.State() == ring.StateClosed
	missing, err := tw.finish()
	if errors.Is(err, ErrNoTrace) {
		return &Summary{Path: out}, fmt.Errorf("%w to %s: process %d never opened its recording", ErrNoTrace, out, cfg.PID)
	}
	if err != nil {
		return &Summary{Path: out}, err
	}
	s, err := Summarize(out)
	if s != nil {
		s.Closed, s.Missing = closed, missing
	}
	return s, err
}

// alive reports whether process pid runs (a zombie, which has ended but
// was not yet reaped, does not).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: the signal said it exists
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
