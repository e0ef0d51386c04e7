#!/usr/bin/env python3
"""Seeded random allocation programs: fragsim's conformance corpus.

Each case is a small program drawn from its seed: tensors of random sizes made and
freed in random order on one or more streams, with the features the case names
(streams kept busy so that frees complete after later mallocs, periodic
empty_cache, a memory fraction with caught OOMs, ring buffers that start mid-run,
...). Its allocator settings come from PYTORCH_CUDA_ALLOC_CONF, which run_corpus.sh
sets from the case table below, so one program runs under several settings and a
what-if of one run can be checked against a real run of another.

Usage:
  conformance.py --list                       # the cases, one JSON object a line
  conformance.py --case NAME [--snapshot F] [--stats-out F] [--conf-of NAME]
The random choices do not depend on the allocator: only a caught OOM changes the
program's course (cases with "fraction" in their features).
"""
import argparse
import json
import math
import os
import random
import sys

MiB = 1 << 20
GiB = 1 << 30

# Size distributions: (low, high) bytes, drawn log-uniformly, and the share of
# requests drawn from a small set of repeated "tensor" sizes instead.
SIZES = {
    "tiny": (1, 4096, 0.3),
    "small": (1, MiB, 0.3),
    "mixed": (1, 512 * MiB, 0.4),
    "large": (MiB, 512 * MiB, 0.4),
    "medium": (64 * 1024, 64 * MiB, 0.5),
    "edges": (1, 512 * MiB, 0.0),  # sizes at and around the allocator's thresholds
}

EDGE_SIZES = [1, 511, 512, 513, MiB - 1, MiB, MiB + 1, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1,
              10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 20 * MiB - 1, 20 * MiB, 20 * MiB + 1,
              64 * MiB, 128 * MiB - 1, 128 * MiB, 512 * MiB]


def case_table():
    """The corpus: name, seed, size distribution, features, settings, pairs."""
    cases = []

    def add(name, seed, sizes, conf="", feats=(), allocs=5000, live_cap=2 * GiB, **kw):
        c = {"name": name, "seed": seed, "sizes": sizes, "conf": conf, "features": list(feats),
             "allocs": allocs, "live_cap": live_cap}
        c.update(kw)
        cases.append(c)

    # Plain single-stream programs over every size range.
    for i, sz in enumerate(["tiny", "small", "mixed", "large", "medium", "edges"]):
        add(f"plain_{sz}", 100 + i, sz)
    # Several streams, allocations spread over them.
    for i, sz in enumerate(["small", "mixed", "medium"]):
        add(f"streams_{sz}", 200 + i, sz, feats=["streams"])
    # record_stream onto streams kept busy by long kernels: frees complete after
    # later mallocs.
    for i, sz in enumerate(["small", "mixed", "medium", "edges"]):
        add(f"deferred_{sz}", 300 + i, sz, feats=["streams", "record_stream"])
    # Periodic empty_cache.
    for i, sz in enumerate(["mixed", "medium", "small"]):
        add(f"empty_cache_{sz}", 400 + i, sz, feats=["empty_cache"])
    # A memory fraction: release-and-retry and caught OOMs.
    for i, sz in enumerate(["mixed", "large", "medium"]):
        add(f"fraction_{sz}", 500 + i, sz, feats=["fraction"], cap=1536 * MiB, live_cap=1400 * MiB)
    # garbage_collection_threshold (works under a fraction).
    for i, sz in enumerate(["mixed", "medium"]):
        add(f"gc_{sz}", 600 + i, sz, conf="garbage_collection_threshold:0.6", feats=["fraction"],
            cap=1536 * MiB, live_cap=1200 * MiB)
    # max_split_size_mb and roundup settings.
    add("maxsplit_mixed", 700, "mixed", conf="max_split_size_mb:64")
    add("maxsplit_medium", 701, "medium", conf="max_split_size_mb:32,roundup_power2_divisions:4")
    add("roundup_list", 702, "mixed", conf="roundup_power2_divisions:[1:4,8:2,32:1,>:8]")
    add("roundup_small", 703, "small", conf="roundup_power2_divisions:8")
    add("nonsplit_rounding", 704, "large", conf="max_split_size_mb:128,max_non_split_rounding_mb:64")
    # Expandable segments, both pools, in either address order.
    add("expandable_mixed", 800, "mixed", conf="expandable_segments:True")
    add("expandable_small_first", 801, "mixed", conf="expandable_segments:True", first="small")
    add("expandable_large_first", 802, "mixed", conf="expandable_segments:True", first="large")
    add("expandable_streams", 803, "medium", conf="expandable_segments:True", feats=["streams"])
    add("expandable_empty", 804, "mixed", conf="expandable_segments:True", feats=["empty_cache"])
    add("expandable_fraction", 805, "medium", conf="expandable_segments:True", feats=["fraction"],
        cap=1536 * MiB, live_cap=1400 * MiB)
    add("expandable_deferred", 806, "medium", conf="expandable_segments:True",
        feats=["streams", "record_stream"])
    # Ring buffers that start mid-run.
    add("ring_mixed", 900, "mixed", feats=["ring"], max_entries=6000)
    add("ring_streams", 901, "medium", feats=["ring", "streams"], max_entries=6000)
    add("ring_expandable", 902, "mixed", conf="expandable_segments:True", feats=["ring"], max_entries=6000)
    # Bursty phases: a model-loading burst of large tensors, then churn.
    for i, sz in enumerate(["mixed", "small"]):
        add(f"phases_{sz}", 1000 + i, sz, feats=["phases"])
    # Everything together.
    add("all_default", 1100, "mixed", feats=["streams", "record_stream", "empty_cache", "phases"])
    add("all_expandable", 1101, "mixed", conf="expandable_segments:True",
        feats=["streams", "record_stream", "empty_cache", "phases"])
    add("all_maxsplit", 1102, "mixed", conf="max_split_size_mb:64,roundup_power2_divisions:4",
        feats=["streams", "record_stream", "empty_cache", "phases"])

    # What-if pairs: the same program (same seed and features) under a second
    # setting; a replay of the first under the second's setting must equal it.
    pairs = [
        ("plain_mixed", "expandable_segments:True"),
        ("plain_mixed", "max_split_size_mb:64,roundup_power2_divisions:4"),
        ("plain_medium", "expandable_segments:True"),
        ("plain_large", "max_split_size_mb:128"),
        ("streams_mixed", "expandable_segments:True"),
        ("deferred_mixed", "max_split_size_mb:64"),
        ("phases_mixed", "expandable_segments:True"),
        ("phases_mixed", "roundup_power2_divisions:[1:4,8:2,32:1,>:8]"),
        ("empty_cache_mixed", "expandable_segments:True"),
        ("all_default", "expandable_segments:True"),
        ("all_default", "max_split_size_mb:64,roundup_power2_divisions:4"),
        ("plain_small", "roundup_power2_divisions:8"),
    ]
    by = {c["name"]: c for c in cases}
    for i, (base, conf) in enumerate(pairs):
        c = dict(by[base])
        c["name"] = f"whatif{i:02d}_{base}"
        c["conf"] = conf
        c["whatif_of"] = base
        c["features"] = list(c["features"]) + ["whatif"]
        cases.append(c)
    return cases


