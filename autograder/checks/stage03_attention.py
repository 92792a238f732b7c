"""Stage 03: softmax and scaled dot-product attention, against torch.softmax and
F.scaled_dot_product_attention, with the classic mistakes named."""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import nn

from ..explain import failing_line
from ..registry import CheckFailure, CheckTimeout, forbid, register
from ._util import (
    LEFT_AUTOGRAD,
    as_tensor,
    close,
    expect_close,
    expect_grads,
    expect_shape,
    reduces_without_keepdim,
    seeded,
)

# the lesson's own work, which a library call must not do for the learner (allowed in later lessons)
forbid("softmax", "a library softmax (torch.softmax, F.softmax, Tensor.softmax, nn.Softmax, log_softmax)",
       functions=("softmax", "_softmax", "special_softmax", "log_softmax", "_log_softmax",
                  "special_log_softmax"))
forbid("scaled_dot_product_attention", "F.scaled_dot_product_attention (or nn.MultiheadAttention)",
       functions=("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                  "_scaled_dot_product_flash_attention_for_cpu", "multi_head_attention_forward"),
       classes=("torch.nn.MultiheadAttention",))

# ------------------------------------------------------------------------------------------ softmax
NAIVE = "exp overflowed: subtract the row's maximum before exp (softmax(x) = softmax(x - max x))"
KEEPDIM = ("the max or the sum lost its dimension: use keepdim=True, x.amax(dim, keepdim=True) and "
           "e.sum(dim, keepdim=True), so that they broadcast back against x")


def _soft(softmax, x, what, **kwargs):
    """softmax(x) (give it a copy), a broadcasting error from a max or sum without keepdim named as such."""
    try:
        return softmax(x, **kwargs)
    except RuntimeError as e:
        if "must match the size" not in str(e) or not reduces_without_keepdim(failing_line(e)):
            raise  # described as any error is: the line, its tensors' shapes, and a Likely only from those
        raise CheckFailure(what, f"a tensor of shape {tuple(x.shape)}", f"RuntimeError: {str(e)[:120]}",
                           KEEPDIM) from None


@register("softmax", "equals torch.softmax along the last dimension, gradients too")
def _softmax_last(softmax):
    with seeded(0):
        x = torch.randn(3, 4, 5) * 3
    what = "softmax(x) for x of shape (3, 4, 5)"
    arg = x.clone()
    expect_close(_soft(softmax, arg, what), torch.softmax(x, -1), what,
                 hint="exp(x) / exp(x).sum(dim, keepdim=True), over the last dimension",
                 mistakes={"normalized over dim 0 instead of the last one": torch.softmax(x, 0),
                           "normalized over dim=-2 instead of dim=-1": torch.softmax(x, -2),
                           "divided by the sum over the whole tensor, not along one dimension":
                               x.exp() / x.exp().sum()})
    if not torch.equal(arg, x):
        raise CheckFailure("x after softmax(x)", "unchanged", "changed",
                           "x was modified in place (x -= ..., x.sub_, x.exp_()): the caller still needs its "
                           "x; compute new tensors, shifted = x - x.amax(dim, keepdim=True)")
    # attention, and so the whole model, is trained through this softmax: its gradient must be softmax's
    leaf, ref_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    expect_grads(lambda: _soft(softmax, leaf, what), lambda: torch.softmax(ref_leaf, -1),
                 {"x": (leaf, ref_leaf)},
                 what, hint=LEFT_AUTOGRAD + " (a detached max is harmless, softmax ignores a constant shift; "
                                            "a detached sum is not)")
    _keeps_float64(softmax, x)


LOWERED = ("the result has less precision than x: a cast inside (x.float(), .to(torch.float32), a float32 "
           "constant tensor such as torch.tensor(0.0)) turned float64 into float32; compute in x's dtype (x "
           "- x.amax(...), torch.zeros_like(x))")


def _keeps_float64(softmax, x):
    """The contract's dtypes: a float64 x gives a float64 result (float32 may come back in float64: more
    is fine)."""
    x64 = x.double()
    what = "softmax(x) for a float64 x of shape (3, 4, 5)"
    got = as_tensor(_soft(softmax, x64.clone(), what), what)
    if got.dtype != torch.float64:
        raise CheckFailure(f"{what}: dtype", "torch.float64 (x's dtype)", str(got.dtype), LOWERED)
    expect_close(got, torch.softmax(x64, -1), what, atol=1e-9, rtol=1e-9,
                 hint="exp(x - max) / sum of exp(x - max), all in x's dtype")


@register("softmax", "uses the dim argument")
def _softmax_dim(softmax):
    with seeded(1):
        x = torch.randn(4, 6, 2)
    for dim in (0, 1):
        expect_close(_soft(softmax, x.clone(), f"softmax(x, dim={dim})", dim=dim), torch.softmax(x, dim),
                     f"softmax(x, dim={dim})",
                     hint="use `dim` in both the max and the sum (keepdim=True so they broadcast back)",
                     mistakes={"the dim argument is ignored (always the last "
                               "dimension)": torch.softmax(x, -1)})


@register("softmax", "is stable for large inputs (no overflow to nan)")
def _softmax_stable(softmax):
    x = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0], [88.0, 89.0, 0.0],
                      [-500.0, 0.0, 500.0]])
    what = "softmax([[1000, 1001, 999], [-1000, -1000, -1000], [88, 89, 0], [-500, 0, 500]])"
    got = _soft(softmax, x.clone(), what)
    finite = not (isinstance(got, torch.Tensor) and got.shape == x.shape and not torch.isfinite(got).all())
    expect_close(got, torch.softmax(x, -1), what,  # the overflow hint only for inf / NaN
                 hint="exp(x - max) / sum of exp(x - max), the max and the sum taken along the last dimension"
                 if finite else NAIVE)


