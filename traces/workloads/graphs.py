"""Serving with CUDA graphs, as inference engines do: an 8-layer fp16 encoder
(random weights), graphs captured on a side stream for a set of batch sizes at
one length, then random requests: a graph replay where a captured graph fits
(the request padded up to it), an eager pass otherwise. Each graph gets a
private memory pool of the caching allocator.

--mempool also runs part of the eager traffic inside a torch.cuda.MemPool
(use_mem_pool); --recapture frees the graphs halfway and captures them again,
so their pools are released and new ones made.
"""
from common import main


def add_args(p):
    p.add_argument("--batches", default="1,2,4,8", help="batch sizes to capture")
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--mempool", action="store_true")
    p.add_argument("--recapture", action="store_true")


def run(ctx):
    torch, args, rng = ctx["torch"], ctx["args"], ctx["rng"]
    nn = torch.nn
    d = 768
    layer = lambda: nn.TransformerEncoderLayer(d, 12, 3072, batch_first=True, dropout=0.0)
    model = nn.TransformerEncoder(layer(), args.layers, enable_nested_tensor=False).cuda().half().eval()
    sizes = [int(b) for b in args.batches.split(",")]
    L = args.length

    def capture():
        graphs = {}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for b in sizes:
                static_in = torch.randn(b, L, d, device="cuda", dtype=torch.half)
                for _ in range(2):  # warm up on the side stream, as the docs ask
                    model(static_in)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=side):
                    static_out = model(static_in)
                graphs[b] = (g, static_in, static_out)
        torch.cuda.current_stream().wait_stream(side)
        return graphs

    pool = torch.cuda.MemPool() if args.mempool else None

    def loop():
        graphs = capture()
        outs = []
        with torch.no_grad():
            for i in range(args.requests):
                if args.recapture and i == args.requests // 2:
                    graphs.clear()
                    torch.cuda.synchronize()
                    graphs = capture()
                b = rng.randint(1, 12)
                n = rng.randint(16, L + 64)
                fit = [s for s in sizes if s >= b]
                if fit and n <= L:
                    g, static_in, static_out = graphs[fit[0]]
                    x = torch.randn(b, n, d, device="cuda", dtype=torch.half)
                    static_in.zero_()
                    static_in[:b, :n].copy_(x)
                    g.replay()
                    y = static_out[:b, :n].clone()
                elif pool is not None and rng.random() < 0.5:
                    with torch.cuda.use_mem_pool(pool):
                        x = torch.randn(b, n, d, device="cuda", dtype=torch.half)
                        y = model(x)
                else:
                    x = torch.randn(b, n, d, device="cuda", dtype=torch.half)
                    y = model(x)
                outs.append(y)
                while len(outs) > rng.randint(0, 4):
                    outs.pop(rng.randrange(len(outs)))
        outs.clear()
        graphs.clear()
    return loop


if __name__ == "__main__":
    main(run, add_args, __doc__)
