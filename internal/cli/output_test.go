package cli

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestMain runs the command itself, in a process of its own, when
// FRAGSIM_CLI_TEST_ARGS holds its arguments (separated by the unit separator, 0x1f): see mainCmd.
func TestMain(m *testing.M) {
	if args := os.Getenv("FRAGSIM_CLI_TEST_ARGS"); args != "" {
		os.Exit(Main(append([]string{"fragsim"}, strings.Split(args, "\x1f")...), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// mainCmd is `fragsim args...` as a process of its own (the test binary
// running Main): processes share no memory, as goroutines calling Main
// would (the CLI library keeps its help flag in a package variable).
func mainCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FRAGSIM_CLI_TEST_ARGS="+strings.Join(args, "\x1f"))
	return cmd
}

func runMain(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(append([]string{"fragsim"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// readAll reads every event of the trace at path and returns their number.
func readAll(t *testing.T, path string) int {
	t.Helper()
	f, err := trace.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	n := 0
	for {
		_, err := f.ReadEvent()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("%s: after %d events: %v", path, n, err)
		}
		n++
	}
}

func TestOutputEqualToInputRefused(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.fst")
	orig, err := os.ReadFile("../../traces/baseline_s1.fst")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(a, orig, 0o644)
	if code, _, errs := runMain("dump", a, "-o", a); code != 1 || !strings.Contains(errs, "is the input") {
		t.Errorf("dump a -o a: exit %d, %q, want 1 and a refusal", code, errs)
	}
	if got, _ := os.ReadFile(a); !bytes.Equal(got, orig) {
		t.Fatal("dump a -o a changed a")
	}
	txt := filepath.Join(dir, "b.txt")
	if code, _, errs := runMain("dump", a, "-o", txt); code != 0 {
		t.Fatalf("dump: exit %d, %s", code, errs)
	}
	text, _ := os.ReadFile(txt)
	if code, _, errs := runMain("undump", txt, "-o", txt); code != 1 || !strings.Contains(errs, "is the input") {
		t.Errorf("undump b -o b: exit %d, %q, want 1 and a refusal", code, errs)
	}
	if got, _ := os.ReadFile(txt); !bytes.Equal(got, text) {
		t.Fatal("undump b -o b changed b")
	}
	// The round trip through the safe outputs gives the same trace.
	back := filepath.Join(dir, "back.fst")
	if code, _, errs := runMain("undump", txt, "-o", back); code != 0 {
		t.Fatalf("undump: exit %d, %s", code, errs)
	}
	if readAll(t, back) != readAll(t, a) {
		t.Fatal("the undumped trace holds another number of events")
	}
	if names, _ := os.ReadDir(dir); len(names) != 3 {
		t.Fatalf("the directory holds %d files, want a.fst, b.txt and back.fst", len(names))
	}
}

func TestOutputSymlinkWrittenThrough(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.txt")
	os.WriteFile(real, []byte("old"), 0o644)
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink("real.txt", link); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runMain("dump", "../../traces/baseline_s1.fst", "-o", link); code != 0 {
		t.Fatalf("dump -o link: exit %d, %s", code, errs)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the link was replaced by a file")
	}
	if got, _ := os.ReadFile(real); !bytes.HasPrefix(got, []byte("# fragsim text v1")) {
		t.Fatalf("the link's target holds %.40q, want the dump", got)
	}
}

func TestStdoutWriteErrorExits1(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	defer full.Close()
	for _, args := range [][]string{
		{"dump", "../../traces/baseline_s1.fst"},
		{"info", "../../traces/baseline_s1.fst"},
		{"info", "--json", "../../traces/baseline_s1.fst"},
		{"--help"},
	} {
		var stderr bytes.Buffer
		if code := Main(append([]string{"fragsim"}, args...), full, &stderr); code != 1 {
			t.Errorf("fragsim %v > /dev/full: exit %d, want 1 (%s)", args, code, stderr.String())
		}
	}
}

func TestConcurrentSynthToOneOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "same.fst")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([][]byte, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = mainCmd("synth", "-q", "-o", path, "--events", "20k", "--seed", []string{"1", "2"}[i]).CombinedOutput()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v: %s", i, err, outs[i])
		}
	}
	if n := readAll(t, path); n < 20_000 {
		t.Fatalf("the output holds %d events, want one writer's whole trace", n)
	}
	if names, _ := os.ReadDir(filepath.Dir(path)); len(names) != 1 {
		t.Fatalf("%d files beside the output, want none", len(names)-1)
	}
}
