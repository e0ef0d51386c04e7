package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

func runSynthCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(append([]string{"fragsim", "synth"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestSynthWritesTrace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.fst")
	code, out, errs := runSynthCLI(t, "-o", path, "--events", "30k", "--seed", "7", "--agents", "3",
		"--batch-sizes", "2,4", "--seq-min", "32", "--seq-max", "64")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	m := regexp.MustCompile(`wrote .*: (\d+) events \((\d+) allocs`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "peak live:") || !strings.Contains(out, "duration:") {
		t.Fatalf("summary %q", out)
	}
	if errs != "" {
		t.Errorf("progress written to a stderr that is not a terminal: %q", errs)
	}
	events, _ := strconv.ParseInt(m[1], 10, 64)
	if events < 30_000 {
		t.Errorf("%d events, want at least 30k", events)
	}

	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	if h.Producer != trace.ProducerSynthetic || h.Tags["seed"] != "7" ||
		!strings.Contains(h.Tags["synth"], "agents=3") || !strings.Contains(h.Tags["synth"], "batch=2,4") {
		t.Errorf("header %+v", h)
	}
	var n int64
	agents := map[string]bool{}
	for {
		e, err := f.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if e.Kind == trace.KindMarker && e.Marker == trace.MarkerAgent {
			agents[f.String(e.Text)] = true
		}
		if e.Kind == trace.KindAlloc && e.SizeBytes > 0 {
			// A forward pass of batch 2..4 over 32..64 tokens of a BERT-base:
			// no activation is larger than 4*12*64*64*4 bytes or the weights.
			if e.SizeBytes > 30522*768*4 {
				t.Fatalf("event %d: alloc of %d bytes", n, e.SizeBytes)
			}
		}
	}
	if n != events {
		t.Errorf("file holds %d events, summary says %d", n, events)
	}
	if len(agents) != 3 {
		t.Errorf("agents %v", agents)
	}

	// Same seed, same bytes; another seed, other bytes.
	again := filepath.Join(dir, "b.fst")
	if code, out, errs := runSynthCLI(t, "-q", "-o", again, "--events", "30k", "--seed", "7", "--agents", "3",
		"--batch-sizes", "2,4", "--seq-min", "32", "--seq-max", "64"); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	} else if errs != "" {
		t.Errorf("--quiet wrote %q", errs)
	}
	other := filepath.Join(dir, "c.fst")
	if code, _, errs := runSynthCLI(t, "-q", "-o", other, "--events", "30k", "--seed", "8", "--agents", "3",
		"--batch-sizes", "2,4", "--seq-min", "32", "--seq-max", "64"); code != 0 {
		t.Fatal(errs)
	}
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(again)
	c, _ := os.ReadFile(other)
	if !bytes.Equal(a, b) {
		t.Error("the same seed wrote different files")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds wrote the same file")
	}
}

func TestSynthKinds(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"--decode", "--seq-max", "64", "--decode-max", "32"}, {"--train", "--layers", "2"}, {"--kinds", "encode,decode"}} {
		path := filepath.Join(dir, "k.fst")
		code, out, errs := runSynthCLI(t, append([]string{"-q", "-o", path, "--events", "20000", "--agents", "2"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out, errs)
		}
		f, err := trace.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		tag := f.Header().Tags["synth"]
		f.Close()
		want := map[string]string{"--decode": "kinds=decode", "--train": "kinds=train", "--kinds": "kinds=encode,decode"}[args[0]]
		if !strings.Contains(tag, want) {
			t.Errorf("%v: header tag %q, want %q", args, tag, want)
		}
	}
}

func TestSynthBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--events", "lots"},
		{"--events", "0"},
		{"--agents", "0"},
		{"--batch-sizes", "1,x"},
		{"--seq-min", "100", "--seq-max", "10"},
		{"--kinds", "serve"},
		{"--batch-weights", "1,2"},
	} {
		path := filepath.Join(dir, "bad.fst")
		code, _, errs := runSynthCLI(t, append([]string{"-o", path}, args...)...)
		if code != 2 || !strings.HasPrefix(errs, "fragsim: synth: ") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%v: wrote a file", args)
		}
	}
	if code, _, errs := runSynthCLI(t, "--events", "10"); code == 0 || !strings.Contains(errs, "output") {
		t.Errorf("no -o: exit %d, %q", code, errs)
	}
	if code, _, errs := runSynthCLI(t, "-o", filepath.Join(dir, "no", "such", "dir.fst"), "--events", "10"); code == 0 || !strings.Contains(errs, "dir.fst") {
		t.Errorf("unwritable: exit %d, %q", code, errs)
	}
}
