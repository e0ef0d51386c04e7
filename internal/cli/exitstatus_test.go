package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The README's "Exit status" table, one test per row: 0 success, 1
// failure, 2 usage error or an input cut short, 130 interrupted. Each runs
// every command the row concerns; TestExitCodes runs the bad inputs of
// row 1 and the cut traces of row 2.

const (
	tinyTrace = "../../traces/conformance/plain_tiny.fst"
	snapshot  = importTestdata + "midrun.p4.pickle"
)

// exitCase is one command line and the exit status the table gives it.
type exitCase struct {
	args []string
	want int
}

func runExitCases(t *testing.T, cases []exitCase) {
	t.Helper()
	for _, c := range cases {
		_, errs, code := runCLI(c.args...)
		if code != c.want {
			t.Errorf("fragsim %s: exit %d, want %d (%s)", strings.Join(c.args, " "), code, c.want, strings.TrimSpace(errs))
		}
	}
}

// progressCommands are the commands that can draw a progress line: each
// takes -q.
func progressCommands(dir string) [][]string {
	return [][]string{
		{"import", snapshot, "-o", filepath.Join(dir, "i.fst")},
		{"synth", "-o", filepath.Join(dir, "s.fst"), "--events", "2000"},
		{"replay", tinyTrace, "--forecast", "--out", filepath.Join(dir, "new", "plots")}, // a directory the plots make
		{"compare", tinyTrace, "--policies", "caching", "--setting", "none"},
		{"analyze", tinyTrace, "--no-advice"},
		{"report", tinyTrace, "--policies", "caching", "--setting", "none", "-o", filepath.Join(dir, "r.html")},
		{"export", "--format", "memory_viz", tinyTrace, "-o", filepath.Join(dir, "e.pickle")},
		{"export", "--format", "perfetto", "--policies", "caching", tinyTrace, "-o", filepath.Join(dir, "e.json")},
		{"cohost", tinyTrace, tinyTrace},
		{"explain", snapshot, "--request", "1MiB"},
	}
}

// Row 0, and -q: every command that can draw progress takes -q and
// succeeds on a good input; the commands that cannot take none.
func TestExitSuccessQuiet(t *testing.T) {
	dir := t.TempDir()
	quiet := map[string]bool{}
	var cases []exitCase
	for _, args := range progressCommands(dir) {
		quiet[args[0]] = true
		cases = append(cases, exitCase{append([]string{args[0], "-q"}, args[1:]...), 0})
	}
	txt := filepath.Join(dir, "t.txt")
	cases = append(cases,
		exitCase{[]string{"info", tinyTrace}, 0},
		exitCase{[]string{"dump", tinyTrace, "-o", txt}, 0},
		exitCase{[]string{"undump", txt, "-o", filepath.Join(dir, "u.fst")}, 0},
	)
	runExitCases(t, cases)
	// The commands that take -q are those listed, and no other command
	// reads the flag without defining it (urfave/cli answers false).
	for _, c := range NewApp(nil, nil).Commands {
		has := false
		for _, f := range c.Flags {
			for _, n := range f.Names() {
				has = has || n == "q"
			}
		}
		if has != quiet[c.Name] && c.Name != "record" && c.Name != "attach" && c.Name != "probe" {
			t.Errorf("%s: takes -q %v, draws progress %v", c.Name, has, quiet[c.Name])
		}
	}
}

// badSettingTrace writes a trace whose header stores an alloc conf no
// policy accepts.
func badSettingTrace(t *testing.T, dir string) string {
	t.Helper()
	txt := filepath.Join(dir, "bad.txt")
	os.WriteFile(txt, []byte("# fragsim text v1\nheader {\"producer\":\"pytorch\",\"alloc_conf\":\"garbage_collection_threshold:NaN\"}\n"+
		"alloc t=1000 dev=0 stream=0x0 addr=0x7f0000000000 size=3145728\n"), 0o644)
	path := filepath.Join(dir, "bad.fst")
	if _, errs, code := runCLI("undump", txt, "-o", path); code != 0 {
		t.Fatalf("undump: exit %d: %s", code, errs)
	}
	return path
}

