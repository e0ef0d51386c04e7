package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fragsim/fragsim/trace/pytorch/snapgen"
)

// TestStreamFrom runs the command on a gzip'd snapshot both ways (always
// streamed, never) and checks that they write the same trace, and that a
// bad call fails with the usage.
func TestStreamFrom(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "importfile")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := snapgen.Write(zw, 5_000, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "s.pickle.gz")
	if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var traces [][]byte
	for _, from := range []string{"1", "4611686018427387904"} {
		out := filepath.Join(dir, "s"+from+".fst")
		if b, err := exec.Command(bin, "-stream-from", from, in, out).CombinedOutput(); err != nil {
			t.Fatalf("-stream-from %s: %v\n%s", from, err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, data)
	}
	if len(traces[0]) == 0 || !bytes.Equal(traces[0], traces[1]) {
		t.Errorf("the streamed import wrote %d bytes, the whole one %d, or they differ", len(traces[0]), len(traces[1]))
	}
	if b, err := exec.Command(bin, in).CombinedOutput(); err == nil || !bytes.Contains(b, []byte("usage: importfile")) {
		t.Errorf("one argument: %v, %q; want the usage and an error", err, b)
	}
}
