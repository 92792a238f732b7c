"""Stage 03's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake."""
import math

import pytest
import torch

import solutions
from autograder import max_points
from tests.grading import assert_caught, assert_full_marks, grade, grade_one


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


@pytest.mark.parametrize("fn", [softmax_logsumexp, softmax_reciprocal, softmax_float64_result])
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


def attention_without_transpose(q, k, v, mask=None, dropout=None):
    w = torch.softmax(q @ k / math.sqrt(q.size(-1)), -1)
    return w @ v, w


def attention_recenters_without_keepdim(q, k, v, mask=None, dropout=None):
    """A shape error that is not about k: the message must not guess a transpose (issue 17: a Likely only from a
    cause that reproduces), and names the line and the shapes on it instead."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores - scores.amax(-1)
    w = torch.softmax(scores, -1)
    return w @ v, w


ATTENTION_MISTAKES += [
    ("k not transposed", attention_without_transpose, ["wrong shape inside your function, at `w = torch.softmax(q @ k",
                                                       "Likely: q @ k multiplies (..., Lq, d_k) by (..., Lk, d_k)"]),
    ("recentered without keepdim", attention_recenters_without_keepdim,
     ["your code raised RuntimeError", "`scores = scores - scores.amax(-1)`), with scores (2, 3, 4, 5)",
      "Likely: 5 is scores's size at dim 3 and 4 is scores's size at dim 2"]),
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


def test_a_shape_error_not_about_k_guesses_no_transpose():
    points, text = grade(attention_recenters_without_keepdim, "scaled_dot_product_attention")
    assert "transpose only the last two dims" not in text and "k needs its last two dims" not in text, text


def softmax_squeezes_the_sum(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True).squeeze(dim)


def test_a_softmax_error_not_on_a_reduction_is_not_called_keepdim():
    """The sum keeps its dimension and the squeeze takes it away: KEEPDIM's advice (use keepdim=True) is already
    followed on that line, so the message gives the line and its shapes and does not repeat it."""
    points, text = grade(softmax_squeezes_the_sum, "softmax")
    assert points < max_points("softmax"), text
    assert "e / e.sum(dim, keepdim=True).squeeze(dim)`), with e (3, 4, 5)" in text, text
    assert "use keepdim=True" not in text, text


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


# ---------------------------------------------------------------- second review: more styles, more mistakes
def softmax_unbind(x, dim=-1):
    """A Python sum over the slices along dim."""
    rows = x.unbind(dim)
    m = torch.stack(rows, 0).max(0).values
    es = [torch.exp(r - m) for r in rows]
    total = sum(es)
    return torch.stack([e / total for e in es], dim)


def softmax_l1_normalize(x, dim=-1):
    e = (x - x.max(dim=dim, keepdim=True)[0]).exp()
    return torch.nn.functional.normalize(e, p=1, dim=dim)


def softmax_keyword_only_extras(x, dim=-1, *, dtype=None, eps=0.0):
    d = dim % x.dim()
    e = torch.exp(x - torch.amax(x, dim=d, keepdim=True).detach())
    out = e / (e.sum(d, keepdim=True) + eps)
    return out if dtype is None else out.to(dtype)


def softmax_movedim(x, dim=-1):
    y = x.movedim(dim, 0)
    e = (y - y.max(0).values).exp()
    return (e / e.sum(0)).movedim(0, dim)


def softmax_numpy_swapaxes(x, dim=-1):
    import numpy as np
    a = np.swapaxes(x.numpy(), dim, -1).astype(np.float64)
    e = np.exp(a - a.max(-1)[..., None])
    return torch.tensor(np.swapaxes(e / e.sum(-1)[..., None], dim, -1), dtype=x.dtype)


def softmax_max_under_no_grad(x, dim=-1):
    with torch.no_grad():
        m = x.amax(dim, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim, keepdim=True)


def softmax_dim_none(x, dim=None):
    dim = -1 if dim is None else dim
    e = (x - x.amax(dim, True)).exp()
    return e / e.sum(dim, True)


@pytest.mark.parametrize("fn", [softmax_unbind, softmax_l1_normalize, softmax_keyword_only_extras, softmax_movedim,
                                softmax_max_under_no_grad, softmax_dim_none])
def test_second_review_correct_softmax(fn):
    assert_full_marks(fn, "softmax")


def attention_keyword_scale_inf_fill(q, k, v, mask=None, dropout=None, *, scale=None):
    """-inf fill, the fully masked rows set to 0 scores (uniform weights) with torch.where."""
    s = torch.matmul(q, k.mT) * (q.size(-1) ** -0.5 if scale is None else scale)
    if mask is not None:
        s = s.masked_fill(mask == False, float("-inf"))  # noqa: E712
        s = torch.where(mask.any(-1, keepdim=True), s, torch.zeros_like(s))
    w = s.softmax(-1)
    if dropout is not None:
        w = dropout(w)
    return w @ v, w


def attention_quarter_scales(q, k, v, mask=None, dropout=None):
    """q and k each scaled by d_k ** -0.25; a hand-written softmax; the weights returned before dropout."""
    d = q.shape[-1]
    s = (q / d ** 0.25) @ (k / d ** 0.25).swapaxes(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask.bool(), -1e9)
    e = torch.exp(s - s.amax(-1, keepdim=True))
    w = e / e.sum(-1, keepdim=True)
    return torch.matmul(dropout(w) if dropout is not None else w, v), w


def attention_index_put_expanded(q, k, v, mask=None, dropout=None):
    """Boolean indexing on its own scores, with the mask expanded to their shape first."""
    s = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
    if mask is not None:
        s[~mask.expand_as(s)] = torch.finfo(s.dtype).min
    w = torch.softmax(s, dim=-1)
    if dropout:
        w = dropout(w)
    return w @ v, w


def attention_numpy_weights(q, k, v, mask=None, dropout=None):
    import numpy as np
    qn, kn = q.numpy().astype(np.float64), k.numpy().astype(np.float64)
    s = qn @ np.swapaxes(kn, -1, -2) / np.sqrt(qn.shape[-1])
    if mask is not None:
        s = np.where(mask.numpy(), s, -1e30)
    e = np.exp(s - s.max(-1, keepdims=True))
    w = torch.from_numpy(e / e.sum(-1, keepdims=True)).to(q.dtype)
    if dropout is not None:
        w = dropout(w)
    return w @ v, w


def attention_exp_times_mask(q, k, v, mask=None, dropout=None):
    """exp(scores - max) multiplied by the mask and renormalized, a clamp against 0/0."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    m = torch.ones_like(s, dtype=torch.bool) if mask is None else mask
    s = s.masked_fill(~m, -1e9)
    e = torch.exp(s - s.max(-1, keepdim=True).values) * m
    w = e / e.sum(-1, keepdim=True).clamp_min(1e-30)
    if dropout is not None:
        w = dropout(w)
    return w @ v, w


