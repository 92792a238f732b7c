"""Stage 04's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake of splitting heads and multi-head attention."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from solutions import merge_heads, scaled_dot_product_attention, split_heads
from autograder import max_points
from tests.grading import assert_caught, assert_full_marks, grade, grade_one

NAMES = ["split_heads", "merge_heads", "MultiHeadAttention"]


@pytest.mark.parametrize("name", NAMES)
def test_reference_gets_full_marks(name):
    assert_full_marks(getattr(solutions, name))


# ---------------------------------------------------------------- correct, written differently
def split_heads_chunks(x, n_heads):
    if x.size(-1) % n_heads != 0:
        raise ValueError(f"{x.size(-1)} features cannot be shared by {n_heads} heads")
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)  # h pieces of (B, L, d_k) -> (B, h, L, d_k)


def split_heads_unflatten(x, n_heads):
    d_model = x.shape[-1]
    if d_model % n_heads:
        raise ValueError(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
    return x.unflatten(-1, (n_heads, d_model // n_heads)).permute(0, 2, 1, 3)


def merge_heads_cat(x):
    return torch.cat([x[:, i] for i in range(x.size(1))], dim=-1)


def merge_heads_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(2)


class MHAEinsum(nn.Module):
    """Heads as an einsum index, -inf fill, dropout through F.dropout, weights kept with an extra attribute."""

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
        q = self.w_q(query).view(B, Lq, h, D // h)
        k = self.w_k(key).view(B, key.size(1), h, D // h)
        v = self.w_v(value).view(B, value.size(1), h, D // h)
        self.scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D // h)
        s = self.scores if mask is None else self.scores.masked_fill(mask == 0, float("-inf"))
        w = F.dropout(torch.softmax(s, dim=-1), self.p, self.training)
        self.attn_weights = w
        return self.w_o(torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, Lq, D))


class MHALoop(nn.Module):
    """One head at a time, slicing the projections' outputs, with the stage 03 attention."""

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        outs, weights = [], []
        for i in range(self.h):
            part = slice(i * self.d_k, (i + 1) * self.d_k)
            m = None if mask is None else mask[:, 0]  # (B, 1 or Lq, Lk): drop the head axis
            o, w = scaled_dot_product_attention(q[..., part], k[..., part], v[..., part], m, self.drop)
            outs.append(o)
            weights.append(w)
        self.attn_weights = torch.stack(weights, dim=1)
        return self.w_o(torch.cat(outs, dim=-1))


