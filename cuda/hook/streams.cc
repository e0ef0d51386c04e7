// streams.cc: record_stream, and the frees it defers, as PyTorch's caching
// allocator makes them (recordStream, insert_events, process_events,
// synchronize_and_free_events), so that a live recording holds the
// free_requested and free_completed the native allocator would have.
//
// fragsim_record_stream (given to CUDAPluggableAllocator's
// set_record_stream_fn) notes a stream that uses a block. When the block is
// freed and a stream other than its allocation stream used it, the free is
// deferred: free_requested is recorded, an event is recorded on each of
// those streams, and the block's memory is kept. The block's free completes
// when all its events have: at the first allocation on its device that
// finds them done (events are queried per stream, oldest first, stopping at
// the first not done, as process_events does), or when empty_cache or the
// out-of-memory retry waits for them. Then free_completed is recorded and
// the memory goes back to the pool, so no stream can still be using it.
//
// While a private-pool route is open a CUDA graph may be capturing, and an
// event recorded during a capture cannot be queried: as PyTorch does, such
// a free records its events at the first allocation after the routes
// closed.
#include <stdint.h>

#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../csrc/cudrv.h"

extern "C" {
__attribute__((visibility("hidden"))) const cudrv *fs_drv(void);
__attribute__((visibility("hidden"))) void fs_record_call(int kind, int device, uint64_t stream, uint64_t addr,
							   uint64_t size);
__attribute__((visibility("hidden"))) extern int fs_routes_active;
// fs_stream_uses counts the blocks with a recorded use; fs_frees_pending
// the deferred frees not completed. Read without the lock on the hot path.
__attribute__((visibility("hidden"))) extern int fs_stream_uses;
__attribute__((visibility("hidden"))) extern int fs_frees_pending;
}

namespace {

enum { kRequested = 11, kCompleted = 12 }; // FS_REC_FREE_* of ring.h

struct Deferred {
	int device;
	uint64_t ptr, size, stream; // stream: the allocation's
	std::vector<uint64_t> uses; // the other streams that used it
	int events;                 // events not completed
};

struct Ev {
	CUevent ev;
	Deferred *d;
};

std::mutex mu;
std::unordered_map<uint64_t, std::vector<uint64_t>> uses; // block -> streams that used it
std::map<std::pair<int, uint64_t>, std::deque<Ev>> waits; // (device, stream) -> events, oldest first
std::vector<Deferred *> afterCapture;                      // frees whose events wait for the routes to close

void publish() {
	__atomic_store_n(&fs_stream_uses, (int)uses.size(), __ATOMIC_RELEASE);
}

void addPending(int n) { __atomic_add_fetch(&fs_frees_pending, n, __ATOMIC_ACQ_REL); }

// complete records the free's completion and gives its memory back.
void complete(Deferred *d) {
	fs_record_call(kCompleted, d->device, d->stream, d->ptr, d->size);
	fs_drv()->cuMemFreeAsync((CUdeviceptr)d->ptr, (CUstream)(uintptr_t)d->stream);
	delete d;
	addPending(-1);
}

// insertEvents records an event on each stream that used d (the device's
// context is current). A stream whose event cannot be made or recorded is
// waited for at once.
void insertEvents(Deferred *d) {
	const cudrv *D = fs_drv();
	for (uint64_t s : d->uses) {
		CUevent ev = nullptr;
		if (D->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
			continue;
		}
		if (D->cuEventRecord(ev, (CUstream)(uintptr_t)s) != CUDA_SUCCESS) {
			D->cuEventDestroy(ev);
			continue;
		}
		waits[{d->device, s}].push_back(Ev{ev, d});
		d->events++;
	}
	if (d->events == 0)
		complete(d);
}

bool capturing() { return __atomic_load_n(&fs_routes_active, __ATOMIC_ACQUIRE) != 0; }

} // namespace

extern "C" {

// fragsim_record_stream notes that stream uses the block at ptr.
void fragsim_record_stream(void *ptr, void *stream) {
	if (!ptr)
		return;
	std::lock_guard<std::mutex> g(mu);
	auto &v = uses[(uint64_t)(uintptr_t)ptr];
	uint64_t s = (uint64_t)(uintptr_t)stream;
	for (uint64_t x : v)
		if (x == s)
			return;
	v.push_back(s);
	publish();
}

// fs_streams_free defers the free of the block at ptr when a stream other
// than its allocation stream used it, recording free_requested, and returns
// 1; it returns 0 when the caller frees the block at once. The device's
// context is current.
__attribute__((visibility("hidden"))) int fs_streams_free(int device, void *ptr, uint64_t size, void *stream) {
	uint64_t p = (uint64_t)(uintptr_t)ptr, s = (uint64_t)(uintptr_t)stream;
	std::lock_guard<std::mutex> g(mu);
	auto it = uses.find(p);
	if (it == uses.end())
		return 0;
	std::vector<uint64_t> others;
	for (uint64_t x : it->second)
		if (x != s)
			others.push_back(x);
	uses.erase(it);
	publish();
	if (others.empty())
		return 0;
	fs_record_call(kRequested, device, s, p, size);
	auto *d = new Deferred{device, p, size, s, std::move(others), 0};
	addPending(1);
	if (capturing())
		afterCapture.push_back(d);
	else
		insertEvents(d);
	return 1;
}

// fs_streams_process completes device's deferred frees whose events are
// done; with wait set, it waits for all of them (empty_cache, the retry
// after an out-of-memory). The device's context is current.
__attribute__((visibility("hidden"))) void fs_streams_process(int device, int wait) {
	const cudrv *D = fs_drv();
	std::lock_guard<std::mutex> g(mu);
	if (!wait && !afterCapture.empty() && !capturing()) {
		std::vector<Deferred *> keep;
		for (Deferred *d : afterCapture) {
			if (d->device == device)
				insertEvents(d);
			else
				keep.push_back(d);
		}
		afterCapture.swap(keep);
	}
	for (auto it = waits.begin(); it != waits.end();) {
		if (it->first.first != device) {
			++it;
			continue;
		}
		auto &q = it->second;
		while (!q.empty()) {
			Ev e = q.front();
			CUresult r = wait ? D->cuEventSynchronize(e.ev) : D->cuEventQuery(e.ev);
			if (r == CUDA_ERROR_NOT_READY)
				break;
			D->cuEventDestroy(e.ev);
			q.pop_front();
			if (--e.d->events == 0)
				complete(e.d);
		}
		it = q.empty() ? waits.erase(it) : std::next(it);
	}
}

} // extern "C"
