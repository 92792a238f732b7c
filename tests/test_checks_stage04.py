"""Stage 04's checks: full marks for correct code however written; for each classic mistake of splitting
heads, merging them and multi-head attention, exactly the points it earns and the words that name it (the
reference and the stub: tests/test_registry.py)."""
import math
import timeit

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from autograder import REGISTRY
from solutions import scaled_dot_product_attention
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade, mistakes

SPLIT, MERGE, MHA = solutions.split_heads, solutions.merge_heads, solutions.MultiHeadAttention
NAMES = ["split_heads", "merge_heads", "MultiHeadAttention"]


def _divisible(d, h):
    if d % h:
        raise ValueError(f"d_model={d} is not divisible by n_heads={h}")


def _code(*lines):
    """Lines of a method's body as an edit's replacement: the first at the old text's place, the others
    below it."""
    return "\n        ".join(lines)


# ------------------------------------------------------- split_heads, merge_heads: correct, written otherwise
def _checked(body):
    """split_heads as body(x, n_heads, B, L, d_k), after the check that n_heads divides d_model."""
    def split_heads(x, n_heads):
        _divisible(x.size(-1), n_heads)
        return body(x, n_heads, x.size(0), x.size(1), x.size(-1) // n_heads)
    return split_heads


def split_heads_any_leading_dims(x, n_heads, *, contiguous=False):
    _divisible(x.shape[-1], n_heads)
    y = x.view(*x.shape[:-1], n_heads, -1).transpose(-3, -2)
    return y.contiguous() if contiguous else y


SPLIT_STYLES = {
    # h pieces of (B, L, d_k)
    "chunks": _checked(lambda x, h, B, L, dk: torch.stack(x.chunk(h, dim=-1), dim=1)),
    "unflatten": _checked(lambda x, h, B, L, dk: x.unflatten(-1, (h, dk)).permute(0, 2, 1, 3)),
    "split stack": _checked(lambda x, h, B, L, dk: torch.stack(torch.split(x, dk, dim=-1), dim=-3)),
    "einsum": _checked(lambda x, h, B, L, dk: torch.einsum("blhk->bhlk", x.reshape(B, L, h, dk))),
    "tensor_split": _checked(lambda x, h, B, L, dk: torch.stack(torch.tensor_split(x, h, dim=2), dim=1)),
    "any leading dims": split_heads_any_leading_dims,
    "movedim": _checked(lambda x, h, B, L, dk: torch.movedim(x.view(B, L, h, -1), 2, 1)),
    "narrow": _checked(lambda x, h, B, L, dk: torch.stack([x.narrow(-1, i * dk, dk) for i in range(h)], 1)),
    "two transposes": _checked(lambda x, h, B, L, dk: x.transpose(1, 2).reshape(B, h, dk, L).transpose(2, 3)),
}


def merge_heads_filled(x):
    B, h, L, d_k = x.shape
    out = x.new_zeros(B, L, h * d_k)
    for i in range(h):
        out[..., i * d_k:(i + 1) * d_k] = x[:, i]
    return out


MERGE_STYLES = {
    "cat": lambda x: torch.cat([x[:, i] for i in range(x.size(1))], dim=-1),
    "flatten": lambda x: x.permute(0, 2, 1, 3).flatten(2),
    "einsum": lambda x: torch.einsum("bhld->blhd", x).reshape(x.size(0), x.size(2), -1),
    "filled": merge_heads_filled,
    "contiguous view": lambda x: x.permute(0, 2, 1, 3).contiguous().view(x.size(0), x.size(2),
                                                                         x.size(1) * x.size(3)),
    "dstack": lambda x: torch.dstack(list(x.unbind(dim=1))),
    "movedim": lambda x: x.movedim(1, 2).reshape(x.size(0), x.size(2), -1),
    "in place on a copy": lambda x: x.clone().transpose_(1, 2).flatten(2),
    "two transposes": lambda x: x.transpose(2, 3).reshape(x.size(0), x.size(1) * x.size(3),
                                                          x.size(2)).transpose(1, 2),
}


# ----------------------------------------------------------- MultiHeadAttention: correct, written differently
class MHAEinsum(nn.Module):
    """Heads as an einsum index, the dtype's lowest finite value as the fill (-inf would give NaN where every
    key is masked), dropout through F.dropout, weights kept with an extra attribute."""
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("d_model must be divisible by the number of heads")
        self.n_heads, self.p = n_heads, dropout
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.scores = None

    def forward(self, query, key, value, mask=None):
        B, Lq, D = query.shape
        h = self.n_heads
        q, k, v = (lin(t).view(B, t.size(1), h, D // h)
                   for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        self.scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D // h)
        low = torch.finfo(self.scores.dtype).min
        s = self.scores if mask is None else self.scores.masked_fill(mask == 0, low)
        w = F.dropout(torch.softmax(s, dim=-1), self.p, self.training)
        self.attn_weights = w
        return self.w_o(torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, Lq, D))


class MHALoop(MHA):
    """One head at a time, slicing the projections' outputs, with the stage 03 attention."""
    def forward(self, query, key, value, mask=None):
        q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        outs, weights = [], []
        for i in range(self.h):
            part = slice(i * self.d_k, (i + 1) * self.d_k)
            m = None if mask is None else mask[:, 0]  # (B, 1 or Lq, Lk): drop the head axis
            o, w = scaled_dot_product_attention(q[..., part], k[..., part], v[..., part], m, self.dropout)
            outs.append(o)
            weights.append(w)
        self.attn_weights = torch.stack(weights, dim=1)
        return self.w_o(torch.cat(outs, dim=-1))


class MHAWrittenOut(MHA):
    """Every step written out in forward, one line each (the mistakes of the attention itself are edits of
    it)."""
    def forward(self, query, key, value, mask=None):
        q, k, v = (lin(t).view(t.size(0), -1, self.h, self.d_k).transpose(1, 2)
                   for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        s = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(~mask, -1e9)
        self.attn_weights = s.softmax(-1)
        o = self.dropout(self.attn_weights) @ v
        return self.w_o(o.transpose(1, 2).reshape(o.size(0), o.size(2), -1))


class MHAHeadSlicesOfWeights(MHA):
    """A loop over heads that slices the rows of w_q, w_k, w_v themselves; bmm; torch.where for the mask."""
    def forward(self, query, key, value, mask=None):
        outs, weights = [], []
        for i in range(self.h):
            rows = slice(i * self.d_k, (i + 1) * self.d_k)
            q, k, v = (F.linear(t, lin.weight[rows], lin.bias[rows])
                       for t, lin in ((query, self.w_q), (key, self.w_k), (value, self.w_v)))
            s = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.d_k)
            if mask is not None:
                s = torch.where(mask.expand(-1, self.h, -1, -1)[:, i], s, torch.tensor(-1e9, dtype=s.dtype))
            w = torch.softmax(s, dim=-1)
            weights.append(w)
            outs.append(torch.bmm(self.dropout(w), v))
        self.attn_weights = torch.stack(weights, 1)
        return self.w_o(torch.cat(outs, -1))


class MHABatchedHeads(MHA):
    """(B * h, L, d_k) with baddbmm and an additive float mask; need_weights as an extra keyword."""
    def forward(self, query, key, value, mask=None, need_weights=True):
        B, Lq, d = query.shape
        Lk = key.shape[1]

        def fold(t, L):
            return t.reshape(B, L, self.h, self.d_k).permute(0, 2, 1, 3).reshape(B * self.h, L, self.d_k)
        q, k, v = fold(self.w_q(query), Lq), fold(self.w_k(key), Lk), fold(self.w_v(value), Lk)
        bias = torch.zeros(B, self.h, Lq, Lk, dtype=q.dtype)
        if mask is not None:
            bias = bias.masked_fill(~mask, -1e9)
        w = F.softmax(torch.baddbmm(bias.reshape(-1, Lq, Lk), q, k.transpose(1, 2), alpha=self.d_k ** -0.5),
                      -1)
        if need_weights:
            self.attn_weights = w.view(B, self.h, Lq, Lk)
        out = torch.bmm(self.dropout(w), v).view(B, self.h, Lq, self.d_k)
        return self.w_o(out.permute(0, 2, 1, 3).reshape(B, Lq, d))


class MHAModuleDictProperties(nn.Module):
    """Projections in a ModuleDict behind properties, einsum over (h, d_k), an additive -inf mask, a
    keyword-only extra, weights kept detached."""
    def __init__(self, d_model, n_heads, dropout=0.1, *, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
        self.proj = nn.ModuleDict({n: nn.Linear(d_model, d_model, bias=bias) for n in "qkvo"})
        self.h, self.drop = n_heads, nn.Dropout(dropout)

    w_q = property(lambda self: self.proj["q"])
    w_k = property(lambda self: self.proj["k"])
    w_v = property(lambda self: self.proj["v"])
    w_o = property(lambda self: self.proj["o"])

    def forward(self, query, key, value, mask=None):
        dk = query.size(-1) // self.h
        q, k, v = (lin(t).unflatten(-1, (self.h, dk))
                   for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) * dk ** -0.5
        if mask is not None:
            s = s + torch.where(mask, 0.0, float("-inf"))
        w = torch.softmax(s, -1).nan_to_num(0.0)
        self.attn_weights = w.detach()
        return self.w_o(torch.einsum("bhqk,bkhd->bqhd", self.drop(w), v).flatten(-2))


class MHAAdditiveMaskPerHead(nn.Module):
    """A loop over chunk()ed heads, an additive float mask, F.dropout with the training flag."""
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError("d_model % n_heads != 0: each head needs an equal share of the features")
        self.heads, self.p = n_heads, dropout
        for n in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, n, nn.Linear(d_model, d_model))

    def forward(self, query, key, value, mask=None):
        qs, ks, vs = (lin(t).chunk(self.heads, -1)
                      for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        bias = 0.0 if mask is None else (~mask).float() * -1e9
        outs, ws = [], []
        for i, (q, k, v) in enumerate(zip(qs, ks, vs)):
            b = bias if isinstance(bias, float) else bias[:, min(i, bias.size(1) - 1)]
            w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.size(-1)) + b, -1)
            ws.append(w)
            outs.append(F.dropout(w, self.p, self.training) @ v)
        self.attn_weights = torch.stack(ws, 1)
        return self.w_o(torch.cat(outs, -1))


_ATTEND = "out, self.attn_weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)"
MHA_STYLES = {c.__name__: c for c in (MHAEinsum, MHALoop, MHAWrittenOut, MHAHeadSlicesOfWeights,
                                      MHABatchedHeads,
                                      MHAModuleDictProperties, MHAAdditiveMaskPerHead)} | {
    # the reference or MHAWrittenOut with a few lines changed
    # torch.where and a -1e9 fill written inline; the weights kept after dropout
    "MHAWhere": edit(MHA, (_ATTEND, _code(
        "scores = torch.matmul(q, k.transpose(2, 3)) * self.d_k ** -0.5", "if mask is not None:",
        "    scores = torch.where(mask, scores, torch.full_like(scores, -1e9))",
        "self.attn_weights = self.dropout(scores.softmax(dim=-1))", "out = self.attn_weights @ v"))),
    "MHATorchKernel": edit(MHA, (_ATTEND, _code(  # PyTorch's fused attention (stage 03's work, allowed here)
        "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, "
        "dropout_p=self.dropout.p if self.training else 0.0)", "with torch.no_grad():  # the weights "
                                                               "computed aside",
        "    s = q @ k.transpose(-1, -2) / self.d_k ** 0.5",
        "    self.attn_weights = (s if mask is None else s.masked_fill(~mask, -1e9)).softmax(-1)"))),
    # float64 inside, a log-mask added to the scores, logsumexp normalization, F.dropout
    "MHADoubleInside": edit(
        MHAWrittenOut, ("lin(t).view", "lin(t).double().view"),
        ("s.masked_fill(~mask, -1e9)", "s + torch.log(mask.double().clamp_min(1e-30))"),
        ("self.attn_weights = s.softmax(-1)", _code("w = torch.exp(s - s.logsumexp(-1, keepdim=True))",
                                                     "self.attn_weights = w.float()")),
        ("self.dropout(self.attn_weights)", "F.dropout(w, self.dropout.p, training=self.training)"),
        ("o.size(2), -1))", "o.size(2), -1).float())")),
    "MHAPackedSelfAttention": edit(  # self-attention through one packed in-projection, cross-attention apart
        MHA, ("self.w_k(key)", "key"), ("self.w_v(value)", "value"), ("q = split_heads(self.w_q(query), "
                                                                      "self.h)", _code(
            "if query is key and key is value:",
            "    W = torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight])",
            "    b = torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])",
            "    query, key, value = torch.nn.functional.linear(query, W, b).chunk(3, dim=-1)",
            "else:", "    query, key, value = self.w_q(query), self.w_k(key), self.w_v(value)",
            "q = split_heads(query, self.h)"))),
    # the Annotated Transformer's layout, with mask.unsqueeze(1) only for a 3-d mask
    "MHAAnnotatedStyle": edit(
        MHAWrittenOut, ("mask=None):", _code("mask=None):", "if mask is not None and mask.dim() == 3:",
                                             "    mask = mask.unsqueeze(1)")),
        ("~mask", "mask == 0"), ("self.attn_weights = s.softmax(-1)", "self.attn = self.attn_weights = "
                                                                      "s.softmax(-1)"),
        ("self.dropout(self.attn_weights)", "self.dropout(self.attn)"),
        ("reshape(o.size(0), o.size(2), -1)", "contiguous().view(o.size(0), -1, self.h * self.d_k)")),
    # key and value default to query; a keyword-only flag; a (B, Lk) mask accepted too
    "MHAKeyValueDefaults": edit(
        MHA, ("key, value, mask=None):", _code("key=None, value=None, mask=None, *, need_weights=True):",
                                               "key = query if key is None else key",
                                               "value = key if value is None else value",
                                               "if mask is not None and mask.dim() == 2:",
                                               "    mask = mask[:, None, None, :]")),
        (_ATTEND, _code(_ATTEND.replace("self.attn_weights", "w"), "if need_weights:",
                        "    self.attn_weights = w"))),
    "MHAHandWrittenDropout": edit(MHA, (_ATTEND, _code(  # inverted dropout, w * keep / (1 - p): 0/0 at p = 1
        "_, self.attn_weights = scaled_dot_product_attention(q, k, v, mask)", "w = self.attn_weights",
        "if self.training:", "    w = w * (torch.rand_like(w) >= self.dropout.p).float() / (1 - "
                             "self.dropout.p)",
        "out = w @ v"))),
}
CORRECT = [pytest.param(contract, impl, id=f"{contract}: {name}") for contract, styles in (
    ("split_heads", SPLIT_STYLES), ("merge_heads", MERGE_STYLES), ("MultiHeadAttention", MHA_STYLES))
    for name, impl in styles.items()]


@pytest.mark.parametrize("contract, impl", CORRECT)
def test_other_correct_code(contract, impl):
    assert_full_marks(impl, contract)


# ---------------------------------------------------------------- split_heads, merge_heads: classic mistakes
_SPLIT_CHECK = ('if d_model % n_heads:\n        raise ValueError(f"d_model={d_model} is not divisible by '
                'n_heads={n_heads}")')
_NO_CHECK = (_SPLIT_CHECK, "pass  # no check of d_model % n_heads")


def _split_returns(expr, *more):
    return edit(SPLIT, ("return x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2)",
                        f"return {expr}"), *more)


def _merge_returns(expr):
    return edit(MERGE, ("return x.transpose(1, 2).reshape(B, L, h * d_k)", f"return {expr}"))


SPLIT_MISTAKES = [
    # right values, but no gradient reaches w_q, w_k, w_v through them (the numpy one was a correct style
    # once)
    Mistake("split: x detached",
            _split_returns("x.detach().view(B, L, n_heads, d_model // n_heads).transpose(1, 2)"), 3,
            ("requires_grad", "the heads left autograd")),
    Mistake("split through numpy", _checked(lambda x, h, B, L, dk: torch.from_numpy(np.ascontiguousarray(
        x.numpy().reshape(B, L, h, dk).transpose(0, 2, 1, 3)))), 3,
            ("requires grad", "the heads left autograd")),
    Mistake("view(B, h, L, d_k) without transpose",
            _split_returns("x.view(B, n_heads, L, d_model // n_heads)"), 2,
            "without a transpose"),
    Mistake("features dealt out in turn",
            _split_returns("x.view(B, L, d_model // n_heads, n_heads).permute(0, 3, 1, 2)"), 3, "in turn"),
    Mistake("last two dims swapped, permute(0, 2, 3, 1)",
            _split_returns("x.view(B, L, n_heads, d_model // n_heads).permute(0, 2, 3, 1)"), 1,
            ("(B, h, d_k, L)", "permute(0, 2, 3, 1)")),
    Mistake("transpose(1, 3)", _split_returns("x.view(B, L, n_heads, d_model // n_heads).transpose(1, 3)"), 1,
            "not transpose(1, 3)"),
    Mistake("heads folded into the batch",
            _split_returns("x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2).reshape(B * n_heads, "
                           "L, -1)"),
            1, "folded into the batch"),
    Mistake("x unsqueezed in place", edit(SPLIT, ("return x.view(", "x.unsqueeze_(1)\n    return x.view(")),
            0,
            ("changed in place", "unsqueeze_")),
    Mistake("no ValueError, a view error instead", edit(SPLIT, _NO_CHECK), 3,
            ("no clear ValueError", "RuntimeError")),
    Mistake("no error at all, features dropped",
            _split_returns("x[..., :n_heads * (d_model // n_heads)].reshape(B, L, n_heads, -1).transpose(1, "
                           "2)",
                           _NO_CHECK), 3, ("no clear ValueError", "no error")),
    Mistake("a ValueError that names nothing",
            edit(SPLIT, ('f"d_model={d_model} is not divisible by n_heads={n_heads}"', '"bad input"')), 3,
            "names the problem"),
]
MERGE_MISTAKES = [
    Mistake("merge: x detached", _merge_returns("x.detach().transpose(1, 2).reshape(B, L, h * d_k)"), 2,
            ("requires_grad", "the heads left autograd")),
    Mistake("merge through numpy", lambda x: torch.from_numpy(
        x.numpy().transpose(0, 2, 1, 3).reshape(x.size(0), x.size(2), -1).copy()), 2,
            ("requires grad", "the heads left autograd")),
    # a blind review's find: the hint was split_heads' (view(B, L, d_k, h))
    Mistake("features interleaved, permute(0, 2, 3, 1)",
            _merge_returns("x.permute(0, 2, 3, 1).reshape(B, L, h * d_k)"), 1,
            "features interleaved (permute(0, 2, 3, 1))", not_says="view(B, L, d_k, h)"),
    Mistake("merged without the transpose", _merge_returns("x.reshape(B, L, h * d_k)"), 1,
            "merged without the transpose"),
    Mistake("view without contiguous", _merge_returns("x.transpose(1, 2).view(B, L, h * d_k)"), 1,
            (".contiguous()", "non-contiguous", ".reshape")),
    Mistake("moved but not flattened", _merge_returns("x.transpose(1, 2)"), 0, "moved but not merged"),
    Mistake("heads stacked along the positions", _merge_returns("x.reshape(B, h * L, d_k)"), 0,
            "stacked along the positions"),
    Mistake("heads averaged", _merge_returns("x.mean(1)"), 0, "averaged or summed"),
    Mistake("three heads written into the code", _merge_returns("x.transpose(1, 2).reshape(B, L, 3 * d_k)"),
            2,
            "take every size from x itself"),
    Mistake("x transposed in place", _merge_returns("x.transpose_(1, 2).reshape(B, L, h * d_k)"), 0,
            ("changed in place", "transpose_")),  # the caller's tensor now has shape (B, L, h, d_k)
]


# ---------------------------------------------------------------- MultiHeadAttention: classic mistakes
# most are a diff of the reference; those inside the attention itself, a diff of MHAWrittenOut
def _returns(new):
    return edit(MHA, ("return self.w_o(merge_heads(out))", f"return {new}"))


def _projected(k="self.w_k(key)", v="self.w_v(value)"):
    return edit(MHA, ("self.w_k(key)", k), ("self.w_v(value)", v))


def _keeps(weights):
    """The reference keeping `weights` (of w, the attention's weights, q and k) as attn_weights."""
    return edit(MHA, (_ATTEND, _code(_ATTEND.replace("self.attn_weights", "w"),
                                     f"self.attn_weights = {weights}")))


def _mask_first(line):
    """The reference with `line` applied to a given mask first."""
    return edit(MHA, ("mask=None):\n", f"mask=None):\n        if mask is not None:\n            {line}\n"))


def _written(*changes):
    return edit(MHAWrittenOut, *changes)


_MHA_CHECK = ('if d_model % n_heads:\n            raise ValueError(f"d_model={d_model} is not divisible by '
              'n_heads={n_heads}: "\n                             "each head gets d_model / n_heads '
              'features")')
_SPLIT_VIEW, _MERGE_T = "view(t.size(0), -1, self.h, self.d_k).transpose(1, 2)", "o.transpose(1, 2).reshape"
_UNSPLIT = (_SPLIT_VIEW, "view(t.size(0), self.h, -1, self.d_k)")
MHA_MISTAKES = [
    # the heads: split, merged, how many
    Mistake("split without transpose", _written(_UNSPLIT), 2, "without a transpose"),
    Mistake("split and merge without transpose", _written(_UNSPLIT, (_MERGE_T, "o.reshape")), 2,
            "without a transpose"),
    Mistake("merge without transpose", _written((_MERGE_T, "o.reshape")), 3, "merged without the transpose"),
    Mistake("heads interleaved in split and merge",
            _written((_SPLIT_VIEW, "view(t.size(0), -1, self.d_k, self.h).permute(0, 3, 1, 2)"),
                     (_MERGE_T, "o.permute(0, 2, 3, 1).reshape")), 2, "in turn"),
    Mistake("keys reshaped with the query's length",
            _written(("lin(t).view(t.size(0), -1,", "lin(t).reshape(query.size(0), query.size(1),")), 5,
            "lengths do not fit together"),
    Mistake("n_heads fixed at 2", edit(MHA, ("self.h = n_heads", "self.h = 2")), 4,
            ("n_heads ignored: this is the output of 2 heads", "2 heads, not n_heads=3")),
    Mistake("n_heads fixed at 1", edit(MHA, ("self.h = n_heads", "self.h = 1")), 2,
            ("n_heads ignored: this is the output of 1 head,", "fixed at 1")),
    Mistake("n_heads fixed at 4",
            edit(MHA, ("self.h = n_heads", "self.h = 4 if d_model % 4 == 0 else n_heads")), 3,
            "output of 4 heads, not 3"),
    # the projections
    Mistake("one Linear shared by q, k, v",
            edit(MHA, ("self.w_k = nn.Linear(d_model, d_model)\n        self.w_v = nn.Linear(d_model, "
                       "d_model)",
                       # every check that copies weights fails
                       "self.w_k = self.w_v = self.w_q")), 1, "shared"),
    Mistake("w_q used for all three", _projected("self.w_q(key)", "self.w_q(value)"), 2,
            "one projection used for query, key and value"),
    Mistake("key and value swapped", _projected("self.w_k(value)", "self.w_v(key)"), 6,
            "key and value swapped"),
    # issue 40: was told only "the lengths do not fit together ... view(B, -1, h, d_k)"
    Mistake("query and key swapped", edit(MHA, ("self.w_q(query)", "self.w_q(key)"),
                                          ("self.w_k(key)", "self.w_k(query)")),
            5, "Likely: query and key swapped", not_says="view(B, -1, h, d_k)"),
    Mistake("query used as key and value", _projected("self.w_k(query)", "self.w_v(query)"), 5,
            "query used as key and value"),
    Mistake("query used as key and value: named when it is the cause (as the call without the mask tells)",
            _projected("self.w_k(query)", "self.w_v(query)"), 0,
            "Likely: the query used as key and value too: without the mask this is the query's "
            "self-attention; k and v come from the `key` and `value` arguments, whose length the mask has",
            title="cross-attention"),
    Mistake("query used as key and value, no mask",
            edit(MHA, ("self.w_k(key)", "self.w_k(query)"), ("self.w_v(value)", "self.w_v(query)"),
                 ("v, mask, self", "v, None, self")), 4, "query used as key and value"),
    Mistake("w_k applied to the values", _projected(v="self.w_k(value)"), 0, "w_k applied to the values",
            title="a causal mask"),  # a copy-paste slip: the message said only 'pass the mask on'
    # right numbers, but training never reaches the input (nor w_q, w_k, w_v)
    Mistake("projections under no_grad",
            _written(("        q, k, v = (lin(t)", "        with torch.no_grad():\n            q, k, v = "
                                                   "(lin(t)")),
            0, ("with respect to x", "left autograd"), title="self-attention"),
    # the scale
    Mistake("scores not scaled", _written((" / math.sqrt(self.d_k)", "")), 2, ("not scaled", "sqrt(d_k)")),
    # q / sqrt(h), then / sqrt(d_k) inside: / sqrt(h * d_k) = sqrt(d_model)
    Mistake("scaled by sqrt(d_model)",
            edit(MHA, ("(q, k, v, mask", "(q / self.h ** 0.5, k, v, mask")), 2,
            "sqrt(d_model) instead of sqrt(d_k)"),
    Mistake("scores divided by sqrt(h)", edit(MHA, ("(q, k, v, mask", "(q * (self.d_k / self.h) ** 0.5, k, "
                                                                      "v, mask")),
            2, "sqrt(n_heads) instead of sqrt(d_k)"),
    Mistake("scaled twice", edit(MHA, ("(q, k, v, mask", "(q / self.d_k ** 0.5, k, v, mask")), 0,
            "divided by sqrt(d_k) twice", title="self-attention"),
    # the softmax and the mask
    Mistake("softmax over the queries", _written(("s.softmax(-1)", "s.softmax(-2)")), 2,
            "softmax over the queries"),
    Mistake("softmax over the heads", _written(("s.softmax(-1)", "s.softmax(1)")), 2,
            "softmax over dim=1 (the heads)"),
    Mistake("mask ignored", edit(MHA, ("v, mask, self", "v, None, self")), 4, "mask ignored"),
    Mistake("mask inverted", edit(MHA, ("v, mask, self", "v, None if mask is None else ~mask, self")), 4,
            "polarity"),
    Mistake("masked scores filled with 0", _written(("-1e9", "0.0")), 4, "filled with 0"),
    # a blind review's find: NaN only where every key is masked, which nn.MultiheadAttention cannot compare
    Mistake("masked scores filled with -inf", _written(("-1e9", "float('-inf')")), 6,
            ("0/0 = NaN", "values NaN or inf")),
    Mistake("mask applied after the softmax",
            _written(("s = s.masked_fill(~mask, -1e9)", "pass"),
                     ("= s.softmax(-1)", "= s.softmax(-1) if mask is None else "
                                         "s.softmax(-1).masked_fill(~mask, 0.0)")),
            4, "after the softmax"),
    Mistake("mask inverted in place", _written(("~mask", "mask.logical_not_()")), 4,
            ("`mask`", "changed in place")),
    # the Annotated Transformer's habit
    Mistake("mask.unsqueeze(1)", _mask_first("mask = mask.unsqueeze(1)"), 4,
            ("works without the mask and fails with it", "no mask.unsqueeze(1)")),
    # cross-attention, causal, attn_weights
    Mistake("mask transposed", _mask_first("mask = mask.transpose(-2, -1)"), 4,
            # a (B, 1, 1, Lk) padding mask fails in cross-attention (it was told 'is the query used as key and
            # value too?', which it is not), and a causal mask becomes its mirror image
            ("with the mask of shape (2, 1, 1, 6); expected it to work; got RuntimeError: The size of tensor "
             "a (6) must match the size of tensor b (3) at non-singleton dimension 2. Likely: it works "
             "without the mask and fails with it: the mask (B, 1, 1, Lk) or (B, 1, Lq, Lk) broadcasts over "
             "the heads and the queries as it is; pass it on unchanged (no transpose, unsqueeze, view or "
             "reshape)",
             "causal mask of shape (1, 1, 5, 5)): values differ (largest difference 0.7 at index (0, 0, 2)); "
             "expected 0.008017 there; got -0.692. Likely: the mask's query and key axes swapped (a "
             "transpose of the mask): a (.., Lq, Lk) mask is used as it is"),
            not_says="Is the query used as key"),
    # the weights kept
    Mistake("attn_weights not kept", edit(MHA, ("out, self.attn_weights =", "out, _ =")), 6,
            "not keeping attn_weights"),
    Mistake("attn_weights averaged over heads", _keeps("w.mean(1)"), 6, "averaged over the heads"),
    Mistake("attn_weights of the first call only", _keeps("w if self.attn_weights is None else "
                                                          "self.attn_weights"), 6,
            "every forward call"),
    Mistake("scores kept instead of weights", _keeps("q @ k.transpose(-2, -1) / self.d_k ** 0.5"), 6,
            "scores were kept"),
    # the output
    Mistake("w_o not applied", _returns("merge_heads(out)"), 3, "no output projection"),
    Mistake("no w_o at all", edit(MHA, ("self.w_o = nn.Linear(d_model, d_model)", ""),
                                  ("return self.w_o(merge_heads(out))", "return merge_heads(out)")), 1,
            "no output projection"),
    Mistake("w_q, w_k, w_v without their biases", edit(MHA, *((f"self.{n}({a})", f"({a} @ self.{n}.weight.T)")
                                                             for n, a in (("w_q", "query"), ("w_k", "key"),
                                                                          ("w_v", "value")))), 2,
            # the hints were: pass the mask on, keep the weights...
            "the biases of w_q, w_k and w_v are missing",
            not_says=("pass the mask on", "keep the softmax weights", "without dropout")),
    Mistake("w_o without its bias",
            _returns("torch.nn.functional.linear(merge_heads(out), self.w_o.weight)"), 3,
            "w_o's bias is missing"),
    Mistake("the residual added inside", _returns("self.w_o(merge_heads(out)) + query"), 3,
            "the input (query) is added to the output"),
    Mistake("returns (output, weights)", _returns("self.w_o(merge_heads(out)), self.attn_weights"), 1,
            "return only the output"),
    # ValueError
    Mistake("no ValueError", edit(MHA, (_MHA_CHECK, "pass  # no check of d_model % n_heads")), 6,
            "no clear ValueError"),
    Mistake("assert instead of ValueError", edit(MHA, (_MHA_CHECK, "assert d_model % n_heads == 0")), 6,
            ("no clear ValueError", "AssertionError")),
    # dropout
    Mistake("dropout on the output, not the weights", edit(MHA, (", self.dropout)", ")"), (
        "return self.w_o(merge_heads(out))", "return self.dropout(self.w_o(merge_heads(out)))")), 6,
            "dropout applied after w_o"),
    Mistake("dropout on in eval mode (F.dropout, training=True)",
            edit(MHA, (", self.dropout)",
                       ", lambda w: torch.nn.functional.dropout(w, self.dropout.p, True))")), 6,
            ("dropout still acts in eval mode", "nn.Dropout module", "not F.dropout")),
    Mistake("nn.Dropout built in forward", edit(MHA, (", self.dropout)", ", nn.Dropout(self.dropout.p))")), 0,
            ("built inside forward", "in __init__"), title="dropout acts", not_says="not F.dropout"),
    Mistake("dropout on v", edit(MHA, ("v, mask, self.dropout)", "self.dropout(v), mask)")), 6,
            ("dropout(weights) @ v", "not on v")),  # the same at p = 1 (only w_o.bias left), not at p = 0.5
    Mistake("dropout on the scores", _written(("s = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)",
                                               "s = self.dropout(q @ k.transpose(-1, -2) / "
                                               "math.sqrt(self.d_k))"),
                                              ("self.dropout(self.attn_weights) @ v",
                                               "self.attn_weights @ v")), 6,
            "dropout applied to the scores before the softmax"),
    Mistake("dropout rate fixed", edit(MHA, ("nn.Dropout(dropout)", "nn.Dropout(0.1)")), 6,
            "dropout argument is not used"),
]
ROWS = [*mistakes("split_heads", SPLIT_MISTAKES), *mistakes("merge_heads", MERGE_MISTAKES),
        *mistakes("MultiHeadAttention", MHA_MISTAKES)]


@pytest.mark.parametrize("m", ROWS)
def test_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- the checks themselves
def test_checks_are_fast_on_the_reference():
    for name in NAMES:
        for c in REGISTRY[name]:  # the best of two runs: the first pays PyTorch's one-time warm-up
            took = min(timeit.repeat(lambda c=c, name=name: c.fn(getattr(solutions, name)), number=1,
                                     repeat=2))
            assert took < 1.0, f"{name}: {c.title} takes {took:.2f} s"


class MHATorch(nn.Module):
    """nn.MultiheadAttention doing the lesson's work, behind the contract's names."""
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.inner = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.w_o = self.inner.out_proj

    def forward(self, query, key, value, mask=None):
        out, self.attn_weights = self.inner(query, key, value, average_attn_weights=False)
        return out


def test_pytorch_multi_head_attention_earns_nothing():
    points, text = grade(MHATorch, "MultiHeadAttention")
    assert points == 0 and text.count("nn.MultiheadAttention (or F.multi_head_attention_forward)") == \
        text.count("✗") > 0, text