# ------------------------------------------------------------------------------- attention helpers
def _inputs(seed=0, B=2, h=3, Lq=4, Lk=5, d_k=8, d_v=6):
    with seeded(seed):
        return torch.randn(B, h, Lq, d_k), torch.randn(B, h, Lk, d_k), torch.randn(B, h, Lk, d_v)


# the failing line multiplies by a k transposed otherwise than in its last two dims (TRANSPOSE), or not at all
# (NO_T)
_PRODUCT = re.compile(r"@|\bmatmul\(|\bbmm\(")
_LAST_TWO = re.compile(r"(transpose|swapaxes)\(\s*(-2\s*,\s*-1|-1\s*,\s*-2)\s*\)|\.mT\b")
_ANY_TRANSPOSE = re.compile(r"\.T\b|\.t\(\)|\b(transpose|permute|swapaxes)\(|\.mT\b")
NO_T = ("q @ k multiplies (..., Lq, d_k) by (..., Lk, d_k): k needs its last two dims swapped, "
        "k.transpose(-2, -1)")
TRANSPOSE = ("transpose only the last two dims of k, k.transpose(-2, -1): k.T or k.transpose(1, 2) give "
             "wrong shapes with more than 2 or 3 dims")


KEYS_FIRST = ("q and k swapped in the scores: k @ q.transpose(-2, -1) is (..., Lk, Lq), one row per key "
              "(with as many queries as keys it gives exactly that); scores = q @ k.transpose(-2, -1) / "
              "math.sqrt(d_k), one row per query")


def _keys_first(attn) -> bool:
    """Whether attn computes softmax(k @ q^T / sqrt(d_k)) @ v: tried with as many queries as keys, where
    it runs."""
    q, k, v = _inputs(seed=31, Lq=5, Lk=5)
    try:
        out = attn(q.clone(), k.clone(), v.clone(), None)
        out = out[0] if isinstance(out, tuple) else out
        w = torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        return isinstance(out, torch.Tensor) and out.shape == (w @ v).shape and close(out.detach(), w @ v)
    except CheckTimeout:
        raise
    except Exception:  # noqa: BLE001  (it fails there too: not this mistake)
        return False


