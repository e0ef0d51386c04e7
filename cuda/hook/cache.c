/*
 * cache.c: the recording allocator's reuse cache.
 *
 * A call into the stream-ordered pool costs 1.2-1.4 µs on an H200, where
 * PyTorch's caching allocator serves a cached block in a fraction of that;
 * on a workload making 90,000 calls a second that was most of the cost of
 * recording. So a freed block of at most FS_CACHE_MAX_BLOCK bytes is kept
 * here, and the next allocation of its size class (the request rounded up
 * to 512 bytes, as PyTorch rounds) on the same stream takes it back without
 * a driver call. Reusing a block on the stream that freed it is what
 * PyTorch's allocator does, and stream order makes it safe.
 *
 * Contract:
 *   - At most the cache's limit of bytes is kept per device (the
 *     FRAGSIM_HOOK_CACHE_MB environment variable, 256 MiB by default; 0
 *     turns the cache off); past it, the least recently freed blocks go
 *     back to the pool.
 *   - fs_cache_release gives every kept block back (empty_cache, and the
 *     retry after the pool refused an allocation), so the cache never
 *     makes an allocation fail.
 *   - From the first private-pool route on (a CUDA graph capture may be
 *     under way, and a graph's blocks must go back to the pool), the cache
 *     takes and serves nothing; what it holds is given back at the next
 *     release.
 *   - The trace is the same with and without it: requests are recorded
 *     as they come, and addresses are recorded as served.
 * The caller has the device's context current. The cache calls nothing of
 * the hook: what it needs comes through fs_cache_init (cache.h).
 */
#define _GNU_SOURCE
#include "cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define FS_CACHE_MAX_DEVICES 64
#define FS_CACHE_BUCKETS 4096
#define FS_CACHE_MAX_BLOCK (16ULL << 20)
#define FS_CACHE_DEFAULT_MB 256

/* A kept block: in its bucket's chain (newest first) and in the device's
 * list from least to most recently freed. */
typedef struct fs_kept {
	struct fs_kept *chain;
	struct fs_kept *older, *newer;
	uint64_t stream, size;
	CUdeviceptr ptr;
} fs_kept;

typedef struct {
	pthread_mutex_t lock; /* held for a few list operations: never across a driver call */
	fs_kept *bucket[FS_CACHE_BUCKETS];
	fs_kept *oldest, *newest;
	fs_kept *spare; /* unused nodes, chained through chain */
	uint64_t bytes;
} fs_cache;

static fs_cache g_cache[FS_CACHE_MAX_DEVICES] = {[0 ... FS_CACHE_MAX_DEVICES - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}};
static uint64_t g_limit;
static _Atomic int g_off; /* set once a route opened, or when the limit is 0 */
static fs_cache_env g_env;
static _Atomic int g_ready; /* set once fs_cache_init gave g_env */

__attribute__((constructor)) static void cache_init(void) {
	const char *s = getenv("FRAGSIM_HOOK_CACHE_MB");
	char *end;
	unsigned long long mb = FS_CACHE_DEFAULT_MB;
	if (s && *s) {
		mb = strtoull(s, &end, 10);
		if (*end)
			mb = FS_CACHE_DEFAULT_MB;
	}
	g_limit = (uint64_t)mb << 20;
	if (!g_limit)
		atomic_store(&g_off, 1);
}

void fs_cache_init(const fs_cache_env *env) {
	g_env = *env;
	atomic_store_explicit(&g_ready, 1, memory_order_release);
}

static inline int routes_active(void) { return __atomic_load_n(g_env.routes_active, __ATOMIC_ACQUIRE); }

static inline void lock(fs_cache *c) { pthread_mutex_lock(&c->lock); }

static inline void unlock(fs_cache *c) { pthread_mutex_unlock(&c->lock); }

static inline unsigned bucket_of(uint64_t stream, uint64_t size) {
	return (unsigned)(((stream * 0x9E3779B97F4A7C15ULL) ^ (size * 0xC2B2AE3D27D4EB4FULL)) >> 52);
}

