"""Log the device's free and total memory on a timer, for snapshots.

A PyTorch memory snapshot holds the allocator's own memory only. The memory
outside it (CUDA contexts, kernels loaded lazily, libraries' buffers, other
processes) shows in the device's free memory. This module samples
torch.cuda.mem_get_info() every interval seconds in a daemon thread and
appends one line per device and sample to a side file that
``fragsim import --device-log FILE`` merges into the trace:

    time_ns device free total

four decimal integers separated by single spaces, each line ending in
"\\n": time_ns is the Unix time in nanoseconds (time.time_ns(), the clock
of snapshots and fragsim recordings), device the CUDA device index as
PyTorch numbers it, free and total the bytes cuMemGetInfo reports. Lines
come in time order; every line is written whole and flushed at once, so a
program that dies leaves every sample taken before.

Usable without fragsim record (two lines, after torch is imported)::

    import fragsim_memlog
    fragsim_memlog.start("mem.log")          # the current device, every 100 ms

A device is sampled only once CUDA is initialised (no context is created
early); ``stop()`` takes a last sample and closes the file, which atexit
does too.
"""

import atexit
import os
import threading
import time

__all__ = ["MemLog", "start"]


class MemLog:
    """A running logger; see start."""

    def __init__(self, path, interval=0.1, devices=None):
        import torch

        self._torch = torch
        self._devices = None if devices is None else [int(d) for d in devices]
        self._interval = float(interval)
        if not self._interval > 0:
            raise ValueError("interval must be a positive number of seconds")
        self._file = open(path, "a", encoding="ascii")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fragsim_memlog", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def _targets(self):
        torch = self._torch
        if not torch.cuda.is_initialized():
            return []
        if self._devices is None:
            self._devices = [torch.cuda.current_device()]
        return self._devices

    def sample(self):
        """Append one line per device now (nothing before CUDA is initialised)."""
        with self._lock:
            if self._file is None:
                return
            for d in self._targets():
                free, total = self._torch.cuda.mem_get_info(d)
                self._file.write(f"{time.time_ns()} {d} {int(free)} {int(total)}\n")
            self._file.flush()

    def _run(self):
        while not self._stop.wait(self._interval):
            try:
                self.sample()
            except Exception:  # the driver is shutting down: the log ends here
                return

    def stop(self):
        """Take a last sample and close the file."""
        if self._stop.is_set():
            return
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        try:
            self.sample()
        except Exception:
            pass
        with self._lock:
            self._file.close()
            self._file = None


def start(path, interval=0.1, devices=None):
    """Start logging torch.cuda.mem_get_info() into path every interval
    seconds, for devices (default: the current device when CUDA is first
    seen initialised). Returns the MemLog; call stop() to end it early."""
    return MemLog(os.fspath(path), interval, devices)
