"""Test workload: allocations through the fake torch, markers, cache calls.

Usage: workload.py STEPS EXIT_CODE [READY_FILE]
With READY_FILE it writes the file after the steps and sleeps (to be signalled).
With WORKLOAD_FORK=1 it forks a child that exits normally.
"""
import os
import sys
import time

import fragsim_marker
import torch

steps, code = int(sys.argv[1]), int(sys.argv[2])
fragsim_marker.agent("a1")
torch.cuda.set_per_process_memory_fraction(0.25)
held = []
for s in range(steps):
    fragsim_marker.step(s)
    ptrs = [(torch.cuda.alloc(1000 * (s + 1) + i, 7), 1000 * (s + 1) + i) for i in range(10)]
    for p, n in ptrs[:5]:
        torch.cuda.free(p, n, 7)
    held.extend(ptrs[5:])
torch.cuda.empty_cache()
if os.environ.get("WORKLOAD_FORK") == "1":
    # A forked child that exits normally must neither touch the trace nor hang.
    pid = os.fork()
    if pid == 0:
        fragsim_marker.text("from the child")
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit(90)
if len(sys.argv) > 3:
    with open(sys.argv[3], "w") as f:
        f.write("ready")
    time.sleep(60)
sys.exit(code)