def attention_baddbmm_flattened(q, k, v, mask=None, dropout=None):
    lead = q.shape[:-2]
    q2, k2, v2 = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v))
    s = torch.baddbmm(torch.zeros(q2.size(0), q2.size(1), k2.size(1)), q2, k2.transpose(1, 2), beta=0.0,
                      alpha=1 / math.sqrt(q.size(-1))).view(*lead, q.size(-2), k.size(-2))
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), -1e4)
    w = s.softmax(-1)
    wd = dropout(w) if dropout is not None else w
    return (wd.reshape(-1, *wd.shape[-2:]) @ v2).view(*lead, q.size(-2), v.size(-1)), w


@pytest.mark.parametrize("fn", [attention_keyword_scale_inf_fill, attention_quarter_scales, attention_index_put_expanded,
                                attention_exp_times_mask, attention_baddbmm_flattened])
def test_second_review_correct_attention(fn):
    assert_full_marks(fn, "scaled_dot_product_attention")


def softmax_shifted_by_the_mean(x, dim=-1):
    e = (x - x.mean(dim, keepdim=True)).exp()  # right for narrow rows, inf / inf for a row like [-500, 0, 500]
    return e / e.sum(dim, keepdim=True)


def softmax_shifted_by_the_global_max(x, dim=-1):
    e = (x - x.max()).exp()  # a row far below the tensor's maximum underflows to 0 / 0
    return e / e.sum(dim, keepdim=True)