class MHAWhere(solutions.MultiHeadAttention):
    """The reference's layout, with torch.where and a -1e9 fill written inline."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (split_heads(lin(t), self.h) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        scores = torch.matmul(q, k.transpose(2, 3)) * self.d_k ** -0.5
        if mask is not None:
            scores = torch.where(mask, scores, torch.full_like(scores, -1e9))
        self.attn_weights = self.dropout(scores.softmax(dim=-1))
        return self.w_o(merge_heads(self.attn_weights @ v))


@pytest.mark.parametrize("fn", [split_heads_chunks, split_heads_unflatten])
def test_other_correct_split_heads(fn):
    assert_full_marks(fn, "split_heads")


@pytest.mark.parametrize("fn", [merge_heads_cat, merge_heads_flatten])
def test_other_correct_merge_heads(fn):
    assert_full_marks(fn, "merge_heads")


@pytest.mark.parametrize("cls", [MHAEinsum, MHALoop, MHAWhere])
def test_other_correct_multi_head_attention(cls):
    assert_full_marks(cls, "MultiHeadAttention")


# ---------------------------------------------------------------- classic mistakes: split and merge
def split_no_transpose(x, n_heads):
    B, L, d = x.shape
    if d % n_heads:
        raise ValueError("d_model not divisible by n_heads")
    return x.view(B, n_heads, L, d // n_heads)


def split_interleaved(x, n_heads):
    B, L, d = x.shape
    if d % n_heads:
        raise ValueError("d_model not divisible by n_heads")
    return x.view(B, L, d // n_heads, n_heads).permute(0, 3, 1, 2)


def split_no_value_error(x, n_heads):
    B, L, d = x.shape
    return x.view(B, L, n_heads, d // n_heads).transpose(1, 2)


def split_silent_rounding(x, n_heads):
    B, L, d = x.shape
    d_k = d // n_heads
    return x[..., :n_heads * d_k].reshape(B, L, n_heads, d_k).transpose(1, 2)


def split_vague_error(x, n_heads):
    if x.size(-1) % n_heads:
        raise ValueError("bad input")
    return split_heads(x, n_heads)


def merge_no_transpose(x):
    B, h, L, d_k = x.shape
    return x.reshape(B, L, h * d_k)


def merge_view_without_contiguous(x):
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, h * d_k)


SPLIT_MISTAKES = [
    ("view(B, h, L, d_k) without transpose", split_no_transpose, ["without a transpose"]),
    ("features dealt out in turn", split_interleaved, ["in turn"]),
    ("no ValueError, a view error instead", split_no_value_error, ["no clear ValueError", "RuntimeError"]),
    ("no error at all, features dropped", split_silent_rounding, ["no clear ValueError", "no error"]),
    ("a ValueError that names nothing", split_vague_error, ["names the problem"]),
]


@pytest.mark.parametrize("label,fn,keywords", SPLIT_MISTAKES, ids=[m[0] for m in SPLIT_MISTAKES])
def test_split_heads_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "split_heads", *keywords)


def test_merge_heads_mistakes_are_caught():
    assert_caught(merge_no_transpose, "merge_heads", "merged without the transpose")
    assert_caught(merge_view_without_contiguous, "merge_heads", ".contiguous()", "non-contiguous", ".reshape")


# ---------------------------------------------------------------- classic mistakes: MultiHeadAttention
class Base(solutions.MultiHeadAttention):
    """The reference with its forward written out, so that a mutant changes one step."""

    def heads(self, t):
        return split_heads(t, self.h)

    def merge(self, t):
        return merge_heads(t)

    def project(self, query, key, value):
        return self.w_q(query), self.w_k(key), self.w_v(value)

    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, mask, self.dropout)

    def output(self, t):
        return self.w_o(t)

    def forward(self, query, key, value, mask=None):
        q, k, v = (self.heads(t) for t in self.project(query, key, value))
        out, self.attn_weights = self.attend(q, k, v, mask)
        return self.output(self.merge(out))


class SplitNoTranspose(Base):
    def heads(self, t):
        B, L, d = t.shape
        return t.view(B, self.h, L, d // self.h)


class SplitAndMergeNoTranspose(SplitNoTranspose):
    def merge(self, t):
        B, h, L, d_k = t.shape
        return t.reshape(B, L, h * d_k)


class MergeNoTranspose(Base):
    def merge(self, t):
        B, h, L, d_k = t.shape
        return t.reshape(B, L, h * d_k)


class NoOutputProjection(Base):
    def output(self, t):
        return t


class NoOutputProjectionAttribute(Base):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__(d_model, n_heads, dropout)
        del self.w_o

    def output(self, t):
        return t


class SharedLinear(Base):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__(d_model, n_heads, dropout)
        self.w_k = self.w_v = self.w_q


class OneProjectionUsed(Base):
    def project(self, query, key, value):
        return self.w_q(query), self.w_q(key), self.w_q(value)


class KeyValueSwapped(Base):
    def project(self, query, key, value):
        return self.w_q(query), self.w_k(value), self.w_v(key)


class QueryOnly(Base):
    def project(self, query, key, value):
        return self.w_q(query), self.w_k(query), self.w_v(query)


class QueryOnlyNoMask(QueryOnly):
    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, None, self.dropout)


class ScaledByDModel(Base):
    def attend(self, q, k, v, mask):
        # q / sqrt(h), then / sqrt(d_k) inside: the scores are divided by sqrt(h * d_k) = sqrt(d_model)
        return scaled_dot_product_attention(q / math.sqrt(self.h), k, v, mask, self.dropout)


class MaskIgnored(Base):
    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, None, self.dropout)


class MaskInverted(Base):
    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, None if mask is None else ~mask, self.dropout)


class WeightsNotKept(solutions.MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        q, k, v = (split_heads(lin(t), self.h) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        out, _ = scaled_dot_product_attention(q, k, v, mask, self.dropout)
        return self.w_o(merge_heads(out))


class WeightsAveraged(Base):
    def attend(self, q, k, v, mask):
        out, w = super().attend(q, k, v, mask)
        return out, w.mean(1)


class WeightsKeptOnce(Base):
    def attend(self, q, k, v, mask):
        out, w = super().attend(q, k, v, mask)
        if getattr(self, "_kept", None) is None:
            self._kept = w
        return out, self._kept


class ScoresKept(Base):
    def attend(self, q, k, v, mask):
        out, _ = super().attend(q, k, v, mask)
        return out, q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


class NoValueError(Base):
    def __init__(self, d_model, n_heads, dropout=0.1):
        nn.Module.__init__(self)
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)


class AssertInstead(NoValueError):
    def __init__(self, d_model, n_heads, dropout=0.1):
        assert d_model % n_heads == 0
        super().__init__(d_model, n_heads, dropout)


class DropoutOnOutput(Base):
    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, mask)

    def output(self, t):
        return self.dropout(self.w_o(t))


class DropoutAlwaysOn(Base):
    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, mask, lambda w: F.dropout(w, self.dropout.p, training=True))


class HeadsFixedAtTwo(Base):
    """n_heads written into the code."""

    def heads(self, t):
        return split_heads(t, 2)


class HeadsFixedAtOne(Base):
    def heads(self, t):
        return split_heads(t, 1)


class ReturnsTuple(Base):
    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, value, mask), self.attn_weights


MHA_MISTAKES = [
    ("split without transpose", SplitNoTranspose, ["without a transpose"]),
    ("split and merge without transpose", SplitAndMergeNoTranspose, ["without a transpose"]),
    ("merge without transpose", MergeNoTranspose, ["merged without the transpose"]),
    ("w_o not applied", NoOutputProjection, ["no output projection"]),
    ("no w_o at all", NoOutputProjectionAttribute, ["no output projection"]),
    ("one Linear shared by q, k, v", SharedLinear, ["shared"]),
    ("w_q used for all three", OneProjectionUsed, ["one projection used for query, key and value"]),
    ("key and value swapped", KeyValueSwapped, ["key and value swapped"]),
    ("query used as key and value", QueryOnly, ["query used as key and value"]),
    ("query used as key and value, no mask", QueryOnlyNoMask, ["query used as key and value"]),
    ("scaled by sqrt(d_model)", ScaledByDModel, ["sqrt(d_model) instead of sqrt(d_k)"]),
    ("mask ignored", MaskIgnored, ["mask ignored"]),
    ("mask inverted", MaskInverted, ["polarity"]),
    ("attn_weights not kept", WeightsNotKept, ["not keeping attn_weights"]),
    ("attn_weights averaged over heads", WeightsAveraged, ["averaged over the heads"]),
    ("attn_weights of the first call only", WeightsKeptOnce, ["every forward call"]),
    ("scores kept instead of weights", ScoresKept, ["scores were kept"]),
    ("no ValueError", NoValueError, ["no clear ValueError"]),
    ("assert instead of ValueError", AssertInstead, ["no clear ValueError", "AssertionError"]),
    ("dropout on the output, not the weights", DropoutOnOutput, ["dropout applied after w_o"]),
    ("dropout on in eval mode", DropoutAlwaysOn, ["dropout still acts in eval mode", "nn.Dropout module"]),
    ("returns (output, weights)", ReturnsTuple, ["return only the output"]),
    ("n_heads fixed at 2", HeadsFixedAtTwo, ["n_heads ignored: this is the output of 2 heads", "2 heads, not n_heads=3"]),
    ("n_heads fixed at 1", HeadsFixedAtOne, ["n_heads ignored: this is the output of 1 head,", "fixed at 1"]),
]


@pytest.mark.parametrize("label,cls,keywords", MHA_MISTAKES, ids=[m[0] for m in MHA_MISTAKES])
def test_multi_head_attention_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "MultiHeadAttention", *keywords)


def test_shared_linear_fails_the_comparisons_too():
    points, text = grade(SharedLinear, "MultiHeadAttention")
    assert points <= 2, text  # the attributes fail, and so does every check that copies weights


# ---------------------------------------------------------------- review: more styles, more mistakes
def split_heads_split_stack(x, n_heads):
    if x.size(-1) % n_heads:
        raise ValueError(f"{x.size(-1)} % {n_heads} != 0: heads need equal shares")
    return torch.stack(torch.split(x, x.size(-1) // n_heads, dim=-1), dim=-3)


def split_heads_einsum(x, n_heads):
    B, L, d = x.shape
    if d % n_heads:
        raise ValueError(f"d_model {d} not divisible by {n_heads}")
    return torch.einsum("blhk->bhlk", x.reshape(B, L, n_heads, d // n_heads))


def merge_heads_einsum(x):
    B, h, L, d_k = x.shape
    return torch.einsum("bhld->blhd", x).reshape(B, L, -1)


def merge_heads_filled(x):
    B, h, L, d_k = x.shape
    out = x.new_zeros(B, L, h * d_k)
    for i in range(h):
        out[..., i * d_k:(i + 1) * d_k] = x[:, i]
    return out


class _Four(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.h, self.dk, self.p = n_heads, d_model // n_heads, dropout
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.drop = nn.Dropout(dropout)


class MHAHeadSlicesOfWeights(_Four):
    """A loop over heads that slices the rows of w_q, w_k, w_v themselves; bmm; torch.where for the mask."""

    def forward(self, query, key, value, mask=None):
        outs, weights = [], []
        for i in range(self.h):
            rows = slice(i * self.dk, (i + 1) * self.dk)
            q, k, v = (F.linear(t, lin.weight[rows], lin.bias[rows])
                       for t, lin in ((query, self.w_q), (key, self.w_k), (value, self.w_v)))
            s = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.dk)
            if mask is not None:
                s = torch.where(mask.expand(-1, self.h, -1, -1)[:, i], s, torch.tensor(-1e9, dtype=s.dtype))
            w = torch.softmax(s, dim=-1)
            weights.append(w)
            outs.append(torch.bmm(self.drop(w), v))
        self.attn_weights = torch.stack(weights, 1)
        return self.w_o(torch.cat(outs, -1))


class MHABatchedHeads(_Four):
    """(B * h, L, d_k) with baddbmm and an additive float mask; need_weights as an extra keyword."""

    def forward(self, query, key, value, mask=None, need_weights=True):
        B, Lq, d = query.shape
        Lk = key.shape[1]

        def fold(t, L):
            return t.reshape(B, L, self.h, self.dk).permute(0, 2, 1, 3).reshape(B * self.h, L, self.dk)
        q, k, v = fold(self.w_q(query), Lq), fold(self.w_k(key), Lk), fold(self.w_v(value), Lk)
        bias = torch.zeros(B, self.h, Lq, Lk, dtype=q.dtype)
        if mask is not None:
            bias = bias.masked_fill(~mask, -1e9)
        w = F.softmax(torch.baddbmm(bias.reshape(-1, Lq, Lk), q, k.transpose(1, 2), alpha=self.dk ** -0.5), -1)
        if need_weights:
            self.attn_weights = w.view(B, self.h, Lq, Lk)
        out = torch.bmm(self.drop(w), v).view(B, self.h, Lq, self.dk)
        return self.w_o(out.permute(0, 2, 1, 3).reshape(B, Lq, d))


class MHATorchKernel(_Four):
    """PyTorch's fused F.scaled_dot_product_attention (stage 03's work, allowed here); weights computed aside."""

    def forward(self, query, key, value, mask=None):
        B, Lq, d = query.shape

        def heads(t):
            return t.view(B, -1, self.h, self.dk).transpose(1, 2)
        q, k, v = heads(self.w_q(query)), heads(self.w_k(key)), heads(self.w_v(value))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        with torch.no_grad():
            s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)
            self.attn_weights = (s if mask is None else s.masked_fill(~mask, -1e9)).softmax(-1)
        return self.w_o(out.transpose(1, 2).reshape(B, Lq, d))


class MHADoubleInside(_Four):
    """float64 inside, a log-mask added to the scores, logsumexp normalization, F.dropout with the flag."""

    def forward(self, query, key, value, mask=None):
        B, Lq, d = query.shape
        q, k, v = (lin(t).double().view(B, -1, self.h, self.dk).transpose(1, 2)
                   for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        s = q.matmul(k.transpose(-2, -1)).div(self.dk ** 0.5)
        if mask is not None:
            s = s + torch.log(mask.double().clamp_min(1e-30))
        w = torch.exp(s - s.logsumexp(-1, keepdim=True))
        self.attn_weights = w.float()
        w = F.dropout(w, self.p, training=self.training)
        return self.w_o((w @ v).transpose(1, 2).reshape(B, Lq, d).float())


@pytest.mark.parametrize("fn", [split_heads_split_stack, split_heads_einsum])
def test_more_correct_split_heads(fn):
    assert_full_marks(fn, "split_heads")


@pytest.mark.parametrize("fn", [merge_heads_einsum, merge_heads_filled])
def test_more_correct_merge_heads(fn):
    assert_full_marks(fn, "merge_heads")


@pytest.mark.parametrize("cls", [MHAHeadSlicesOfWeights, MHABatchedHeads, MHATorchKernel, MHADoubleInside])
def test_more_correct_multi_head_attention(cls):
    assert_full_marks(cls, "MultiHeadAttention")


def merge_transposed_in_place(x):
    B, h, L, d_k = x.shape
    return x.transpose_(1, 2).reshape(B, L, h * d_k)  # the caller's tensor now has shape (B, L, h, d_k)


def test_merge_heads_that_changes_its_input_is_caught():
    assert_caught(merge_transposed_in_place, "merge_heads", "changed in place", "transpose_")


class _Written(_Four):
    """Multi-head attention written out, one overridable step per classic mistake."""

    def heads(self, t):
        return t.view(t.size(0), -1, self.h, self.dk).transpose(1, 2)

    def scores(self, q, k):
        return q @ k.transpose(-1, -2) / math.sqrt(self.dk)

    def masked(self, s, mask):
        return s if mask is None else s.masked_fill(~mask, -1e9)

    def weights(self, s, mask):
        return s.softmax(-1)

    def merge(self, o):
        return o.transpose(1, 2).reshape(o.size(0), o.size(2), -1)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.heads(self.w_q(query)), self.heads(self.w_k(key)), self.heads(self.w_v(value))
        self.attn_weights = self.weights(self.masked(self.scores(q, k), mask), mask)
        return self.w_o(self.merge(self.drop(self.attn_weights) @ v))


class NotScaled(_Written):
    def scores(self, q, k):
        return q @ k.transpose(-1, -2)


class SoftmaxOverQueries(_Written):
    def weights(self, s, mask):
        return s.softmax(-2)


class MaskFilledWithZero(_Written):
    def masked(self, s, mask):
        return s if mask is None else s.masked_fill(~mask, 0.0)


class MaskAfterSoftmax(_Written):
    def masked(self, s, mask):
        return s

    def weights(self, s, mask):
        w = s.softmax(-1)
        return w if mask is None else w.masked_fill(~mask, 0.0)


class HeadsInterleaved(_Written):
    def heads(self, t):
        return t.view(t.size(0), -1, self.dk, self.h).permute(0, 3, 1, 2)

    def merge(self, o):
        return o.permute(0, 2, 3, 1).reshape(o.size(0), o.size(2), -1)


class KeysShapedLikeQuery(_Written):
    """Reshapes k and v with the query's length: fine in self-attention, a size error in cross-attention."""

    def forward(self, query, key, value, mask=None):
        B, L, _ = query.shape
        q, k, v = (lin(t).reshape(B, L, self.h, self.dk).transpose(1, 2)
                   for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        self.attn_weights = self.masked(self.scores(q, k), mask).softmax(-1)
        return self.w_o(self.merge(self.drop(self.attn_weights) @ v))


class MaskFlippedInPlace(_Written):
    """~mask computed in place: the caller's mask is inverted after the call."""

    def masked(self, s, mask):
        return s if mask is None else s.masked_fill(mask.logical_not_(), -1e9)


REVIEW_MHA_MISTAKES = [
    ("scores not scaled", NotScaled, ["not scaled", "sqrt(d_k)"]),
    ("softmax over the queries", SoftmaxOverQueries, ["softmax over the queries"]),
    ("masked scores filled with 0", MaskFilledWithZero, ["filled with 0"]),
    ("mask applied after the softmax", MaskAfterSoftmax, ["after the softmax"]),
    ("heads interleaved in split and merge", HeadsInterleaved, ["in turn"]),
    ("keys reshaped with the query's length", KeysShapedLikeQuery, ["lengths do not fit together"]),
    ("mask inverted in place", MaskFlippedInPlace, ["`mask`", "changed in place"]),
]


@pytest.mark.parametrize("label,cls,keywords", REVIEW_MHA_MISTAKES, ids=[m[0] for m in REVIEW_MHA_MISTAKES])
def test_more_multi_head_attention_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "MultiHeadAttention", *keywords)


