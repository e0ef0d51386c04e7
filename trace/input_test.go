package trace

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fifo makes a named pipe in dir that a goroutine fills with data once.
func fifo(t *testing.T, dir string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("no fifo: %v", err)
	}
	go func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Write(data)
			f.Close()
		}
	}()
	return p
}

// An input that can be read only once is read into a spool, which every
// reader then reads from its start; nothing is left behind.
func TestOpenInputSpoolsPipes(t *testing.T) {
	dir, spools := t.TempDir(), t.TempDir()
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	in, err := OpenInput(fifo(t, dir, data), InputOptions{Dir: spools})
	if err != nil {
		t.Fatal(err)
	}
	if !in.Spooled() || in.Size() != int64(len(data)) {
		t.Fatalf("spooled %v, size %d", in.Spooled(), in.Size())
	}
	for i := range 3 {
		got, err := io.ReadAll(in.Reopen())
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d: %d bytes, %v", i, len(got), err)
		}
	}
	if left, _ := os.ReadDir(spools); len(left) != 0 {
		t.Errorf("the spool has a name: %v", left)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	// A regular file is read as it is.
	file := filepath.Join(dir, "f")
	os.WriteFile(file, data[:10], 0o644)
	rf, err := OpenInput(file, InputOptions{Dir: spools})
	if err != nil || rf.Spooled() || rf.Size() != 10 {
		t.Fatalf("regular file: %v", err)
	}
	rf.Close()
	if _, err := OpenInput(dir, InputOptions{}); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
}

// A spool stays within its budget, and Check refuses an input by its
// first bytes before the rest is read.
func TestOpenInputBudgets(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenInput(fifo(t, dir, make([]byte, 1000)), InputOptions{Dir: dir, MaxBytes: 999})
	if err == nil || !strings.Contains(err.Error(), "more than 999 bytes") || !strings.Contains(err.Error(), "fifo") {
		t.Errorf("past the budget: %v", err)
	}
	os.Remove(filepath.Join(dir, "fifo"))
	bad := errors.New("starts badly")
	_, err = OpenInput(fifo(t, dir, make([]byte, 1<<20)), InputOptions{Dir: dir, Check: func(head []byte) error {
		if len(head) != 64 || head[0] != 0 {
			t.Errorf("head %d bytes", len(head))
		}
		return bad
	}})
	if !errors.Is(err, bad) {
		t.Errorf("check: %v", err)
	}
	os.Remove(filepath.Join(dir, "fifo"))
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
