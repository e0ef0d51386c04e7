"""python -m fragsim ARGS: runs the fragsim binary the wheel installed."""

import os
import subprocess
import sys

from ._binary import Error, environ, find_fragsim_bin


def main():
    try:
        exe = find_fragsim_bin()
    except Error as e:
        print(f"fragsim: {e.message}", file=sys.stderr)
        return 1
    if sys.platform == "win32":
        return subprocess.run([exe] + sys.argv[1:], env=environ()).returncode
    os.execve(exe, [exe] + sys.argv[1:], environ())


if __name__ == "__main__":
    sys.exit(main())
