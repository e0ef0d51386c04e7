/*
 * hook.c: fragsim's recording allocator, the hot path.
 *
 * Memory comes from each device's default stream-ordered pool
 * (cuMemAllocFromPoolAsync / cuMemFreeAsync) with the release threshold at
 * its maximum; small freed blocks are kept for reuse on their stream
 * (cache.c). Every call is appended to a queue owned by the calling
 * thread in the record region (ring.h): a list of fixed-size chunks that
 * only that thread writes and only the drainer reads, so recording takes no
 * lock; the only shared write is one atomic increment of the sequence
 * counter. Under `fragsim record` the region is a file the parent maps too,
 * so what a thread published survives the process dying in any way.
 */
#define _GNU_SOURCE
#include "hook.h"
#include "../csrc/cudrv.h"
#include "cache.h"
#include "_cgo_export.h" /* the model of PyTorch's allocator (model.go) */

void fs_close_trace(void); /* atexit.c */
int fs_oom_can_throw(void);  /* oom.cc */
void fs_throw_oom(const char *msg);

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define FS_MAX_DEVICES 64
#define FS_GROW_CHUNKS 64 /* a region file grows by this many chunks at a time */

static cudrv D;
static _Atomic int g_driver_state; /* 0 not loaded, 1 loaded, -1 failed */
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_driver_err[512];

typedef struct {
	_Atomic int ready;
	CUcontext ctx;
	CUmemoryPool pool;
} fs_device;
static fs_device g_dev[FS_MAX_DEVICES];

/* Live and peak requested bytes per device, for torch.cuda.memory_stats. */
static _Atomic int64_t g_live[FS_MAX_DEVICES], g_peak[FS_MAX_DEVICES];
/* The pool's reserved bytes at the device's last memory sample. */
static _Atomic uint64_t g_res_seen[FS_MAX_DEVICES];
/* The device's last memory sample as taken (g_res_seen is reset by
 * empty_cache): free, total and the pool's reserved bytes, for the
 * metrics (fs_device_mem). */
static _Atomic uint64_t g_mem_free[FS_MAX_DEVICES], g_mem_total[FS_MAX_DEVICES], g_mem_res[FS_MAX_DEVICES];
/* Whether the metrics are served (FRAGSIM_METRICS_ADDR): the model of
 * PyTorch's allocator then runs on every device from its first use. */
static _Atomic int g_metrics;
/* The OOMs raised per device (the metrics' fragsim_oom_total). */
static _Atomic uint64_t g_ooms[FS_MAX_DEVICES];
static _Atomic int g_sampler_on, g_sampler_stop;
/* fs_routes_active counts the private-pool routes open (pools.cc): while
 * one is, a CUDA graph may be capturing, and no sample is taken. */
__attribute__((visibility("hidden"))) int fs_routes_active;
/* The pool's cap per device from set_per_process_memory_fraction, plus one; 0: none. */
static _Atomic uint64_t g_cap[FS_MAX_DEVICES];
/* Whether a device's calls also go to the model of PyTorch's allocator
 * (model.go), which then decides the OOMs instead of the pool's cap. */
static _Atomic int g_model[FS_MAX_DEVICES];

#define FS_SAMPLE_EVERY_NS 100000000L /* the device-memory sampler's period */

static _Atomic int g_recording;
static fs_ring_hdr *g_ring; /* the region; set once before recording starts */
static uint64_t g_ring_bytes;
static int g_ring_fd = -1; /* the region file, grown as chunks are needed; -1: anonymous */
static pthread_mutex_t g_grow_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread fs_ring_queue *t_queue;
static pthread_key_t g_queue_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- driver ---- */

int fs_driver_init(char *err, size_t errlen) {
	int st = atomic_load_explicit(&g_driver_state, memory_order_acquire);
	if (st == 0) {
		pthread_mutex_lock(&g_init_mu);
		st = atomic_load_explicit(&g_driver_state, memory_order_relaxed);
		if (st == 0) {
			st = cudrv_load(&D, g_driver_err, sizeof g_driver_err) == 0 ? 1 : -1;
			if (st == 1)
				fs_cache_init(&(fs_cache_env){.free_async = D.cuMemFreeAsync, .routes_active = &fs_routes_active});
			atomic_store_explicit(&g_driver_state, st, memory_order_release);
		}
		pthread_mutex_unlock(&g_init_mu);
	}
	if (st < 0) {
		snprintf(err, errlen, "%s", g_driver_err);
		return -1;
	}
	return 0;
}

int fs_device_info(int ordinal, char *name, int namelen, size_t *total, int *version, char *err,
		   size_t errlen) {
	if (fs_driver_init(err, errlen) != 0)
		return -1;
	return cudrv_device_info(&D, ordinal, name, namelen, total, version, err, errlen);
}

static void metrics_model_start(int device);

