package record

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fragsim/fragsim/trace"
)

var built struct {
	once     sync.Once
	dir, lib string
	skip     string
	err      error
}

// setup builds the hook library and the fake driver once, and returns the
// environment that makes the fake torch and the fake driver visible.
func setup(t *testing.T) (lib string, env []string) {
	t.Helper()
	built.once.Do(func() {
		for _, tool := range []string{"gcc", "g++", "python3"} {
			if _, err := exec.LookPath(tool); err != nil {
				built.skip = tool + " not found: the recording tests need gcc and python3"
				return
			}
		}
		d, err := os.MkdirTemp("", "fragsim-record-test")
		if err != nil {
			built.err = err
			return
		}
		built.dir = d
		built.lib = filepath.Join(d, LibName)
		for _, s := range [][]string{
			{"go", "build", "-buildmode=c-shared", "-o", built.lib, "../hook"},
			{"gcc", "-O2", "-shared", "-fPIC", "-o", filepath.Join(d, "libcuda.so.1"), "../hook/testdata/fakecuda.c"},
			{"g++", "-O2", "-shared", "-fPIC", "-o", filepath.Join(d, "libc10.so"), "testdata/fakec10.cc"},
			{"mkdir", filepath.Join(d, "oldabi")},
			{"g++", "-O2", "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0", "-o", filepath.Join(d, "oldabi", "libc10.so"), "testdata/fakec10.cc"},
		} {
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
	fake, err := filepath.Abs("testdata/faketorch")
	if err != nil {
		t.Fatal(err)
	}
	env = append(os.Environ(), "LD_LIBRARY_PATH="+built.dir, "PYTHONPATH="+fake, "PYTHONDONTWRITEBYTECODE=1",
		"FAKE_TORCH_C10="+filepath.Join(built.dir, "libc10.so"))
	return built.lib, env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// expected replays workload.py's arithmetic: allocations, frees and the
// peak of live requested bytes.
func expected(steps int) (allocs, frees int64, peak uint64) {
	var live uint64
	for s := 0; s < steps; s++ {
		for i := 0; i < 10; i++ {
			live += uint64(1000*(s+1) + i)
			allocs++
			peak = max(peak, live)
		}
		for i := 0; i < 5; i++ {
			live -= uint64(1000*(s+1) + i)
			frees++
		}
	}
	return
}

func TestRecordPython(t *testing.T) {
	t.Parallel()
	lib, env := setup(t)
	out := filepath.Join(t.TempDir(), "run.fragsim")
	allocs, frees, peak := expected(4)
	var stdout, stderr bytes.Buffer
	s, err := Run(Config{Output: out, HookLib: lib, Args: []string{"python3", "testdata/workload.py", "4", "7"},
		Env: append(env, "WORKLOAD_FORK=1", fmt.Sprintf("WORKLOAD_PEAK=%d", peak)), Stdout: &stdout, Stderr: &stderr,
		Tags: map[string]string{"seed": "1", "workload": "fake \"quoted\""}})
	if err != nil {
		t.Fatalf("Run: %v\nstderr: %s", err, stderr.String())
	}
	if !s.Closed {
		t.Error("the program closed its trace, the summary says it did not")
	}
	if s.ExitCode != 7 { // 90: the forked child failed; 91, 92: memory stats wrong
		t.Errorf("exit code %d, want the program's 7\n%s", s.ExitCode, stderr.String())
	}
	if s.Allocs != allocs || s.Frees != frees || s.PeakLiveBytes != peak || s.Truncated {
		t.Errorf("summary %+v, want %d allocs, %d frees, peak %d, not truncated", s, allocs, frees, peak)
	}
	// agent + 4 steps; set_fraction and empty_cache; frees are two events;
	// and the device-memory samples.
	if s.Markers != 5 || s.DeviceSamples == 0 || s.Events != allocs+2*frees+5+2+s.DeviceSamples {
		t.Errorf("summary %+v: want 5 markers, device samples and %d events besides them", s, allocs+2*frees+7)
	}
	if st, _ := os.Stat(out); s.FileBytes != st.Size() || s.Duration <= 0 {
		t.Errorf("file bytes %d (file has %d), duration %v", s.FileBytes, st.Size(), s.Duration)
	}

	f, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	if h.Tags["seed"] != "1" || h.Tags["workload"] != `fake "quoted"` {
		t.Errorf("header tags %v, want seed=1 and the quoted workload", h.Tags)
	}
	if h.TorchVersion != "0.0-fake" || h.GPUName != "Fake GPU" || !strings.HasSuffix(strings.Join(h.CommandLine, " "), "testdata/workload.py 4 7") {
		t.Errorf("header %+v", h)
	}
	var kinds []string
	for {
		e, err := f.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case trace.KindSetFraction:
			if math.Float64frombits(e.Aux) != 0.25 {
				t.Errorf("set_fraction %v", math.Float64frombits(e.Aux))
			}
		case trace.KindAlloc:
			if e.Stream != 7 {
				t.Errorf("alloc on stream %d, want 7", e.Stream)
			}
		case trace.KindMarker:
			kinds = append(kinds, e.Marker.String()+":"+f.String(e.Text))
			continue
		default:
			continue
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != e.Kind.String() {
			kinds = append(kinds, e.Kind.String())
		}
	}
	want := "agent:a1 set_fraction step:0 alloc step:1 alloc step:2 alloc step:3 alloc"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("event order\n got %s\nwant %s", got, want)
	}
}

// TestRecordStreamPython records a program that makes a side stream use a
// block (Tensor.record_stream) through fragsim_hook.py's wiring: the block's
// free is requested at once and completes at the first allocation that
// finds the side stream done (the fake driver's event is done at its
// second query), as PyTorch's own allocator would record it.
func TestRecordStreamPython(t *testing.T) {
	t.Parallel()
	lib, env := setup(t)
	out := filepath.Join(t.TempDir(), "run.fragsim")
	var stderr bytes.Buffer
	s, err := Run(Config{Output: out, HookLib: lib, Args: []string{"python3", "testdata/streams.py"},
		Env: append(env, "FAKE_CUDA_EVENT_QUERIES=2"), Stderr: &stderr})
	if err != nil || s.ExitCode != 0 {
		t.Fatalf("Run: %v, exit %d\n%s", err, s.ExitCode, stderr.String())
	}
	_, evs, err := trace.ReadAll(mustOpen(t, out))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		switch e.Kind {
		case trace.KindAlloc, trace.KindFreeRequested, trace.KindFreeCompleted:
			got = append(got, fmt.Sprintf("%s %d", e.Kind, e.SizeBytes))
		}
	}
	want := "alloc 1000, free_requested 1000, alloc 2000, free_completed 1000, alloc 3000, " +
		"free_requested 2000, free_completed 2000, free_requested 3000, free_completed 3000"
	if g := strings.Join(got, ", "); g != want {
		t.Errorf("recorded\n got %s\nwant %s", g, want)
	}
}

// TestRecordErrors checks that each reason recording cannot start is said
// clearly, with no trace written and the start-up hook's exit code.
func TestRecordErrors(t *testing.T) {
	t.Parallel()
	lib, env := setup(t)
	for _, tc := range []struct {
		name, env, want string
	}{
		{"torch too old", "FAKE_TORCH_OLD=1", "too old"},
		{"CUDA initialised", "FAKE_TORCH_INIT=1", "CUDA was initialised before fragsim"},
		{"no GPU", "FAKE_CUDA_NO_DEVICE=1", "no CUDA-capable device"},
		{"no driver", "FRAGSIM_LIBCUDA=/nonexistent/libcuda.so.1", "cannot load the CUDA driver library"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run.fragsim")
			var stderr bytes.Buffer
			s, err := Run(Config{Output: out, HookLib: lib, Args: []string{"python3", "testdata/workload.py", "1", "0"},
				Env: append(env, tc.env), Stdout: io.Discard, Stderr: &stderr})
			if !errors.Is(err, ErrNoTrace) {
				t.Fatalf("err %v, want ErrNoTrace", err)
			}
			if s == nil || s.ExitCode != FailCode {
				t.Errorf("summary %+v, want exit code %d", s, FailCode)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
		})
	}
}

// TestRecordSIGTERM forwards SIGTERM to the program, whose start-up hook
// closes the trace before it dies of the signal. It signals this process,
// whose every Run forwards the signal: it runs alone, before the tests
// that run in parallel (t.Parallel) start.
func TestRecordSIGTERM(t *testing.T) {
	lib, env := setup(t)
	dir := t.TempDir()
	out, ready := filepath.Join(dir, "run.fragsim"), filepath.Join(dir, "ready")
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(ready); err == nil {
				syscall.Kill(os.Getpid(), syscall.SIGTERM)
				return
			}
		}
	}()
	var stderr bytes.Buffer
	s, err := Run(Config{Output: out, HookLib: lib, Args: []string{"python3", "testdata/workload.py", "3", "0", ready},
		Env: env, Stdout: io.Discard, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	allocs, _, _ := expected(3)
	if s.ExitCode != 128+int(syscall.SIGTERM) || s.Truncated || s.Allocs != allocs {
		t.Errorf("summary %+v: want exit %d, a closed trace with %d allocs", s, 128+int(syscall.SIGTERM), allocs)
	}
}

func TestFindHookLib(t *testing.T) {
	p := filepath.Join(t.TempDir(), LibName)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FRAGSIM_HOOK_LIB", p)
	if got, err := FindHookLib(); err != nil || got != p {
		t.Errorf("FindHookLib = %q, %v; want %q", got, err, p)
	}
	t.Setenv("FRAGSIM_HOOK_LIB", p+".missing")
	if _, err := FindHookLib(); err == nil {
		t.Error("a missing FRAGSIM_HOOK_LIB was accepted")
	}
}

func TestProgramEnv(t *testing.T) {
	t.Parallel()
	env := programEnv([]string{"A=1", "PYTHONPATH=/x", "FRAGSIM_OWNER_PID=5"}, "/d", "/o", "/l")
	got := strings.Join(env, " ")
	for _, want := range []string{"A=1", "PYTHONPATH=/d:/x", "FRAGSIM_TRACE=/o", "FRAGSIM_HOOK_LIB=/l", "FRAGSIM_STRICT=1"} {
		if !strings.Contains(got, want) {
			t.Errorf("env %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "FRAGSIM_OWNER_PID") {
		t.Errorf("env %q keeps the parent's owner pid", got)
	}
}

// TestRecordDies ends the program without closing its trace, in each way a
// program can die: every call the hook saw is in the trace, which fragsim
// record closes properly.
func TestRecordDies(t *testing.T) {
	t.Parallel()
	lib, env := setup(t)
	allocs, frees, peak := expected(3)
	for _, tc := range []struct {
		end  string
		code int
	}{
		{"exit", 3},
		{"kill", 128 + int(syscall.SIGKILL)},
		{"abort", 128 + int(syscall.SIGABRT)},
		{"segv", 128 + int(syscall.SIGSEGV)},
	} {
		t.Run(tc.end, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run.fragsim")
			var stderr bytes.Buffer
			s, err := Run(Config{Output: out, HookLib: lib, Args: []string{"python3", "testdata/workload.py", "3", "3"},
				Env: append(env, "WORKLOAD_END="+tc.end), Stdout: io.Discard, Stderr: &stderr})
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, stderr.String())
			}
			if s.ExitCode != tc.code || s.Closed || s.Truncated || s.Missing != 0 {
				t.Errorf("summary %+v: want exit %d, not closed by the program, a whole trace, nothing missing", s, tc.code)
			}
			// agent + 3 steps; set_fraction and empty_cache.
			if s.Allocs != allocs || s.Frees != frees || s.PeakLiveBytes != peak || s.Markers != 4 || s.Events != allocs+2*frees+6+s.DeviceSamples {
				t.Errorf("summary %+v, want %d allocs, %d frees, peak %d, 4 markers, %d events", s, allocs, frees, peak, allocs+2*frees+6)
			}
			if _, evs, err := trace.ReadAll(mustOpen(t, out)); err != nil || len(evs) != int(s.Events) {
				t.Errorf("trace reads %d events, %v", len(evs), err)
			}
		})
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

// TestRecordOutsideMemory records against a fake driver that reports a
// context outside the pool, and more once kernels "load" at the fifth
// allocation: the hook samples the device at each pool growth and on a
// timer, and the summary finds the context, the peak and the growth.
func TestRecordOutsideMemory(t *testing.T) {
	t.Parallel()
	lib, env := setup(t)
	const ctx, jump = 525 << 20, 300 << 20
	out := filepath.Join(t.TempDir(), "run.fragsim")
	var stderr bytes.Buffer
	s, err := Run(Config{Output: out, HookLib: lib, Args: []string{"python3", "testdata/workload.py", "3", "0"},
		Env: append(env, fmt.Sprintf("FAKE_CUDA_OUTSIDE=%d", ctx), fmt.Sprintf("FAKE_CUDA_OUTSIDE_JUMP=%d", jump),
			"FAKE_CUDA_OUTSIDE_AFTER=5", "WORKLOAD_SLEEP=0.5"), Stdout: io.Discard, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	if s.OutsideStartBytes != ctx || s.OutsidePeakBytes != ctx+jump || s.OutsideEndBytes != ctx+jump || s.OutsideDevice != 0 {
		t.Errorf("outside memory start %d peak %d end %d on device %d; want %d, %d, %d on 0",
			s.OutsideStartBytes, s.OutsidePeakBytes, s.OutsideEndBytes, s.OutsideDevice, ctx, ctx+jump, ctx+jump)
	}
	f, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Each step's allocations pass the pool's size: one sample at least a
	// step. After empty_cache nothing is allocated: samples there come from
	// the timer.
	var growth, timer, steps int
	afterEmpty := false
	for {
		e, err := f.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case trace.KindEmptyCache:
			afterEmpty = true
		case trace.KindMarker:
			if e.Marker == trace.MarkerStep {
				steps++
			}
		case trace.KindDeviceMem:
			if e.Aux != 80<<30 || e.Device != 0 {
				t.Errorf("device_mem %+v: want total 80 GiB on device 0", e)
			}
			if o := int64(e.Aux - e.SizeBytes - e.Addr); o != ctx && o != ctx+jump {
				t.Errorf("device_mem %+v: outside %d, want %d or %d", e, o, ctx, ctx+jump)
			}
			if afterEmpty {
				timer++
			} else if steps > 0 {
				growth++
			}
		}
	}
	if growth < 3 || timer == 0 || s.DeviceSamples != int64(growth+timer) {
		t.Errorf("%d samples at growth, %d by the timer, %d in the summary; want 3 or more, some, their sum", growth, timer, s.DeviceSamples)
	}
}

// TestRecordFractionCap checks that set_per_process_memory_fraction caps
// the pool as PyTorch caps its reserved memory: the allocation past the
// cap raises torch.OutOfMemoryError (a C++ c10::OutOfMemoryError through
// the fake libc10, as PyTorch raises it), which the program catches and
// goes on; the set_fraction and oom events are in the trace. The fake
// libc10 is built with each std::string ABI PyTorch's wheels have used.
func TestRecordFractionCap(t *testing.T) {
	t.Parallel()
	lib, env := setup(t)
	t.Run("cxx11", func(t *testing.T) { testFractionCap(t, lib, env) })
	t.Run("pre-cxx11", func(t *testing.T) {
		testFractionCap(t, lib, append(env, "FAKE_TORCH_C10="+filepath.Join(built.dir, "oldabi", "libc10.so")))
	})
}

func testFractionCap(t *testing.T, lib string, env []string) {
	// PyTorch's allocator decides the OOMs under a fraction: blocks of
	// 600 KiB go to its small pool, three to a 2 MiB segment, and a cap of
	// 5 MiB holds two segments, so the seventh block fails, although the
	// recording allocator's own pool would hold eight.
	const block = 600 << 10
	fraction := float64(5<<20) / float64(80<<30) // of the fake GPU's total
	limit := uint64(fraction * float64(80<<30))
	fit := limit / (2 << 20) * ((2 << 20) / block)
	out := filepath.Join(t.TempDir(), "run.fragsim")
	var stdout, stderr bytes.Buffer
	s, err := Run(Config{Output: out, HookLib: lib, Args: []string{"python3", "testdata/fraction.py", fmt.Sprint(fraction), fmt.Sprint(block)},
		Env: env, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	if s.ExitCode != 0 {
		t.Fatalf("exit code %d\n%s%s", s.ExitCode, stdout.String(), stderr.String())
	}
	want := fmt.Sprintf("oom after %d: CUDA out of memory. Tried to allocate 600.00 KiB. GPU 0 has a total capacity of 80.00 GiB", fit)
	if !strings.Contains(stdout.String(), want) || !strings.Contains(stdout.String(), fmt.Sprintf("%.2f MiB allowed; ", float64(limit)/(1<<20))) {
		t.Errorf("program said %q, want %q and the allowed bytes", stdout.String(), want)
	}
	if s.Allocs != int64(fit)+1 || s.Frees != int64(fit)+1 || s.OOMs != 1 {
		t.Errorf("summary %+v: want %d allocs and frees, 1 OOM", s, fit+1)
	}
	_, evs, err := trace.ReadAll(mustOpen(t, out))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		switch e.Kind {
		case trace.KindSetFraction:
			if math.Float64frombits(e.Aux) != fraction {
				t.Errorf("set_fraction %v", math.Float64frombits(e.Aux))
			}
		case trace.KindOOM:
			if e.SizeBytes != block {
				t.Errorf("oom of %d bytes, want %d", e.SizeBytes, block)
			}
		case trace.KindAlloc, trace.KindFreeRequested:
		default:
			continue
		}
		if k := e.Kind.String(); len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		}
	}
	if got := strings.Join(kinds, " "); got != "set_fraction alloc oom free_requested alloc free_requested" {
		t.Errorf("event order %q", got)
	}
}

// TestRecordOutput checks where the trace goes: through a symbolic link to
// the file it names, and nowhere (before the program runs) when the
// output's directory cannot be written.
func TestRecordOutput(t *testing.T) {
	t.Parallel()
	lib, env := setup(t)
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target.fst"), filepath.Join(dir, "link.fst")
	if err := os.WriteFile(target, []byte("previous"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target.fst", link); err != nil {
		t.Fatal(err)
	}
	s, err := Run(Config{Output: link, HookLib: lib, Args: []string{"python3", "testdata/workload.py", "1", "0"},
		Env: env, Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", st, err)
	}
	if got, err := Summarize(target); err != nil || got.Allocs != s.Allocs || s.Allocs == 0 {
		t.Errorf("target holds %+v, %v; want the trace of %d allocs", got, err, s.Allocs)
	}
	if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("target's mode %v, %v; want the previous file's 0640", st.Mode(), err)
	}

	ran := filepath.Join(dir, "ran")
	_, err = Run(Config{Output: filepath.Join(dir, "missing", "x.fst"), HookLib: lib, Args: []string{"/bin/sh", "-c", "touch " + ran},
		Env: env, Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "cannot write beside") {
		t.Errorf("err %v, want cannot write beside the output", err)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the program ran although its trace could not be written")
	}
}

// TestFindHookLibInWheel checks that a fragsim installed from the wheel
// (the executable in bin/, the library in the package under lib/) finds
// its hook library.
func TestFindHookLibInWheel(t *testing.T) {
	root := t.TempDir()
	exe := filepath.Join(root, "bin", "fragsim")
	lib := filepath.Join(root, "lib", "python3.11", "site-packages", "fragsim", "lib", LibName)
	for _, p := range []string{exe, lib} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := findHookLib(exe)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(lib); got != want && got != lib {
		t.Errorf("found %s, want %s", got, lib)
	}
	os.Remove(lib)
	if _, err := findHookLib(exe); err == nil || !strings.Contains(err.Error(), "replay binary only") {
		t.Errorf("no library: %v, want an error that says the wheel may lack it", err)
	}
}
