// oom_oldabi.cc: calls c10::Error's constructor of a libc10 built with the
// pre-C++11 std::string (PyTorch's pip wheels before 2.7), whose string
// argument has another layout. This file alone is compiled with that ABI.
#define _GLIBCXX_USE_CXX11_ABI 0
#include <stdint.h>

#include <string>

namespace {
struct source_location {
	const char *function;
	const char *file;
	uint32_t line;
};
typedef void (*ctor_fn)(void *self, source_location loc, std::string msg);
} // namespace

// fs_c10_construct_oldabi constructs the c10::Error at obj with ctor, a
// constructor taking (SourceLocation, std::string) in the old string ABI.
extern "C" void fs_c10_construct_oldabi(void *ctor, void *obj, const char *function, const char *file,
					const char *msg) {
	((ctor_fn)ctor)(obj, source_location{function, file, 0}, std::string(msg));
}
