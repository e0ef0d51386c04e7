"""Fake torch.cuda: alloc/free call the current pluggable allocator like PyTorch does.

FAKE_TORCH_INIT=1 pretends CUDA is already initialised. FAKE_TORCH_C10=PATH
loads a fake libc10.so (like torch loads its own) and calls the allocator
through its C++ fake_torch_alloc, so that a c10::OutOfMemoryError thrown by
the allocator becomes torch.OutOfMemoryError, as in PyTorch.
"""
import ctypes
import os

from .. import OutOfMemoryError  # noqa: F401

_c10 = None
if os.environ.get("FAKE_TORCH_C10"):
    _c10 = ctypes.CDLL(os.environ["FAKE_TORCH_C10"])
    _c10.fake_torch_alloc.restype = ctypes.c_int
    _c10.fake_torch_alloc.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p,
                                      ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]

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


def alloc(size, stream=0, device=0):
    """Allocate like a tensor would: through the installed allocator."""
    global _initialized
    _initialized = True
    if _c10 is None:
        return memory._current.alloc_fn(size, device, stream)
    out = ctypes.c_void_p()
    msg = ctypes.create_string_buffer(2048)
    fn = ctypes.cast(memory._current.alloc_fn, ctypes.c_void_p)
    rc = _c10.fake_torch_alloc(fn, size, device, stream, ctypes.byref(out), msg, len(msg))
    if rc == 1:
        raise OutOfMemoryError(msg.value.decode())
    if rc != 0:
        raise RuntimeError(msg.value.decode())
    return out.value


def free(ptr, size, stream=0, device=0):
    memory._current.free_fn(ptr, size, device, stream)


def record_stream(ptr, stream):
    """Tensor.record_stream: the allocator's record-stream hook, when it has one."""
    fn = memory._current._allocator.record_stream_fn
    if fn:
        ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(fn)(ptr, stream)
