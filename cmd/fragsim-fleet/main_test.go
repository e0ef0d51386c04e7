//go:build !race

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/memfs"

	"github.com/fragsim/fragsim/fleet"
)

// TestMain lets this test binary serve as a Prism job server of its own
// (FRAGSIM_FLEET_JOB_SERVER=PORT), as `fragsim-fleet job-server` does.
func TestMain(m *testing.M) {
	if os.Getenv("FRAGSIM_FLEET_AS_MAIN") == "1" { // this binary as fragsim-fleet
		beam.Init()
		os.Exit(run(append([]string{"fragsim-fleet"}, os.Args[1:]...), os.Stdout, os.Stderr))
	}
	if port := os.Getenv("FRAGSIM_FLEET_JOB_SERVER"); port != "" {
		beam.Init()
		os.Exit(run([]string{"fragsim-fleet", "job-server", "--port", port, "--idle-shutdown", "2m"}, os.Stdout, os.Stderr))
	}
	beam.Init()
	os.Exit(m.Run())
}

// fixture is a small fleet: a four-rank job, two OOM snapshots of another
// job, and a corrupt input.
func fixture(t *testing.T) (string, []string) {
	t.Helper()
	d := t.TempDir()
	ranks, _ := filepath.Glob(filepath.Join("..", "..", "traces", "train_ranks", "rank*.fst"))
	if len(ranks) != 4 {
		t.Fatalf("traces/train_ranks: %d ranks, want 4", len(ranks))
	}
	oom := filepath.Join(d, "oom")
	os.MkdirAll(oom, 0o755)
	for i, c := range []string{"fraction_medium", "fraction_mixed"} {
		out := filepath.Join(oom, fmt.Sprintf("snapshot_oom_rank-%d.pickle", i))
		var errb bytes.Buffer
		cmd := []string{"fragsim", "export", "-q", "--format", "memory_viz", "-o", out, filepath.Join("..", "..", "traces", "conformance", c+".fst")}
		if code := fcliMain(cmd, &errb); code != 0 {
			t.Fatalf("export %s: %s", c, errb.String())
		}
	}
	bad := filepath.Join(d, "bad", "rank0.fst")
	os.MkdirAll(filepath.Dir(bad), 0o755)
	os.WriteFile(bad, []byte("FRAGSIM\x00not a trace at all"), 0o644)
	return d, append(ranks, oom, filepath.Join(d, "bad", "*.fst"))
}

// stripWall removes the wall times from a JSON value: the one thing two
// runs of the same fleet may differ in.
func stripWall(t *testing.T, b []byte) string {
	t.Helper()
	return regexp.MustCompile(`"wall_s":[0-9.e+-]+,?`).ReplaceAllString(string(b), "")
}

func outputs(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range []string{fleet.RowsFile, fleet.FleetFile, fleet.SettingsFile, fleet.HTMLFile} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = stripWall(t, b)
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPrismTwice runs the same fleet on Prism in this process, then on a
// Prism job server started as a process of its own with LOOPBACK workers
// (the portable path a Flink or Spark job server takes): both give the
// same outputs, the same as the fleet analysed without an engine; the
// corrupt input is named, and the exit status is 1.
func TestPrismTwice(t *testing.T) {
	d, inputs := fixture(t)
	runFleet := func(out string, extra ...string) (int, string, string) {
		var so, se bytes.Buffer
		args := append(append([]string{"fragsim-fleet"}, inputs...), "--out", out, "-q")
		code := run(append(args, extra...), &so, &se)
		return code, so.String(), se.String()
	}
	in := filepath.Join(d, "inproc")
	code, so, se := runFleet(in)
	if code != 1 || !strings.Contains(se, "1 of 7 inputs failed") {
		t.Fatalf("in-process: exit %d, stderr %q; want 1 and 1 of 7 inputs failed", code, se)
	}
	for _, want := range []string{"Inputs: 7 analysed 6 failed 1", "Most imbalanced job: train_ranks, 2.18x (rank 3 peaks", "OOM classes: fragmentation 2", "rank0.fst: "} {
		if !strings.Contains(so, want) {
			t.Errorf("in-process: the summary lacks %q:\n%s", want, so)
		}
	}

	port := freePort(t)
	srv := exec.Command(os.Args[0], "-test.run=^$")
	srv.Env = append(os.Environ(), "FRAGSIM_FLEET_JOB_SERVER="+strconv.Itoa(port))
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	endpoint := fmt.Sprintf("localhost:%d", port)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", endpoint); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job server did not listen: %s", srvErr.String())
		}
	}
	js := filepath.Join(d, "jobserver")
	code, _, se = runFleet(js, "--runner", "universal", "--endpoint", endpoint)
	if code != 1 {
		t.Fatalf("job server: exit %d: %s", code, se)
	}
	a, b := outputs(t, in), outputs(t, js)
	for n := range a {
		if n != fleet.HTMLFile && a[n] != b[n] {
			t.Errorf("%s differs between Prism in-process and the job server:\n%s\n---\n%s", n, a[n], b[n])
		}
	}

	// Without an engine, in order: the same fleet.
	exp, err := fleet.Expand(inputs)
	if err != nil {
		t.Fatal(err)
	}
	rows, f, err := fleet.Run(exp, fleet.Options{Goal: "reserved", Stacks: 5}, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.Encode(f)
	if got := stripWall(t, buf.Bytes()); got != a[fleet.FleetFile] {
		t.Errorf("fleet.json differs from the fleet analysed in order:\n%s\n---\n%s", a[fleet.FleetFile], got)
	}
	buf.Reset()
	fleet.WriteRows(&buf, rows)
	if got := stripWall(t, buf.Bytes()); got != a[fleet.RowsFile] {
		t.Errorf("traces.jsonl differs from the rows analysed in order")
	}
}