# ---------------------------------------------------------------- stubs, as the lesson hands them out
def test_stubs_get_zero_and_say_not_implemented():
    def split_heads(x, n_heads):
        B, L, d_model = x.shape
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        raise NotImplementedError()

    def merge_heads(x):
        raise NotImplementedError()

    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, n_heads, dropout=0.1):
            super().__init__()
            if d_model % n_heads:
                raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
            raise NotImplementedError()

        def forward(self, query, key, value, mask=None):
            raise NotImplementedError()

    for stub in (split_heads, merge_heads, MultiHeadAttention):
        points, text = grade(stub)
        assert points == 0 and text.count("not implemented yet") == len(text.splitlines()) - 1, text


def test_checks_are_fast_on_the_reference():
    import time

    from autograder import REGISTRY
    for name in NAMES:
        for c in REGISTRY[name]:
            times = []
            for _ in range(2):  # the first run pays PyTorch's one-time warm-up
                start = time.perf_counter()
                c.fn(getattr(solutions, name))
                times.append(time.perf_counter() - start)
            assert min(times) < 1.0, f"{name}: {c.title} takes {min(times):.2f} s"


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


# ---------------------------------------------------------------- second review: more styles, more mistakes
def _divisible(d, h):
    if d % h:
        raise ValueError(f"d_model={d} is not divisible by n_heads={h}")


