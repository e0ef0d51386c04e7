// pools_harness.cc: drives libfragsim_hook.so's private-pool hooks the way
// PyTorch's pluggable allocator does (each hook's address cast to the
// std::function's signature), around allocations of a capture and a MemPool.
//
//   pools_harness LIB TRACE
#include <stdint.h>
#include <sys/types.h>

#include "pytorch_abi.h"

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: pools_harness LIB TRACE\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "pools_harness: %s\n", dlerror());
		return 2;
	}
	auto open = (int (*)(const char *, const char *))sym(lib, "fragsim_open");
	auto close = (int (*)(void))sym(lib, "fragsim_close");
	auto alloc = (void *(*)(ssize_t, int, void *))sym(lib, "fragsim_alloc");
	auto fr = (void (*)(void *, ssize_t, int, void *))sym(lib, "fragsim_free");
	// As PyTorch stores them: std::functions of the hooks' addresses.
	std::function<BeginFn> begin = (BeginFn *)sym(lib, "fragsim_begin_allocate_to_pool");
	std::function<PoolFn> end = (PoolFn *)sym(lib, "fragsim_end_allocate_to_pool");
	std::function<PoolFn> release = (PoolFn *)sym(lib, "fragsim_release_pool");
	auto incref = (void (*)(unsigned long long, unsigned long long))sym(lib, "fragsim_pool_incref");
	if (open(argv[2], "{\"torch_version\":\"0.0-harness\"}") != 0)
		return 4;
	cudaStream_t side = (cudaStream_t)0x200, other = (cudaStream_t)0x300, main = (cudaStream_t)0x100;
	MempoolId_t graph{1, 0}, mem{0, 1};

	// A capture on side: its pool begins at side's first allocation.
	begin(0, graph, [side](cudaStream_t s) { return s == side; });
	void *a = alloc(1000, 0, other);
	void *b = alloc(2000, 0, side);
	fr(b, 2000, 0, side);
	end(0, graph);
	void *c = alloc(3000, 0, side);
	// A capture that allocates nothing records nothing.
	begin(0, MempoolId_t{2, 0}, [](cudaStream_t s) { return s == (cudaStream_t)0x400; });
	end(0, MempoolId_t{2, 0});
	// A MemPool made (its own use), then use_mem_pool: routed by thread.
	incref(0, 1);
	begin(0, mem, [](cudaStream_t) { return true; });
	void *d = alloc(4000, 0, main);
	end(0, mem);
	release(0, mem);   // use_mem_pool's exit: the MemPool still holds it
	release(0, graph); // the graph is freed
	release(0, mem);   // the MemPool is freed
	fr(a, 1000, 0, other);
	fr(c, 3000, 0, side);
	fr(d, 4000, 0, main);
	return close() == 0 ? 0 : 6;
}
