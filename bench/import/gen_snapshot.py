#!/usr/bin/env python3
"""Writes a synthetic memory snapshot shaped like torch.cuda.memory._dump_snapshot's
(no torch needed) for the import benchmark: N trace entries of a steady
alloc/free workload with Python stacks (frame dicts built per entry from a
shared pool of strings, as PyTorch's symbolizer does), a few segments.

usage: gen_snapshot.py OUT.pickle [ENTRIES] [FRAMES_PER_ENTRY]"""
import pickle, random, sys

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
depth = int(sys.argv[3]) if len(sys.argv) > 3 else 8
rng = random.Random(1)
MiB = 1 << 20
base = 0x7F00_0000_0000
files = ["/usr/lib/python3/site-packages/torch/nn/modules/module%d.py" % i for i in range(40)]
names = ["forward_%d" % i for i in range(120)]
pool = [(rng.choice(files), rng.choice(names), rng.randrange(1, 3000)) for _ in range(600)]
stacks = [[pool[rng.randrange(len(pool))] for _ in range(depth)] for _ in range(300)]
t = 1_764_000_000_000_000
trace, live, segs = [], {}, []
seg_addr = base
def frames():
    return [{"filename": f, "line": l, "name": nm} for f, nm, l in rng.choice(stacks)]
def ev(action, addr, size, fr=True):
    global t
    t += rng.randrange(1, 50)
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t}
    if fr and depth:
        e["frames"] = frames()
    e["compile_context"] = "N/A"
    e["user_metadata"] = ""
    trace.append(e)
nextaddr = base
while len(trace) < n:
    if len(live) > 2000 or (live and rng.random() < 0.5):
        a = rng.choice(list(live))
        size = live.pop(a)
        ev("free_requested", a, size)
        ev("free_completed", a, size)
    else:
        if rng.random() < 0.01:
            ev("segment_alloc", seg_addr, 20 * MiB)
            seg_addr += 0x10000000
        size = rng.choice([512, 4096, 65536, 1 << 20, 3 * MiB + 100])
        a = nextaddr
        nextaddr += 0x1000000
        live[a] = size
        ev("alloc", a, size)
trace = trace[:n]
snap = {"segments": [], "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                               "garbage_collection_threshold": 0.0, "expandable_segments": False,
                               "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}},
        "external_annotations": []}
with open(out, "wb") as f:
    pickle.dump(snap, f, protocol=4)