// Row 1: a failure. An output that is one of the inputs (any name, a
// link, a device log, a plot's input), an output that cannot be written,
// a bad setting stored in a trace, a failed replay. Every input is left
// as it was.
func TestExitFailure(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.fst")
	orig := mustRead(t, tinyTrace)
	os.WriteFile(in, orig, 0o644)
	link := filepath.Join(dir, "link.fst")
	os.Symlink("in.fst", link)
	hard := filepath.Join(dir, "hard.fst")
	os.Link(in, hard)
	snap := filepath.Join(dir, "s.pickle")
	snapBytes := mustRead(t, snapshot)
	os.WriteFile(snap, snapBytes, 0o644)
	log := filepath.Join(dir, "dev.log")
	logBytes := []byte("1764000000000200000 0 2000 8000\n")
	os.WriteFile(log, logBytes, 0o644)
	txt := filepath.Join(dir, "in.txt")
	os.WriteFile(txt, []byte("# fragsim text v1\nheader {}\n"), 0o644)
	txtBytes := mustRead(t, txt)
	pl := filepath.Join(dir, "pl")
	os.Mkdir(pl, 0o755)
	os.Symlink("../in.fst", filepath.Join(pl, "views.png"))
	os.Link(in, filepath.Join(pl, "forecast.svg"))
	missingDir := filepath.Join(dir, "no", "such", "out")
	var cases []exitCase
	for _, out := range []string{in, link, hard} {
		cases = append(cases,
			exitCase{[]string{"dump", in, "-o", out}, 1},
			exitCase{[]string{"export", "--format", "perfetto", in, "-o", out}, 1},
			exitCase{[]string{"export", "--format", "memory_viz", in, "-o", out}, 1},
			exitCase{[]string{"report", in, "-o", out}, 1},
			exitCase{[]string{"compare", in, "--html", out}, 1},
		)
	}
	cases = append(cases,
		exitCase{[]string{"import", snap, "-o", snap}, 1},
		exitCase{[]string{"import", snap, "--device-log", log, "-o", log}, 1},
		exitCase{[]string{"import", "--format", "rmm", log, "-o", log}, 1},
		exitCase{[]string{"undump", txt, "-o", txt}, 1},
		exitCase{[]string{"compare", in, "--out", pl}, 1},
		exitCase{[]string{"compare", filepath.Join(pl, "views.png"), "--out", pl}, 1},
		exitCase{[]string{"replay", in, "--forecast", "--out", pl}, 1},
		exitCase{[]string{"cohost", in, "--out", pl}, 1},
		exitCase{[]string{"record", "-o", txt, "--", "python3", txt}, 1}, // the program's script
		// An output that cannot be written.
		exitCase{[]string{"import", snap, "-o", missingDir}, 1},
		exitCase{[]string{"dump", in, "-o", missingDir}, 1},
		exitCase{[]string{"undump", txt, "-o", missingDir}, 1},
		exitCase{[]string{"synth", "--events", "1000", "-o", missingDir}, 1},
		exitCase{[]string{"report", in, "-o", missingDir}, 1},
		exitCase{[]string{"export", "--format", "perfetto", in, "-o", missingDir}, 1},
	)
	// A bad setting stored in a trace.
	bad := badSettingTrace(t, dir)
	for _, args := range [][]string{
		{"replay", bad}, {"compare", bad}, {"analyze", bad}, {"report", bad, "-o", filepath.Join(dir, "b.html")},
		{"export", "--format", "memory_viz", bad, "-o", filepath.Join(dir, "b.pickle")}, {"cohost", bad}, {"explain", bad},
	} {
		cases = append(cases, exitCase{args, 1})
	}
	// A failed replay: a free of an address never allocated.
	ftxt := filepath.Join(dir, "free.txt")
	os.WriteFile(ftxt, []byte("# fragsim text v1\nheader {}\nfree_requested t=2 dev=0 stream=0x0 addr=0x1000 size=512\n"+
		"free_completed t=2 dev=0 stream=0x0 addr=0x1000 size=512\n"), 0o644)
	free := filepath.Join(dir, "free.fst")
	if _, errs, code := runCLI("undump", ftxt, "-o", free); code != 0 {
		t.Fatalf("undump: exit %d: %s", code, errs)
	}
	cases = append(cases, exitCase{[]string{"replay", free}, 1})
	runExitCases(t, cases)
	for path, want := range map[string][]byte{in: orig, snap: snapBytes, log: logBytes, txt: txtBytes} {
		if got := mustRead(t, path); string(got) != string(want) {
			t.Errorf("%s changed", path)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "b.html")); err == nil {
		t.Errorf("a report of a trace with a bad setting was written")
	}
}

// Row 2: a usage error, or an input cut short (what was read is still
// converted). An output named "" is a usage error wherever an output is
// named.
func TestExitUsage(t *testing.T) {
	dir := t.TempDir()
	var cases []exitCase
	for _, args := range [][]string{
		{"import", snapshot, "-o", ""},
		{"import", snapshot, "--output", ""},
		{"dump", tinyTrace, "-o", ""},
		{"undump", "-", "-o", ""},
		{"synth", "-o", ""},
		{"report", tinyTrace, "-o", ""},
		{"export", "--format", "perfetto", tinyTrace, "-o", ""},
		{"compare", tinyTrace, "--html", ""},
		{"compare", tinyTrace, "--out", ""},
		{"replay", tinyTrace, "--forecast", "--out", ""},
		{"cohost", tinyTrace, "--out", ""},
		{"record", "-o", "", "--", "true"},
	} {
		cases = append(cases, exitCase{args, 2})
	}
	// A snapshot cut short: the entries before the cut are kept.
	full := mustRead(t, importTestdata+"empty_cache.p4.pickle")
	cut := filepath.Join(dir, "cut.pickle")
	os.WriteFile(cut, full[:len(full)*2/3], 0o644)
	out := filepath.Join(dir, "cut.fst")
	cases = append(cases, exitCase{[]string{"import", "-q", cut, "-o", out}, 2})
	runExitCases(t, cases)
	if n := readAll(t, out); n == 0 {
		t.Errorf("the events before the cut were not kept")
	}
	if names, _ := os.ReadDir(dir); len(names) != 2 {
		t.Errorf("the directory holds %d files, want the cut snapshot and its trace", len(names))
	}
}

// Row 130: an interrupt while an output is written (SIGINT, SIGTERM,
// SIGHUP or SIGQUIT) leaves the previous file as it was and no temporary
// file.
func TestExitInterrupted(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.fst")
	os.WriteFile(out, []byte("previous"), 0o644)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		cmd := mainCmd("synth", "-q", "-o", out, "--events", "500M")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the temporary file, then signal.
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if names, _ := os.ReadDir(dir); len(names) > 1 {
				break
			}
		}
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("%v: %v, want exit 130", sig, err)
		}
		if got := mustRead(t, out); string(got) != "previous" {
			t.Errorf("%v: the previous output was changed", sig)
		}
		if names, _ := os.ReadDir(dir); len(names) != 1 {
			t.Errorf("%v: the directory holds %d files, want the output alone", sig, len(names))
		}
	}
}
