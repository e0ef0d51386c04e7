package analysis

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// prefixes holds the trace prefixes cut so far, by path and length: each
// is cut once per test binary, whichever tests share it.
var prefixes sync.Map // prefixKey -> *prefixEntry

type prefixKey struct {
	path string
	n    int64
}

type prefixEntry struct {
	once sync.Once
	data []byte
	err  error
}

// tracePrefix returns the first n events of the committed trace at path,
// written as a trace in memory under the trace's own header, its strings
// and stacks carried over: the same recording, stopped early (what is
// live at the cut stays live, as in any trace that ends mid-run). A cut
// keeps the pattern of the run's start at a fraction of the replays'
// cost under -race. (analysis/report's tests hold the same helper.)
func tracePrefix(t *testing.T, path string, n int64) []byte {
	t.Helper()
	return cutOnce(t, path, n, func() (*trace.Reader, io.Closer, error) {
		f, err := trace.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return f.Reader, f, nil
	})
}

// dataPrefix is tracePrefix of a trace held in memory, named name.
func dataPrefix(t *testing.T, name string, data []byte, n int64) []byte {
	t.Helper()
	return cutOnce(t, name, n, opener(data))
}

func cutOnce(t *testing.T, name string, n int64, open Opener) []byte {
	t.Helper()
	v, _ := prefixes.LoadOrStore(prefixKey{name, n}, &prefixEntry{})
	e := v.(*prefixEntry)
	e.once.Do(func() { e.data, e.err = cutTrace(open, n) })
	if e.err != nil {
		t.Fatalf("%s: first %d events: %v", name, n, e.err)
	}
	return e.data
}

func cutTrace(open Opener, n int64) ([]byte, error) {
	f, c, err := open()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, f.Header())
	if err != nil {
		return nil, err
	}
	ids := trace.NewRemap(f, w)
	var read int64
	for read < n {
		e, err := f.ReadEvent()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the trace is shorter")
		}
		if err != nil {
			return nil, err
		}
		read++
		e = ids.Event(e)
		if err := w.WriteEvent(e); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
