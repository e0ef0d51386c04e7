"""Test program for record.Attach: it installs the recording allocator
itself, into the record region whose path it reads on stdin, then runs
workload.py (argv: TRACE STEPS EXIT_CODE; WORKLOAD_END as workload.py)."""
import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
os.environ["FRAGSIM_SHM"] = sys.stdin.readline().strip()
import fragsim_hook  # noqa: E402

fragsim_hook.install(sys.argv[1], lib=os.environ["FRAGSIM_HOOK_LIB"])
sys.argv = [os.path.join(here, "workload.py")] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
