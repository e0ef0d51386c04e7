"""fragsim: record this program's CUDA allocations when FRAGSIM_TRACE is set.

``fragsim record`` puts this directory first on PYTHONPATH so that Python
runs this module at start-up, before the program's own code, and the
recording allocator is in place before the first CUDA allocation.

A Python process started by a recording process (torchrun's workers, the
processes of torch.multiprocessing.spawn, a subprocess) records too, into
a trace of its own, once it imports torch: so one that never imports torch
pays nothing, and one that cannot record says why and runs on unrecorded
(only the first Python process ends with fragsim's exit code when it
cannot record). Without fragsim record ($FRAGSIM_SHM_DIR unset), only the
first process records. An existing sitecustomize elsewhere on sys.path
still runs afterwards.
"""

import os
import sys


def _fragsim_start():
    if not os.environ.get("FRAGSIM_TRACE"):
        return
    owner = os.environ.get("FRAGSIM_OWNER_PID")
    if owner and owner != str(os.getpid()):
        # A child of a recording process: under fragsim record it records
        # too, once it imports torch; else one trace per run.
        if os.environ.get("FRAGSIM_SHM_DIR"):
            sys.meta_path.insert(0, _TorchImport())
        return
    import fragsim_hook

    try:
        fragsim_hook.install()
    except fragsim_hook.FragsimError as e:
        print(f"fragsim record: cannot record: {e}", file=sys.stderr)
        if os.environ.get("FRAGSIM_STRICT") == "1":
            sys.stderr.flush()
            os._exit(int(os.environ.get("FRAGSIM_FAIL_CODE", "3")))


def _install_child():
    """Start recording in a child of a recording process, right after torch
    was imported (before any CUDA call can be made)."""
    import fragsim_hook

    try:
        fragsim_hook.install()
    except fragsim_hook.FragsimError as e:
        print(f"fragsim record: process {os.getpid()} is not recorded: {e}", file=sys.stderr)


class _TorchImport:
    """A meta path finder that runs _install_child once torch's module has
    run, whoever imports it first."""

    _busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy:
            return None
        import importlib.util

        self._busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy = False
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _InstallAfter(spec.loader, self)
        return spec


class _InstallAfter:
    """The loader of torch, which then starts recording; it gives the module
    its own loader back."""

    def __init__(self, loader, finder):
        self._loader, self._finder = loader, finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        try:
            sys.meta_path.remove(self._finder)
        except ValueError:
            pass
        self._loader.exec_module(module)
        _install_child()

    def __getattr__(self, name):
        return getattr(self._loader, name)


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
