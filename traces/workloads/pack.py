"""Packs a record_snapshots.sh output folder into at most 8 tar files of at most
15 MiB each (gzip'd pickles), for transfer off the GPU machine.
Usage: pack.py SRC DST
"""
import gzip, os, sys, tarfile

src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
items = []
for d in ("snap",):
    for f in sorted(os.listdir(os.path.join(src, d))):
        p = os.path.join(src, d, f)
        gz = p + ".gz"
        with open(p, "rb") as fi, gzip.open(gz, "wb", compresslevel=6) as fo:
            fo.write(fi.read())
        items.append((gz, os.path.getsize(gz)))
meta = tarfile.open(os.path.join(dst, "meta.tar.gz"), "w:gz")
meta.add(os.path.join(src, "stats"), arcname="stats")
meta.add(os.path.join(src, "log"), arcname="log")
meta.close()
limit = 15 << 20
bundles, cur, size = [], [], 0
for p, s in sorted(items, key=lambda x: -x[1]):
    if cur and size + s > limit:
        bundles.append(cur); cur, size = [], 0
    cur.append(p); size += s
if cur:
    bundles.append(cur)
for i, b in enumerate(bundles[:7]):
    with tarfile.open(os.path.join(dst, f"snap{i}.tar"), "w") as t:
        for p in b:
            t.add(p, arcname=os.path.basename(p))
for b in bundles[7:]:
    print("left out (too many bundles):", b)
for p, s in items:
    print(f"{os.path.basename(p)}\t{s}")
