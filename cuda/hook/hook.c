/*
 * hook.c: fragsim's recording allocator, the hot path.
 *
 * Memory comes from each device's default stream-ordered pool
 * (cuMemAllocFromPoolAsync / cuMemFreeAsync) with the release threshold at
 * its maximum. Every call is appended to a buffer owned by the calling
 * thread: a singly linked list of fixed-size chunks that only that thread
 * writes and only the drainer (one Go goroutine) reads, so recording takes
 * no lock; the only shared write is one atomic increment of the sequence
 * counter.
 */
#define _GNU_SOURCE
#include "hook.h"
#include "../csrc/cudrv.h"

void fs_close_trace(void); /* atexit.c */

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FS_CHUNK_RECS 1024
#define FS_MAX_DEVICES 64
#define FS_SPARES 32 /* drained chunks a queue keeps for reuse */

typedef struct fs_chunk {
	_Atomic uint32_t n;              /* records published; written by the owner thread only */
	_Atomic(struct fs_chunk *) next; /* set by the owner once n == FS_CHUNK_RECS */
	fs_rec recs[FS_CHUNK_RECS];
} fs_chunk;

/*
 * fs_queue is one thread's buffer. Drained chunks go back to the owner
 * through spare, a ring with one writer (the drainer: head) and one reader
 * (the owner: tail), so that a thread in steady state allocates nothing.
 */
typedef struct fs_queue {
	fs_chunk *write;       /* owner thread's current chunk */
	fs_chunk *read;        /* drainer's current chunk; NULL once a dead thread is drained */
	uint32_t read_i;       /* drainer's index in read */
	_Atomic int dead;      /* the owner thread exited */
	struct fs_queue *next; /* registry link, immutable once published */
	int32_t tid;
	_Atomic uint32_t spare_head;
	_Atomic uint32_t spare_tail;
	fs_chunk *spare[FS_SPARES];
} fs_queue;

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

static _Atomic int g_recording;
static _Atomic uint64_t g_seq;
static _Atomic uint64_t g_lost;
static _Atomic(fs_queue *) g_queues;
static __thread fs_queue *t_queue;
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
	}
	pthread_mutex_unlock(&g_init_mu);
	return dv;
}

/* ---- per-thread buffers ---- */

/*
 * queue_thread_exit marks the exiting thread's queue dead. A later call on
 * the same thread (from another key's destructor) starts a new queue.
 */
static void queue_thread_exit(void *p) {
	fs_queue *q = p;
	t_queue = NULL;
	atomic_store_explicit(&q->dead, 1, memory_order_release);
}

static void make_key(void) { pthread_key_create(&g_queue_key, queue_thread_exit); }

/* new_chunk returns an empty chunk for q's owner: a spare one, else a new one. */
static fs_chunk *new_chunk(fs_queue *q) {
	fs_chunk *c;
	uint32_t t = atomic_load_explicit(&q->spare_tail, memory_order_relaxed);
	if (t != atomic_load_explicit(&q->spare_head, memory_order_acquire)) {
		c = q->spare[t % FS_SPARES];
		atomic_store_explicit(&q->spare_tail, t + 1, memory_order_release);
	} else if (!(c = malloc(sizeof *c))) {
		return NULL;
	}
	atomic_store_explicit(&c->n, 0, memory_order_relaxed);
	atomic_store_explicit(&c->next, NULL, memory_order_relaxed);
	return c;
}

/* recycle hands a drained chunk back to q's owner, or frees it. */
static void recycle(fs_queue *q, fs_chunk *c, int dead) {
	uint32_t h = atomic_load_explicit(&q->spare_head, memory_order_relaxed);
	if (!dead && h - atomic_load_explicit(&q->spare_tail, memory_order_acquire) < FS_SPARES) {
		q->spare[h % FS_SPARES] = c;
		atomic_store_explicit(&q->spare_head, h + 1, memory_order_release);
		return;
	}
	free(c);
}

