"""Watching a running service: its allocator's fragmentation, the largest
block it can still allocate, the memory outside the allocator and the
silent-OOM risk, as Prometheus metrics.

    import fragsim
    fragsim.monitor(port=9400)      # http://HOST:9400/metrics, every 15 s

A daemon thread reads PyTorch's own counters (torch.cuda.memory_stats,
torch.cuda.mem_get_info, torch.cuda.memory_snapshot) and sends them to one
`fragsim monitor` process, which computes the metrics (the same code as
the recording hook's and `fragsim cohost`'s forecast): nothing is computed
here, and nothing is allocated on the GPU.
"""

import atexit
import http.server
import json
import os
import pickle
import select
import subprocess
import sys
import tempfile
import threading
import time

from ._binary import Error, find_fragsim_bin

__all__ = ["Monitor", "monitor"]

_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# The figures of torch.cuda.memory_stats() the metrics read; the rest of
# the dictionary is not sent.
_STATS = ("reserved_bytes.all.current", "allocated_bytes.all.current", "inactive_split_bytes.all.current",
          "num_ooms", "num_alloc_retries")


def monitor(port=9400, interval=15, device=None, log=None, on_risk=None, *, addr="", outside_reserve=None,
            registry=None, stream=None):
    """Starts monitoring this process's CUDA allocator in a daemon thread and
    returns the Monitor.

    Every interval seconds (the first tick at once) the thread takes
    torch.cuda.memory_snapshot(), torch.cuda.memory_stats() and
    torch.cuda.mem_get_info() of each device (device: an index or a list;
    None: every device this process has a CUDA context on; nothing before
    CUDA is initialised) and serves, labelled by device, at
    http://ADDR:PORT/metrics:

    - fragsim_reserved_bytes, fragsim_allocated_bytes, fragsim_inactive_split_bytes;
    - fragsim_largest_free_block_bytes, fragsim_cached_free_bytes and
      fragsim_fragmentation_ratio (1 - largest free / cached free);
    - fragsim_at_peak_pct, fragsim_outside_allocator_bytes (device total -
      reserved - device free), fragsim_device_free_bytes;
    - fragsim_silent_oom_risk (0 or 1) and fragsim_silent_oom_margin_bytes:
      device free less what the memory outside the allocator may still ask
      for at once (outside_reserve, default 172 MiB), the rule of
      `fragsim cohost`'s forecast;
    - fragsim_oom_total and fragsim_alloc_retries_total.

    The text is prometheus_client's when it is installed, else the same
    format written here. port=None serves nothing; with prometheus_client
    the metrics then join registry (default: prometheus_client.REGISTRY),
    for a service that already exports its own.

    When the risk turns on, one line goes to stream (stderr) naming the
    margin and what reduces it (empty_cache() and what it returns, the
    cache cap), and on_risk(record) is called in the monitor's thread with
    the device's record (a dict: device, metrics, warning, remedy); a
    service acts on it between requests (set a flag there; call
    torch.cuda.empty_cache() where no request runs).

    log="metrics.jsonl" appends each device's record at each tick, one
    JSON object a line; `fragsim import SNAPSHOT --metrics-log
    metrics.jsonl` merges its device memory into a trace.

    A tick holds the GIL while it takes and pickles the snapshot (about 10
    ms on a 10,000-block cache); with torch.cuda.memory._record_memory_history
    on, PyTorch builds the history too at each snapshot, which costs more.
    The monitor never raises into the service: a failure is one line on
    stream, said once, and the thread goes on."""
    if not interval > 0:
        raise ValueError("interval must be a positive number of seconds")
    return Monitor(port, interval, device, log, on_risk, addr, outside_reserve, registry, stream)._start()


