// oom.cc: raises PyTorch's c10::OutOfMemoryError from fragsim_alloc, so that
// an allocation the hook refuses reaches the program as the
// torch.OutOfMemoryError the native allocator raises (PyTorch's pluggable
// allocator does not check for a null pointer).
//
// Nothing of PyTorch is needed to build: c10's constructor, destructor,
// type_info and vtable are looked up at run time in the libc10.so the
// process has loaded. The exception unwinds through fragsim_alloc (C,
// compiled with unwind tables) into PyTorch's frames, whose handlers turn
// it into the Python exception.
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <exception>
#include <string>
#include <typeinfo>

#pragma GCC visibility push(hidden)
namespace c10 {
// SourceLocation is c10's, by value in Error's constructor.
struct SourceLocation {
	const char *function;
	const char *file;
	uint32_t line;
};
// Stand-ins of the same names whose type_info is thrown when libc10 does
// not export OutOfMemoryError's: handlers match types by name, so one for
// c10::OutOfMemoryError, c10::Error or std::exception catches it.
class Error : public std::exception {};
class OutOfMemoryError : public Error {};
} // namespace c10
#pragma GCC visibility pop

namespace {

typedef void (*ctor_fn)(void *self, c10::SourceLocation loc, std::string msg);
typedef void (*dtor_fn)(void *self);

extern "C" void fs_c10_construct_oldabi(void *ctor, void *obj, const char *function, const char *file,
					const char *msg); // oom_oldabi.cc

struct c10_syms {
	ctor_fn ctor;
	void *ctor_oldabi; // the constructor of a libc10 built with the pre-C++11 std::string
	dtor_fn dtor;
	std::type_info *type;
	void **vtable;
};

c10_syms syms;
int found; // 1 once libc10's symbols are known
pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

// c10_path finds the loaded libc10.so.
int c10_path(struct dl_phdr_info *info, size_t, void *data) {
	const char *n = info->dlpi_name;
	if (!n || !*n)
		return 0;
	const char *base = strrchr(n, '/');
	base = base ? base + 1 : n;
	if (strcmp(base, "libc10.so") != 0 && strncmp(base, "libc10.so.", 10) != 0)
		return 0;
	*(const char **)data = n;
	return 1;
}

// resolve looks libc10's symbols up; 0 when libc10 or its constructor is absent.
int resolve() {
	pthread_mutex_lock(&mu);
	if (!found) {
		const char *path = nullptr;
		dl_iterate_phdr(c10_path, &path);
		void *h = path ? dlopen(path, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
		if (h) {
			// Error(SourceLocation, std::string), complete-object then base-object.
			void *ctor = dlsym(h, "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
			if (!ctor)
				ctor = dlsym(h, "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
			void *old = nullptr;
			if (!ctor) {
				old = dlsym(h, "_ZN3c105ErrorC1ENS_14SourceLocationESs");
				if (!old)
					old = dlsym(h, "_ZN3c105ErrorC2ENS_14SourceLocationESs");
			}
			if (ctor || old) {
				syms.ctor = (ctor_fn)ctor;
				syms.ctor_oldabi = old;
				syms.dtor = (dtor_fn)dlsym(h, "_ZN3c105ErrorD1Ev");
				syms.type = (std::type_info *)dlsym(h, "_ZTIN3c1016OutOfMemoryErrorE");
				syms.vtable = (void **)dlsym(h, "_ZTVN3c1016OutOfMemoryErrorE");
				found = 1;
			}
		}
	}
	int ok = found;
	pthread_mutex_unlock(&mu);
	return ok;
}

void no_dtor(void *) {}

} // namespace

// fs_oom_can_throw says whether fs_throw_oom can raise PyTorch's OOM here.
extern "C" int fs_oom_can_throw(void) { return resolve(); }

// fs_throw_oom throws c10::OutOfMemoryError(msg). It returns only when it
// cannot (no libc10 in the process).
extern "C" void fs_throw_oom(const char *msg) {
	if (!resolve())
		return;
	// Room for c10::Error with any version's members.
	const size_t size = 1024;
	void *obj = __cxxabiv1::__cxa_allocate_exception(size);
	memset(obj, 0, size);
	if (syms.ctor)
		syms.ctor(obj, c10::SourceLocation{"fragsim_alloc", "libfragsim_hook.so", 0}, std::string(msg));
	else
		fs_c10_construct_oldabi(syms.ctor_oldabi, obj, "fragsim_alloc", "libfragsim_hook.so", msg);
	if (syms.vtable) // the Itanium vtable symbol starts with offset-to-top and type_info
		*(void ***)obj = syms.vtable + 2;
	std::type_info *t = syms.type ? syms.type : const_cast<std::type_info *>(&typeid(c10::OutOfMemoryError));
	__cxxabiv1::__cxa_throw(obj, t, syms.dtor ? syms.dtor : no_dtor);
}
