package pytorch

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestImportFileConcurrentToOneOutput runs two imports to the same output
// at once: each writes a temporary file of its own beside it, so both
// succeed, the output is one whole trace, and no temporary file is left.
func TestImportFileConcurrentToOneOutput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.fst")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := ImportFile(filepath.Join("testdata", "midrun.p4.pickle"), out, Options{})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("an import failed: %v", err)
		}
	}
	f, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for {
		if _, err := f.Reader.ReadEvent(); err != nil {
			if err != io.EOF {
				t.Fatalf("%s: %v", out, err)
			}
			break
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files beside the output, want it alone: %v", len(ents), ents)
	}
}
