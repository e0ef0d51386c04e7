package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

func TestDumpUndumpRoundTrip(t *testing.T) {
	path := writeTestTrace(t, 300)
	code, text, stderr := run("dump", path)
	if code != 0 {
		t.Fatalf("dump: exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(text, "# fragsim text v1\nheader {") || !strings.Contains(text, "\nstring 1 \"step\"\n") ||
		strings.Count(text, "\nalloc t=") != 300 {
		t.Fatalf("dump output:\n%.500s", text)
	}
	dir := t.TempDir()
	txt := filepath.Join(dir, "t.txt")
	if code, _, stderr := run("dump", "-o", txt, path); code != 0 {
		t.Fatalf("dump -o: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(txt); string(b) != text {
		t.Fatal("dump -o wrote other text than dump to stdout")
	}
	back := filepath.Join(dir, "back.fst")
	if code, _, stderr := run("undump", "-o", back, txt); code != 0 {
		t.Fatalf("undump: exit %d: %s", code, stderr)
	}
	f1, _ := os.Open(path)
	f2, _ := os.Open(back)
	defer f1.Close()
	defer f2.Close()
	h1, e1, err1 := trace.ReadAll(f1)
	h2, e2, err2 := trace.ReadAll(f2)
	if err1 != nil || err2 != nil || len(e1) != len(e2) || h1.GPUName != h2.GPUName {
		t.Fatalf("undumped trace: %d events (%v), want %d (%v)", len(e2), err2, len(e1), err1)
	}
	for i := range e1 {
		if e1[i] != e2[i] {
			t.Fatalf("event %d = %+v, want %+v", i, e2[i], e1[i])
		}
	}
}

func TestDumpTruncated(t *testing.T) {
	path := writeTestTrace(t, 300)
	data, _ := os.ReadFile(path)
	cut := filepath.Join(t.TempDir(), "cut.fst")
	os.WriteFile(cut, data[:len(data)-40], 0o644)
	code, text, stderr := run("dump", cut)
	if code != 2 || !strings.Contains(stderr, "truncated at byte offset") {
		t.Fatalf("exit %d, stderr %q; want 2 and the truncation", code, stderr)
	}
	if n := strings.Count(text, "\nalloc t=") + strings.Count(text, "\nfree_requested t="); n != 599 {
		t.Errorf("dumped %d events of the cut file, want the 599 of its whole chunks", n)
	}
}

func TestUndumpSyntaxError(t *testing.T) {
	dir := t.TempDir()
	txt := filepath.Join(dir, "bad.txt")
	os.WriteFile(txt, []byte("# fragsim text v1\nheader {}\nalloc t=1 addr=0x200 size=5\nalloc t=2 size=oops\n"), 0o644)
	out := filepath.Join(dir, "out.fst")
	code, _, stderr := run("undump", "-o", out, txt)
	if code != 1 || !strings.Contains(stderr, txt+": line 4: alloc: bad size value \"oops\"") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, evs, err := trace.ReadAll(f)
	if len(evs) != 1 || evs[0].Addr != 0x200 || !errors.Is(err, trace.ErrTruncated) {
		t.Errorf("partial output: %d events, err %v; want the 1 event before the error and ErrTruncated", len(evs), err)
	}
	if code, _, _ := run("undump", txt); code != 2 {
		t.Errorf("undump without -o: exit %d, want 2 (usage)", code)
	}
}
