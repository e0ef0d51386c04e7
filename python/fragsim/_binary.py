"""Finding and running the fragsim binary the wheel installed."""

import os
import subprocess
import sys
import sysconfig

__all__ = ["Error", "find_fragsim_bin", "hook_library", "run"]


class Error(Exception):
    """A fragsim command failed: message is its error line, code its exit
    status (1: bad input or a failed replay, 2: a usage error or a trace cut
    short; see the README's exit status table), stderr all it printed."""

    def __init__(self, message, code=1, stderr=""):
        super().__init__(message)
        self.message = message
        self.code = code
        self.stderr = stderr

    def __str__(self):
        return f"{self.message} (exit {self.code})"


def find_fragsim_bin():
    """The fragsim executable: $FRAGSIM_BIN, else, as ruff finds its own,
    the scripts directory of this environment, the user scheme's, and a
    bin/ beside the package (pip install --target)."""
    exe = "fragsim" + (sysconfig.get_config_var("EXE") or "")
    env = os.environ.get("FRAGSIM_BIN")
    if env:
        if os.path.isfile(env):
            return env
        raise Error(f"FRAGSIM_BIN={env} is not a file")
    tried = [os.path.join(sysconfig.get_path("scripts"), exe)]
    if sys.version_info >= (3, 10):
        user = sysconfig.get_preferred_scheme("user")
    elif os.name == "nt":
        user = "nt_user"
    elif sys.platform == "darwin" and sys._framework:
        user = "osx_framework_user"
    else:
        user = "posix_user"
    tried.append(os.path.join(sysconfig.get_path("scripts", scheme=user), exe))
    tried.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", exe))
    for path in tried:
        if os.path.isfile(path):
            return path
    raise Error("the fragsim executable was not found (tried " + ", ".join(tried) +
                "): install the wheel (pip install fragsim-*.whl) or set FRAGSIM_BIN")


def hook_library():
    """The recording hook library inside the package, or None (the wheels
    for platforms other than linux x86_64 have none)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libfragsim_hook.so")
    return path if os.path.isfile(path) else None


def environ():
    """The environment for the binary: the package's hook library for record."""
    env = dict(os.environ)
    lib = hook_library()
    if lib and not env.get("FRAGSIM_HOOK_LIB"):
        env["FRAGSIM_HOOK_LIB"] = lib
    return env


def run(args, input=None, timeout=None):
    """Runs fragsim with args and returns its stdout (bytes). A non-zero
    exit raises Error with the command's message and exit code."""
    cmd = [find_fragsim_bin()] + [os.fspath(a) for a in args]
    p = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=environ(), timeout=timeout)
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace")
        lines = [line for line in err.splitlines() if line.startswith("fragsim: ")]
        msg = lines[-1][len("fragsim: "):] if lines else (err.strip().splitlines() or ["fragsim failed"])[-1]
        raise Error(msg, p.returncode, err)
    return p.stdout
