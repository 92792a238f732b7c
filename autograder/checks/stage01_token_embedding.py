"""Stage 01's checks of TokenEmbedding: nn.Embedding scaled by sqrt(d_model), padding_idx, the gradient."""
from __future__ import annotations

import math

import torch
from torch import nn

from ..registry import CheckFailure, register
from ._util import build, close, expect_attr, expect_close, expect_shape, fmt, seeded


def _embedding(cls, vocab_size, d_model, **kw):
    args = ", ".join([str(vocab_size), str(d_model)] + [f"{k}={v}" for k, v in kw.items()])
    module = build(cls, vocab_size, d_model, what=f"TokenEmbedding({args})", **kw)
    emb = expect_attr(module, "embedding", nn.Embedding, f"TokenEmbedding({args})")
    return module, emb


SCALED_IN_INIT = ("the weights were multiplied by sqrt(d_model) once in __init__, not the output in forward: "
                  "with any other weights (trained, or copied in as here) the output is not scaled; leave "
                  "nn.Embedding's weights as built and return self.embedding(ids) * math.sqrt(d_model)")


def _scaled_in_init(cls, vocab_size, d_model) -> bool:
    """Whether __init__ built the embedding as nn.Embedding does, then multiplied its weights by
    sqrt(d_model): a new module and an nn.Embedding built from the same seed are compared (only to name a
    mistake)."""
    try:
        with seeded(99):
            _, emb = _embedding(cls, vocab_size, d_model)
        with seeded(99):
            ref = nn.Embedding(vocab_size, d_model)
        got = emb.weight.detach()
        return got.shape == ref.weight.shape and close(got, ref.weight.detach() * math.sqrt(d_model))
    except Exception:
        return False


def _forward_check(cls, vocab_size, d_model, seed):
    module, emb = _embedding(cls, vocab_size, d_model)
    with seeded(seed):
        weight = torch.randn(vocab_size, d_model)
        ids = torch.randint(0, vocab_size, (2, 5))
    with torch.no_grad():
        emb.weight.copy_(weight)
    module.eval()
    base = weight[ids]
    out = module(ids)
    unscaled = (SCALED_IN_INIT if isinstance(out, torch.Tensor) and out.shape == base.shape and
                close(out, base)
                and _scaled_in_init(cls, vocab_size, d_model) else
                "not scaled: multiply by sqrt(d_model) (paper, section 3.4)")
    expect_close(out, base * math.sqrt(d_model), f"TokenEmbedding({vocab_size}, {d_model})(ids), ids (2, 5)",
                 hint="return self.embedding(ids) * math.sqrt(d_model)",
                 mistakes={unscaled: base,
                           "scaled by d_model instead of sqrt(d_model)": base * d_model,
                           "divided by sqrt(d_model) instead of multiplied": base / math.sqrt(d_model),
                           "scaled by sqrt(vocab_size) instead of "
                           "sqrt(d_model)": base * math.sqrt(vocab_size),
                           "sqrt(d_model) rounded to an integer (math.isqrt or int()): use math.sqrt":
                               base * math.isqrt(d_model),
                           "d_model ** 1/2 is (d_model ** 1) / 2: write d_model ** 0.5 or math.sqrt(d_model)":
                               base * (d_model / 2),
                           "d_model hard-coded (sqrt(512)): scale by the d_model given to __init__":
                               base * math.sqrt(512)})
    if not torch.equal(emb.weight.detach(), weight):
        raise CheckFailure(f"embedding.weight after a call of TokenEmbedding({vocab_size}, {d_model})",
                           "unchanged",
                           "changed by forward", "forward scaled the weights in place (embedding.weight.mul_ "
                                                 "or weight.data *= ...): every call scales them again; "
                                                 "scale the output, self.embedding(ids) * math.sqrt(d_model)")
    return out, emb


def _backward(out):
    if not out.requires_grad:
        raise CheckFailure("the output of TokenEmbedding", "connected to embedding.weight "
                                                           "(requires_grad=True)",
                           "a tensor without gradient", "compute it from self.embedding(ids) directly (no "
                                                        ".data, .detach() or torch.no_grad())")
    out.sum().backward()


@register("TokenEmbedding", "has `embedding`, an nn.Embedding(vocab_size, d_model)")
def _emb_attr(cls):
    _, emb = _embedding(cls, 11, 8)
    expect_shape(emb.weight, (11, 8), "embedding.weight of TokenEmbedding(11, 8)",
                 "the arguments swapped, nn.Embedding(d_model, vocab_size): nn.Embedding(vocab_size, "
                 "d_model) has one row of d_model numbers per "
                 "token" if tuple(emb.weight.shape) == (8, 11) else
                 "nn.Embedding(vocab_size, d_model): one row of d_model numbers per token")


