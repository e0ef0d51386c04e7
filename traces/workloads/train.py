"""A training loop with variable sequence lengths: a 6-layer BERT with a
classification head, AdamW, batches of 8..32 sequences of 32..512 tokens.
"""
from common import main


def add_args(p):
    p.add_argument("--steps", type=int, default=60)


def run(ctx):
    torch, args, rng = ctx["torch"], ctx["args"], ctx["rng"]
    from transformers import BertConfig, BertForSequenceClassification
    model = BertForSequenceClassification(BertConfig(num_hidden_layers=6, num_labels=4)).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def loop():
        for _ in range(args.steps):
            b, s = rng.randint(8, 32), rng.randint(32, 512)
            ids = torch.randint(0, 30522, (b, s), device="cuda")
            labels = torch.randint(0, 4, (b,), device="cuda")
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
    return loop


if __name__ == "__main__":
    main(run, add_args, __doc__)