/* device_ready makes sure device's primary context and pool are known. */
static fs_device *device_ready(int device) {
	if (device < 0 || device >= FS_MAX_DEVICES)
		return NULL;
	fs_device *dv = &g_dev[device];
	if (atomic_load_explicit(&dv->ready, memory_order_acquire) == 1)
		return dv;
	char err[512];
	if (fs_driver_init(err, sizeof err) != 0) {
		fprintf(stderr, "fragsim: %s\n", err);
		return NULL;
	}
	pthread_mutex_lock(&g_init_mu);
	if (atomic_load_explicit(&dv->ready, memory_order_relaxed) != 1) {
		CUdevice d;
		CUresult r = D.cuDeviceGet(&d, device);
		if (r == CUDA_SUCCESS)
			r = D.cuDevicePrimaryCtxRetain(&dv->ctx, d);
		if (r == CUDA_SUCCESS)
			r = D.cuDeviceGetDefaultMemPool(&dv->pool, d);
		if (r == CUDA_SUCCESS) {
			unsigned long long max = ~0ULL;
			r = D.cuMemPoolSetAttribute(dv->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max);
		}
		if (r != CUDA_SUCCESS) {
			fprintf(stderr, "fragsim: cannot set up device %d: %s (error %d)\n", device,
				cudrv_errstr(&D, r), r);
			pthread_mutex_unlock(&g_init_mu);
			return NULL;
		}
		atomic_store_explicit(&dv->ready, 1, memory_order_release);
		if (atomic_load(&g_metrics))
			metrics_model_start(device);
	}
	pthread_mutex_unlock(&g_init_mu);
	return dv;
}

/* ---- the record region ---- */

static inline fs_ring_queue *ring_queue(uint32_t i) {
	return (fs_ring_queue *)((char *)g_ring + FS_RING_QUEUES_OFF + (uint64_t)i * sizeof(fs_ring_queue));
}

static inline fs_ring_chunk *ring_chunk(uint32_t i) {
	return (fs_ring_chunk *)((char *)g_ring + FS_RING_CHUNKS_OFF + (uint64_t)i * sizeof(fs_ring_chunk));
}

static void after_fork_child(void) {
	/* A forked child shares a file region with its parent: it must never write to it. */
	atomic_store_explicit(&g_recording, 0, memory_order_relaxed);
	t_queue = NULL;
}

static void ring_common(void) { pthread_atfork(NULL, NULL, after_fork_child); }

int fs_ring_attach(const char *path, char *err, size_t errlen) {
	if (g_ring) {
		snprintf(err, errlen, "a record region is already set up");
		return -1;
	}
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open the record region %s: %s", path, strerror(errno));
		return -1;
	}
	fs_ring_hdr h;
	if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != FS_RING_MAGIC ||
	    h.version != FS_RING_VERSION || h.max_chunks == 0 || h.max_chunks > UINT32_MAX / 2) {
		snprintf(err, errlen, "%s is not a fragsim record region of this version", path);
		close(fd);
		return -1;
	}
	uint64_t bytes = FS_RING_SIZE(h.max_chunks);
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "cannot map the record region %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	fs_ring_hdr *rh = p;
	int32_t none = 0;
	if (!atomic_compare_exchange_strong(&rh->pid, &none, (int32_t)getpid())) {
		snprintf(err, errlen, "process %d already records into %s (one recorded process per run)", none, path);
		munmap(p, bytes);
		close(fd);
		return -1;
	}
	g_ring = rh;
	g_ring_bytes = bytes;
	g_ring_fd = fd;
	ring_common();
	return 0;
}

int fs_ring_anon(uint64_t max_chunks, char *err, size_t errlen) {
	if (g_ring) {
		snprintf(err, errlen, "a record region is already set up");
		return -1;
	}
	uint64_t bytes = FS_RING_SIZE(max_chunks);
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "cannot map %llu bytes for the record buffers: %s", (unsigned long long)bytes,
			 strerror(errno));
		return -1;
	}
	fs_ring_hdr *h = p;
	h->magic = FS_RING_MAGIC;
	h->version = FS_RING_VERSION;
	h->max_chunks = max_chunks;
	atomic_store(&h->backed, max_chunks);
	atomic_store(&h->pid, (int32_t)getpid());
	g_ring = h;
	g_ring_bytes = bytes;
	ring_common();
	return 0;
}

void *fs_ring_base(uint64_t *bytes) {
	*bytes = g_ring_bytes;
	return g_ring;
}

/*
 * back makes sure the region file is long enough for chunk i. Writing a
 * mapped page past the end of a file kills the process (SIGBUS), so the file
 * is grown, with its blocks allocated, before a chunk there is used.
 */
static int back(uint32_t i) {
	if (i < atomic_load_explicit(&g_ring->backed, memory_order_acquire))
		return 0;
	if (g_ring_fd < 0)
		return -1;
	int ok = 0;
	pthread_mutex_lock(&g_grow_mu);
	uint64_t have = atomic_load_explicit(&g_ring->backed, memory_order_relaxed);
	if (i >= have) {
		uint64_t want = (uint64_t)i + FS_GROW_CHUNKS;
		if (want > g_ring->max_chunks)
			want = g_ring->max_chunks;
		off_t from = (off_t)FS_RING_SIZE(have), to = (off_t)FS_RING_SIZE(want);
		int r = posix_fallocate(g_ring_fd, from, to - from);
		if (r == EOPNOTSUPP || r == ENOSYS || r == EINVAL)
			r = ftruncate(g_ring_fd, to) == 0 ? 0 : errno;
		if (r == 0)
			atomic_store_explicit(&g_ring->backed, want, memory_order_release);
		else
			ok = -1;
	}
	pthread_mutex_unlock(&g_grow_mu);
	return ok;
}

