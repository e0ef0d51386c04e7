package outfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// entries lists dir's names, to check that no temporary file is left.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestCommitReplacesAndAbortKeeps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	if err := os.WriteFile(path, []byte("previous"), 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("partial")
	if got, _ := os.ReadFile(path); string(got) != "previous" {
		t.Fatalf("while writing the target reads %q, want the previous file", got)
	}
	if err := f.Abort(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "previous" {
		t.Fatalf("after Abort the target reads %q, want the previous file", got)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Fatalf("after Abort the directory holds %v, want only the target", names)
	}

	f, err = Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("new")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Fatalf("Abort after Commit: %v", err)
	}
	got, _ := os.ReadFile(path)
	st, _ := os.Stat(path)
	if string(got) != "new" || st.Mode().Perm() != 0o640 {
		t.Fatalf("after Commit the target reads %q with mode %v, want \"new\" with the previous 0640", got, st.Mode().Perm())
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Fatalf("after Commit the directory holds %v", names)
	}
}

func TestWriteErrorKeepsPrevious(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	os.WriteFile(path, []byte("previous"), 0o644)
	boom := errors.New("boom")
	err := Write(path, nil, func(w io.Writer) error {
		io.WriteString(w, "half")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write returned %v, want the writer's error", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "previous" || len(entries(t, dir)) != 1 {
		t.Fatalf("target %q, directory %v: want the previous file alone", got, entries(t, dir))
	}
}

func TestConcurrentWritersEachWriteAWholeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	const size = 1 << 20
	contents := [][]byte{bytes.Repeat([]byte{'a'}, size), bytes.Repeat([]byte{'b'}, size)}
	var wg sync.WaitGroup
	errs := make([]error, len(contents))
	for i, c := range contents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Write(path, nil, func(w io.Writer) error {
				for off := 0; off < len(c); off += 4096 {
					if _, err := w.Write(c[off : off+4096]); err != nil {
						return err
					}
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, contents[0]) && !bytes.Equal(got, contents[1]) {
		t.Fatalf("the target (%d bytes) is neither writer's whole output", len(got))
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Fatalf("the directory holds %v, want only the target", names)
	}
}

func TestOutputEqualToInputRefused(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "a.fst")
	os.WriteFile(in, []byte("input"), 0o644)
	hard := filepath.Join(dir, "hard")
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{in, filepath.Join(dir, ".", "a.fst"), hard} {
		if _, err := Create(out, "-", in); err == nil || !strings.Contains(err.Error(), "is the input") {
			t.Errorf("Create(%s) with input %s: %v, want a refusal", out, in, err)
		}
	}
	if got, _ := os.ReadFile(in); string(got) != "input" {
		t.Fatalf("the input reads %q after the refusals", got)
	}
	other := filepath.Join(dir, "b.fst")
	f, err := Create(other, in, filepath.Join(dir, "missing"))
	if err != nil {
		t.Fatalf("an output that is not an input: %v", err)
	}
	f.Abort()
}

func TestSymlinkWrittenThrough(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real")
	link := filepath.Join(dir, "link")
	os.WriteFile(target, []byte("old"), 0o644)
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, nil, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced (%v, %v)", st, err)
	}
	if got, _ := os.ReadFile(target); string(got) != "new" {
		t.Fatalf("the link's target reads %q, want \"new\"", got)
	}
	// A dangling link: its target is created.
	dangling := filepath.Join(dir, "dangling")
	os.Symlink("made", dangling)
	if err := Write(dangling, nil, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "made")); string(got) != "x" {
		t.Fatalf("the dangling link's target reads %q", got)
	}
	// A symlink to an input is the input.
	if _, err := Create(link, target); err == nil {
		t.Fatal("a link to the input was accepted as the output")
	}
}

func TestDeviceWrittenDirectly(t *testing.T) {
	if err := Write(os.DevNull, nil, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
		t.Fatalf("writing to %s: %v", os.DevNull, err)
	}
	if st, err := os.Stat(os.DevNull); err != nil || st.Mode().IsRegular() {
		t.Fatalf("%s was replaced: %v %v", os.DevNull, st, err)
	}
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	err := Write("/dev/full", nil, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err })
	if err == nil {
		t.Fatal("writing to /dev/full succeeded")
	}
}

func TestFifoWrittenDirectly(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no fifo:", err)
	}
	got := make(chan []byte)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	if err := Write(fifo, nil, func(w io.Writer) error { _, err := io.WriteString(w, "through"); return err }); err != nil {
		t.Fatal(err)
	}
	if b := <-got; string(b) != "through" {
		t.Fatalf("the fifo's reader got %q", b)
	}
	if st, _ := os.Lstat(fifo); st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatal("the fifo was replaced")
	}
}

