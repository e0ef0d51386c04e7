package record

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fragsim/fragsim/cuda/ring"
	"github.com/fragsim/fragsim/trace"
)

const (
	drainEvery = 200 * time.Millisecond
	flushEvery = time.Second
)

// traceWriter writes the recorded program's region into a temporary trace
// beside out, made before the program starts (so that an unwritable
// output fails at once) and given its header once the program opened its
// recording.
type traceWriter struct {
	reg    *ring.Region
	out    string // the output, symbolic links resolved
	f      *os.File
	tmp    string // the temporary trace, until renamed or removed
	w      *trace.Writer
	d      *ring.Drainer
	proc   *ring.Process // who records, from the region's metadata
	err    error
	warned bool
}

// newTraceWriter makes the temporary file for out. A symbolic link at out
// is written through: the trace replaces the file it points to.
func newTraceWriter(reg *ring.Region, out string) (*traceWriter, error) {
	if st, err := os.Lstat(out); err == nil && st.Mode()&os.ModeSymlink != 0 {
		if out, err = filepath.EvalSymlinks(out); err != nil {
			return nil, err
		}
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("cannot write beside %s: %w", out, err)
	}
	// The trace gets the mode of the file it replaces, else the usual 0644
	// (a temporary file starts at 0600).
	mode := os.FileMode(0o644)
	if st, err := os.Stat(out); err == nil {
		mode = st.Mode().Perm()
	}
	f.Chmod(mode)
	return &traceWriter{reg: reg, out: out, f: f, tmp: f.Name()}, nil
}

// start writes the trace header the program stored.
func (t *traceWriter) start() error {
	var h trace.Header
	if err := json.Unmarshal(t.reg.Meta(), &h); err != nil {
		return fmt.Errorf("the recorded program stored a bad trace header: %w", err)
	}
	w, err := trace.NewWriter(t.f, &h)
	if err != nil {
		return fmt.Errorf("%s: %w", t.out, err)
	}
	t.w, t.d = w, ring.NewDrainer(t.reg, w)
	t.proc = t.reg.MetaProcess()
	return nil
}

// step drains what the program published and flushes the trace every second.
func (t *traceWriter) step(now time.Time, stderr io.Writer) {
	if t.err == nil && t.d == nil && t.reg.State() != ring.StateInit {
		t.err = t.start()
	}
	if t.err == nil && t.d != nil {
		if t.err = t.d.Drain(now, false); t.err == nil {
			t.err = t.d.Flush(now, flushEvery)
		}
	}
	if t.err != nil && !t.warned {
		t.warned = true
		if stderr == nil {
			stderr = os.Stderr
		}
		fmt.Fprintf(stderr, "fragsim record: cannot write the trace: %v\n", t.err)
	}
}

// finish drains everything left once the program ended, closes the trace
// and renames it over out. It returns the calls the trace lacks, or
// ErrNoTrace when the program never opened its recording.
func (t *traceWriter) finish() (uint64, error) {
	missing, err := t.complete()
	if err != nil {
		return 0, err
	}
	if err := t.rename(t.out); err != nil {
		return 0, err
	}
	return missing, nil
}

// complete drains everything left once the recording process ended (or
// closed its recording) and closes the temporary trace, which stays until
// rename or abort. It returns the calls the trace lacks, or ErrNoTrace
// when the process never opened its recording.
func (t *traceWriter) complete() (uint64, error) {
	now := time.Now()
	if t.err == nil && t.d == nil && t.reg.State() != ring.StateInit {
		t.err = t.start()
	}
	if t.err != nil {
		return 0, t.err
	}
	if t.d == nil {
		return 0, ErrNoTrace
	}
	err := t.d.Drain(now, true)
	if err == nil {
		err = t.w.Close()
	}
	if err == nil {
		err = t.f.Sync()
	}
	if cerr := t.f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	t.f = nil
	if err != nil {
		t.err = fmt.Errorf("cannot write %s: %w", t.out, err)
		return 0, t.err
	}
	return t.d.Missing(), nil
}

// rename puts the completed trace in place at dst.
func (t *traceWriter) rename(dst string) error {
	if err := os.Rename(t.tmp, dst); err != nil {
		t.err = fmt.Errorf("cannot write %s: %w", dst, err)
		return t.err
	}
	t.tmp = ""
	return nil
}

// abort removes the temporary trace unless it was renamed.
func (t *traceWriter) abort() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
	if t.tmp != "" {
		os.Remove(t.tmp)
		t.tmp = ""
	}
}
