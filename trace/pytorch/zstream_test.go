package pytorch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/fragsim/fragsim/trace/pytorch/snapgen"
)

// withStreamFrom runs f with defaultStreamFrom set to n, and returns the
// compressed inputs the imports decoded streamed.
func withStreamFrom(n int64, f func()) []*zsrc {
	defer func(v int64) { defaultStreamFrom, streamed = v, nil }(defaultStreamFrom)
	var got []*zsrc
	defaultStreamFrom, streamed = n, func(z *zsrc) { got = append(got, z) }
	f()
	return got
}

// summaryJSON is s's summary without the names and sizes of the files.
func summaryJSON(t *testing.T, s *Summary) string {
	c := *s
	c.Input, c.Output, c.InputBytes = "", "", 0
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// importFileBytes imports the file in with ImportFile, and returns the trace
// and the summary.
func importFileBytes(t *testing.T, in string) ([]byte, string, error) {
	t.Helper()
	out := in + ".fst"
	sum, err := ImportFile(in, out, Options{})
	if err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(out)
	return b, summaryJSON(t, sum), nil
}

// streamCorpus returns pickles to import, by name: the package's test
// snapshots (the real ones gunzipped: the two smallest, all nine with
// FRAGSIM_LONG=1) and a snapgen snapshot with call stacks, larger than
// the decoder's 1 MiB window.
func streamCorpus(t *testing.T) map[string][]byte {
	out := map[string][]byte{}
	files, _ := filepath.Glob("testdata/*.pickle")
	real := []string{"testdata/real/stacks.pickle.gz", "testdata/real/fraction_retry.pickle.gz"}
	n := int64(15_000)
	if longTests() {
		real, _ = filepath.Glob("testdata/real/*.pickle.gz")
		n = 20_000
	}
	for _, f := range append(files, real...) {
		if strings.HasSuffix(f, ".gz") {
			out[filepath.Base(f)] = gunzip(t, f)
			continue
		}
		out[filepath.Base(f)] = mustRead(t, filepath.Base(f))
	}
	var buf bytes.Buffer
	if err := snapgen.Write(&buf, n, 3, 8); err != nil {
		t.Fatal(err)
	}
	if buf.Len() <= 1<<20 {
		t.Fatalf("snapgen snapshot of %d bytes, want more than the decoder's window", buf.Len())
	}
	out["snapgen"] = buf.Bytes()
	return out
}

// TestZstreamSameTrace imports snapshots plain, and gzip'd and zstd'd
// both decoded while decompressed and decompressed whole first (the
// committed gzip'd files as they are, and gzip and zstd made here), from
// a file (ImportFile) and, gzip'd, from a reader (Load), and checks that each
// gives the plain import's trace byte for byte and its summary.
func TestZstreamSameTrace(t *testing.T) {
	dir := t.TempDir()
	for name, data := range streamCorpus(t) {
		plain := filepath.Join(dir, name+".plain")
		if err := os.WriteFile(plain, data, 0o644); err != nil {
			t.Fatal(err)
		}
		want, wantSum, werr := importFileBytes(t, plain)
		if werr != nil && !strings.Contains(name, "state_only") {
			t.Fatalf("%s: %v", name, werr)
		}
		variants := map[string][]byte{"gz": gzipped(t, data), "zst": zstded(t, data)}
		if committed, err := os.ReadFile(filepath.Join("testdata/real", name)); err == nil {
			variants["committed.gz"] = committed
		}
		for ext, comp := range variants {
			in := filepath.Join(dir, name+"."+ext)
			if err := os.WriteFile(in, comp, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, from := range []int64{0, math.MaxInt64} {
				var got []byte
				var gotSum string
				var gerr error
				zs := withStreamFrom(from, func() { got, gotSum, gerr = importFileBytes(t, in) })
				if len(zs) != map[bool]int{true: 1, false: 0}[from == 0] {
					t.Fatalf("%s.%s, streamFrom %d: %d streamed imports", name, ext, from, len(zs))
				}
				if fmt.Sprint(gerr) != fmt.Sprint(werr) || !bytes.Equal(got, want) || gotSum != wantSum {
					t.Fatalf("%s.%s, streamFrom %d: %d bytes of trace, %v\n%s\nwant %d bytes, %v\n%s", name, ext, from, len(got), gerr, gotSum, len(want), werr, wantSum)
				}
			}
			// From a reader (not a file), streamed.
			if ext == "zst" {
				continue
			}
			zs := withStreamFrom(0, func() {
				s, err := Load(struct{ io.Reader }{bytes.NewReader(comp)}, name, Options{})
				if fmt.Sprint(err != nil) != fmt.Sprint(werr != nil) {
					t.Fatalf("%s.%s from a reader: %v, want %v", name, ext, err, werr)
				}
				if err == nil {
					defer s.Close()
					if got := traceBytes(t, s); !bytes.Equal(got, want) {
						t.Fatalf("%s.%s from a reader: the trace differs", name, ext)
					}
				}
			})
			if len(zs) != 1 {
				t.Fatalf("%s.%s from a reader: %d streamed imports", name, ext, len(zs))
			}
		}
	}
}

// TestZstreamBadInput checks compressed snapshots cut short or with a
// byte changed, decoded while decompressed: an error that names the file
// and the offset where it fails, never a panic, and (for a cut) the
// entries before the cut, as a plain pickle cut there gives.
//
// The everyday pass damages fraction_retry (0.4 MB of pickle), the long
// pass (FRAGSIM_LONG=1) ring too (2.2 MB): the errors come from the same
// decompressors and decoder at any size.
func TestZstreamBadInput(t *testing.T) {
	names := []string{"fraction_retry"}
	if longTests() {
		names = append(names, "ring")
	}
	for _, name := range names {
		testZstreamBadInput(t, gunzip(t, "testdata/real/"+name+".pickle.gz"))
	}
}

func testZstreamBadInput(t *testing.T, data []byte) {
	offset := regexp.MustCompile(`byte offset \d+|after \d+ decompressed bytes`)
	for ext, comp := range map[string][]byte{"gz": gzipped(t, data), "zst": zstded(t, data)} {
		cases := map[string][]byte{}
		for _, f := range []int{10, 70, 97} {
			cases[fmt.Sprintf("cut at %d%%", f)] = comp[:len(comp)*f/100]
		}
		for _, f := range []int{30, 99} {
			bad := bytes.Clone(comp)
			bad[len(bad)*f/100] ^= 0x55
			cases[fmt.Sprintf("byte at %d%% changed", f)] = bad
		}
		bad := bytes.Clone(comp)
		bad[len(bad)-6] ^= 0x01 // gzip: the checksum; zstd: its last block
		cases["trailer changed"] = bad
		for what, in := range cases {
			name := "bad." + ext
			var err error
			var s *Snapshot
			zs := withStreamFrom(0, func() {
				s, err = Load(struct{ io.Reader }{bytes.NewReader(in)}, name, Options{})
			})
			if s != nil {
				s.Close()
			}
			if err == nil {
				t.Errorf("%s, %s: no error", ext, what)
				continue
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, name+": ") || !offset.MatchString(msg) || strings.Contains(msg, "\n") {
				t.Errorf("%s, %s: %q should name the file and the offset, on one line", ext, what, msg)
			}
			if len(zs) != 1 && !strings.Contains(msg, "decompressed bytes") {
				t.Errorf("%s, %s: not streamed (%v)", ext, what, err)
			}
		}
	}
	// A cut gzip keeps the entries before the cut, as a cut pickle does,
	// whichever way it was to be decompressed (whole, it is decoded again
	// as it decompresses once the decompression breaks).
	gz := gzipped(t, data)
	events := -1
	for _, from := range []int64{0, math.MaxInt64} {
		var s *Snapshot
		var err error
		zs := withStreamFrom(from, func() { s, err = Load(bytes.NewReader(gz[:len(gz)*2/3]), "cut.gz", Options{}) })
		if s == nil || !errors.Is(err, pickle.ErrTruncated) || s.Summary().Events == 0 || len(zs) != 1 {
			t.Fatalf("cut gzip, streamFrom %d: %v, %v, %d streamed; want the entries before the cut and ErrTruncated", from, s, err, len(zs))
		}
		if events >= 0 && s.Summary().Events != events {
			t.Errorf("cut gzip, streamFrom %d: %d events kept, %d the other way", from, s.Summary().Events, events)
		}
		events = s.Summary().Events
		s.Close()
	}
}

// TestZstreamBounded imports a snapgen snapshot of twice the decoder's
// 1 MiB window and more, gzip'd, decoded while decompressed, and checks
// that the decoder never held more than its window of the pickle, and
// that the trace is the plain import's.
func TestZstreamBounded(t *testing.T) {
	var buf bytes.Buffer
	if err := snapgen.Write(&buf, 50_000, 5, 0); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if len(data) < 2<<20 {
		t.Fatalf("snapshot of %d bytes", len(data))
	}
	s, err := LoadPickle(data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := traceBytes(t, s)
	s.Close()
	gz := gzipped(t, data)
	zs := withStreamFrom(0, func() {
		s, err = Load(bytes.NewReader(gz), "big.gz", Options{})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(zs) != 1 {
		t.Fatalf("%d streamed imports", len(zs))
	}
	if p := zs[0].peak; p <= 0 || p > 1<<20 {
		t.Errorf("the decoder held up to %d bytes of the %d of pickle, want at most its window's 1 MiB", p, len(data))
	}
	if got := traceBytes(t, s); !bytes.Equal(got, want) {
		t.Error("the streamed import's trace differs from the plain one's")
	}
	if got := s.Summary().PickleBytes; got != int64(len(data)) {
		t.Errorf("PickleBytes %d, want %d", got, len(data))
	}
}

// TestStreamFromBytes checks that Options.StreamFromBytes decides which
// gzip'd snapshots are streamed: a small one is decompressed whole by
// default and streamed from a size below its own, with the same trace.
func TestStreamFromBytes(t *testing.T) {
	var buf bytes.Buffer
	if err := snapgen.Write(&buf, 2_000, 5, 0); err != nil {
		t.Fatal(err)
	}
	gz := gzipped(t, buf.Bytes())
	var traces [][]byte
	for _, tc := range []struct {
		from     int64
		streamed int
	}{{0, 0}, {int64(buf.Len()) + 1, 0}, {int64(buf.Len()), 1}, {1, 1}} {
		var s *Snapshot
		var err error
		zs := withStreamFrom(defaultStreamFrom, func() {
			s, err = Load(bytes.NewReader(gz), "s.gz", Options{StreamFromBytes: tc.from})
		})
		if err != nil {
			t.Fatalf("StreamFromBytes %d: %v", tc.from, err)
		}
		if len(zs) != tc.streamed {
			t.Errorf("StreamFromBytes %d, pickle of %d bytes: %d streamed imports, want %d", tc.from, buf.Len(), len(zs), tc.streamed)
		}
		traces = append(traces, traceBytes(t, s))
		s.Close()
	}
	for i := range traces {
		if !bytes.Equal(traces[i], traces[0]) {
			t.Errorf("trace %d differs from the first", i)
		}
	}
}
