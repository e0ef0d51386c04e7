"""Reads a wheel with zipfile (which checks each entry's CRC) and prints,
as JSON, each entry's name, size, sha256 as RECORD writes it, and whether
it is executable; writes the entry named by argv[3], if any, to argv[2].

    python3 wheelfiles.py WHEEL [OUT NAME]

TestWheelContents checks RECORD against these figures: hashing the 25 MiB
the wheel holds here, rather than in the race-instrumented test, keeps the
test cheap.
"""

import base64
import hashlib
import json
import sys
import zipfile

out = []
with zipfile.ZipFile(sys.argv[1]) as z:
    for zi in z.infolist():
        data = z.read(zi)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        out.append({"name": zi.filename, "size": len(data), "sha256": "sha256=" + digest,
                    "exe": bool((zi.external_attr >> 16) & 0o111)})
        if len(sys.argv) > 3 and zi.filename == sys.argv[3]:
            with open(sys.argv[2], "wb") as f:
                f.write(data)
print(json.dumps(out))
