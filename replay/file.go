package replay

import (
	"bufio"
	"io"
	"os"

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

// RunFile replays the trace file at path.
func RunFile(path string, f driver.Factory, cfg Config) (*Result, error) {
	fh, err := os.Open(path)
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

// OpenFile returns an opener of the trace at path, for MinCapacity.
func OpenFile(path string) func() (*trace.Reader, io.Closer, error) {
	return func() (*trace.Reader, io.Closer, error) {
		fh, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		r, err := trace.NewReader(bufio.NewReaderSize(fh, 1<<20))
		if err != nil {
			fh.Close()
			return nil, nil, &TraceError{path, err}
		}
		return r, fh, nil
	}
}
