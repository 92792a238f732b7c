"""Stage 03: softmax and scaled dot-product attention, against torch.softmax and
F.scaled_dot_product_attention, with the classic mistakes named."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..core import CheckFailure, forbid, register
from ._util import as_tensor, expect_close, expect_shape, seeded

# the lesson's own work, which a library call must not do for the learner (allowed in later lessons)
forbid("softmax", "a library softmax (torch.softmax, F.softmax, Tensor.softmax, nn.Softmax, log_softmax)",
       functions=("softmax", "_softmax", "special_softmax", "log_softmax", "_log_softmax", "special_log_softmax"))
forbid("scaled_dot_product_attention", "F.scaled_dot_product_attention (or nn.MultiheadAttention)",
       functions=("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                  "_scaled_dot_product_flash_attention_for_cpu", "multi_head_attention_forward"),
       classes=("torch.nn.MultiheadAttention",))

# ------------------------------------------------------------------------------------------ softmax
NAIVE = "exp overflowed: subtract the row's maximum before exp (softmax(x) = softmax(x - max x))"


@register("softmax", "equals torch.softmax along the last dimension")
def _softmax_last(softmax):
    with seeded(0):
        x = torch.randn(3, 4, 5) * 3
    expect_close(softmax(x), torch.softmax(x, -1), "softmax(x) for x of shape (3, 4, 5)",
                 hint="exp(x) / exp(x).sum(dim, keepdim=True), over the last dimension",
                 mistakes={"normalized over dim 0 instead of the last one": torch.softmax(x, 0),
                           "normalized over dim=-2 instead of dim=-1": torch.softmax(x, -2),
                           "divided by the sum over the whole tensor, not along one dimension":
                               x.exp() / x.exp().sum()})


@register("softmax", "uses the dim argument")
def _softmax_dim(softmax):
    with seeded(1):
        x = torch.randn(4, 6, 2)
    for dim in (0, 1):
        expect_close(softmax(x, dim=dim), torch.softmax(x, dim), f"softmax(x, dim={dim})",
                     hint="use `dim` in both the max and the sum (keepdim=True so they broadcast back)",
                     mistakes={"the dim argument is ignored (always the last dimension)": torch.softmax(x, -1)})


@register("softmax", "is stable for large inputs (no overflow to nan)")
def _softmax_stable(softmax):
    x = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0], [88.0, 89.0, 0.0]])
    expect_close(softmax(x), torch.softmax(x, -1), "softmax([[1000, 1001, 999], [-1000, -1000, -1000], [88, 89, 0]])",
                 hint=NAIVE)


# ------------------------------------------------------------------------------- attention helpers
def _inputs(seed=0, B=2, h=3, Lq=4, Lk=5, d_k=8, d_v=6):
    with seeded(seed):
        return torch.randn(B, h, Lq, d_k), torch.randn(B, h, Lk, d_k), torch.randn(B, h, Lk, d_v)


def _call(attn, q, k, v, mask=None, dropout=None, what="scaled_dot_product_attention(q, k, v)"):
    out = attn(q, k, v, mask) if dropout is None else attn(q, k, v, mask, dropout)
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure(what, "a tuple (output, weights)", type(out).__name__,
                           "return both: `return weights @ v, weights`")
    return as_tensor(out[0], what + " output"), as_tensor(out[1], what + " weights")


def _reference(q, k, v, mask=None):
    """Attention written out, with named wrong variants for diagnosis."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1)
    ref_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    variants = {
        "scores not divided by sqrt(d_k)": scores,
        "scores divided by d_k instead of sqrt(d_k)": scores / d_k,
        "scores divided by sqrt(d_v) (the values' size) instead of sqrt(d_k)": scores / math.sqrt(v.size(-1)),
        "scores divided by sqrt(len_k) instead of sqrt(d_k)": scores / math.sqrt(k.size(-2)),
    }
    mistakes = {}
    for name, s in variants.items():
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        mistakes[name] = torch.softmax(s, -1) @ v
    s = scores / math.sqrt(d_k)
    if mask is None:
        mistakes["softmax over the queries (dim=-2) instead of the keys (dim=-1)"] = torch.softmax(s, -2) @ v
    else:
        mistakes["softmax over the queries (dim=-2) instead of the keys (dim=-1)"] = \
            torch.softmax(s.masked_fill(~mask, float("-inf")), -2).nan_to_num(0.0) @ v
        mistakes["mask polarity inverted: True must mean 'may attend' (fill where ~mask)"] = \
            torch.softmax(s.masked_fill(mask, float("-inf")), -1).nan_to_num(0.0) @ v
        mistakes["mask applied after the softmax: masked weights were zeroed but the rows no longer sum to 1"] = \
            (torch.softmax(s, -1) * mask) @ v
        mistakes["mask applied after the softmax and renormalized: fill the scores with -inf (or a large "
                 "negative) BEFORE the softmax"] = (lambda w: w / w.sum(-1, keepdim=True))(torch.softmax(s, -1) * mask) @ v
        mistakes["masked scores filled with 0 instead of a large negative number: exp(0) = 1 still gives them weight"] = \
            torch.softmax(s.masked_fill(~mask, 0.0), -1) @ v
        mistakes["mask ignored"] = torch.softmax(s, -1) @ v
    return ref_out, mistakes


