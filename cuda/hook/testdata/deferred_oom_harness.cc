// deferred_oom_harness.cc: under a memory fraction, an allocation that
// fits only once a free record_stream deferred has completed. PyTorch's
// allocator waits for the side stream in its release path and succeeds;
// so must the hook. Run against the fake driver with
// FAKE_CUDA_EVENT_QUERIES=1000 (no event is done when queried, only when
// waited for). Prints whether the allocation succeeded.
//
//   deferred_oom_harness LIB TRACE
#include <stdint.h>

#include "pytorch_abi.h"

int main(int argc, char **argv) {
	Hook hook = load("deferred_oom_harness", argc, argv);
	cudaStream_t main = (cudaStream_t)0x100, side = (cudaStream_t)0x200;
	const ssize_t MiB = 1 << 20;
	hook.fraction(64.0 / (80 * 1024), 0); // 64 MiB of the fake's 80 GiB

	void *a = hook.alloc(40 * MiB, 0, main);
	hook.use(a, side);
	hook.free(a, 40 * MiB, 0, main); // deferred: the side stream is not done
	void *b = hook.alloc(40 * MiB, 0, main);
	printf("a allocated: %d, b allocated: %d\n", a != nullptr, b != nullptr);
	if (b)
		hook.free(b, 40 * MiB, 0, main);
	if (hook.close() != 0)
		return 6;
	return 0;
}