class Monitor:
    """A running monitor (see monitor()). last holds each device's last
    record; port the port it serves on (None: none)."""

    def __init__(self, port, interval, device, log, on_risk, addr="", outside_reserve=None, registry=None,
                 stream=None):
        import torch

        self._torch = torch
        self._interval = float(interval)
        self._devices = None if device is None else [int(d) for d in (device if isinstance(device, (list, tuple))
                                                                       else [device])]
        self._log_path = os.fspath(log) if log is not None else None
        self._log = None
        self._on_risk = on_risk
        self._addr = addr
        self._port = port
        self._reserve = outside_reserve
        self._registry = registry
        self._stream = stream
        self._lock = threading.Lock()  # guards last and the described metrics
        self._tick_lock = threading.Lock()
        self._stop = threading.Event()
        self._proc = None
        self._buf = b""
        self._errlog = None
        self._said = set()
        self._server = None
        self._collector = None
        self._thread = None
        self.described = []  # [{"name", "type", "help"}], from the fragsim process
        self.last = {}
        self.port = None
        self.ticks = 0
        self.thread_cpu_s = 0.0  # the monitor's own CPU time in its ticks
        self.child_cpu_s = 0.0  # the fragsim monitor processes' CPU time

    # ---- starting and stopping ----

    def _start(self):
        if self._log_path:
            try:
                self._log = open(self._log_path, "a", encoding="utf-8")
            except OSError as e:
                self._say(f"monitor: cannot open the log: {e}")
        try:
            self._spawn()
        except Exception as e:  # the metrics come once fragsim runs
            self._say(f"monitor: {_message(e)}")
        self._serve()
        self._thread = threading.Thread(target=self._run, name="fragsim_monitor", daemon=True)
        self._thread.start()
        atexit.register(self.stop)
        return self

    def stop(self):
        """Stops the thread, the server and the fragsim process, and closes
        the log."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=60)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._collector is not None and self._port is None:
            try:
                self._target_registry().unregister(self._collector)
            except Exception:
                pass
        with self._tick_lock:
            self._end_proc()
            if self._log is not None:
                self._log.close()
                self._log = None

    def _run(self):
        while not self._stop.is_set():
            self.tick()
            if self._stop.wait(self._interval):
                return

    # ---- the fragsim process ----

    def _spawn(self):
        args = [find_fragsim_bin(), "monitor"]
        if self._reserve is not None:
            args += ["--outside-reserve", str(self._reserve)]
        env = dict(os.environ)
        env.setdefault("GOMAXPROCS", "1")  # a few milliseconds of work a tick: no need for the service's cores
        self._errlog = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog,
                                      env=env, start_new_session=True)
        self._buf = b""
        hello = json.loads(self._readline(30))
        with self._lock:
            self.described = hello["metrics"]

    def _end_proc(self):
        p = self._proc
        if p is None:
            return
        self._proc = None
        try:
            p.stdin.close()
            p.wait(timeout=10)
        except Exception:
            p.kill()
            p.wait()
        self._account(p, final=True)
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    def _proc_error(self, what):
        """The fragsim process's last error line, or what."""
        try:
            self._errlog.seek(0)
            lines = [x for x in self._errlog.read().decode(errors="replace").splitlines() if x.strip()]
            return lines[-1] if lines else what
        except Exception:
            return what

    def _readline(self, timeout):
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Error(f"fragsim monitor gave no answer in {timeout} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._proc.wait()
                raise Error(self._proc_error(f"fragsim monitor ended (exit {self._proc.returncode})"))
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _account(self, p, final=False):
        """Adds the fragsim process's CPU time since the last call."""
        try:
            with open(f"/proc/{p.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return
        self.child_cpu_s += cpu - getattr(p, "_fragsim_cpu", 0.0)
        p._fragsim_cpu = cpu

    # ---- one tick ----

    def tick(self):
        """Takes one reading now and updates the metrics (the thread calls
        it every interval). Never raises; returns the records (a list, one
        per device), or None when nothing was read."""
        with self._tick_lock:
            t0 = time.thread_time()
            try:
                return self._tick()
            except BaseException as e:  # never into the service
                self._end_proc()
                self._say(f"monitor: {_message(e)}")
                return None
            finally:
                self.thread_cpu_s += time.thread_time() - t0

    def _targets(self):
        torch = self._torch
        if not torch.cuda.is_initialized():
            return []
        has_ctx = getattr(torch._C, "_cuda_hasPrimaryContext", None)
        if self._devices is not None:
            devs = self._devices
        elif has_ctx is not None:
            devs = range(torch.cuda.device_count())
        else:
            return [torch.cuda.current_device()]
        # A device without a context would get one (hundreds of MiB) from
        # mem_get_info: leave it out.
        return [d for d in devs if has_ctx is None or has_ctx(d)]

    def _tick(self):
        devs = self._targets()
        if not devs:
            return None
        torch = self._torch
        now = time.time_ns()
        info = []
        for d in devs:
            try:
                st = torch.cuda.memory_stats(d)
                stats = {k: int(st[k]) for k in _STATS if k in st}
            except Exception:  # an allocator that keeps no statistics
                stats = {}
            free, total = torch.cuda.mem_get_info(d)
            info.append({"device": int(d), "free_bytes": int(free), "total_bytes": int(total), "stats": stats})
        data = pickle.dumps(torch.cuda.memory_snapshot(), protocol=4)
        if self._proc is None:
            self._spawn()
        head = json.dumps({"time_ns": now, "snapshot_bytes": len(data), "devices": info}).encode() + b"\n"
        try:
            self._proc.stdin.write(head)
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except BrokenPipeError:
            self._proc.wait()
            raise Error(self._proc_error(f"fragsim monitor ended (exit {self._proc.returncode})")) from None
        reply = json.loads(self._readline(max(30.0, 2 * self._interval)))
        self._account(self._proc)
        if "error" in reply:
            raise Error(f"fragsim monitor: {reply['error']}")
        records = reply["records"]
        with self._lock:
            for r in records:
                self.last[r["device"]] = r
        self.ticks += 1
        if self._log is not None:
            for r in records:
                self._log.write(json.dumps(r, separators=(",", ":")) + "\n")
            self._log.flush()
        for r in records:
            if r.get("risk_crossed"):
                self._risk(r)
        return records

    def _risk(self, record):
        try:
            print("fragsim: " + record.get("warning", "silent OOM risk"), file=self._stream or sys.stderr, flush=True)
        except Exception:
            pass
        if self._on_risk is not None:
            try:
                self._on_risk(record)
            except Exception as e:
                self._say(f"monitor: on_risk raised {type(e).__name__}: {e}")

    def _say(self, line):
        """Prints line to the stream once."""
        if line in self._said:
            return
        self._said.add(line)
        try:
            print("fragsim: " + line, file=self._stream or sys.stderr, flush=True)
        except Exception:
            pass

    # ---- serving ----

    def families(self):
        """The metrics as (name, type, help, [(device, value)]) in
        exposition order."""
        with self._lock:
            described, last = list(self.described), dict(self.last)
        out = []
        for m in described:
            samples = [(str(d), r["metrics"][m["name"]]) for d, r in sorted(last.items()) if m["name"] in r["metrics"]]
            out.append((m["name"], m["type"], m["help"], samples))
        return out

    def exposition(self):
        """The metrics in Prometheus's text format (bytes): prometheus_client's
        when it is installed, else written here in the same format."""
        try:
            from prometheus_client import CollectorRegistry, generate_latest
        except ImportError:
            return _text(self.families())
        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Collector(self))
        return generate_latest(reg)

    def _target_registry(self):
        if self._registry is not None:
            return self._registry
        from prometheus_client import REGISTRY

        return REGISTRY

    def _serve(self):
        if self._port is None:
            try:
                self._collector = _Collector(self)
                self._target_registry().register(self._collector)
            except ImportError:
                self._collector = None
            except Exception as e:
                self._collector = None
                self._say(f"monitor: cannot add the metrics to the registry: {e}")
            return
        mon = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] not in ("/", "/metrics"):
                    self.send_error(404)
                    return
                try:
                    body = mon.exposition()
                except Exception as e:
                    self.send_error(500, str(e))
                    return
                self.send_response(200)
                self.send_header("Content-Type", _CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

        try:
            self._server = Server((self._addr, int(self._port)), Handler)
        except OSError as e:
            self._say(f"monitor: cannot serve on {self._addr or '*'}:{self._port}: {e}; the metrics are not served")
            return
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="fragsim_monitor_http", daemon=True).start()


class _Collector:
    """The monitor's metrics for prometheus_client."""

    def __init__(self, mon):
        self._mon = mon

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, typ, help_, samples in self._mon.families():
            if typ == "counter":
                fam = CounterMetricFamily(name, help_, labels=["device"])
            else:
                fam = GaugeMetricFamily(name, help_, labels=["device"])
            for dev, v in samples:
                fam.add_metric([dev], v)
            yield fam


def _number(v):
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53):
        return str(int(v))
    return repr(float(v))


def _text(families):
    """Prometheus's text format (0.0.4) of families."""
    out = []
    for name, typ, help_, samples in families:
        out.append(f"# HELP {name} " + help_.replace("\\", "\\\\").replace("\n", "\\n"))
        out.append(f"# TYPE {name} {typ}")
        for dev, v in samples:
            out.append(f'{name}{{device="{dev}"}} {_number(v)}')
    return ("\n".join(out) + "\n").encode()


def _message(e):
    if isinstance(e, Error):
        return e.message
    return f"{type(e).__name__}: {e}"