def split_heads_movedim(x, n_heads):
    B, L, d = x.shape
    _divisible(d, n_heads)
    return torch.movedim(x.view(B, L, n_heads, -1), 2, 1)


def split_heads_narrow(x, n_heads):
    d = x.size(-1)
    _divisible(d, n_heads)
    dk = d // n_heads
    return torch.stack([x.narrow(-1, i * dk, dk) for i in range(n_heads)], 1)


def split_heads_any_leading_dims(x, n_heads, *, contiguous=False):
    _divisible(x.shape[-1], n_heads)
    y = x.view(*x.shape[:-1], n_heads, -1).transpose(-3, -2)
    return y.contiguous() if contiguous else y


def split_heads_numpy(x, n_heads):
    import numpy as np
    B, L, d = x.shape
    _divisible(d, n_heads)
    return torch.from_numpy(np.ascontiguousarray(x.numpy().reshape(B, L, n_heads, d // n_heads).transpose(0, 2, 1, 3)))


def split_heads_tensor_split(x, n_heads):
    if x.shape[2] % n_heads != 0:
        raise ValueError(f"cannot split {x.shape[2]} features evenly into {n_heads} heads")
    return torch.stack(torch.tensor_split(x, n_heads, dim=2), dim=1)


def split_heads_two_transposes(x, n_heads):
    B, L, d = x.shape
    _divisible(d, n_heads)
    return x.transpose(1, 2).reshape(B, n_heads, d // n_heads, L).transpose(2, 3)


@pytest.mark.parametrize("fn", [split_heads_movedim, split_heads_narrow, split_heads_any_leading_dims, split_heads_numpy,
                                split_heads_tensor_split, split_heads_two_transposes])
def test_second_review_correct_split_heads(fn):
    assert_full_marks(fn, "split_heads")


def merge_heads_contiguous_view(x):
    B, h, L, dk = x.size()
    return x.permute(0, 2, 1, 3).contiguous().view(B, L, h * dk)


def merge_heads_dstack(x):
    return torch.dstack(list(x.unbind(dim=1)))


def merge_heads_numpy(x):
    B, h, L, dk = x.shape
    return torch.from_numpy(x.numpy().transpose(0, 2, 1, 3).reshape(B, L, h * dk).copy())


def merge_heads_movedim(x):
    return x.movedim(1, 2).reshape(x.size(0), x.size(2), -1)


def merge_heads_in_place_on_a_copy(x):
    y = x.clone()
    y.transpose_(1, 2)
    return y.reshape(y.shape[0], y.shape[1], -1)


def merge_heads_two_transposes(x):
    B, h, L, dk = x.shape
    return x.transpose(2, 3).reshape(B, h * dk, L).transpose(1, 2)


@pytest.mark.parametrize("fn", [merge_heads_contiguous_view, merge_heads_dstack, merge_heads_numpy, merge_heads_movedim,
                                merge_heads_in_place_on_a_copy, merge_heads_two_transposes])
def test_second_review_correct_merge_heads(fn):
    assert_full_marks(fn, "merge_heads")


class _Projections(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        _divisible(d_model, n_heads)
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)


class MHAPackedSelfAttention(_Projections):
    """Self-attention through one packed in-projection (the three weights concatenated), cross-attention apart."""

    def forward(self, query, key, value, mask=None):
        if query is key and key is value:
            W = torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight])
            b = torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])
            q, k, v = F.linear(query, W, b).chunk(3, dim=-1)
        else:
            q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))
        out, self.attn_weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
        return self.w_o(merge_heads(out))


