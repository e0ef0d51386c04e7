/*
 * fakecuda.c: a malloc-backed stand-in for libcuda.so.1, for tests on
 * machines without a GPU. It implements the driver entry points fragsim
 * uses, checks that the primary context is current where the real driver
 * needs one, and exposes counters through fake_stats.
 *
 * Environment: FAKE_CUDA_NO_DEVICE=1 makes cuInit fail with
 * CUDA_ERROR_NO_DEVICE; FAKE_CUDA_LIMIT=N refuses single allocations of
 * more than N bytes, FAKE_CUDA_CAPACITY=N an allocation that takes the
 * live bytes past N. Memory outside the pool, which cuMemGetInfo counts as
 * used: FAKE_CUDA_OUTSIDE bytes (a context), plus FAKE_CUDA_OUTSIDE_JUMP
 * bytes once FAKE_CUDA_OUTSIDE_AFTER allocations were made (kernels loaded
 * lazily). Events: an event is ready at its FAKE_CUDA_EVENT_QUERIES-th
 * cuEventQuery (default 1), or once cuEventSynchronize waited on it;
 * fake_events counts the events alive. FAKE_CUDA_DEVICES=N: N devices
 * (default 1), which share one pool and one context.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
#define TOTAL (80ULL << 30)

static int ctx_dummy, pool_dummy;
static __thread void *cur_ctx;
static _Atomic long long n_alloc, n_free, n_live, n_trim, live_bytes;
static unsigned long long threshold;

static unsigned long long limit(void) {
	const char *s = getenv("FAKE_CUDA_LIMIT");
	return s ? strtoull(s, NULL, 10) : ~0ULL;
}

static unsigned long long env_u64(const char *name) {
	const char *s = getenv(name);
	return s ? strtoull(s, NULL, 10) : 0;
}

static size_t outside(void) {
	unsigned long long o = env_u64("FAKE_CUDA_OUTSIDE");
	const char *after = getenv("FAKE_CUDA_OUTSIDE_AFTER");
	if (after && (unsigned long long)atomic_load(&n_alloc) >= strtoull(after, NULL, 10))
		o += env_u64("FAKE_CUDA_OUTSIDE_JUMP");
	return (size_t)o;
}

CUresult cuInit(unsigned int flags) {
	(void)flags;
	const char *s = getenv("FAKE_CUDA_NO_DEVICE");
	return s && *s == '1' ? 100 : 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
static int devices(void) {
	unsigned long long n = env_u64("FAKE_CUDA_DEVICES");
	return n > 0 && n <= 64 ? (int)n : 1;
}
CUresult cuDeviceGetCount(int *n) { *n = devices(); return 0; }
CUresult cuDeviceGet(int *d, int ordinal) {
	if (ordinal < 0 || ordinal >= devices())
		return 101;
	*d = ordinal;
	return 0;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
	(void)dev;
	strncpy(name, "Fake GPU", len);
	return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int dev) { (void)dev; *b = TOTAL; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = &ctx_dummy; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = cur_ctx; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { cur_ctx = ctx; return 0; }
CUresult cuCtxSynchronize(void) { return cur_ctx ? 0 : 201; }
CUresult cuMemGetInfo_v2(size_t *freeb, size_t *total) {
	if (!cur_ctx)
		return 201;
	*total = TOTAL;
	*freeb = TOTAL - (size_t)atomic_load(&live_bytes) - outside();
	return 0;
}
CUresult cuDeviceGetDefaultMemPool(void **pool, int dev) { (void)dev; *pool = &pool_dummy; return 0; }
CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
	if (pool != &pool_dummy)
		return 1;
	if (attr == 4)
		threshold = *(unsigned long long *)value;
	return 0;
}
CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value) {
	if (pool != &pool_dummy)
		return 1;
	unsigned long long *v = value;
	switch (attr) {
	case 4: *v = threshold; return 0;
	case 5: case 7: *v = (unsigned long long)atomic_load(&live_bytes); return 0;
	case 6: case 8: *v = (unsigned long long)atomic_load(&live_bytes) + 1; return 0; /* "high": distinguishable */
	}
	return 1;
}
CUresult cuMemPoolTrimTo(void *pool, size_t keep) {
	(void)keep;
	if (pool != &pool_dummy)
		return 1;
	atomic_fetch_add(&n_trim, 1);
	return 0;
}