def softmax_max_over_the_last_dim_only(x, dim=-1):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def test_second_review_softmax_mistakes_are_caught():
    assert_caught(softmax_shifted_by_the_mean, "softmax", "subtract the row's maximum")
    assert_caught(softmax_shifted_by_the_global_max, "softmax", "subtract the row's maximum")
    assert_caught(softmax_max_over_the_last_dim_only, "softmax", "use `dim` in both the max and the sum")


def _attention(q, k, v, mask=None, dropout=None, scale=None, fill=-1e9, dim=-1):
    s = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale is None else scale(q))
    if mask is not None:
        s = s.masked_fill(~mask, fill)
    w = torch.softmax(s, dim)
    return (dropout(w) if dropout is not None else w) @ v, w


def attention_scaled_by_sqrt_len_q(q, k, v, mask=None, dropout=None):
    return _attention(q, k, v, mask, dropout, scale=lambda q: math.sqrt(q.size(-2)))


def attention_weights_divided_after_softmax(q, k, v, mask=None, dropout=None):
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    w = torch.softmax(s, -1) / math.sqrt(q.size(-1))  # the parentheses closed too early
    return (dropout(w) if dropout is not None else w) @ v, w


def attention_softmax_over_heads(q, k, v, mask=None, dropout=None):
    return _attention(q, k, v, mask, dropout, dim=1)


def attention_small_fill(q, k, v, mask=None, dropout=None):
    return _attention(q, k, v, mask, dropout, fill=-1.0)


