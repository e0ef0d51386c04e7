"""A data-parallel training job of several ranks with skewed data, for the fleet.

Each rank trains the same small transformer encoder under DistributedDataParallel
(gloo, so that several ranks may share one GPU) on batches of 8 sequences. The
data loader is uneven: rank r draws sequence lengths up to 256 * (1 + r), so the
last rank peaks highest, as a rank fed the longest documents does.

Run it under a launcher:

    python -m torch.distributed.run --nproc-per-node 2 traces/workloads/ddp_ranks.py \
        --snapshot-dir OUT                       # one PyTorch snapshot per rank
    fragsim record -o OUT/run.fst -- python -m torch.distributed.run \
        --nproc-per-node 2 traces/workloads/ddp_ranks.py   # one trace per rank

--snapshot-dir writes OUT/snapshot_RANK.pickle (history recorded from before the
first CUDA allocation). The ranks use device LOCAL_RANK modulo the GPUs there are.
"""
import argparse
import os
import random


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--snapshot-dir", help="write snapshot_RANK.pickle here")
    args = p.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    if args.snapshot_dir:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=2_000_000)
    dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed * 1000 + rank)

    d = 512
    layer = nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True)
    model = nn.Sequential(nn.Embedding(8192, d), nn.TransformerEncoder(layer, 6), nn.Linear(d, 8192)).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    longest = 256 * (1 + rank)
    for _ in range(args.steps):
        n = rng.randint(32, longest)
        x = torch.randint(0, 8192, (8, n), device=dev)
        loss = nn.functional.cross_entropy(ddp(x).flatten(0, 1), x.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    if args.snapshot_dir:
        os.makedirs(args.snapshot_dir, exist_ok=True)
        torch.cuda.memory._dump_snapshot(os.path.join(args.snapshot_dir, f"snapshot_{rank}.pickle"))
    print(f"rank {rank}: peak reserved {torch.cuda.max_memory_reserved()} B", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
