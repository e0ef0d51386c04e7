"""LLM agents decoding with growing KV caches: several GPT-2-sized models
(GPT2LMHeadModel(GPT2Config()), random weights), sessions with random prompt
lengths (16..256), batch sizes (1..4) and output lengths (16..128), decoded a
token at a time, round-robin over the live sessions, as a server interleaves them.
"""
from common import main


def add_args(p):
    p.add_argument("--models", type=int, default=3)
    p.add_argument("--sessions", type=int, default=4, help="sessions decoding at once")
    p.add_argument("--tokens", type=int, default=700, help="decode steps in all")


def run(ctx):
    torch, args, rng = ctx["torch"], ctx["args"], ctx["rng"]
    from transformers import GPT2Config, GPT2LMHeadModel
    models = [GPT2LMHeadModel(GPT2Config()).cuda().eval() for _ in range(args.models)]

    def new_session():
        m = rng.randrange(args.models)
        b = rng.randint(1, 4)
        prompt = torch.randint(0, 50257, (b, rng.randint(16, 256)), device="cuda")
        return {"m": m, "ids": prompt, "past": None, "left": rng.randint(16, 128)}

    def loop():
        live = [new_session() for _ in range(args.sessions)]
        with torch.no_grad():
            for _ in range(args.tokens):
                i = rng.randrange(len(live))
                s = live[i]
                out = models[s["m"]](input_ids=s["ids"], past_key_values=s["past"], use_cache=True)
                s["past"] = out.past_key_values
                s["ids"] = out.logits[:, -1:, :].argmax(-1)
                del out
                s["left"] -= 1
                if s["left"] == 0:
                    live[i] = new_session()
        live.clear()
    return loop


if __name__ == "__main__":
    main(run, add_args, __doc__)
