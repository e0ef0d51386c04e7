package record

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAttach records a process that installs the recording allocator
// itself into the region Attach makes, as the Python package's
// recording() does: a process that closes its recording, and one killed
// before it could, both leave every call in the trace.
func TestAttach(t *testing.T) {
	lib, env := setup(t)
	allocs, frees, peak := expected(3)
	for _, tc := range []struct {
		end    string
		closed bool
	}{{"", true}, {"kill", false}} {
		out := filepath.Join(t.TempDir(), "run.fst")
		cmd := exec.Command("python3", "testdata/attached.py", out, "3", "0")
		cmd.Env = append(env, "FRAGSIM_HOOK_LIB="+lib, "WORKLOAD_END="+tc.end)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		gone := make(chan struct{})
		go func() { cmd.Wait(); close(gone) }()
		s, err := Attach(AttachConfig{Output: out, PID: cmd.Process.Pid, Gone: gone, Ready: func(region string) error {
			_, err := io.WriteString(stdin, region+"\n")
			return err
		}})
		<-gone
		if err != nil {
			t.Fatalf("end %q: %v\n%s", tc.end, err, stderr.String())
		}
		if s.Allocs != allocs || s.Frees != frees || s.PeakLiveBytes != peak || s.Closed != tc.closed || s.Missing != 0 {
			t.Errorf("end %q: summary %+v, want %d allocs, %d frees, peak %d, closed %v, none missing",
				tc.end, s, allocs, frees, peak, tc.closed)
		}
	}
}

// TestAttachNever checks that a process that never opens its recording
// leaves no trace, and a process that does not exist is refused.
func TestAttachNever(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run.fst")
	cmd := exec.Command("sleep", "0.5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	go func() { cmd.Wait(); close(gone) }()
	if _, err := Attach(AttachConfig{Output: out, PID: cmd.Process.Pid, Gone: gone}); !errors.Is(err, ErrNoTrace) {
		t.Errorf("a process that never records: %v, want ErrNoTrace", err)
	}
	if _, err := Attach(AttachConfig{Output: out, PID: cmd.Process.Pid}); err == nil {
		t.Errorf("attached to process %d, which has ended", cmd.Process.Pid)
	}
}
