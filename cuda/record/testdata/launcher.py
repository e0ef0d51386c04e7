"""Test launcher: starts workers as torchrun does, each a fresh Python.

Usage: launcher.py MODE N
MODE rank: worker i gets RANK=i, LOCAL_RANK=i, WORLD_SIZE=N; local: only
LOCAL_RANK=i; same: RANK=0 for every worker; none: no rank at all. The launcher imports torch (as
torchrun does) but allocates nothing. It prints "worker I pid P" for each
worker and exits with the first worker's failure, else 0. With
LAUNCHER_NOWAIT=DIR it exits once every worker made its file in DIR (see
worker.py), leaving them running.
"""
import os
import subprocess
import sys

import torch  # noqa: F401  (torchrun imports it too)

mode, n = sys.argv[1], int(sys.argv[2])
here = os.path.dirname(os.path.abspath(__file__))
procs = []
for i in range(n):
    env = dict(os.environ)
    if mode == "rank":
        env.update(RANK=str(i), LOCAL_RANK=str(i), WORLD_SIZE=str(n))
    elif mode == "local":
        env.update(LOCAL_RANK=str(i))
    elif mode == "same":
        env.update(RANK="0")
    p = subprocess.Popen([sys.executable, os.path.join(here, "worker.py"), str(i)], env=env)
    print(f"worker {i} pid {p.pid}", flush=True)
    procs.append(p)
ready = os.environ.get("LAUNCHER_NOWAIT")
if ready:
    import time

    while len(os.listdir(ready)) < n:
        time.sleep(0.01)
    os._exit(0)
codes = [p.wait() for p in procs]
sys.exit(next((c for c in codes if c), 0))
