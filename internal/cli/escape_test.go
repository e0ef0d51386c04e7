package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile is what a snapshot can put in a name to act on a terminal: set
// the window's title, write the clipboard (OSC 52), clear the screen, turn
// text around (U+202E), and a newline that forges a line.
const hostile = `\x1b]0;PWNED\x07\x1b]52;c;aGk=\x07\x1b[2J\u202e\u009b31m\nRecommended: forged`

// hostileTrace writes a trace whose frames, markers and header hold
// hostile, with blocks stranded by live ones (so that analyze lists its
// call stacks and markers), and its memory_viz export, a snapshot with
// the same frames.
func hostileTrace(t *testing.T, dir string) (fst, pickle string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# fragsim text v1\n")
	fmt.Fprintf(&b, "header {\"producer\":\"pytorch\",\"gpu_name\":\"G%[1]s\",\"torch_version\":\"2%[1]s\",\"tags\":{\"k%[1]s\":\"v%[1]s\"},\"gpu_total_bytes\":1073741824}\n",
		strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(hostile, `\x1b`, `\u001b`), `\x07`, `\u0007`), `\n`, `\n`))
	fmt.Fprintf(&b, "string 1 \"f%s\"\nstring 2 \"file%s.py\"\nstring 3 \"agent%s\"\nstack 1 1:2:3\n", hostile, hostile, hostile)
	b.WriteString("marker t=500 dev=0 stream=0x0 marker=agent text=3\n")
	const mib = 1 << 20
	for i := range 4 {
		fmt.Fprintf(&b, "alloc t=%d dev=0 stream=0x0 addr=0x%x size=%d stack=1\n", 1000+i, 0x7f0000000000+i*5*mib, 5*mib)
	}
	for _, i := range []int{0, 2} {
		a := 0x7f0000000000 + i*5*mib
		fmt.Fprintf(&b, "free_requested t=%d dev=0 stream=0x0 addr=0x%x size=%d\nfree_completed t=%d dev=0 stream=0x0 addr=0x%x size=%d\n",
			2000+i, a, 5*mib, 2000+i, a, 5*mib)
	}
	fmt.Fprintf(&b, "alloc t=3000 dev=0 stream=0x0 addr=0x7f0010000000 size=%d stack=1\n", 12*mib)
	txt := filepath.Join(dir, "hostile.txt")
	os.WriteFile(txt, []byte(b.String()), 0o644)
	fst = filepath.Join(dir, "hostile.fst")
	if _, errs, code := runCLI("undump", txt, "-o", fst); code != 0 {
		t.Fatalf("undump: exit %d: %s", code, errs)
	}
	pickle = filepath.Join(dir, "hostile.pickle")
	if _, errs, code := runCLI("export", "--format", "memory_viz", fst, "-o", pickle); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	return fst, pickle
}

// raw matches what a terminal acts on: C0 controls but newline and tab,
// DEL, C1 controls, and U+202E.
var raw = regexp.MustCompile("[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f\u202e]")

// TestTerminalOutputEscaped runs every text renderer on a trace and a
// snapshot whose names are hostile: nothing a terminal acts on comes out,
// on stdout or stderr, and no name forges a line.
func TestTerminalOutputEscaped(t *testing.T) {
	dir := t.TempDir()
	fst, pickle := hostileTrace(t, dir)
	for _, args := range [][]string{
		{"info", fst},
		{"dump", fst},
		{"replay", fst},
		{"replay", "--forecast", fst},
		{"analyze", fst},
		{"compare", fst},
		{"cohost", fst, fst},
		{"explain", fst, "--request", "30MiB"},
		{"explain", pickle, "--request", "30MiB"},
		{"import", pickle, "-o", filepath.Join(dir, "back.fst")},
		{"import", pickle, "-o", filepath.Join(dir, "back.fst"), "--device-log", pickle}, // an error naming the log's bytes
	} {
		out, errs, _ := runCLI(args...)
		for _, s := range []string{out, errs} {
			if !utf8.ValidString(s) || raw.MatchString(s) {
				t.Errorf("fragsim %s: raw control characters reach the terminal: %q", strings.Join(args, " "), raw.FindString(s))
			}
			if strings.Contains(s, "\nRecommended: forged") {
				t.Errorf("fragsim %s: a name forged a line", strings.Join(args, " "))
			}
		}
	}
	// The names are shown, escaped: analyze's stack and marker rows.
	out, _, _ := runCLI("analyze", fst)
	for _, want := range []string{`f\x1b]0;PWNED\a\x1b]52;c;aGk=\a`, `agent\x1b]0;PWNED\a`} {
		if !strings.Contains(out, want) {
			t.Errorf("analyze shows no %s", want)
		}
	}
}
