"""Record a PyTorch program's GPU allocations with fragsim.

Two lines at the very top of your program, before anything touches CUDA:

    import fragsim_hook
    fragsim_hook.install("run.fragsim", lib="/path/to/libfragsim_hook.so")

(or run it unchanged with ``fragsim record -o run.fragsim -- python prog.py``,
which does the same through a sitecustomize module). ``install`` loads
libfragsim_hook.so as PyTorch's pluggable CUDA allocator: every tensor
allocation and free is recorded (size, device, stream, time, address) and
served by the CUDA driver's stream-ordered memory pool. The trace is written
in the background, a chunk at least every second, and closed at exit or on
SIGTERM; under fragsim record, which maps the hook's buffers and writes the
trace itself, nothing recorded is lost however the process ends. Markers:
see fragsim_marker.
"""

import atexit
import ctypes
import functools
import json
import os
import signal
import sys

__all__ = ["FragsimError", "install", "close", "flush", "recording"]

_lib = None
_closed = False
_owner = None  # the recording process; forked children never call into the library


class FragsimError(RuntimeError):
    """Recording cannot start; the message says why."""


def recording():
    """True while a trace is being recorded in this process."""
    return _lib is not None and not _closed and os.getpid() == _owner


def _load(lib):
    try:
        cdll = ctypes.CDLL(lib)
    except OSError as e:
        raise FragsimError(f"cannot load the fragsim hook library {lib}: {e}") from None
    cdll.fragsim_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    cdll.fragsim_open.restype = ctypes.c_int
    cdll.fragsim_last_error.argtypes = []
    cdll.fragsim_last_error.restype = ctypes.c_char_p
    cdll.fragsim_close.argtypes = []
    cdll.fragsim_close.restype = ctypes.c_int
    cdll.fragsim_flush.argtypes = []
    cdll.fragsim_flush.restype = ctypes.c_int
    cdll.fragsim_empty_cache.argtypes = []
    cdll.fragsim_empty_cache.restype = None
    cdll.fragsim_set_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
    cdll.fragsim_set_fraction.restype = None
    cdll.fragsim_marker.argtypes = [ctypes.c_int, ctypes.c_char_p]
    cdll.fragsim_marker.restype = None
    cdll.fragsim_memory_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    cdll.fragsim_memory_stats.restype = None
    cdll.fragsim_reset_peak.argtypes = [ctypes.c_int]
    cdll.fragsim_reset_peak.restype = None
    return cdll


def _env_tags():
    """The header tags fragsim record passes in $FRAGSIM_TAGS (a JSON object)."""
    raw = os.environ.get("FRAGSIM_TAGS")
    if not raw:
        return {}
    try:
        tags = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


def _last_error(cdll):
    msg = cdll.fragsim_last_error()
    return msg.decode(errors="replace") if msg else "unknown error"


def install(path=None, lib=None, tags=None):
    """Start recording this process's CUDA allocations into the trace at path.

    path defaults to $FRAGSIM_TRACE, lib to $FRAGSIM_HOOK_LIB and tags (header
    tags, a dict of strings) to the JSON object in $FRAGSIM_TAGS. Call it
    before the first CUDA allocation: PyTorch cannot swap its allocator
    afterwards. Raises FragsimError with the reason when recording cannot
    start (no torch, torch too old, CUDA already initialised, no driver or
    no GPU).
    """
    global _lib, _owner
    if _lib is not None:
        return
    path = path or os.environ.get("FRAGSIM_TRACE")
    lib = lib or os.environ.get("FRAGSIM_HOOK_LIB")
    if not path:
        raise FragsimError("no trace path: pass install(path) or set FRAGSIM_TRACE")
    if not lib:
        raise FragsimError("no hook library: pass install(lib=...) or set FRAGSIM_HOOK_LIB to libfragsim_hook.so")
    lib = os.path.abspath(lib)
    if not os.path.exists(lib):
        raise FragsimError(f"hook library {lib} does not exist (build it with cuda/build.sh)")
    try:
        import torch
    except ImportError as e:
        raise FragsimError(f"cannot import torch: {e}") from None
    mem = getattr(torch.cuda, "memory", None)
    if mem is None or not hasattr(mem, "CUDAPluggableAllocator") or not hasattr(mem, "change_current_allocator"):
        raise FragsimError(
            f"torch {torch.__version__} is too old: it has no torch.cuda.memory.CUDAPluggableAllocator "
            "(pluggable allocators need torch 2.0 or newer)"
        )
    if torch.cuda.is_initialized():
        raise FragsimError(
            "CUDA was initialised before fragsim could install its allocator: PyTorch cannot swap an "
            "allocator once it is in use. Install fragsim first thing (fragsim record does)"
        )

    cdll = _load(lib)
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""
    meta = {
        "torch_version": str(torch.__version__),
        "command_line": list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv),
        "alloc_conf": conf,
        "device": 0,
        "tags": dict(tags if tags is not None else _env_tags()),
        # The record region of a fragsim process that writes the trace: the
        # library reads the environment it was loaded with, which lacks a
        # variable set by this process since it started.
        "shm": os.environ.get("FRAGSIM_SHM", ""),
        # fragsim record's region directory: each recording process (a
        # launcher's workers, say) makes its own region there.
        "shm_dir": os.environ.get("FRAGSIM_SHM_DIR", ""),
        # Which worker this is, when a launcher (torchrun) says so: fragsim
        # record names and tags each process's trace after it.
        "launch": {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE") if k in os.environ},
    }
    if cdll.fragsim_open(os.fsencode(path), json.dumps(meta).encode()) != 0:
        raise FragsimError(_last_error(cdll))
    try:
        alloc = mem.CUDAPluggableAllocator(lib, "fragsim_alloc", "fragsim_free")
        _set_hooks(alloc, cdll)
        mem.change_current_allocator(alloc)
    except RuntimeError as e:
        cdll.fragsim_close()
        if "already initialized" in str(e):
            raise FragsimError(
                "PyTorch's CUDA allocator was already initialised (Can't swap an already initialized "
                "allocator): install fragsim before the first CUDA call"
            ) from None
        raise FragsimError(f"PyTorch refused the fragsim allocator: {e}") from None
    _lib, _owner = cdll, os.getpid()
    os.environ["FRAGSIM_OWNER_PID"] = str(_owner)
    _wrap_torch(torch)
    atexit.register(close)
    _install_sigterm()


