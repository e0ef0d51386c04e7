// pools_harness.cc: drives libfragsim_hook.so's private-pool hooks the way
// PyTorch's pluggable allocator does (each hook's address cast to the
// std::function's signature), around allocations of a capture and a MemPool.
//
//   pools_harness LIB TRACE
#include <stdint.h>

#include "pytorch_abi.h"

int main(int argc, char **argv) {
	Hook hook = load("pools_harness", argc, argv);
	cudaStream_t side = (cudaStream_t)0x200, other = (cudaStream_t)0x300, main = (cudaStream_t)0x100;
	MempoolId_t graph{1, 0}, mem{0, 1};

	// A capture on side: its pool begins at side's first allocation.
	hook.begin(0, graph, [side](cudaStream_t s) { return s == side; });
	void *a = hook.alloc(1000, 0, other);
	void *b = hook.alloc(2000, 0, side);
	hook.free(b, 2000, 0, side);
	hook.end(0, graph);
	void *c = hook.alloc(3000, 0, side);
	// A capture that allocates nothing records nothing.
	hook.begin(0, MempoolId_t{2, 0}, [](cudaStream_t s) { return s == (cudaStream_t)0x400; });
	hook.end(0, MempoolId_t{2, 0});
	// A MemPool made (its own use), then use_mem_pool: routed by thread.
	hook.incref(0, 1);
	hook.begin(0, mem, [](cudaStream_t) { return true; });
	void *d = hook.alloc(4000, 0, main);
	hook.end(0, mem);
	hook.release(0, mem);   // use_mem_pool's exit: the MemPool still holds it
	hook.release(0, graph); // the graph is freed
	hook.release(0, mem);   // the MemPool is freed
	hook.free(a, 1000, 0, other);
	hook.free(c, 3000, 0, side);
	hook.free(d, 4000, 0, main);
	return hook.close() == 0 ? 0 : 6;
}
