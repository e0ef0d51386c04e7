//go:build cgo

package cuda

/*
#cgo CFLAGS: -O2 -std=gnu11 -Wall -I${SRCDIR}/csrc
#cgo LDFLAGS: -ldl
#include "cudrv.h"

typedef struct {
	char name[256];
	size_t free_bytes, total_bytes, largest;
	int version, attempts;
} fs_probe_result;

static int fs_probe_try(cudrv *d, size_t n, int *attempts) {
	CUdeviceptr p = 0;
	(*attempts)++;
	if (d->cuMemAlloc(&p, n) != CUDA_SUCCESS)
		return 0;
	d->cuMemFree(p);
	return 1;
}

// fs_probe measures device ordinal: free and total memory, and the largest
// block cuMemAlloc grants, by bisection in steps of gran bytes.
static int fs_probe(int ordinal, size_t gran, fs_probe_result *out, char *err, size_t errlen) {
	cudrv d; // loaded afresh each time: dlopen only counts references
	if (cudrv_load(&d, err, errlen) != 0)
		return -1;
	size_t total = 0;
	if (cudrv_device_info(&d, ordinal, out->name, sizeof out->name, &total, &out->version, err, errlen) != 0)
		return -1;
	CUdevice dev;
	CUcontext ctx, prev = NULL;
	CUresult r = d.cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS)
		r = d.cuDevicePrimaryCtxRetain(&ctx, dev);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "device %d: cannot create a context: %s (error %d)", ordinal, cudrv_errstr(&d, r), r);
		return -1;
	}
	d.cuCtxGetCurrent(&prev);
	d.cuCtxSetCurrent(ctx);
	r = d.cuMemGetInfo(&out->free_bytes, &out->total_bytes);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "device %d: cuMemGetInfo: %s (error %d)", ordinal, cudrv_errstr(&d, r), r);
	} else {
		size_t lo = 0, hi = out->free_bytes / gran * gran;
		if (hi > 0 && fs_probe_try(&d, hi, &out->attempts)) {
			lo = hi;
		} else {
			while (hi - lo > gran) {
				size_t mid = lo + (hi - lo) / 2 / gran * gran;
				if (fs_probe_try(&d, mid, &out->attempts))
					lo = mid;
				else
					hi = mid;
			}
		}
		out->largest = lo;
	}
	d.cuCtxSetCurrent(prev);
	d.cuDevicePrimaryCtxRelease(dev);
	return r == CUDA_SUCCESS ? 0 : -1;
}
*/
import "C"

import (
	"errors"
	"fmt"
)

// Probe measures device's memory with the CUDA driver: free and total
// bytes, and the largest block allocatable right now (bisection with
// cuMemAlloc/cuMemFree, each block freed at once). It runs in this
// process, whose own CUDA context takes some memory.
func Probe(device int) (*ProbeResult, error) {
	if device < 0 {
		return nil, fmt.Errorf("device %d: want a CUDA device ordinal", device)
	}
	var out C.fs_probe_result
	var cerr [512]C.char
	if C.fs_probe(C.int(device), ProbeGranularity, &out, &cerr[0], C.size_t(len(cerr))) != 0 {
		return nil, errors.New(C.GoString(&cerr[0]))
	}
	return &ProbeResult{
		Device:            device,
		GPUName:           C.GoString(&out.name[0]),
		CUDAVersion:       cudaVersion(int(out.version)),
		FreeBytes:         uint64(out.free_bytes),
		TotalBytes:        uint64(out.total_bytes),
		LargestBlockBytes: uint64(out.largest),
		Attempts:          int(out.attempts),
	}, nil
}
