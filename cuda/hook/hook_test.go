//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fragsim/fragsim/cuda/ring"
	"github.com/fragsim/fragsim/trace"
)

// built holds the library, the fake driver and the harness, built once.
// It is all the tests share: each runs its own harness process on its own
// files. Most run in parallel (t.Parallel), so that TestHookKilled's wait
// and the C++ harnesses' compiles overlap. TestHookThreads and
// TestHookKilledShared do not: they drain a region while their harness's
// threads record, and in parallel with the other tests they took a third
// more CPU for no shorter run.
var built struct {
	once              sync.Once
	dir, lib, harness string
	err               error
	skip              string
}

func build(t *testing.T) (dir, lib, harness string) {
	t.Helper()
	built.once.Do(func() {
		if _, err := exec.LookPath("gcc"); err != nil {
			built.skip = "gcc not found: the hook tests build C code"
			return
		}
		d, err := os.MkdirTemp("", "fragsim-hook-test")
		if err != nil {
			built.err = err
			return
		}
		built.dir = d
		built.lib = filepath.Join(d, "libfragsim_hook.so")
		built.harness = filepath.Join(d, "harness")
		steps := [][]string{
			{"go", "build", "-buildmode=c-shared", "-o", built.lib, "."},
			{"gcc", "-O2", "-shared", "-fPIC", "-o", filepath.Join(d, "libcuda.so.1"), "testdata/fakecuda.c"},
			{"gcc", "-O2", "-pthread", "-o", built.harness, "testdata/harness.c", "-ldl"},
		}
		for _, s := range steps {
			cmd := exec.Command(s[0], s[1:]...)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				built.err = fmt.Errorf("%v: %v\n%s", s, err, out)
				return
			}
		}
	})
	if built.skip != "" {
		t.Skip(built.skip)
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir, built.lib, built.harness
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// harnessCmd runs a harness against the fake driver, with the reuse cache
// off, so that the driver sees every call the harness makes; a test of the
// cache appends FRAGSIM_HOOK_CACHE_MB (the last value counts).
func harnessCmd(dir, harness string, args ...string) *exec.Cmd {
	cmd := exec.Command(harness, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "FAKE_CUDA_LIMIT=1073741824", "FRAGSIM_OOM_RETURNS_NULL=1",
		"FRAGSIM_HOOK_CACHE_MB=0")
	return cmd
}

// checker validates a recorded harness run event by event.
type checker struct {
	threads int
	next    []int64                // per thread: next alloc index expected
	allocs  [][]uint64             // per thread: addresses of allocs not yet freed, oldest first
	live    map[uint64]trace.Event // address -> its alloc
	lastT   int64
	nAllocs int
	nFrees  int
	steps   []string
	pending *trace.Event // a free_requested awaiting its free_completed
}

func newChecker(threads int) *checker {
	return &checker{threads: threads, next: make([]int64, threads), allocs: make([][]uint64, threads), live: map[uint64]trace.Event{}}
}

func (c *checker) thread(e trace.Event) (int, error) {
	t := int(e.Stream) - 0x100
	if t < 0 || t >= c.threads {
		return 0, fmt.Errorf("stream %#x is not a harness thread's", e.Stream)
	}
	return t, nil
}

func (c *checker) event(i int, e trace.Event, r *trace.Reader) error {
	if e.TimeNS < c.lastT {
		return fmt.Errorf("event %d: time %d before %d", i, e.TimeNS, c.lastT)
	}
	c.lastT = e.TimeNS
	if c.pending != nil {
		p := *c.pending
		c.pending = nil
		if e.Kind != trace.KindFreeCompleted || e.Addr != p.Addr || e.SizeBytes != p.SizeBytes || e.Stream != p.Stream {
			return fmt.Errorf("event %d: %v %#x after free_requested of %#x, want its free_completed", i, e.Kind, e.Addr, p.Addr)
		}
		return nil
	}
	switch e.Kind {
	case trace.KindAlloc:
		t, err := c.thread(e)
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		want := uint64(t+1)*100000 + uint64(c.next[t]%100000)
		if e.SizeBytes != want {
			return fmt.Errorf("event %d: thread %d alloc #%d: size %d, want %d", i, t, c.next[t], e.SizeBytes, want)
		}
		if old, ok := c.live[e.Addr]; ok {
			return fmt.Errorf("event %d: alloc at %#x, still live from size %d", i, e.Addr, old.SizeBytes)
		}
		if e.Device != 0 {
			return fmt.Errorf("event %d: device %d", i, e.Device)
		}
		c.next[t]++
		c.live[e.Addr] = e
		c.allocs[t] = append(c.allocs[t], e.Addr)
		c.nAllocs++
	case trace.KindFreeRequested:
		t, err := c.thread(e)
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		a, ok := c.live[e.Addr]
		if !ok {
			return fmt.Errorf("event %d: free of %#x, not live", i, e.Addr)
		}
		if a.SizeBytes != e.SizeBytes || a.Stream != e.Stream {
			return fmt.Errorf("event %d: free of %#x size %d stream %#x, allocated with size %d stream %#x", i, e.Addr, e.SizeBytes, e.Stream, a.SizeBytes, a.Stream)
		}
		if len(c.allocs[t]) == 0 || c.allocs[t][0] != e.Addr {
			return fmt.Errorf("event %d: thread %d freed %#x, not its oldest block", i, t, e.Addr)
		}
		c.allocs[t] = c.allocs[t][1:]
		delete(c.live, e.Addr)
		c.nFrees++
		c.pending = &e
	case trace.KindMarker:
		if e.Marker == trace.MarkerStep {
			c.steps = append(c.steps, r.String(e.Text))
		}
	case trace.KindFreeCompleted:
		return fmt.Errorf("event %d: free_completed without free_requested", i)
	}
	return nil
}

// TestHookThreads drives the library from 8 threads at once through a
// fake driver and checks that every call is in the trace exactly once, in
// each thread's order, with its size and stream.
// In the shared modes the records go through a region file that this test
// drains while the harness runs, as fragsim record does, or only once it
// ended: the harness then grows the file to hold every record.
// Each thread makes 2000 calls (5000 when drained at exit: 8 threads'
// 10000 records each fill 80 chunks, past the 64 the file starts with);
// with FRAGSIM_LONG=1, 10000 in every mode.
func TestHookThreads(t *testing.T) {
	long := os.Getenv("FRAGSIM_LONG") == "1"
	for _, c := range []struct {
		name         string
		shared, late bool
		cacheMB      int
		calls        int
	}{{"private", false, false, 0, 2000}, {"shared", true, false, 0, 2000}, {"shared drained at exit", true, true, 0, 5000},
		{"reuse cache", true, false, 2, 2000}} {
		if long {
			c.calls = 10000
		}
		t.Run(c.name, func(t *testing.T) { testHookThreads(t, c.shared, c.late, c.cacheMB, c.calls) })
	}
}

// runShared runs cmd recording into a region file drained into the trace
// at path by this process, and returns cmd's stdout. With killAfter > 0 it
// kills cmd with SIGKILL once that many events are drained; with late it
// drains only after cmd ended.
func runShared(t *testing.T, cmd *exec.Cmd, path string, killAfter uint64, late bool) (out []byte, lost uint64, err error) {
	t.Helper()
	reg, regPath, err := ring.Create(t.TempDir(), 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	cmd.Env = append(cmd.Env, "FRAGSIM_SHM="+regPath)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var fw *trace.FileWriter
	var d *ring.Drainer
	step := func(all bool) {
		if d == nil && reg.State() != ring.StateInit {
			var h trace.Header
			if err := json.Unmarshal(reg.Meta(), &h); err != nil {
				t.Fatalf("region header: %v", err)
			}
			if fw, err = trace.Create(path, &h); err != nil {
				t.Fatal(err)
			}
			d = ring.NewDrainer(reg, fw.Writer)
		}
		if d != nil {
			if err := d.Drain(time.Now(), all); err != nil {
				t.Fatal(err)
			}
			if killAfter > 0 && d.Events >= killAfter {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
	}
	for {
		select {
		case err := <-waited:
			step(true)
			if late && reg.Lost() == 0 && reg.Backed() <= 64 {
				t.Errorf("the region did not grow past its first 64 chunks")
			}
			if fw != nil {
				if cerr := fw.Close(); cerr != nil {
					t.Fatal(cerr)
				}
				// A killed thread may have taken a sequence number without
				// publishing its call: at most one a thread. A harness that
				// records faster than this process drains (under the race
				// detector) may find the region full: those calls are
				// counted, not lost unseen.
				if n := d.Skipped(); n != 0 && (killAfter == 0 || n > 8) {
					t.Errorf("%d sequence numbers skipped", n)
				}
				t.Logf("%d events drained, %d calls found no room, %d numbers skipped", d.Events, reg.Lost(), d.Skipped())
				if n := reg.Lost(); n != 0 && killAfter == 0 {
					t.Errorf("%d calls found no room", n)
				}
			}
			return stdout.Bytes(), reg.Lost(), err
		case <-time.After(20 * time.Millisecond):
			if !late {
				step(false)
			}
		}
	}
}

// testHookThreads runs the thread harness, calls allocations a thread
// (a multiple of 1000, as the harness marks a step every 1000); with
// cacheMB > 0 the reuse cache keeps that many MiB of freed blocks, and the
// threads' frees and allocations race on it.
func testHookThreads(t *testing.T, shared, late bool, cacheMB, n int) {
	dir, _, harness := build(t)
	const threads = 8
	calls := int64(n)
	path := filepath.Join(t.TempDir(), "run.fragsim")
	cmd := harnessCmd(dir, harness, built.lib, path, fmt.Sprint(threads), fmt.Sprint(calls))
	cmd.Env = append(cmd.Env, fmt.Sprintf("FRAGSIM_HOOK_CACHE_MB=%d", cacheMB))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var out []byte
	var err error
	if shared {
		out, _, err = runShared(t, cmd, path, 0, late)
	} else {
		out, err = cmd.Output()
	}
	if err != nil {
		t.Fatalf("harness: %v\n%s", err, stderr.String())
	}
	var fa, ff, fl, ftr, live, peak, res, resHigh int64
	var thr uint64
	if _, err := fmt.Sscanf(string(out), "allocs=%d frees=%d live=%d trims=%d threshold=%d stats=%d,%d,%d,%d",
		&fa, &ff, &fl, &ftr, &thr, &live, &peak, &res, &resHigh); err != nil {
		t.Fatalf("harness output %q: %v", out, err)
	}
	// fragsim_memory_stats: nothing live after the threads ended; the peak
	// is at least the largest block and at most every thread's window full
	// of its largest blocks; reserved comes from the pool (the fake reports
	// its live bytes, and one more as the high mark).
	if most := int64(0); true {
		for th := int64(0); th < threads; th++ {
			most += (th%4 + 2) * ((th+1)*100000 + calls)
		}
		kept := int64(cacheMB) << 20 // what the reuse cache may hold
		if live != 0 || peak < 8*100000 || peak > most || res < 0 || res > kept || resHigh != res+1 {
			t.Errorf("memory stats live %d peak %d reserved %d/%d; want 0, %d..%d, at most %d", live, peak, res, resHigh, 8*100000, most, kept)
		}
	}
	if cacheMB == 0 {
		// Every block recorded was served by the pool and returned to it;
		// the extra alloc and free are the one made after close.
		if fa != threads*calls+1 || ff != fa || fl != 0 {
			t.Errorf("driver saw %d allocs, %d frees, %d live; want %d, %d, 0", fa, ff, fl, threads*calls+1, threads*calls+1)
		}
	} else if fa > threads*calls/2 || fa-ff != fl || fl > int64(cacheMB)<<20/100000+1 {
		// Most requests were served again from the cache (each thread
		// frees a block of nearly the size it asks for next); what the
		// driver still holds is what the cache keeps, within its limit.
		t.Errorf("driver saw %d allocs, %d frees, %d live; want at most %d allocs, and at most %d kept", fa, ff, fl,
			threads*calls/2, int64(cacheMB)<<20/100000+1)
	}
	if thr != math.MaxUint64 {
		t.Errorf("pool release threshold %d, want UINT64_MAX", thr)
	}
	// The harness set a fraction first: PyTorch's allocator (model.go)
	// refuses the huge block, with no retry in the pool, so empty_cache
	// alone trims it.
	if ftr != 1 {
		t.Errorf("pool trimmed %d times, want 1", ftr)
	}

	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	if h.Producer != trace.ProducerLive || h.GPUName != "Fake GPU" || h.GPUTotalBytes != 80<<30 ||
		h.CUDAVersion != "12.4" || h.TorchVersion != "0.0-harness" || h.MemoryFraction != 0.75 ||
		len(h.CommandLine) != 2 || h.CommandLine[1] != "run" || h.Tags["test"] != "yes" || h.Host == "" || h.Created.IsZero() {
		t.Errorf("header: %+v", h)
	}
	c := newChecker(threads)
	var kinds [trace.NumKinds]int
	var first []trace.Event
	for i := 0; ; i++ {
		e, err := f.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		kinds[e.Kind]++
		if len(first) < 4 && e.Kind != trace.KindDeviceMem { // the sampler's timer may come in between
			first = append(first, e)
		}
		if err := c.event(i, e, f.Reader); err != nil {
			t.Fatal(err)
		}
	}
	if c.nAllocs != threads*n || c.nFrees != threads*n || len(c.live) != 0 {
		t.Errorf("trace has %d allocs, %d frees, %d live; want %d, %d, 0", c.nAllocs, c.nFrees, len(c.live), threads*n, threads*n)
	}
	for th, got := range c.next {
		if got != calls {
			t.Errorf("thread %d: %d allocs, want %d", th, got, calls)
		}
	}
	if len(c.steps) != n/1000 {
		t.Errorf("%d step markers, want %d", len(c.steps), n/1000)
	}
	for i, s := range c.steps {
		if s != fmt.Sprint(i) {
			t.Errorf("step marker %d is %q", i, s)
			break
		}
	}
	// The calls made before the threads started come first, in order.
	wantFirst := []trace.Kind{trace.KindMarker, trace.KindSetFraction, trace.KindOOM, trace.KindEmptyCache}
	for i, k := range wantFirst {
		if i >= len(first) || first[i].Kind != k {
			t.Fatalf("first events %v, want kinds %v", first, wantFirst)
		}
	}
	if f.String(first[0].Text) != "agent-a" || first[0].Marker != trace.MarkerAgent {
		t.Errorf("agent marker %+v text %q", first[0], f.String(first[0].Text))
	}
	if math.Float64frombits(first[1].Aux) != 0.5 {
		t.Errorf("set_fraction aux %v", math.Float64frombits(first[1].Aux))
	}
	if first[2].SizeBytes != 1<<50 || first[2].Aux != 80<<30 {
		t.Errorf("oom event %+v: want size 2^50, device free 80 GiB", first[2])
	}
	if kinds[trace.KindMarker] != n/1000+2 {
		t.Errorf("%d markers", kinds[trace.KindMarker])
	}
}

// TestHookKilled kills a recording process with SIGKILL after more than a
// second: the file reads up to its last flush, and what it holds is valid.
func TestHookKilled(t *testing.T) {
	t.Parallel()
	dir, _, harness := build(t)
	const threads = 4
	path := filepath.Join(t.TempDir(), "killed.fragsim")
	cmd := harnessCmd(dir, harness, built.lib, path, fmt.Sprint(threads), "forever")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once at least one chunk of events is on disk, after more than
	// a second (the machine may be busy: wait up to a minute).
	time.Sleep(1500 * time.Millisecond)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if st, err := os.Stat(path); err == nil && st.Size() > 4096 {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("harness ended with %v, want killed\n%s", err, stderr.String())
	}

	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := newChecker(threads)
	n := 0
	for ; ; n++ {
		e, err := f.ReadEvent()
		if err == io.EOF {
			t.Fatal("a killed recording read to a clean end")
		}
		if err != nil {
			if !errors.Is(err, trace.ErrTruncated) {
				t.Fatalf("after %d events: %v, want ErrTruncated", n, err)
			}
			break
		}
		if err := c.event(n, e, f.Reader); err != nil {
			t.Fatal(err)
		}
	}
	if c.nAllocs == 0 {
		t.Fatalf("no allocations read back (%d events)", n)
	}
	t.Logf("%d events, %d allocs read back after SIGKILL", n, c.nAllocs)
}

// TestHookKilledShared kills a process recording into a region file with
// SIGKILL: the drainer writes everything its threads published, and the
// trace, closed by the drainer, reads to its end.
func TestHookKilledShared(t *testing.T) {
	dir, _, harness := build(t)
	const threads = 4
	path := filepath.Join(t.TempDir(), "killed.fragsim")
	cmd := harnessCmd(dir, harness, built.lib, path, fmt.Sprint(threads), "forever")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	_, lost, err := runShared(t, cmd, path, 50000, false)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("harness ended with %v, want killed\n%s", err, stderr.String())
	}
	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := newChecker(threads)
	n := 0
	for ; ; n++ {
		e, err := f.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d events: %v", n, err)
		}
		// Calls that found the region full (a harness recording faster
		// than this process drains, as on a loaded machine) leave holes in
		// each thread's numbering that the checker cannot follow: the
		// trace must then still read back whole, to its last event.
		if lost > 0 {
			if e.Kind == trace.KindAlloc {
				c.nAllocs++
			}
			continue
		}
		if err := c.event(n, e, f.Reader); err != nil {
			t.Fatal(err)
		}
	}
	if n < 50000 || c.nAllocs == 0 {
		t.Fatalf("%d events, %d allocs read back; want at least the 50000 drained before the kill", n, c.nAllocs)
	}
}

// TestHookOpenErrors checks the errors fragsim_open gives without a GPU or
// without a driver library.
func TestHookOpenErrors(t *testing.T) {
	t.Parallel()
	dir, _, harness := build(t)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"no GPU", []string{"FAKE_CUDA_NO_DEVICE=1"}, "no CUDA-capable device"},
		{"no libcuda", []string{"FRAGSIM_LIBCUDA=" + filepath.Join(dir, "missing", "libcuda.so.1")}, "cannot load the CUDA driver library"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.fragsim")
			cmd := harnessCmd(dir, harness, built.lib, path, "1", "10")
			cmd.Env = append(cmd.Env, tc.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 4 {
				t.Fatalf("harness: %v, want exit code 4 (open failed)\n%s", err, out)
			}
			if !bytes.Contains(out, []byte(tc.want)) {
				t.Errorf("error %q does not say %q", out, tc.want)
			}
			if _, err := os.Stat(path); err == nil {
				t.Errorf("a trace file was created")
			}
		})
	}
}

// TestHookOOMStops checks that an out-of-memory allocation, which PyTorch's
// pluggable allocator cannot report, stops the process with a clear message
// after saving the trace, OOM event included.
func TestHookOOMStops(t *testing.T) {
	t.Parallel()
	dir, _, harness := build(t)
	path := filepath.Join(t.TempDir(), "oom.fragsim")
	cmd := harnessCmd(dir, harness, built.lib, path, "1", "10")
	cmd.Env = append(cmd.Env, "FRAGSIM_OOM_RETURNS_NULL=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGABRT {
		t.Fatalf("harness: %v, want SIGABRT\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("out of GPU memory")) {
		t.Errorf("output %q does not explain the stop", out)
	}
	h, evs, err := trace.ReadAll(mustOpen(t, path))
	if err != nil {
		t.Fatal(err)
	}
	if h.Producer != trace.ProducerLive || len(evs) == 0 || evs[len(evs)-1].Kind != trace.KindOOM {
		t.Errorf("trace of %d events does not end with the OOM: %+v", len(evs), evs)
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
