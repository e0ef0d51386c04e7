#!/usr/bin/env python3
"""Cost of one tensor allocation + free through PyTorch's current allocator.

Allocates and frees N tensors of each size in a tight loop (no kernels) and
prints microseconds per alloc+free pair: run it plainly, with
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, and under `fragsim record`
to see what each allocator path costs per call.

  percall.py [--n 200000]
"""
import argparse
import json
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=200_000)
a = p.parse_args()
import torch

torch.empty(1, device="cuda")
out = {"allocator": "fragsim record" if os.environ.get("FRAGSIM_TRACE") else
       os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "native"}
for size in (512, 1 << 20, 16 << 20):
    n = a.n
    for _ in range(1000):  # warm the cache or pool
        del_me = torch.empty(size, dtype=torch.uint8, device="cuda")
        del del_me
    t0 = time.perf_counter()
    for _ in range(n):
        x = torch.empty(size, dtype=torch.uint8, device="cuda")
        del x
    out[f"us_per_pair_{size}"] = (time.perf_counter() - t0) / n * 1e6
print("FRAGSIM_PERCALL " + json.dumps(out), flush=True)
