/*
 * cache.h: the recording allocator's reuse cache (cache.c), as the hook
 * (hook.c) uses it. The cache calls nothing of the hook: fs_cache_init
 * hands it the one driver call it makes and the count it watches.
 */
#ifndef FRAGSIM_CACHE_H
#define FRAGSIM_CACHE_H

#include <stdint.h>

#include "../csrc/cudrv.h"

#define FS_HIDDEN __attribute__((visibility("hidden")))

/* fs_cache_env is what the cache needs from the hook. */
typedef struct {
	/* free_async gives a block back to the pool on a stream (the
	 * driver's cuMemFreeAsync, loaded). */
	CUresult (*free_async)(CUdeviceptr ptr, CUstream stream);
	/* routes_active points at the count of private-pool routes open,
	 * read atomically: from the first one on, the cache takes and serves
	 * nothing. */
	const int *routes_active;
} fs_cache_env;

/* fs_cache_init gives the cache its environment, once the driver is
 * loaded and before the first allocation; until then it keeps nothing. */
FS_HIDDEN void fs_cache_init(const fs_cache_env *env);
/* fs_cache_class rounds a request up to its size class (512 bytes). */
FS_HIDDEN uint64_t fs_cache_class(uint64_t size);
/* fs_cache_on says whether the cache takes and serves blocks now. */
FS_HIDDEN int fs_cache_on(void);
/* fs_cache_take returns a kept block of size class size freed on stream,
 * the most recently freed one, or 0. */
FS_HIDDEN CUdeviceptr fs_cache_take(int device, uint64_t stream, uint64_t size);
/* fs_cache_put keeps ptr, a block of size class size freed on stream, and
 * says whether it did. */
FS_HIDDEN int fs_cache_put(int device, uint64_t stream, uint64_t size, CUdeviceptr ptr);
/* fs_cache_release gives every block kept for device back to the pool,
 * unless a route is open. The caller synchronized the device's context. */
FS_HIDDEN void fs_cache_release(int device);

#undef FS_HIDDEN

#endif
