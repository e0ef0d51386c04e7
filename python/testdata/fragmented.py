"""Writes a state-only snapshot (torch.cuda.memory._snapshot() without
history) whose fragmentation is known: three 20 MiB segments, each
[8 MiB free, 8 MiB allocated, 4 MiB free]: 60 MiB reserved, 24 MiB
allocated, 36 MiB free, no free block over 8 MiB.

Usage: fragmented.py OUT.pickle"""
import pickle
import sys

MiB = 1 << 20
segments = []
for i in range(3):
    base = 0x7F00_0000_0000 + i * 0x1000_0000
    blocks = [
        {"address": base, "size": 8 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
        {"address": base + 8 * MiB, "size": 8 * MiB, "requested_size": 8 * MiB, "state": "active_allocated",
         "frames": []},
        {"address": base + 16 * MiB, "size": 4 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
    ]
    segments.append({"device": 0, "address": base, "total_size": 20 * MiB, "allocated_size": 8 * MiB,
                     "active_size": 8 * MiB, "requested_size": 8 * MiB, "stream": 0, "segment_type": "large",
                     "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks})
with open(sys.argv[1], "wb") as f:
    pickle.dump({"segments": segments, "device_traces": [[]], "allocator_settings": {}}, f, protocol=4)
