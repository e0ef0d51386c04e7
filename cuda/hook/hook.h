/*
 * hook.h: the C side of fragsim's recording allocator. The allocation hot
 * path lives here; the Go side only drains recorded events.
 */
#ifndef FRAGSIM_HOOK_H
#define FRAGSIM_HOOK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ring.h"

/* fs_driver_init loads the driver; 0 or -1 with a reason in err. */
int fs_driver_init(char *err, size_t errlen);
/* fs_device_info describes device ordinal for the trace header. */
int fs_device_info(int ordinal, char *name, int namelen, size_t *total, int *version, char *err, size_t errlen);
/* fs_set_recording turns recording on (1) or off (0). */
void fs_set_recording(int on);
/*
 * fs_ring_attach maps the region file at path, made by `fragsim record`;
 * fs_ring_anon makes a private region of max_chunks chunks for a drainer
 * in this process. Each returns 0, or -1 with a reason in err.
 */
int fs_ring_attach(const char *path, char *err, size_t errlen);
int fs_ring_anon(uint64_t max_chunks, char *err, size_t errlen);
/* fs_ring_base returns the region (NULL before one is set up) and its size in bytes. */
void *fs_ring_base(uint64_t *bytes);

/* fs_start_sampler starts the thread that samples device memory every 100 ms while recording; fs_stop_sampler ends it. */
void fs_start_sampler(void);
void fs_stop_sampler(void);

/* fs_metrics_enable runs the model of PyTorch's allocator (model.go) on every device from its first use. */
void fs_metrics_enable(void);
/* fs_device_mem gives device's last memory sample (free, total, the pool's reserved bytes) and its OOMs so far; 0 when no sample was taken. */
int fs_device_mem(int device, uint64_t *freeb, uint64_t *total, uint64_t *pool_reserved, uint64_t *ooms);

/* fs_alloc_free_pairs makes n alloc/free pairs (benchmarks). */
void fs_alloc_free_pairs(long n);

/* The exported allocator ABI (PyTorch's pluggable allocator plus extras). */
void *fragsim_alloc(ssize_t size, int device, void *stream);
void fragsim_free(void *ptr, ssize_t size, int device, void *stream);
void fragsim_record_stream(void *ptr, void *stream);
void fragsim_empty_cache(void);
void fragsim_set_fraction(double fraction, int device);
void fragsim_marker(int kind, const char *text);
void fragsim_memory_stats(int device, int64_t out[4]);
void fragsim_reset_peak(int device);

#endif
