// Command hook is fragsim's recording CUDA allocator, built with
// -buildmode=c-shared into libfragsim_hook.so and loaded by PyTorch as its
// pluggable allocator.
//
// The allocation hot path (fragsim_alloc, fragsim_free and the other
// recording calls) is C, in hook.c: it serves memory from the CUDA driver's
// stream-ordered pool and appends each call to a queue of the calling
// thread in the record region (package cuda/ring). Under `fragsim record`
// ($FRAGSIM_SHM_DIR names a directory where each recording process makes
// its region file; $FRAGSIM_SHM names the one region of `fragsim attach`)
// the fragsim process drains the region and writes the trace, whatever way
// this process ends. Otherwise this Go side
// drains a private region in a background goroutine into the trace file
// (fragsim_open), ends a chunk at least every second (fragsim_flush does it
// on demand) and closes the file (fragsim_close, also registered with
// atexit).
package main

/*
#cgo CFLAGS: -O2 -std=gnu11 -Wall -fexceptions
#cgo CXXFLAGS: -O2 -std=c++17 -Wall
#cgo LDFLAGS: -ldl -lpthread -lstdc++
#include <stdlib.h>
#include "hook.h"
void fs_register_atexit(void);
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/fragsim/fragsim/cuda/ring"
	"github.com/fragsim/fragsim/trace"
)

// Version is the hook's producer version, stored in trace headers.
const Version = "fragsim-hook 0.1"

const (
	drainEvery = 200 * time.Millisecond
	flushEvery = time.Second
)

// meta is what the host process tells fragsim_open about itself (JSON).
type meta struct {
	TorchVersion   string            `json:"torch_version"`
	CommandLine    []string          `json:"command_line"`
	MemoryFraction float64           `json:"memory_fraction"`
	AllocConf      *string           `json:"alloc_conf"`
	Device         int               `json:"device"`
	Tags           map[string]string `json:"tags"`
	// Shm is the record region of a fragsim process that writes the
	// trace, in place of $FRAGSIM_SHM: a variable the host sets after it
	// started is not in the environment Go read when this library loaded.
	Shm string `json:"shm"`
	// ShmDir is fragsim record's region directory, in place of
	// $FRAGSIM_SHM_DIR: the process makes its own region there.
	ShmDir string `json:"shm_dir"`
	// Launch holds the launcher's variables (ring.LaunchVars) the process
	// has; nil: read from the environment.
	Launch map[string]string `json:"launch"`
}

// recorder is the one open trace of this process.
type recorder struct {
	reg    *ring.Region
	shared bool // the region is fragsim record's: the parent writes the trace
	path   string
	pid    int

	// With a private region: the trace file and its drainer.
	mu sync.Mutex // guards w and d; held by the drainer, flush and close
	w  *trace.FileWriter
	d  *ring.Drainer

	stop chan struct{}
	done chan struct{}
}

var (
	stateMu  sync.Mutex // guards cur, closed and lastErr
	cur      *recorder
	closed   bool
	lastErr  *C.char
	atexitOn sync.Once
)

func setLastError(err error) {
	if lastErr != nil {
		C.free(unsafe.Pointer(lastErr))
		lastErr = nil
	}
	if err != nil {
		lastErr = C.CString(err.Error())
	}
}

//export fragsim_last_error
func fragsim_last_error() *C.char {
	stateMu.Lock()
	defer stateMu.Unlock()
	if lastErr == nil {
		return nil
	}
	return lastErr
}

// fragsim_open starts recording into the trace file at path. metaJSON may
// be NULL or a JSON object with torch_version, command_line,
// memory_fraction, alloc_conf, device, tags, shm (the record region of
// the fragsim process that writes the trace, else $FRAGSIM_SHM), shm_dir
// (fragsim record's region directory, where this process makes a region
// of its own, else $FRAGSIM_SHM_DIR) and launch (RANK, LOCAL_RANK,
// WORLD_SIZE as the process has them, else from the environment). It
// returns 0, or -1 with the reason in fragsim_last_error.
//
//export fragsim_open
func fragsim_open(path, metaJSON *C.char) C.int {
	stateMu.Lock()
	defer stateMu.Unlock()
	if err := open(C.GoString(path), metaJSON); err != nil {
		setLastError(err)
		return -1
	}
	setLastError(nil)
	return 0
}

func open(path string, metaJSON *C.char) error {
	if cur != nil || closed {
		return errors.New("fragsim: a trace was already opened in this process")
	}
	if path == "" {
		return errors.New("fragsim: no trace path given")
	}
	var m meta
	if metaJSON != nil {
		if s := C.GoString(metaJSON); s != "" {
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				return fmt.Errorf("fragsim: bad metadata JSON: %v", err)
			}
		}
	}
	h, err := header(&m)
	if err != nil {
		return err
	}
	r := &recorder{path: path, pid: os.Getpid(), stop: make(chan struct{}), done: make(chan struct{})}
	var cerr [512]C.char
	shm := m.Shm
	if shm == "" {
		shm = os.Getenv("FRAGSIM_SHM")
	}
	// Under fragsim record every recording process makes its own region
	// in fragsim's region directory, named for it once ready (ring.RegionName).
	var made, dir string
	if shm == "" {
		if dir = m.ShmDir; dir == "" {
			dir = os.Getenv("FRAGSIM_SHM_DIR")
		}
	}
	if dir != "" {
		reg, p, err := ring.Create(dir, ring.DefaultMaxChunks)
		if err != nil {
			return fmt.Errorf("fragsim: cannot make a record region in %s: %w", dir, err)
		}
		reg.Close() // the C side maps it
		shm, made = p, p
	}
	if shm != "" {
		p := C.CString(shm)
		rc := C.fs_ring_attach(p, &cerr[0], C.size_t(len(cerr)))
		C.free(unsafe.Pointer(p))
		if rc != 0 {
			if made != "" {
				os.Remove(made)
			}
			return fmt.Errorf("fragsim: %s", C.GoString(&cerr[0]))
		}
		r.shared = true
	} else if C.fs_ring_anon(ring.DefaultMaxChunks, &cerr[0], C.size_t(len(cerr))) != 0 {
		return fmt.Errorf("fragsim: %s", C.GoString(&cerr[0]))
	}
	var n C.uint64_t
	base := C.fs_ring_base(&n)
	if r.reg, err = ring.View(unsafe.Slice((*byte)(base), int(n))); err != nil {
		return fmt.Errorf("fragsim: %w", err)
	}
	if r.shared {
		// The header, and who records (for fragsim record's names of the
		// traces of several processes).
		hj, err := json.Marshal(struct {
			*trace.Header
			ring.ProcessMeta
		}{h, ring.ProcessMeta{Process: &ring.Process{PID: r.pid, Env: launchEnv(m.Launch)}}})
		if err != nil {
			return fmt.Errorf("fragsim: %w", err)
		}
		if err := r.reg.SetMeta(hj); err != nil {
			return fmt.Errorf("fragsim: %w", err)
		}
		r.reg.SetState(ring.StateOpen)
		if made != "" {
			if err := os.Rename(made, filepath.Join(dir, ring.RegionName(r.pid))); err != nil {
				os.Remove(made)
				return fmt.Errorf("fragsim: %w", err)
			}
		}
	} else {
		if r.w, err = trace.Create(path, h); err != nil {
			return fmt.Errorf("fragsim: %w", err)
		}
		r.d = ring.NewDrainer(r.reg, r.w.Writer)
	}
	cur = r
	C.fs_set_recording(1)
	C.fs_start_sampler()
	startMetrics()
	atexitOn.Do(func() { C.fs_register_atexit() })
	if !r.shared {
		go r.loop()
	}
	return nil
}

// header builds the trace header from the driver and the host's metadata.
func header(m *meta) (*trace.Header, error) {
	var (
		name    [256]C.char
		total   C.size_t
		version C.int
		cerr    [512]C.char
	)
	if C.fs_device_info(C.int(m.Device), &name[0], C.int(len(name)), &total, &version, &cerr[0], C.size_t(len(cerr))) != 0 {
		return nil, fmt.Errorf("fragsim: %s", C.GoString(&cerr[0]))
	}
	h := &trace.Header{
		Producer:        trace.ProducerLive,
		ProducerVersion: Version,
		GPUName:         C.GoString(&name[0]),
		GPUTotalBytes:   uint64(total),
		DriverVersion:   kernelDriverVersion(),
		CUDAVersion:     cudaVersion(int(version)),
		TorchVersion:    m.TorchVersion,
		Created:         time.Now().UTC(),
		CommandLine:     m.CommandLine,
		MemoryFraction:  m.MemoryFraction,
		Tags:            map[string]string{"allocator": "pluggable: CUDA stream-ordered pool (cuMemAllocFromPoolAsync)"},
	}
	if h.DriverVersion == "" {
		h.DriverVersion = h.CUDAVersion
	}
	h.Host, _ = os.Hostname()
	if len(h.CommandLine) == 0 {
		h.CommandLine = procCmdline()
	}
	switch {
	case m.AllocConf != nil:
		h.AllocConf = *m.AllocConf
	case os.Getenv("PYTORCH_CUDA_ALLOC_CONF") != "":
		h.AllocConf = os.Getenv("PYTORCH_CUDA_ALLOC_CONF")
	default:
		h.AllocConf = os.Getenv("PYTORCH_ALLOC_CONF")
	}
	for k, v := range m.Tags {
		h.Tags[k] = v
	}
	return h, nil
}

// launchEnv returns those of ring.LaunchVars the process has: from the
// host's metadata when it gave them, else from the environment.
func launchEnv(given map[string]string) map[string]string {
	env := map[string]string{}
	for _, k := range ring.LaunchVars {
		v, ok := given[k]
		if given == nil {
			v, ok = os.LookupEnv(k)
		}
		if ok {
			env[k] = v
		}
	}
	return env
}

// cudaVersion formats a driver API version (12040 -> "12.4").
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// kernelDriverVersion returns the NVIDIA kernel driver version, or "".
func kernelDriverVersion() string {
	if b, err := os.ReadFile("/sys/module/nvidia/version"); err == nil {
		return strings.TrimSpace(string(b))
	}
	b, err := os.ReadFile("/proc/driver/nvidia/version")
	if err != nil {
		return ""
	}
	// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  ..."
	f := strings.Fields(string(b))
	for i, s := range f {
		if s == "Module" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}

func procCmdline() []string {
	b, err := os.ReadFile("/proc/self/cmdline")
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// loop drains a private region until stop is closed.
func (r *recorder) loop() {
	defer close(r.done)
	t := time.NewTicker(drainEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.mu.Lock()
			err := r.d.Drain(now, false)
			if err == nil {
				err = r.d.Flush(now, flushEvery)
			}
			r.mu.Unlock()
			if err != nil {
				r.fail(err)
				return
			}
		}
	}
}

// fail stops recording after a write error; the program keeps running.
func (r *recorder) fail(err error) {
	C.fs_set_recording(0)
	fmt.Fprintf(os.Stderr, "fragsim: recording stopped: %v\n", err)
}

// fragsim_flush writes every call recorded so far and ends the current
// chunk. It returns 0, or -1 when nothing is being recorded or the trace
// could not be written.
//
//export fragsim_flush
func fragsim_flush() C.int {
	stateMu.Lock()
	r := cur
	stateMu.Unlock()
	if r == nil {
		return -1
	}
	if r.shared { // every published call is already the parent's
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.d.Drain(now, false) != nil || r.d.Flush(now, 0) != nil {
		return -1
	}
	return 0
}

// fragsim_close stops recording, writes everything recorded and closes the
// trace. Memory keeps being served. Safe to call more than once; a no-op in
// a forked child. Returns 0, or -1 when the trace could not be written.
//
//export fragsim_close
func fragsim_close() C.int {
	stateMu.Lock()
	defer stateMu.Unlock()
	r := cur
	if r == nil || r.pid != os.Getpid() {
		return 0
	}
	cur, closed = nil, true
	C.fs_set_recording(0)
	C.fs_stop_sampler()
	// A thread that saw recording on just before it went off may still be
	// publishing its record: give it a moment.
	time.Sleep(2 * time.Millisecond)
	if r.shared {
		r.reg.SetState(ring.StateClosed)
		return 0
	}
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.d.Drain(time.Now(), true)
	if cerr := r.w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if n := r.d.Missing(); n > 0 {
		fmt.Fprintf(os.Stderr, "fragsim: %d calls could not be recorded (no room in the record buffers)\n", n)
	}
	if err != nil {
		setLastError(fmt.Errorf("fragsim: %s: %w", r.path, err))
		return -1
	}
	return 0
}

// allocFreePairs makes n alloc/free pairs through the hook (benchmarks).
func allocFreePairs(n int) { C.fs_alloc_free_pairs(C.long(n)) }

// setFractionForBench sets a memory fraction on device 0 (benchmarks): the
// model of PyTorch's allocator then takes every call.
func setFractionForBench(f float64) { C.fragsim_set_fraction(C.double(f), 0) }

// metricsModelForBench runs the model of PyTorch's allocator on every
// device, as FRAGSIM_METRICS_ADDR does, without serving (benchmarks).
func metricsModelForBench() { C.fs_metrics_enable() }

// modelPairsForBench makes n alloc/free pairs on device dev's model, as
// the hook calls it, starting the model of an 80 GiB device first
// (benchmarks); false when it cannot start.
func modelPairsForBench(dev, n int) bool {
	if fs_model_start(C.int(dev), 0, 80<<30) != 1 {
		return false
	}
	for i := 0; i < n; i++ {
		addr := C.uint64_t(0x1000 + i%1024*0x100000)
		tok := fs_model_alloc(C.int(dev), C.uint64_t(512+i%64*4096), 7)
		fs_model_bind(C.int(dev), tok, addr)
		fs_model_free(C.int(dev), addr, 3)
	}
	return true
}

// openForBench opens a trace at path in this process (benchmarks).
func openForBench(path string) error {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	if fragsim_open(p, nil) != 0 {
		return errors.New(C.GoString(fragsim_last_error()))
	}
	return nil
}

func init() {
	// The drainer needs one thread; keep the Go runtime out of the way of
	// the host program's own threads.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2)
	}
}

func main() {}
