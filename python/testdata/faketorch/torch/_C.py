"""Fake torch._C: the OOM observer hook of PyTorch's caching allocator."""


def _cuda_attach_out_of_memory_observer(observer):
    from .cuda import memory

    memory._observers.append(observer)
