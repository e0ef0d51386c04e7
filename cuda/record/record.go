// Package record runs a program under fragsim's recording allocator and
// summarises the trace it leaves (the pure-Go side of fragsim record).
package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fragsim/fragsim/cuda/python"
	"github.com/fragsim/fragsim/trace"
)

// LibName is the file name of the hook library.
const LibName = "libfragsim_hook.so"

// FailCode is the exit code of a program whose start-up hook could not
// start recording (it says why on stderr).
const FailCode = 86

// Config says what to run and where the trace goes.
type Config struct {
	// Output is the trace file to write (required).
	Output string
	// HookLib is the path of libfragsim_hook.so; "" means FindHookLib.
	HookLib string
	// Args are the program and its arguments, e.g. python script.py.
	Args []string
	// Stdin, Stdout and Stderr are the program's; nil means the process's own.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Env is the program's environment; nil means os.Environ().
	Env []string
	// Tags are written to the trace header's tags (e.g. workload, seed).
	Tags map[string]string
	// Inputs are the files no trace may replace (the hook library, the
	// program's files), checked for the name of each process's trace when
	// several processes record (the caller checks Output).
	Inputs []string
}

// Summary describes a finished recording.
type Summary struct {
	Path          string        `json:"path"`
	Events        int64         `json:"events"`
	Allocs        int64         `json:"allocs"`
	Frees         int64         `json:"frees"`
	OOMs          int64         `json:"ooms"`
	Markers       int64         `json:"markers"`
	PeakLiveBytes uint64        `json:"peak_live_bytes"`
	Duration      time.Duration `json:"duration_ns"`
	FileBytes     int64         `json:"file_bytes"`
	// Truncated is set when the file ends without its end chunk: it was
	// written by the program itself, which was killed (a recording made
	// without fragsim record); everything up to its last flush is there.
	Truncated bool `json:"truncated"`
	// Closed says the program closed the trace itself; otherwise it ended
	// without (os._exit, a signal, a crash) and fragsim record wrote every
	// call the hook had published.
	Closed bool `json:"closed"`
	// Missing counts calls the trace lacks: calls the hook found no room
	// for, and calls a thread was making when the program died.
	Missing uint64 `json:"missing"`
	// Device memory (device_mem samples of the first device sampled).
	// Outside memory is what the device uses beyond this process's pool:
	// total - free - reserved, so the CUDA context, kernels and libraries'
	// buffers, and other processes.
	DeviceSamples     int64 `json:"device_samples"`
	OutsideDevice     int32 `json:"outside_device"`
	OutsideStartBytes int64 `json:"outside_start_bytes"` // at the first sample: mostly the CUDA context
	OutsidePeakBytes  int64 `json:"outside_peak_bytes"`
	OutsideEndBytes   int64 `json:"outside_end_bytes"`
	// ExitCode is the program's exit status (128+N when killed by signal N).
	ExitCode int `json:"exit_code"`
	// Devices are the devices the trace allocates on, in ascending order.
	Devices []int32 `json:"devices,omitempty"`
	// PID and Rank are the recording process's, in the summary of one of
	// several processes' traces (Rank "" when the process had none).
	PID  int    `json:"pid,omitempty"`
	Rank string `json:"rank,omitempty"`
	// Traces are the traces written when several processes used the GPU,
	// one each, by rank (then pid); the counts above are their sums, and
	// Path the output they are named after, which is not written.
	Traces []*Summary `json:"traces,omitempty"`
	// IdleProcesses counts the other processes that recorded but never
	// allocated (a launcher): no trace is written for them.
	IdleProcesses int `json:"idle_processes,omitempty"`
}

// ErrNoTrace means the program ran but no trace was written, because
// recording could not start (the program's stderr says why).
var ErrNoTrace = errors.New("no trace was written")

// FindHookLib returns the hook library to use: $FRAGSIM_HOOK_LIB, else
// libfragsim_hook.so next to the fragsim executable, in build/ beside it
// or above it, in the fragsim Python package installed beside it (a
// wheel's: the executable in bin/, the package in
// lib/pythonX.Y/site-packages/fragsim/lib/), or in ./build. Only Linux
// has one: elsewhere the error says so.
func FindHookLib() (string, error) {
	if p := os.Getenv("FRAGSIM_HOOK_LIB"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("FRAGSIM_HOOK_LIB: %w", err)
		}
		return filepath.Abs(p)
	}
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("recording needs %s, the CUDA hook, which exists for Linux only (this is %s/%s): "+
			"record on the Linux machine with the GPU, or take a PyTorch snapshot there "+
			"(torch.cuda.memory._record_memory_history, _dump_snapshot) and `fragsim import` it here",
			LibName, runtime.GOOS, runtime.GOARCH)
	}
	exe, _ := os.Executable()
	return findHookLib(exe)
}