def draw_size(rng, dist, tensor_sizes):
    lo, hi, rep = SIZES[dist]
    if dist == "edges":
        if rng.random() < 0.6:
            return rng.choice(EDGE_SIZES)
    elif rng.random() < rep:
        return rng.choice(tensor_sizes)
    return max(1, int(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


class Gate:
    """Holds a stream shut until the program opens it: the stream waits
    (cuStreamWaitValue32) for a word of pinned host memory that open() writes.
    A watchdog opens a gate left shut for 10 s (something waited for the
    stream while it was shut) and counts it in forced: the run is then not
    deterministic."""

    def __init__(self, torch, stream):
        import ctypes
        import threading
        import time

        self.time = time
        self.stream = stream
        self.word = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self.n = 0  # the value that opens the current hold
        self.forced = 0
        self.deadline = None
        cu = ctypes.CDLL("libcuda.so.1")
        fn = getattr(cu, "cuStreamWaitValue32_v2", None) or cu.cuStreamWaitValue32
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        fn.restype = ctypes.c_int
        self.wait = fn
        # Load the sleep kernel now: a kernel's first launch loads its module,
        # which waits for the device, and so would wait for a shut gate.
        with torch.cuda.stream(stream):
            torch.cuda._sleep(1)
        stream.synchronize()
        threading.Thread(target=self._watch, daemon=True).start()

    def hold(self):
        self.n += 1
        r = self.wait(self.stream.cuda_stream, self.word.data_ptr(), self.n, 0)  # CU_STREAM_WAIT_VALUE_GEQ
        if r != 0:
            raise RuntimeError(f"cuStreamWaitValue32 failed: CUDA error {r}")
        self.deadline = self.time.monotonic() + 10

    def open(self):
        self.deadline = None
        self.word[0] = self.n

    def _watch(self):
        while True:
            self.time.sleep(0.5)
            d = self.deadline
            if d is not None and self.time.monotonic() > d:
                self.forced += 1
                self.open()


def run_case(case, torch, snapshot=None):
    rng = random.Random(case["seed"])
    feats = set(case["features"])
    dist = case["sizes"]
    lo, hi, _ = SIZES[dist]
    tensor_sizes = [max(1, int(math.exp(rng.uniform(math.log(lo), math.log(hi))))) for _ in range(12)]
    dev = torch.device("cuda", 0)
    nstreams = 3 if "streams" in feats else 1
    streams = [torch.cuda.current_stream()] + [torch.cuda.Stream() for _ in range(nstreams - 1)]
    busy = torch.cuda.Stream() if "record_stream" in feats else None
    # The busy stream is held shut by a Gate from its first use after a wait
    # until the next wait, every sync_every steps: at every malloc in between
    # no free deferred since the last wait has completed, and at the first
    # malloc after it all have. Where a free completes depends on the program
    # alone, not on how fast the allocator runs, so a live recording and
    # runs under other settings meet the same frees.
    sync_every = rng.randint(30, 80) if busy is not None else 0
    gate = Gate(torch, busy) if busy is not None else None
    held = False  # the busy stream was used since it was last waited for
    live = []  # (tensor, stream index)
    live_bytes = 0
    cap = case["live_cap"]
    ooms = 0
    n = case["allocs"]
    ec_every = rng.randint(150, 600) if "empty_cache" in feats else 0
    phase_at = set(rng.sample(range(n), 3)) if "phases" in feats else set()

    def alloc(size, si):
        nonlocal live_bytes, ooms
        try:
            with torch.cuda.stream(streams[si]):
                t = torch.empty(size, dtype=torch.uint8, device=dev)
        except torch.OutOfMemoryError:
            ooms += 1
            # Free half of what is live, oldest first, and go on.
            for _ in range(len(live) // 2):
                free_one(0)
            return
        live.append((t, si))
        live_bytes += size

    def free_one(i):
        nonlocal live_bytes, held
        t, si = live.pop(i)
        live_bytes -= t.numel()
        if busy is not None and rng.random() < 0.3:
            if not held:
                gate.hold()
                held = True
            with torch.cuda.stream(busy):
                torch.cuda._sleep(rng.randint(200_000, 2_000_000))
            t.record_stream(busy)
        del t

    first = case.get("first")
    if first == "small":
        alloc(4096, 0)
    elif first == "large":
        alloc(8 * MiB, 0)
    def wait_busy():
        nonlocal held
        if held:
            gate.open()
            busy.synchronize()
            held = False

    for i in range(n):
        if held and i % sync_every == 0:
            wait_busy()
        if i in phase_at:
            # A burst of long-lived large tensors (a model load), freed later at random.
            for _ in range(rng.randint(5, 20)):
                if live_bytes > cap:
                    break
                alloc(rng.choice([4, 9, 16, 25, 48]) * MiB + rng.randint(0, 4096), 0)
        size = draw_size(rng, dist, tensor_sizes)
        while live and (live_bytes + size > cap or rng.random() < 0.45):
            free_one(rng.randrange(len(live)))
            if live_bytes + size <= cap and rng.random() < 0.5:
                break
        if size <= cap:
            alloc(size, rng.randrange(nstreams))
        if ec_every and i % ec_every == ec_every - 1:
            wait_busy()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    while live:
        free_one(rng.randrange(len(live)))
    wait_busy()
    torch.cuda.synchronize()
    return ooms, gate.forced if gate else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="print the cases, one JSON object a line")
    p.add_argument("--case", help="the case to run")
    p.add_argument("--snapshot", help="write a PyTorch memory snapshot (pickle) here")
    p.add_argument("--stats-out", help="write the run's memory_stats summary (JSON) here")
    args = p.parse_args()
    cases = {c["name"]: c for c in case_table()}
    if args.list:
        for c in cases.values():
            print(json.dumps(c))
        return
    case = cases[args.case]
    import torch
    if args.snapshot:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=case.get("max_entries", 1_000_000))
    total = torch.cuda.get_device_properties(0).total_memory
    if "fraction" in case["features"]:
        try:
            torch.cuda.set_per_process_memory_fraction(case["cap"] / total)
        except RuntimeError as e:  # an allocator that keeps no cap
            print("set_per_process_memory_fraction:", e, file=sys.stderr)
    ooms, forced = run_case(case, torch)
    if args.snapshot:
        torch.cuda.memory._dump_snapshot(args.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    try:
        st = torch.cuda.memory_stats()
    except RuntimeError:
        st = {}
    out = {"case": case["name"], "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
           "ooms_caught": ooms, "gate_forced": forced, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
           "total_global_mem": total,
           "reserved_peak": st.get("reserved_bytes.all.peak", 0),
           "num_device_alloc": st.get("num_device_alloc", 0),
           "num_device_free": st.get("num_device_free", 0),
           "num_alloc_retries": st.get("num_alloc_retries", 0),
           "num_ooms": st.get("num_ooms", 0)}
    if args.stats_out:
        with open(args.stats_out, "w") as f:
            json.dump(out, f)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
