"""The Python API: fragsim's commands run by the binary, their JSON as dicts.

Nothing is computed here: each function runs one fragsim command with
--json and returns what it printed, as a Result (a dict that Jupyter
renders as the recommendation line and the table of candidates).
"""

import contextlib
import json
import os
import pickle
import tempfile

from ._binary import run
from ._html import render

__all__ = ["Result", "analyze", "compare", "explain", "replay", "report"]

_MAGIC = b"FRAGSIM\x00"


class Result(dict):
    """A command's JSON output; shown in Jupyter as the recommendation line
    and the candidates table (or the figures, for replay and explain)."""

    def _repr_html_(self):
        return render(self)


def _flags(flags):
    """Keyword arguments as command-line flags: goal="fit:24GiB" is
    --goal fit:24GiB, no_advice=True is --no-advice, a list repeats the
    flag, False and None leave it out."""
    args = []
    for key, value in flags.items():
        name = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(name)
        elif isinstance(value, (list, tuple)):
            for v in value:
                args += [name, str(v)]
        else:
            args += [name, str(value)]
    return args


def _is_trace(path):
    try:
        with open(path, "rb") as f:
            return f.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


@contextlib.contextmanager
def _trace(src):
    """A trace path for src: a trace file as it is; a PyTorch snapshot, as
    a file or as the dict torch.cuda.memory._snapshot() returns (pickled
    and piped to `fragsim import -`), imported into a temporary trace; None
    for the built-in trace."""
    if src is None:
        yield None
        return
    if not isinstance(src, dict):
        path = os.fspath(src)
        if _is_trace(path) or not os.path.exists(path):  # the command says what is wrong
            yield path
            return
    with tempfile.TemporaryDirectory(prefix="fragsim-") as d:
        out = os.path.join(d, "snapshot.fst")
        if isinstance(src, dict):
            run(["import", "-q", "-", "-o", out], input=pickle.dumps(src, protocol=4))
        else:
            run(["import", "-q", path, "-o", out])
        yield out


def _json_command(cmd, src, flags):
    with _trace(src) as path:
        args = [cmd] + ([path] if path else []) + ["--json"] + _flags(flags)
        return Result(json.loads(run(args)))


def compare(src=None, goal="reserved", **flags):
    """fragsim compare --json: the policies and settings replayed side by
    side and the recommendation for goal ("reserved", "fragmentation",
    "fit:24GiB"). src is a trace, a snapshot file, a snapshot dict, or None
    for the built-in trace; flags are compare's (policies="caching,ideal",
    capacity="h200", setting=["max_split_size_mb:128"])."""
    return _json_command("compare", src, dict(flags, goal=goal))


def analyze(src=None, goal="reserved", **flags):
    """fragsim analyze --json: where the fragmentation comes from and the
    recommendation for goal (the same as compare's)."""
    return _json_command("analyze", src, dict(flags, goal=goal))


def replay(src, **flags):
    """fragsim replay --json: one replay (policy="expandable",
    capacity="24GiB", min_capacity=True, ...)."""
    return _json_command("replay", src, flags)


def explain(src, **flags):
    """fragsim explain --json: an OOM's request, the cache's reserved,
    allocated and free bytes and largest free block, its class
    (fragmentation, outside, exhaustion) and, with history, the setting
    that fits (request="20MiB", device_total=..., device_free=...)."""
    if isinstance(src, dict):
        args = ["explain", "-", "--json", "-q"] + _flags(flags)
        return Result(json.loads(run(args, input=pickle.dumps(src, protocol=4))))
    return Result(json.loads(run(["explain", os.fspath(src), "--json", "-q"] + _flags(flags))))


def report(src=None, html="report.html", **flags):
    """fragsim report -o html: the interactive HTML report. Returns the
    file's path."""
    html = os.path.abspath(os.fspath(html))
    with _trace(src) as path:
        run(["report"] + ([path] if path else []) + ["-o", html] + _flags(flags))
    return html
