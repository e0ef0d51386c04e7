"""Test workload: allocations through the fake torch, markers, cache calls.

Usage: workload.py STEPS EXIT_CODE [READY_FILE]
With READY_FILE it writes the file after the steps and sleeps (to be signalled).
With WORKLOAD_FORK=1 it forks a child that exits normally. It exits with 91 or 92
when torch.cuda.memory_allocated/max_memory_allocated disagree with what
it holds (peak: WORKLOAD_PEAK). WORKLOAD_END=exit, kill, abort or segv ends
it right after the steps, without closing the trace: os._exit(EXIT_CODE),
SIGKILL, abort() or a segmentation fault. WORKLOAD_SLEEP=S sleeps S seconds
after empty_cache, allocating nothing.
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
if os.environ.get("WORKLOAD_SLEEP"):
    time.sleep(float(os.environ["WORKLOAD_SLEEP"]))
end = os.environ.get("WORKLOAD_END")
if end == "exit":
    os._exit(code)
elif end == "kill":
    os.kill(os.getpid(), 9)
elif end == "abort":
    os.abort()
elif end == "segv":
    import ctypes

    ctypes.string_at(0)
# memory_stats works under fragsim (the pluggable allocator alone refuses it).
live = sum(n for _, n in held)
want_peak = int(os.environ.get("WORKLOAD_PEAK", torch.cuda.max_memory_allocated()))
if torch.cuda.memory_allocated() != live or torch.cuda.max_memory_allocated() != want_peak:
    print(f"memory stats: allocated {torch.cuda.memory_allocated()} (want {live}), peak {torch.cuda.max_memory_allocated()}", file=sys.stderr)
    sys.exit(91)
torch.cuda.reset_peak_memory_stats()
if torch.cuda.max_memory_allocated() != live:
    sys.exit(92)
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
