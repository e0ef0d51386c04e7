#!/usr/bin/env python3
"""A small snapshot with Python call stacks on every entry, as PyTorch 2.11
writes it with context="all" (context=None, as the other workloads use,
records no stacks): four matmul layers, 20 steps, 783 trace entries.
trace/pytorch/testdata/real/stacks.pickle.gz was made with it on an H200.

  python3 stacks.py OUT.pickle"""
import sys

import torch

torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=100000)


def layer(x, n):
    return torch.relu(x @ torch.randn(n, n, device="cuda"))


def model(x):
    for i in range(4):
        x = layer(x, x.shape[1])
    return x


for step in range(20):
    x = torch.randn(64, 256, device="cuda")
    y = model(x)
    del x, y
torch.cuda.memory._dump_snapshot(sys.argv[1])
