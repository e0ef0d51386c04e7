"""fragsim: record this program's CUDA allocations when FRAGSIM_TRACE is set.

``fragsim record`` puts this directory first on PYTHONPATH so that Python
runs this module at start-up, before the program's own code, and the
recording allocator is in place before the first CUDA allocation. Child
Python processes of the recorded program are left alone. An existing
sitecustomize elsewhere on sys.path still runs afterwards.
"""

import os
import sys


def _fragsim_start():
    if not os.environ.get("FRAGSIM_TRACE"):
        return
    owner = os.environ.get("FRAGSIM_OWNER_PID")
    if owner and owner != str(os.getpid()):
        return  # a child of the recorded process: one trace per run
    import fragsim_hook

    try:
        fragsim_hook.install()
    except fragsim_hook.FragsimError as e:
        print(f"fragsim record: cannot record: {e}", file=sys.stderr)
        if os.environ.get("FRAGSIM_STRICT") == "1":
            sys.stderr.flush()
            os._exit(int(os.environ.get("FRAGSIM_FAIL_CODE", "3")))


def _chain():
    """Run the sitecustomize this one shadows, if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.origin is None or os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


_fragsim_start()
_chain()
