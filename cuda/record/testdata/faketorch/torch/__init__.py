"""A stand-in for torch with just what fragsim_hook touches (tests only)."""
__version__ = "0.0-fake"


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError)."""

from . import cuda  # noqa: E402,F401
