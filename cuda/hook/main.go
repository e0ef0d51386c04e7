// Command hook is fragsim's recording CUDA allocator, built with
// -buildmode=c-shared into libfragsim_hook.so and loaded by PyTorch as its
// pluggable allocator.
//
// The allocation hot path (fragsim_alloc, fragsim_free and the other
// recording calls) is C, in hook.c: it serves memory from the CUDA driver's
// stream-ordered pool and appends each call to a buffer of the calling
// thread. This Go side opens the trace (fragsim_open), drains the buffers in
// a background goroutine into the trace format, ends a chunk at least every
// second (fragsim_flush does it on demand) and closes the file
// (fragsim_close, also registered with atexit).
package main

/*
#cgo CFLAGS: -O2 -std=gnu11 -Wall
#cgo LDFLAGS: -ldl -lpthread
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
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/fragsim/fragsim/trace"
)

// Version is the hook's producer version, stored in trace headers.
const Version = "fragsim-hook 0.1"

const (
	drainEvery = 200 * time.Millisecond
	flushEvery = time.Second
	gapTimeout = 2 * time.Second
	drainBatch = 4096

	maxDrainTime = 100 * time.Millisecond
)

// meta is what the host process tells fragsim_open about itself (JSON).
type meta struct {
	TorchVersion   string            `json:"torch_version"`
	CommandLine    []string          `json:"command_line"`
	MemoryFraction float64           `json:"memory_fraction"`
	AllocConf      *string           `json:"alloc_conf"`
	Device         int               `json:"device"`
	Tags           map[string]string `json:"tags"`
}

// recorder is the one open trace of this process.
type recorder struct {
	mu        sync.Mutex // guards everything below; held by the drainer, flush and close
	w         *trace.FileWriter
	path      string
	seq       sequencer
	texts     map[uint64]string // marker texts by seq, until written
	buf       []C.fs_rec
	lastTime  int64
	unflushed bool
	lastFlush time.Time
	err       error
	events    uint64

	stop chan struct{}
	done chan struct{}
	pid  int
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
// memory_fraction, alloc_conf, device and tags. It returns 0, or -1 with
// the reason in fragsim_last_error.
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
	w, err := trace.Create(path, h)
	if err != nil {
		return fmt.Errorf("fragsim: %w", err)
	}
	r := &recorder{
		w:         w,
		path:      path,
		buf:       make([]C.fs_rec, drainBatch),
		texts:     map[uint64]string{},
		lastFlush: time.Now(),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		pid:       os.Getpid(),
	}
	r.seq = sequencer{next: uint64(C.fs_seq()), gapTimeout: gapTimeout}
	cur = r
	C.fs_set_recording(1)
	atexitOn.Do(func() { C.fs_register_atexit() })
	go r.loop()
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

// loop drains the C buffers until stop is closed.
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
			r.drain(now, false)
			if r.unflushed && now.Sub(r.lastFlush) >= flushEvery {
				r.flush(now)
			}
			r.mu.Unlock()
		}
	}
}

// drain moves recorded calls from the C buffers to the trace writer.
// It works in batches, so that its buffers stay small. Unless all is set,
// it stops after maxDrainTime, so that threads that record faster than the
// trace is written cannot keep the drainer from flushing.
func (r *recorder) drain(now time.Time, all bool) {
	for {
		n := int(C.fs_drain(&r.buf[0], C.size_t(len(r.buf))))
		for i := range n {
			c := &r.buf[i]
			x := rec{
				seq: uint64(c.seq), timeNS: int64(c.time_ns), addr: uint64(c.addr),
				size: uint64(c.size), stream: uint64(c.stream), aux: uint64(c.aux),
				device: int32(c.device), tid: int32(c.tid), kind: uint8(c.kind), marker: uint8(c.marker),
			}
			if x.kind == C.FS_REC_MARKER {
				p := C.fs_rec_text(c)
				r.texts[x.seq] = C.GoString(p)
				C.free(unsafe.Pointer(p))
				x.aux = 0
			}
			r.seq.add(x)
		}
		for _, x := range r.seq.release(now, false) {
			r.write(x)
		}
		if n < len(r.buf) || !all && time.Since(now) > maxDrainTime {
			break
		}
	}
	if all {
		for _, x := range r.seq.release(now, true) {
			r.write(x)
		}
	}
}

// write turns one recorded call into trace events.
func (r *recorder) write(x rec) {
	if r.err != nil {
		return
	}
	t := x.timeNS
	if t < r.lastTime {
		t = r.lastTime // the clock read and the sequence number are not taken atomically
	}
	r.lastTime = t
	e := trace.Event{Device: trace.DeviceID(x.device), Stream: trace.StreamID(x.stream), TimeNS: t, Addr: x.addr, SizeBytes: x.size}
	var err error
	switch x.kind {
	case C.FS_REC_ALLOC:
		e.Kind = trace.KindAlloc
		err = r.w.WriteEvent(e)
	case C.FS_REC_FREE:
		// The pool frees in stream order at once: the request completes immediately.
		e.Kind = trace.KindFreeRequested
		if err = r.w.WriteEvent(e); err == nil {
			e.Kind = trace.KindFreeCompleted
			err = r.w.WriteEvent(e)
			r.events++
		}
	case C.FS_REC_OOM:
		e.Kind, e.Aux = trace.KindOOM, x.aux
		err = r.w.WriteEvent(e)
	case C.FS_REC_EMPTY_CACHE:
		e.Kind = trace.KindEmptyCache
		err = r.w.WriteEvent(e)
	case C.FS_REC_FRACTION:
		e.Kind, e.Aux = trace.KindSetFraction, x.aux
		err = r.w.WriteEvent(e)
	case C.FS_REC_MARKER:
		e.Kind, e.Marker, e.Aux = trace.KindMarker, trace.MarkerKind(x.marker), uint64(x.marker)
		e.Text = r.w.String(r.texts[x.seq])
		delete(r.texts, x.seq)
		err = r.w.WriteEvent(e)
	default:
		return
	}
	r.events++
	r.unflushed = true
	if err != nil {
		r.fail(err)
	}
}

func (r *recorder) flush(now time.Time) {
	if r.err != nil {
		return
	}
	if err := r.w.Flush(); err != nil {
		r.fail(err)
	}
	r.unflushed = false
	r.lastFlush = now
}

// fail stops recording after a write error; the program keeps running.
func (r *recorder) fail(err error) {
	r.err = err
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
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain(time.Now(), false)
	r.flush(time.Now())
	if r.err != nil {
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
	close(r.stop)
	<-r.done
	// A thread that saw recording on just before it went off may still be
	// publishing its record: give it a moment.
	time.Sleep(2 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain(time.Now(), true)
	err := r.err
	if cerr := r.w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	lost := uint64(C.fs_lost()) + r.seq.skipped
	if lost > 0 {
		fmt.Fprintf(os.Stderr, "fragsim: %d calls could not be recorded (out of memory)\n", lost)
	}
	if err != nil {
		setLastError(fmt.Errorf("fragsim: %s: %w", r.path, err))
		return -1
	}
	return 0
}

// allocFreePairs makes n alloc/free pairs through the hook (benchmarks).
func allocFreePairs(n int) { C.fs_alloc_free_pairs(C.long(n)) }

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
