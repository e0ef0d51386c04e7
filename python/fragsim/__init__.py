"""fragsim: find, explain and remove GPU memory fragmentation in PyTorch.

The wheel carries the fragsim binary (``fragsim`` on PATH, or
``python -m fragsim``); this package drives it:

    import fragsim
    r = fragsim.compare("run.fst", goal="fit:24GiB")   # or a snapshot dict
    r["recommendation"]["line"]

    fragsim.attach_oom_observer()         # explain the next CUDA OOM

    fragsim.monitor(port=9400)            # Prometheus metrics of the allocator

    with fragsim.recording("run.fst"):    # before the first CUDA allocation
        main()

Every result comes from the binary's JSON: nothing is computed here.
"""

from ._binary import Error, find_fragsim_bin
from .api import Result, analyze, compare, explain, replay, report
from .monitor import Monitor, monitor
from .oom import attach_oom_observer
from .recording import recording

try:
    from ._version import __version__
except ImportError:  # a source tree, not a wheel
    __version__ = "0+unknown"

__all__ = ["Error", "Monitor", "Result", "analyze", "attach_oom_observer", "compare", "explain", "find_fragsim_bin",
           "monitor", "recording", "replay", "report"]
