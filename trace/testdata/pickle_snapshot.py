#!/usr/bin/env python3
"""Size of PyTorch's own memory snapshot of a trace, for comparison.

Reads trace events as CSV lines "action,addr,size,stream,time_us" on stdin,
builds the dict torch.cuda.memory._snapshot() returns for them (device 0's
trace entries, no stacks: no "frames" key, as PyTorch writes them when no
stack was recorded; "compile_context" and "user_metadata" as PyTorch 2.9 to
2.11 write them), pickles it as torch.cuda.memory._dump_snapshot() does
(pickle default protocol) and gzips it. Keys are the same str objects in
every entry, so pickle memoizes them: the smallest pickle PyTorch could
write. Prints one line per variant: name, bytes, events.
"""
import gzip
import pickle
import sys

entries = []
minimal = []
for line in sys.stdin:
    action, addr, size, stream, time_us = line.rstrip("\n").split(",")
    e = {"action": action, "size": int(size), "stream": int(stream), "time_us": int(time_us)}
    if action == "oom":
        e["device_free"] = int(addr)
    else:
        e["addr"] = int(addr)
    minimal.append(dict(e))
    e["compile_context"] = "N/A"
    e["user_metadata"] = ""
    entries.append(e)

settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
            "expandable_segments": False, "release_lock_on_cudamalloc": False,
            "pinned_num_register_threads": 1, "pinned_use_cuda_host_register": False,
            "roundup_power2_divisions": {}}
for name, traces in (("torch2.9", entries), ("minimal", minimal)):
    snap = {"segments": [], "device_traces": [traces], "allocator_settings": settings, "external_annotations": []}
    raw = pickle.dumps(snap)
    for level in (6, 9):
        print(f"{name}-pickle-gzip{level} {len(gzip.compress(raw, compresslevel=level))} {len(traces)}")
    print(f"{name}-pickle {len(raw)} {len(traces)}")
