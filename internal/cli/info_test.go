package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// writeTestTrace writes a trace of n alloc/free pairs on two devices, in
// chunks of 100 events, and returns its path.
func writeTestTrace(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.fst")
	w, err := trace.Create(path, &trace.Header{Producer: trace.ProducerSynthetic, GPUName: "Test GPU", GPUTotalBytes: 80 << 30},
		trace.ChunkEvents(100))
	if err != nil {
		t.Fatal(err)
	}
	step := w.String("step")
	if err := w.WriteEvent(trace.Event{Kind: trace.KindMarker, Marker: trace.MarkerStep, Text: step, TimeNS: 1000}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		dev := trace.DeviceID(i % 2)
		a := uint64(0x7f0000000000 + i*512)
		for _, k := range []trace.Kind{trace.KindAlloc, trace.KindFreeRequested} {
			e := trace.Event{Kind: k, Device: dev, Stream: 0x10, TimeNS: int64(2000 + i*1000), Addr: a, SizeBytes: 100}
			if err := w.WriteEvent(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs the CLI in-process and returns its exit code, stdout and stderr.
func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(append([]string{"fragsim"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestInfoJSON(t *testing.T) {
	path := writeTestTrace(t, 500)
	code, out, stderr := run("info", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"events", "by_kind", "devices", "streams", "duration_ns", "file_bytes", "bytes_per_event", "header"} {
		if _, ok := s[k]; !ok {
			t.Errorf("key %q missing from %s", k, out)
		}
	}
	var sum trace.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if sum.Events != 1001 || sum.ByKind["alloc"] != 500 || sum.ByKind["free_requested"] != 500 || sum.ByKind["marker"] != 1 ||
		sum.ByKind["oom"] != 0 || len(sum.Devices) != 2 || len(sum.Streams) != 2 ||
		sum.DurationNS != 499*1000+1000 || sum.FileBytes != fi.Size() || sum.Header.GPUName != "Test GPU" {
		t.Errorf("summary = %+v", sum)
	}
	if _, ok := sum.ByKind["segment_unmap"]; !ok {
		t.Errorf("by_kind lacks zero-count kinds: %v", sum.ByKind)
	}
}

func TestInfoHuman(t *testing.T) {
	path := writeTestTrace(t, 50)
	code, out, stderr := run("info", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Compare with runs of spaces squeezed, so that column widths do not matter.
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	norm := strings.Join(lines, "\n")
	for _, want := range []string{"gpu Test GPU 80.0 GiB", "\nevents 101 over 50µs\n", "\nalloc 50\n", "\nfree_requested 50\n",
		"\ndevices 0 1\n", "\nstreams 0x0 0x10\n", "\nmarker 1\n"} {
		if !strings.Contains(norm, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestInfoTruncated(t *testing.T) {
	path := writeTestTrace(t, 500)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.fst")
	if err := os.WriteFile(cut, data[:len(data)-30], 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run("info", "--json", cut)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr %s", code, stderr)
	}
	if !strings.Contains(stderr, cut+": truncated at byte offset") || !strings.Contains(stderr, "bytes of a partial chunk lost") {
		t.Errorf("stderr = %q", stderr)
	}
	var sum trace.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	// Chunks of 100 events: the last (partial) chunk is lost.
	if sum.Events != 1000 {
		t.Errorf("read %d events of the cut file, want the 1000 of its whole chunks", sum.Events)
	}
}

func TestInfoErrors(t *testing.T) {
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, []byte("not a trace at all"), 0o644)
	for _, tc := range []struct {
		args []string
		want int
	}{{[]string{"info", junk}, 1}, {[]string{"info", junk + ".missing"}, 1}, {[]string{"info"}, 2}} {
		code, _, stderr := run(tc.args...)
		if code != tc.want || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want %d and a message", tc.args, code, stderr, tc.want)
		}
	}
	code, _, stderr := run("info", junk)
	if !strings.Contains(stderr, "not a fragsim trace") {
		t.Errorf("stderr = %q", stderr)
	}
	_ = code
}

func TestHelp(t *testing.T) {
	for _, cmd := range []string{"info", "dump", "undump"} {
		code, out, _ := run(cmd, "--help")
		if code != 0 || !strings.Contains(out, "USAGE:") || !strings.Contains(out, "DESCRIPTION:") || !strings.Contains(out, "Exit status") {
			t.Errorf("%s --help (exit %d):\n%s", cmd, code, out)
		}
	}
}
