"""The silent OOM: memory outside the allocator runs out on a shared GPU.

Three processes share one GPU. A blocker (--role blocker) takes all but --leave
bytes of the device and holds them. Two servers (--role server), started
together, each serve two Llama-style models (random weights, fp16) with
generate() on random prompts until --seconds have passed. Their caching
allocators keep what they reserve; what fails first is memory outside the
allocator (cuDNN and cuBLAS workspaces, kernels loaded on first use), and
PyTorch's counters then report no OOM.

With --monitor LOG, a server runs fragsim.monitor (the wheel's package) every
--monitor-interval seconds with log=LOG (traces/workloads/monitor_cohost.sh).

A server writes, beside its snapshot (--snapshot), a device-memory log
(--memlog): one line per sample, "time_ns device free_bytes total_bytes", taken
every 50 ms by torch.cuda.mem_get_info(); and in its --stats-out JSON the time
of its first failed request (first_failure_ns, -1 when none) and the error.
"""
import json
import os
import sys
import threading
import time


def blocker(leave, seconds):
    import torch
    free, total = torch.cuda.mem_get_info()
    take = free - leave
    held = torch.empty(max(0, take), dtype=torch.uint8, device="cuda")
    print(json.dumps({"role": "blocker", "held": held.numel(), "free_before": free, "total": total}), flush=True)
    time.sleep(seconds)


def server(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    if args.snapshot:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=1_500_000)
    mon = None
    if args.monitor:
        import fragsim
        mon = fragsim.monitor(port=0, interval=args.monitor_interval, log=args.monitor)
    stop = threading.Event()
    samples = []

    def sample():
        while not stop.is_set():
            free, total = torch.cuda.mem_get_info()
            samples.append((time.time_ns(), free, total))
            stop.wait(0.05)

    import random
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=8, vocab_size=32000,
                      max_position_embeddings=4096)
    models = [LlamaForCausalLM(cfg).half().cuda().eval() for _ in range(2)]
    first_failure, error, served, failed = -1, "", 0, 0
    t_end = time.time() + args.seconds
    with torch.no_grad():
        while time.time() < t_end:
            m = models[rng.randrange(2)]
            b = rng.randint(1, 8)
            ids = torch.randint(0, 32000, (b, rng.randint(32, 1024)), device="cuda")
            try:
                m.generate(ids, max_new_tokens=rng.randint(8, 32), do_sample=False,
                           pad_token_id=0, attention_mask=torch.ones_like(ids))
                served += 1
            except (RuntimeError, torch.OutOfMemoryError) as e:
                failed += 1
                if first_failure < 0:
                    first_failure, error = time.time_ns(), str(e).splitlines()[0][:300]
    torch.cuda.synchronize()
    stop.set()
    th.join()
    if mon is not None:
        mon.stop()
    if args.snapshot:
        torch.cuda.memory._dump_snapshot(args.snapshot)
    try:
        st = torch.cuda.memory_stats()
    except RuntimeError:  # an allocator that keeps no statistics (fragsim record's)
        st = {}
    if args.memlog:
        with open(args.memlog, "w") as f:
            for t, free, total in samples:
                f.write(f"{t} 0 {free} {total}\n")
    out = {"role": "server", "seed": args.seed, "served": served, "failed": failed,
           "first_failure_ns": first_failure, "error": error,
           "reserved_peak": st.get("reserved_bytes.all.peak", 0),
           "num_ooms": st.get("num_ooms", 0), "num_alloc_retries": st.get("num_alloc_retries", 0),
           "num_device_alloc": st.get("num_device_alloc", 0),
           "total_global_mem": torch.cuda.get_device_properties(0).total_memory,
           "torch": torch.__version__}
    if mon is not None:
        out["monitor"] = {"ticks": mon.ticks, "thread_cpu_s": mon.thread_cpu_s, "child_cpu_s": mon.child_cpu_s,
                          "interval_s": args.monitor_interval}
    if args.stats_out:
        with open(args.stats_out, "w") as f:
            json.dump(out, f)
    print(json.dumps(out), flush=True)


def main():
    import argparse
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--role", choices=["blocker", "server"], required=True)
    p.add_argument("--leave", type=float, default=4.0, help="GiB the blocker leaves free")
    p.add_argument("--seconds", type=float, default=45)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--snapshot")
    p.add_argument("--memlog")
    p.add_argument("--stats-out")
    p.add_argument("--monitor", help="run fragsim.monitor with log=MONITOR")
    p.add_argument("--monitor-interval", type=float, default=1.0)
    args = p.parse_args()
    if args.role == "blocker":
        blocker(int(args.leave * (1 << 30)), args.seconds)
    else:
        server(args)


if __name__ == "__main__":
    sys.exit(main())
