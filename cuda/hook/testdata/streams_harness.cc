// streams_harness.cc: drives libfragsim_hook.so's record_stream hook the way
// PyTorch's pluggable allocator does, against the fake driver with
// FAKE_CUDA_EVENT_QUERIES=2 (an event is done at its second query). It
// prints the fake driver's live blocks and events where a deferred free
// must still hold its memory, and where it must have given it back.
//
//   streams_harness LIB TRACE
#include <stdint.h>

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
	Hook hook = load("streams_harness", argc, argv);
	stats = (StatsFn *)sym(hook.cuda, "fake_stats");
	events = (long long (*)(void))sym(hook.cuda, "fake_events");
	cudaStream_t main = (cudaStream_t)0x100, side = (cudaStream_t)0x200, other = (cudaStream_t)0x300;

	// A block used by a side stream: its free waits for the side stream.
	void *a = hook.alloc(1000, 0, main);
	hook.use(a, side);
	hook.use(a, main); // its own stream: no wait
	hook.free(a, 1000, 0, main);
	show("a freed");
	void *b = hook.alloc(2000, 0, main); // first query: not done
	show("b allocated");
	void *c = hook.alloc(3000, 0, main); // second query: done, a completes first
	show("c allocated");
	// Used by its own stream only: freed at once.
	void *d = hook.alloc(4000, 0, main);
	hook.use(d, main);
	hook.free(d, 4000, 0, main);
	// Two side streams; empty_cache waits for both.
	void *e = hook.alloc(5000, 0, main);
	hook.use(e, side);
	hook.use(e, other);
	hook.free(e, 5000, 0, main);
	show("e freed");
	hook.empty();
	show("emptied");
	// Freed while a capture may be under way: its events are recorded at
	// the first allocation after the route closed.
	hook.begin(0, MempoolId_t{1, 0}, [](cudaStream_t) { return true; });
	void *f = hook.alloc(6000, 0, main);
	hook.use(f, side);
	hook.free(f, 6000, 0, main);
	void *g = hook.alloc(7000, 0, main);
	show("g allocated in the capture");
	hook.end(0, MempoolId_t{1, 0});
	void *h = hook.alloc(8000, 0, main); // events recorded and queried once
	void *i = hook.alloc(9000, 0, main); // done
	show("i allocated");
	hook.free(b, 2000, 0, main);
	hook.free(c, 3000, 0, main);
	hook.free(g, 7000, 0, main);
	hook.free(h, 8000, 0, main);
	hook.free(i, 9000, 0, main);
	return hook.close() == 0 ? 0 : 6;
}