def _shape_failure(attn, e, q, k, v, mask, what):
    """_call's verdict on a RuntimeError or IndexError of the learner's code: a CheckFailure that names the
    likely mistake, or None where the error is to be reported as it is."""
    text = str(e)
    if mask is not None and "shape of the mask" in text and "does not match" in text:
        return CheckFailure(f"{what} with a mask of shape {tuple(mask.shape)}", "the mask to broadcast",
                            f"{type(e).__name__}: {text.splitlines()[0][:120]}",
                            "boolean indexing, scores[~mask] = ..., needs a mask of the scores' exact "
                            "shape; scores.masked_fill(~mask, ...) lets the mask broadcast")
    if not any(s in text for s in ("must match the size", "Dimension out of range", "Expected size",
                                    "cannot be multiplied", "size mismatch")):
        return None
    if q.size(-2) != k.size(-2) and _keys_first(attn):
        shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip("qkv", (q, k, v)))
        return CheckFailure(f"{what} for {shapes}", "weights (..., Lq, Lk)",
                            f"{type(e).__name__}: {text.splitlines()[0][:120].rstrip('.')}",
                            KEYS_FIRST)
    line = failing_line(e)
    if not _PRODUCT.search(line) or _LAST_TWO.search(line):
        # not a product of q and k: described as any error is (line, shapes, a Likely only from those)
        return None
    if _ANY_TRANSPOSE.search(line):
        hint = TRANSPOSE
    elif re.search(r"\bk\b", line):
        hint = NO_T
    else:
        return None
    shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip("qkv", (q, k, v)))
    return CheckFailure(f"{what} for {shapes}: wrong shape inside your function, at `{line}`",
                        "(..., Lq, d_k) @ (..., d_k, Lk) -> weights (..., Lq, Lk)",
                        f"{type(e).__name__}: {text.splitlines()[0][:120].rstrip('.')}",
                        hint + ("" if mask is None else
                                f"; the mask {tuple(mask.shape)} broadcasts as it is"))


def _call(attn, q, k, v, mask=None, dropout=None, what="scaled_dot_product_attention(q, k, v)",
          unchanged=False):
    """The learner's (output, weights) for copies of the inputs (the checks' own stay intact); with
    `unchanged`, fail when the function modified its arguments in place."""
    args = [t.clone() for t in (q, k, v)] + [None if mask is None else mask.clone()]
    try:
        out = attn(*args) if dropout is None else attn(*args, dropout)
    except (RuntimeError, IndexError) as e:
        failure = _shape_failure(attn, e, q, k, v, mask, what)
        if failure is None:
            raise
        raise failure from None
    if unchanged:
        for name, mine, given in zip(("q", "k", "v", "mask"), (q, k, v, mask), args):
            if mine is not None and not torch.equal(mine, given):
                raise CheckFailure(f"{name} after {what}", "unchanged", "changed",
                                   f"{name} was modified in place (an in-place operation on it: /=, "
                                   "masked_fill_, logical_not_, ...): the caller still needs its tensors; "
                                   "compute new ones, e.g. scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure(what, "a tuple (output, weights)", type(out).__name__,
                           "return both: `return weights @ v, weights`")
    out, w = as_tensor(out[0], what + " output"), as_tensor(out[1], what + " weights")
    if mask is not None and max(out.dim(), w.dim()) > max(q.dim(), mask.dim()):
        raise CheckFailure(f"{what} with a mask of shape {tuple(mask.shape)}: wrong shape",
                           f"weights of shape {tuple(q.shape[:-1]) + (k.size(-2),)}",
                           f"weights of shape {tuple(w.shape)}, output of shape {tuple(out.shape)}",
                           "the mask gained a dimension (unsqueeze, [:, None]): it already broadcasts to "
                           "(..., Lq, Lk), so use it as it is")
    if tuple(out.shape) == tuple(q.shape[:-1]) + (k.size(-2),) != tuple(q.shape[:-1]) + (v.size(-1),) \
            and tuple(w.shape) == tuple(q.shape[:-1]) + (v.size(-1),):
        raise CheckFailure(f"{what}: the order of the returned pair", "(output, weights)",
                           "(weights, output)",
                           "return the output first: `return weights @ v, weights`")
    return out, w


