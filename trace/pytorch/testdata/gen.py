#!/usr/bin/env python3
"""Writes hand-made memory snapshots shaped exactly like the dict that
torch.cuda.memory._dump_snapshot pickles (no torch needed), plus, for each,
NAME.expected.json: the counts per device and action, the empty_cache()
calls a reader should infer, and the allocator state at the first event.

A tiny model of the allocator's bookkeeping (segments, active blocks) turns
the scripted events into the final `segments` list, so the snapshots are
self-consistent. Run from this directory: python3 gen.py"""
import gzip, json, os, pickle

MiB = 1 << 20
T0 = 1_764_000_000_000_000  # time_us: needs LONG1
BASE = 0x7F3A_0000_0000       # addresses: need LONG1
STREAM2 = 0x55D0_1234_5670    # a side stream pointer

FRAMES = [
    [{"filename": "/app/model.py", "name": "forward", "line": 42},
     {"filename": "/app/train.py", "name": "step", "line": 7}],
    [{"filename": "/app/model.py", "name": "attention", "line": 99}],
]


class Dev:
    def __init__(self, index):
        self.index = index
        self.trace = []
        self.segs = {}    # addr -> dict(size, stream, pool, expandable)
        self.active = {}  # addr -> [bsize, req, state]
        self.t = T0 + index * 3

    def ev(self, action, addr=0, size=0, stream=0, frames=None, **extra):
        self.t += 10
        e = {"action": action, "addr": addr, "size": size, "stream": stream,
             "time_us": self.t, "compile_context": "N/A", "user_metadata": ""}
        if frames is not None:
            e["frames"] = frames
        e.update(extra)
        self.trace.append(e)
        return e

    def seg_alloc(self, addr, size, stream=0, pool="large"):
        self.segs[addr] = dict(size=size, stream=stream, pool=pool, expandable=False)
        self.ev("segment_alloc", addr, size, stream, FRAMES[0])

    def seg_free(self, addr):
        s = self.segs.pop(addr)
        assert not any(addr <= a < addr + s["size"] for a in self.active), "freeing a live segment"
        self.ev("segment_free", addr, s["size"], s["stream"])

    def seg_map(self, addr, size, stream=0, pool="large"):
        # Extend an adjacent mapped range or start one.
        for a, s in list(self.segs.items()):
            if s["expandable"] and a + s["size"] == addr:
                s["size"] += size
                break
        else:
            self.segs[addr] = dict(size=size, stream=stream, pool=pool, expandable=True)
        self.ev("segment_map", addr, size, stream)

    def seg_unmap(self, addr, size):
        for a, s in list(self.segs.items()):
            if s["expandable"] and a <= addr and addr + size <= a + s["size"]:
                del self.segs[a]
                if a < addr:
                    self.segs[a] = dict(s, size=addr - a)
                if addr + size < a + s["size"]:
                    self.segs[addr + size] = dict(s, size=a + s["size"] - addr - size)
                self.ev("segment_unmap", addr, size, s["stream"])
                return
        raise AssertionError("unmap of unmapped range")

    def alloc(self, addr, req, bsize, stream=0, frames=None):
        self.active[addr] = [bsize, req, "active_allocated"]
        self.ev("alloc", addr, req, stream, FRAMES[1] if frames is None else frames)

    def free_req(self, addr, stream=0):
        b = self.active[addr]
        b[2] = "active_pending_free"
        self.ev("free_requested", addr, b[1], stream)

    def free_comp(self, addr, stream=0):
        b = self.active.pop(addr)
        self.ev("free_completed", addr, b[1], stream)

    def free(self, addr, stream=0):
        self.free_req(addr, stream)
        self.free_comp(addr, stream)

    def oom(self, size, device_free):
        self.t += 10
        self.trace.append({"action": "oom", "device_free": device_free, "size": size,
                           "stream": 0, "time_us": self.t, "compile_context": "N/A", "user_metadata": ""})

    def snap(self):
        total = sum(b[0] for b in self.active.values())
        self.ev("snapshot", 0, total, 0)

    def state(self):
        """The state as fragsim's trace.InitialState segments (header JSON)."""
        out = []
        for a in sorted(self.segs):
            s = self.segs[a]
            out.append(dict(device=self.index, stream=s["stream"], addr=a, size=s["size"],
                            pool=s["pool"], expandable=s["expandable"], blocks=self.blocks(a, s)))
        return out

    def blocks(self, a, s):
        blocks, pos = [], a
        for b in sorted(x for x in self.active if a <= x < a + s["size"]):
            bsize, req, st = self.active[b]
            if b > pos:
                blocks.append(dict(addr=pos, size=b - pos, state="inactive"))
            blocks.append(dict(addr=b, size=bsize, requested=req, state=st))
            pos = b + bsize
        if pos < a + s["size"]:
            blocks.append(dict(addr=pos, size=a + s["size"] - pos, state="inactive"))
        return blocks

    def segments(self):
        """The snapshot's `segments` entries for this device."""
        out = []
        for a in sorted(self.segs):
            s = self.segs[a]
            blocks = [{"address": b["addr"], "size": b["size"],
                       "requested_size": b.get("requested", 0), "state": b["state"],
                       "frames": FRAMES[1] if b["state"] != "inactive" else []}
                      for b in self.blocks(a, s)]
            out.append({
                "device": self.index, "address": a, "total_size": s["size"],
                "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
                "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
                "stream": s["stream"], "segment_type": s["pool"], "segment_pool_id": (0, 0),
                "is_expandable": s["expandable"], "frames": [], "blocks": blocks})
        return out


