"""Llama-style agents answering with generate(): three small Llama models
(LlamaForCausalLM(LlamaConfig(...)), random fp16 weights, grouped-query
attention), requests drawn from the seed (a model, a batch of 1..4 prompts of
16..256 tokens, 16..64 new tokens), served one after another with greedy
generate(), as a host of several agents does. Every request generates all its
tokens (no end-of-sequence token), so the requests, and the allocations, depend
on the seed alone.
"""
from common import main


def add_args(p):
    p.add_argument("--models", type=int, default=3)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--layers", type=int, default=8)


def run(ctx):
    torch, args, rng = ctx["torch"], ctx["args"], ctx["rng"]
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=args.layers, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=1024)
    models = [LlamaForCausalLM(cfg).cuda().half().eval() for _ in range(args.models)]
    for m in models:
        m.generation_config.eos_token_id = None
        m.generation_config.pad_token_id = 0

    def loop():
        with torch.no_grad():
            for _ in range(args.requests):
                m = models[rng.randrange(args.models)]
                b, n, new = rng.randint(1, 4), rng.randint(16, 256), rng.randint(16, 64)
                ids = torch.randint(1, 32000, (b, n), device="cuda")
                out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False)
                del out, ids
    return loop


if __name__ == "__main__":
    main(run, add_args, __doc__)
