#!/usr/bin/env python3
"""Writes the pickle decoder's test inputs: values.p{0..5}.pickle (with
values.json, the same value as JSON: tuples as lists), evil_*.pickle (pickles
that would run os.system if Python loaded them) and the fuzz seed corpus.
Run from this directory: python3 gen.py"""
import json, os, pickle

value = {
    "none": None, "t": True, "f": False,
    "small": 7, "byte": 255, "short": 65535, "int32": -2**31, "neg": -1,
    "addr": 0x7f3a_5c00_0000, "time_us": 1_764_000_000_123_456,
    "u64": 2**64 - 1, "u63": 2**63 + 5, "i64min": -2**63, "long9": 2**63 - 1,
    "float": 0.8125, "negfloat": -1.5e300,
    "str": "hello", "unicode": "größe ✓", "empty": "", "long_str": "x" * 300,
    "bytes": b"raw\x01bytes",
    "list": [1, 2, [3, [4, []]]], "tuple": (0, 0), "t1": (1,), "t3": (1, 2, 3), "t4": (1, 2, 3, 4),
    "empty_tuple": (), "dict": {"a": {"b": {}}},
    "many": list(range(2500)),
    "big_dict": {"k%d" % i: i for i in range(1200)},
}
shared = {"filename": "model.py", "line": 3, "name": "forward"}
value["frames"] = [shared, shared, {"filename": "model.py", "line": 4, "name": "forward"}]


def plain(v):
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


with open("values.json", "w") as f:
    json.dump(plain(value), f, sort_keys=True)
for proto in (0, 1, 2, 3, 4, 5):
    v = dict(value)
    if proto < 3:
        del v["bytes"]  # protocols 0 to 2 pickle bytes through a REDUCE call
    with open("values.p%d.pickle" % proto, "wb") as f:
        pickle.dump(v, f, protocol=proto)


PWNED = "/tmp/fragsim-pickle-pwned"


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + PWNED,))


for proto in (2, 4, 5):
    with open("evil_reduce.p%d.pickle" % proto, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [[Evil()]]}, f, protocol=proto)


def go_quote(b):
    return "".join("\\x%02x" % c for c in b)


seeds = {
    "values_p2": pickle.dumps({"a": [1, (2, 3)], "b": 2**40, "c": "x"}, protocol=2),
    "values_p5": pickle.dumps({"a": [1, (2, 3)], "b": -2**62, "c": 1.5, "d": None}, protocol=5),
    "snapshot": pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": 2**45, "size": 512, "stream": 0, "time_us": 2**50, "frames": [shared]}]]}, protocol=4),
    "evil": pickle.dumps(Evil(), protocol=2),
    "values_p0": pickle.dumps({"a": [1, (2, 3)], "b": 2**64 - 1, "c": "x\u00e9\u2713\\\n", "d": None, "e": 0.5, "f": True}, protocol=0),
}
for name, b in seeds.items():
    with open(os.path.join("fuzz", "FuzzDecode", name), "w") as f:
        f.write("go test fuzz v1\n[]byte(\"%s\")\n" % go_quote(b))