class MHAAnnotatedStyle(_Projections):
    """The Annotated Transformer's layout, with mask.unsqueeze(1) only for a 3-d mask."""

    def forward(self, query, key, value, mask=None):
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        nb = query.size(0)
        query, key, value = [lin(x).view(nb, -1, self.n_heads, self.d_k).transpose(1, 2)
                             for lin, x in zip((self.w_q, self.w_k, self.w_v), (query, key, value))]
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        self.attn = self.attn_weights = scores.softmax(dim=-1)
        x = torch.matmul(self.dropout(self.attn), value)
        return self.w_o(x.transpose(1, 2).contiguous().view(nb, -1, self.n_heads * self.d_k))


class MHAModuleDictProperties(nn.Module):
    """Projections in a ModuleDict behind properties, einsum over (h, d_k), an additive -inf mask, a keyword-only
    extra, weights kept detached."""

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
        q, k, v = (lin(t).unflatten(-1, (self.h, dk)) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) * dk ** -0.5
        if mask is not None:
            s = s + torch.where(mask, 0.0, float("-inf"))
        w = torch.softmax(s, -1).nan_to_num(0.0)
        self.attn_weights = w.detach()
        return self.w_o(torch.einsum("bhqk,bkhd->bqhd", self.drop(w), v).flatten(-2))