def attention_boolean_index_broadcast_mask(q, k, v, mask=None, dropout=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s[~mask] = -1e9  # needs a mask of the scores' exact shape
    w = torch.softmax(s, -1)
    return (dropout(w) if dropout is not None else w) @ v, w


def attention_returns_weights_first(q, k, v, mask=None, dropout=None):
    out, w = _attention(q, k, v, mask, dropout)
    return w, out


def attention_mask_unsqueezed(q, k, v, mask=None, dropout=None):
    return _attention(q, k, v, None if mask is None else mask.unsqueeze(1), dropout)


def attention_dropout_twice(q, k, v, mask=None, dropout=None):
    out, w = _attention(q, k, v, mask)
    if dropout is not None:
        w = dropout(dropout(w))
        out = w @ v
    return out, w


def attention_dropout_on_scores(q, k, v, mask=None, dropout=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if dropout is not None:
        s = dropout(s)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    w = torch.softmax(s, -1)
    return w @ v, w


SECOND_REVIEW_ATTENTION_MISTAKES = [
    ("scores divided by sqrt(len_q)", attention_scaled_by_sqrt_len_q, ["sqrt(len_q)"]),
    ("weights divided by sqrt(d_k) after the softmax", attention_weights_divided_after_softmax,
     ["divide the scores before the softmax", "mind the parentheses"]),
    ("softmax over dim=1 (the heads)", attention_softmax_over_heads, ["dim=1 (the heads)"]),
    ("masked scores filled with -1", attention_small_fill, ["masked keys still get weight", "large negative"]),
    ("scores[~mask] with a broadcast mask", attention_boolean_index_broadcast_mask,
     ["boolean indexing", "masked_fill(~mask, ...) lets the mask broadcast"]),
    ("returns (weights, output)", attention_returns_weights_first, ["(weights, output)", "return the output first"]),
    ("mask.unsqueeze(1) on a 4-d mask", attention_mask_unsqueezed, ["the mask gained a dimension"]),
    ("dropout applied twice", attention_dropout_twice, ["dropout module was applied twice"]),
    ("dropout applied to the scores", attention_dropout_on_scores, ["dropout module was given the scores"]),
]


@pytest.mark.parametrize("label,fn,keywords", SECOND_REVIEW_ATTENTION_MISTAKES,
                         ids=[m[0] for m in SECOND_REVIEW_ATTENTION_MISTAKES])
def test_second_review_attention_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "scaled_dot_product_attention", *keywords)


def test_a_wrong_scale_is_not_blamed_on_the_dropout():
    """The dropout module given softmax weights computed from wrong scores: the message points at the scores."""
    _, text = assert_caught(attention_scaled_by_sqrt_len_q, "scaled_dot_product_attention")
    line = [ln for ln in text.splitlines() if "dropout module" in ln][0]
    assert "not to the scores or the output" not in line and "the scores are wrong" in line, line


# ---------------------------------------------------------------- right values, no training through them
# The model is trained through softmax and attention: code that gives the right numbers but leaves autograd
# (numpy, Python floats) or breaks backward (in place on a tensor autograd needs) loses the point whose
# title says "gradients too", and is told why.
def softmax_detached_sum(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True).detach()


NO_GRADIENT = [
    ("numpy", softmax_numpy, "softmax", ["requires_grad", "left autograd"]),
    ("numpy with swapaxes", softmax_numpy_swapaxes, "softmax", ["left autograd"]),
    ("a loop over Python floats", softmax_loop, "softmax", ["requires_grad", "left autograd"]),
    ("in place after exp_", softmax_in_place_on_a_copy, "softmax", ["backward()", "in-place operation"]),
    ("the sum detached", softmax_detached_sum, "softmax", ["gradient", "with respect to x", "detached sum"]),
    ("attention weights from numpy", attention_numpy_weights, "scaled_dot_product_attention",
     ["requires grad", "left autograd"]),
]


@pytest.mark.parametrize("label,fn,name,keywords", NO_GRADIENT, ids=[m[0] for m in NO_GRADIENT])
def test_right_values_without_gradients_lose_the_gradient_point(label, fn, name, keywords):
    points, text = assert_caught(fn, name, *keywords)
    assert points == max_points(name) - 1, text  # the values are right: only the gradient point is lost


def test_a_detached_max_is_harmless():
    def softmax(x, dim=-1):
        e = (x - x.amax(dim, keepdim=True).detach()).exp()
        return e / e.sum(dim, keepdim=True)
    assert_full_marks(softmax)


# ---------------------------------------------------------------- third review
def attention_isinstance_dropout(q, k, v, mask=None, dropout=None):
    """Applies the module only when it is an nn.Dropout: the check's recording module must be one."""
    w = _attention(q, k, v, mask)[1]
    if isinstance(dropout, torch.nn.Dropout):
        w = dropout(w)
    return w @ v, w


def attention_reads_dropout_p(q, k, v, mask=None, dropout=None):
    w = _attention(q, k, v, mask)[1]
    if dropout is not None:
        w = torch.nn.functional.dropout(w, dropout.p, dropout.training)  # the module is never called
    return w @ v, w


def attention_multiplied_by_sqrt_d_k(q, k, v, mask=None, dropout=None):
    return _attention(q, k, v, mask, dropout, scale=lambda q: q.size(-1) ** -0.5)


def attention_returns_unmasked_weights(q, k, v, mask=None, dropout=None):
    out, _ = _attention(q, k, v, mask, dropout)
    return out, _attention(q, k, v, None)[1]  # right output, but the weights before masking


def test_third_review_dropout_module_is_an_nn_dropout():
    # only the dropout check passes a module (the others, on correct code like this, are covered above)
    points, line = grade_one(attention_isinstance_dropout, "scaled_dot_product_attention", "applies the dropout")
    assert points == 1, line
    points, line = grade_one(attention_reads_dropout_p, "scaled_dot_product_attention", "applies the dropout")
    assert points == 0 and "never called" in line, line


@pytest.mark.parametrize("fn,title,keywords", [
    (attention_multiplied_by_sqrt_d_k, "equals F.scaled", ["multiplied by sqrt(d_k) instead of divided"]),
    (attention_returns_unmasked_weights, "a boolean mask", ["weights returned are not the ones"]),
], ids=["scores multiplied by sqrt(d_k)", "weights returned before masking"])
def test_third_review_attention_mistakes_are_named(fn, title, keywords):
    points, line = grade_one(fn, "scaled_dot_product_attention", title)
    assert points == 0 and all(k in line for k in keywords), line