func TestUsageErrors(t *testing.T) {
	d := t.TempDir()
	tr := filepath.Join("..", "..", "traces", "train_ranks", "rank0.fst")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{tr}, "--out DIR is required"},
		{[]string{"--out", d}, "give at least one INPUT"},
		{[]string{filepath.Join(d, "nothing.fst"), "--out", d}, "nothing.fst"},
		{[]string{tr, "--out", d, "--goal", "cheapest"}, "--goal"},
		{[]string{tr, "--out", d, "--label", "("}, "--label"},
		{[]string{tr, "--out", d, "--runner", "flink"}, "--runner"},
		{[]string{tr, "--out", d, "--runner", "universal"}, "--endpoint"},
		{[]string{tr, "--out", d, "--beam-option", "no_such_option=1"}, "no_such_option"},
	} {
		var so, se bytes.Buffer
		if code := run(append([]string{"fragsim-fleet"}, tt.args...), &so, &se); code != 2 || !strings.Contains(se.String(), tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tt.args, code, se.String(), tt.want)
		}
	}
	// An output that is one of the inputs is refused before any work.
	in := filepath.Join(d, "fleet.json")
	os.WriteFile(in, []byte("{}"), 0o644)
	var se bytes.Buffer
	if code := run([]string{"fragsim-fleet", in, "--out", d}, &bytes.Buffer{}, &se); code != 2 || !strings.Contains(se.String(), "fleet.json") {
		t.Errorf("an input as output: exit %d, %q", code, se.String())
	}
}

// TestInterruptLeavesNothing interrupts a fleet while it analyses: the
// process exits 130 and leaves no output, no scratch file of its own and
// no scratch trace behind.
func TestInterruptLeavesNothing(t *testing.T) {
	d := t.TempDir()
	tmp := filepath.Join(d, "tmp")
	out := filepath.Join(d, "out")
	os.MkdirAll(tmp, 0o755)
	var inputs []string
	for _, p := range []string{"kv_decode_s1.fst", "train_s1.fst", "baseline_s1.fst", "baseline_s2.fst", "baseline_s3.fst", "shared_s1.fst"} {
		inputs = append(inputs, filepath.Join("..", "..", "traces", p))
	}
	// A snapshot too, so that a scratch trace exists while it is analysed.
	snap := filepath.Join(d, "snapshot_0.pickle")
	var errb bytes.Buffer
	if code := fcliMain([]string{"fragsim", "export", "-q", "--format", "memory_viz", "-o", snap, inputs[1]}, &errb); code != 0 {
		t.Fatalf("export: %s", errb.String())
	}
	cmd := exec.Command(os.Args[0], append(append([]string{snap}, inputs...), "--out", out)...)
	cmd.Env = append(os.Environ(), "FRAGSIM_FLEET_AS_MAIN=1", "TMPDIR="+tmp)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the first input is done: the others are under way.
	buf := make([]byte, 4096)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "[1/7]") {
		n, err := stderr.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("the fleet ended before its first row: %s", seen.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	go func() { io.Copy(io.Discard, stderr) }()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit %v, want 130", err)
	}
	for _, dir := range []string{out, tmp} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			t.Errorf("left in %s: %s", dir, e.Name())
		}
	}
}

// TestRemoteInputs reads inputs through a Beam filesystem (memfs://, as
// gs:// would be), matched by a glob in the pipeline and fetched by the
// worker, with the rows written there too (--temp).
func TestRemoteInputs(t *testing.T) {
	ctx := context.Background()
	fs, err := filesystem.New(ctx, "memfs://")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"0", "3"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "traces", "train_ranks", "rank"+r+".fst"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := fs.OpenWrite(ctx, "memfs://bucket/train/rank"+r+".fst")
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
		w.Close()
	}
	out := t.TempDir()
	var so, se bytes.Buffer
	if code := run([]string{"fragsim-fleet", "memfs://bucket/train/rank*.fst", "--out", out, "--temp", "memfs://scratch", "-q"}, &so, &se); code != 0 {
		t.Fatalf("exit %d: %s", code, se.String())
	}
	b, err := os.ReadFile(filepath.Join(out, fleet.RowsFile))
	if err != nil {
		t.Fatal(err)
	}
	var rows []fleet.Row
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r fleet.Row
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 2 || rows[0].Input != "memfs://bucket/train/rank0.fst" || rows[1].Input != "memfs://bucket/train/rank3.fst" {
		t.Fatalf("rows %+v", rows)
	}
	for i, r := range rows {
		if r.Error != "" || r.Job != "train" || r.Rank == nil || *r.Rank != []int{0, 3}[i] || r.Recommendation == nil {
			t.Errorf("%s: job %s rank %v error %q", r.Input, r.Job, r.Rank, r.Error)
		}
	}
	if !strings.Contains(so.String(), "Most imbalanced job: train, 1.43x (rank 3 peaks") { // 6.54 GiB over the mean of the two
		t.Errorf("summary: %s", so.String())
	}
}
