"""A stand-in for torch with what fragsim's OOM observer touches (tests only)."""
__version__ = "0.0-fake"


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError."""


from . import _C, cuda  # noqa: E402,F401
