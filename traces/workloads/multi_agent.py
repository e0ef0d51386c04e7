"""Several agents on one GPU, each with its own BERT-base-sized model (the baseline),
or one shared model serving them all with batched, padded requests (--shared).

Random forward passes with batch sizes 1, 4 and 8 and sequence lengths of 16..384
tokens; each agent keeps some of its outputs for a while and frees them at random
moments. Weights are random (BertModel(BertConfig())): the memory pattern is that
of the real model.

Variants for allocator checks: --streams (each agent on its own CUDA stream, outputs
consumed on the default stream with record_stream), --empty-cache-every N,
--fraction F (from common.py; OOMs are caught and the run goes on).
"""
from common import main, pow2_bucket


def add_args(p):
    p.add_argument("--agents", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--shared", action="store_true",
                   help="one shared model; each step batches every agent's request, padded to a power-of-two length")
    p.add_argument("--streams", action="store_true")
    p.add_argument("--empty-cache-every", type=int, default=0)
    p.add_argument("--seq-max", type=int, default=384)


def run(ctx):
    torch, args, rng = ctx["torch"], ctx["args"], ctx["rng"]
    from transformers import BertConfig, BertModel
    n_models = 1 if args.shared else args.agents
    models = [BertModel(BertConfig()).cuda().eval() for _ in range(n_models)]
    streams = [torch.cuda.Stream() for _ in range(args.agents)] if args.streams else None
    held = []  # outputs kept by agents

    def request():
        return rng.choice([1, 4, 8]), rng.randint(16, args.seq_max)

    def forward(model, b, s):
        ids = torch.randint(0, 30522, (b, s), device="cuda")
        return model(input_ids=ids).last_hidden_state

    def loop():
        with torch.no_grad():
            for step in range(args.steps):
                try:
                    if args.shared:
                        reqs = [request() for _ in range(args.agents)]
                        b = sum(r[0] for r in reqs)
                        s = pow2_bucket(max(r[1] for r in reqs))
                        out = forward(models[0], b, s)
                        # hand each agent its slice; they share the batch's storage
                        held.append(out)
                    else:
                        a = rng.randrange(args.agents)
                        b, s = request()
                        if streams:
                            st = streams[a]
                            st.wait_stream(torch.cuda.current_stream())
                            with torch.cuda.stream(st):
                                out = forward(models[a], b, s)
                            torch.cuda.current_stream().wait_stream(st)
                            out.record_stream(torch.cuda.current_stream())
                            out = out * 1.0  # consumed on the default stream
                        else:
                            out = forward(models[a], b, s)
                        held.append(out)
                except torch.OutOfMemoryError:
                    ctx["ooms"] += 1
                    held.clear()
                # outputs are freed at random moments
                while held and (rng.random() < 0.45 or len(held) > 10):
                    held.pop(rng.randrange(len(held)))
                if args.empty_cache_every and (step + 1) % args.empty_cache_every == 0:
                    torch.cuda.empty_cache()
            held.clear()
    return loop


if __name__ == "__main__":
    main(run, add_args, __doc__)