AFTER_SOFTMAX = ("the softmax's weights (or the output) divided by sqrt(d_k): divide the scores before the "
                 "softmax, softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k)); mind the parentheses")


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
        "scores divided by sqrt(len_q) (q.size(-2), the number of queries) instead of sqrt(d_k) = q.size(-1)":
            scores / math.sqrt(q.size(-2)),
        "scores multiplied by sqrt(d_k) instead of divided by it (d_k ** 0.5 where d_k ** -0.5 was meant)":
            scores * math.sqrt(d_k),
    }
    mistakes = {}
    for name, s in variants.items():
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        mistakes[name] = torch.softmax(s, -1) @ v
    s = scores / math.sqrt(d_k)
    after = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    mistakes[AFTER_SOFTMAX] = (torch.softmax(after, -1) / math.sqrt(d_k)).nan_to_num(0.0) @ v
    if mask is not None:  # the same mistakes with a finite fill: a column with no key to see is then uniform
        big = s.masked_fill(~mask, -1e9)
        mistakes["softmax over the queries (dim=-2) instead of the keys: softmax(scores, dim=-1)"] = \
            torch.softmax(big, -2) @ v
        if q.dim() > 3:
            mistakes["softmax over dim=1 (the heads) instead of the keys: softmax(scores, dim=-1)"] = \
                torch.softmax(big, 1) @ v
    if q.dim() > 3:
        sm = s if mask is None else s.masked_fill(~mask, float("-inf"))
        mistakes["softmax over dim=1 (the heads) instead of the last dimension (the keys): softmax(scores, "
                 "dim=-1)"] = \
            torch.softmax(sm, 1).nan_to_num(0.0) @ v
    if mask is None:
        mistakes["softmax over the queries (dim=-2) instead of the keys (dim=-1)"] = torch.softmax(s, -2) @ v
    else:
        mistakes["softmax over the queries (dim=-2) instead of the keys (dim=-1)"] = \
            torch.softmax(s.masked_fill(~mask, float("-inf")), -2).nan_to_num(0.0) @ v
        mistakes["mask polarity inverted: True must mean 'may attend' (fill where ~mask)"] = \
            torch.softmax(s.masked_fill(mask, float("-inf")), -1).nan_to_num(0.0) @ v
        mistakes["mask applied after the softmax: masked weights were zeroed but the rows no longer sum to "
                 "1"] = \
            (torch.softmax(s, -1) * mask) @ v
        mistakes["mask applied after the softmax and renormalized: fill the scores with -inf (or a large "
                 "negative) BEFORE the softmax"] = \
            (lambda w: w / w.sum(-1, keepdim=True))(torch.softmax(s, -1) * mask) @ v
        mistakes["masked scores filled with 0 instead of a large negative number: exp(0) = 1 still gives "
                 "them weight"] = torch.softmax(s.masked_fill(~mask, 0.0), -1) @ v
        mistakes["mask ignored"] = torch.softmax(s, -1) @ v
    return ref_out, mistakes


# ------------------------------------------------------------------------------------- attention
@register("scaled_dot_product_attention", "returns (output, weights) of shapes (..., Lq, d_v) and (..., Lq, "
                                          "Lk)")
def _attn_shapes(attn):
    q, k, v = _inputs()
    out, w = _call(attn, q, k, v)
    expect_shape(out, (2, 3, 4, 6), "output for q (2, 3, 4, 8), k (2, 3, 5, 8), v (2, 3, 5, 6)",
                 "output = weights @ v: (..., Lq, Lk) x (..., Lk, d_v)")
    expect_shape(w, (2, 3, 4, 5), "weights for q (2, 3, 4, 8), k (2, 3, 5, 8)",
                 "weights = softmax(q @ k.transpose(-2, -1) / sqrt(d_k)): (..., Lq, Lk)")
    # also works without head dimensions: (B, L, d)
    out3, w3 = _call(attn, q[:, 0], k[:, 0], v[:, 0])
    expect_shape(out3, (2, 4, 6), "output for 3-d inputs q (2, 4, 8), k (2, 5, 8)", TRANSPOSE)


