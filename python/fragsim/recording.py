"""Recording from inside a Python program: fragsim record's allocator,
installed by a context manager."""

import importlib
import json
import os
import subprocess
import sys
import tempfile

from ._binary import Error, find_fragsim_bin, hook_library

__all__ = ["recording"]

_FIRST = ("fragsim.recording() must be entered before the first CUDA allocation: {why}. "
          "Enter it first thing in the program, before any tensor goes to the GPU, or run the "
          "program unchanged under `fragsim record -o {path} -- python prog.py ARGS`")


def _hook_module():
    """fragsim_hook (and fragsim_marker), the modules fragsim record's
    start-up hook imports: in the wheel under fragsim/_hook, in a source
    tree in cuda/python."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "_hook"), os.path.join(here, "..", "..", "cuda", "python")):
        if os.path.isfile(os.path.join(d, "fragsim_hook.py")):
            if d not in sys.path:
                sys.path.insert(0, d)
            return importlib.import_module("fragsim_hook")
    raise Error("fragsim_hook.py is missing from the fragsim package")


class recording:
    """Records this process's CUDA allocations into the trace at path, as
    `fragsim record` does:

        with fragsim.recording("run.fst"):
            train()

    Enter it before the first CUDA allocation (PyTorch cannot swap its
    allocator once it is in use); otherwise it raises fragsim.Error saying
    so. The recording allocator (the hook library, as PyTorch's pluggable
    allocator) serves every allocation from then on; a fragsim process
    started on entry writes the trace, so every call is kept however this
    process ends (an exception, os._exit, a signal, a crash), and the trace
    is complete and closed when the block exits. Under
    torch.cuda.set_per_process_memory_fraction, allocations fail where
    PyTorch's allocator would fail them. After the block, the allocator
    keeps serving memory without recording; a process records once.
    fragsim_marker (importable inside the block) marks steps and agents.
    The summary of the trace is the attribute summary, once exited.
    """

    def __init__(self, path="run.fst", tags=None, timeout=120):
        self.path = os.path.abspath(os.fspath(path))
        self.tags = tags
        self.timeout = timeout
        self.summary = None
        self._proc = None
        self._hook = None

    def __enter__(self):
        try:
            import torch
        except ImportError as e:
            raise Error(f"fragsim.recording() needs torch: {e}") from None
        if torch.cuda.is_initialized():
            raise Error(_FIRST.format(why="CUDA is already initialised in this process", path=self.path))
        lib = os.environ.get("FRAGSIM_HOOK_LIB") or hook_library()
        if not lib:
            raise Error("recording needs the CUDA hook library, which this fragsim package lacks (the Linux "
                        "x86_64 wheel carries it; the others carry the replay binary only): record on the Linux "
                        "machine with the GPU, or take a snapshot there (torch.cuda.memory._record_memory_history)")
        hook = _hook_module()
        if hook._lib is not None:
            raise Error("this process has recorded already: a process records once (PyTorch keeps the "
                        "recording allocator after the first recording)")
        self._errlog = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([find_fragsim_bin(), "attach", "--pid", str(os.getpid()), "-o", self.path],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog,
                                      start_new_session=True)
        line = self._proc.stdout.readline().decode(errors="replace").strip()
        if not line.startswith("region "):
            self._fail()
        os.environ["FRAGSIM_SHM"] = line[len("region "):]
        try:
            hook.install(self.path, lib=lib, tags=self.tags)
        except hook.FragsimError as e:
            self._stop()
            msg = str(e)
            if "initialised" in msg or "initialized" in msg:
                raise Error(_FIRST.format(why=msg, path=self.path)) from None
            raise Error(f"recording cannot start: {msg}") from None
        finally:
            os.environ.pop("FRAGSIM_SHM", None)  # child processes do not record
        self._hook = hook
        return self

    def _stop(self):
        """Ends the trace writer; returns its output."""
        try:
            out, _ = self._proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, _ = self._proc.communicate()
        return out.decode(errors="replace")

    def _fail(self, out=""):
        self._errlog.seek(0)
        err = self._errlog.read().decode(errors="replace").strip()
        lines = [x for x in err.splitlines() if x.startswith("fragsim: ")]
        msg = lines[-1][len("fragsim: "):] if lines else (err or out or "the trace writer failed")
        code = self._proc.wait()
        raise Error(msg, code, err)

    def __exit__(self, exc_type, exc, tb):
        self._hook.close()
        out = self._stop()
        if self._proc.returncode != 0:
            if exc_type is None:
                self._fail(out)
            return False
        for line in out.splitlines():
            if line.startswith("{"):
                self.summary = json.loads(line)
        return False
