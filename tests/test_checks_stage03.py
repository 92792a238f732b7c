"""Stage 03's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake."""
import math

import pytest
import torch

import solutions
from tests.grading import assert_caught, assert_full_marks, grade


def test_reference_gets_full_marks():
    assert_full_marks(solutions.softmax)
    assert_full_marks(solutions.scaled_dot_product_attention)


# ---------------------------------------------------------------- correct, written differently
def softmax_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def softmax_loop(x, dim=-1):
    x = x.movedim(dim, -1).contiguous()
    out = torch.empty_like(x)
    flat, res = x.reshape(-1, x.size(-1)), out.view(-1, x.size(-1))
    for i, row in enumerate(flat):
        m = max(row.tolist())
        e = [math.exp(v - m) for v in row.tolist()]
        res[i] = torch.tensor([v / sum(e) for v in e])
    return out.movedim(-1, dim)


def attention_einsum(q, k, v, mask=None, dropout=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -1e9)
    w = scores.softmax(-1)
    if dropout is not None:
        w = dropout(w)
    return torch.einsum("...qk,...kv->...qv", w, v), w


def attention_where(q, k, v, mask=None, dropout=None):
    scores = torch.matmul(q / math.sqrt(k.size(-1)), k.transpose(-1, -2))
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-1e30))
    w = torch.softmax(scores, dim=-1)
    w_drop = dropout(w) if dropout is not None else w
    return torch.matmul(w_drop, v), w_drop


def softmax_numpy(x, dim=-1):
    """In numpy float64, back to x's dtype."""
    import numpy as np
    a = x.detach().cpu().numpy().astype(np.float64)
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=dim, keepdims=True)).to(x.dtype)


def softmax_reciprocal(x, dim=-1, eps=0.0):
    """An extra keyword with a default; multiplies by the reciprocal of the sum."""
    e = torch.exp(torch.sub(x, torch.amax(x, dim, keepdim=True)))
    return e * torch.reciprocal(torch.sum(e, dim, keepdim=True) + eps)


def softmax_float64_result(x, dim=-1):
    """Computed and returned in float64 for a float32 input: the values are what count."""
    x64 = x.double()
    e = (x64 - x64.max(dim=dim, keepdim=True)[0]).exp()
    return e.div(e.sum(dim=dim, keepdim=True))


def softmax_in_place_on_a_copy(x, dim=-1):
    y = x.clone()
    y -= y.max(dim=dim, keepdim=True).values
    y.exp_()
    y /= y.sum(dim=dim, keepdim=True)
    return y


@pytest.mark.parametrize("fn", [softmax_logsumexp, softmax_loop, softmax_numpy, softmax_reciprocal,
                                softmax_float64_result, softmax_in_place_on_a_copy])
def test_other_correct_softmax(fn):
    assert_full_marks(fn, "softmax")


def attention_bmm(q, k, v, mask=None, dropout=None):
    """Leading dims flattened for bmm; the Annotated Transformer's masked_fill(mask == 0, -1e9)."""
    *lead, Lq, d = q.shape
    Lk = k.size(-2)
    s = torch.bmm(q.reshape(-1, Lq, d), k.reshape(-1, Lk, d).transpose(1, 2)).reshape(*lead, Lq, Lk) / math.sqrt(d)
    if mask is not None:
        s = s.masked_fill(mask == 0, -1e9)
    w = torch.nn.functional.softmax(s, dim=-1)
    if dropout is not None:
        w = dropout(w)
    out = torch.bmm(w.reshape(-1, Lq, Lk), v.reshape(-1, Lk, v.size(-1)))
    return out.reshape(*lead, Lq, v.size(-1)), w


def attention_additive_nan_to_num(q, k, v, mask=None, dropout=None):
    """An additive -inf mask; a fully masked row's NaN turned into zeros (finite: allowed)."""
    s = q.matmul(k.mT) * (1.0 / q.size(-1) ** 0.5)
    if mask is not None:
        s = s + torch.zeros_like(s).masked_fill(~mask, float("-inf"))
    w = s.softmax(-1).nan_to_num(0.0)
    if dropout:
        w = dropout(w)
    return w @ v, w


