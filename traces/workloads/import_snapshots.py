"""Imports the snapshots written by record_snapshots.sh into fragsim traces,
with the GPU, versions and the measured wall times in each trace's header.

Usage: import_snapshots.py RECORD_DIR OUT_DIR [NAME ...]
RECORD_DIR holds snap/NAME.pickle[.gz] and stats/*.json from record_snapshots.sh.
Needs a fragsim binary on PATH (or FRAGSIM=path).
"""
import glob, json, os, statistics, subprocess, sys

src, dst = sys.argv[1], sys.argv[2]
names = sys.argv[3:]
fragsim = os.environ.get("FRAGSIM", "fragsim")
os.makedirs(dst, exist_ok=True)


def stats(pattern):
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(src, "stats", pattern)))]


def median_wall(prefix):
    runs = stats(f"time_{prefix}_r*.json")
    return (statistics.median(r["wall_s"] for r in runs), len(runs)) if runs else (None, 0)


for snap in sorted(glob.glob(os.path.join(src, "snap", "*.pickle*"))):
    name = os.path.basename(snap).split(".pickle")[0]
    if names and name not in names:
        continue
    st = stats(f"snap_{name}.json")[0]
    argv, skip = [], False
    for a in st["argv"]:
        if skip or a in ("--snapshot", "--stats-out"):
            skip = not skip
            continue
        argv.append(a)
    workload = name.rsplit("_s", 1)[0] if name.endswith(("_s1", "_s2", "_s3")) else name
    args = [fragsim, "import", "-q", "-o", os.path.join(dst, name + ".fst"), snap,
            "--gpu", st["gpu"], "--gpu-total", str(st["total_global_mem"]),
            "--torch", st["torch"], "--cuda", st["cuda"],
            "--tag", f"workload={st['workload']}.py {' '.join(argv)}",
            "--tag", f"seed={st['seed']}",
            "--tag", f"real_reserved_peak={st['reserved_peak']}"]
    if st["fraction"]:
        args += ["--memory-fraction", str(st["fraction"])]
    for arm, key in (("native", "wall_native_s"), ("expandable", "wall_expandable_s")):
        wall, n = median_wall(f"{workload}_{arm}")
        if wall is not None and st["seed"] == 1 and not any(a in st["argv"] for a in ("--streams", "--fraction")):
            args += ["--tag", f"{key}={wall:.3f}", "--tag", f"{key}_runs={n}"]
    asyn = stats(f"time_{workload}_async.json")
    if asyn and st["seed"] == 1:
        args += ["--tag", f"async_reserved_peak={asyn[0]['reserved_peak']}", "--tag", f"wall_async_s={asyn[0]['wall_s']:.3f}"]
    print(name, subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip())
