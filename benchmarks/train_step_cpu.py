"""The throughput levers of lesson 14's CPU training (issue 22), each against float32 in the same run.

    python benchmarks/train_step_cpu.py [--steps 12] [--compile] [--model-levers] [--threads 0] [--vocab 8202]

One training step as solutions.translate.train takes it (forward, label-smoothed loss, backward, gradient
clipping, an Adam step) of the CPU default model (config_for("cpu"): d_model 256, 3+3 layers; a vocabulary
of 8,202 by default, the one of BPE 8,000 that benchmarks/translate_cpu.md measured it with) on batches shaped
like Multi30k's at 1,500 padded tokens (100 sentences of 13 to 17 tokens). The
variants take turns step by step on the same batches, each with its own copy of the same initial weights,
after two warm-up steps each, so that a busy moment of the machine falls on all of them:

- fp32: float32, Adam's default (foreach) step: the peer, today's default;
- bf16: torch.autocast("cpu", torch.bfloat16) around forward and loss (Config.precision "bf16");
- fp32 fused: Adam(fused=True), one fused kernel for the optimizer step;
- bf16 fused: both;
- with --compile, bf16 compiled: torch.compile over the model (Config.compile), warm-up not counted;
- with --model-levers, two other models in bf16: dropout 0.1 on the residuals, embeddings and attention
  weights (the CPU default until 2026-12-02; the default has none), and untied embeddings and projection
  (Config.tie_embeddings False): what each costs a step.

Prints each variant's median step time, its target tokens per second and its ratio to fp32 (higher is
better), and whether this CPU has native bf16 units (solutions.translate.cpu_has_bf16).
"""
from __future__ import annotations

import copy
import pathlib
import statistics
import sys
import time
from contextlib import nullcontext

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import solutions  # noqa: E402
from solutions.cli import Parser, number  # noqa: E402
from solutions.translate import build_model, config_for, cpu_has_bf16  # noqa: E402

VOCAB = 8202


def batches(n: int, seed: int = 0, vocab: int = VOCAB) -> list:
    """n Batches of ~1,500 padded tokens: 100 sentence pairs of 13 to 17 tokens, a third of them shorter."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        L = int(torch.randint(13, 18, (1,), generator=g))
        src = torch.randint(4, vocab, (100, L), generator=g).tolist()
        tgt = torch.randint(4, vocab, (100, L), generator=g).tolist()
        for row in range(0, 100, 3):  # a third of the sentences shorter than the batch's longest
            src[row], tgt[row] = src[row][:L - 3], tgt[row][:L - 2]
        out.append(solutions.make_batch(src, tgt))
    return out


class Variant:
    def __init__(self, name: str, model, bf16: bool, fused: bool, compiled: bool):
        self.name, self.model = name, model
        self.amp = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                                    **({"fused": True} if fused else {}))
        self.net = torch.compile(model) if compiled else model
        self.times: list[float] = []

    def step(self, batch, record: bool) -> None:
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        with self.amp:
            logits = self.net(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            loss = solutions.label_smoothed_loss(logits, batch.tgt_out, 0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        if record:
            self.times.append(time.perf_counter() - t0)


def main(argv=None) -> None:
    ap = Parser(prog="python benchmarks/train_step_cpu.py", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=number(int, 1), default=12,
                    help="timed steps per variant (after 2 warm-up steps; default: 12)")
    ap.add_argument("--compile", action="store_true", help="also time bf16 with torch.compile")
    ap.add_argument("--model-levers", action="store_true", help="also time bf16 with dropout 0.1, and untied")
    ap.add_argument("--threads", type=number(int, 0), default=0,
                    help="torch threads (default: 0, PyTorch's own)")
    ap.add_argument("--vocab", type=number(int, 5), default=VOCAB,
                    help=f"vocabulary size (8,202: BPE 8,000; 5,202: 5,000; default: {VOCAB})")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = config_for("cpu")
    base = build_model(cfg, args.vocab)
    base.train()
    specs = [("fp32", False, False, False), ("bf16", True, False, False), ("fp32 fused", False, True, False),
             ("bf16 fused", True, True, False)] + ([("bf16 compiled", True, False, True)] if args.compile
                                                   else [])
    variants = [Variant(n, copy.deepcopy(base), *flags) for n, *flags in specs]
    if args.model_levers:
        for name, change in (("bf16 dropout .1", dict(dropout=0.1, attention_dropout=0.1)),
                             ("bf16 untied", dict(tie_embeddings=False))):
            model = build_model(config_for("cpu", **change), args.vocab)
            model.train()
            variants.append(Variant(name, model, True, False, False))
    data = batches(args.steps + 2, vocab=args.vocab)
    tokens = [int((b.tgt_out != solutions.PAD).sum()) for b in data]
    for i, batch in enumerate(data):
        for v in variants:  # in turns: the same batch, one variant after the other
            v.step(batch, record=i >= 2)
    peer = statistics.median(variants[0].times)
    mean_tokens = sum(tokens[2:]) / len(tokens[2:])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, native bf16 units: "
          f"{cpu_has_bf16()}; d_model {cfg.d_model}, {cfg.n_layers}+{cfg.n_layers} layers, vocabulary "
          f"{args.vocab}, {args.steps} timed steps each, "
          f"{mean_tokens:.0f} target tokens a step")
    print(f"{'variant':<15} {'median step':>12} {'tokens/s':>9} {'vs fp32':>8}")
    for v in variants:
        med = statistics.median(v.times)
        print(f"{v.name:<15} {med:>10.3f} s {mean_tokens / med:>9.0f} {peer / med:>7.2f}x")


if __name__ == "__main__":
    main()
