#!/usr/bin/env python3
"""The cost of one fragsim.monitor tick, on the tests' fake torch holding a
cache of BLOCKS blocks: the monitor thread's CPU time (memory_stats,
mem_get_info, memory_snapshot, pickling, the exchange) and the fragsim
monitor process's, per tick, and what that is of one core at INTERVAL.
For comparison, the same tick with a fragsim process started for each
tick (the design the monitor does not use).

    PYTHONPATH=python:python/testdata/faketorch FRAGSIM_BIN=build/fragsim \\
        python3 bench/monitor/tick.py [--blocks 10000] [--ticks 40] [--interval 15]

The fake's memory_snapshot() builds its list of dicts afresh at each call,
as PyTorch does; PyTorch's own C++ side of it is not measured. Prints one
JSON object.
"""
import argparse
import json
import os
import pickle
import resource
import subprocess
import time

import torch

import fragsim
from fragsim._binary import find_fragsim_bin

MiB = 1 << 20


def fake_cache(blocks):
    """blocks blocks in segments of 10: a 20 MiB large-pool segment each,
    allocated and free blocks alternating, sizes varying."""
    segs, addr = [], 0x7F00_0000_0000
    for s in range(blocks // 10):
        sizes = [(1 + (s * 7 + i * 3) % 5) * (MiB // 2) for i in range(9)]
        sizes.append(20 * MiB - sum(sizes))
        base, bl, used = addr, [], 0
        for i, n in enumerate(sizes):
            alloc = i % 2 == 0
            bl.append({"address": base + used, "size": n, "requested_size": n if alloc else 0,
                       "state": "active_allocated" if alloc else "inactive", "frames": []})
            used += n
        act = sum(b["size"] for b in bl if b["state"] != "inactive")
        segs.append({"device": 0, "address": base, "total_size": 20 * MiB, "allocated_size": act, "active_size": act,
                     "requested_size": act, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                     "is_expandable": False, "frames": [], "blocks": bl})
        addr += 0x200_0000
    return segs


def per_tick_exec(mon_args, frame):
    """CPU seconds of a fragsim monitor process started for one frame."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(mon_args, input=frame, stdout=subprocess.PIPE, check=True,
                       env=dict(os.environ, GOMAXPROCS=os.environ.get("GOMAXPROCS", "1")))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert p.stdout.count(b"\n") == 2, p.stdout[:200]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=10000)
    ap.add_argument("--ticks", type=int, default=40)
    ap.add_argument("--interval", type=float, default=15)
    a = ap.parse_args()
    segs = fake_cache(a.blocks)
    fake = torch.cuda.memory._fake
    fake["segments"] = segs
    reserved = sum(s["total_size"] for s in segs)
    allocated = sum(b["size"] for s in segs for b in s["blocks"] if b["state"] != "inactive")
    fake["stats"] = {0: {"reserved_bytes.all.current": reserved, "allocated_bytes.all.current": allocated,
                         "inactive_split_bytes.all.current": reserved - allocated, "num_ooms": 0,
                         "num_alloc_retries": 0}}
    fake["mem_info"] = {0: (2 << 30, 80 << 30)}
    mon = fragsim.monitor(port=None, interval=3600)
    deadline = time.time() + 60
    while mon.ticks < 1 and time.time() < deadline:
        time.sleep(0.01)
    if mon.ticks < 1:
        raise SystemExit("tick.py: the monitor made no tick")
    py0, go0, t0 = mon.thread_cpu_s, mon.child_cpu_s, time.perf_counter()
    for _ in range(a.ticks):
        if mon.tick() is None:
            raise SystemExit("tick.py: a tick failed")
    wall = (time.perf_counter() - t0) / a.ticks
    py, go = (mon.thread_cpu_s - py0) / a.ticks, (mon.child_cpu_s - go0) / a.ticks
    mon.stop()

    # Where the Python side's time goes, once.
    t = time.thread_time()
    snap = torch.cuda.memory_snapshot()
    t_snap = time.thread_time() - t
    t = time.thread_time()
    data = pickle.dumps(snap, protocol=4)
    t_pickle = time.thread_time() - t

    head = json.dumps({"time_ns": time.time_ns(), "snapshot_bytes": len(data),
                       "devices": [{"device": 0, "free_bytes": 2 << 30, "total_bytes": 80 << 30}]}).encode()
    mon_args = [find_fragsim_bin(), "monitor"]
    n = max(5, a.ticks // 4)
    exec_cpu = sum(per_tick_exec(mon_args, head + b"\n" + data) for _ in range(n)) / n
    out = {"blocks": a.blocks, "segments": len(segs), "snapshot_bytes": len(data), "ticks": a.ticks,
           "interval_s": a.interval, "cpu_ms_per_tick": {"python": round(py * 1e3, 2), "fragsim": round(go * 1e3, 2),
                                                          "total": round((py + go) * 1e3, 2)},
           "python_parts_ms": {"memory_snapshot": round(t_snap * 1e3, 2), "pickle": round(t_pickle * 1e3, 2)},
           "wall_ms_per_tick": round(wall * 1e3, 2),
           "core_pct_at_interval": round(100 * (py + go) / a.interval, 3),
           "a_process_per_tick_cpu_ms": round(exec_cpu * 1e3, 2),
           "gomaxprocs": os.environ.get("GOMAXPROCS", "1 (the monitor's default)")}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