SETTINGS = {
    "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "max_split_size": 256 * MiB, "garbage_collection_threshold": 0.0,
    "expandable_segments": False, "release_lock_on_cudamalloc": False,
    "pinned_num_register_threads": 1, "pinned_use_cuda_host_register": False,
    "graph_capture_record_stream_reuse": False,
    "roundup_power2_divisions": {str(1 << i): (1 if i <= 8 else 2 if i == 9 else 4 if i == 10 else 8) for i in range(16)},
}


def snapshot(devs, settings=SETTINGS, annotations=None, cut=None):
    traces = []
    for d in devs:
        tr = d.trace[cut.get(d.index, 0):] if cut else d.trace
        traces.append(tr)
    snap = {"segments": [s for d in devs for s in d.segments()], "device_traces": traces}
    if settings is not None:
        snap["allocator_settings"] = settings
    if annotations is not None:
        snap["external_annotations"] = annotations
    return snap


def counts(traces):
    out = {}
    for i, tr in enumerate(traces):
        c = {}
        for e in tr:
            c[e["action"]] = c.get(e["action"], 0) + 1
        out[str(i)] = c
    return out


def write(name, snap, protos, initial=None, empty_caches=0, approximate=False, **more):
    for p in protos:
        with open("%s.p%d.pickle" % (name, p), "wb") as f:
            pickle.dump(snap, f, protocol=p)
    exp = {"counts": counts(snap["device_traces"]), "initial": initial,
           "empty_caches": empty_caches, "approximate": approximate}
    exp.update(more)
    with open(name + ".expected.json", "w") as f:
        json.dump(exp, f, indent=1, sort_keys=True)


# basic: two devices, stacks, settings, annotations, a pending free on a side
# stream, an OOM with its release burst, a snapshot action. Starts empty.
d0, d1 = Dev(0), Dev(1)
S0 = BASE
d0.seg_alloc(S0, 2 * MiB, pool="small")
d0.alloc(S0, 100, 512)
d0.alloc(S0 + 512, 1000, 1024)
d0.free(S0)
L0 = BASE + 0x4000000
d0.seg_alloc(L0, 20 * MiB)
d0.alloc(L0, 5 * MiB, 5 * MiB)
d0.free_req(L0, stream=STREAM2)           # record_stream: completes later
d0.alloc(S0, 200, 512)
d0.free_comp(L0)
d0.snap()
d0.seg_free(L0)                          # the OOM's release
d0.oom(64 * MiB, 123 * MiB)
S1 = BASE + 0x100000000
for i in range(3):
    d1.seg_alloc(S1 + i * 0x2000000, 32 * MiB, stream=STREAM2)
    d1.alloc(S1 + i * 0x2000000, 30 * MiB + 5, 30 * MiB + 512, stream=STREAM2)
d1.free(S1, stream=STREAM2)
ann = [{"name": "fwd", "stage": "START", "device": 0, "time_us": T0 + 15},
       {"name": "fwd", "stage": "END", "device": 0, "time_us": T0 + 75}]
basic = snapshot([d0, d1], annotations=ann)
write("basic", basic, (2, 5), streams=[0, STREAM2], markers=2)
with open("basic.p5.pickle", "rb") as f:
    raw = f.read()
