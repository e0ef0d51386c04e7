/*
 * harness.c: drives libfragsim_hook.so the way PyTorch does, from several
 * threads at once.
 *
 *   harness LIB TRACE THREADS CALLS        record, close, print counters
 *   harness LIB TRACE THREADS forever      record until killed
 *
 * Thread t allocates sizes (t+1)*100000 + j for j = 0, 1, ... on stream
 * 0x100+t, keeps 1 + t%4 blocks live and frees the oldest first. Thread 0
 * adds a step marker every 1000 calls. The forever mode pauses briefly
 * every 16 calls.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef void *(*alloc_fn)(ssize_t, int, void *);
typedef void (*free_fn)(void *, ssize_t, int, void *);

static alloc_fn fs_alloc;
static free_fn fs_free;
static void (*fs_marker)(int, const char *);
static long calls; /* < 0: forever */
static pthread_barrier_t start;

#define WMAX 4 /* most blocks a thread keeps */
#define RING (WMAX + 1)

static void *worker(void *arg) {
	long t = (long)arg;
	void *stream = (void *)(0x100 + t);
	int w = 1 + (int)(t % WMAX);
	void *live[RING];
	ssize_t sizes[RING];
	int head = 0, n = 0;
	pthread_barrier_wait(&start);
	for (long j = 0; calls < 0 || j < calls; j++) {
		ssize_t size = (t + 1) * 100000 + (calls < 0 ? j % 100000 : j);
		if (t == 0 && j % 1000 == 0) {
			char buf[32];
			snprintf(buf, sizeof buf, "%ld", j / 1000);
			fs_marker(1, buf);
		}
		if (calls < 0 && j % 16 == 15)
			usleep(100); /* a realistic rate: leave the drainer some CPU */
		void *p = fs_alloc(size, 0, stream);
		if (!p) {
			fprintf(stderr, "harness: thread %ld: alloc %zd failed\n", t, size);
			exit(3);
		}
		live[(head + n) % RING] = p;
		sizes[(head + n) % RING] = size;
		n++;
		if (n > w) {
			fs_free(live[head], sizes[head], 0, stream);
			head = (head + 1) % RING;
			n--;
		}
	}
	while (n > 0) {
		fs_free(live[head], sizes[head], 0, stream);
		head = (head + 1) % RING;
		n--;
	}
	return NULL;
}

#define SYM(var, name)                                                        \
	do {                                                                  \
		*(void **)(&var) = dlsym(lib, name);                          \
		if (!var) {                                                   \
			fprintf(stderr, "harness: no symbol %s\n", name);     \
			return 2;                                             \
		}                                                             \
	} while (0)

int main(int argc, char **argv) {
	if (argc != 5) {
		fprintf(stderr, "usage: harness LIB TRACE THREADS CALLS|forever\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "harness: %s\n", dlerror());
		return 2;
	}
	int (*fs_open)(const char *, const char *);
	int (*fs_close)(void);
	const char *(*fs_err)(void);
	void (*fs_empty)(void);
	void (*fs_fraction)(double, int);
	SYM(fs_alloc, "fragsim_alloc");
	SYM(fs_free, "fragsim_free");
	SYM(fs_marker, "fragsim_marker");
	SYM(fs_open, "fragsim_open");
	SYM(fs_close, "fragsim_close");
	SYM(fs_err, "fragsim_last_error");
	SYM(fs_empty, "fragsim_empty_cache");
	SYM(fs_fraction, "fragsim_set_fraction");

	int threads = atoi(argv[3]);
	calls = strcmp(argv[4], "forever") == 0 ? -1 : atol(argv[4]);
	if (fs_open(argv[2], "{\"torch_version\":\"0.0-harness\",\"command_line\":[\"harness\",\"run\"],"
			     "\"memory_fraction\":0.75,\"tags\":{\"test\":\"yes\"}}") != 0) {
		fprintf(stderr, "harness: fragsim_open: %s\n", fs_err());
		return 4;
	}
	/* One of each non-allocation call, then a refused allocation (OOM;
	 * the test sets FRAGSIM_OOM_RETURNS_NULL, or the process would stop). */
	fs_marker(2, "agent-a");
	fs_fraction(0.5, 0);
	void *big = fs_alloc(1LL << 50, 0, NULL);
	if (big) {
		fprintf(stderr, "harness: huge allocation succeeded\n");
		return 5;
	}
	fs_empty();

	pthread_t th[64];
	pthread_barrier_init(&start, NULL, (unsigned)threads);
	for (long t = 0; t < threads; t++)
		pthread_create(&th[t], NULL, worker, (void *)t);
	for (int t = 0; t < threads; t++)
		pthread_join(th[t], NULL);
	fs_marker(0, "done");
	void (*fs_stats)(int, long long *);
	SYM(fs_stats, "fragsim_memory_stats");
	long long st[4];
	fs_stats(0, st);
	if (fs_close() != 0) {
		fprintf(stderr, "harness: fragsim_close: %s\n", fs_err());
		return 6;
	}
	/* Served after close: not recorded. */
	void *late = fs_alloc(4096, 0, NULL);
	fs_free(late, 4096, 0, NULL);

	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void (*stats)(long long *, long long *, long long *, long long *, unsigned long long *) =
		cuda ? dlsym(cuda, "fake_stats") : NULL;
	if (!stats) {
		fprintf(stderr, "harness: fake libcuda not loaded\n");
		return 7;
	}
	long long a, f, l, tr;
	unsigned long long thr;
	stats(&a, &f, &l, &tr, &thr);
	printf("allocs=%lld frees=%lld live=%lld trims=%lld threshold=%llu stats=%lld,%lld,%lld,%lld\n", a, f, l, tr, thr,
	       st[0], st[1], st[2], st[3]);
	return 0;
}
