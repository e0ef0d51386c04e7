#!/usr/bin/env python3
"""Overhead of `fragsim record` against PyTorch's own allocators, on a GPU.

Runs one of the seeded workloads of traces/workloads (default: the
multi-agent baseline, `multi_agent.py --seed 1`) alternately under each arm,
RUNS times, and prints the median wall time of the workload loop (model
construction excluded; the workload's own --stats-out figure) per arm and the
overhead against the native caching allocator:

  native   PyTorch's caching allocator (no recording)
  async    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (the driver pool, no recording)
  record   `fragsim record`: the hook serves from the driver pool and records every call

The loop's wall time on a shared machine varies by more than recording costs,
so the record arm also runs with FRAGSIM_HOOK_STATS=1 and reports the hook's
own time per allocation and per free (medians over the runs): the part of
the overhead that is fragsim's.

  overhead.py [--runs 5] [--arms native,record,async] [--out DIR] [-- WORKLOAD ARGS...]

The order of the arms alternates from run to run. Results also go to
DIR/overhead.json, and each recording to DIR/record_N.fst.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKLOADS = os.path.join(ROOT, "traces", "workloads")


HOOK_STATS = re.compile(r"fragsim: hook: (\d+) allocations, ([\d.]+) us each \((\d+) from the reuse cache\); "
                        r"(\d+) frees, ([\d.]+) us each")


def run_arm(a, arm, i, workload, hook):
    fd, stats = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable] + workload + ["--stats-out", stats]
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if arm == "async":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    elif arm == "record":
        env["FRAGSIM_HOOK_STATS"] = "1"
        cmd = [a.fragsim, "record", "-o", os.path.join(a.out, f"record_{i}.fst")] + \
              (["--lib", a.lib] if a.lib else []) + ["--"] + cmd
    elif arm != "native":
        sys.exit(f"overhead: unknown arm {arm} (native, async or record)")
    p = subprocess.run(cmd, cwd=WORKLOADS, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"overhead: {' '.join(cmd)} exited with {p.returncode}:\n{p.stderr[-2000:]}")
    with open(stats) as f:
        st = json.load(f)
    os.unlink(stats)
    m = HOOK_STATS.search(p.stderr)
    if m:
        hook.append({"allocs": int(m[1]), "alloc_us": float(m[2]), "cached": int(m[3]),
                     "frees": int(m[4]), "free_us": float(m[5])})
    return st["wall_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--arms", default="native,record,async", help="comma list of native, record, async")
    p.add_argument("--fragsim", default=os.path.join(ROOT, "build", "fragsim"))
    p.add_argument("--lib", default=os.environ.get("FRAGSIM_HOOK_LIB", ""))
    p.add_argument("--out", default="/tmp/fragsim-overhead")
    p.add_argument("workload", nargs="*", help="script and arguments in traces/workloads "
                   "(default: multi_agent.py --seed 1)")
    a = p.parse_args()
    workload = a.workload or ["multi_agent.py", "--seed", "1"]
    a.fragsim = os.path.abspath(a.fragsim)
    a.lib = os.path.abspath(a.lib) if a.lib else ""
    os.makedirs(a.out, exist_ok=True)
    if a.runs <= 0:
        print("overhead: no runs asked for (--runs 0)")
        return
    arms = a.arms.split(",")
    res = {arm: [] for arm in arms}
    hook = []
    for i in range(a.runs):
        for arm in (arms if i % 2 == 0 else arms[::-1]):
            res[arm].append(run_arm(a, arm, i, workload, hook))
            print(f"run {i} {arm:7s} loop {res[arm][-1]:.3f} s", flush=True)
    print(f"\nworkload: {' '.join(workload)}; {a.runs} alternating runs per arm; median loop wall time:")
    base = statistics.median(res["native"]) if "native" in res else None
    for arm in arms:
        m = statistics.median(res[arm])
        extra = f"  {100 * (m / base - 1):+.1f}% vs native" if base and arm != "native" else ""
        print(f"  {arm:7s} {m:.3f} s  (min {min(res[arm]):.3f}, max {max(res[arm]):.3f}){extra}")
    if hook:
        au = statistics.median(h["alloc_us"] for h in hook)
        fu = statistics.median(h["free_us"] for h in hook)
        h = hook[0]
        print(f"  the hook's own time: {au:.3f} us an allocation, {fu:.3f} us a free (medians of {len(hook)}); "
              f"{h['allocs']} allocations, {h['cached']} served from the reuse cache")
    with open(os.path.join(a.out, "overhead.json"), "w") as f:
        json.dump({"workload": workload, "runs": res, "hook": hook}, f, indent=1)


if __name__ == "__main__":
    main()