/* pop_free takes a chunk off the region's free stack; -1 when it is empty. */
static int64_t pop_free(void) {
	uint64_t old = atomic_load_explicit(&g_ring->free_top, memory_order_acquire);
	while ((uint32_t)old != 0) {
		uint32_t i = (uint32_t)old - 1;
		uint32_t nx = atomic_load_explicit(&ring_chunk(i)->free_next, memory_order_relaxed);
		uint64_t nw = (uint64_t)nx | (((old >> 32) + 1) << 32);
		if (atomic_compare_exchange_weak_explicit(&g_ring->free_top, &old, nw, memory_order_acq_rel,
							  memory_order_acquire))
			return i;
	}
	return -1;
}

/* new_chunk returns an empty chunk for q's owner: a spare one, a free one or a new one; -1 when none is left. */
static int64_t new_chunk(fs_ring_queue *q) {
	int64_t i;
	uint32_t t = atomic_load_explicit(&q->spare_tail, memory_order_relaxed);
	if (t != atomic_load_explicit(&q->spare_head, memory_order_acquire)) {
		i = q->spare[t % FS_SPARES];
		atomic_store_explicit(&q->spare_tail, t + 1, memory_order_release);
	} else if ((i = pop_free()) < 0) {
		uint64_t b = atomic_fetch_add_explicit(&g_ring->brk, 1, memory_order_relaxed);
		if (b >= g_ring->max_chunks || back((uint32_t)b) != 0)
			return -1;
		i = (int64_t)b;
	}
	fs_ring_chunk *c = ring_chunk((uint32_t)i);
	atomic_store_explicit(&c->n, 0, memory_order_relaxed);
	atomic_store_explicit(&c->next, 0, memory_order_relaxed);
	return i;
}

/*
 * queue_thread_exit marks the exiting thread's queue dead. A later call on
 * the same thread (from another key's destructor) starts a new queue.
 */
static void queue_thread_exit(void *p) {
	fs_ring_queue *q = p;
	t_queue = NULL;
	atomic_store_explicit(&q->state, FS_Q_DEAD, memory_order_release);
}

static void make_key(void) { pthread_key_create(&g_queue_key, queue_thread_exit); }

/* thread_queue returns the calling thread's queue, claiming a free one first. */
static fs_ring_queue *thread_queue(void) {
	fs_ring_queue *q = t_queue;
	if (q)
		return q;
	for (uint32_t i = 0; i < FS_MAX_QUEUES; i++) {
		q = ring_queue(i);
		uint32_t st = FS_Q_FREE;
		if (!atomic_compare_exchange_strong_explicit(&q->state, &st, FS_Q_CLAIMING, memory_order_acquire,
							     memory_order_relaxed))
			continue;
		atomic_store_explicit(&q->spare_head, 0, memory_order_relaxed);
		atomic_store_explicit(&q->spare_tail, 0, memory_order_relaxed);
		int64_t c = new_chunk(q);
		if (c < 0) {
			atomic_store_explicit(&q->state, FS_Q_FREE, memory_order_release);
			return NULL;
		}
		q->write = q->read = (uint32_t)c;
		q->read_i = 0;
		q->tid = (int32_t)syscall(SYS_gettid);
		uint32_t n = atomic_load_explicit(&g_ring->nqueues, memory_order_relaxed);
		while (n < i + 1 && !atomic_compare_exchange_weak_explicit(&g_ring->nqueues, &n, i + 1,
									  memory_order_relaxed, memory_order_relaxed))
			;
		atomic_store_explicit(&q->state, FS_Q_LIVE, memory_order_release);
		pthread_once(&g_key_once, make_key);
		pthread_setspecific(g_queue_key, q);
		t_queue = q;
		return q;
	}
	return NULL;
}

/*
 * slots returns k free slots in a row in the calling thread's current
 * chunk, moving to a new chunk when the current one has too few, and the
 * chunk's published count in *n; NULL when there is no room.
 */
static fs_rec *slots(uint32_t k, fs_ring_chunk **cp, uint32_t *np) {
	fs_ring_queue *q = thread_queue();
	if (!q)
		return NULL;
	fs_ring_chunk *c = ring_chunk(q->write);
	uint32_t n = atomic_load_explicit(&c->n, memory_order_relaxed);
	if (n + k > FS_CHUNK_RECS) {
		int64_t i = new_chunk(q);
		if (i < 0)
			return NULL;
		atomic_store_explicit(&c->next, (uint32_t)i + 1, memory_order_release);
		q->write = (uint32_t)i;
		c = ring_chunk((uint32_t)i);
		n = 0;
	}
	*cp = c;
	*np = n;
	return &c->recs[n];
}

/*
 * record appends one call (with text, for a marker, in the slots after it).
 * The slots are secured before the sequence number is taken, so every
 * number handed out is published (no gaps) unless the process dies between
 * the two.
 */
static void record_text(uint8_t kind, uint8_t marker, int device, uint64_t stream, uint64_t addr,
			uint64_t size, uint64_t aux, const char *text, uint32_t tlen) {
	uint32_t k = 1 + (tlen + sizeof(fs_rec) - 1) / sizeof(fs_rec);
	fs_ring_chunk *c;
	uint32_t n;
	fs_rec *r = g_ring ? slots(k, &c, &n) : NULL;
	if (!r) {
		if (g_ring)
			atomic_fetch_add_explicit(&g_ring->lost, 1, memory_order_relaxed);
		return;
	}
	if (tlen)
		memcpy(r + 1, text, tlen);
	r->seq = atomic_fetch_add_explicit(&g_ring->seq, 1, memory_order_seq_cst);
	r->time_ns = now_ns();
	r->addr = addr;
	r->size = size;
	r->stream = stream;
	r->aux = aux;
	r->device = device;
	r->tid = t_queue->tid;
	r->kind = kind;
	r->marker = marker;
	atomic_store_explicit(&c->n, n + k, memory_order_release);
}

