"""Seeded GPU workload for checking fragsim's `pooled` model of CUDA's stream-ordered pool.

Run it twice with the same seed:

  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 workload.py --seed 1 --json async.json
      measures the real pool: torch.cuda.memory_stats()['reserved_bytes.all.peak'] and the
      pool's own reserved high watermark (cuMemPoolGetAttribute, RESERVED_MEM_HIGH);
  python3 workload.py --seed 1 --snapshot native.pickle --json native.json
      runs the same requests under PyTorch's native caching allocator with memory history
      recording on, and dumps a snapshot whose request stream fragsim imports and replays
      under `--policy pooled`.

The request stream depends only on the seed and the options: every random choice comes
from random.Random(seed) (weights from torch.manual_seed), and the JSON carries a digest
of the choices so two runs can be checked to have made the same ones.

Workloads (--workload):
  encoder  several BERT-base-sized encoders (12 layers, hidden 768, 12 heads, FFN 3072,
           vocabulary 30522; plain torch, or transformers.BertModel with --bert), each
           agent running random forward passes with batch 1, 4 or 8 and 16..seq-max
           tokens, keeping some outputs for a random number of steps;
  churn    plain tensor churn with transformer-like shapes (activations, attention
           scores, FFN intermediates of random batch and length) and random lifetimes.
No model is downloaded: weights are random.
"""
import argparse
import ctypes
import hashlib
import json
import os
import random
import sys
import time

HIDDEN, HEADS, FFN, LAYERS, VOCAB = 768, 12, 3072, 12, 30522


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workload", choices=["encoder", "churn"], default="encoder")
    p.add_argument("--agents", type=int, default=3, help="encoder copies (encoder workload)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seq-max", type=int, default=512)
    p.add_argument("--max-hold", type=int, default=6,
                   help="an output is kept for 0..max-hold steps")
    p.add_argument("--bert", action="store_true",
                   help="use transformers.BertModel(BertConfig()) instead of the plain-torch encoder")
    p.add_argument("--streams", type=int, default=1,
                   help="run agent i on CUDA stream i %% N (1: the default stream only)")
    p.add_argument("--empty-cache-every", type=int, default=0,
                   help="call torch.cuda.empty_cache() every N steps (0: never)")
    p.add_argument("--snapshot", help="record memory history and dump a snapshot here "
                   "(native allocator only)")
    p.add_argument("--max-entries", type=int, default=2_000_000)
    p.add_argument("--json", dest="json_out", help="also write the JSON result here")
    return p.parse_args(argv)


class Digest:
    """Hash of every random choice that shapes the request stream."""

    def __init__(self):
        self.h = hashlib.sha256()
        self.n = 0

    def add(self, *vals):
        self.h.update(repr(vals).encode())
        self.n += 1

    def hexdigest(self):
        return self.h.hexdigest()[:16]


