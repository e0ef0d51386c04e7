// cache_harness.cc: drives libfragsim_hook.so's reuse cache (cache.c) the
// way PyTorch's pluggable allocator calls the hook, against the fake driver
// with FRAGSIM_HOOK_CACHE_MB=1 and FAKE_CUDA_CAPACITY=2000000. It prints
// what the driver saw after each step, and whether a block was reused.
//
//   cache_harness LIB TRACE
#include <stdint.h>
#include <sys/types.h>

#include "pytorch_abi.h"

typedef void StatsFn(long long *, long long *, long long *, long long *, unsigned long long *);
static StatsFn *stats;

static void show(const char *at) {
	long long a, f, live, tr;
	unsigned long long thr;
	stats(&a, &f, &live, &tr, &thr);
	printf("%s: allocs %lld frees %lld live %lld\n", at, a, f, live);
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: cache_harness LIB TRACE\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); // the driver the hook loads
	if (!lib || !cuda) {
		fprintf(stderr, "cache_harness: %s\n", dlerror());
		return 2;
	}
	stats = (StatsFn *)sym(cuda, "fake_stats");
	auto open = (int (*)(const char *, const char *))sym(lib, "fragsim_open");
	auto close = (int (*)(void))sym(lib, "fragsim_close");
	auto alloc = (void *(*)(ssize_t, int, void *))sym(lib, "fragsim_alloc");
	auto fr = (void (*)(void *, ssize_t, int, void *))sym(lib, "fragsim_free");
	auto empty = (void (*)(void))sym(lib, "fragsim_empty_cache");
	std::function<BeginFn> begin = (BeginFn *)sym(lib, "fragsim_begin_allocate_to_pool");
	std::function<PoolFn> end = (PoolFn *)sym(lib, "fragsim_end_allocate_to_pool");
	if (open(argv[2], "{\"torch_version\":\"0.0-harness\"}") != 0)
		return 4;
	cudaStream_t s1 = (cudaStream_t)0x100, s2 = (cudaStream_t)0x200;

	// A freed block serves the next request of its size class on its stream.
	void *a = alloc(1000, 0, s1);
	fr(a, 1000, 0, s1);
	show("a freed");
	void *b = alloc(900, 0, s1);
	printf("b is a: %d\n", b == a);
	fr(b, 900, 0, s1);
	// Another stream's request does not take it.
	void *c = alloc(1000, 0, s2);
	printf("c is a: %d\n", c == a);
	show("c allocated");
	fr(c, 1000, 0, s2);
	empty();
	show("emptied");

	// Past the limit (1 MiB), the least recently freed block goes back.
	void *d = alloc(400000, 0, s1), *e = alloc(400000, 0, s1), *f = alloc(400000, 0, s1);
	fr(d, 400000, 0, s1);
	fr(e, 400000, 0, s1);
	fr(f, 400000, 0, s1);
	show("d e f freed");
	void *g = alloc(400000, 0, s1);
	printf("g is f: %d\n", g == f);
	fr(g, 400000, 0, s1);

	// The driver refuses 1.5 MB next to the 800 KB kept: the retry gives
	// them back first. A block over the limit is not kept.
	void *h = alloc(1500000, 0, s2);
	printf("h allocated: %d\n", h != nullptr);
	show("h allocated");
	fr(h, 1500000, 0, s2);
	show("h freed");

	// From the first private-pool route on, nothing is kept.
	begin(0, MempoolId_t{1, 0}, [](cudaStream_t) { return true; });
	void *i = alloc(1000, 0, s1);
	end(0, MempoolId_t{1, 0});
	fr(i, 1000, 0, s1);
	void *j = alloc(1000, 0, s1);
	fr(j, 1000, 0, s1);
	show("after a route");
	if (close() != 0)
		return 6;
	return 0;
}
