package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exitFixtures writes one file for each class of bad input: a missing
// file, a directory, a corrupt file (no fragsim magic, no pickle opcode, no
// text header) and a trace cut inside its header.
func exitFixtures(t *testing.T) (missing, dir, corrupt, cut string) {
	t.Helper()
	d := t.TempDir()
	missing = filepath.Join(d, "missing.fst")
	dir = filepath.Join(d, "dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	corrupt = filepath.Join(d, "corrupt.fst")
	if err := os.WriteFile(corrupt, bytes.Repeat([]byte{0xbd, 0x37, 0xd5}, 40), 0o644); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile("../../traces/baseline_s1.fst")
	if err != nil {
		t.Fatal(err)
	}
	cut = filepath.Join(d, "cut.fst")
	if err := os.WriteFile(cut, whole[:20], 0o644); err != nil {
		t.Fatal(err)
	}
	return
}

// TestExitCodes runs each command in process against each class of
// mistake and checks the exit code of the README's table: 1 for a failure
// (a missing, unreadable or corrupt input), 2 for a usage error or a trace
// cut short.
func TestExitCodes(t *testing.T) {
	missing, dir, corrupt, cut := exitFixtures(t)
	out := filepath.Join(t.TempDir(), "out")
	type tc struct {
		args []string
		want int
	}
	var cases []tc
	cases = append(cases, tc{[]string{"nosuch"}, 2}, tc{[]string{"help", "nosuch"}, 2}, tc{[]string{"--no-such-flag"}, 2})
	for _, cmd := range []string{"record", "probe", "import", "info", "dump", "undump", "replay", "compare", "analyze", "cohost", "synth"} {
		cases = append(cases, tc{[]string{cmd, "--no-such-flag"}, 2})
	}
	// The commands that read a trace.
	for _, cmd := range []string{"info", "dump", "replay", "compare", "analyze", "cohost"} {
		cases = append(cases,
			tc{[]string{cmd, missing}, 1},
			tc{[]string{cmd, dir}, 1},
			tc{[]string{cmd, corrupt}, 1},
			tc{[]string{cmd, cut}, 2},
		)
	}
	// Numbers that are no numbers, and a new command not in the list above.
	base := "../../traces/conformance/plain_small.fst"
	for _, args := range [][]string{
		{"replay", "--fraction", "NaN", base},
		{"replay", "--fraction", "Inf", base},
		{"replay", "--defrag-threshold", "NaN", base},
		{"replay", "--conf", "garbage_collection_threshold:NaN", base},
		{"compare", "--conf", "max_split_size_mb:NaN", base},
		{"import", "--memory-fraction", "NaN", missing, "-o", out},
		{"report", "--no-such-flag"},
		{"export", "--no-such-flag"},
	} {
		cases = append(cases, tc{args, 2})
	}
	// An output that is the input is refused, and the input kept.
	same := filepath.Join(t.TempDir(), "same.fst")
	if err := os.WriteFile(same, mustRead(t, base), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"dump", same, "-o", same},
		{"export", "--format", "perfetto", same, "-o", same},
		{"report", same, "-o", same},
		{"compare", same, "--html", same},
	} {
		cases = append(cases, tc{args, 1})
	}
	// The converters: a snapshot and a text trace.
	for _, cmd := range []string{"import", "undump"} {
		cases = append(cases,
			tc{[]string{cmd, missing, "-o", out}, 1},
			tc{[]string{cmd, dir, "-o", out}, 1},
			tc{[]string{cmd, corrupt, "-o", out}, 1},
		)
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		got := Main(append([]string{"fragsim"}, c.args...), &stdout, &stderr)
		if got != c.want {
			t.Errorf("fragsim %s: exit %d, want %d (%s)", strings.Join(c.args, " "), got, c.want, strings.TrimSpace(stderr.String()))
			continue
		}
		if msg := stderr.String(); !strings.Contains(msg, "fragsim: ") {
			t.Errorf("fragsim %s: stderr %q, want a message starting \"fragsim: \"", strings.Join(c.args, " "), msg)
		}
	}
	if !bytes.Equal(mustRead(t, same), mustRead(t, base)) {
		t.Errorf("%s changed: an output that is the input must be refused before anything is written", same)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed conversion left %s", out)
	}
}

func TestHelpVersionDidYouMean(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"fragsim"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, out, _ := run("help", "compare"); code != 0 || !strings.Contains(out, "fragsim compare") {
		t.Errorf("help compare: exit %d, %q", code, out)
	}
	if code, out, _ := run("help"); code != 0 || !strings.Contains(out, "COMMANDS") {
		t.Errorf("help: exit %d, %q", code, out)
	}
	if code, out, _ := run("--version"); code != 0 || !strings.HasPrefix(out, "fragsim version ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	for typo, want := range map[string]string{"compre": "compare", "improt": "import", "replya": "replay", "inf": "info"} {
		code, _, errs := run(typo, "x")
		if code != 2 || !strings.Contains(errs, `did you mean "`+want+`"?`) {
			t.Errorf("%s: exit %d, %q, want a suggestion of %s", typo, code, errs, want)
		}
	}
	if _, _, errs := run("zzzzzzzz"); strings.Contains(errs, "did you mean") {
		t.Errorf("a suggestion for a name near no command: %q", errs)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"compre", "compare", 1}, {"improt", "import", 2}, {"kitten", "sitting", 3}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
