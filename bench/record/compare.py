#!/usr/bin/env python3
"""Compare a `fragsim record` trace with a PyTorch snapshot of the same run.

  compare.py [--fragsim build/fragsim] RECORDED.fst SNAPSHOT.pickle|IMPORTED.fst

Imports the snapshot (`fragsim import`; a trace already imported is taken as
it is), then checks that both hold the
same requests: the same sequence of allocations and frees with the same
requested sizes, and streams that map one to one (the recording may go on
with the frees of tensors alive at exit, after the snapshot was dumped). Then replays the
recording under `caching` and prints its peak reserved next to the real
run's (torch.cuda.max_memory_reserved, from SNAPSHOT.pickle.json written by
overhead.py --snapshot, or the real_reserved_peak tag of an imported trace). Exit status 1 when the requests differ.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def requests(fragsim, path):
    """(kind, size, stream) of every alloc and free_requested, in order."""
    p = subprocess.run([fragsim, "dump", path], stdout=subprocess.PIPE, text=True, check=True)
    out = []
    for line in p.stdout.splitlines():
        kind = line.split(" ", 1)[0]
        if kind not in ("alloc", "free_requested"):
            continue
        f = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
        out.append((kind, int(f.get("size", "0")), f.get("stream", "")))
    return out


def canonical_streams(reqs):
    seen = {}
    return [(k, s, seen.setdefault(st, len(seen))) for k, s, st in reqs]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fragsim", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "fragsim"))
    p.add_argument("recorded")
    p.add_argument("snapshot")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        imported = a.snapshot
        if not a.snapshot.endswith(".fst"):
            imported = os.path.join(d, "snapshot.fst")
            subprocess.run([a.fragsim, "import", "-q", a.snapshot, "-o", imported], check=True,
                           stdout=subprocess.DEVNULL)
        rec = canonical_streams(requests(a.fragsim, a.recorded))
        snap = canonical_streams(requests(a.fragsim, imported))
    n_alloc = sum(1 for r in rec if r[0] == "alloc")
    print(f"recorded: {len(rec)} requests ({n_alloc} allocs); snapshot: {len(snap)} requests "
          f"({sum(1 for r in snap if r[0] == 'alloc')} allocs)")
    # The snapshot is dumped before the program ends; the recording goes on to
    # the frees of the tensors still alive at exit. Those may follow.
    tail = rec[len(snap):]
    ok = rec[:len(snap)] == snap and all(k == "free_requested" for k, _, _ in tail)
    if not ok:
        i = next((i for i, (x, y) in enumerate(zip(rec, snap)) if x != y), min(len(rec), len(snap)))
        print(f"requests differ first at request {i}:")
        for j in range(max(0, i - 3), i + 4):
            print(f"  {j:8d}  recorded {rec[j] if j < len(rec) else '-'}   snapshot {snap[j] if j < len(snap) else '-'}")
    else:
        print(f"requests identical: same sizes, order and streams for all {len(snap)} requests of the snapshot"
              + (f", then {len(tail)} frees at exit (after the snapshot was dumped)" if tail else ""))
    rep = subprocess.run([a.fragsim, "replay", "--policy", "caching", "--json", a.recorded],
                         stdout=subprocess.PIPE, text=True, check=True)
    peak = json.loads(rep.stdout)["peak_reserved_bytes"]
    real = None
    side = a.snapshot + ".json"
    if os.path.exists(side):
        with open(side) as f:
            real = json.load(f).get("max_memory_reserved")
    elif a.snapshot.endswith(".fst"):
        info = subprocess.run([a.fragsim, "info", "--json", a.snapshot], stdout=subprocess.PIPE, text=True, check=True)
        tag = json.loads(info.stdout).get("header", {}).get("tags", {}).get("real_reserved_peak")
        real = int(tag) if tag else None
    print(f"peak reserved: replay of the recording under caching {peak} bytes; real run {real} bytes"
          + ("" if real is None else (" (equal)" if peak == real else f" (differs by {peak - real:+d})")))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
