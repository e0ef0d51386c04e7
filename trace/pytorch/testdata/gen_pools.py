#!/usr/bin/env python3
"""Writes pools.p4.pickle: a hand-made memory snapshot of CUDA graph
capture and a MemPool, shaped like torch.cuda.memory._dump_snapshot's dict
(no torch needed), whose final segments carry their segment_pool_id.
Run from this directory: python3 gen_pools.py

The script: a default-pool block on stream 0; graph 1 captured on stream S
(its pool (1, 0): a 2 MiB segment); a default-pool block on S after the
capture; graph 2 captured on S (pool (2, 0): a 20 MiB segment); then a
MemPool (0, 1) used twice on stream 0, a default-pool request between."""
import pickle

MiB = 1 << 20
T0 = 1_764_000_000_000_000
BASE = 0x7F3A_0000_0000
S = 0x55D0_1234_5670

trace, segs, active, t = [], {}, {}, [T0]


def ev(action, addr=0, size=0, stream=0):
    t[0] += 10
    trace.append({"action": action, "addr": addr, "size": size, "stream": stream,
                  "time_us": t[0], "compile_context": "N/A", "user_metadata": ""})


def seg(addr, size, stream, pool):
    segs[addr] = dict(size=size, stream=stream, pool=pool)
    ev("segment_alloc", addr, size, stream)


def alloc(addr, size, stream):
    active[addr] = size
    ev("alloc", addr, size, stream)


def free(addr, stream):
    size = active.pop(addr)
    ev("free_requested", addr, size, stream)
    ev("free_completed", addr, size, stream)


A, B, C, D, E = (BASE + i * 0x4000000 for i in range(5))
seg(A, 2 * MiB, 0, (0, 0)); alloc(A, 512, 0)
seg(B, 2 * MiB, S, (1, 0)); alloc(B, 512, S); alloc(B + 512, 512, S); free(B + 512, S)
seg(C, 2 * MiB, S, (0, 0)); alloc(C, 512, S)
seg(D, 20 * MiB, S, (2, 0)); alloc(D, 2 * MiB, S); alloc(D + 2 * MiB, 2 * MiB, S)
seg(E, 2 * MiB, 0, (0, 1)); alloc(E, 512, 0); alloc(E + 512, 512, 0); free(E + 512, 0)
alloc(A + 512, 512, 0)
alloc(E + 512, 512, 0)

segments = []
for a in sorted(segs):
    s = segs[a]
    kind = "small" if s["size"] == 2 * MiB else "large"
    blocks, pos = [], a
    for b in sorted(x for x in active if a <= x < a + s["size"]):
        if b > pos:
            blocks.append({"address": pos, "size": b - pos, "requested_size": 0, "state": "inactive", "frames": []})
        blocks.append({"address": b, "size": active[b], "requested_size": active[b], "state": "active_allocated", "frames": []})
        pos = b + active[b]
    if pos < a + s["size"]:
        blocks.append({"address": pos, "size": a + s["size"] - pos, "requested_size": 0, "state": "inactive", "frames": []})
    segments.append({"device": 0, "address": a, "total_size": s["size"], "stream": s["stream"],
                     "segment_type": kind, "segment_pool_id": s["pool"], "is_expandable": False,
                     "frames": [], "blocks": blocks})

with open("pools.p4.pickle", "wb") as f:
    pickle.dump({"segments": segments, "device_traces": [trace]}, f, protocol=4)