static inline void record(uint8_t kind, uint8_t marker, int device, uint64_t stream, uint64_t addr,
			  uint64_t size, uint64_t aux) {
	record_text(kind, marker, device, stream, addr, size, aux, NULL, 0);
}

static inline int recording(void) { return atomic_load_explicit(&g_recording, memory_order_relaxed); }

void fs_set_recording(int on) { atomic_store_explicit(&g_recording, on, memory_order_seq_cst); }

/* ---- call statistics (FRAGSIM_HOOK_STATS=1) ---- */

/* With FRAGSIM_HOOK_STATS=1 the hook times its allocations and frees and
 * prints the totals at exit: the recording's own cost, which a workload's
 * wall time on a shared machine measures only within its noise. */
static int g_stats;
static _Atomic uint64_t g_stat_allocs, g_stat_alloc_ns, g_stat_frees, g_stat_free_ns, g_stat_hits;

static uint64_t mono_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

__attribute__((constructor)) static void stats_init(void) {
	const char *s = getenv("FRAGSIM_HOOK_STATS");
	g_stats = s && *s == '1';
}

__attribute__((destructor)) static void stats_print(void) {
	if (!g_stats)
		return;
	uint64_t a = g_stat_allocs, f = g_stat_frees;
	fprintf(stderr,
		"fragsim: hook: %llu allocations, %.3f us each (%llu from the reuse cache); %llu frees, %.3f us each\n",
		(unsigned long long)a, a ? g_stat_alloc_ns / 1e3 / a : 0.0, (unsigned long long)g_stat_hits,
		(unsigned long long)f, f ? g_stat_free_ns / 1e3 / f : 0.0);
}

/* ---- the allocator ---- */

/* with_ctx makes dv's context current, returning the previous one. */
static inline CUcontext with_ctx(fs_device *dv) {
	CUcontext cur = NULL;
	D.cuCtxGetCurrent(&cur);
	if (cur != dv->ctx)
		D.cuCtxSetCurrent(dv->ctx);
	return cur;
}

static inline void restore_ctx(fs_device *dv, CUcontext prev) {
	if (prev != dv->ctx && prev != NULL)
		D.cuCtxSetCurrent(prev);
}

/*
 * sample records device's free and total memory (cuMemGetInfo) with the
 * pool's reserved bytes, so that a reader finds the memory outside this
 * process's pool: total - free - reserved. dv's context must be current.
 */
static void sample(fs_device *dv, int device) {
	if (__atomic_load_n(&fs_routes_active, __ATOMIC_ACQUIRE))
		return; /* a capture may be under way: no driver query */
	size_t freeb = 0, total = 0;
	unsigned long long res = 0, again = 0;
	/* Read the pool on both sides of cuMemGetInfo: a sample is kept only
	 * when no other thread grew or trimmed the pool in between. */
	for (int try = 0;; try++) {
		if (try == 3 || D.cuMemPoolGetAttribute(dv->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) != CUDA_SUCCESS ||
		    D.cuMemGetInfo(&freeb, &total) != CUDA_SUCCESS ||
		    D.cuMemPoolGetAttribute(dv->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &again) != CUDA_SUCCESS)
			return;
		if (res == again)
			break;
	}
	atomic_store_explicit(&g_res_seen[device], res, memory_order_relaxed);
	atomic_store_explicit(&g_mem_res[device], res, memory_order_relaxed);
	atomic_store_explicit(&g_mem_total[device], total, memory_order_relaxed);
	atomic_store_explicit(&g_mem_free[device], freeb, memory_order_release);
	record(FS_REC_DEVICE_MEM, 0, device, 0, res, freeb, total);
}

/*
 * sample_if_grown samples device when its pool grew since the last sample.
 * The pool can only have grown when the live bytes passed the reserved
 * bytes last seen: one relaxed load on the hot path, no driver call.
 */
static inline void sample_if_grown(fs_device *dv, int device, int64_t live) {
	uint64_t seen = atomic_load_explicit(&g_res_seen[device], memory_order_relaxed);
	if ((uint64_t)live <= seen || __atomic_load_n(&fs_routes_active, __ATOMIC_ACQUIRE))
		return;
	CUcontext prev = with_ctx(dv);
	unsigned long long res = 0;
	if (D.cuMemPoolGetAttribute(dv->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) == CUDA_SUCCESS && res > seen)
		sample(dv, device);
	restore_ctx(dv, prev);
}

/* sampler samples every ready device every FS_SAMPLE_EVERY_NS while recording. */
static void *sampler(void *arg) {
	(void)arg;
	struct timespec ts = {0, FS_SAMPLE_EVERY_NS};
	while (!atomic_load_explicit(&g_sampler_stop, memory_order_relaxed)) {
		nanosleep(&ts, NULL);
		if (!recording())
			continue;
		for (int i = 0; i < FS_MAX_DEVICES; i++) {
			fs_device *dv = &g_dev[i];
			if (atomic_load_explicit(&dv->ready, memory_order_acquire) != 1)
				continue;
			CUcontext prev = with_ctx(dv);
			sample(dv, i);
			restore_ctx(dv, prev);
		}
	}
	atomic_store(&g_sampler_on, 0);
	return NULL;
}

