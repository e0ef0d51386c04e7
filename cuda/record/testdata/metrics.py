"""Test program: fragsim record's metrics endpoint (FRAGSIM_METRICS_ADDR).

Usage: metrics.py URL
Allocates and frees a pattern through the fake torch (large and small
blocks, freed out of order, so that PyTorch's allocator keeps split
segments), waits for the hook's device-memory sample, then fetches URL
twice and prints both texts as a JSON list.
"""
import json
import sys
import time
import urllib.request

import torch

url = sys.argv[1]
MiB = 1 << 20
sizes = [3 * MiB, 5 * MiB, 12 * MiB, 700 << 10, 300 << 10, 3 * MiB, 9 * MiB, 200 << 10, 1 * MiB, 6 * MiB]
held = [(torch.cuda.alloc(n, 7), n) for n in sizes]
for i in (1, 3, 6, 8, 2):
    p, n = held[i]
    torch.cuda.free(p, n, 7)
held.append((torch.cuda.alloc(2 * MiB, 7), 2 * MiB))
time.sleep(0.4)  # the sampler's next sample: the device's memory
texts = []
for _ in range(2):
    with urllib.request.urlopen(url, timeout=30) as r:
        texts.append(r.read().decode())
print(json.dumps(texts))
