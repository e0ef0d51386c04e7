"""An OOM from fragmentation, explained at the moment it happens, and the
run again under the setting the explanation names.

A serving loop under a memory fraction (--cap, default 5 GiB): a warm-up
batch takes 16 prefill buffers of 256 MiB and frees them (the cache keeps
the 256 MiB segments); --sessions sessions then take a KV cache of 50 MiB
each (PyTorch's allocator splits the cached segments five ways); every
other session ends, leaving 50 MiB holes that the live neighbours pin; a
last request with a long context needs one --big buffer (default 1.5 GiB).
The cache holds more free bytes than that, but no block that large, and
the reserved bytes plus a new segment pass the cap: an OOM from
fragmentation.

The script runs the loop twice, each in a child process (this process never
touches CUDA):
1. with torch.cuda.memory._record_memory_history on and
   fragsim.attach_oom_observer installed: the last request fails, and the
   observer writes the snapshot and the report to --out and prints its
   lines, among them the setting under which the run would have fitted
   (fragsim explain's fit: compare --goal fit:CAP on the snapshot);
2. under that setting: its PYTORCH_CUDA_ALLOC_CONF in the child's
   environment and, when it says to call torch.cuda.empty_cache() every N
   allocations, the call after every N allocations, as the replay counts
   them. The same
   loop, the last request included, completes.

Needs torch and the fragsim wheel (pip install --no-index dist/fragsim-*.whl),
one GPU with more than --cap of memory free; random tensors only. Prints a
JSON summary on stdout; exits 0 when the first run failed for fragmentation,
a setting was named and the second run completed under it.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

GiB = 1 << 30


class Allocations:
    """Counts allocations as a replay does, and calls
    torch.cuda.empty_cache() after every `every` of them (0: never)."""

    def __init__(self, torch, every):
        self.torch, self.every, self.n = torch, every, 0

    def count(self, allocations):
        self.n += allocations
        if self.every and self.n >= self.every:
            self.n = 0
            self.torch.cuda.empty_cache()


def workload(args):
    """The serving loop; returns the peak reserved bytes. Raises
    torch.OutOfMemoryError where the allocator gives up."""
    import torch

    MiB = 1 << 20
    row = 2 * args.hidden  # bytes of one fp16 row
    dev = torch.device("cuda")
    ev = Allocations(torch, args.empty_cache_every)

    def tensor(nbytes):
        t = torch.randn(nbytes // row, args.hidden, dtype=torch.float16, device=dev)
        ev.count(1)
        return t

    warm = [tensor(256 * MiB) for _ in range(16)]  # the warm-up batch's prefill buffers
    while warm:
        warm.pop()
    kv = [tensor(50 * MiB) for _ in range(args.sessions)]  # a KV cache per session
    for i in range(0, len(kv), 2):  # every other session ends
        kv[i] = None
    buf = tensor(args.big)  # the long-context request
    total = float(buf[:1024].float().sum().item())
    total += sum(float(t[0, 0].item()) for t in kv if t is not None)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_reserved(), total


def child(args):
    """One run, in a child process: prints its result as JSON."""
    import torch

    free, total = torch.cuda.mem_get_info()
    fraction = args.cap / total
    res = {"phase": args.phase, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "total_bytes": total, "cap_bytes": args.cap, "fraction": fraction,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
           "empty_cache_every": args.empty_cache_every}
    obs = None
    if args.phase == "fail":
        import fragsim

        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=200_000)
        obs = fragsim.attach_oom_observer(dir=args.out, report=True)
    torch.cuda.set_per_process_memory_fraction(fraction)
    t0 = time.time()
    try:
        res["peak_reserved_bytes"], _ = workload(args)
        res["completed"] = True
    except torch.OutOfMemoryError as e:
        res["completed"] = False
        res["error"] = str(e).splitlines()[0][:300]
        res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    res["wall_s"] = round(time.time() - t0, 3)
    if obs is not None:
        res["explanation"] = obs.last
    print(json.dumps(res), flush=True)


def run_child(args, phase, env, every=0):
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--out", args.out,
           "--cap", str(args.cap), "--big", str(args.big), "--sessions", str(args.sessions),
           "--hidden", str(args.hidden), "--empty-cache-every", str(every)]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=args.timeout)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    res = json.loads(lines[-1]) if lines else {"phase": phase, "completed": False}
    res["exit_code"], res["child_wall_s"] = p.returncode, round(time.time() - t0, 3)
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="oom_explain", help="where the snapshot and the report go")
    p.add_argument("--cap", type=int, default=5 * GiB, help="the memory cap in bytes (a memory fraction of the GPU)")
    p.add_argument("--big", type=int, default=3 * GiB // 2, help="the last request's buffer in bytes")
    p.add_argument("--sessions", type=int, default=80)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--empty-cache-every", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=int, default=200, help="seconds each run may take")
    p.add_argument("--phase", choices=["fail", "rerun"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phase:
        return child(args)

    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    first = run_child(args, "fail", env)
    x = first.get("explanation") or {}
    fit = x.get("fit") or {}
    summary = {"first_run": {k: first.get(k) for k in ("device", "torch", "total_bytes", "cap_bytes", "completed",
                                                        "error", "peak_reserved_bytes", "exit_code")},
               "explanation": {k: x.get(k) for k in ("class", "request_bytes", "reserved_bytes", "allocated_bytes",
                                                     "cached_free_bytes", "largest_free_block_bytes",
                                                     "outside_bytes", "snapshot", "report")},
               "named_setting": {k: fit.get(k) for k in ("setting", "conf", "env", "apply", "fits", "min_capacity_bytes",
                                                         "peak_reserved_bytes", "exact", "line", "goal")}}
    # The setting: a PYTORCH_CUDA_ALLOC_CONF value, "empty_cache every N
    # allocations", or the two joined by a comma.
    setting = (fit.get("setting") or "") if fit.get("fits") else ""
    m = re.search(r"empty_cache every (\d+) allocations", setting)
    every = int(m.group(1)) if m else 0
    conf = fit.get("conf") or ""
    if m and not conf:
        conf = setting[:m.start()].rstrip(",")
    if fit.get("fits") and (conf or every):
        second = run_child(args, "rerun", dict(env, PYTORCH_CUDA_ALLOC_CONF=conf), every)
        summary["second_run"] = {k: second.get(k) for k in ("alloc_conf", "empty_cache_every", "completed",
                                                            "error", "peak_reserved_bytes", "wall_s", "exit_code")}
    else:
        summary["second_run"] = {"completed": False, "error": "no setting was named"}
    ok = (first.get("completed") is False and x.get("class") == "fragmentation"
          and summary["second_run"].get("completed") is True)
    summary["ok"], summary["wall_s"] = ok, round(time.time() - t0, 3)
    print(json.dumps(summary, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
