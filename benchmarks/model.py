"""Training-step and inference throughput: solutions.Transformer against the same model built on
nn.Transformer, measured in turns in one run.

    python benchmarks/model.py [--device cpu|cuda] [--dtype fp32|bf16] [--steps 10] [--padding both]

Both models have the same configuration (embeddings scaled by sqrt(d_model), sinusoidal positions,
post-norm, tied embeddings and projection) and see the same batches. A training step is forward,
label-smoothed loss, backward and an Adam step; inference is encode plus one decoder step for a
batch of prefixes. Batches are random ids padded either uniformly (lengths L/2 to L) or as the course's
length-bucketed batches are (see PADDING): nn.Transformer's eval fast path skips padding in the encoder,
so the share of padding matters to the inference ratio. The two models take turns step by step on the same
batch (`--steps` training steps, five times as many inferences, after two warm-up steps), so a busy moment of
the machine falls on both.
Prints target tokens per second, the ratio ours / PyTorch's (higher is better) over the whole run, and
the median and quartiles of the step-by-step ratios.
"""
from __future__ import annotations

import math
import pathlib
import resource
import sys
import time
import warnings

import torch
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import solutions  # noqa: E402
from solutions import PAD, causal_mask, label_smoothed_loss, padding_mask, target_mask  # noqa: E402
from solutions.cli import Parser, device_name, number  # noqa: E402


class TorchTransformer(nn.Module):
    """The paper's model on nn.Transformer, with our conventions (batch-first, masks True = attend)."""

    def __init__(self, vocab, d_model, n_heads, n_layers, d_ff):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.register_buffer("pe", solutions.sinusoidal_encoding(512, d_model), persistent=False)
        self.core = nn.Transformer(d_model, n_heads, n_layers, n_layers, d_ff, dropout=0.1, batch_first=True)
        self.core.encoder.norm = self.core.decoder.norm = None  # post-norm, as the paper (and ours)
        self.generator = nn.Linear(d_model, vocab)
        self.generator.weight = self.embed.weight

    def _in(self, ids):
        return self.embed(ids) * math.sqrt(self.d_model) + self.pe[: ids.size(1)]

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        L = tgt_in.size(1)
        out = self.core(self._in(src), self._in(tgt_in), tgt_mask=~causal_mask(L, src.device)[0, 0],
                        src_key_padding_mask=~src_mask[:, 0, 0], tgt_key_padding_mask=tgt_in == PAD,
                        memory_key_padding_mask=~src_mask[:, 0, 0])
        return self.generator(out)

    def encode(self, src, src_mask):
        return self.core.encoder(self._in(src), src_key_padding_mask=~src_mask[:, 0, 0])

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        L = tgt_in.size(1)
        return self.core.decoder(self._in(tgt_in), memory, tgt_mask=~causal_mask(L, memory.device)[0, 0],
                                 memory_key_padding_mask=~src_mask[:, 0, 0])


# The shortest source and target length of a batch, as a fraction of its longest (L):
#   uniform:  lengths anywhere from L/2 to L, 75% of the tokens real on both sides;
#   bucketed: what batch_by_tokens makes of Multi30k (sorted by length; measured with --max-tokens 1500:
#             87% of the source tokens and 98% of the target tokens are real, the rest padding).
PADDING = {"uniform": (0.5, 0.5), "bucketed": (0.75, 0.96)}


def batch(vocab, B, L, device, seed, padding="uniform"):
    g = torch.Generator().manual_seed(seed)
    ids = []
    for shortest in PADDING[padding]:
        lengths = torch.randint(int(shortest * L), L + 1, (B,), generator=g)
        x = torch.randint(4, vocab, (B, L), generator=g)
        x[torch.arange(L)[None] >= lengths[:, None]] = PAD
        ids.append(x.to(device))
    return tuple(ids)  # src, tgt


