"""Fake torch.cuda: an OOM on demand, with the snapshot and device memory
the test chose, and the readings fragsim.monitor takes.

FAKE_SNAPSHOT is the pickle _snapshot() returns; FAKE_MEM_INFO is
"FREE,TOTAL" for mem_get_info; FAKE_MEM_INFO_FAILS=1 makes it raise.
FAKE_CUDA_UNINIT=1: CUDA is not initialised; FAKE_DEVICE_COUNT (default 1)
devices, of which those in FAKE_CONTEXTS ("0,1"; default all) have a
context. A test program sets memory._fake's "segments", "stats" and
"mem_info" (per device) to change what the readings give.
"""
import os

from .. import OutOfMemoryError
from . import memory  # noqa: F401
from .memory import memory_snapshot, memory_stats  # noqa: F401


def is_initialized():
    return os.environ.get("FAKE_CUDA_UNINIT") != "1"


def device_count():
    return int(os.environ.get("FAKE_DEVICE_COUNT", "1"))


def current_device():
    return 0


def mem_get_info(device=None):
    if os.environ.get("FAKE_MEM_INFO_FAILS") == "1":
        raise RuntimeError("fake: mem_get_info failed")
    d = 0 if device is None else int(device)
    mem = memory._fake.get("mem_info")
    if mem is not None:
        return mem[d]
    free, total = os.environ["FAKE_MEM_INFO"].split(",")
    return int(free), int(total)


def oom(device, alloc, device_alloc, device_free):
    """Fails an allocation as PyTorch's allocator does: the observers
    first, then torch.OutOfMemoryError."""
    for obs in memory._observers:
        obs(device, alloc, device_alloc, device_free)
    raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {alloc} bytes")
