"""Test program: an OOM through the fake torch with fragsim's observer.

Usage: oom.py DIR DEVICE ALLOC DEVICE_ALLOC DEVICE_FREE (OOM_NO_REPORT=1: no report)
Prints the observer's lines on stderr and its last explanation as JSON on
stdout; exits 0 once the OOM reached the program as torch.OutOfMemoryError.
"""
import json
import os
import sys

import torch

import fragsim

dir_, device, alloc, device_alloc, device_free = sys.argv[1], *map(int, sys.argv[2:6])
obs = fragsim.attach_oom_observer(dir=dir_, report=os.environ.get("OOM_NO_REPORT") != "1")
try:
    torch.cuda.oom(device, alloc, device_alloc, device_free)
except torch.OutOfMemoryError:
    pass
else:
    sys.exit(3)
json.dump(obs.last, sys.stdout)
