"""Test workload: a block used by a side stream (record_stream), then freed.

Usage: streams.py
Under the fake driver with FAKE_CUDA_EVENT_QUERIES=2, the free waits for
the side stream's event: one allocation finds it not done, the next done.
"""
import torch

a = torch.cuda.alloc(1000, 7)
torch.cuda.record_stream(a, 9)
torch.cuda.free(a, 1000, 7)
b = torch.cuda.alloc(2000, 7)
c = torch.cuda.alloc(3000, 7)
torch.cuda.free(b, 2000, 7)
torch.cuda.free(c, 3000, 7)
