"""Fake torch.cuda: alloc/free call the current pluggable allocator like PyTorch does.

FAKE_TORCH_INIT=1 pretends CUDA is already initialised.
"""
import os

_initialized = os.environ.get("FAKE_TORCH_INIT") == "1"


def is_initialized():
    return _initialized


def current_device():
    return 0


from . import memory  # noqa: E402
from .memory import (  # noqa: E402,F401
    empty_cache,
    max_memory_allocated,
    memory_allocated,
    memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)


_info_calls = 0


def mem_get_info(device=None):
    """(free, total): 80 GiB total, 1 MiB less free at each call."""
    global _info_calls
    _info_calls += 1
    return (80 << 30) - _info_calls * (1 << 20), 80 << 30


def alloc(size, stream=0):
    """Allocate like a tensor would: through the installed allocator."""
    global _initialized
    _initialized = True
    return memory._current.alloc_fn(size, 0, stream)


def free(ptr, size, stream=0):
    memory._current.free_fn(ptr, size, 0, stream)
