// pools.cc: the pluggable allocator's private-pool hooks
// (CUDAPluggableAllocator's set_begin_allocate_to_pool,
// set_end_allocate_to_pool_fn and set_release_pool, given the addresses of
// the fragsim_*_pool functions below), recorded as pool_begin, pool_end and
// pool_release.
//
// PyTorch calls beginAllocateToPool(device, pool, filter) when a CUDA graph
// capture begins (filter: is this stream capturing into this graph?) and
// when use_mem_pool routes the current thread to a MemPool (filter: is this
// the thread?). The filter names no stream, and is only asked about the
// streams of allocations, as PyTorch's own allocator asks it: pool_begin is
// recorded at the first allocation on a stream the filter takes, with that
// stream, just before the allocation. A route that allocates nothing
// records nothing.
//
// releasePool is recorded as pool_release when the pool's use count drops
// to 0, as PyTorch makes the pool freeable then: each begin counts one
// use, each release drops one, and fragsim_pool_incref counts the one a
// MemPool object holds (its constructor's, which no hook sees; the Python
// side calls it).
#include <stdint.h>

#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

struct CUstream_st;
typedef CUstream_st *cudaStream_t;
// c10::cuda::MempoolId_t.
typedef std::pair<unsigned long long, unsigned long long> MempoolId_t;
typedef std::function<bool(cudaStream_t)> Filter;

extern "C" {
__attribute__((visibility("hidden"))) void fs_record_pool(int kind, int device, uint64_t stream, uint64_t pool);
__attribute__((visibility("hidden"))) extern int fs_pools_pending;
__attribute__((visibility("hidden"))) extern int fs_routes_active;
}

namespace {

enum { kBegin = 8, kEnd = 9, kRelease = 10 }; // FS_REC_POOL_* of ring.h

// poolID folds a MempoolId_t as trace.PoolID does.
uint64_t poolID(MempoolId_t id) { return id.first != 0 ? id.first : (id.second | 1ull << 63); }

struct Route {
	int device;
	uint64_t pool;
	Filter filter;
	bool begun;
	uint64_t stream;
};

std::mutex mu;
std::vector<Route> routes;                 // routes begun and not ended
std::unordered_map<uint64_t, long> uses;   // pool -> use count
int pending;                               // routes not begun yet

void setPending() { __atomic_store_n(&fs_pools_pending, pending, __ATOMIC_RELEASE); }

// setActive publishes how many routes are open: while one is, a CUDA graph
// may be capturing, and the device-memory sampler keeps off the driver
// (in global capture mode any thread's query can invalidate the capture).
void setActive() { __atomic_store_n(&fs_routes_active, (int)routes.size(), __ATOMIC_RELEASE); }

} // namespace

extern "C" {

void fragsim_begin_allocate_to_pool(int device, MempoolId_t id, Filter filter) {
	uint64_t pool = poolID(id);
	std::lock_guard<std::mutex> g(mu);
	uses[pool]++;
	routes.push_back(Route{device, pool, std::move(filter), false, 0});
	pending++;
	setPending();
	setActive();
}

// fragsim_pool_incref counts the use a MemPool object holds of its pool.
void fragsim_pool_incref(unsigned long long a, unsigned long long b) {
	std::lock_guard<std::mutex> g(mu);
	uses[poolID(MempoolId_t{a, b})]++;
}

void fragsim_end_allocate_to_pool(int device, MempoolId_t id) {
	uint64_t pool = poolID(id);
	std::lock_guard<std::mutex> g(mu);
	for (auto r = routes.rbegin(); r != routes.rend(); ++r) {
		if (r->pool != pool || r->device != device)
			continue;
		if (r->begun) {
			fs_record_pool(kEnd, device, r->stream, pool);
		} else {
			pending--;
			setPending();
		}
		routes.erase(std::next(r).base());
		setActive();
		return;
	}
}

void fragsim_release_pool(int device, MempoolId_t id) {
	uint64_t pool = poolID(id);
	std::lock_guard<std::mutex> g(mu);
	auto it = uses.find(pool);
	if (it == uses.end() || --it->second > 0)
		return;
	uses.erase(it);
	fs_record_pool(kRelease, device, 0, pool);
}

// fs_pools_resolve records the pool_begin of each route not begun yet
// whose filter takes stream: called by fragsim_alloc, before it records
// an allocation on stream, while fs_pools_pending is set.
__attribute__((visibility("hidden"))) void fs_pools_resolve(int device, uint64_t stream) {
	std::lock_guard<std::mutex> g(mu);
	for (auto &r : routes) {
		if (r.begun || r.device != device)
			continue;
		bool takes = false;
		try {
			takes = r.filter((cudaStream_t)(uintptr_t)stream);
		} catch (...) {
		}
		if (!takes)
			continue;
		r.begun = true;
		r.stream = stream;
		fs_record_pool(kBegin, device, stream, r.pool);
		pending--;
	}
	setPending();
}

} // extern "C"