/* unlink removes k from its bucket's chain and from the age list. */
static void unlink_kept(fs_cache *c, fs_kept *k) {
	fs_kept **pp = &c->bucket[bucket_of(k->stream, k->size)];
	while (*pp != k)
		pp = &(*pp)->chain;
	*pp = k->chain;
	if (k->older)
		k->older->newer = k->newer;
	else
		c->oldest = k->newer;
	if (k->newer)
		k->newer->older = k->older;
	else
		c->newest = k->older;
	c->bytes -= k->size;
}

/* give_back returns the blocks of list (chained through chain) to the pool
 * and their nodes to the spares: each on its stream, or with synced set
 * on the NULL stream (the device is idle: a stream the program destroyed
 * since must not be named). Called without the lock. */
static void give_back(fs_cache *c, fs_kept *list, int synced) {
	if (!list)
		return;
	fs_kept *last = list;
	for (fs_kept *k = list; k; k = k->chain) {
		g_env.free_async(k->ptr, synced ? NULL : (CUstream)(uintptr_t)k->stream);
		last = k;
	}
	lock(c);
	last->chain = c->spare;
	c->spare = list;
	unlock(c);
}

uint64_t fs_cache_class(uint64_t size) { return (size + 511) & ~511ULL; }

int fs_cache_on(void) {
	if (atomic_load_explicit(&g_off, memory_order_relaxed) || !atomic_load_explicit(&g_ready, memory_order_acquire))
		return 0;
	if (routes_active()) {
		atomic_store(&g_off, 1);
		return 0;
	}
	return 1;
}

/* fs_cache_take returns a kept block of size class size freed on stream,
 * the most recently freed one, or 0. */
CUdeviceptr fs_cache_take(int device, uint64_t stream, uint64_t size) {
	if (device < 0 || device >= FS_CACHE_MAX_DEVICES || size > FS_CACHE_MAX_BLOCK)
		return 0;
	fs_cache *c = &g_cache[device];
	CUdeviceptr p = 0;
	lock(c);
	for (fs_kept *k = c->bucket[bucket_of(stream, size)]; k; k = k->chain)
		if (k->stream == stream && k->size == size) {
			p = k->ptr;
			unlink_kept(c, k);
			k->chain = c->spare;
			c->spare = k;
			break;
		}
	unlock(c);
	return p;
}

/* fs_cache_put keeps ptr, a block of size class size freed on stream, and
 * says whether it did; the least recently freed blocks past the limit go
 * back to the pool. */
int fs_cache_put(int device, uint64_t stream, uint64_t size, CUdeviceptr ptr) {
	if (device < 0 || device >= FS_CACHE_MAX_DEVICES || size > FS_CACHE_MAX_BLOCK || size > g_limit)
		return 0;
	fs_cache *c = &g_cache[device];
	lock(c);
	fs_kept *k = c->spare;
	if (k)
		c->spare = k->chain;
	unlock(c);
	if (!k && !(k = malloc(sizeof *k)))
		return 0;
	*k = (fs_kept){.stream = stream, .size = size, .ptr = ptr};
	fs_kept *evicted = NULL;
	lock(c);
	while (c->bytes + size > g_limit) {
		fs_kept *o = c->oldest;
		unlink_kept(c, o);
		o->chain = evicted;
		evicted = o;
	}
	unsigned b = bucket_of(stream, size);
	k->chain = c->bucket[b];
	c->bucket[b] = k;
	k->older = c->newest;
	if (c->newest)
		c->newest->newer = k;
	else
		c->oldest = k;
	c->newest = k;
	c->bytes += size;
	unlock(c);
	give_back(c, evicted, 0);
	return 1;
}

/* fs_cache_release gives every block kept for device back to the pool,
 * unless a route is open (a capture must not see the frees). The caller
 * synchronized the device's context first. */
void fs_cache_release(int device) {
	if (device < 0 || device >= FS_CACHE_MAX_DEVICES || !atomic_load_explicit(&g_ready, memory_order_acquire) ||
	    routes_active())
		return;
	fs_cache *c = &g_cache[device];
	fs_kept *all = NULL;
	lock(c);
	for (fs_kept *k = c->oldest; k; k = k->newer) {
		k->chain = all;
		all = k;
	}
	for (int i = 0; i < FS_CACHE_BUCKETS; i++)
		c->bucket[i] = NULL;
	c->oldest = c->newest = NULL;
	c->bytes = 0;
	unlock(c);
	give_back(c, all, 1);
}