// findHookLib is FindHookLib for the fragsim executable at exe ("":
// unknown), once $FRAGSIM_HOOK_LIB and the platform are checked.
func findHookLib(exe string) (string, error) {
	var tried []string
	if exe != "" {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		d := filepath.Dir(exe)
		tried = append(tried, filepath.Join(d, LibName), filepath.Join(d, "build", LibName), filepath.Join(d, "..", "build", LibName))
		for _, dir := range []string{"site-packages", "dist-packages"} {
			m, _ := filepath.Glob(filepath.Join(d, "..", "lib", "python3*", dir, "fragsim", "lib", LibName))
			tried = append(tried, m...)
		}
	}
	tried = append(tried, filepath.Join("build", LibName))
	for _, p := range tried {
		if _, err := os.Stat(p); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("%s not found (tried %s); build it with cuda/build.sh, or pass --lib or set FRAGSIM_HOOK_LIB "+
		"(the Python wheels for platforms other than linux x86_64 carry the replay binary only, without it)",
		LibName, strings.Join(tried, ", "))
}

// Run runs cfg.Args with the recording allocator installed through a
// sitecustomize module on PYTHONPATH, forwards SIGINT and SIGTERM to it,
// and summarises the trace. Each process that records (the program, and
// the Python processes it starts, which record once they import torch)
// makes a region file in a directory that Run maps too: Run drains each
// into a temporary trace beside cfg.Output, and after the process ended,
// however it ended (exit, os._exit, a signal, a crash), drains what is
// left and closes its trace. Once the program ended (and the recording
// processes it left, or exitGrace passed), the traces are put in place:
//
//   - When one process used the GPU (allocated), or none did, its trace
//     (else the first process's) is renamed over cfg.Output, as it is.
//   - When several did, or the one that did was given its rank by a
//     launcher (RANK, LOCAL_RANK or WORLD_SIZE set otherwise than in the
//     program's environment: torchrun with one worker), each writes its
//     own trace, cfg.Output with .rankN before its extension, N its
//     $RANK, else $LOCAL_RANK; .pidN, its pid, when it has neither (and
//     .rankN.pidM when two share a rank). Each header gets the tags rank,
//     local_rank and world_size (those it has), pid and device (the
//     devices it allocated on); processes that never allocated get no
//     trace.
//
// A run that records nothing keeps the previous output. The summary's
// ExitCode is the program's; the error is non-nil only when fragsim itself
// failed (the summary may then still say how the program ended).
func Run(cfg Config) (*Summary, error) {
	if len(cfg.Args) == 0 {
		return nil, errors.New("no program to run")
	}
	if cfg.Output == "" {
		return nil, errors.New("no output file")
	}
	out, err := filepath.Abs(cfg.Output)
	if err != nil {
		return nil, err
	}
	lib := cfg.HookLib
	if lib == "" {
		if lib, err = FindHookLib(); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(lib); err != nil {
		return nil, fmt.Errorf("hook library: %w", err)
	}
	if lib, err = filepath.Abs(lib); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fragsim-record-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := writePython(dir); err != nil {
		return nil, err
	}
	regions, err := os.MkdirTemp("/dev/shm", "fragsim-record-")
	if err != nil { // no tmpfs: files in the temporary directory work the same
		regions = filepath.Join(dir, "regions")
		if err := os.Mkdir(regions, 0o700); err != nil {
			return nil, err
		}
	}
	defer os.RemoveAll(regions)

	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	cmd := exec.Command(cfg.Args[0], cfg.Args[1:]...)
	cmd.Env = append(programEnv(env, dir, out, lib), "FRAGSIM_SHM_DIR="+regions)
	if len(cfg.Tags) > 0 {
		b, err := json.Marshal(cfg.Tags)
		if err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, "FRAGSIM_TAGS="+string(b))
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = orStd(cfg.Stdin, os.Stdin), orStdW(cfg.Stdout, os.Stdout), orStdW(cfg.Stderr, os.Stderr)

	spare, err := newTraceWriter(nil, out)
	if err != nil {
		return nil, err
	}
	ps := &procs{dir: regions, out: out, spare: spare, seen: map[string]bool{}, stderr: cfg.Stderr}
	defer ps.abort()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start %s: %w", cfg.Args[0], err)
	}
	// A Ctrl-C at a terminal reaches the program by itself (same process
	// group); forwarding it too would interrupt its clean-up twice.
	tty := foregroundTTY()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	tick := time.NewTicker(drainEvery)
	defer tick.Stop()
	var werr error
wait:
	for {
		select {
		case s := <-sigs:
			if s != syscall.SIGINT || !tty {
				cmd.Process.Signal(s)
			}
		case now := <-tick.C:
			ps.step(now)
		case werr = <-waited:
			break wait
		}
	}
	code := 0
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			return nil, werr
		}
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
	ps.wind(sigs)
	return ps.write(cfg.Output, code, env, cfg.Inputs)
}

