// streams_harness.cc: drives libfragsim_hook.so's record_stream hook the way
// PyTorch's pluggable allocator does, against the fake driver with
// FAKE_CUDA_EVENT_QUERIES=2 (an event is done at its second query). It
// prints the fake driver's live blocks and events where a deferred free
// must still hold its memory, and where it must have given it back.
//
//   streams_harness LIB TRACE
#include <stdint.h>
#include <sys/types.h>

#include "pytorch_abi.h"

typedef void StatsFn(long long *, long long *, long long *, long long *, unsigned long long *);
static StatsFn *stats;
static long long (*events)(void);

static void show(const char *at) {
	long long a, f, live, tr;
	unsigned long long thr;
	stats(&a, &f, &live, &tr, &thr);
	printf("%s: live %lld events %lld\n", at, live, events());
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: streams_harness LIB TRACE\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); // the driver the hook loads
	if (!lib || !cuda) {
		fprintf(stderr, "streams_harness: %s\n", dlerror());
		return 2;
	}
	stats = (StatsFn *)sym(cuda, "fake_stats");
	events = (long long (*)(void))sym(cuda, "fake_events");
	auto open = (int (*)(const char *, const char *))sym(lib, "fragsim_open");
	auto close = (int (*)(void))sym(lib, "fragsim_close");
	auto alloc = (void *(*)(ssize_t, int, void *))sym(lib, "fragsim_alloc");
	auto fr = (void (*)(void *, ssize_t, int, void *))sym(lib, "fragsim_free");
	auto empty = (void (*)(void))sym(lib, "fragsim_empty_cache");
	// As PyTorch stores it: a std::function of the hook's address.
	std::function<void(void *, cudaStream_t)> use = (void (*)(void *, cudaStream_t))sym(lib, "fragsim_record_stream");
	std::function<BeginFn> begin = (BeginFn *)sym(lib, "fragsim_begin_allocate_to_pool");
	std::function<PoolFn> end = (PoolFn *)sym(lib, "fragsim_end_allocate_to_pool");
	if (open(argv[2], "{\"torch_version\":\"0.0-harness\"}") != 0)
		return 4;
	cudaStream_t main = (cudaStream_t)0x100, side = (cudaStream_t)0x200, other = (cudaStream_t)0x300;

	// A block used by a side stream: its free waits for the side stream.
	void *a = alloc(1000, 0, main);
	use(a, side);
	use(a, main); // its own stream: no wait
	fr(a, 1000, 0, main);
	show("a freed");
	void *b = alloc(2000, 0, main); // first query: not done
	show("b allocated");
	void *c = alloc(3000, 0, main); // second query: done, a completes first
	show("c allocated");
	// Used by its own stream only: freed at once.
	void *d = alloc(4000, 0, main);
	use(d, main);
	fr(d, 4000, 0, main);
	// Two side streams; empty_cache waits for both.
	void *e = alloc(5000, 0, main);
	use(e, side);
	use(e, other);
	fr(e, 5000, 0, main);
	show("e freed");
	empty();
	show("emptied");
	// Freed while a capture may be under way: its events are recorded at
	// the first allocation after the route closed.
	begin(0, MempoolId_t{1, 0}, [](cudaStream_t) { return true; });
	void *f = alloc(6000, 0, main);
	use(f, side);
	fr(f, 6000, 0, main);
	void *g = alloc(7000, 0, main);
	show("g allocated in the capture");
	end(0, MempoolId_t{1, 0});
	void *h = alloc(8000, 0, main); // events recorded and queried once
	void *i = alloc(9000, 0, main); // done
	show("i allocated");
	fr(b, 2000, 0, main);
	fr(c, 3000, 0, main);
	fr(g, 7000, 0, main);
	fr(h, 8000, 0, main);
	fr(i, 9000, 0, main);
	return close() == 0 ? 0 : 6;
}
