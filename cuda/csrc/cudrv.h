/*
 * cudrv.h: the few CUDA driver API types, constants and entry points fragsim
 * uses, loaded at run time with dlopen("libcuda.so.1") so that building needs
 * no CUDA headers or toolkit. Header-only: every function is static.
 */
#ifndef FRAGSIM_CUDRV_H
#define FRAGSIM_CUDRV_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_NOT_READY = 600,
};

/* cuEventCreate flags. */
enum { CU_EVENT_DISABLE_TIMING = 2 };

/* CUmemPool_attribute values. */
enum {
	CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
	CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
	CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
	CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
	CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
};

/* cudrv holds the driver entry points. */
typedef struct {
	void *handle;
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxGetCurrent)(CUcontext *);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemGetInfo)(size_t *, size_t *);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
	CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, int, void *);
	CUresult (*cuMemPoolGetAttribute)(CUmemoryPool, int, void *);
	CUresult (*cuMemPoolTrimTo)(CUmemoryPool, size_t);
	CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*cuEventCreate)(CUevent *, unsigned int);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventQuery)(CUevent);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventDestroy)(CUevent);
	CUresult (*cuGetErrorString)(CUresult, const char **);
} cudrv;

/* cudrv_errstr describes a driver result code. */
static inline const char *cudrv_errstr(const cudrv *d, CUresult r) {
	const char *s = NULL;
	if (d->cuGetErrorString && d->cuGetErrorString(r, &s) == CUDA_SUCCESS && s)
		return s;
	switch (r) {
	case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
	case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
	case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
	case CUDA_ERROR_NOT_INITIALIZED: return "driver not initialized";
	}
	return "unknown CUDA driver error";
}

/*
 * cudrv_load opens the driver library ($FRAGSIM_LIBCUDA, else libcuda.so.1),
 * resolves every entry point and calls cuInit(0). On failure it writes a
 * one-line reason to err and returns -1.
 */
static inline int cudrv_load(cudrv *d, char *err, size_t errlen) {
	const char *name = getenv("FRAGSIM_LIBCUDA");
	if (!name || !*name)
		name = "libcuda.so.1";
	memset(d, 0, sizeof *d);
	d->handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!d->handle) {
		const char *why = dlerror();
		snprintf(err, errlen,
			 "cannot load the CUDA driver library %s (no NVIDIA driver on this machine?): %s",
			 name, why ? why : "unknown error");
		return -1;
	}
#define CUDRV_SYM(field, sym)                                                              \
	do {                                                                               \
		*(void **)(&d->field) = dlsym(d->handle, sym);                             \
		if (!d->field) {                                                           \
			snprintf(err, errlen, "%s has no symbol %s (driver too old?)", name, sym); \
			return -1;                                                         \
		}                                                                          \
	} while (0)
	CUDRV_SYM(cuInit, "cuInit");
	CUDRV_SYM(cuDriverGetVersion, "cuDriverGetVersion");
	CUDRV_SYM(cuDeviceGetCount, "cuDeviceGetCount");
	CUDRV_SYM(cuDeviceGet, "cuDeviceGet");
	CUDRV_SYM(cuDeviceGetName, "cuDeviceGetName");
	CUDRV_SYM(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	CUDRV_SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	CUDRV_SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	CUDRV_SYM(cuCtxGetCurrent, "cuCtxGetCurrent");
	CUDRV_SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	CUDRV_SYM(cuCtxSynchronize, "cuCtxSynchronize");
	CUDRV_SYM(cuMemGetInfo, "cuMemGetInfo_v2");
	CUDRV_SYM(cuMemAlloc, "cuMemAlloc_v2");
	CUDRV_SYM(cuMemFree, "cuMemFree_v2");
	CUDRV_SYM(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool");
	CUDRV_SYM(cuMemPoolSetAttribute, "cuMemPoolSetAttribute");
	CUDRV_SYM(cuMemPoolGetAttribute, "cuMemPoolGetAttribute");
	CUDRV_SYM(cuMemPoolTrimTo, "cuMemPoolTrimTo");
	CUDRV_SYM(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
	CUDRV_SYM(cuMemFreeAsync, "cuMemFreeAsync");
	CUDRV_SYM(cuEventCreate, "cuEventCreate");
	CUDRV_SYM(cuEventRecord, "cuEventRecord");
	CUDRV_SYM(cuEventQuery, "cuEventQuery");
	CUDRV_SYM(cuEventSynchronize, "cuEventSynchronize");
	CUDRV_SYM(cuEventDestroy, "cuEventDestroy_v2");
#undef CUDRV_SYM
	*(void **)(&d->cuGetErrorString) = dlsym(d->handle, "cuGetErrorString");

	CUresult r = d->cuInit(0);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuInit failed: %s (error %d)", cudrv_errstr(d, r), r);
		return -1;
	}
	int n = 0;
	r = d->cuDeviceGetCount(&n);
	if (r != CUDA_SUCCESS || n <= 0) {
		snprintf(err, errlen, "no CUDA GPU is visible (cuDeviceGetCount: %d devices, error %d)", n, r);
		return -1;
	}
	return 0;
}

/*
 * cudrv_device_info fills name, total bytes and the driver API version of
 * device ordinal. Returns 0, or -1 with a reason in err.
 */
static inline int cudrv_device_info(const cudrv *d, int ordinal, char *name, int namelen,
			     size_t *total, int *version, char *err, size_t errlen) {
	CUdevice dev;
	CUresult r = d->cuDeviceGet(&dev, ordinal);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "device %d: %s (error %d)", ordinal, cudrv_errstr(d, r), r);
		return -1;
	}
	name[0] = 0;
	if (d->cuDeviceGetName(name, namelen, dev) != CUDA_SUCCESS)
		name[0] = 0;
	*total = 0;
	d->cuDeviceTotalMem(total, dev);
	*version = 0;
	d->cuDriverGetVersion(version);
	return 0;
}

#endif
