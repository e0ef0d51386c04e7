// deferred_oom_harness.cc: under a memory fraction, an allocation that
// fits only once a free record_stream deferred has completed. PyTorch's
// allocator waits for the side stream in its release path and succeeds;
// so must the hook. Run against the fake driver with
// FAKE_CUDA_EVENT_QUERIES=1000 (no event is done when queried, only when
// waited for). Prints whether the allocation succeeded.
//
//   deferred_oom_harness LIB TRACE
#include <stdint.h>
#include <sys/types.h>

#include "pytorch_abi.h"

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: deferred_oom_harness LIB TRACE\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "deferred_oom_harness: %s\n", dlerror());
		return 2;
	}
	auto open = (int (*)(const char *, const char *))sym(lib, "fragsim_open");
	auto close = (int (*)(void))sym(lib, "fragsim_close");
	auto alloc = (void *(*)(ssize_t, int, void *))sym(lib, "fragsim_alloc");
	auto fr = (void (*)(void *, ssize_t, int, void *))sym(lib, "fragsim_free");
	auto fraction = (void (*)(double, int))sym(lib, "fragsim_set_fraction");
	std::function<void(void *, cudaStream_t)> use = (void (*)(void *, cudaStream_t))sym(lib, "fragsim_record_stream");
	if (open(argv[2], "{\"torch_version\":\"0.0-harness\"}") != 0)
		return 4;
	cudaStream_t main = (cudaStream_t)0x100, side = (cudaStream_t)0x200;
	const ssize_t MiB = 1 << 20;
	fraction(64.0 / (80 * 1024), 0); // 64 MiB of the fake's 80 GiB

	void *a = alloc(40 * MiB, 0, main);
	use(a, side);
	fr(a, 40 * MiB, 0, main); // deferred: the side stream is not done
	void *b = alloc(40 * MiB, 0, main);
	printf("a allocated: %d, b allocated: %d\n", a != nullptr, b != nullptr);
	if (b)
		fr(b, 40 * MiB, 0, main);
	if (close() != 0)
		return 6;
	return 0;
}
