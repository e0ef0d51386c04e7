"""Test program: fragsim.monitor against the fake torch.

Usage: monitored.py OUTDIR SNAPSHOT MODE
The fake allocator holds SNAPSHOT's segments on a 1 GiB device.
MODE "risk": the first tick (the thread's) at 500 MiB free, then ticks
called here at 100, 120, 400 and 50 MiB free; /metrics is fetched after
the first tick and after the last. "nostats": the allocator keeps no
statistics (as under the pluggable allocator); one tick at 100 MiB free.
"broken": ticks with no fragsim to run. Prints a JSON summary on stdout;
the monitor's lines go to stderr.
"""
import json
import os
import pickle
import sys
import time
import urllib.request

import torch

import fragsim

out, snap_path, mode = sys.argv[1:4]
MiB, total = 1 << 20, 1 << 30
with open(snap_path, "rb") as f:
    snap = pickle.load(f)
fake = torch.cuda.memory._fake
fake["segments"] = snap["segments"]
fake["stats"] = None if mode == "nostats" else {0: {
    "reserved_bytes.all.current": 60 * MiB, "allocated_bytes.all.current": 24 * MiB,
    "inactive_split_bytes.all.current": 36 * MiB, "num_ooms": 2, "num_alloc_retries": 5,
    "active_bytes.all.current": 24 * MiB}}
fake["mem_info"] = {0: (100 * MiB if mode == "nostats" else 500 * MiB, total)}
calls = []
mon = fragsim.monitor(port=0, interval=0.05 if mode == "broken" else 3600, log=os.path.join(out, "metrics.jsonl"),
                      on_risk=calls.append, stream=sys.stderr)


def fetch():
    with urllib.request.urlopen(f"http://127.0.0.1:{mon.port}/metrics", timeout=30) as r:
        return r.headers["Content-Type"], r.read().decode()


deadline = time.time() + 60
while mon.ticks < 1 and time.time() < deadline and mode != "broken" and torch.cuda.is_initialized():
    time.sleep(0.02)
texts = [fetch()]
if mode == "risk":
    for free in (100, 120, 400, 50):
        fake["mem_info"] = {0: (free * MiB, total)}
        mon.tick()
    texts.append(fetch())
elif mode == "broken":
    time.sleep(0.3)
    texts.append(fetch())
returned = mon.tick()
mon.stop()
json.dump({"texts": texts, "risk_calls": calls, "ticks": mon.ticks, "last": {str(k): v for k, v in mon.last.items()},
           "tick_returned": returned, "cpu": [mon.thread_cpu_s, mon.child_cpu_s]}, sys.stdout)
