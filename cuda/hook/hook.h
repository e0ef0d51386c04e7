/*
 * hook.h: the C side of fragsim's recording allocator. The allocation hot
 * path lives here; the Go side only drains recorded events.
 */
#ifndef FRAGSIM_HOOK_H
#define FRAGSIM_HOOK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Record kinds (C side; mapped to trace kinds by the Go drainer). */
enum {
	FS_REC_ALLOC = 1,
	FS_REC_FREE = 2,
	FS_REC_OOM = 3,
	FS_REC_EMPTY_CACHE = 4,
	FS_REC_FRACTION = 5,
	FS_REC_MARKER = 6,
};

/*
 * fs_rec is one recorded call. seq is a process-wide sequence number taken
 * after an allocation succeeded and before a free is handed to the driver,
 * so sorting by seq gives an order consistent with address reuse.
 */
typedef struct {
	uint64_t seq;
	int64_t time_ns;
	uint64_t addr;
	uint64_t size;
	uint64_t stream;
	uint64_t aux; /* OOM: device free bytes; fraction: double bits; marker: char* text (malloc'd) */
	int32_t device;
	int32_t tid;
	uint8_t kind;
	uint8_t marker;
	uint8_t pad[6];
} fs_rec;

/* fs_rec_text returns a marker record's text (owned by the record's reader). */
static inline char *fs_rec_text(const fs_rec *r) { return (char *)(uintptr_t)r->aux; }

/* fs_driver_init loads the driver; 0 or -1 with a reason in err. */
int fs_driver_init(char *err, size_t errlen);
/* fs_device_info describes device ordinal for the trace header. */
int fs_device_info(int ordinal, char *name, int namelen, size_t *total, int *version, char *err, size_t errlen);
/* fs_set_recording turns recording on (1) or off (0). */
void fs_set_recording(int on);
/* fs_drain copies up to max recorded calls into out and returns how many. */
size_t fs_drain(fs_rec *out, size_t max);
/* fs_lost returns the number of calls that could not be recorded (out of memory). */
uint64_t fs_lost(void);
/* fs_seq returns the next sequence number to be handed out. */
uint64_t fs_seq(void);

/* fs_alloc_free_pairs makes n alloc/free pairs (benchmarks). */
void fs_alloc_free_pairs(long n);

/* The exported allocator ABI (PyTorch's pluggable allocator plus extras). */
void *fragsim_alloc(ssize_t size, int device, void *stream);
void fragsim_free(void *ptr, ssize_t size, int device, void *stream);
void fragsim_empty_cache(void);
void fragsim_set_fraction(double fraction, int device);
void fragsim_marker(int kind, const char *text);
void fragsim_memory_stats(int device, int64_t out[4]);
void fragsim_reset_peak(int device);

#endif