with gzip.open("basic.p5.pickle.gz", "wb") as f:
    f.write(raw)

# midrun: the ring buffer lost the first events; the expected initial state
# is the model's state after them.
d = Dev(0)
L = BASE
d.seg_alloc(L, 20 * MiB)
d.alloc(L, 5 * MiB, 5 * MiB)                   # split: 15 MiB remain
d.alloc(L + 5 * MiB, 14 * MiB + 600 * 1024, 15 * MiB)  # takes the whole rest (remainder <= 1 MiB)
S = BASE + 0x10000000
d.seg_alloc(S, 2 * MiB, pool="small")
d.alloc(S, 700, 1024)
d.alloc(S + 1024, 512, 512)
d.alloc(S + 1536, 3000, 3072)
d.free(S + 1024)
L2 = BASE + 0x20000000
d.seg_alloc(L2, 40 * MiB)
d.alloc(L2, 40 * MiB - 100, 40 * MiB)
d.free_req(L2, stream=STREAM2)                 # pending at the cut
cut_at = len(d.trace)
initial = d.state()
d.free_comp(L2)
d.seg_free(L2)
d.free(L + 5 * MiB)                            # allocated before the cut
d.free(S)
d.alloc(S, 300, 512)
d.alloc(L + 5 * MiB, 3 * MiB, 3 * MiB)
L3 = BASE + 0x30000000
d.seg_alloc(L3, 12 * MiB)
d.alloc(L3, 11 * MiB, 12 * MiB)
mid = snapshot([d], cut={0: cut_at})
write("midrun", mid, (4,), initial=initial)

# empty_cache: bursts of releases that no OOM explains, with no memory cap.
d = Dev(0)
A, B, C = BASE, BASE + 0x10000000, BASE + 0x20000000
d.seg_alloc(A, 20 * MiB); d.alloc(A, 4 * MiB, 4 * MiB)
d.seg_alloc(B, 20 * MiB); d.alloc(B, 4 * MiB, 4 * MiB)
d.seg_alloc(C, 20 * MiB); d.alloc(C, 4 * MiB, 4 * MiB)
d.free(A); d.free(B)
d.seg_free(A); d.seg_free(B)                   # 1: empty_cache, then a free-list hit
d.alloc(C + 4 * MiB, 1 * MiB + 512, 1 * MiB + 512)
d.free(C + 4 * MiB); d.free(C)
d.seg_free(C)                                  # 2: empty_cache, then a malloc that needs a segment
d.seg_alloc(A, 20 * MiB); d.alloc(A, 6 * MiB, 6 * MiB)
d.free(A)
d.seg_free(A)                                  # not one: the OOM's release
d.oom(80 * 1024 * MiB, 100 * MiB)
E = BASE + 0x40000000
d.seg_map(E, 40 * MiB, pool="large"); d.alloc(E, 30 * MiB, 30 * MiB)
d.free(E)
d.seg_unmap(E, 40 * MiB)                       # 3: empty_cache at the end
ec = snapshot([d], settings=dict(SETTINGS, PYTORCH_CUDA_ALLOC_CONF="", max_split_size=-1))
write("empty_cache", ec, (4,), empty_caches=3)

# gc: the same burst-then-segment shape with garbage collection configured:
# it may be GC, so no empty_cache is inferred and the trace is approximate.
d = Dev(0)
d.seg_alloc(A, 20 * MiB); d.alloc(A, 4 * MiB, 4 * MiB)
d.seg_alloc(B, 20 * MiB); d.alloc(B, 4 * MiB, 4 * MiB)
d.free(A)
d.seg_free(A)
d.seg_alloc(C, 24 * MiB); d.alloc(C, 23 * MiB, 24 * MiB)
gc = snapshot([d], settings=dict(SETTINGS, PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.6", garbage_collection_threshold=0.6))
write("gc", gc, (4,), empty_caches=0, approximate=True)

# old: an older PyTorch: no allocator_settings, no external_annotations,
# entries without stream, frames, time_us or the newer keys.
d = Dev(0)
d.seg_alloc(A, 2 * MiB, pool="small"); d.alloc(A, 512, 512); d.free(A)
for e in d.trace:
    for k in ("stream", "time_us", "compile_context", "user_metadata", "frames"):
        e.pop(k, None)
old = snapshot([d], settings=None)
for s in old["segments"]:
    for k in ("is_expandable", "segment_pool_id", "requested_size", "frames"):
        s.pop(k, None)
write("old", old, (2,))