func orStd(r io.Reader, d *os.File) io.Reader {
	if r == nil {
		return d
	}
	return r
}

func orStdW(w io.Writer, d *os.File) io.Writer {
	if w == nil {
		return d
	}
	return w
}

// writePython writes the embedded Python modules into dir.
func writePython(dir string) error {
	return fs.WalkDir(python.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := python.Files.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
}

// programEnv returns env with the recording variables set and dir first on
// PYTHONPATH.
func programEnv(env []string, dir, out, lib string) []string {
	var res []string
	pythonPath := dir
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PYTHONPATH":
			if v != "" {
				pythonPath = dir + string(os.PathListSeparator) + v
			}
		case "FRAGSIM_TRACE", "FRAGSIM_HOOK_LIB", "FRAGSIM_SHM", "FRAGSIM_SHM_DIR", "FRAGSIM_OWNER_PID", "FRAGSIM_STRICT", "FRAGSIM_FAIL_CODE", "FRAGSIM_TAGS":
		default:
			res = append(res, kv)
		}
	}
	return append(res,
		"PYTHONPATH="+pythonPath,
		"FRAGSIM_TRACE="+out,
		"FRAGSIM_HOOK_LIB="+lib,
		"FRAGSIM_STRICT=1",
		fmt.Sprintf("FRAGSIM_FAIL_CODE=%d", FailCode),
	)
}

// Summarize reads a recorded trace back and counts what it holds. A file
// cut short (ErrTruncated) is summarised up to its last whole chunk, with
// Truncated set; any other error is returned.
func Summarize(path string) (*Summary, error) {
	f, err := trace.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &Summary{Path: path}
	if st, err := os.Stat(path); err == nil {
		s.FileBytes = st.Size()
	}
	live := map[uint64]uint64{}
	var cur uint64
	var first, last int64
	for {
		e, err := f.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, trace.ErrTruncated) {
				s.Truncated = true
				break
			}
			return s, err
		}
		if s.Events == 0 {
			first = e.TimeNS
		}
		last = e.TimeNS
		s.Events++
		switch e.Kind {
		case trace.KindAlloc:
			if !slices.Contains(s.Devices, int32(e.Device)) {
				s.Devices = append(s.Devices, int32(e.Device))
				slices.Sort(s.Devices)
			}
			s.Allocs++
			cur += e.SizeBytes - live[e.Addr]
			live[e.Addr] = e.SizeBytes
			s.PeakLiveBytes = max(s.PeakLiveBytes, cur)
		case trace.KindFreeRequested:
			s.Frees++
		case trace.KindFreeCompleted:
			cur -= live[e.Addr]
			delete(live, e.Addr)
		case trace.KindOOM:
			s.OOMs++
		case trace.KindMarker:
			s.Markers++
		case trace.KindDeviceMem:
			s.deviceSample(e)
		}
	}
	if s.Events > 0 {
		s.Duration = time.Duration(last - first)
	}
	return s, nil
}

// deviceSample adds one device_mem sample (SizeBytes free, Aux total,
// Addr the pool's reserved bytes) to the outside-memory figures.
func (s *Summary) deviceSample(e trace.Event) {
	if s.DeviceSamples > 0 && int32(e.Device) != s.OutsideDevice {
		return
	}
	out := int64(e.Aux) - int64(e.SizeBytes) - int64(e.Addr)
	if s.DeviceSamples == 0 {
		s.OutsideDevice, s.OutsideStartBytes, s.OutsidePeakBytes = int32(e.Device), out, out
	}
	s.DeviceSamples++
	s.OutsidePeakBytes = max(s.OutsidePeakBytes, out)
	s.OutsideEndBytes = out
}
