"""Summarises monitor_cohost.sh's runs as JSON: for each scenario and
server, when fragsim.monitor's silent-OOM risk gauge first turned on, when
the server's first request failed, the smallest margin, the risk
warnings it printed and the monitor's own CPU time; then whether the risk
came before the first failure (leave3.3) and never (leave40).

Usage: monitor_summary.py OUTDIR   (exit status 1 when a check fails)
"""
import json
import os
import sys


def server(out, name, s):
    recs = []
    path = os.path.join(out, f"{name}_p{s}.metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    stats = {}
    if os.path.exists(os.path.join(out, f"{name}_p{s}.json")):
        with open(os.path.join(out, f"{name}_p{s}.json")) as f:
            stats = json.load(f)
    warnings = []
    if os.path.exists(os.path.join(out, f"{name}_p{s}.log")):
        with open(os.path.join(out, f"{name}_p{s}.log"), errors="replace") as f:
            warnings = [line.strip() for line in f if line.startswith("fragsim: ")]
    risky = [r for r in recs if r["metrics"].get("fragsim_silent_oom_risk") == 1]
    margins = [r["metrics"]["fragsim_silent_oom_margin_bytes"] for r in recs
               if "fragsim_silent_oom_margin_bytes" in r["metrics"]]
    mon = stats.get("monitor", {})
    return {
        "seed": s, "records": len(recs), "first_record_ns": recs[0]["time_ns"] if recs else None,
        "first_risk_ns": risky[0]["time_ns"] if risky else -1,
        "first_failure_ns": stats.get("first_failure_ns", -1), "served": stats.get("served"),
        "failed": stats.get("failed"), "error": stats.get("error", ""),
        "min_margin_bytes": min(margins) if margins else None,
        "max_fragmentation_ratio": max((r["metrics"].get("fragsim_fragmentation_ratio", 0) for r in recs), default=None),
        "max_outside_bytes": max((r["metrics"].get("fragsim_outside_allocator_bytes", 0) for r in recs), default=None),
        "fragsim_lines": warnings[:4],
        "monitor_cpu_ms_per_tick": (round(1e3 * (mon["thread_cpu_s"] + mon["child_cpu_s"]) / mon["ticks"], 2)
                                    if mon.get("ticks") else None),
        "monitor_ticks": mon.get("ticks"),
    }


def main():
    out = sys.argv[1]
    summary, ok = {}, True
    for name in ("leave3.3", "leave40"):
        ps = [server(out, name, s) for s in (1, 2)]
        starts = [p["first_record_ns"] for p in ps if p["first_record_ns"]]
        t0 = min(starts) if starts else 0
        for p in ps:
            for k in ("first_risk_ns", "first_failure_ns"):
                p[k.replace("_ns", "_s")] = round((p[k] - t0) / 1e9, 2) if p[k] > 0 else None
        risks = [p["first_risk_ns"] for p in ps if p["first_risk_ns"] > 0]
        fails = [p["first_failure_ns"] for p in ps if p["first_failure_ns"] > 0]
        sc = {"servers": ps, "risk": bool(risks), "failures": bool(fails)}
        if name == "leave3.3":
            sc["risk_before_first_failure"] = bool(risks) and (not fails or min(risks) < min(fails))
            sc["lead_s"] = round((min(fails) - min(risks)) / 1e9, 2) if risks and fails else None
            ok = ok and sc["risk_before_first_failure"] and bool(fails)
        else:
            ok = ok and not risks and all(p["records"] > 0 for p in ps)
        summary[name] = sc
    summary["ok"] = ok
    print(json.dumps(summary, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