@register("scaled_dot_product_attention", "equals F.scaled_dot_product_attention without a mask, gradients "
                                          "too")
def _attn_plain(attn):
    q, k, v = _inputs(1)
    ref, mistakes = _reference(q, k, v)
    out, _ = _call(attn, q, k, v, unchanged=True)
    expect_close(out, ref, "output without a mask", hint="softmax(q k^T / sqrt(d_k)) v", mistakes=mistakes)
    leaves = {n: (t.clone().requires_grad_(), t.clone().requires_grad_()) for n, t in zip("qkv", (q, k, v))}
    expect_grads(lambda: _call(attn, *(leaves[n][0] for n in "qkv"))[0],
                 lambda: F.scaled_dot_product_attention(*(leaves[n][1] for n in "qkv")), leaves,
                 "the output without a mask")
    q, k, v = _inputs(7, B=1, h=2, Lq=3, Lk=7, d_k=16, d_v=4)  # other sizes: nothing hard-coded
    ref, mistakes = _reference(q, k, v)
    out, _ = _call(attn, q, k, v)
    expect_close(out, ref, "output without a mask for q (1, 2, 3, 16), k (1, 2, 7, 16), v (1, 2, 7, 4)",
                 hint="softmax(q k^T / sqrt(d_k)) v with d_k = q.size(-1), not a fixed number",
                 mistakes=mistakes)


@register("scaled_dot_product_attention", "weights: each query's row sums to 1 over the keys")
def _attn_rows(attn):
    q, k, v = _inputs(2, Lq=6, Lk=3)
    _, w = _call(attn, q, k, v)
    expect_shape(w, (2, 3, 6, 3), "weights")
    sums = w.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        def ones(t):
            return bool(torch.allclose(t, torch.ones_like(t), atol=1e-4))
        hint = "return the softmax weights themselves"
        if ones(w.sum(-2)):
            hint = "the softmax runs over the queries (dim=-2); it must run over the keys (dim=-1)"
        elif ones(w.sum(1)):
            hint = "the softmax runs over dim=1 (the heads); it must run over the keys (dim=-1)"
        elif ones(w.sum(0)):
            hint = "the softmax runs over dim 0 (the batch); it must run over the keys (dim=-1)"
        elif ones(sums * math.sqrt(q.size(-1))):
            hint = AFTER_SOFTMAX
        raise CheckFailure("weights.sum(-1)", "all ones", f"values from {sums.min().item():.3f} to "
                                                          f"{sums.max().item():.3f}",
                           hint)


@register("scaled_dot_product_attention", "a boolean mask (True = may attend) equals PyTorch's")
def _attn_mask(attn):
    q, k, v = _inputs(3)
    with seeded(3):
        mask = torch.rand(2, 3, 4, 5) > 0.4
    mask[..., 0] = True  # every query can attend somewhere
    ref, mistakes = _reference(q, k, v, mask)
    out, w = _call(attn, q, k, v, mask, unchanged=True)
    expect_shape(w, (2, 3, 4, 5), "weights for q (2, 3, 4, 8), k (2, 3, 5, 8)", "weights (..., Lq, Lk)")
    rows = torch.isfinite(w).all(-1, keepdim=True)  # NaN rows aside (a fill of -inf), inverted polarity shows
    if not torch.isfinite(out).all() and (w.masked_select(mask & rows).abs() < 1e-6).all() \
            and (w.masked_select(~mask & rows).abs() > 1e-6).any():
        raise CheckFailure("output with a random boolean mask", "finite numbers, weight only where mask is "
                                                                "True",
                           "NaN, and weight only where mask is False",
                           "mask polarity inverted: True must mean 'may attend' (fill where ~mask, with a "
                           "large finite negative number so that a fully masked row is not NaN)")
    _leak(out, w, ref, mask, mistakes, "with a random boolean mask")
    expect_close(out, ref, "output with a random boolean mask", mistakes=mistakes,
                 hint="scores.masked_fill(~mask, torch.finfo(scores.dtype).min) (or -1e9) before the softmax")
    hidden = w.masked_select(~mask)
    if hidden.numel() and hidden.abs().max() > 1e-6:  # the output is right: these are not the weights it used
        raise CheckFailure("weights where mask is False", "0", f"up to {hidden.abs().max().item():.3g}",
                           "the output is right, but the weights returned are not the ones it was computed "
                           "with: return the masked softmax weights, the tensor that multiplies v")


