/* atexit.c: closes the trace at process exit when the host did not. */
#include <stdlib.h>
#include <unistd.h>
#include "_cgo_export.h"

static pid_t fs_owner;

/* fs_atexit closes the trace, except in a forked child (which has no Go runtime threads). */
static void fs_atexit(void) {
	if (getpid() == fs_owner)
		fragsim_close();
}

/* fs_register_atexit arranges for fragsim_close to run at exit(). */
void fs_register_atexit(void) {
	fs_owner = getpid();
	atexit(fs_atexit);
}

/* fs_close_trace closes the trace now (before the process dies of an error). */
void fs_close_trace(void) {
	if (getpid() == fs_owner)
		fragsim_close();
}
