"""Fake torch._C: the OOM observer hook of PyTorch's caching allocator, and
which devices have a CUDA context."""
import os


def _cuda_attach_out_of_memory_observer(observer):
    from .cuda import memory

    memory._observers.append(observer)


def _cuda_hasPrimaryContext(device):
    ctx = os.environ.get("FAKE_CONTEXTS")
    if ctx is None:
        return True
    return str(device) in ctx.split(",")
