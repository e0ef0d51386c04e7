package pytorch

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func gzipped(t *testing.T, parts ...[]byte) []byte {
	t.Helper()
	gzipWriter.Lock()
	defer gzipWriter.Unlock()
	var buf bytes.Buffer
	for _, p := range parts { // one member each
		if gzipWriter.w == nil {
			gzipWriter.w = gzip.NewWriter(&buf)
		} else {
			gzipWriter.w.Reset(&buf)
		}
		if _, err := gzipWriter.w.Write(p); err != nil {
			t.Fatal(err)
		}
		if err := gzipWriter.w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// gzipWriter is the writer gzipped resets for each member: a new one's
// tables cost more than small inputs' compression under the race
// detector.
var gzipWriter struct {
	sync.Mutex
	w *gzip.Writer
}

func zstded(t *testing.T, p []byte) []byte {
	t.Helper()
	zw, err := zstdWriter()
	if err != nil {
		t.Fatal(err)
	}
	return zw.EncodeAll(p, nil)
}

// zstdWriter is the encoder zstded shares (EncodeAll may be called
// concurrently), made once.
var zstdWriter = sync.OnceValues(func() (*zstd.Encoder, error) { return zstd.NewWriter(nil) })

// TestDecompressSameBytes checks that a gzip'd (one member or two: the
// size in the trailer is then the last member's) or zstd'd snapshot
// decompresses to the pickle's bytes, from memory (decompress) and from a
// stream of known or unknown size (ReadInput).
func TestDecompressSameBytes(t *testing.T) {
	raw, err := os.ReadFile("testdata/basic.p5.pickle")
	if err != nil {
		t.Fatal(err)
	}
	half := len(raw) / 2
	for name, comp := range map[string][]byte{
		"gzip": gzipped(t, raw), "gzip2": gzipped(t, raw[:half], raw[half:]), "zstd": zstded(t, raw),
	} {
		var o Options
		got, free, err := decompress(comp, o.budget())
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("%s: decompress: %d bytes, %v; want the pickle's %d", name, len(got), err, len(raw))
		}
		free()
		for _, r := range []io.Reader{bytes.NewReader(comp), struct{ io.Reader }{bytes.NewReader(comp)}} {
			got, err := ReadInput(r, Options{})
			if err != nil || !bytes.Equal(got, raw) {
				t.Fatalf("%s: ReadInput(%T): %d bytes, %v; want the pickle's %d", name, r, len(got), err, len(raw))
			}
		}
	}
}

// TestDecompressionBombs checks that a compressed input that would
// decompress past its budget, or to something that is not a pickle, is
// refused with an error naming the file, from memory and from a stream
// (a zstd frame that states its size is refused before it is decoded).
func TestDecompressionBombs(t *testing.T) {
	defer func(v int64) { minBudgetBytes = v }(minBudgetBytes)
	// A small floor, and inputs four times past it: the decoder decodes
	// a streamed input up to the budget before it is refused, which the
	// race detector makes slow past a few hundred KiB.
	minBudgetBytes = 256 << 10
	zeros := make([]byte, 1<<20)
	// A valid pickle start (PROTO 4, then NONE opcodes), 1 MiB of it.
	nones := append([]byte{0x80, 4}, bytes.Repeat([]byte("N"), 1<<20)...)
	cases := []struct {
		name string
		data []byte
		opt  Options
		want string
	}{
		{"zeros.gz", gzipped(t, zeros), Options{}, "not a pickle: it starts with byte 0x00"},
		{"zeros.zst", zstded(t, zeros), Options{}, "not a pickle: it starts with byte 0x00|refused as a decompression bomb"},
		{"nones.gz", gzipped(t, nones), Options{}, "refused as a decompression bomb"},
		{"nones.zst", zstded(t, nones), Options{}, "refused as a decompression bomb"},
		{"ratio.gz", gzipped(t, nones[:512<<10]), Options{MaxRatio: 2}, "refused as a decompression bomb"},
		{"limit.gz", gzipped(t, nones[:512<<10]), Options{MaxInputBytes: 1 << 17}, "the input limit"},
	}
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			var err error
			if stream {
				_, err = Load(struct{ io.Reader }{bytes.NewReader(c.data)}, c.name, c.opt)
			} else {
				_, err = loadMapped(c.data, c.name, c.opt)
			}
			matched := false
			for _, w := range strings.Split(c.want, "|") {
				matched = matched || err != nil && strings.Contains(err.Error(), w)
			}
			if !matched || !strings.HasPrefix(err.Error(), c.name+": ") {
				t.Errorf("%s (stream %v): %v; want an error naming the file, with %q", c.name, stream, err, c.want)
			}
		}
	}
	// Within the budget, the same input is read.
	if _, _, err := decompress(gzipped(t, nones[:1<<17]), (&Options{}).budget()); err != nil {
		t.Errorf("128 KiB of NONE opcodes: %v", err)
	}
}

// withStdin runs f with standard input reading data through a pipe.
func withStdin(t *testing.T, data []byte, f func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.Write(data)
		w.Close()
	}()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	f()
}

// Standard input is imported as a file is: its first bytes are checked
// before the rest is read (2 GB of zeros once died of a fatal
// out-of-memory error, while a file of them was refused at once), and a
// snapshot gives the trace its file gives, with nothing left behind.
func TestImportFileStdin(t *testing.T) {
	dir := t.TempDir()
	withStdin(t, make([]byte, 4<<20), func() {
		_, err := ImportFile("-", filepath.Join(dir, "z.fst"), Options{})
		if err == nil || !strings.Contains(err.Error(), "-: byte offset 0: not a snapshot: it starts with byte 0x00") {
			t.Errorf("zeros: %v", err)
		}
	})
	snap := mustRead(t, "midrun.p4.pickle")
	file, piped := filepath.Join(dir, "file.fst"), filepath.Join(dir, "pipe.fst")
	if _, err := ImportFile(filepath.Join("testdata", "midrun.p4.pickle"), file, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{snap, gzipped(t, snap)} {
		withStdin(t, data, func() {
			if _, err := ImportFile("-", piped, Options{}); err != nil {
				t.Fatal(err)
			}
		})
		a, _ := os.ReadFile(file)
		b, _ := os.ReadFile(piped)
		if !bytes.Equal(a, b) {
			t.Errorf("standard input gave another trace than the file")
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 2 {
		t.Errorf("left in the output's directory: %v", left)
	}
}

// readAll's buffer never grows past its limit (and the byte past it).
func TestReadAllBudget(t *testing.T) {
	data := strings.Repeat("x", 1000)
	if _, err := readAll(strings.NewReader(data), 10, 999); err == nil || !strings.Contains(err.Error(), "exceeds 999 bytes") {
		t.Errorf("past the limit: %v", err)
	}
	got, err := readAll(strings.NewReader(data), 10, 1000)
	if err != nil || len(got) != 1000 || cap(got) > 1001 {
		t.Errorf("%d bytes in %d, %v", len(got), cap(got), err)
	}
}
