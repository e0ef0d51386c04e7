#!/usr/bin/env python3
"""Cost of one device call of each kind an allocator makes, measured on a GPU.

PyTorch's caching allocator takes memory with cudaMalloc and gives it back
with cudaFree; with expandable_segments:True it grows a segment by mapping
physical pages (cuMemCreate + cuMemMap + cuMemSetAccess) and shrinks it by
unmapping them (cuMemUnmap + cuMemRelease). This script times each of those
through the CUDA driver API (ctypes on libcuda.so.1: no toolkit, no torch),
on an idle device, for the sizes the allocator uses, and prints JSON:

  {"gpu": ..., "driver": ..., "malloc": {"<bytes>": {"alloc_us": median, "free_us": median}},
   "map": {"<page bytes>": {"map_us": ..., "unmap_us": ...}}, ...}

fragsim's cost model (analysis.DeviceCost) is fitted on this output:
  devcost.py --reps 50 > devcost.json
"""

import argparse
import ctypes
import json
import statistics
import sys
import time

MiB = 1 << 20


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CUmemAllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class CUmemAllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", CUmemLocation), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", CUmemAllocFlags)]


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", ctypes.c_int)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--lib", default="libcuda.so.1")
    a = p.parse_args()
    cu = ctypes.CDLL(a.lib)

    def ck(name, *args):
        r = getattr(cu, name)(*args)
        if r != 0:
            raise SystemExit(f"devcost: {name} failed with CUresult {r}")

    ck("cuInit", 0)
    dev = ctypes.c_int()
    ck("cuDeviceGet", ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    ck("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    ck("cuCtxSetCurrent", ctx)
    name = ctypes.create_string_buffer(256)
    ck("cuDeviceGetName", name, 256, dev)
    drv = ctypes.c_int()
    ck("cuDriverGetVersion", ctypes.byref(drv))
    total = ctypes.c_size_t()
    ck("cuDeviceTotalMem_v2", ctypes.byref(total), dev)
    clock = time.perf_counter_ns

    def timed(fn):
        t0 = clock()
        fn()
        return (clock() - t0) / 1e3

    out = {"gpu": name.value.decode(), "total_bytes": total.value, "cuda_driver_api": drv.value,
           "reps": a.reps, "malloc": {}, "map": {}}
    # A warm-up pair so the first timed call pays no lazy initialisation.
    ptr = ctypes.c_ulonglong()
    ck("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(2 * MiB))
    ck("cuMemFree_v2", ptr)

    for size in [2 * MiB, 20 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB, 4096 * MiB]:
        al, fr = [], []
        for _ in range(a.reps):
            al.append(timed(lambda: ck("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(size))))
            fr.append(timed(lambda: ck("cuMemFree_v2", ptr)))
        out["malloc"][str(size)] = {"alloc_us": statistics.median(al), "free_us": statistics.median(fr),
                                    "alloc_p90_us": sorted(al)[int(0.9 * len(al))],
                                    "free_p90_us": sorted(fr)[int(0.9 * len(fr))]}
        print(f"cuMemAlloc/cuMemFree {size >> 20:5d} MiB: {out['malloc'][str(size)]}", file=sys.stderr)

    prop = CUmemAllocationProp()
    prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = 1  # CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = dev.value
    gran = ctypes.c_size_t()
    ck("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(prop), 0)
    out["granularity_bytes"] = gran.value
    access = CUmemAccessDesc()
    access.location.type = 1
    access.location.id = dev.value
    access.flags = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    for page in [2 * MiB, 20 * MiB]:
        pages = 16
        va = ctypes.c_ulonglong()
        ck("cuMemAddressReserve", ctypes.byref(va), ctypes.c_size_t(page * pages), ctypes.c_size_t(0),
           ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
        mp, um = [], []
        handles = [ctypes.c_ulonglong() for _ in range(pages)]
        for _ in range(max(1, a.reps // pages) + 1):
            # Grow the segment page by page, as expandable segments do, then shrink it.
            for i, h in enumerate(handles):
                addr = ctypes.c_ulonglong(va.value + i * page)

                def grow():
                    ck("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(page), ctypes.byref(prop), ctypes.c_ulonglong(0))
                    ck("cuMemMap", addr, ctypes.c_size_t(page), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0))
                    ck("cuMemSetAccess", addr, ctypes.c_size_t(page), ctypes.byref(access), ctypes.c_size_t(1))
                mp.append(timed(grow))
            for i, h in enumerate(handles):
                addr = ctypes.c_ulonglong(va.value + i * page)

                def shrink():
                    ck("cuMemUnmap", addr, ctypes.c_size_t(page))
                    ck("cuMemRelease", h)
                um.append(timed(shrink))
        ck("cuMemAddressFree", va, ctypes.c_size_t(page * pages))
        out["map"][str(page)] = {"map_us": statistics.median(mp), "unmap_us": statistics.median(um),
                                 "map_p90_us": sorted(mp)[int(0.9 * len(mp))],
                                 "unmap_p90_us": sorted(um)[int(0.9 * len(um))]}
        print(f"map/unmap page {page >> 20:3d} MiB: {out['map'][str(page)]}", file=sys.stderr)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
