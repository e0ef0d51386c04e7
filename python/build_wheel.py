#!/usr/bin/env python3
"""Builds the fragsim wheel: the fragsim binary, the recording hook library
and the fragsim Python package, with the standard library alone (no
registry, no build backend).

    python3 python/build_wheel.py -o dist/                  # this machine (linux x86_64)
    python3 python/build_wheel.py -o dist/ --goos linux --goarch arm64
    python3 python/build_wheel.py -o dist/ --goos darwin --goarch arm64

Needs Go; the hook library (linux x86_64 only) needs gcc and g++ too. The
binary is built with CGO_ENABLED=0: it is static and runs on any Linux
(manylinux_2_17 and later) or macOS 12 and later, so the other platforms'
wheels are cross-built here, without the hook: there `fragsim record` and
fragsim.recording() say that recording needs the Linux hook.

The hook library links glibc and libstdc++ dynamically (it throws PyTorch's
own C++ exception, so it must share the process's libstdc++). Its platform
tag is the oldest manylinux whose glibc and libstdc++ symbol versions cover
what it uses, read with objdump -T: built on Debian 12 (glibc 2.36, GCC 12)
that is manylinux_2_34 (GLIBC_2.34, GLIBCXX_3.4.29). Build on an older system
(the manylinux2014 image: glibc 2.17, GCC 4.8's libstdc++) for an older tag.

The wheel is dist/fragsim-VERSION-py3-none-PLATFORM.whl, VERSION being the
binary's --version (internal/cli/version.go). It holds the binary as a script
(fragsim-VERSION.data/scripts/fragsim, installed to bin/), the package, the
hook library in fragsim/lib/, fragsim record's Python modules in
fragsim/_hook/, and a RECORD with every file's sha256.
"""

import argparse
import base64
import hashlib
import os
import platform
import re
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "python", "fragsim")
MODULE = "github.com/fragsim/fragsim/internal/cli"

# The libstdc++ symbol versions each manylinux_2_N allows on x86_64 (as
# auditwheel's policy lists them): (N, highest GLIBCXX_3.4.x, highest
# CXXABI_1.3.x). A tag between two entries allows the lower entry's.
_CXX_POLICY = [(17, 19, 7), (24, 22, 10), (31, 28, 12), (34, 29, 13), (35, 30, 13), (39, 33, 15)]

# Platform tags of the wheels without a hook: the static binary's.
_STATIC_TAGS = {
    ("linux", "amd64"): "manylinux_2_17_x86_64",
    ("linux", "arm64"): "manylinux_2_17_aarch64",
    ("darwin", "amd64"): "macosx_12_0_x86_64",
    ("darwin", "arm64"): "macosx_12_0_arm64",
}


def version():
    """The Version variable of internal/cli/version.go."""
    with open(os.path.join(ROOT, "internal", "cli", "version.go")) as f:
        m = re.search(r'^var Version = "([0-9]+\.[0-9]+\.[0-9]+)"$', f.read(), re.M)
    if not m:
        sys.exit("build_wheel: no Version in internal/cli/version.go")
    return m.group(1)


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def go_build(out, pkg, goos, goarch, cgo, flags):
    env = dict(os.environ, GOOS=goos, GOARCH=goarch, CGO_ENABLED="1" if cgo else "0")
    cmd = ["go", "build", "-trimpath"] + flags + ["-o", out, pkg]
    print("build_wheel: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def symbol_versions(lib):
    """The highest GLIBC, GLIBCXX_3.4.x and CXXABI_1.3.x versions the
    library's dynamic symbols need."""
    out = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True, check=True).stdout
    glibc, glibcxx, cxxabi = (2, 0), 0, 0
    for m in re.finditer(r"\b(GLIBC|GLIBCXX|CXXABI)_([0-9.]+)\b", out):
        parts = tuple(int(x) for x in m.group(2).split("."))
        if m.group(1) == "GLIBC":
            glibc = max(glibc, parts[:2])
        elif m.group(1) == "GLIBCXX" and parts[:2] == (3, 4):
            glibcxx = max(glibcxx, parts[2] if len(parts) > 2 else 0)
        elif m.group(1) == "CXXABI" and parts[:2] == (1, 3):
            cxxabi = max(cxxabi, parts[2] if len(parts) > 2 else 0)
    return glibc, glibcxx, cxxabi


