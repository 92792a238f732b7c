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


@pytest.mark.parametrize("fn", [softmax_logsumexp, softmax_loop])
def test_other_correct_softmax(fn):
    assert_full_marks(fn, "softmax")


@pytest.mark.parametrize("fn", [attention_einsum, attention_where])
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


@pytest.mark.parametrize("label,fn,keywords", ATTENTION_MISTAKES, ids=[m[0] for m in ATTENTION_MISTAKES])
def test_attention_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "scaled_dot_product_attention", *keywords)


def test_softmax_mistakes_are_caught():
    assert_caught(naive_softmax, "softmax", "subtract the row's maximum")
    assert_caught(softmax_ignores_dim, "softmax", "dim argument is ignored")


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
