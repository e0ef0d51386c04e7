#!/usr/bin/env python3
"""Overhead of `fragsim record`, and a PyTorch snapshot of the same workload.

The workload: seeded single-stream inference over several small
transformer models built from configs with random weights (no downloads):
BERT and GPT-2 with 4 layers (when transformers is installed) and a
torch.nn.TransformerEncoder; random batch sizes and sequence lengths,
outputs held for a while and freed at random moments.

  overhead.py [--runs 5] [--fragsim build/fragsim] [--lib build/libfragsim_hook.so]
      runs the workload alternately under PyTorch's native allocator and under
      `fragsim record` (and, with --arms, under backend:cudaMallocAsync), and
      prints the median wall time of each and the overhead.
  overhead.py --workload
      runs the workload once and prints `FRAGSIM_BENCH {json}`.
  overhead.py --snapshot PATH
      runs the workload with torch.cuda.memory._record_memory_history from the
      start and dumps the snapshot to PATH (and PATH.json: peak reserved and
      allocated), to compare request sizes and order with a recording.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def workload_args(p):
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=1500, help="timed forward passes")
    p.add_argument("--warmup", type=int, default=20, help="untimed forward passes first")
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--hold", type=int, default=8, help="most outputs held at once")
    p.add_argument("--batch-sizes", default="1,4,8")
    p.add_argument("--seq-min", type=int, default=16)
    p.add_argument("--seq-max", type=int, default=384)
    p.add_argument("--no-hf", action="store_true", help="use only torch.nn models")


def forward_args(a):
    """The workload options as command-line arguments for a child run."""
    out = ["--seed", str(a.seed), "--steps", str(a.steps), "--warmup", str(a.warmup), "--dtype", a.dtype,
           "--hold", str(a.hold), "--batch-sizes", a.batch_sizes, "--seq-min", str(a.seq_min),
           "--seq-max", str(a.seq_max)]
    if a.no_hf:
        out.append("--no-hf")
    return out


def build_models(torch, a):
    """Models built from configs, random weights, in eval mode on the GPU."""
    torch.manual_seed(a.seed)
    dtype = getattr(torch, a.dtype)
    models = []
    if not a.no_hf:
        try:
            import transformers
            from transformers import BertConfig, BertModel, GPT2Config, GPT2Model
        except ImportError:
            transformers = None
        if transformers is not None:
            bert = BertModel(BertConfig(num_hidden_layers=4, hidden_size=768, num_attention_heads=12,
                                        intermediate_size=3072, max_position_embeddings=512))
            models.append(("bert-4l", bert, 30522, lambda m, ids: m(input_ids=ids).last_hidden_state))
            gpt2 = GPT2Model(GPT2Config(n_layer=4, n_embd=768, n_head=12, n_positions=512))
            models.append(("gpt2-4l", gpt2, 50257, lambda m, ids: m(input_ids=ids).last_hidden_state))

    class Encoder(torch.nn.Module):
        def __init__(self, vocab, d, layers):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=8, dim_feedforward=4 * d, batch_first=True)
            self.enc = torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)

        def forward(self, ids):
            return self.enc(self.emb(ids))

    models.append(("encoder-4l", Encoder(32000, 512, 4), 32000, lambda m, ids: m(ids)))
    if len(models) == 1:
        models.append(("encoder-6l", Encoder(32000, 768, 6), 32000, lambda m, ids: m(ids)))
    return [(name, m.to("cuda", dtype=dtype).eval(), vocab, fwd) for name, m, vocab, fwd in models]


def run_workload(a):
    """Runs the seeded workload; returns its timings."""
    t_start = time.perf_counter()
    import torch

    try:
        import fragsim_marker
    except ImportError:
        fragsim_marker = None
    t_import = time.perf_counter()
    models = build_models(torch, a)
    rng = random.Random(a.seed)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(a.seed)
    sizes = [int(x) for x in a.batch_sizes.split(",")]
    held = []
    torch.cuda.synchronize()

    def step(i):
        name, m, vocab, fwd = models[rng.randrange(len(models))]
        if fragsim_marker is not None:
            fragsim_marker.step(i)
            fragsim_marker.model(name)
        b, s = rng.choice(sizes), rng.randint(a.seq_min, a.seq_max)
        ids = torch.randint(0, vocab, (b, s), device="cuda", generator=gen)
        with torch.inference_mode():
            held.append(fwd(m, ids))
        while len(held) > a.hold or (held and rng.random() < 0.3):
            held.pop(rng.randrange(len(held)))

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(a.warmup, a.warmup + a.steps):
        step(i)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    held.clear()
    return {
        "loop_s": t1 - t0,
        "setup_s": t0 - t_import,
        "import_s": t_import - t_start,
        "models": [m[0] for m in models],
        "torch": torch.__version__,
        "allocator": torch.cuda.get_allocator_backend() if hasattr(torch.cuda, "get_allocator_backend") else "",
    }


def snapshot(a, path):
    import torch

    # Every action, no stacks: the comparison needs sizes and order only, and
    # symbolising C++ stacks for every entry would take minutes.
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=100_000_000)
    r = run_workload(a)
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(path)
    r["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    r["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    with open(path + ".json", "w") as f:
        json.dump(r, f, indent=1)
    print(f"snapshot: {path} (peak reserved {r['max_memory_reserved']} bytes, "
          f"peak allocated {r['max_memory_allocated']} bytes, loop {r['loop_s']:.3f} s)")


def child(cmd, env=None):
    """Runs one timed child; returns (process wall s, the workload's report)."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - t0
    sys.stdout.write("".join(l + "\n" for l in p.stdout.splitlines() if not l.startswith("FRAGSIM_BENCH ")))
    if p.returncode != 0:
        sys.exit(f"overhead: {' '.join(cmd)} exited with {p.returncode}")
    for line in p.stdout.splitlines():
        if line.startswith("FRAGSIM_BENCH "):
            return wall, json.loads(line[len("FRAGSIM_BENCH "):])
    sys.exit(f"overhead: {' '.join(cmd)} printed no FRAGSIM_BENCH line")


def drive(a):
    me = [sys.executable, os.path.abspath(__file__), "--workload"] + forward_args(a)
    os.makedirs(a.out, exist_ok=True)
    arms = a.arms.split(",")
    res = {arm: {"wall": [], "loop": []} for arm in arms}
    for i in range(a.runs):
        order = arms if i % 2 == 0 else arms[::-1]
        for arm in order:
            env = dict(os.environ)
            if arm == "native":
                cmd = me
            elif arm == "async":
                env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
                cmd = me
            elif arm == "record":
                cmd = [a.fragsim, "record", "-o", os.path.join(a.out, f"record_{i}.fst")]
                if a.lib:
                    cmd += ["--lib", a.lib]
                cmd += ["--"] + me
            else:
                sys.exit(f"overhead: unknown arm {arm}")
            wall, rep = child(cmd, env)
            res[arm]["wall"].append(wall)
            res[arm]["loop"].append(rep["loop_s"])
            print(f"run {i} {arm:7s} loop {rep['loop_s']:.3f} s  process {wall:.3f} s  ({rep['allocator']})", flush=True)
    print()
    print(f"workload: {' '.join(forward_args(a))}; {a.runs} alternating runs per arm; medians:")
    base = statistics.median(res["native"]["loop"]) if "native" in res else None
    base_wall = statistics.median(res["native"]["wall"]) if "native" in res else None
    for arm in arms:
        loop, wall = statistics.median(res[arm]["loop"]), statistics.median(res[arm]["wall"])
        extra = ""
        if base and arm != "native":
            extra = f"  overhead {100 * (loop / base - 1):+.2f}% (loop), {100 * (wall / base_wall - 1):+.2f}% (process)"
        print(f"  {arm:7s} loop {loop:.3f} s  process {wall:.3f} s{extra}")
    with open(os.path.join(a.out, "overhead.json"), "w") as f:
        json.dump({"args": forward_args(a), "runs": res}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    workload_args(p)
    p.add_argument("--workload", action="store_true", help="run the workload once (child mode)")
    p.add_argument("--snapshot", metavar="PATH", help="record a PyTorch memory snapshot of the workload")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--arms", default="native,record", help="comma list of native, record, async")
    p.add_argument("--fragsim", default=os.path.join(ROOT, "build", "fragsim"))
    p.add_argument("--lib", default=os.environ.get("FRAGSIM_HOOK_LIB", ""))
    p.add_argument("--out", default="/tmp/fragsim-overhead")
    a = p.parse_args()
    if a.workload:
        print("FRAGSIM_BENCH " + json.dumps(run_workload(a)), flush=True)
    elif a.snapshot:
        snapshot(a, a.snapshot)
    else:
        drive(a)


if __name__ == "__main__":
    main()
