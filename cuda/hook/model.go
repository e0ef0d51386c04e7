package main

// The model of PyTorch's allocator: under a memory fraction, whether an
// allocation fails depends on how PyTorch's caching allocator would have
// packed the blocks into its segments, not on the recording allocator's
// pool. So once a program sets a fraction, every call also goes to
// allocator/caching (with the process's PYTORCH_CUDA_ALLOC_CONF) on a
// simulated device capped at that fraction, and an allocation fails, with
// the OutOfMemoryError PyTorch would raise, exactly where the model's
// does: the program takes the path its caught OOMs give it under PyTorch's
// own allocator, and the live recording replays as that run does. The
// recording allocator's pool is then no longer capped itself.
//
// The model starts at the first set_per_process_memory_fraction call: it
// knows nothing of blocks live before (PyTorch programs set the fraction
// before they allocate; the hook warns when one did not). Frees reach it as the replay engine gives them
// to a policy: a completed free is applied before the next request. Where
// the model refuses while record_stream frees wait on other streams, the
// hook waits for them and asks again, as PyTorch's release path does
// (model_alloc in hook.c).

/*
#include <stdint.h>
*/
import "C"

import (
	"os"
	"sync"
	"sync/atomic"

	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/replay/monitor"
	"github.com/fragsim/fragsim/trace"
)

// model is PyTorch's allocator on one device, fed the calls the hook sees.
type model struct {
	mu      sync.Mutex
	dev     driver.Device
	res     reserver // dev's reserved bytes
	pol     driver.Policy
	live    map[uint64]driver.Block // by the recording allocator's address
	pending map[uint64]driver.Block // by token: allocated, not bound yet
	token   uint64
	fc      []driver.Block // completed frees not given to the policy yet

	// For the metrics (metrics.go): the bytes of the blocks not back in
	// the free lists (active), and the state where reserved peaked.
	active uint64
	peak   monitor.Peak
}

// reserver is the model device's footprint (replay.NewDevice's device).
type reserver interface{ ReservedBytes() uint64 }

var (
	modelsMu sync.Mutex                // held while a model is made
	models   [64]atomic.Pointer[model] // by device, as FS_MAX_DEVICES; set once
)

func modelOf(device C.int) *model {
	if device < 0 || int(device) >= len(models) {
		return nil
	}
	return models[device].Load()
}

// allocConf is the process's allocator settings, as PyTorch reads them.
func allocConf() string {
	if s := os.Getenv("PYTORCH_CUDA_ALLOC_CONF"); s != "" {
		return s
	}
	return os.Getenv("PYTORCH_ALLOC_CONF")
}

// fs_model_start sets device's fraction of total bytes in its model,
// starting the model on the first call; 1 when the model runs, 0 when it
// cannot (settings fragsim does not model: the pool stays capped then).
//
//export fs_model_start
func fs_model_start(device C.int, fraction C.double, total C.uint64_t) C.int {
	if device < 0 || int(device) >= len(models) {
		return 0
	}
	modelsMu.Lock()
	m := models[device].Load()
	if m == nil {
		cfg, err := caching.ParseConf(allocConf())
		if err != nil || cfg.Backend == "cudaMallocAsync" {
			modelsMu.Unlock()
			return 0
		}
		dev := replay.NewDevice(uint64(total))
		pol, err := caching.New(dev, cfg)
		if err != nil {
			modelsMu.Unlock()
			return 0
		}
		res, _ := dev.(reserver)
		m = &model{dev: dev, res: res, pol: pol, live: map[uint64]driver.Block{}, pending: map[uint64]driver.Block{}}
		models[device].Store(m)
	}
	modelsMu.Unlock()
	m.mu.Lock()
	m.dev.(driver.FractionSetter).SetFraction(float64(fraction))
	m.mu.Unlock()
	return 1
}

// dispatch gives the policy the frees completed since the last request.
func (m *model) dispatch() {
	for _, b := range m.fc {
		m.pol.FreeCompleted(b)
		m.active -= b.SizeBytes
	}
	m.fc = m.fc[:0]
}

// allocatedBlock counts a block the policy handed out, and a new peak of
// reserved bytes.
func (m *model) allocatedBlock(b driver.Block) {
	m.active += b.SizeBytes
	if m.res != nil {
		if r := m.res.ReservedBytes(); r > m.peak.ReservedBytes {
			m.peak = monitor.Peak{ReservedBytes: r, ActiveBytes: m.active}
		}
	}
}

// fs_model_alloc asks device's model for size bytes on stream: a token
// for fs_model_bind or fs_model_cancel, or 0 when PyTorch's allocator
// would have run out of memory.
//
//export fs_model_alloc
func fs_model_alloc(device C.int, size C.uint64_t, stream C.uint64_t) C.uint64_t {
	m := modelOf(device)
	if m == nil {
		return 1 // no model: nothing to refuse
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dispatch()
	b, err := m.pol.Malloc(uint64(size), trace.StreamID(stream))
	if err != nil {
		return 0
	}
	m.allocatedBlock(b)
	m.token++
	m.pending[m.token] = b
	return C.uint64_t(m.token)
}

// fs_model_bind gives an allocated token the recording allocator's address.
//
//export fs_model_bind
func fs_model_bind(device C.int, token, addr C.uint64_t) {
	if m := modelOf(device); m != nil {
		m.mu.Lock()
		if b, ok := m.pending[uint64(token)]; ok {
			delete(m.pending, uint64(token))
			m.live[uint64(addr)] = b
		}
		m.mu.Unlock()
	}
}

// fs_model_cancel frees an allocated token the recording allocator could
// not serve after all (the GPU itself was full).
//
//export fs_model_cancel
func fs_model_cancel(device C.int, token C.uint64_t) {
	if m := modelOf(device); m != nil {
		m.mu.Lock()
		if b, ok := m.pending[uint64(token)]; ok {
			delete(m.pending, uint64(token))
			m.pol.FreeRequested(b)
			m.fc = append(m.fc, b)
		}
		m.mu.Unlock()
	}
}

// fs_model_free passes a free of the block at addr: its request (phase 1),
// its completion (2) or both (3). A block the model never saw (allocated
// before it started) is ignored.
//
//export fs_model_free
func fs_model_free(device C.int, addr C.uint64_t, phase C.int) {
	m := modelOf(device)
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.live[uint64(addr)]
	if !ok {
		return
	}
	if phase&1 != 0 {
		m.pol.FreeRequested(b)
	}
	if phase&2 != 0 {
		delete(m.live, uint64(addr))
		m.fc = append(m.fc, b)
	}
}

// fs_model_empty_cache passes torch.cuda.empty_cache.
//
//export fs_model_empty_cache
func fs_model_empty_cache(device C.int) {
	if m := modelOf(device); m != nil {
		m.mu.Lock()
		m.dispatch()
		m.pol.EmptyCache()
		m.mu.Unlock()
	}
}

// fs_model_pool passes a private-pool hook's call (kind as ring.h's
// FS_REC_POOL_*).
//
//export fs_model_pool
func fs_model_pool(kind, device C.int, stream, pool C.uint64_t) {
	m := modelOf(device)
	if m == nil {
		return
	}
	pp, ok := m.pol.(driver.Pooler)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch kind {
	case 8:
		// A route the model refuses (a pool begun twice on a stream) leaves
		// its allocations in the stream's pool; the recording goes on.
		_ = pp.BeginPool(uint64(pool), trace.StreamID(stream))
	case 9:
		pp.EndPool(uint64(pool), trace.StreamID(stream))
	case 10:
		pp.ReleasePool(uint64(pool))
	}
}
