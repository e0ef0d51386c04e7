"""Compares real cudaMallocAsync peaks with fragsim's pooled replay of the same workload.

Usage: compare.py OUTDIR   (the directory run.sh wrote)
For every NAME with NAME.async.json and NAME.replay_pooled.json it prints the real peak
reserved bytes (the pool's RESERVED_MEM_HIGH when read, else memory_stats'
reserved_bytes.all.peak), the model's peak_reserved_bytes and the relative error, the
errors of the model's variants (NAME.replay_pooled_*.json, other --conf options) and, at
the end, each variant's worst error, best first; it also checks that the two runs made the
same random choices.
"""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def gib(n):
    return "%.3f GiB" % (n / 2**30)


def main(out):
    rows = []
    variants = {}
    for a in sorted(glob.glob(os.path.join(out, "*.async.json"))):
        name = os.path.basename(a)[: -len(".async.json")]
        real = load(a)
        nat = load(os.path.join(out, name + ".native.json"))
        rep = load(os.path.join(out, name + ".replay_pooled.json"))
        if real is None:
            continue
        real_peak = real.get("pool_reserved_high") or real.get("reserved_bytes.all.peak", 0)
        line = "%-22s real async %s" % (name, gib(real_peak))
        if nat is not None and nat.get("choices_digest") != real.get("choices_digest"):
            line += "  WARNING: the runs made different choices"
        if rep is not None and real_peak:
            model = rep.get("peak_reserved_bytes", 0)
            err = 100.0 * (model - real_peak) / real_peak
            line += "  pooled model %s  error %+.1f%%" % (gib(model), err)
            rows.append(abs(err))
            for vpath in sorted(glob.glob(os.path.join(out, name + ".replay_pooled_*.json"))):
                v = load(vpath)
                if v is None:
                    continue
                conf = v.get("conf") or vpath[len(os.path.join(out, name + ".replay_pooled_")):-5]
                verr = 100.0 * (v.get("peak_reserved_bytes", 0) - real_peak) / real_peak
                variants.setdefault(conf, []).append(abs(verr))
                line += " [%s %+.1f%%]" % (conf, verr)
        if nat is not None:
            line += "  (native real %s" % gib(nat.get("reserved_bytes.all.peak", 0))
            cr = load(os.path.join(out, name + ".replay_caching.json"))
            if cr is not None:
                line += ", caching replay %s" % gib(cr.get("peak_reserved_bytes", 0))
            ir = load(os.path.join(out, name + ".replay_ideal.json"))
            if ir is not None:
                line += ", ideal %s" % gib(ir.get("peak_reserved_bytes", 0))
            line += ")"
        print(line)
    if rows:
        print("pooled model (defaults): max |error| %.1f%% over %d workloads (target: within 10%%)" % (max(rows), len(rows)))
    for conf, errs in sorted(variants.items(), key=lambda kv: max(kv[1])):
        print("  variant %-40s max |error| %.1f%% over %d" % (conf, max(errs), len(errs)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: compare.py OUTDIR")
    main(sys.argv[1])
