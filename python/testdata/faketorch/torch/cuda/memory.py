"""Fake torch.cuda.memory: the snapshot, the statistics, and the observers
torch._C attaches."""
import os
import pickle

_observers = []

# What the readings give (see torch.cuda's docstring): "segments" (a
# memory_snapshot() list), "stats" ({device: memory_stats dict}, None:
# an allocator without statistics, which raises) and "mem_info"
# ({device: (free, total)}).
_fake = {}


def _snapshot(device=None):
    with open(os.environ["FAKE_SNAPSHOT"], "rb") as f:
        return pickle.load(f)


def memory_snapshot():
    """The segments, built afresh at each call as PyTorch builds them."""
    segs = _fake.get("segments")
    if segs is None:
        segs = _snapshot()["segments"]
    return [dict(s, blocks=[dict(b) for b in s["blocks"]]) for s in segs]


def memory_stats(device=None):
    stats = _fake.get("stats")
    if stats is None:
        raise RuntimeError("fake: this allocator keeps no statistics")
    return dict(stats.get(0 if device is None else int(device), {}))
