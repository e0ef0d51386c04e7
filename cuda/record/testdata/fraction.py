"""Test workload: allocations past set_per_process_memory_fraction's cap.

Usage: fraction.py FRACTION BLOCK
Allocates BLOCK-byte blocks until torch.OutOfMemoryError, prints
"oom after N: MESSAGE", frees one block and allocates once more (which
must succeed), then frees everything. A program that catches the OOM goes
on, as under PyTorch's own allocator.
"""
import sys

import torch

fraction, block = float(sys.argv[1]), int(sys.argv[2])
torch.cuda.set_per_process_memory_fraction(fraction)
held = []
try:
    for _ in range(10000):
        held.append(torch.cuda.alloc(block))
    sys.exit("no OOM")
except torch.OutOfMemoryError as e:
    print(f"oom after {len(held)}: {e}")
torch.cuda.free(held.pop(), block)
held.append(torch.cuda.alloc(block))
for p in held:
    torch.cuda.free(p, block)
