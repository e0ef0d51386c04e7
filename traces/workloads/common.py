"""Shared harness for fragsim's workload scripts.

Every workload script calls `main(run_fn, add_args)`. The harness
- starts PyTorch's memory history recording before the first CUDA allocation
  when --snapshot is given, and dumps the snapshot at the end;
- sets the per-process memory fraction when --fraction is given;
- times the workload loop (model construction excluded) and writes a JSON
  summary (--stats-out): wall time, memory_stats peaks, device, versions.

The allocator settings come from PYTORCH_CUDA_ALLOC_CONF, as in any PyTorch run.
"""
import argparse
import json
import os
import random
import sys
import time


def main(run_fn, add_args=None, description=""):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--snapshot", help="write a PyTorch memory snapshot (pickle) here")
    p.add_argument("--max-entries", type=int, default=5_000_000,
                   help="trace ring-buffer size for --snapshot")
    p.add_argument("--context", choices=["none", "all"], default="none",
                   help="call stacks in --snapshot: none (the recorded traces), or all "
                        "(Python stacks on every entry, as PyTorch records by default)")
    p.add_argument("--fraction", type=float, default=0.0,
                   help="torch.cuda.set_per_process_memory_fraction before the run")
    p.add_argument("--stats-out", help="write a JSON summary here")
    if add_args:
        add_args(p)
    args = p.parse_args()

    import torch
    if args.snapshot:
        torch.cuda.memory._record_memory_history(
            enabled="all", context=None if args.context == "none" else args.context,
            stacks="python", max_entries=args.max_entries)
    if args.fraction > 0:
        torch.cuda.set_per_process_memory_fraction(args.fraction)
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    ctx = {"torch": torch, "args": args, "rng": random.Random(args.seed), "ooms": 0}
    setup = run_fn(ctx)  # returns the timed loop
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    setup()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0

    if args.snapshot:
        torch.cuda.memory._dump_snapshot(args.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    try:
        stats = torch.cuda.memory_stats()
    except RuntimeError:  # some pluggable allocators keep no statistics
        stats = {}
    prop = torch.cuda.get_device_properties(0)
    out = {
        "workload": os.path.basename(sys.argv[0]).removesuffix(".py"),
        "argv": sys.argv[1:],
        "seed": args.seed,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "fraction": args.fraction,
        "wall_s": wall,
        "ooms_caught": ctx["ooms"],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": prop.name,
        "total_global_mem": prop.total_memory,
        "reserved_peak": stats.get("reserved_bytes.all.peak", 0),
        "reserved_final": stats.get("reserved_bytes.all.current", 0),
        "active_peak": stats.get("active_bytes.all.peak", 0),
        "allocated_peak": stats.get("allocated_bytes.all.peak", 0),
        "requested_peak": stats.get("requested_bytes.all.peak", 0),
        "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "num_ooms": stats.get("num_ooms", 0),
        "num_device_alloc": stats.get("num_device_alloc", 0),
        "num_device_free": stats.get("num_device_free", 0),
    }
    if args.stats_out:
        with open(args.stats_out, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out))


def pow2_bucket(n, lo=16):
    """Smallest power of two >= n (at least lo)."""
    b = lo
    while b < n:
        b *= 2
    return b
