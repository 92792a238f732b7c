"""Decoding speed: batched beam search (beam 4) against the same search one source at a time, and
against batched greedy decoding, on the same sources, in one run.

    python benchmarks/decoding.py [--sources 1000] [--checkpoint runs/translate/model.pt]

With a checkpoint from the final notebook, real German test sentences are decoded (from the local
Multi30k mirror when present, else the synthetic corpus); without one, a small random model decodes
random sources to max_len (every hypothesis runs to the end: the slowest case). Prints sentences per
second and the ratio batched / one at a time (target: at least 5).
"""
from __future__ import annotations

import pathlib
import resource
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from solutions import Transformer, beam_search, greedy_decode, make_batch, padding_mask  # noqa: E402
from solutions.cli import Parser, number  # noqa: E402
from solutions.training import batch_by_tokens  # noqa: E402


def sources(args):
    if args.checkpoint:
        from solutions.data import load_data
        from solutions.translate import load_checkpoint
        model, tok, _ = load_checkpoint(args.checkpoint)
        mirror = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
        _, splits = load_data(str(mirror) if mirror.exists() else "synthetic")
        src = [tok.encode(s) for s in splits["test"][0][: args.sources]]
        return model, src, 40
    torch.manual_seed(0)
    model = Transformer(1000, 1000, d_model=128, n_heads=4, n_layers=2, d_ff=256, dropout=0.0).eval()
    g = torch.Generator().manual_seed(0)
    src = [torch.randint(4, 1000, (int(n),), generator=g).tolist()
           for n in torch.randint(5, 25, (args.sources,), generator=g)]
    return model, src, 20


def run(fn, model, src, max_len, batch_tokens):
    t0 = time.perf_counter()
    out = [None] * len(src)
    for idx in batch_by_tokens([len(s) for s in src], batch_tokens):
        b = make_batch([src[i] for i in idx], [[] for _ in idx])
        for i, hyp in zip(idx, fn(model, b.src, b.src_mask, max_len)):
            out[i] = hyp
    return len(src) / (time.perf_counter() - t0), out


def main():
    p = Parser(prog="python benchmarks/decoding.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--sources", type=number(int, 1), default=1000, help="sources decoded (default: 1000)")
    p.add_argument("--single", type=number(int, 1), default=100,
                   help="sources decoded one at a time (the slow peer; default: 100)")
    p.add_argument("--checkpoint", help="a model.pt to decode with (default: an untrained model)")
    a = p.parse_args()
    model, src, max_len = sources(a)
    beam = lambda m, s, mask, n: beam_search(m, s, mask, n, beam_size=4, alpha=0.6)  # noqa: E731
    greedy_rate, _ = run(greedy_decode, model, src, max_len, 6000)
    beam_rate, batched = run(beam, model, src, max_len, 1500)
    t0 = time.perf_counter()
    single = [beam(model, torch.tensor([s]), padding_mask(torch.tensor([s])), max_len)[0]
              for s in src[: a.single]]
    single_rate = a.single / (time.perf_counter() - t0)
    agree = sum(x == y for x, y in zip(single, batched[: a.single]))
    print(f"{len(src)} sources, max_len {max_len}, {torch.get_num_threads()} threads")
    print(f"greedy, batched:          {greedy_rate:8.1f} sentences/s")
    print(f"beam 4, batched:          {beam_rate:8.1f} sentences/s")
    print(f"beam 4, one at a time:    {single_rate:8.1f} sentences/s  (first {a.single} sources)")
    print(f"batched and one-at-a-time beams agree on {agree}/{a.single} sources")
    print(f"RATIO batched beam / one at a time = {beam_rate / single_rate:.1f} (target >= 5)")
    print(f"peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
