#!/usr/bin/env python3
"""Times the whole `fragsim import` command of one or more fragsim binaries
against pickle.loads timed inside a fresh interpreter (the bytes already
read), runs interleaved so that other load on the machine hits all alike,
and checks that the binaries write the same trace. Prints the best and the
median seconds of each and their ratios to pickle.loads (best/best,
median/median), then the same ratios against the whole Python process
that loads (py_proc: the interpreter's start, the file's read, the load
and the exit, timed by this parent as it times fragsim, so that both
sides are a process). Unlike compare_binaries.sh, no /usr/bin/time wraps the command (it adds
a process of its own), so there are no RSS or fault figures.

usage: bench/import/whole_command.py N LABEL=FRAGSIM ... -- SNAPSHOT.pickle ...
"""
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    n = int(sys.argv[1])
    sep = sys.argv.index("--")
    bins = [a.split("=", 1) for a in sys.argv[2:sep]]
    files = sys.argv[sep + 1:]
    tmp = tempfile.mkdtemp(prefix="fragsim-cmd.")
    print("%-24s %15s " % ("file", "pickle best/med") +
          " ".join("%26s" % ("%s best/med (x)" % label) for label, _ in bins) +
          " %15s " % "py_proc best/med" + " ".join("%12s" % ("%s x" % label) for label, _ in bins))
    for f in files:
        ts = {label: [] for label, _ in bins}
        py, proc = [], []
        for r in range(n):
            for label, b in (bins if r % 2 == 0 else bins[::-1]):
                t = time.perf_counter()
                subprocess.run([b, "import", f, "-o", os.path.join(tmp, label + ".fst")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                ts[label].append(time.perf_counter() - t)
            t = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c",
                 "import pickle, sys, time\n"
                 "data = open(sys.argv[1], 'rb').read()\n"
                 "t = time.perf_counter()\n"
                 "pickle.loads(data)\n"
                 "print(time.perf_counter() - t)", f],
                capture_output=True, text=True, check=True)
            proc.append(time.perf_counter() - t)
            py.append(float(out.stdout))
        digests = {hashlib.sha256(open(os.path.join(tmp, label + ".fst"), "rb").read()).hexdigest()
                   for label, _ in bins}
        pb, pm = min(py), statistics.median(py)
        print("%-24s %7.4f/%.4f " % (os.path.basename(f), pb, pm) +
              " ".join("%.4f/%.4f (%4.1f/%4.1f)" % (min(v), statistics.median(v), pb / min(v),
                                                   pm / statistics.median(v)) for v in ts.values()),
              " %7.4f/%.4f " % (min(proc), statistics.median(proc)) +
              " ".join("%5.1f/%5.1f" % (min(proc) / min(v), statistics.median(proc) / statistics.median(v))
                       for v in ts.values()),
              "" if len(digests) == 1 else "TRACES DIFFER")


if __name__ == "__main__":
    main()