@register("TokenEmbedding", "forward = embedding(ids) * sqrt(d_model), in the weights' dtype")
def _emb_forward(cls):
    out, emb = _forward_check(cls, 10, 16, 0)
    if out.dtype != emb.weight.dtype:  # the values are right
        raise CheckFailure("TokenEmbedding(10, 16)(ids): dtype", f"{emb.weight.dtype}, the dtype of "
                                                                 "embedding.weight",
                           str(out.dtype), f"the output was cast to {out.dtype} (.double(), .to(...), or a "
                                           f"scale held in a {out.dtype} tensor): the next layers have "
                                           f"{emb.weight.dtype} weights and refuse it; multiply by the "
                                           "Python float math.sqrt(d_model), which keeps the dtype")


@register("TokenEmbedding", "scales by the exact sqrt(d_model), e.g. sqrt(6)")
def _emb_sqrt6(cls):
    _forward_check(cls, 11, 6, 1)


@register("TokenEmbedding", "passes padding_idx to nn.Embedding (a zero row that gets no gradient)")
def _emb_padding(cls):
    module, emb = _embedding(cls, 7, 4, padding_idx=0)
    if emb.padding_idx != 0:
        raise CheckFailure("TokenEmbedding(7, 4, padding_idx=0).embedding.padding_idx", "0",
                           fmt(emb.padding_idx),
                           "pass it on: nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)")
    out = expect_shape(module(torch.tensor([[0, 3, 0]])), (1, 3, 4), "TokenEmbedding(7, 4, "
                                                                     "padding_idx=0)(ids (1, 3))")
    expect_close(out[0, 0], torch.zeros(4), "the vector of the padding id 0",
                 "nn.Embedding zeroes the padding row when it is built; a re-initialisation of the whole "
                 "weight afterwards (nn.init.normal_, xavier_uniform_, ...) overwrites it: zero the row "
                 "again, with torch.no_grad(): embedding.weight[padding_idx].zero_(), or keep nn.Embedding's "
                 "own init")
    _backward(out)
    if emb.weight.grad is None or emb.weight.grad[0].abs().max() > 0:
        raise CheckFailure("embedding.weight.grad[0] (the padding row) after a backward pass", "zeros",
                           "None" if emb.weight.grad is None else fmt(emb.weight.grad[0]),
                           "nn.Embedding(..., padding_idx=padding_idx) keeps the padding row out of "
                           "training, but only through self.embedding(ids): indexing embedding.weight (or a "
                           "one-hot product) bypasses it")
    _, plain = _embedding(cls, 7, 4)
    if plain.padding_idx is not None:
        raise CheckFailure("TokenEmbedding(7, 4).embedding.padding_idx", "None (the default)",
                           fmt(plain.padding_idx),
                           "use padding_idx only when one is given")


@register("TokenEmbedding", "keeps ids' shape: (B, L) -> (B, L, d_model); the gradient reaches the weights")
def _emb_grad(cls):
    module, emb = _embedding(cls, 6, 9)
    ids = torch.tensor([[1, 2, 2], [5, 0, 1]])
    out = module(ids)
    expect_shape(out, (2, 3, 9), "TokenEmbedding(6, 9)(ids of shape (2, 3))",
                 "embedding(ids): (B, L) -> (B, L, d_model)")
    expect_shape(module(ids[0]), (3, 9), "TokenEmbedding(6, 9)(ids of shape (3,))", "do not reshape the ids")
    if module.training:  # a new module: in training mode, where a dropout would show
        rows = emb.weight.detach()[ids] * 3.0
        if isinstance(out, torch.Tensor) and out.shape == rows.shape and not close(out, rows):
            zeros = bool(((out.detach() == 0) & (rows != 0)).any())
            unscaled = close(out, rows / 3.0)
            expect_close(out, rows, "TokenEmbedding(6, 9)(ids) in training mode",
                         hint="a dropout inside TokenEmbedding: the model applies dropout after adding the "
                              "positional encoding (PositionalEncoding does it); TokenEmbedding is "
                              "embedding(ids) * sqrt(d_model) only" if zeros else
                              SCALED_IN_INIT if unscaled and _scaled_in_init(cls, 6, 9) else
                              "not scaled: embedding(ids) * math.sqrt(d_model)" if unscaled else
                              "embedding(ids) * math.sqrt(d_model), in training mode too")
    _backward(out)
    grad = emb.weight.grad
    if grad is None:
        raise CheckFailure("embedding.weight.grad after out.sum().backward()", "a gradient", "None",
                           "compute the output from self.embedding(ids) directly (no .data, .detach() or "
                           "no_grad)")
    counts = torch.bincount(ids.flatten(), minlength=6).float()
    expect_close(grad, counts[:, None].expand(6, 9) * 3.0, "embedding.weight.grad after out.sum().backward()",
                 hint="the output is embedding(ids) * sqrt(d_model): each use of a row adds sqrt(9) = 3 to "
                      "its gradient")
