package pytorch

import (
	"io"
	"os"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// FuzzLoad checks that no input makes the importer panic, and that what
// it accepts can be written as a trace.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"basic.p2.pickle", "basic.p5.pickle", "midrun.p4.pickle", "empty_cache.p4.pickle", "old.p2.pickle"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := LoadPickle(data, Options{})
		if err != nil {
			return
		}
		w, err := trace.NewWriter(io.Discard, s.Header())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Emit(w, nil); err != nil {
			return
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