/* retire frees a dead, fully drained queue's chunks. */
static void retire(fs_queue *q, fs_chunk *c) {
	free(c);
	uint32_t h = atomic_load_explicit(&q->spare_head, memory_order_relaxed);
	for (uint32_t t = atomic_load_explicit(&q->spare_tail, memory_order_acquire); t != h; t++)
		free(q->spare[t % FS_SPARES]);
	atomic_store_explicit(&q->spare_tail, h, memory_order_relaxed);
	q->read = NULL;
}

static fs_queue *thread_queue(void) {
	fs_queue *q = t_queue;
	if (q)
		return q;
	q = calloc(1, sizeof *q);
	fs_chunk *c = q ? new_chunk(q) : NULL;
	if (!c) {
		free(q);
		return NULL;
	}
	q->write = c;
	q->read = c;
	q->tid = (int32_t)syscall(SYS_gettid);
	pthread_once(&g_key_once, make_key);
	pthread_setspecific(g_queue_key, q);
	fs_queue *head = atomic_load_explicit(&g_queues, memory_order_relaxed);
	do {
		q->next = head;
	} while (!atomic_compare_exchange_weak_explicit(&g_queues, &head, q, memory_order_release,
							memory_order_relaxed));
	t_queue = q;
	return q;
}

/*
 * record appends one call. The slot is secured before the sequence number
 * is taken, so every number handed out is published (no gaps).
 */
static void record(uint8_t kind, uint8_t marker, int device, uint64_t stream, uint64_t addr,
		   uint64_t size, uint64_t aux) {
	fs_queue *q = thread_queue();
	if (!q) {
		atomic_fetch_add_explicit(&g_lost, 1, memory_order_relaxed);
		return;
	}
	fs_chunk *c = q->write;
	uint32_t n = atomic_load_explicit(&c->n, memory_order_relaxed);
	if (n == FS_CHUNK_RECS) {
		fs_chunk *nc = new_chunk(q);
		if (!nc) {
			atomic_fetch_add_explicit(&g_lost, 1, memory_order_relaxed);
			return;
		}
		atomic_store_explicit(&c->next, nc, memory_order_release);
		q->write = nc;
		c = nc;
		n = 0;
	}
	fs_rec *r = &c->recs[n];
	r->seq = atomic_fetch_add_explicit(&g_seq, 1, memory_order_seq_cst);
	r->time_ns = now_ns();
	r->addr = addr;
	r->size = size;
	r->stream = stream;
	r->aux = aux;
	r->device = device;
	r->tid = q->tid;
	r->kind = kind;
	r->marker = marker;
	atomic_store_explicit(&c->n, n + 1, memory_order_release);
}

static inline int recording(void) { return atomic_load_explicit(&g_recording, memory_order_relaxed); }

void fs_set_recording(int on) { atomic_store_explicit(&g_recording, on, memory_order_seq_cst); }

uint64_t fs_lost(void) { return atomic_load(&g_lost); }

uint64_t fs_seq(void) { return atomic_load(&g_seq); }

