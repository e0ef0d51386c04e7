/*
 * ring.h: the layout of the record buffers, a region that the recording
 * process writes and one drainer reads: a Go goroutine of the same process,
 * or the `fragsim record` parent, which maps the same file. The Go mirror
 * is package cuda/ring; every offset and size here is checked against it.
 *
 * The region is a header page, a table of per-thread queues, an area for
 * the trace header (JSON) and the chunks. Everything in it is addressed by
 * offsets or indices, never pointers, so that both processes can follow it.
 */
#ifndef FRAGSIM_RING_H
#define FRAGSIM_RING_H

#include <stdint.h>

#define FS_RING_MAGIC 0x31474e4952534746ULL /* "FGSRING1" little-endian */
#define FS_RING_VERSION 1
#define FS_CHUNK_RECS 1024
#define FS_MAX_QUEUES 1024
#define FS_SPARES 32           /* drained chunks a queue keeps for reuse */
#define FS_META_MAX (1u << 20) /* bytes of header JSON */
#define FS_TEXT_MAX (255 * 64) /* bytes of marker text kept */

/* Region states (fs_ring_hdr.state). */
enum {
	FS_RING_INIT = 0,   /* created, nobody records yet */
	FS_RING_OPEN = 1,   /* recording; meta holds the trace header */
	FS_RING_CLOSED = 2, /* the recording process closed the trace */
};

/* Queue states (fs_ring_queue.state). */
enum {
	FS_Q_FREE = 0,
	FS_Q_CLAIMING = 1, /* a thread is setting it up */
	FS_Q_LIVE = 2,
	FS_Q_DEAD = 3, /* the owner thread exited; the drainer frees it once empty */
};

/* Record kinds (mapped to trace kinds by the drainer). */
enum {
	FS_REC_ALLOC = 1,
	FS_REC_FREE = 2,
	FS_REC_OOM = 3,
	FS_REC_EMPTY_CACHE = 4,
	FS_REC_FRACTION = 5,
	FS_REC_MARKER = 6,
	FS_REC_DEVICE_MEM = 7,
	FS_REC_POOL_BEGIN = 8,   /* stream: the routed stream (0: every stream of a thread); aux: pool ID */
	FS_REC_POOL_END = 9,     /* as FS_REC_POOL_BEGIN */
	FS_REC_POOL_RELEASE = 10, /* aux: pool ID */
	FS_REC_FREE_REQUESTED = 11, /* a free deferred by record_stream (streams.cc); its memory is kept */
	FS_REC_FREE_COMPLETED = 12, /* the deferred free's streams completed: its memory went back */
};

/*
 * fs_rec is one recorded call. seq is a process-wide sequence number taken
 * after an allocation succeeded and before a free is handed to the driver,
 * so sorting by seq gives an order consistent with address reuse.
 * A marker's text (size bytes) fills the slots right after its record.
 */
typedef struct {
	uint64_t seq;
	int64_t time_ns;
	uint64_t addr; /* device_mem: the pool's reserved bytes */
	uint64_t size; /* marker: text bytes; device_mem: device free bytes */
	uint64_t stream;
	uint64_t aux; /* OOM: device free bytes; fraction: double bits; device_mem: device total bytes */
	int32_t device;
	int32_t tid;
	uint8_t kind;
	uint8_t marker;
	uint8_t pad[6];
} fs_rec;

typedef struct {
	uint64_t magic;
	uint32_t version;
	_Atomic uint32_t state;
	_Atomic uint64_t seq;       /* next sequence number */
	_Atomic uint64_t lost;      /* calls that found no room */
	_Atomic uint64_t brk;       /* chunks handed out from the never-used end */
	_Atomic uint64_t free_top;  /* free chunk stack: low 32 bits index+1 (0: empty), high 32 a tag */
	_Atomic uint64_t backed;    /* chunks the file is long enough for */
	uint64_t max_chunks;
	_Atomic uint32_t nqueues;   /* queues ever claimed (the drainer scans these) */
	_Atomic int32_t pid;        /* the recording process; 0 until one attached */
	_Atomic uint32_t meta_len;  /* bytes of header JSON in meta */
	uint32_t pad;
	uint8_t reserved[4096 - 80];
} fs_ring_hdr;

/* fs_ring_queue is one thread's buffer: chunks linked by index. */
typedef struct {
	_Atomic uint32_t state;
	int32_t tid;
	uint32_t write;  /* owner's current chunk */
	uint32_t read;   /* drainer's current chunk */
	uint32_t read_i; /* drainer's next record in read */
	_Atomic uint32_t spare_head; /* written by the drainer */
	_Atomic uint32_t spare_tail; /* written by the owner */
	uint32_t pad;
	uint32_t spare[FS_SPARES];
	uint8_t pad2[256 - 32 - 4 * FS_SPARES];
} fs_ring_queue;

typedef struct {
	_Atomic uint32_t n;         /* records published; written by the owner only */
	_Atomic uint32_t next;      /* index+1 of the owner's next chunk, set once it left this one */
	_Atomic uint32_t free_next; /* free stack link (index+1) */
	uint8_t pad[52];
	fs_rec recs[FS_CHUNK_RECS];
} fs_ring_chunk;

#define FS_RING_QUEUES_OFF 4096u
#define FS_RING_META_OFF (FS_RING_QUEUES_OFF + FS_MAX_QUEUES * 256u)
#define FS_RING_CHUNKS_OFF (FS_RING_META_OFF + FS_META_MAX)
/* The offsets package cuda/ring reads (its constants carry the same numbers). */
#include <stddef.h>
_Static_assert(sizeof(fs_rec) == 64 && offsetof(fs_rec, kind) == 56 && offsetof(fs_rec, device) == 48,
	       "fs_rec layout");
_Static_assert(sizeof(fs_ring_hdr) == 4096 && offsetof(fs_ring_hdr, state) == 12 && offsetof(fs_ring_hdr, seq) == 16 &&
		       offsetof(fs_ring_hdr, lost) == 24 && offsetof(fs_ring_hdr, brk) == 32 &&
		       offsetof(fs_ring_hdr, free_top) == 40 && offsetof(fs_ring_hdr, backed) == 48 &&
		       offsetof(fs_ring_hdr, max_chunks) == 56 && offsetof(fs_ring_hdr, nqueues) == 64 &&
		       offsetof(fs_ring_hdr, pid) == 68 && offsetof(fs_ring_hdr, meta_len) == 72,
	       "fs_ring_hdr layout");
_Static_assert(sizeof(fs_ring_queue) == 256 && offsetof(fs_ring_queue, write) == 8 &&
		       offsetof(fs_ring_queue, read) == 12 && offsetof(fs_ring_queue, read_i) == 16 &&
		       offsetof(fs_ring_queue, spare_head) == 20 && offsetof(fs_ring_queue, spare_tail) == 24 &&
		       offsetof(fs_ring_queue, spare) == 32,
	       "fs_ring_queue layout");
_Static_assert(sizeof(fs_ring_chunk) == 64 + FS_CHUNK_RECS * 64 && offsetof(fs_ring_chunk, next) == 4 &&
		       offsetof(fs_ring_chunk, free_next) == 8 && offsetof(fs_ring_chunk, recs) == 64,
	       "fs_ring_chunk layout");

#define FS_RING_SIZE(max_chunks) ((uint64_t)FS_RING_CHUNKS_OFF + (uint64_t)(max_chunks) * sizeof(fs_ring_chunk))

#endif