def manylinux_tag(lib):
    """The oldest manylinux_2_N_x86_64 tag the hook library qualifies for."""
    glibc, glibcxx, cxxabi = symbol_versions(lib)
    n = max(17, glibc[1])
    while True:
        allowed = [p for p in _CXX_POLICY if p[0] <= n]
        if allowed and glibcxx <= allowed[-1][1] and cxxabi <= allowed[-1][2]:
            break
        later = [p[0] for p in _CXX_POLICY if p[0] > n]
        if not later:
            sys.exit(f"build_wheel: {lib} needs GLIBCXX_3.4.{glibcxx}, CXXABI_1.3.{cxxabi}: no manylinux tag known")
        n = later[0]
    print(f"build_wheel: the hook needs GLIBC_2.{glibc[1]}, GLIBCXX_3.4.{glibcxx}, CXXABI_1.3.{cxxabi}: "
          f"manylinux_2_{n}_x86_64", file=sys.stderr)
    return f"manylinux_2_{n}_x86_64"


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata(ver):
    return (f"Metadata-Version: 2.1\nName: fragsim\nVersion: {ver}\n"
            "Summary: Find, explain and remove GPU memory fragmentation in PyTorch workloads\n"
            "Requires-Python: >=3.8\n"
            "Description-Content-Type: text/markdown\n\n"
            "fragsim records or imports PyTorch allocator traces, replays them offline through allocator "
            "policies (PyTorch's caching allocator reproduced exactly, expandable segments, ...) and says "
            "how fragmented memory is, why, and which setting fixes it. This wheel carries the fragsim "
            "binary (`fragsim`, `python -m fragsim`) and the Python API (`fragsim.compare`, "
            "`fragsim.attach_oom_observer`, `fragsim.recording`).\n")


def write_wheel(outdir, ver, tag, files):
    """Writes the wheel of files (archive name -> (bytes, executable))."""
    name = f"fragsim-{ver}-py3-none-{tag}.whl"
    info = f"fragsim-{ver}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = (metadata(ver).encode(), False)
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: fragsim build_wheel.py\nRoot-Is-Purelib: false\n"
                              f"Tag: py3-none-{tag}\n".encode(), False)
    record = "".join(f"{p},{record_hash(d)},{len(d)}\n" for p, (d, _) in sorted(files.items()))
    files[f"{info}/RECORD"] = ((record + f"{info}/RECORD,,\n").encode(), False)
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name)
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        # The dist-info last, as the wheel spec recommends.
        for p in sorted(files, key=lambda p: (p.startswith(info), p)):
            data, exe = files[p]
            zi = zipfile.ZipInfo(p, date_time=(2020, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o100755 if exe else 0o100644) << 16
            z.writestr(zi, data)
    os.replace(tmp, path)
    return path


def package_files():
    """The package's sources and fragsim record's Python modules."""
    files = {}
    for fn in sorted(os.listdir(PKG)):
        if fn.endswith(".py"):
            with open(os.path.join(PKG, fn), "rb") as f:
                files[f"fragsim/{fn}"] = (f.read(), False)
    for fn in ("fragsim_hook.py", "fragsim_marker.py"):
        with open(os.path.join(ROOT, "cuda", "python", fn), "rb") as f:
            files[f"fragsim/_hook/{fn}"] = (f.read(), False)
    return files


def main():
    ap = argparse.ArgumentParser(description="Build the fragsim wheel.")
    ap.add_argument("-o", "--outdir", default="dist", help="where the wheel goes (default dist/)")
    ap.add_argument("--goos", default=None, help="target OS (linux, darwin; default this machine's)")
    ap.add_argument("--goarch", default=None, help="target architecture (amd64, arm64; default this machine's)")
    ap.add_argument("--no-hook", action="store_true", help="leave the recording hook out (linux amd64 only has one)")
    a = ap.parse_args()
    host_os = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), platform.system().lower())
    host_arch = {"x86_64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine(), platform.machine())
    goos, goarch = a.goos or host_os, a.goarch or host_arch
    if (goos, goarch) not in _STATIC_TAGS:
        sys.exit(f"build_wheel: no wheel tag for {goos}/{goarch} (valid: "
                 + ", ".join(f"{o}/{r}" for o, r in _STATIC_TAGS) + ")")
    hook = (goos, goarch) == ("linux", "amd64") and (host_os, host_arch) == (goos, goarch) and not a.no_hook
    ver = version()
    ldflags = "-s -w"
    rev = commit()
    if rev:
        ldflags += f" -X {MODULE}.Commit={rev}"
    with tempfile.TemporaryDirectory(prefix="fragsim-wheel-") as tmp:
        exe = os.path.join(tmp, "fragsim")
        go_build(exe, "./cmd/fragsim", goos, goarch, False, ["-ldflags", ldflags])
        if (goos, goarch) == (host_os, host_arch):
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
            if not out.startswith(f"fragsim version {ver}"):
                sys.exit(f"build_wheel: the binary says {out.strip()!r}, not version {ver}")
        files = package_files()
        files["fragsim/_version.py"] = (f'__version__ = "{ver}"\n'.encode(), False)
        with open(exe, "rb") as f:
            files[f"fragsim-{ver}.data/scripts/fragsim"] = (f.read(), True)
        tag = _STATIC_TAGS[(goos, goarch)]
        if hook:
            lib = os.path.join(tmp, "libfragsim_hook.so")
            # as cuda/build.sh does, stripped as the binary is (the exported symbols stay)
            go_build(lib, "./cuda/hook", goos, goarch, True, ["-buildmode=c-shared", "-ldflags", "-s -w"])
            tag = manylinux_tag(lib)
            with open(lib, "rb") as f:
                files["fragsim/lib/libfragsim_hook.so"] = (f.read(), True)
        path = write_wheel(a.outdir, ver, tag, files)
    print(path)


if __name__ == "__main__":
    main()