def attention_loops(q, k, v, mask=None, dropout=None):
    """One (Lq, Lk) matrix at a time over the leading dims, a fill of -1e4."""
    import numpy as np
    lead = q.shape[:-2]
    weights = torch.empty(*lead, q.size(-2), k.size(-2), dtype=q.dtype)
    m = None if mask is None else mask.expand(*lead, q.size(-2), k.size(-2))
    for idx in np.ndindex(*lead):
        s = q[idx] @ k[idx].T / math.sqrt(q.size(-1))
        if m is not None:
            s = s.masked_fill(~m[idx], -1e4)
        weights[idx] = torch.softmax(s, -1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights


def attention_float64_inside(q, k, v, mask=None, dropout=None, scale=None):
    """float64 inside, q's dtype out; an extra keyword; in-place fill on its own scores."""
    scale = scale or q.shape[-1] ** -0.5
    s = (q.double() * scale) @ k.double().transpose(-1, -2)
    if mask is not None:
        s.masked_fill_(mask.logical_not(), torch.finfo(torch.float64).min)
    w = torch.softmax(s, -1)
    if dropout is not None:
        w = dropout(w)
    return (w @ v.double()).to(q.dtype), w.to(q.dtype)


@pytest.mark.parametrize("fn", [attention_einsum, attention_where, attention_bmm, attention_additive_nan_to_num,
                                attention_loops, attention_float64_inside])
def test_other_correct_attention(fn):
    assert_full_marks(fn, "scaled_dot_product_attention")


# ---------------------------------------------------------------- classic mistakes
def naive_softmax(x, dim=-1):
    return x.exp() / x.exp().sum(dim, keepdim=True)


def softmax_ignores_dim(x, dim=-1):
    return solutions.softmax(x, -1)


def make_attention(scale="sqrt", softmax_dim=-1, mask_mode="before", fill=None, invert=False):
    def attention(q, k, v, mask=None, dropout=None):
        scores = q @ k.transpose(-2, -1)
        d_k = q.size(-1)
        scores = {"sqrt": scores / math.sqrt(d_k), "none": scores, "d_k": scores / d_k}[scale]
        m = None if mask is None else (~mask if invert else mask)
        if m is not None and mask_mode == "before":
            scores = scores.masked_fill(~m, float("-inf") if fill is None else fill)
        w = torch.softmax(scores, softmax_dim)
        if m is not None and mask_mode == "after":
            w = w * m
        if dropout is not None:
            w = dropout(w)
        return w @ v, w
    return attention


ATTENTION_MISTAKES = [
    ("softmax over the query axis", make_attention(softmax_dim=-2), ["dim=-2"]),
    ("mask applied after the softmax", make_attention(mask_mode="after"), ["after the softmax"]),
    ("no sqrt(d_k) scaling", make_attention(scale="none"), ["not divided by sqrt(d_k)"]),
    ("scaled by d_k", make_attention(scale="d_k"), ["divided by d_k instead"]),
    ("mask polarity inverted", make_attention(invert=True, fill=-1e9), ["polarity"]),
    ("NaN on a fully masked row", make_attention(), ["NaN"]),
    ("masked with 0", make_attention(fill=0.0), ["filled with 0"]),
]


def attention_fixed_scale(q, k, v, mask=None, dropout=None):
    """sqrt(8): right for the first inputs the check tried (d_k = 8), wrong for any other d_k."""
    s = q @ k.transpose(-2, -1) / math.sqrt(8)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    w = torch.softmax(s, -1)
    if dropout is not None:
        w = dropout(w)
    return w @ v, w


def attention_scales_q_in_place(q, k, v, mask=None, dropout=None):
    q /= math.sqrt(q.size(-1))  # right values, but the caller's q is changed
    return make_attention(scale="none", fill=-1e9)(q, k, v, mask, dropout)


def attention_flips_mask_in_place(q, k, v, mask=None, dropout=None):
    if mask is not None:
        mask = mask.logical_not_()
        return make_attention(fill=-1e9, invert=True)(q, k, v, ~mask, dropout)
    return make_attention()(q, k, v, None, dropout)


def attention_k_T(q, k, v, mask=None, dropout=None):
    w = torch.softmax(q @ k.T / math.sqrt(q.size(-1)), -1)
    return w @ v, w


def attention_weights_transposed(q, k, v, mask=None, dropout=None):
    out, w = make_attention(fill=-1e9)(q, k, v, mask, dropout)
    return out, w.transpose(-2, -1)


ATTENTION_MISTAKES += [
    ("sqrt(d_k) hard-coded to sqrt(8)", attention_fixed_scale, ["not a fixed number"]),
    ("q scaled in place", attention_scales_q_in_place, ["q was modified in place"]),
    ("mask flipped in place", attention_flips_mask_in_place, ["mask was modified in place"]),
    ("mask polarity inverted, filled with -inf", make_attention(invert=True), ["polarity", "NaN"]),
    ("k.T on 4-d inputs", attention_k_T, ["wrong shape", "k.transpose(-2, -1)"]),
    ("weights returned transposed", attention_weights_transposed, ["wrong shape"]),
]


@pytest.mark.parametrize("label,fn,keywords", ATTENTION_MISTAKES, ids=[m[0] for m in ATTENTION_MISTAKES])
def test_attention_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "scaled_dot_product_attention", *keywords)