void fs_start_sampler(void) {
	atomic_store(&g_sampler_stop, 0);
	if (atomic_exchange(&g_sampler_on, 1))
		return;
	/* Signals go to the program's threads, never to the sampler. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	if (pthread_create(&t, &a, sampler, NULL) != 0)
		atomic_store(&g_sampler_on, 0);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void fs_stop_sampler(void) { atomic_store(&g_sampler_stop, 1); }

/*
 * over_cap says whether device's pool reserves more than the cap that
 * set_per_process_memory_fraction set (PyTorch's allowed maximum: the
 * fraction of the device's total memory). It reads the pool only when a
 * cap is set. dv's context must be current.
 */
static int over_cap(fs_device *dv, int device) {
	uint64_t cap = atomic_load_explicit(&g_cap[device], memory_order_relaxed);
	if (!cap)
		return 0;
	unsigned long long res = 0;
	return D.cuMemPoolGetAttribute(dv->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) == CUDA_SUCCESS && res > cap - 1;
}

/* alloc_capped allocates from dv's pool, refusing (as out of memory) a
 * block that takes the pool past its cap when capped is set. */
static CUresult alloc_capped(fs_device *dv, int device, CUdeviceptr *p, size_t size, CUstream stream, int capped) {
	CUresult r = D.cuMemAllocFromPoolAsync(p, size, dv->pool, stream);
	if (r == CUDA_SUCCESS && capped && over_cap(dv, device)) {
		D.cuMemFreeAsync(*p, stream);
		*p = 0;
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return r;
}

/* format_size writes n bytes as PyTorch's OOM messages do. */
static void format_size(char *buf, size_t len, uint64_t n) {
	if (n <= 1024)
		snprintf(buf, len, "%llu bytes", (unsigned long long)n);
	else if (n <= 1048576)
		snprintf(buf, len, "%.2f KiB", n / 1024.0);
	else if (n <= 1073741824)
		snprintf(buf, len, "%.2f MiB", n / 1048576.0);
	else
		snprintf(buf, len, "%.2f GiB", n / 1073741824.0);
}

/*
 * oom ends an allocation the pool refused: it records the oom event, then
 * raises PyTorch's OutOfMemoryError with the native allocator's message
 * when the process has libc10 (fs_throw_oom does not return then).
 * Otherwise PyTorch's pluggable allocator cannot report it (it does not
 * check for NULL: the program would go on with a null tensor and fail later
 * with an illegal memory access), so the trace is saved and the process
 * stops, unless FRAGSIM_OOM_RETURNS_NULL=1.
 */
static void oom(fs_device *dv, int device, ssize_t size, void *stream, CUresult r, CUcontext prev) {
	atomic_fetch_add_explicit(&g_ooms[device], 1, memory_order_relaxed);
	size_t freeb = 0, total = 0;
	unsigned long long res = 0;
	D.cuMemGetInfo(&freeb, &total);
	D.cuMemPoolGetAttribute(dv->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res);
	restore_ctx(dv, prev);
	if (recording())
		record(FS_REC_OOM, 0, device, (uint64_t)(uintptr_t)stream, 0, (uint64_t)size, freeb);
	if (r != CUDA_ERROR_OUT_OF_MEMORY) {
		fprintf(stderr, "fragsim: cannot allocate %zd bytes on device %d: %s (error %d)\n", size, device,
			cudrv_errstr(&D, r), r);
		return;
	}
	const char *null_ok = getenv("FRAGSIM_OOM_RETURNS_NULL");
	if (null_ok && *null_ok == '1') {
		fprintf(stderr, "fragsim: cannot allocate %zd bytes on device %d: out of memory (%zu bytes free)\n", size,
			device, freeb);
		return;
	}
	if (fs_oom_can_throw()) {
		char req[32], tot[32], fr[32], cap[48] = "", alloc[32], unalloc[32];
		int64_t live = atomic_load_explicit(&g_live[device], memory_order_relaxed);
		uint64_t c = atomic_load_explicit(&g_cap[device], memory_order_relaxed);
		format_size(req, sizeof req, (uint64_t)size);
		format_size(tot, sizeof tot, total);
		format_size(fr, sizeof fr, freeb);
		if (c) {
			format_size(cap, sizeof cap - 11, c - 1);
			strcat(cap, " allowed; ");
		}
		format_size(alloc, sizeof alloc, (uint64_t)live);
		format_size(unalloc, sizeof unalloc, res > (uint64_t)live ? res - (uint64_t)live : 0);
		char msg[1024];
		snprintf(msg, sizeof msg,
			 "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. "
			 "%sOf the allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but "
			 "unallocated. (Raised by fragsim's recording allocator.)",
			 req, device, tot, fr, cap, alloc, unalloc);
		fs_throw_oom(msg);
	}
	fprintf(stderr, "fragsim: cannot allocate %zd bytes on device %d: out of memory (%zu bytes free)\n", size,
		device, freeb);
	fprintf(stderr, "fragsim: out of GPU memory; PyTorch's pluggable allocator cannot report it, "
			"so the process stops here (the trace is saved)\n");
	fs_close_trace();
	abort();
}

/* The private-pool hooks (pools.cc): routes whose pool_begin waits for an
 * allocation on a stream their filter takes. */
__attribute__((visibility("hidden"))) int fs_pools_pending;
__attribute__((visibility("hidden"))) void fs_pools_resolve(int device, uint64_t stream);

/* The deferred frees of record_stream (streams.cc): fs_stream_uses counts
 * the blocks a stream other than their own used, fs_frees_pending the
 * frees deferred and not completed; both are read without a lock. */
__attribute__((visibility("hidden"))) int fs_stream_uses, fs_frees_pending;
__attribute__((visibility("hidden"))) int fs_streams_free(int device, void *ptr, uint64_t size, void *stream);
__attribute__((visibility("hidden"))) void fs_streams_process(int device, int wait);

/* process_frees completes device's deferred frees whose streams are done
 * (wait: waits for all of them), when there are any. */
static inline void process_frees(int device, int wait) {
	if (__atomic_load_n(&fs_frees_pending, __ATOMIC_ACQUIRE))
		fs_streams_process(device, wait);
}

/* model_on says whether device's calls go to the model of PyTorch's allocator. */
static inline int model_on(int device) { return atomic_load_explicit(&g_model[device], memory_order_acquire); }

/* fs_drv gives streams.cc the driver's entry points. */
__attribute__((visibility("hidden"))) const cudrv *fs_drv(void) { return &D; }

/* fs_record_call records a deferred free's request or completion (streams.cc). */
__attribute__((visibility("hidden"))) void fs_record_call(int kind, int device, uint64_t stream, uint64_t addr,
							   uint64_t size) {
	if (kind == FS_REC_FREE_COMPLETED && model_on(device))
		fs_model_free(device, addr, 2);
	if (recording())
		record((uint8_t)kind, 0, device, stream, addr, size, 0);
}

/* fs_record_pool records a private-pool hook's call (pools.cc). */
__attribute__((visibility("hidden"))) void fs_record_pool(int kind, int device, uint64_t stream, uint64_t pool) {
	if (device >= 0 && device < FS_MAX_DEVICES && model_on(device))
		fs_model_pool(kind, device, stream, pool);
	if (recording())
		record((uint8_t)kind, 0, device, stream, 0, 0, pool);
}

static void *alloc_block(ssize_t size, int device, void *stream);
static void free_block(void *ptr, ssize_t size, int device, void *stream);

void *fragsim_alloc(ssize_t size, int device, void *stream) {
	if (!g_stats)
		return alloc_block(size, device, stream);
	uint64_t t0 = mono_ns();
	void *p = alloc_block(size, device, stream);
	atomic_fetch_add_explicit(&g_stat_alloc_ns, mono_ns() - t0, memory_order_relaxed);
	atomic_fetch_add_explicit(&g_stat_allocs, 1, memory_order_relaxed);
	return p;
}

void fragsim_free(void *ptr, ssize_t size, int device, void *stream) {
	if (!g_stats) {
		free_block(ptr, size, device, stream);
		return;
	}
	uint64_t t0 = mono_ns();
	free_block(ptr, size, device, stream);
	atomic_fetch_add_explicit(&g_stat_free_ns, mono_ns() - t0, memory_order_relaxed);
	atomic_fetch_add_explicit(&g_stat_frees, 1, memory_order_relaxed);
}

/*
 * model_alloc asks device's model for size bytes on stream: its token, or
 * 0 where PyTorch's allocator would raise an OOM. Before it gives up,
 * PyTorch's release path waits for the frees that record_stream deferred
 * (synchronize_and_free_events) and tries again; so does this, outside a
 * capture (where PyTorch does not release). The completions are recorded
 * before the allocation, as the replay engine applies them; the model's
 * failed first attempt, whose release the replay does not repeat, is not
 * in the trace.
 */
static uint64_t model_alloc(int device, ssize_t size, void *stream) {
	uint64_t tok = fs_model_alloc(device, (uint64_t)size, (uint64_t)(uintptr_t)stream);
	if (tok || !__atomic_load_n(&fs_frees_pending, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&fs_routes_active, __ATOMIC_ACQUIRE))
		return tok;
	process_frees(device, 1);
	return fs_model_alloc(device, (uint64_t)size, (uint64_t)(uintptr_t)stream);
}

static void *alloc_block(ssize_t size, int device, void *stream) {
	if (size <= 0)
		return NULL;
	fs_device *dv = device_ready(device);
	if (!dv)
		return NULL;
	if (__atomic_load_n(&fs_pools_pending, __ATOMIC_ACQUIRE) && recording())
		fs_pools_resolve(device, (uint64_t)(uintptr_t)stream); /* a capture's pool_begin (pools.cc) */
	CUcontext prev = with_ctx(dv);
	process_frees(device, 0); /* as PyTorch's malloc processes its events first */
	CUdeviceptr p = 0;
	int model = model_on(device);
	uint64_t tok = 0;
	if (model && !(tok = model_alloc(device, size, stream))) {
		oom(dv, device, size, stream, CUDA_ERROR_OUT_OF_MEMORY, prev); /* PyTorch's allocator would fail it */
		return NULL;
	}
	/* Every block is of its size class, so that any block the cache keeps
	 * serves every request of that class. */
	size_t cls = (size_t)fs_cache_class((uint64_t)size);
	CUresult r = CUDA_SUCCESS;
	if (fs_cache_on() && (p = fs_cache_take(device, (uint64_t)(uintptr_t)stream, cls))) {
		if (g_stats)
			atomic_fetch_add_explicit(&g_stat_hits, 1, memory_order_relaxed);
	} else {
		r = alloc_capped(dv, device, &p, cls, (CUstream)stream, !model);
	}
	if (r == CUDA_ERROR_OUT_OF_MEMORY) {
		/* Give cached memory back and retry once, like PyTorch's release-and-retry. */
		D.cuCtxSynchronize();
		fs_cache_release(device);
		process_frees(device, 1);
		D.cuMemPoolTrimTo(dv->pool, 0);
		r = alloc_capped(dv, device, &p, cls, (CUstream)stream, !model);
	}
	if (r != CUDA_SUCCESS) {
		if (model)
			fs_model_cancel(device, tok);
		oom(dv, device, size, stream, r, prev);
		return NULL;
	}
	if (model)
		fs_model_bind(device, tok, (uint64_t)p);
	restore_ctx(dv, prev);
	int64_t live = atomic_fetch_add_explicit(&g_live[device], size, memory_order_relaxed) + size;
	int64_t peak = atomic_load_explicit(&g_peak[device], memory_order_relaxed);
	while (live > peak && !atomic_compare_exchange_weak_explicit(&g_peak[device], &peak, live, memory_order_relaxed,
								      memory_order_relaxed))
		;
	if (recording()) {
		record(FS_REC_ALLOC, 0, device, (uint64_t)(uintptr_t)stream, (uint64_t)p, (uint64_t)size, 0);
		sample_if_grown(dv, device, live);
	}
	return (void *)(uintptr_t)p;
}

static void free_block(void *ptr, ssize_t size, int device, void *stream) {
	if (!ptr)
		return;
	fs_device *dv = device_ready(device);
	if (!dv)
		return;
	uint64_t n = size < 0 ? 0 : (uint64_t)size;
	if (__atomic_load_n(&fs_stream_uses, __ATOMIC_ACQUIRE)) {
		CUcontext prev = with_ctx(dv);
		int deferred = fs_streams_free(device, ptr, n, stream);
		restore_ctx(dv, prev);
		if (deferred) {
			if (model_on(device))
				fs_model_free(device, (uint64_t)(uintptr_t)ptr, 1); /* requested; completed by streams.cc */
			atomic_fetch_sub_explicit(&g_live[device], (int64_t)n, memory_order_relaxed);
			return;
		}
	}
	if (model_on(device))
		fs_model_free(device, (uint64_t)(uintptr_t)ptr, 3);
	if (recording())
		record(FS_REC_FREE, 0, device, (uint64_t)(uintptr_t)stream, (uint64_t)(uintptr_t)ptr, n, 0);
	atomic_fetch_sub_explicit(&g_live[device], (int64_t)n, memory_order_relaxed);
	CUcontext prev = with_ctx(dv);
	CUresult r = CUDA_SUCCESS;
	if (!n || !fs_cache_on() || !fs_cache_put(device, (uint64_t)(uintptr_t)stream, fs_cache_class(n), (CUdeviceptr)(uintptr_t)ptr))
		r = D.cuMemFreeAsync((CUdeviceptr)(uintptr_t)ptr, (CUstream)stream);
	restore_ctx(dv, prev);
	/* At exit, tensors die after the driver shut down: nothing to free then. */
	static _Atomic int reported;
	if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED && atomic_fetch_add(&reported, 1) < 5)
		fprintf(stderr, "fragsim: cuMemFreeAsync(%p) on device %d failed: %s (error %d)\n", ptr,
			device, cudrv_errstr(&D, r), r);
}

void fragsim_empty_cache(void) {
	int any = 0;
	for (int i = 0; i < FS_MAX_DEVICES; i++) {
		fs_device *dv = &g_dev[i];
		if (atomic_load_explicit(&dv->ready, memory_order_acquire) != 1)
			continue;
		any = 1;
		CUcontext prev = with_ctx(dv);
		D.cuCtxSynchronize();
		fs_cache_release(i);
		process_frees(i, 1);
		D.cuMemPoolTrimTo(dv->pool, 0);
		restore_ctx(dv, prev);
		if (model_on(i))
			fs_model_empty_cache(i);
		atomic_store_explicit(&g_res_seen[i], 0, memory_order_relaxed); /* the next allocation samples the pool again */
		if (recording())
			record(FS_REC_EMPTY_CACHE, 0, i, 0, 0, 0, 0);
	}
	if (!any && recording())
		record(FS_REC_EMPTY_CACHE, 0, 0, 0, 0, 0, 0);
}

/*
 * fragsim_set_fraction caps device's pool at fraction of the device's total
 * memory, as PyTorch's allocator caps its reserved bytes (1 removes the cap;
 * 0 refuses every allocation), and records the call when a trace can hold
 * it (a fraction in (0, 1]).
 */
void fragsim_set_fraction(double fraction, int device) {
	if (device < 0 || device >= FS_MAX_DEVICES || !(fraction >= 0 && fraction <= 1))
		return;
	char err[256];
	CUdevice d;
	size_t total = 0;
	uint64_t cap = 0;
	if (fs_driver_init(err, sizeof err) == 0 && D.cuDeviceGet(&d, device) == CUDA_SUCCESS)
		D.cuDeviceTotalMem(&total, d);
	if (fraction < 1 && total)
		cap = (uint64_t)(fraction * (double)total) + 1;
	atomic_store_explicit(&g_cap[device], cap, memory_order_relaxed);
	/* From the first fraction in (0, 1), PyTorch's allocator (model.go)
	 * decides the OOMs; it then follows every later fraction. */
	int started = atomic_load(&g_model[device]);
	if (total && (started || (fraction > 0 && fraction < 1)) && fs_model_start(device, fraction, (uint64_t)total)) {
		atomic_store_explicit(&g_model[device], 1, memory_order_release);
		int64_t live = atomic_load_explicit(&g_live[device], memory_order_relaxed);
		if (!started && live > 0) {
			char held[32];
			format_size(held, sizeof held, (uint64_t)live);
			fprintf(stderr,
				"fragsim: set_per_process_memory_fraction(%g) on device %d with %s already allocated: "
				"its out-of-memory errors are decided by a model of PyTorch's allocator that starts now, "
				"without those blocks, so the program may run out of memory later than under PyTorch "
				"(the trace replays exactly; set the fraction before the first allocation to record "
				"the same run)\n",
				fraction, device, held);
		}
	}
	if (!recording() || fraction == 0)
		return;
	uint64_t bits;
	memcpy(&bits, &fraction, sizeof bits);
	record(FS_REC_FRACTION, 0, device, 0, 0, 0, bits);
}

void fragsim_marker(int kind, const char *text) {
	if (!recording())
		return;
	size_t len = text ? strlen(text) : 0;
	if (len > FS_TEXT_MAX)
		len = FS_TEXT_MAX;
	record_text(FS_REC_MARKER, (uint8_t)kind, 0, 0, 0, len, 0, text, (uint32_t)len);
}

/*
 * fragsim_memory_stats fills out with device's live and peak requested
 * bytes and the pool's reserved bytes now and at their highest.
 */
void fragsim_memory_stats(int device, int64_t out[4]) {
	memset(out, 0, 4 * sizeof out[0]);
	if (device < 0 || device >= FS_MAX_DEVICES)
		return;
	out[0] = atomic_load(&g_live[device]);
	out[1] = atomic_load(&g_peak[device]);
	fs_device *dv = &g_dev[device];
	if (atomic_load_explicit(&dv->ready, memory_order_acquire) != 1)
		return;
	unsigned long long cur = 0, high = 0;
	D.cuMemPoolGetAttribute(dv->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &cur);
	D.cuMemPoolGetAttribute(dv->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high);
	out[2] = (int64_t)cur;
	out[3] = (int64_t)high;
}

/* fragsim_reset_peak sets device's peaks to the current values. */
void fragsim_reset_peak(int device) {
	if (device < 0 || device >= FS_MAX_DEVICES)
		return;
	atomic_store(&g_peak[device], atomic_load(&g_live[device]));
	fs_device *dv = &g_dev[device];
	if (atomic_load_explicit(&dv->ready, memory_order_acquire) != 1)
		return;
	unsigned long long zero = 0;
	D.cuMemPoolSetAttribute(dv->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
	D.cuMemPoolSetAttribute(dv->pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
}

/* fs_alloc_free_pairs allocates and frees n blocks of 1 KiB on stream 0x10 (benchmarks). */
void fs_alloc_free_pairs(long n) {
	for (long i = 0; i < n; i++) {
		void *p = fragsim_alloc(1024, 0, (void *)0x10);
		fragsim_free(p, 1024, 0, (void *)0x10);
	}
}

/*
 * metrics_model_start starts device's model of PyTorch's allocator, with no
 * memory fraction, for the metrics: from the device's first use it sees
 * every block. A later fraction caps it as usual.
 */
static void metrics_model_start(int device) {
	CUdevice d;
	size_t total = 0;
	if (atomic_load(&g_model[device]) || D.cuDeviceGet(&d, device) != CUDA_SUCCESS ||
	    D.cuDeviceTotalMem(&total, d) != CUDA_SUCCESS || !total)
		return;
	if (fs_model_start(device, 0, (uint64_t)total))
		atomic_store_explicit(&g_model[device], 1, memory_order_release);
}

/* fs_metrics_enable runs the model on every device from its first use
 * (the devices already in use start theirs now, without their live
 * blocks). */
void fs_metrics_enable(void) {
	pthread_mutex_lock(&g_init_mu);
	atomic_store(&g_metrics, 1);
	for (int i = 0; i < FS_MAX_DEVICES; i++)
		if (atomic_load_explicit(&g_dev[i].ready, memory_order_acquire) == 1)
			metrics_model_start(i);
	pthread_mutex_unlock(&g_init_mu);
}

/* fs_device_mem gives device's last memory sample and its OOMs so far:
 * 0 when no sample was taken. */
int fs_device_mem(int device, uint64_t *freeb, uint64_t *total, uint64_t *pool_reserved, uint64_t *ooms) {
	if (device < 0 || device >= FS_MAX_DEVICES)
		return 0;
	*ooms = atomic_load_explicit(&g_ooms[device], memory_order_relaxed);
	*freeb = atomic_load_explicit(&g_mem_free[device], memory_order_acquire);
	*total = atomic_load_explicit(&g_mem_total[device], memory_order_relaxed);
	*pool_reserved = atomic_load_explicit(&g_mem_res[device], memory_order_relaxed);
	return *total != 0;
}
