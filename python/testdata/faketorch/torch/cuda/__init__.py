"""Fake torch.cuda: an OOM on demand, with the snapshot and device memory
the test chose.

FAKE_SNAPSHOT is the pickle _snapshot() returns; FAKE_MEM_INFO is
"FREE,TOTAL" for mem_get_info; FAKE_MEM_INFO_FAILS=1 makes it raise.
"""
import os

from .. import OutOfMemoryError
from . import memory  # noqa: F401


def is_initialized():
    return True


def mem_get_info(device=None):
    if os.environ.get("FAKE_MEM_INFO_FAILS") == "1":
        raise RuntimeError("fake: mem_get_info failed")
    free, total = os.environ["FAKE_MEM_INFO"].split(",")
    return int(free), int(total)


def oom(device, alloc, device_alloc, device_free):
    """Fails an allocation as PyTorch's allocator does: the observers
    first, then torch.OutOfMemoryError."""
    for obs in memory._observers:
        obs(device, alloc, device_alloc, device_free)
    raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {alloc} bytes")