def stepper(model, device, dtype, train: bool):
    """A function (src, tgt) -> seconds for one training step (or one inference) of `model`."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    amp = torch.autocast(device, dtype=torch.bfloat16) if dtype == "bf16" else torch.autocast(device,
                                                                                              enabled=False)
    if dtype == "bf16" and device == "cpu":
        # nn.Transformer skips its fused eval fast path under CUDA autocast (torch.is_autocast_enabled() reads
        # CUDA's) but not under CPU autocast, where the fused kernel then fails on bf16 inputs: off, as on a
        # GPU
        torch.backends.mha.set_fastpath_enabled(False)

    def step(src, tgt):
        src_mask, tgt_mask = padding_mask(src), target_mask(tgt)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if train:
            model.train()
            with amp:
                loss = label_smoothed_loss(model(src, tgt, src_mask, tgt_mask), tgt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        else:
            model.eval()
            with torch.no_grad(), amp:
                memory = model.encode(src, src_mask)
                out = model.decode(tgt, memory, src_mask, tgt_mask)
                model.generator(out[:, -1])
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    return step


def paired(ours, ref, vocab, B, L, steps, device, dtype, train: bool, padding: str):
    """Both models on the same batches, one step each in turn (who goes first alternates), so that a busy
    moment of the machine falls on both. Returns (our tok/s, their tok/s, per-step ratios)."""
    run = {"ours": stepper(ours, device, dtype, train), "ref": stepper(ref, device, dtype, train)}
    seconds, ratios, tokens = {"ours": 0.0, "ref": 0.0}, [], 0
    for i in range(steps + 2):
        src, tgt = batch(vocab, B, L, device, i, padding)
        order = ("ours", "ref") if i % 2 else ("ref", "ours")
        t = {name: run[name](src, tgt) for name in order}
        if i >= 2:  # two warm-up steps
            for name in t:
                seconds[name] += t[name]
            ratios.append(t["ref"] / t["ours"])
            tokens += int((tgt != PAD).sum())
    return tokens / seconds["ours"], tokens / seconds["ref"], sorted(ratios)


def main():
    warnings.filterwarnings("ignore", category=UserWarning)  # nn.Transformer's nested-tensor notice
    p = Parser(prog="python benchmarks/model.py", description=__doc__.split("\n\n")[0])
    here = "cuda" if torch.cuda.is_available() else "cpu"
    p.add_argument("--device", type=device_name, default=here, help=f"cpu or cuda (default here: {here})")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                   help="the weights' dtype (default: fp32)")
    p.add_argument("--steps", type=number(int, 1), default=10, help="timed steps (default: 10)")
    p.add_argument("--padding", default="both", choices=["uniform", "bucketed", "both"],
                   help="how much of each batch is padding (see PADDING); both: a row for each "
                   "(default: both)")
    a = p.parse_args()
    sizes = {"notebook CPU size (256, 3+3, 1024, V 8k)":
             dict(d_model=256, n_heads=4, n_layers=3, d_ff=1024, vocab=8000),
             "paper base (512, 6+6, 2048, V 8k)": dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                                                       vocab=8000)}
    B, L = (32, 30) if a.device == "cpu" else (128, 40)
    print(f"device {a.device}, {a.dtype}, {torch.get_num_threads()} threads, batches of {B} x {L}, {a.steps} "
          f"training steps, {5 * a.steps} inferences")
    print(f"{'size':44s} {'mode':9s} {'padding':9s} {'ours tok/s':>11s} {'torch tok/s':>12s} {'ratio':>6s} "
          f"{'median':>7s} {'quartiles':>10s}")
    for name, s in sizes.items():
        torch.manual_seed(0)
        ours = solutions.Transformer(s["vocab"], s["vocab"], s["d_model"], s["n_heads"], s["n_layers"],
                                     s["d_ff"]).to(a.device)
        ref = TorchTransformer(s["vocab"], s["d_model"], s["n_heads"], s["n_layers"], s["d_ff"]).to(a.device)
        for mode in ("train", "inference"):
            for padding in (PADDING if a.padding == "both" else [a.padding]):
                steps = a.steps if mode == "train" else 5 * a.steps
                o, r, ratios = paired(ours, ref, s["vocab"], B, L, steps, a.device, a.dtype, mode == "train",
                                      padding)
                q1, med, q3 = (ratios[int(f * (len(ratios) - 1))] for f in (0.25, 0.5, 0.75))
                print(f"{name:44s} {mode:9s} {padding:9s} {o:11.0f} {r:12.0f} {o / r:6.2f} {med:7.2f} "
                      f"{q1:5.2f}-{q3:.2f}")
    print("peak memory (this process, ru_maxrss): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