def pool_attributes(device_index):
    """Reserved and used bytes (current and high) of the device's default CUDA mempool,
    through the driver API; {} when it cannot be read."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(dev), device_index) != 0:
            return {}
        pool = ctypes.c_void_p()
        if cuda.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev) != 0:
            return {}
        out = {}
        # CUmemPool_attribute: RESERVED_MEM_CURRENT=5, RESERVED_MEM_HIGH=6,
        # USED_MEM_CURRENT=7, USED_MEM_HIGH=8 (cuuint64_t values).
        for name, attr in (("pool_reserved_current", 5), ("pool_reserved_high", 6),
                           ("pool_used_current", 7), ("pool_used_high", 8)):
            v = ctypes.c_uint64()
            if cuda.cuMemPoolGetAttribute(pool, attr, ctypes.byref(v)) == 0:
                out[name] = v.value
        return out
    except OSError:
        return {}


def build_encoder(torch, bert):
    if bert:
        from transformers import BertConfig, BertModel
        m = BertModel(BertConfig())
        fwd = lambda ids: m(input_ids=ids).last_hidden_state
        return m, fwd
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, HIDDEN)
            self.pos = nn.Embedding(512, HIDDEN)
            self.norm = nn.LayerNorm(HIDDEN)
            layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout=0.0,
                                               activation="gelu", batch_first=True)
            self.layers = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.norm(self.tok(ids) + self.pos(pos))
            return self.layers(x)

    m = Encoder()
    return m, m


def run_encoder(torch, args, rng, dig):
    models, fwds = [], []
    for _ in range(args.agents):
        m, f = build_encoder(torch, args.bert)
        models.append(m.cuda().eval())
        fwds.append(f)
    streams = [torch.cuda.current_stream()] + [torch.cuda.Stream() for _ in range(args.streams - 1)]
    held = []  # (release step, tensor)
    seq_max = min(args.seq_max, 512)

    def loop():
        with torch.no_grad():
            for step in range(args.steps):
                a = rng.randrange(args.agents)
                b = rng.choice([1, 4, 8])
                s = rng.randint(16, seq_max)
                hold = rng.randint(0, args.max_hold)
                dig.add("fwd", step, a, b, s, hold)
                st = streams[a % len(streams)]
                if st is not streams[0]:
                    st.wait_stream(streams[0])
                with torch.cuda.stream(st):
                    ids = torch.randint(0, VOCAB, (b, s), device="cuda")
                    out = fwds[a](ids)
                    del ids
                if st is not streams[0]:
                    streams[0].wait_stream(st)
                    st.synchronize()  # the output's last use is over before it is dropped
                if hold > 0:
                    held.append((step + hold, out))
                del out
                held[:] = [(t, x) for (t, x) in held if t > step]
                if args.empty_cache_every and (step + 1) % args.empty_cache_every == 0:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
            held.clear()
    return loop


def run_churn(torch, args, rng, dig):
    held = []
    seq_max = args.seq_max

    def loop():
        with torch.no_grad():
            for step in range(args.steps):
                b = rng.choice([1, 4, 8])
                s = rng.randint(16, seq_max)
                # One "layer": hidden states, QKV, attention scores, FFN intermediate.
                shapes = [(b, s, HIDDEN), (b, s, 3 * HIDDEN), (b, HEADS, s, s), (b, s, FFN), (b, s, HIDDEN)]
                for i, shape in enumerate(shapes):
                    hold = rng.randint(0, args.max_hold)
                    dig.add("t", step, i, shape, hold)
                    t = torch.empty(shape, device="cuda", dtype=torch.float32)
                    t.fill_(1.0)
                    if hold > 0:
                        held.append((step + hold, t))
                    del t
                held[:] = [(t, x) for (t, x) in held if t > step]
                if args.empty_cache_every and (step + 1) % args.empty_cache_every == 0:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
            held.clear()
    return loop


def main(argv=None):
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        sys.exit("workload.py: no CUDA device")
    backend = torch.cuda.get_allocator_backend()
    if args.snapshot and backend != "native":
        sys.exit("workload.py: --snapshot needs the native allocator (PyTorch cannot record "
                 "memory history under %s)" % backend)
    if args.snapshot:
        # Before the first CUDA allocation, so the trace holds every request.
        torch.cuda.memory._record_memory_history(
            enabled="all", context=None, stacks="python", max_entries=args.max_entries)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    dig = Digest()
    build = run_encoder if args.workload == "encoder" else run_churn
    loop = build(torch, args, rng, dig)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loop()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0

    if args.snapshot:
        torch.cuda.memory._dump_snapshot(args.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    prop = torch.cuda.get_device_properties(0)
    out = {
        "workload": args.workload,
        "seed": args.seed,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "choices": dig.n,
        "choices_digest": dig.hexdigest(),
        "backend": backend,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": prop.name,
        "total_global_mem": prop.total_memory,
        "wall_s": round(wall, 3),
        "reserved_bytes.all.peak": stats.get("reserved_bytes.all.peak", 0),
        "reserved_bytes.all.current": stats.get("reserved_bytes.all.current", 0),
        "allocated_bytes.all.peak": stats.get("allocated_bytes.all.peak", 0),
        "active_bytes.all.peak": stats.get("active_bytes.all.peak", 0),
        "requested_bytes.all.peak": stats.get("requested_bytes.all.peak", 0),
        "num_device_alloc": stats.get("num_device_alloc", 0),
    }
    if backend != "native":
        out.update(pool_attributes(torch.cuda.current_device()))
    if args.snapshot:
        out["snapshot"] = args.snapshot
    text = json.dumps(out, indent=1)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
