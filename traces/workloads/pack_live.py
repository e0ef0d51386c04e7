#!/usr/bin/env python3
"""Puts live recordings (record_live.sh) into traces/, with their header tags.

Usage: pack_live.py LIVE_DIR OUT_DIR [NAME ...]
For each NAME (default: every LIVE_DIR/NAME.live.fst), the header gets the
workload and seed, the wall time of the workload loop under `fragsim record`
(wall_record_s, from NAME.live.json), and, from the snapshot-imported
OUT_DIR/NAME.fst of the same seeded workload recorded on the same GPU, the
real run's peak reserved and its wall times under the native allocator,
expandable segments and the stream-ordered pool. The events are unchanged:
the trace goes through `fragsim dump` and `fragsim undump`.
Needs a fragsim binary on PATH (or FRAGSIM=path).
"""
import glob, json, os, subprocess, sys

src, dst = sys.argv[1], sys.argv[2]
names = sys.argv[3:] or sorted(os.path.basename(p)[:-len(".live.fst")] for p in glob.glob(os.path.join(src, "*.live.fst")))
fragsim = os.environ.get("FRAGSIM", "fragsim")
COPY = ("workload", "seed", "real_reserved_peak", "wall_native_s", "wall_native_s_runs", "wall_expandable_s",
        "wall_expandable_s_runs", "wall_async_s", "async_reserved_peak")

for name in names:
    live = os.path.join(src, name + ".live.fst")
    with open(os.path.join(src, name + ".live.json")) as f:
        st = json.load(f)
    tags = {}
    snap = os.path.join(dst, name + ".fst")
    if os.path.exists(snap):
        info = json.loads(subprocess.run([fragsim, "info", "--json", snap], check=True,
                                         stdout=subprocess.PIPE, text=True).stdout)
        old = info.get("header", {}).get("tags", {})
        tags.update({k: old[k] for k in COPY if k in old})
        tags["snapshot_trace"] = name + ".fst"
    tags["wall_record_s"] = f"{st['wall_s']:.3f}"
    text = subprocess.run([fragsim, "dump", live], check=True, stdout=subprocess.PIPE, text=True).stdout
    lines = text.split("\n")
    i = next(i for i, l in enumerate(lines) if l.startswith("header "))
    h = json.loads(lines[i][len("header "):])
    h.setdefault("tags", {}).update(tags)
    lines[i] = "header " + json.dumps(h, separators=(",", ":"))
    out = os.path.join(dst, name + ".live.fst")
    subprocess.run([fragsim, "undump", "-", "-o", out], input="\n".join(lines), text=True, check=True)
    print(f"{out}: tags {tags}")
