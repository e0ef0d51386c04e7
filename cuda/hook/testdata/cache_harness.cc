// cache_harness.cc: drives libfragsim_hook.so's reuse cache (cache.c) the
// way PyTorch's pluggable allocator calls the hook, against the fake driver
// with FRAGSIM_HOOK_CACHE_MB=1 and FAKE_CUDA_CAPACITY=2000000. It prints
// what the driver saw after each step, and whether a block was reused.
//
//   cache_harness LIB TRACE
#include <stdint.h>

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
	Hook hook = load("cache_harness", argc, argv);
	stats = (StatsFn *)sym(hook.cuda, "fake_stats");
	cudaStream_t s1 = (cudaStream_t)0x100, s2 = (cudaStream_t)0x200;

	// A freed block serves the next request of its size class on its stream.
	void *a = hook.alloc(1000, 0, s1);
	hook.free(a, 1000, 0, s1);
	show("a freed");
	void *b = hook.alloc(900, 0, s1);
	printf("b is a: %d\n", b == a);
	hook.free(b, 900, 0, s1);
	// Another stream's request does not take it.
	void *c = hook.alloc(1000, 0, s2);
	printf("c is a: %d\n", c == a);
	show("c allocated");
	hook.free(c, 1000, 0, s2);
	hook.empty();
	show("emptied");

	// Past the limit (1 MiB), the least recently freed block goes back.
	void *d = hook.alloc(400000, 0, s1), *e = hook.alloc(400000, 0, s1), *f = hook.alloc(400000, 0, s1);
	hook.free(d, 400000, 0, s1);
	hook.free(e, 400000, 0, s1);
	hook.free(f, 400000, 0, s1);
	show("d e f freed");
	void *g = hook.alloc(400000, 0, s1);
	printf("g is f: %d\n", g == f);
	hook.free(g, 400000, 0, s1);

	// The driver refuses 1.5 MB next to the 800 KB kept: the retry gives
	// them back first. A block over the limit is not kept.
	void *h = hook.alloc(1500000, 0, s2);
	printf("h allocated: %d\n", h != nullptr);
	show("h allocated");
	hook.free(h, 1500000, 0, s2);
	show("h freed");

	// From the first private-pool route on, nothing is kept.
	hook.begin(0, MempoolId_t{1, 0}, [](cudaStream_t) { return true; });
	void *i = hook.alloc(1000, 0, s1);
	hook.end(0, MempoolId_t{1, 0});
	hook.free(i, 1000, 0, s1);
	void *j = hook.alloc(1000, 0, s1);
	hook.free(j, 1000, 0, s1);
	show("after a route");
	if (hook.close() != 0)
		return 6;
	return 0;
}
