"""Training-step and inference throughput: solutions.Transformer against the same model built on
nn.Transformer, measured alternately in one run.

    python benchmarks/model.py [--device cpu|cuda] [--dtype fp32|bf16] [--steps 10]

Both models have the same configuration (embeddings scaled by sqrt(d_model), sinusoidal positions,
post-norm, tied embeddings and projection) and see the same batches. A training step is forward,
label-smoothed loss, backward and an Adam step; inference is encode plus one decoder step for a
batch of prefixes. Prints tokens per second and the ratio ours / PyTorch's (higher is better).
"""
from __future__ import annotations

import argparse
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


def batch(vocab, B, L, device, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(L // 2, L + 1, (B,), generator=g)
    src = torch.randint(4, vocab, (B, L), generator=g)
    src[torch.arange(L)[None] >= lengths[:, None]] = PAD
    tgt = torch.randint(4, vocab, (B, L), generator=g)
    tgt[torch.arange(L)[None] >= lengths[:, None]] = PAD
    return src.to(device), tgt.to(device)


def bench(model, vocab, B, L, steps, device, dtype, train: bool) -> float:
    """Target tokens per second."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    amp = torch.autocast(device, dtype=torch.bfloat16) if dtype == "bf16" else torch.autocast(device, enabled=False)
    tokens, seconds = 0, 0.0
    for i in range(steps + 2):
        src, tgt = batch(vocab, B, L, device, i)
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
        if i >= 2:  # two warm-up steps
            seconds += time.perf_counter() - t0
            tokens += int((tgt != PAD).sum())
    return tokens / seconds


def main():
    warnings.filterwarnings("ignore", category=UserWarning)  # nn.Transformer's nested-tensor notice
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    sizes = {"notebook CPU size (256, 3+3, 1024, V 8k)": dict(d_model=256, n_heads=4, n_layers=3, d_ff=1024, vocab=8000),
             "paper base (512, 6+6, 2048, V 8k)": dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048, vocab=8000)}
    B, L = (32, 30) if a.device == "cpu" else (128, 40)
    print(f"device {a.device}, {a.dtype}, {torch.get_num_threads()} threads, batches of {B} x {L}, {a.steps} steps each")
    print(f"{'size':44s} {'mode':9s} {'ours tok/s':>11s} {'torch tok/s':>12s} {'ratio':>6s}")
    for name, s in sizes.items():
        torch.manual_seed(0)
        ours = solutions.Transformer(s["vocab"], s["vocab"], s["d_model"], s["n_heads"], s["n_layers"], s["d_ff"]).to(a.device)
        ref = TorchTransformer(s["vocab"], s["d_model"], s["n_heads"], s["n_layers"], s["d_ff"]).to(a.device)
        for mode in ("train", "inference"):
            r_ours, r_ref = [], []
            for _ in range(2):  # alternate, so that a busy moment hurts both
                r_ours.append(bench(ours, s["vocab"], B, L, a.steps, a.device, a.dtype, mode == "train"))
                r_ref.append(bench(ref, s["vocab"], B, L, a.steps, a.device, a.dtype, mode == "train"))
            o, t = max(r_ours), max(r_ref)
            print(f"{name:44s} {mode:9s} {o:11.0f} {t:12.0f} {o / t:6.2f}")
    print(f"peak memory (this process, ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
