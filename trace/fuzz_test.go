package trace

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// corpusDir holds FuzzReader's committed seed corpus.
var corpusDir = filepath.Join("testdata", "fuzz", "FuzzReader")

// corpusSeeds returns the seed files by name: whole traces and cut ones,
// in the current format version and, named v2-* and v1-*, in versions 2
// and 1.
func corpusSeeds(t *testing.T) map[string][]byte {
	seeds := map[string][]byte{}
	for _, v := range []int{Version, 2, 1} {
		prefix := ""
		if v != Version {
			prefix = fmt.Sprintf("v%d-", v)
		}
		for name, data := range versionSeeds(t, v) {
			seeds[prefix+name] = data
		}
	}
	return seeds
}

// versionSeeds returns the seed files of format version v.
func versionSeeds(t *testing.T, v int) map[string][]byte {
	golden := goldenTrace(t, formatVersion(v))
	small, _, _ := writeRandom(t, 11, 40, ChunkEvents(16), formatVersion(v))
	var empty bytes.Buffer
	w, err := NewWriter(&empty, nil, formatVersion(v))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	var tf bytes.Buffer
	w, _ = NewWriter(&tf, &Header{Producer: ProducerSynthetic}, ChunkEvents(64), formatVersion(v))
	transformerStream(rand.New(rand.NewPCG(3, 3)), w, 150)
	w.Close()
	seeds := map[string][]byte{
		"valid-golden":      golden,
		"valid-random":      small,
		"valid-empty":       empty.Bytes(),
		"valid-transformer": tf.Bytes(),
		"cut-golden-mid":    golden[:len(golden)*2/3],
		"cut-random-end":    small[:len(small)-3],
		"cut-magic":         golden[:5],
		"cut-no-end-chunk":  tf.Bytes()[:chunkBounds(t, tf.Bytes())[len(chunkBounds(t, tf.Bytes()))-1]],
	}
	flipped := bytes.Clone(small)
	flipped[len(flipped)/2] ^= 0x10
	seeds["corrupt-flip"] = flipped
	return seeds
}

// TestFuzzCorpus checks the committed seed corpus against the seeds this
// package's writer makes (go test -update rewrites it).
func TestFuzzCorpus(t *testing.T) {
	seeds := corpusSeeds(t)
	if *update {
		os.MkdirAll(corpusDir, 0o755)
		for name, data := range seeds {
			content := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
			if err := os.WriteFile(filepath.Join(corpusDir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, want := range seeds {
		b, err := os.ReadFile(filepath.Join(corpusDir, name))
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "go test fuzz v1\n[]byte(")
		data, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
		if !ok || err != nil {
			t.Fatalf("%s: not a fuzz corpus file", name)
		}
		if data != string(want) {
			t.Errorf("%s differs from what the writer makes now (run go test -update)", name)
		}
		_, _, rerr := ReadAll(strings.NewReader(data))
		kind := strings.TrimPrefix(strings.TrimPrefix(name, "v1-"), "v2-")
		switch {
		case strings.HasPrefix(kind, "valid-") && rerr != nil:
			t.Errorf("%s: %v", name, rerr)
		case strings.HasPrefix(kind, "cut-") && !errors.Is(rerr, ErrTruncated):
			t.Errorf("%s: err = %v, want ErrTruncated", name, rerr)
		case strings.HasPrefix(kind, "corrupt-") && (!errors.Is(rerr, ErrCorrupt) || errors.Is(rerr, ErrTruncated)):
			t.Errorf("%s: err = %v, want ErrCorrupt", name, rerr)
		}
	}
}

// FuzzReader checks that no input panics the reader, that every error is
// a corruption, and that whatever reads converts to text and back to the
// same events.
func FuzzReader(f *testing.F) {
	f.Add([]byte(Magic + "\x01"))
	f.Add([]byte(Magic + "\x02"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCheck(t, data) })
}

func fuzzCheck(t testing.TB, data []byte) {
	{
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("NewReader: %v is not ErrCorrupt", err)
			}
			return
		}
		defer r.Close()
		var evs []Event
		var rerr error
		for {
			e, err := r.ReadEvent()
			if err != nil {
				if err.Error() != "EOF" {
					rerr = err
				}
				break
			}
			evs = append(evs, e)
		}
		if rerr != nil && !errors.Is(rerr, ErrCorrupt) {
			t.Fatalf("ReadEvent: %v is not ErrCorrupt", rerr)
		}
		if rerr != nil && !strings.Contains(rerr.Error(), "byte offset") {
			t.Fatalf("error %q gives no offset", rerr)
		}
		// Round trip through the text twin, for traces whose tables a
		// Writer could have made (no string or stack defined twice).
		if hasDuplicates(r) {
			return
		}
		r2, _ := NewReader(bytes.NewReader(data))
		var text bytes.Buffer
		if err := WriteText(&text, r2); fmt.Sprint(err) != fmt.Sprint(rerr) {
			t.Fatalf("WriteText: %v, ReadEvent: %v", err, rerr)
		}
		var bin bytes.Buffer
		w, err := NewWriter(&bin, r.Header())
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTextReader(&text)
		if err != nil {
			t.Fatalf("ReadText of WriteText's output: %v", err)
		}
		tr.Raw = true // the format's extremes
		if _, err := tr.CopyTo(w); err != nil {
			t.Fatalf("ReadText of WriteText's output: %v", err)
		}
		w.Close()
		_, back, err := ReadAll(&bin)
		if err != nil || !slices.Equal(back, evs) {
			t.Fatalf("text round trip: %d events (%v), want %d", len(back), err, len(evs))
		}
	}
}

func hasDuplicates(r *Reader) bool {
	strs := map[string]bool{}
	for i := 1; i < r.NumStrings(); i++ {
		if strs[r.String(StringID(i))] {
			return true
		}
		strs[r.String(StringID(i))] = true
	}
	stks := map[string]bool{}
	for i := 1; i < r.NumStacks(); i++ {
		k := fmt.Sprint(r.Stack(StackID(i)))
		if stks[k] {
			return true
		}
		stks[k] = true
	}
	return false
}