def _leak(out, w, ref, mask, mistakes, where):
    """Fail, naming the fill, when the output is wrong for no named reason and masked keys still get
    weight."""
    if close(out, ref) or any(close(out, m) for m in mistakes.values()):
        return
    if w.shape != ref.shape[:-1] + mask.shape[-1:]:
        return
    w, mask = w.detach(), mask.expand_as(w)
    hidden, sums = w.masked_select(~mask), w.sum(-1)
    if hidden.numel() and bool(torch.isfinite(hidden).all()) and hidden.abs().max() > 1e-6 \
            and bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-4)):
        # the visible keys of rows that hide some
        seen = w.masked_select(mask & (~mask).any(-1, keepdim=True))
        inverted = seen.numel() and bool((seen.abs() < 1e-6).all())
        raise CheckFailure(f"weights where mask is False, {where}", "0",
                           f"up to {hidden.abs().max().item():.3g}",
                           "mask polarity inverted: the weight falls only where the mask is False; True "
                           "means 'may attend', so fill where ~mask" if inverted else
                           "the masked keys still get weight: fill their scores with a large negative number "
                           "(torch.finfo(scores.dtype).min or -1e9) before the softmax, not a small one such "
                           "as -1 or -10")


@register("scaled_dot_product_attention", "a padding mask (B, 1, 1, Lk) broadcasts over heads and queries")
def _attn_broadcast(attn):
    q, k, v = _inputs(4)
    # (2, 1, 1, 5)
    mask = torch.tensor([True, True, True, False, False])[None, None, None, :].repeat(2, 1, 1, 1)
    mask[1, ..., 4] = True
    ref, mistakes = _reference(q, k, v, mask)
    out, w = _call(attn, q, k, v, mask)
    expect_shape(out, (2, 3, 4, 6), "output with a padding mask of shape (2, 1, 1, 5)")
    _leak(out, w, ref, mask, mistakes, "for a padding mask of shape (2, 1, 1, 5)")
    expect_close(out, ref, "output with a padding mask of shape (2, 1, 1, 5)", mistakes=mistakes,
                 hint="let the mask broadcast: masked_fill(~mask, ...) works for any broadcastable shape")


NO_MAX = ("the softmax does not subtract the row's max: when every key of a row is masked, exp(fill) is 0 "
          "for all of them (exp(-1e9) = 0) and 0/0 = NaN, and large scores overflow; subtract the row's max "
          "before exp (softmax(x) = softmax(x - max x)), as your softmax does, and keep the fill finite")
GRAD_NAN = ("-inf in the scores makes NaN in the gradient even when the forward pass is patched (nan_to_num "
            "or torch.where after the softmax): the softmax's backward multiplies by the row's NaN weights; "
            "fill with a large finite negative number (torch.finfo(scores.dtype).min or -1e9) instead of "
            "-inf")


def _overflows(attn, q, k, v):
    """Whether the learner's attention without a mask turns large scores into inf or NaN (no max
    subtracted)."""
    try:
        out, _ = _call(attn, q * 100, k, v)
    except (CheckFailure, RuntimeError):
        return False
    return not bool(torch.isfinite(out).all())


@register("scaled_dot_product_attention", "a query whose keys are all masked gets finite numbers, not NaN, "
                                          "both ways")