/* Each block carries its size in a header so frees can account for it. */
static CUresult fake_alloc(unsigned long long *p, size_t size) {
	if (!cur_ctx)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	if (size == 0)
		return 1;
	if (size > limit())
		return 2;
	unsigned long long cap = env_u64("FAKE_CUDA_CAPACITY");
	if (cap && (unsigned long long)atomic_load(&live_bytes) + size > cap)
		return 2;
	size_t *b = malloc(size + 16);
	if (!b)
		return 2;
	b[0] = size;
	atomic_fetch_add(&n_alloc, 1);
	atomic_fetch_add(&n_live, 1);
	atomic_fetch_add(&live_bytes, (long long)size);
	*p = (unsigned long long)(uintptr_t)(b + 2);
	return 0;
}
static CUresult fake_free(unsigned long long p) {
	if (!cur_ctx)
		return 201;
	size_t *b = (size_t *)(uintptr_t)p - 2;
	atomic_fetch_add(&n_free, 1);
	atomic_fetch_sub(&n_live, 1);
	atomic_fetch_sub(&live_bytes, (long long)b[0]);
	free(b);
	return 0;
}
CUresult cuMemAllocFromPoolAsync(unsigned long long *p, size_t size, void *pool, void *stream) {
	(void)stream;
	if (pool != &pool_dummy)
		return 1;
	return fake_alloc(p, size);
}
CUresult cuMemFreeAsync(unsigned long long p, void *stream) { (void)stream; return fake_free(p); }
CUresult cuMemAlloc_v2(unsigned long long *p, size_t size) { return fake_alloc(p, size); }
CUresult cuMemFree_v2(unsigned long long p) { return fake_free(p); }
/* An event counts the queries left before it is ready. */
typedef struct {
	long left;
} fake_event;
static _Atomic long long n_events;

CUresult cuEventCreate(fake_event **e, unsigned int flags) {
	(void)flags;
	if (!cur_ctx)
		return 201;
	*e = calloc(1, sizeof **e);
	atomic_fetch_add(&n_events, 1);
	return 0;
}
CUresult cuEventRecord(fake_event *e, void *stream) {
	(void)stream;
	if (!cur_ctx)
		return 201;
	long q = (long)env_u64("FAKE_CUDA_EVENT_QUERIES");
	e->left = q > 0 ? q : 1;
	return 0;
}
CUresult cuEventQuery(fake_event *e) {
	if (!cur_ctx)
		return 201;
	return --e->left <= 0 ? 0 : 600; /* CUDA_ERROR_NOT_READY */
}
CUresult cuEventSynchronize(fake_event *e) {
	e->left = 0;
	return 0;
}
CUresult cuEventDestroy_v2(fake_event *e) {
	free(e);
	atomic_fetch_sub(&n_events, 1);
	return 0;
}

/* fake_events reports how many events are alive. */
long long fake_events(void) { return n_events; }

CUresult cuGetErrorString(CUresult r, const char **s) {
	*s = r == 2 ? "out of memory (fake)" : r == 100 ? "no CUDA-capable device is detected (fake)" : "fake error";
	return 0;
}

/* fake_stats reports the counters: allocations, frees, live, trims, release threshold. */
void fake_stats(long long *alloc, long long *freed, long long *live, long long *trims, unsigned long long *thr) {
	*alloc = n_alloc;
	*freed = n_free;
	*live = n_live;
	*trims = n_trim;
	*thr = threshold;
}
