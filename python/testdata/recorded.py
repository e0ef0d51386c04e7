"""Test program: records through fragsim.recording() with the fake torch
of cuda/record/testdata (allocations go to the hook library, which serves
them from the fake CUDA driver).

Usage: recorded.py TRACE STEPS [END]
END: "kill" kills the process with SIGKILL inside the block; "late"
expects recording() to refuse (run with FAKE_TORCH_INIT=1: CUDA already
initialised) and exits 4 with its message on stderr. Prints the summary
as JSON on stdout; with RECORDED_SCRAPE=URL, the text fetched from URL
inside the block (FRAGSIM_METRICS_ADDR's endpoint) under "metrics".
"""
import json
import os
import signal
import sys

import torch

import fragsim

out, steps = sys.argv[1], int(sys.argv[2])
end = sys.argv[3] if len(sys.argv) > 3 else ""
if end == "late":
    try:
        with fragsim.recording(out):
            pass
    except fragsim.Error as e:
        print(str(e), file=sys.stderr)
        sys.exit(4)
    sys.exit(5)
rec = fragsim.recording(out)
with rec:
    import fragsim_marker

    torch.cuda.set_per_process_memory_fraction(0.25)
    held = []
    for s in range(steps):
        fragsim_marker.step(s)
        ptrs = [(torch.cuda.alloc(1000 * (s + 1) + i, 7), 1000 * (s + 1) + i) for i in range(10)]
        for p, n in ptrs[:5]:
            torch.cuda.free(p, n, 7)
        held.extend(ptrs[5:])
    scraped = None
    if os.environ.get("RECORDED_SCRAPE"):
        import time
        import urllib.request

        time.sleep(0.3)  # the hook's next device-memory sample
        with urllib.request.urlopen(os.environ["RECORDED_SCRAPE"], timeout=30) as r:
            scraped = r.read().decode()
    if end == "kill":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
json.dump(dict(rec.summary, metrics=scraped), sys.stdout)
