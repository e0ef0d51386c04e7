// late_fraction_harness.cc: a program that sets its memory fraction after
// it allocated, which the hook's model of PyTorch's allocator cannot
// count: the hook says so on stderr.
//
//   late_fraction_harness LIB TRACE
#include <stdint.h>

#include "pytorch_abi.h"

int main(int argc, char **argv) {
	Hook hook = load("late_fraction_harness", argc, argv);
	cudaStream_t main = (cudaStream_t)0x100;
	void *a = hook.alloc(10 << 20, 0, main);
	hook.fraction(0.5, 0);
	hook.fraction(0.25, 0); // the model follows: said once
	hook.free(a, 10 << 20, 0, main);
	return hook.close() == 0 ? 0 : 6;
}