def softmax_shifts_x_in_place(x, dim=-1):
    x.sub_(x.amax(dim, keepdim=True))  # right values, but the caller's x is changed
    e = x.exp()
    return e / e.sum(dim, keepdim=True)


def softmax_without_keepdim(x, dim=-1):
    e = (x - x.max(dim).values).exp()
    return e / e.sum(dim)


def softmax_sum_over_dim0(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(0, keepdim=True)


def test_softmax_mistakes_are_caught():
    assert_caught(naive_softmax, "softmax", "subtract the row's maximum")
    assert_caught(softmax_ignores_dim, "softmax", "dim argument is ignored")
    assert_caught(softmax_shifts_x_in_place, "softmax", "x was modified in place")
    assert_caught(softmax_without_keepdim, "softmax", "keepdim=True")
    _, text = assert_caught(softmax_sum_over_dim0, "softmax")
    assert "exp overflowed" not in text, text  # finite but wrong values: not blamed on an overflow


def test_stub_gets_zero_and_says_not_implemented():
    def softmax(x, dim=-1):
        raise NotImplementedError()
    points, text = grade(softmax)
    assert points == 0 and text.count("not implemented yet") == 3


def test_check_never_raises_and_never_writes_to_stderr(capfd):
    import warnings

    def scaled_dot_product_attention(q, k, v, mask=None, dropout=None):
        warnings.warn("a learner's warning")
        import sys
        print("to stderr", file=sys.stderr)
        raise ZeroDivisionError("boom")
    points, text = grade(scaled_dot_product_attention)
    err = capfd.readouterr().err
    assert points == 0 and "ZeroDivisionError: boom" in text and err == "", err


def test_a_hang_is_cut_by_the_time_limit(monkeypatch):
    from autograder import REGISTRY
    monkeypatch.setattr(REGISTRY["softmax"][0], "timeout", 0.5)

    def softmax(x, dim=-1):
        while True:
            pass
    points, text = grade(softmax)
    assert points == 0 and "longer than 0.5 s" in text and text.count("skipped") == 2


# ---------------------------------------------------------------- library shortcuts
def softmax_torch(x, dim=-1):
    return torch.softmax(x, dim)


def softmax_method(x, dim=-1):
    return x.softmax(dim)


def softmax_functional(x, dim=-1):
    return torch.nn.functional.softmax(x, dim=dim)


def softmax_module(x, dim=-1):
    return torch.nn.Softmax(dim)(x)


def softmax_log(x, dim=-1):
    return torch.log_softmax(x, dim).exp()


def softmax_aten(x, dim=-1):
    return torch.ops.aten._softmax(x, dim, False)


@pytest.mark.parametrize("fn", [softmax_torch, softmax_method, softmax_functional, softmax_module, softmax_log,
                                softmax_aten, torch.softmax])
def test_a_library_softmax_earns_nothing(fn):
    """Lesson 03 teaches the softmax: PyTorch's doing the work (whatever the alias, or the function
    itself) earns no point, and every check says why."""
    points, text = grade(fn, None if fn is torch.softmax else "softmax")
    assert points == 0 and text.count("a library softmax") == 3, text


def attention_sdpa(q, k, v, mask=None, dropout=None):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, w


def test_pytorch_attention_earns_nothing():
    points, text = grade(attention_sdpa, "scaled_dot_product_attention")
    assert points == 0 and text.count("F.scaled_dot_product_attention (or nn.MultiheadAttention)") == 7, text


def test_the_checks_own_references_are_not_shortcuts():
    """The checks compare with torch.softmax and F.scaled_dot_product_attention themselves, and the
    attention may use any softmax (lesson 03 grades the softmax on its own): full marks."""
    assert_full_marks(attention_where, "scaled_dot_product_attention")  # torch.softmax inside: allowed
    assert_full_marks(solutions.softmax)
