package replay

import (
	"bufio"
	"io"
	"sync"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// A TraceError is an error about a trace, named once: "Name: Err". Name
// is the trace's file, or what else names it. OpenFile and RunFile
// return it; an error of opening the file is the *fs.PathError os gives,
// which names the file already.
type TraceError struct {
	Name string
	Err  error
}

func (e *TraceError) Error() string { return e.Name + ": " + e.Err.Error() }
func (e *TraceError) Unwrap() error { return e.Err }

// RunFile replays the trace file at path (as OpenFile opens it).
func RunFile(path string, f driver.Factory, cfg Config) (*Result, error) {
	fh, err := trace.OpenInput(path, trace.InputOptions{})
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	r, err := trace.NewReader(bufio.NewReaderSize(fh, 1<<20))
	if err != nil {
		return nil, &TraceError{path, err}
	}
	res, err := Run(r, f, cfg)
	if err != nil {
		return res, &TraceError{path, err}
	}
	return res, nil
}

// OpenFile returns an opener of the trace at path, for MinCapacity. Each
// call reads the trace from its start, also when path can be read only
// once (a pipe such as <(cat t.fst), a FIFO, "-" for standard input): the
// first call reads it into a temporary copy (trace.OpenInput) that the
// later calls, concurrent ones included, read; the copy goes with the
// opener.
func OpenFile(path string) func() (*trace.Reader, io.Closer, error) {
	var mu sync.Mutex
	var spool *trace.Input
	fromSpool := func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bufio.NewReaderSize(spool.Reopen(), 1<<20))
		if err != nil {
			return nil, nil, &TraceError{path, err}
		}
		return r, io.NopCloser(nil), nil
	}
	return func() (*trace.Reader, io.Closer, error) {
		mu.Lock()
		if spool != nil {
			mu.Unlock()
			return fromSpool()
		}
		fh, err := trace.OpenInput(path, trace.InputOptions{})
		if err != nil {
			mu.Unlock()
			return nil, nil, err
		}
		if fh.Spooled() {
			spool = fh
			mu.Unlock()
			return fromSpool()
		}
		mu.Unlock()
		r, err := trace.NewReader(bufio.NewReaderSize(fh, 1<<20))
		if err != nil {
			fh.Close()
			return nil, nil, &TraceError{path, err}
		}
		return r, fh, nil
	}
}
