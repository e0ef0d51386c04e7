// fakec10.cc: a stand-in for PyTorch's libc10.so with c10::Error and
// c10::OutOfMemoryError declared as c10 declares them (same names, same
// constructor), and fake_torch_alloc, which calls a pluggable allocator the
// way PyTorch's C++ does: an OutOfMemoryError thrown by the allocator is
// caught by type and handed to the fake torch, which raises
// torch.OutOfMemoryError. Built as libc10.so by the recording tests.
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <exception>
#include <string>
#include <vector>

namespace c10 {
struct SourceLocation {
	const char *function;
	const char *file;
	uint32_t line;
};

class __attribute__((visibility("default"))) Error : public std::exception {
	std::string msg_;
	std::vector<std::string> context_;
	std::string what_without_backtrace_;
	const void *caller_;

public:
	Error(SourceLocation loc, std::string msg);
	~Error() override;
	const char *what() const noexcept override { return what_without_backtrace_.c_str(); }
	const char *what_without_backtrace() const noexcept { return what_without_backtrace_.c_str(); }
};

class __attribute__((visibility("default"))) OutOfMemoryError : public Error {
	using Error::Error;
};

Error::Error(SourceLocation loc, std::string msg)
	: msg_(std::move(msg)), what_without_backtrace_(msg_), caller_(loc.function) {}
Error::~Error() = default;
} // namespace c10

typedef void *(*alloc_fn)(ssize_t, int, void *);

// fake_torch_alloc returns 0 with the block in *out, 1 for an
// OutOfMemoryError, 2 for another c10::Error, 3 for anything else thrown;
// msg gets the exception's text.
extern "C" __attribute__((visibility("default"))) int fake_torch_alloc(alloc_fn fn, ssize_t size, int device,
									  void *stream, void **out, char *msg,
									  size_t msglen) {
	try {
		*out = fn(size, device, stream);
		return 0;
	} catch (c10::OutOfMemoryError &e) {
		snprintf(msg, msglen, "%s", e.what_without_backtrace());
		return 1;
	} catch (c10::Error &e) {
		snprintf(msg, msglen, "%s", e.what());
		return 2;
	} catch (...) {
		snprintf(msg, msglen, "unknown exception");
		return 3;
	}
}

// fake_c10_touch makes sure OutOfMemoryError's type_info and vtable are in
// the library, as in PyTorch's.
extern "C" __attribute__((visibility("default"))) void fake_c10_touch(int n) {
	if (n == 12345)
		throw c10::OutOfMemoryError({"f", "f", 1}, "x");
}