def _set_hooks(alloc, cdll):
    """Gives the allocator the hook's record-stream and private-pool
    functions, where PyTorch has them. With the first, a block another
    stream used (Tensor.record_stream) is freed once that stream is done
    with it, as PyTorch's own allocator frees it, and the trace holds when.
    With the others (2.3 and newer), CUDA graph captures and MemPools are
    recorded as pool events, and the device-memory sampler keeps off the
    driver while a capture may be under way."""
    hooks = getattr(alloc, "_allocator", None)
    if hooks is None:
        return
    addr = lambda name: ctypes.cast(getattr(cdll, name), ctypes.c_void_p).value
    if hasattr(hooks, "set_record_stream_fn"):
        hooks.set_record_stream_fn(addr("fragsim_record_stream"))
    if not hasattr(hooks, "set_begin_allocate_to_pool"):
        return
    hooks.set_begin_allocate_to_pool(addr("fragsim_begin_allocate_to_pool"))
    hooks.set_end_allocate_to_pool_fn(addr("fragsim_end_allocate_to_pool"))
    hooks.set_release_pool(addr("fragsim_release_pool"))


def _device_index(torch, device):
    try:
        from torch.cuda._utils import _get_device_index

        return _get_device_index(device, optional=True)
    except Exception:
        return device if isinstance(device, int) else 0


def memory_stats(device=None):
    """The few torch.cuda.memory_stats keys the pluggable allocator can give.

    Like PyTorch's cudaMallocAsync backend: allocated and active bytes are
    the live requested bytes, reserved bytes are the CUDA pool's.
    """
    import torch

    out = (ctypes.c_int64 * 4)()
    _lib.fragsim_memory_stats(_device_index(torch, device), out)
    live, peak, reserved, reserved_peak = out
    stats = {}
    for key, cur, high in (("allocated_bytes", live, peak), ("active_bytes", live, peak),
                           ("requested_bytes", live, peak), ("reserved_bytes", reserved, reserved_peak)):
        stats[f"{key}.all.current"] = cur
        stats[f"{key}.all.peak"] = high
    return stats


def _wrap_torch(torch):
    """Record empty_cache and set_per_process_memory_fraction calls, and
    answer memory_stats (and so memory_allocated, max_memory_reserved, ...),
    which PyTorch's pluggable allocator refuses."""
    orig_empty = torch.cuda.empty_cache

    @functools.wraps(orig_empty)
    def empty_cache():
        orig_empty()
        if _lib is not None:
            _lib.fragsim_empty_cache()

    orig_fraction = torch.cuda.set_per_process_memory_fraction

    @functools.wraps(orig_fraction)
    def set_per_process_memory_fraction(fraction, device=None):
        orig_fraction(fraction, device)
        if _lib is not None:
            _lib.fragsim_set_fraction(float(fraction), int(_device_index(torch, device)))

    def reset_peak_memory_stats(device=None):
        """Resets the peaks memory_stats reports."""
        _lib.fragsim_reset_peak(_device_index(torch, device))

    def reset_accumulated_memory_stats(device=None):
        """No accumulated statistics are kept under fragsim."""

    wrappers = {
        "empty_cache": empty_cache,
        "set_per_process_memory_fraction": set_per_process_memory_fraction,
        "memory_stats": memory_stats,
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
    }
    for mod in (torch.cuda, torch.cuda.memory):
        for name, fn in wrappers.items():
            if hasattr(mod, name):
                setattr(mod, name, fn)
    _wrap_mempool(torch)


def _wrap_mempool(torch):
    """Count the use a torch.cuda.MemPool holds of its pool (its
    constructor's, which the pluggable allocator's hooks do not see), so
    that the pool's release is recorded when the MemPool goes."""
    pool_cls = getattr(torch.cuda, "MemPool", None) or getattr(torch.cuda.memory, "MemPool", None)
    if pool_cls is None or not hasattr(_lib, "fragsim_pool_incref"):
        return
    _lib.fragsim_pool_incref.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
    orig_init = pool_cls.__init__

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        a, b = self.id
        _lib.fragsim_pool_incref(int(a), int(b))

    pool_cls.__init__ = __init__


def _install_sigterm():
    """Close the trace on SIGTERM, then let the previous handler act."""
    try:
        prev = signal.getsignal(signal.SIGTERM)
    except (ValueError, AttributeError):
        return
    if prev is signal.SIG_IGN:
        return

    def on_term(signum, frame):
        close()
        if callable(prev):
            return prev(signum, frame)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: atexit still closes the trace
        pass


def flush():
    """Write everything recorded so far to the trace now (under fragsim
    record everything recorded is already safe with the parent)."""
    if recording():
        _lib.fragsim_flush()


def close():
    """Stop recording and close the trace (memory keeps being served)."""
    global _closed
    if _lib is None or _closed or os.getpid() != _owner:
        return
    _closed = True
    if _lib.fragsim_close() != 0:
        print(f"fragsim: {_last_error(_lib)}", file=sys.stderr)


def _marker(kind, text):
    if recording():
        _lib.fragsim_marker(int(kind), str(text).encode("utf-8", errors="replace"))
