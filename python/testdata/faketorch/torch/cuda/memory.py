"""Fake torch.cuda.memory: the OOM observers and the snapshot."""
import os
import pickle

_observers = []


def _set_oom_observer(observer):
    _observers.append(observer)


def _snapshot(device=None):
    with open(os.environ["FAKE_SNAPSHOT"], "rb") as f:
        return pickle.load(f)