func TestDirectoryRefused(t *testing.T) {
	if _, err := Create(t.TempDir()); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("a directory as output: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "no", "out")
	if _, err := Create(missing); err == nil || !strings.Contains(err.Error(), "cannot create "+missing+": ") || strings.Contains(err.Error(), ".tmp") {
		t.Fatalf("an output in a missing directory: %v, want an error naming the target", err)
	}
}

// TestSignalRemovesTemp runs this test binary as a child that opens an
// output over a previous file and a scratch file, writes part of the
// output and gets one of the Signals: it must exit 130, leave the previous
// file, and neither the temporary nor the scratch file.
func TestSignalRemovesTemp(t *testing.T) {
	if path := os.Getenv("OUTFILE_SIGNAL_CHILD"); path != "" {
		f, err := Create(path)
		if err != nil {
			fmt.Println("create:", err)
			os.Exit(3)
		}
		if _, err := NewScratch(filepath.Dir(path), "scratch-*"); err != nil {
			fmt.Println("scratch:", err)
			os.Exit(3)
		}
		sd, err := NewScratchDir(filepath.Dir(path), "scratchdir-*")
		if err != nil {
			fmt.Println("scratch dir:", err)
			os.Exit(3)
		}
		os.WriteFile(filepath.Join(sd.Path(), "a library's file"), []byte("x"), 0o644)
		f.WriteString("partial")
		sig := map[string]syscall.Signal{"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP,
			"QUIT": syscall.SIGQUIT}[os.Getenv("OUTFILE_SIGNAL")]
		syscall.Kill(os.Getpid(), sig)
		time.Sleep(10 * time.Second)
		os.Exit(4)
	}
	for _, sig := range []string{"INT", "TERM", "HUP", "QUIT"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "out")
		os.WriteFile(path, []byte("previous"), 0o644)
		cmd := exec.Command(os.Args[0], "-test.run=^TestSignalRemovesTemp$")
		cmd.Env = append(os.Environ(), "OUTFILE_SIGNAL_CHILD="+path, "OUTFILE_SIGNAL="+sig)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != ExitCode {
			t.Fatalf("SIG%s: the child ended with %v, want exit %d; output: %s", sig, err, ExitCode, out)
		}
		if got, _ := os.ReadFile(path); string(got) != "previous" {
			t.Fatalf("SIG%s: the target reads %q, want the previous file", sig, got)
		}
		if names := entries(t, dir); len(names) != 1 {
			t.Fatalf("SIG%s: the directory holds %v, want only the target", sig, names)
		}
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.fst")
	os.WriteFile(in, []byte("input"), 0o644)
	link := filepath.Join(dir, "views.png")
	if err := os.Symlink("in.fst", link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.png")
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	if err := Check("", in); !errors.Is(err, ErrNoName) {
		t.Errorf("Check(\"\"): %v, want ErrNoName", err)
	}
	if err := Check(dir, in); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("Check(a directory): %v", err)
	}
	for _, out := range []string{in, link, hard} {
		var se *SameFileError
		if err := Check(out, "", "-", filepath.Join(dir, "missing"), in); !errors.As(err, &se) || se.Input != in {
			t.Errorf("Check(%s, %s): %v, want a SameFileError", out, in, err)
		}
		if _, err := Create(out, in); err == nil {
			t.Errorf("Create(%s, %s) was accepted", out, in)
		}
	}
	if err := Check(filepath.Join(dir, "new"), in); err != nil {
		t.Errorf("a new output: %v", err)
	}
	if err := Check(os.DevNull, os.DevNull); err != nil {
		t.Errorf("%s is no input it could destroy: %v", os.DevNull, err)
	}
	if got, _ := os.ReadFile(in); string(got) != "input" {
		t.Fatalf("the input reads %q", got)
	}
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	for path, want := range map[string]string{
		filepath.Join(dir, "new"): dir,
		"-":                       "",
		"/dev/stdout":             "",
		os.DevNull:                "",
	} {
		if got := Dir(path); got != want {
			t.Errorf("Dir(%s) = %q, want %q", path, got, want)
		}
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	os.Symlink(filepath.Join(sub, "real"), filepath.Join(dir, "link"))
	if got := Dir(filepath.Join(dir, "link")); got != sub {
		t.Errorf("Dir(a link) = %q, want the directory of its target, %q", got, sub)
	}
}

// TestStdoutWrittenThrough runs this test binary as a child that writes
// to "-" or /dev/stdout, with its standard output a pipe: the bytes go
// through, and standard output stays open after Commit.
func TestStdoutWrittenThrough(t *testing.T) {
	if path := os.Getenv("OUTFILE_STDOUT_CHILD"); path != "" {
		for i := range 2 {
			f, err := Create(path, "-")
			if err != nil {
				fmt.Fprintln(os.Stderr, "create:", err)
				os.Exit(3)
			}
			if _, err := fmt.Fprintf(f, "through %d;", i); err != nil {
				fmt.Fprintln(os.Stderr, "write:", err)
				os.Exit(3)
			}
			if err := f.Commit(); err != nil {
				fmt.Fprintln(os.Stderr, "commit:", err)
				os.Exit(3)
			}
		}
		os.Exit(0)
	}
	for _, path := range []string{"-", "/dev/stdout"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStdoutWrittenThrough$")
		cmd.Env = append(os.Environ(), "OUTFILE_STDOUT_CHILD="+path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output() // a pipe
		if err != nil || string(out) != "through 0;through 1;" {
			t.Errorf("-o %s into a pipe: %v, stdout %q, stderr %q", path, err, out, stderr.String())
		}
	}
}

func TestScratchDirRemoved(t *testing.T) {
	d := t.TempDir()
	sd, err := NewScratchDir(d, "s-*")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(sd.Path(), "sub"), 0o755)
	os.WriteFile(filepath.Join(sd.Path(), "sub", "f"), []byte("x"), 0o644)
	sd.Remove()
	sd.Remove()
	if names := entries(t, d); len(names) != 0 {
		t.Errorf("left: %v", names)
	}
}