class MHAKeyValueDefaults(_Projections):
    """key and value default to query; a keyword-only flag; a (B, Lk) mask accepted too."""

    def forward(self, query, key=None, value=None, mask=None, *, need_weights=True):
        key = query if key is None else key
        value = key if value is None else value
        if mask is not None and mask.dim() == 2:
            mask = mask[:, None, None, :]
        q, k, v = (split_heads(lin(t), self.n_heads) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        out, w = scaled_dot_product_attention(q, k, v, mask, self.dropout)
        if need_weights:
            self.attn_weights = w
        return self.w_o(merge_heads(out))


class MHAHandWrittenDropout(_Projections):
    """Inverted dropout written by hand, w * keep / (1 - p): 0/0 at p = 1, judged at p = 0.5."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (split_heads(lin(t), self.n_heads) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        _, w = scaled_dot_product_attention(q, k, v, mask)
        self.attn_weights = w
        if self.training:
            p = self.dropout.p
            w = w * (torch.rand_like(w) >= p).float() / (1 - p)
        return self.w_o(merge_heads(w @ v))


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
        qs, ks, vs = (lin(t).chunk(self.heads, -1) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        bias = 0.0 if mask is None else (~mask).float() * -1e9
        outs, ws = [], []
        for i, (q, k, v) in enumerate(zip(qs, ks, vs)):
            b = bias if isinstance(bias, float) else bias[:, min(i, bias.size(1) - 1)]
            w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.size(-1)) + b, -1)
            ws.append(w)
            outs.append(F.dropout(w, self.p, self.training) @ v)
        self.attn_weights = torch.stack(ws, 1)
        return self.w_o(torch.cat(outs, -1))


@pytest.mark.parametrize("cls", [MHAPackedSelfAttention, MHAAnnotatedStyle, MHAModuleDictProperties, MHAKeyValueDefaults,
                                 MHAHandWrittenDropout, MHAAdditiveMaskPerHead])
def test_second_review_correct_multi_head_attention(cls):
    assert_full_marks(cls, "MultiHeadAttention")


def split_last_two_swapped(x, n_heads):
    B, L, d = x.shape
    _divisible(d, n_heads)
    return x.view(B, L, n_heads, d // n_heads).permute(0, 2, 3, 1)


def split_transpose_1_3(x, n_heads):
    B, L, d = x.shape
    _divisible(d, n_heads)
    return x.view(B, L, n_heads, d // n_heads).transpose(1, 3)


def split_heads_into_the_batch(x, n_heads):
    B, L, d = x.shape
    _divisible(d, n_heads)
    return x.reshape(B, L, n_heads, d // n_heads).transpose(1, 2).reshape(B * n_heads, L, d // n_heads)


def split_unsqueezes_x_in_place(x, n_heads):
    B, L, d = x.shape
    _divisible(d, n_heads)
    x.unsqueeze_(1)
    return x.view(B, L, n_heads, d // n_heads).transpose(1, 2)


def merge_not_flattened(x):
    return x.transpose(1, 2)


def merge_heads_along_positions(x):
    B, h, L, dk = x.shape
    return x.reshape(B, h * L, dk)


def merge_averages_heads(x):
    return x.mean(1)


def merge_fixed_three_heads(x):
    B, h, L, dk = x.shape
    return x.transpose(1, 2).reshape(B, L, 3 * dk)


SECOND_REVIEW_SPLIT_MERGE_MISTAKES = [
    ("split_heads", split_last_two_swapped, ["(B, h, d_k, L)", "permute(0, 2, 3, 1)"]),
    ("split_heads", split_transpose_1_3, ["not transpose(1, 3)"]),
    ("split_heads", split_heads_into_the_batch, ["folded into the batch"]),
    ("split_heads", split_unsqueezes_x_in_place, ["changed in place", "unsqueeze_"]),
    ("merge_heads", merge_not_flattened, ["moved but not merged"]),
    ("merge_heads", merge_heads_along_positions, ["stacked along the positions"]),
    ("merge_heads", merge_averages_heads, ["averaged or summed"]),
    ("merge_heads", merge_fixed_three_heads, ["take every size from x itself"]),
]


@pytest.mark.parametrize("name,fn,keywords", SECOND_REVIEW_SPLIT_MERGE_MISTAKES,
                         ids=[m[1].__name__ for m in SECOND_REVIEW_SPLIT_MERGE_MISTAKES])
def test_second_review_split_and_merge_mistakes_are_caught(name, fn, keywords):
    assert_caught(fn, name, *keywords)


class DropoutOnValues(Base):
    """Dropout on v instead of the weights: the same at p = 1 (only w_o.bias left), not at p = 0.5."""

    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, self.dropout(v), mask)


class DropoutOnScoresBeforeSoftmax(Base):
    def attend(self, q, k, v, mask):
        s = self.dropout(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))
        if mask is not None:
            s = s.masked_fill(~mask, -1e9)
        w = torch.softmax(s, -1)
        return w @ v, w


class DropoutRateFixed(Base):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__(d_model, n_heads, 0.1)


class ScaledBySqrtHeads(Base):
    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q * math.sqrt(q.size(-1) / self.h), k, v, mask, self.dropout)


class SoftmaxOverHeads(Base):
    def attend(self, q, k, v, mask):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, -1e9)
        w = torch.softmax(s, 1)
        return self.dropout(w) @ v, w


class OutputWithoutBias(Base):
    def output(self, t):
        return F.linear(t, self.w_o.weight)


class ResidualInsideAttention(Base):
    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, value, mask) + query


class MaskAlwaysUnsqueezed(Base):
    """The Annotated Transformer's mask.unsqueeze(1), on the course's 4-d masks."""

    def attend(self, q, k, v, mask):
        return super().attend(q, k, v, None if mask is None else mask.unsqueeze(1))


class HeadsFixedAtFour(Base):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__(d_model, 4 if d_model % 4 == 0 else n_heads, dropout)


SECOND_REVIEW_MHA_MISTAKES = [
    ("dropout on v", DropoutOnValues, ["dropout(weights) @ v", "not on v"]),
    ("dropout on the scores", DropoutOnScoresBeforeSoftmax, ["dropout applied to the scores before the softmax"]),
    ("dropout rate fixed", DropoutRateFixed, ["dropout argument is not used"]),
    ("scores divided by sqrt(h)", ScaledBySqrtHeads, ["sqrt(n_heads) instead of sqrt(d_k)"]),
    ("softmax over the heads", SoftmaxOverHeads, ["softmax over dim=1 (the heads)"]),
    ("w_o without its bias", OutputWithoutBias, ["w_o's bias is missing"]),
    ("the residual added inside", ResidualInsideAttention, ["the input (query) is added to the output"]),
    ("mask.unsqueeze(1)", MaskAlwaysUnsqueezed, ["works without the mask and fails with it", "no mask.unsqueeze(1)"]),
    ("n_heads fixed at 4", HeadsFixedAtFour, ["output of 4 heads, not 3"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_REVIEW_MHA_MISTAKES, ids=[m[0] for m in SECOND_REVIEW_MHA_MISTAKES])
def test_second_review_multi_head_attention_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "MultiHeadAttention", *keywords)


# ---------------------------------------------------------------- third review
class ProjectionsWithoutGradient(Base):
    def project(self, query, key, value):
        with torch.no_grad():  # right numbers, but training never reaches the input (nor w_q, w_k, w_v)
            return self.w_q(query), self.w_k(key), self.w_v(value)


class ScaledTwice(Base):
    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q / math.sqrt(q.size(-1)), k, v, mask, self.dropout)


class KeyProjectionOnValues(Base):
    """A copy-paste slip found by a learner simulation: the message said only 'pass the mask on'."""

    def project(self, query, key, value):
        return self.w_q(query), self.w_k(key), self.w_k(value)


@pytest.mark.parametrize("cls,title,keywords", [
    (ProjectionsWithoutGradient, "self-attention", ["with respect to x", "left autograd"]),
    (ScaledTwice, "self-attention", ["divided by sqrt(d_k) twice"]),
    (KeyProjectionOnValues, "a causal mask", ["w_k applied to the values"]),
], ids=["no gradient", "scaled twice", "w_k on the values"])
def test_third_review_multi_head_attention_mistakes_are_named(cls, title, keywords):
    points, line = grade_one(cls, "MultiHeadAttention", title)
    assert points == 0 and all(k in line for k in keywords), line


# ---------------------------------------------------------------- fourth review
class DropoutBuiltInForward(Base):
    """nn.Dropout used, but a new one built at every call: always in training mode, .eval() never reaches it."""

    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, mask, nn.Dropout(self.dropout.p))


@pytest.mark.parametrize("cls,keywords", [
    (DropoutBuiltInForward, ["built inside forward", "in __init__"]),
    (DropoutAlwaysOn, ["dropout still acts in eval mode", "not F.dropout"]),
], ids=["nn.Dropout built in forward", "F.dropout always on"])
def test_fourth_review_dropout_in_eval_mode_is_named(cls, keywords):
    points, line = grade_one(cls, "MultiHeadAttention", "dropout acts")
    assert points == 0 and all(k in line for k in keywords), line
    assert cls is DropoutAlwaysOn or "not F.dropout" not in line, line


# ---------------------------------------------------------------- issue 17: a transposed mask is named, not guessed at
class MHATransposesTheMask(solutions.MultiHeadAttention):
    """Reads the mask as (B, 1, Lk, Lq): with a (B, 1, 1, Lk) padding mask it fails in cross-attention (it was told
    'is the query used as key and value too?', which it is not), and a causal mask becomes its mirror image."""

    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, value, None if mask is None else mask.transpose(-2, -1))


def test_a_transposed_mask_is_named_in_both_checks():
    points, text = grade(MHATransposesTheMask, "MultiHeadAttention")
    assert points == max_points("MultiHeadAttention") - 3, text  # cross-attention, causal, attn_weights
    assert "Is the query used as key" not in text, text
    assert ("with the mask of shape (2, 1, 1, 6); expected it to work; got RuntimeError: The size of tensor a (6) must "
            "match the size of tensor b (3) at non-singleton dimension 2. Likely: it works without the mask and fails "
            "with it: the mask (B, 1, 1, Lk) or (B, 1, Lq, Lk) broadcasts over the heads and the queries as it is; pass "
            "it on unchanged (no transpose, unsqueeze, view or reshape)") in text, text
    assert ("causal mask of shape (1, 1, 5, 5)): values differ (largest difference 0.7 at index (0, 0, 2)); expected "
            "0.008017 there; got -0.692. Likely: the mask's query and key axes swapped (a transpose of the mask): a "
            "(.., Lq, Lk) mask is used as it is") in text, text


def test_the_query_used_as_key_is_named_only_when_it_is_the_cause():
    """The same error (a padding mask of Lk keys against Lq x Lq scores) as a transposed mask: the call without the
    mask tells them apart."""
    points, line = grade_one(MHAQueryAsKeyAndValue, "MultiHeadAttention", "cross-attention")
    assert points == 0 and line.endswith("Likely: the query used as key and value too: without the mask this is the "
                                         "query's self-attention; k and v come from the `key` and `value` arguments, "
                                         "whose length the mask has"), line


class MHAQueryAsKeyAndValue(solutions.MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        return super().forward(query, query, query, mask)
