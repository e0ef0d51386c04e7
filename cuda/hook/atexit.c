/* atexit.c: closes the trace at process exit when the host did not. */
#include <stdlib.h>
#include "_cgo_export.h"

static void fs_atexit(void) { fragsim_close(); }

/* fs_register_atexit arranges for fragsim_close to run at exit(). */
void fs_register_atexit(void) { atexit(fs_atexit); }