def _attn_all_masked(attn):
    q, k, v = _inputs(5)
    mask = torch.ones(2, 3, 4, 5, dtype=torch.bool)
    mask[:, :, 1] = False  # query 1 may attend to nothing
    out, w = _call(attn, q, k, v, mask)
    expect_shape(out, (2, 3, 4, 6), "output for q (2, 3, 4, 8), k (2, 3, 5, 8), v (2, 3, 5, 6)")
    expect_shape(w, (2, 3, 4, 5), "weights for q (2, 3, 4, 8), k (2, 3, 5, 8)")
    if not (torch.isfinite(out).all() and torch.isfinite(w).all()):
        raise CheckFailure("output for a query row whose keys are all masked", "finite numbers", "NaN",
                           NO_MAX if _overflows(attn, q, k, v) else
                           "softmax of a row of -inf is 0/0 = NaN: fill with a large finite negative number "
                           "(torch.finfo(scores.dtype).min or -1e9) instead of -inf")
    ref, mistakes = _reference(q, k, v, torch.where(mask.any(-1, keepdim=True), mask, True))
    keep = mask.any(-1)  # queries with something to attend to
    expect_close(out[keep], ref[keep], "the other queries' outputs",
                 mistakes={d: m[keep] for d, m in mistakes.items()},
                 hint="softmax(q k^T / sqrt(d_k)) v, the scores filled where the mask is False")
    # training goes through that row too: a forward pass patched after the softmax can still backpropagate NaN
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    try:
        out, _ = _call(attn, *leaves, mask)
    except RuntimeError as e:  # numpy() refuses a tensor that requires grad
        if "requires grad" not in str(e):
            raise
        return  # no gradient at all is the business of the check without a mask
    if out.requires_grad:
        out.sum().backward()
        bad = [n for n, t in zip("qkv", leaves) if t.grad is not None and not torch.isfinite(t.grad).all()]
        if bad:
            raise CheckFailure(f"the gradient of out.sum() with respect to {', '.join(bad)}, a query's keys "
                               "all masked",
                               "finite numbers", "NaN", GRAD_NAN)


class _Recorder(nn.Dropout):
    """A 'dropout' that halves the second key's weight and remembers what it was given. An nn.Dropout (p=0.5,
    train mode) to code that looks at it: code that reads its p instead of calling it is told it was never
    called."""

    def __init__(self):
        super().__init__(0.5)

    def forward(self, w):
        self.seen = w
        scale = torch.ones(w.size(-1), dtype=w.dtype, device=w.device)
        scale[1:2] = 0.5
        return w * scale


@register("scaled_dot_product_attention",
          "applies the dropout module to the weights, before multiplying by v")
def _attn_dropout(attn):
    q, k, v = _inputs(6)
    rec = _Recorder()
    out, _ = _call(attn, q, k, v, None, rec, "scaled_dot_product_attention(q, k, v, dropout=module)")
    seen = getattr(rec, "seen", None)
    if seen is None:
        raise CheckFailure("the dropout module", "called on the attention weights", "never called",
                           "if dropout is not None: weights = dropout(weights)")
    expect_shape(seen, (2, 3, 4, 5), "what the dropout module was given", "pass it the weights (..., Lq, Lk)")
    scores = q @ k.transpose(-2, -1)
    weights = torch.softmax(scores / math.sqrt(8), -1)
    if not close(seen, weights):
        wrong = {"the dropout module was applied twice: apply it once, to the softmax weights": rec(weights),
                 "the dropout module was given the scores: apply it to the softmax "
                 "weights": scores / math.sqrt(8),
                 "the softmax runs over the queries (dim=-2); it must run over the keys (dim=-1)":
                     torch.softmax(scores / math.sqrt(8), -2),
                 "the softmax runs over dim=1 (the heads); it must run over the keys (dim=-1)":
                     torch.softmax(scores / math.sqrt(8), 1),
                 AFTER_SOFTMAX: torch.softmax(scores, -1) / math.sqrt(8)}
        sums = seen.detach().sum(-1)
        if seen.shape == weights.shape and torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            hint = ("the module was given softmax weights, but not the right ones: the scores are wrong, "
                    "softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1) (see the checks without "
                    "dropout)")
        else:
            hint = "apply dropout to the softmax weights, not to the scores or the output"
        expect_close(seen, weights, "what the dropout module was given", hint=hint, mistakes=wrong)
    expect_close(out, rec(weights) @ v, "output with dropout", hint="output = dropout(weights) @ v")
