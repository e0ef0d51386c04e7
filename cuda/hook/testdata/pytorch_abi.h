// pytorch_abi.h: what the C++ harnesses share: the types PyTorch's
// pluggable allocator gives the hook's private-pool functions, and sym, which
// looks a symbol up or stops the harness.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <functional>
#include <utility>

struct CUstream_st;
typedef CUstream_st *cudaStream_t;
typedef std::pair<unsigned long long, unsigned long long> MempoolId_t;
typedef void BeginFn(int, MempoolId_t, std::function<bool(cudaStream_t)>);
typedef void PoolFn(int, MempoolId_t);

static void *sym(void *lib, const char *name) {
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "harness: no symbol %s\n", name);
		exit(2);
	}
	return p;
}
