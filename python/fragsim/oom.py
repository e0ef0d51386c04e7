"""The OOM explainer: at a CUDA out-of-memory error, the snapshot, and in
a few lines how much of the failure was fragmentation and which setting
would have avoided it."""

import itertools
import json
import os
import pickle
import sys
import tempfile

from ._binary import run
from ._html import fmt_bytes

__all__ = ["attach_oom_observer"]

_count = itertools.count(1)


def attach_oom_observer(dir=".", report=True, *, timeout=600, stream=None):
    """Registers an observer of CUDA out-of-memory errors (PyTorch's
    torch._C._cuda_attach_out_of_memory_observer, which its
    CUDACachingAllocator calls before raising). At each OOM it writes the
    allocator's snapshot to dir (with its history when
    torch.cuda.memory._record_memory_history is on, else the state), and
    with report the HTML report beside it, then prints at most six lines to
    stream (stderr): the request, the largest free block and the free bytes
    in PyTorch's cache, whether the failure was fragmentation, memory
    outside the allocator or exhaustion, with history the cheapest setting
    under which the run so far would have fitted, and where the files are.

    The figures come from `fragsim explain --json` on the snapshot, with the
    device's memory from torch.cuda.mem_get_info (no GPU allocation). The
    observer never raises: a failure is one line on stream. It returns the
    observer, whose attribute last holds the last explanation (a dict, with
    the paths under "snapshot" and "report")."""
    import torch

    os.makedirs(dir, exist_ok=True)

    def observer(device, alloc, device_alloc, device_free):
        out = stream or sys.stderr
        try:
            observer.last = _explain(torch, dir, report, timeout, out, device, alloc, device_alloc, device_free)
        except BaseException as e:  # never out of the observer: PyTorch raises the OOM next
            try:
                print(f"fragsim: the OOM could not be explained: {e}", file=out, flush=True)
            except BaseException:
                pass

    observer.last = None
    attach = getattr(torch.cuda.memory, "_set_oom_observer", None) or torch._C._cuda_attach_out_of_memory_observer
    attach(observer)
    return observer


def _has_oom_history(snap, device):
    """Whether the snapshot's history holds the device's OOM entry."""
    traces = snap.get("device_traces") or []
    entries = traces[device] if 0 <= device < len(traces) else []
    return any(e.get("action") == "oom" for e in entries or [])


def _explain(torch, dir, report, timeout, out, device, alloc, device_alloc, device_free):
    base = os.path.join(os.path.abspath(dir), f"oom-{os.getpid()}-{next(_count)}")
    snap = torch.cuda.memory._snapshot()
    path = base + ".pickle"
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    try:
        free, total = torch.cuda.mem_get_info(device)
    except Exception:
        free, total = device_free, 0
    # The observer's device_alloc is the memory cap under a memory fraction,
    # else the device total.
    cap = device_alloc if total and 0 < device_alloc < total else 0
    history = _has_oom_history(snap, device)
    args = ["explain", path, "--json", "-q", "--device", str(device), "--device-free", str(free)]
    if total:
        args += ["--device-total", str(total)]
    if cap:
        args += ["--memory-cap", str(cap)]
    if not history:
        args += ["--request", str(alloc)]  # the size PyTorch tried to allocate
    x = json.loads(run(args, timeout=timeout))
    x["snapshot"], x["report"] = path, None
    report_line = ""
    if report:
        try:
            x["report"] = _report(path, base + ".html", total, cap, timeout)
        except Exception as e:
            report_line = f" (no report: {e})"
    for line in _lines(x, device, history, alloc)[:5]:
        print("fragsim: " + line, file=out)
    where = f"snapshot {path}"
    where += f"; report {x['report']}" if x["report"] else report_line
    print("fragsim: " + where, file=out, flush=True)
    return x


def _report(snapshot, html, total, cap, timeout):
    with tempfile.TemporaryDirectory(prefix="fragsim-oom-") as d:
        trace = os.path.join(d, "oom.fst")
        args = ["import", "-q", snapshot, "-o", trace]
        if total:
            args += ["--gpu-total", str(total)]
            if cap:
                args += ["--memory-fraction", repr(cap / total)]
        run(args, timeout=timeout)
        run(["report", trace, "-o", html], timeout=timeout)
    return html


def _lines(x, device, history, alloc):
    """The explanation in four lines (the fifth, where the files are, is
    the caller's)."""
    req, cached, largest = x["request_bytes"], x["cached_free_bytes"], x["largest_free_block_bytes"]
    outside = x.get("outside_bytes")
    if history:
        first = f"CUDA out of memory on device {device}: a request of {fmt_bytes(req)} failed"
    else:
        first = f"CUDA out of memory on device {device}: PyTorch tried to allocate {fmt_bytes(alloc)}"
    lines = [first, f"largest free block {fmt_bytes(largest)}; {fmt_bytes(cached)} free in PyTorch's cache "
                    f"({fmt_bytes(x['reserved_bytes'])} reserved, {fmt_bytes(x['allocated_bytes'])} allocated)"]
    out = f"{fmt_bytes(outside)} outside the allocator" if outside is not None else "memory outside the allocator unknown"
    cls = x["class"]
    if cls == "fragmentation":
        lines.append(f"fragmentation: the cache's free bytes were enough, but no block was "
                     f"({fmt_bytes(req - largest)} short of the largest); {out}")
    elif cls == "outside":
        lines.append(f"memory outside the allocator: the cache was {fmt_bytes(req - cached)} short, less than the "
                     f"{out} (device total - reserved - free: the CUDA context, libraries, other processes)")
    elif req > cached:
        lines.append(f"exhaustion: the cache was {fmt_bytes(req - cached)} short, and the {out} would not have "
                     f"covered it")
    else:
        lines.append(f"exhaustion: a free block was large enough but not usable for this request "
                     f"(another pool or stream); {out}")
    fit = x.get("fit")
    if fit:
        size = fmt_bytes(int(str(fit.get("goal", "fit:0")).split(":", 1)[1]))
        if fit.get("fits"):
            what = fit.get("env") or fit.get("apply") or fit.get("label")
            lines.append(f"setting: {what} would have fitted the run so far in {size}, "
                         f"needing {fmt_bytes(fit.get('min_capacity_bytes', 0))} at its peak")
        else:
            lines.append(f"no setting fits the run so far in {size}: " +
                         fit.get("line", "").replace("Recommended: ", "", 1))
    elif not history:
        lines.append("no setting named: the snapshot holds the state only; "
                     "torch.cuda.memory._record_memory_history() before the run gives the setting that fits")
    return lines
