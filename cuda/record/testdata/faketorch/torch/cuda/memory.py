"""Fake torch.cuda.memory. FAKE_TORCH_OLD=1 removes the pluggable allocator API."""
import ctypes
import os

_current = None


def empty_cache():
    pass


def set_per_process_memory_fraction(fraction, device=None):
    pass


def memory_stats(device=None):
    raise RuntimeError("CUDAPluggableAllocator does not yet support getDeviceStats.")


def reset_peak_memory_stats(device=None):
    raise RuntimeError("CUDAPluggableAllocator does not yet support resetPeakStats.")


def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)


class _Hooks:
    """The allocator's extra hooks, as addresses (PyTorch's _allocator)."""

    record_stream_fn = None

    def set_record_stream_fn(self, addr):
        self.record_stream_fn = addr

    def set_begin_allocate_to_pool(self, addr):
        pass

    def set_end_allocate_to_pool_fn(self, addr):
        pass

    def set_release_pool(self, addr):
        pass


if os.environ.get("FAKE_TORCH_OLD") != "1":

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_fn_name, free_fn_name):
            lib = ctypes.CDLL(path)
            self.alloc_fn = getattr(lib, alloc_fn_name)
            self.alloc_fn.restype = ctypes.c_void_p
            self.alloc_fn.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
            self.free_fn = getattr(lib, free_fn_name)
            self.free_fn.restype = None
            self.free_fn.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
            self._allocator = _Hooks()

    def change_current_allocator(allocator):
        global _current
        from . import _initialized

        if _initialized:
            raise RuntimeError("Can't swap an already initialized allocator")
        _current = allocator
