// pytorch_abi.h: what the C++ harnesses share: the types PyTorch's
// pluggable allocator gives the hook's private-pool functions, sym, which
// looks a symbol up or stops the harness, and load, which opens the hook
// and its trace and returns the hook's entry points.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

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

// Hook holds the library's entry points, the hooks as PyTorch's pluggable
// allocator stores them (std::functions of their addresses), and the
// driver the library loaded (the fake one, for its counters).
struct Hook {
	int (*close)(void);
	void *(*alloc)(ssize_t, int, void *);
	void (*free)(void *, ssize_t, int, void *);
	void (*empty)(void);
	void (*fraction)(double, int);
	void (*incref)(unsigned long long, unsigned long long);
	std::function<void(void *, cudaStream_t)> use; // record_stream
	std::function<BeginFn> begin;
	std::function<PoolFn> end, release;
	void *cuda;
};

// load checks the harness's usage (NAME LIB TRACE), opens the library and
// its trace, and returns its entry points; it stops the harness on an error.
static Hook load(const char *name, int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: %s LIB TRACE\n", name);
		exit(2);
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	void *cuda = lib ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) : nullptr;
	if (!lib || !cuda) {
		fprintf(stderr, "%s: %s\n", name, dlerror());
		exit(2);
	}
	Hook h;
	h.close = (int (*)(void))sym(lib, "fragsim_close");
	h.alloc = (void *(*)(ssize_t, int, void *))sym(lib, "fragsim_alloc");
	h.free = (void (*)(void *, ssize_t, int, void *))sym(lib, "fragsim_free");
	h.empty = (void (*)(void))sym(lib, "fragsim_empty_cache");
	h.fraction = (void (*)(double, int))sym(lib, "fragsim_set_fraction");
	h.incref = (void (*)(unsigned long long, unsigned long long))sym(lib, "fragsim_pool_incref");
	h.use = (void (*)(void *, cudaStream_t))sym(lib, "fragsim_record_stream");
	h.begin = (BeginFn *)sym(lib, "fragsim_begin_allocate_to_pool");
	h.end = (PoolFn *)sym(lib, "fragsim_end_allocate_to_pool");
	h.release = (PoolFn *)sym(lib, "fragsim_release_pool");
	h.cuda = cuda;
	auto open = (int (*)(const char *, const char *))sym(lib, "fragsim_open");
	if (open(argv[2], "{\"torch_version\":\"0.0-harness\"}") != 0) {
		fprintf(stderr, "%s: cannot open %s\n", name, argv[2]);
		exit(4);
	}
	return h;
}