size_t fs_drain(fs_rec *out, size_t max) {
	size_t got = 0;
	for (fs_queue *q = atomic_load_explicit(&g_queues, memory_order_acquire); q && got < max;
	     q = q->next) {
		while (q->read && got < max) {
			/* Read dead before n: if the thread had exited, every record it made is visible. */
			int dead = atomic_load_explicit(&q->dead, memory_order_acquire);
			fs_chunk *c = q->read;
			uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
			uint32_t take = n - q->read_i;
			if (take > max - got)
				take = (uint32_t)(max - got);
			memcpy(out + got, c->recs + q->read_i, take * sizeof(fs_rec));
			got += take;
			q->read_i += take;
			if (q->read_i < FS_CHUNK_RECS) {
				if (dead && q->read_i == n &&
				    atomic_load_explicit(&c->next, memory_order_acquire) == NULL)
					retire(q, c);
				break;
			}
			fs_chunk *next = atomic_load_explicit(&c->next, memory_order_acquire);
			if (!next) {
				if (dead)
					retire(q, c);
				break;
			}
			recycle(q, c, dead);
			q->read = next;
			q->read_i = 0;
		}
	}
	return got;
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

void *fragsim_alloc(ssize_t size, int device, void *stream) {
	if (size <= 0)
		return NULL;
	fs_device *dv = device_ready(device);
	if (!dv)
		return NULL;
	CUcontext prev = with_ctx(dv);
	CUdeviceptr p = 0;
	CUresult r = D.cuMemAllocFromPoolAsync(&p, (size_t)size, dv->pool, (CUstream)stream);
	if (r == CUDA_ERROR_OUT_OF_MEMORY) {
		/* Give cached pool memory back and retry once, like PyTorch's release-and-retry. */
		D.cuCtxSynchronize();
		D.cuMemPoolTrimTo(dv->pool, 0);
		r = D.cuMemAllocFromPoolAsync(&p, (size_t)size, dv->pool, (CUstream)stream);
	}
	if (r != CUDA_SUCCESS) {
		size_t freeb = 0, total = 0;
		D.cuMemGetInfo(&freeb, &total);
		restore_ctx(dv, prev);
		if (recording())
			record(FS_REC_OOM, 0, device, (uint64_t)(uintptr_t)stream, 0, (uint64_t)size, freeb);
		fprintf(stderr, "fragsim: cannot allocate %zd bytes on device %d: %s (error %d, %zu bytes free)\n",
			size, device, cudrv_errstr(&D, r), r, freeb);
		const char *null_ok = getenv("FRAGSIM_OOM_RETURNS_NULL");
		if (r == CUDA_ERROR_OUT_OF_MEMORY && !(null_ok && *null_ok == '1')) {
			/*
			 * PyTorch's pluggable allocator does not check for NULL: the
			 * program would go on with a null tensor and fail later with
			 * an illegal memory access. Save the trace and stop here.
			 */
			fprintf(stderr, "fragsim: out of GPU memory; PyTorch's pluggable allocator cannot report it, "
					"so the process stops here (the trace is saved)\n");
			fs_close_trace();
			abort();
		}
		return NULL;
	}
	restore_ctx(dv, prev);
	int64_t live = atomic_fetch_add_explicit(&g_live[device], size, memory_order_relaxed) + size;
	int64_t peak = atomic_load_explicit(&g_peak[device], memory_order_relaxed);
	while (live > peak && !atomic_compare_exchange_weak_explicit(&g_peak[device], &peak, live, memory_order_relaxed,
								      memory_order_relaxed))
		;
	if (recording())
		record(FS_REC_ALLOC, 0, device, (uint64_t)(uintptr_t)stream, (uint64_t)p, (uint64_t)size, 0);
	return (void *)(uintptr_t)p;
}

void fragsim_free(void *ptr, ssize_t size, int device, void *stream) {
	if (!ptr)
		return;
	fs_device *dv = device_ready(device);
	if (!dv)
		return;
	if (recording())
		record(FS_REC_FREE, 0, device, (uint64_t)(uintptr_t)stream, (uint64_t)(uintptr_t)ptr,
		       (uint64_t)(size < 0 ? 0 : size), 0);
	atomic_fetch_sub_explicit(&g_live[device], size < 0 ? 0 : size, memory_order_relaxed);
	CUcontext prev = with_ctx(dv);
	CUresult r = D.cuMemFreeAsync((CUdeviceptr)(uintptr_t)ptr, (CUstream)stream);
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
		D.cuMemPoolTrimTo(dv->pool, 0);
		restore_ctx(dv, prev);
		if (recording())
			record(FS_REC_EMPTY_CACHE, 0, i, 0, 0, 0, 0);
	}
	if (!any && recording())
		record(FS_REC_EMPTY_CACHE, 0, 0, 0, 0, 0, 0);
}

void fragsim_set_fraction(double fraction, int device) {
	if (!recording())
		return;
	uint64_t bits;
	memcpy(&bits, &fraction, sizeof bits);
	record(FS_REC_FRACTION, 0, device, 0, 0, 0, bits);
}

void fragsim_marker(int kind, const char *text) {
	if (!recording())
		return;
	char *copy = strdup(text ? text : "");
	if (!copy) {
		atomic_fetch_add_explicit(&g_lost, 1, memory_order_relaxed);
		return;
	}
	record(FS_REC_MARKER, (uint8_t)kind, 0, 0, 0, 0, (uint64_t)(uintptr_t)copy);
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