# ------------------------------------------------------------------------------------- attention
@register("scaled_dot_product_attention", "returns (output, weights) of shapes (..., Lq, d_v) and (..., Lq, Lk)")
def _attn_shapes(attn):
    q, k, v = _inputs()
    out, w = _call(attn, q, k, v)
    expect_shape(out, (2, 3, 4, 6), "output for q (2, 3, 4, 8), k (2, 3, 5, 8), v (2, 3, 5, 6)",
                 "output = weights @ v: (..., Lq, Lk) x (..., Lk, d_v)")
    expect_shape(w, (2, 3, 4, 5), "weights for q (2, 3, 4, 8), k (2, 3, 5, 8)",
                 "weights = softmax(q @ k.transpose(-2, -1) / sqrt(d_k)): (..., Lq, Lk)")
    # also works without head dimensions: (B, L, d)
    out3, w3 = _call(attn, q[:, 0], k[:, 0], v[:, 0])
    expect_shape(out3, (2, 4, 6), "output for 3-d inputs q (2, 4, 8), k (2, 5, 8)",
                 "transpose the last two dims of k with k.transpose(-2, -1), not k.T or transpose(1, 2)")


@register("scaled_dot_product_attention", "equals F.scaled_dot_product_attention without a mask")
def _attn_plain(attn):
    q, k, v = _inputs(1)
    ref, mistakes = _reference(q, k, v)
    out, _ = _call(attn, q, k, v)
    expect_close(out, ref, "output without a mask", hint="softmax(q k^T / sqrt(d_k)) v", mistakes=mistakes)


@register("scaled_dot_product_attention", "weights: each query's row sums to 1 over the keys")
def _attn_rows(attn):
    q, k, v = _inputs(2, Lq=6, Lk=3)
    _, w = _call(attn, q, k, v)
    expect_shape(w, (2, 3, 6, 3), "weights")
    sums = w.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        over_queries = torch.allclose(w.sum(-2), torch.ones_like(w.sum(-2)), atol=1e-4)
        raise CheckFailure("weights.sum(-1)", "all ones", f"values from {sums.min().item():.3f} to {sums.max().item():.3f}",
                           "the softmax runs over the queries (dim=-2); it must run over the keys (dim=-1)"
                           if over_queries else "return the softmax weights themselves")


@register("scaled_dot_product_attention", "a boolean mask (True = may attend) equals PyTorch's")
def _attn_mask(attn):
    q, k, v = _inputs(3)
    with seeded(3):
        mask = torch.rand(2, 3, 4, 5) > 0.4
    mask[..., 0] = True  # every query can attend somewhere
    ref, mistakes = _reference(q, k, v, mask)
    out, w = _call(attn, q, k, v, mask)
    expect_close(out, ref, "output with a random boolean mask", mistakes=mistakes,
                 hint="scores.masked_fill(~mask, float('-inf')) before the softmax")
    hidden = w.masked_select(~mask)
    if hidden.numel() and hidden.abs().max() > 1e-6:
        raise CheckFailure("weights where mask is False", "0", f"up to {hidden.abs().max().item():.3g}",
                           "True means 'may attend': fill the scores where the mask is False")


@register("scaled_dot_product_attention", "a padding mask (B, 1, 1, Lk) broadcasts over heads and queries")
def _attn_broadcast(attn):
    q, k, v = _inputs(4)
    mask = torch.tensor([True, True, True, False, False])[None, None, None, :].repeat(2, 1, 1, 1)  # (2, 1, 1, 5)
    mask[1, ..., 4] = True
    ref, mistakes = _reference(q, k, v, mask)
    out, _ = _call(attn, q, k, v, mask)
    expect_close(out, ref, "output with a padding mask of shape (2, 1, 1, 5)", mistakes=mistakes,
                 hint="let the mask broadcast: masked_fill(~mask, ...) works for any broadcastable shape")


@register("scaled_dot_product_attention", "a query whose keys are all masked gets finite numbers, not NaN")
def _attn_all_masked(attn):
    q, k, v = _inputs(5)
    mask = torch.ones(2, 3, 4, 5, dtype=torch.bool)
    mask[:, :, 1] = False  # query 1 may attend to nothing
    out, w = _call(attn, q, k, v, mask)
    if not (torch.isfinite(out).all() and torch.isfinite(w).all()):
        raise CheckFailure("output for a query row whose keys are all masked", "finite numbers", "NaN",
                           "softmax of a row of -inf is 0/0 = NaN: fill with a large finite negative number "
                           "(torch.finfo(scores.dtype).min or -1e9) instead of -inf")
    ref, _ = _reference(q, k, v, torch.where(mask.any(-1, keepdim=True), mask, True))
    keep = mask.any(-1)  # queries with something to attend to
    expect_close(out[keep], ref[keep], "the other queries' outputs")


class _Recorder(nn.Module):
    """A 'dropout' that halves the second key's weight and remembers what it was given."""

    def forward(self, w):
        self.seen = w
        scale = torch.ones(w.size(-1))
        scale[1] = 0.5
        return w * scale


@register("scaled_dot_product_attention", "applies the dropout module to the weights, before multiplying by v")
def _attn_dropout(attn):
    q, k, v = _inputs(6)
    rec = _Recorder()
    out, _ = _call(attn, q, k, v, None, rec, "scaled_dot_product_attention(q, k, v, dropout=module)")
    seen = getattr(rec, "seen", None)
    if seen is None:
        raise CheckFailure("the dropout module", "called on the attention weights", "never called",
                           "if dropout is not None: weights = dropout(weights)")
    expect_shape(seen, (2, 3, 4, 5), "what the dropout module was given", "pass it the weights (..., Lq, Lk)")
    ref, _ = _reference(q, k, v)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1)
    expect_close(seen, weights, "what the dropout module was given",
                 hint="apply dropout to the softmax weights, not to the scores or the output")
    expect_close(out, rec(weights) @ v, "output with dropout", hint="output = dropout(weights) @ v")
