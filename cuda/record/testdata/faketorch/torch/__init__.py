"""A stand-in for torch with just what fragsim_hook touches (tests only)."""
__version__ = "0.0-fake"
from . import cuda  # noqa: E402,F401
