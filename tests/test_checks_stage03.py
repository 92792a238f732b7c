"""Stage 03's checks: full marks for correct code however written; for each classic mistake, exactly the
points it earns and the words that name it (the reference and the stub: tests/test_registry.py)."""
import functools
import inspect

import pytest
import torch

import solutions
from autograder import max_points
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade, grade_one, mistakes

SOFTMAX, ATTENTION = solutions.softmax, solutions.scaled_dot_product_attention


def _written(ref, *lines, args="", changes=()):
    """`ref` with its body written as `lines` (the last one returns), `args` added after its parameters, and
    other `changes`."""
    src = inspect.getsource(ref)
    head, body = src[:src.index('"""')], src[src.index("### BEGIN SOLUTION\n") + 19:src.index("    ### END "
                                                                                              "SOLUTION")]
    return edit(ref, (body, "".join(f"    {line}\n" for line in lines)),
                (head, head.replace(") ->", f"{args}) ->")),
                *changes)


def _maker(ref, old, new):
    """A function of one argument: `ref` with `old` replaced by `new`, the argument in its braces."""
    return lambda arg: edit(ref, (old, new.format(arg)))


_sm, _att = functools.partial(_written, SOFTMAX), functools.partial(_written, ATTENTION)
_IF_DROPOUT = ["if dropout is not None:", "    w = dropout(w)"]

# ---------------------------------------------------------------- correct, written differently
SOFTMAX_STYLES = {
    "logsumexp": _sm("return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))"),
    # an extra keyword with a default; multiplies by the reciprocal of the sum
    "reciprocal": _sm("e = torch.exp(torch.sub(x, torch.amax(x, dim, keepdim=True)))",
                      "return e * torch.reciprocal(torch.sum(e, dim, keepdim=True) + eps)", args=", eps=0.0"),
    # computed and returned in float64 for a float32 input: the values are what count
    "float64 result": _sm("x64 = x.double()", "e = (x64 - x64.max(dim=dim, keepdim=True)[0]).exp()",
                          "return e.div(e.sum(dim=dim, keepdim=True))"),
    # a Python sum over the slices
    "unbind": _sm("rows = x.unbind(dim)", "m = torch.stack(rows, 0).max(0).values",
                  "es = [torch.exp(r - m) for r in rows]", "total = sum(es)",
                  "return torch.stack([e / total for e in es], dim)"),
    "l1 normalize": _sm("e = (x - x.max(dim=dim, keepdim=True)[0]).exp()",
                        "return torch.nn.functional.normalize(e, p=1, dim=dim)"),
    "keyword-only extras": _sm(
        "d = dim % x.dim()", "e = torch.exp(x - torch.amax(x, dim=d, keepdim=True).detach())",
        "out = e / (e.sum(d, keepdim=True) + eps)", "return out if dtype is None else out.to(dtype)",
        args=", *, dtype=None, eps=0.0"),
    "movedim": _sm("y = x.movedim(dim, 0)", "e = (y - y.max(0).values).exp()",
                   "return (e / e.sum(0)).movedim(0, dim)"),
    "max under no_grad": _sm("with torch.no_grad():", "    m = x.amax(dim, keepdim=True)",
                             "e = torch.exp(x - m)",
                             "return e / e.sum(dim, keepdim=True)"),
    "dim=None": _sm("dim = -1 if dim is None else dim", "e = (x - x.amax(dim, True)).exp()",
                    "return e / e.sum(dim, True)", changes=[("dim: int = -1)", "dim=None)")]),
    "a detached max": edit(SOFTMAX, ("x.amax(dim=dim, keepdim=True)",
                                     "x.amax(dim=dim, keepdim=True).detach()")),
}
ATTENTION_STYLES = {
    "einsum": _att('scores = torch.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5',
                   "if mask is not None:",
                   "    scores = scores.masked_fill(mask.logical_not(), -1e9)", "w = scores.softmax(-1)",
                   *_IF_DROPOUT,
                   'return torch.einsum("...qk,...kv->...qv", w, v), w'),
    "where": _att("scores = torch.matmul(q / math.sqrt(k.size(-1)), k.transpose(-1, -2))",
                  "if mask is not None:",
                  "    scores = torch.where(mask, scores, torch.tensor(-1e30))",
                  "w = torch.softmax(scores, dim=-1)",
                  "w_drop = dropout(w) if dropout is not None else w", "return torch.matmul(w_drop, v), "
                                                                       "w_drop"),
    # leading dims flattened for bmm; the Annotated Transformer's masked_fill(mask == 0, -1e9)
    "bmm": _att("*lead, Lq, d = q.shape", "Lk = k.size(-2)", "s = torch.bmm(q.reshape(-1, Lq, d), "
                                                             "k.reshape(-1, Lk, d).transpose(1, "
                                                             "2)).reshape(*lead, Lq, Lk) / "
                                                             "math.sqrt(d)", "if mask is not None:",
                "    s = s.masked_fill(mask == 0, -1e9)", "w = torch.nn.functional.softmax(s, dim=-1)",
                *_IF_DROPOUT,
                "out = torch.bmm(w.reshape(-1, Lq, Lk), v.reshape(-1, Lk, v.size(-1)))",
                "return out.reshape(*lead, Lq, v.size(-1)), w"),
    # masked_fill with -inf, a fully masked row's NaN turned into zeros: finite both ways (masked_fill's
    # backward zeroes the NaN gradient of the masked scores; an additive -inf mask does not: a mistake below)
    "-inf fill, nan_to_num": _att("s = q.matmul(k.mT) * (1.0 / q.size(-1) ** 0.5)", "if mask is not None:",
                                  '    s = s.masked_fill(~mask, float("-inf"))',
                                  "w = s.softmax(-1).nan_to_num(0.0)", "if dropout:", "    w = dropout(w)",
                                  "return w @ v, w"),
    "loops": _att(  # one (Lq, Lk) matrix at a time over the leading dims, a fill of -1e4
        "import numpy as np", "lead = q.shape[:-2]",
        "weights = torch.empty(*lead, q.size(-2), k.size(-2), dtype=q.dtype)",
        "m = None if mask is None else mask.expand(*lead, q.size(-2), k.size(-2))",
                  "for idx in np.ndindex(*lead):",
        "    s = q[idx] @ k[idx].T / math.sqrt(q.size(-1))", "    if m is not None:",
        "        s = s.masked_fill(~m[idx], -1e4)", "    weights[idx] = torch.softmax(s, -1)",
        "if dropout is not None:", "    weights = dropout(weights)", "return weights @ v, weights"),
    # float64 inside, q's dtype out; an extra keyword; in-place fill on its own scores
    "float64 inside": _att(
        "scale = scale or q.shape[-1] ** -0.5", "s = (q.double() * scale) @ k.double().transpose(-1, -2)",
        "if mask is not None:", "    s.masked_fill_(mask.logical_not(), torch.finfo(torch.float64).min)",
        "w = torch.softmax(s, -1)", *_IF_DROPOUT, "return (w @ v.double()).to(q.dtype), w.to(q.dtype)",
        args=", scale=None"),
    # -inf, the fully masked rows set to 0 scores (uniform) with torch.where
    "keyword scale, -inf fill": _att(
        "s = torch.matmul(q, k.mT) * (q.size(-1) ** -0.5 if scale is None else scale)",
                                     "if mask is not None:",
        '    s = s.masked_fill(mask == False, float("-inf"))  # noqa: E712',
        "    s = torch.where(mask.any(-1, keepdim=True), s, torch.zeros_like(s))", "w = s.softmax(-1)",
                                     *_IF_DROPOUT,
        "return w @ v, w", args=", *, scale=None"),
    # q and k each scaled by d_k ** -0.25; a hand-written softmax; weights before dropout
    "quarter scales": _att(
        "d = q.shape[-1]", "s = (q / d ** 0.25) @ (k / d ** 0.25).swapaxes(-1, -2)", "if mask is not None:",
        "    s = s.masked_fill(~mask.bool(), -1e9)", "e = torch.exp(s - s.amax(-1, keepdim=True))",
        "w = e / e.sum(-1, keepdim=True)", "return torch.matmul(dropout(w) if dropout is not None else w, "
                                           "v), w"),
    # boolean indexing on its own scores, with the mask expanded to their shape first
    "index_put, expanded": _att(
        "s = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))", "if mask is not None:",
        "    s[~mask.expand_as(s)] = torch.finfo(s.dtype).min", "w = torch.softmax(s, dim=-1)", "if dropout:",
        "    w = dropout(w)", "return w @ v, w"),
    "exp times mask": _att(  # exp(scores - max) multiplied by the mask and renormalized, a clamp against 0/0
        "s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
        "m = torch.ones_like(s, dtype=torch.bool) if mask is None else mask", "s = s.masked_fill(~m, -1e9)",
        "e = torch.exp(s - s.max(-1, keepdim=True).values) * m", "w = e / e.sum(-1, "
                                                                 "keepdim=True).clamp_min(1e-30)",
        *_IF_DROPOUT, "return w @ v, w"),
    "baddbmm, flattened": _att(
        "lead = q.shape[:-2]", "q2, k2, v2 = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v))",
        "s = torch.baddbmm(torch.zeros(q2.size(0), q2.size(1), k2.size(1)), q2, k2.transpose(1, 2), "
        "beta=0.0, alpha=1 / math.sqrt(q.size(-1))).view(*lead, q.size(-2), k.size(-2))",
                               "if mask is not None:",
        "    s = s.masked_fill(mask.logical_not(), -1e4)", "w = s.softmax(-1)",
        "wd = dropout(w) if dropout is not None else w",
        "return (wd.reshape(-1, *wd.shape[-2:]) @ v2).view(*lead, q.size(-2), v.size(-1)), w"),
}
CORRECT = [pytest.param(contract, fn, id=f"{contract}: {style}") for contract, styles in [
    ("softmax",
     SOFTMAX_STYLES), ("scaled_dot_product_attention", ATTENTION_STYLES)] for style, fn in styles.items()]


@pytest.mark.parametrize("contract,fn", CORRECT)
def test_other_correct_styles(contract, fn):
    assert_full_marks(fn, contract)


# ---------------------------------------------------------------- classic mistakes, one row each
_softmax_shift = _maker(SOFTMAX, "x - x.amax(dim=dim, keepdim=True)", "x - {}")
_sum = _maker(SOFTMAX, "e.sum(dim=dim, keepdim=True)", "{}")
_MASKED_FILL = "scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)"
_scores = _maker(ATTENTION, "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)", "scores = {}")
# the scaling as the argument
_qk = _maker(ATTENTION, "k.transpose(-2, -1) / math.sqrt(d_k)", "k.transpose(-2, -1){}")
_fill = _maker(ATTENTION, _MASKED_FILL, "{}")
_filled = _maker(ATTENTION, _MASKED_FILL, "scores = scores.masked_fill({})")  # the fill's arguments
_weights = _maker(ATTENTION, "weights = softmax(scores, dim=-1)", "weights = {}")
_returns = _maker(ATTENTION, "return weights @ v, weights", "return {}")
_dropout = _maker(ATTENTION, "weights = dropout(weights)", "weights = {}")
MASK_AFTER = ("weights = softmax(scores, dim=-1)", "weights = softmax(scores, dim=-1)\n    if mask is not "
                                                   "None:\n        weights = weights * mask")
SOFTMAX_MISTAKES = [
    Mistake("no max subtracted", _softmax_shift("0"), 2, "subtract the row's maximum"),
    Mistake("shifted by the mean", _softmax_shift("x.mean(dim, keepdim=True)"), 2,
            "subtract the row's maximum"),
    Mistake("shifted by the global max", _softmax_shift("x.max()"), 2, "subtract the row's maximum"),
    Mistake("max over the last dim only", _softmax_shift("x.amax(-1, keepdim=True)"), 2,
            "use `dim` in both the max and the sum"),
    Mistake("dim ignored", edit(SOFTMAX, ("-> torch.Tensor:", "-> torch.Tensor:\n    dim = -1")), 2,
            "dim argument is ignored"),
    Mistake("x shifted in place", edit(SOFTMAX, ("shifted = x - x.amax(dim=dim, keepdim=True)",
                                                 "shifted = x.sub_(x.amax(dim=dim, keepdim=True))")),
            2, "x was modified in place"),
    Mistake("no keepdim", edit(SOFTMAX, ("x.amax(dim=dim, keepdim=True)", "x.amax(dim=dim)"),
                               ("e.sum(dim=dim, keepdim=True)", "e.sum(dim=dim)")), 0, "keepdim=True"),
    # finite but wrong values: not blamed on an overflow
    Mistake("sum over dim 0", _sum("e.sum(0, keepdim=True)"), 0, not_says="exp overflowed"),
    Mistake("sum squeezed (keepdim already there)", _sum("e.sum(dim, keepdim=True).squeeze(dim)"), 0,
            "e.sum(dim, keepdim=True).squeeze(dim)`), with e (3, 4, 5)", not_says="use keepdim=True"),
    # right values, no training through them: only the point whose title says "gradients too" is lost
    # float64, back
    Mistake("numpy", _sm("import numpy as np", "a = x.detach().cpu().numpy().astype(np.float64)",
                         "e = np.exp(a - a.max(axis=dim, keepdims=True))",  # to x's dtype
                         "return torch.from_numpy(e / e.sum(axis=dim, keepdims=True)).to(x.dtype)"), 2,
            ("requires_grad", "left autograd")),
    Mistake("numpy with swapaxes", _sm("import numpy as np", "a = np.swapaxes(x.numpy(), dim, "
                                                             "-1).astype(np.float64)",
                                       "e = np.exp(a - a.max(-1)[..., None])",
                                       "return torch.tensor(np.swapaxes("
                                       "e / e.sum(-1)[..., None], dim, -1), dtype=x.dtype)"), 2,
            "left autograd"),
    Mistake("a loop over Python floats", _sm(
        "x = x.movedim(dim, -1).contiguous()", "out = torch.empty_like(x)",
        "flat, res = x.reshape(-1, x.size(-1)), out.view(-1, x.size(-1))", "for i, row in enumerate(flat):",
        "    m = max(row.tolist())", "    e = [math.exp(v - m) for v in row.tolist()]",
        "    res[i] = torch.tensor([v / sum(e) for v in e])", "return out.movedim(-1, dim)"), 2,
            ("requires_grad", "left autograd")),
    Mistake("in place after exp_",
            _sm("y = x.clone()", "y -= y.max(dim=dim, keepdim=True).values", "y.exp_()",
                                       "y /= y.sum(dim=dim, keepdim=True)", "return y"), 2,
            ("backward()", "in-place operation")),
    Mistake("the sum detached", _sum("e.sum(dim=dim, keepdim=True).detach()"), 2,
            ("gradient", "with respect to x", "detached sum")),
    # the contract's dtypes: float64 in, float64 out (every other check passes float32)
    Mistake("computed in float32", edit(SOFTMAX, ("shifted = x - x", "x = x.float()\n    shifted = x - x")),
            2,
            ("float64 x of shape (3, 4, 5): dtype", "expected torch.float64", "x.float()")),
]
ATTENTION_MISTAKES = [
    Mistake("softmax over the query axis", _weights("softmax(scores, dim=-2)"), 1, "dim=-2"),
    Mistake("softmax over dim=1 (the heads)", _weights("softmax(scores, dim=1)"), 1, "dim=1 (the heads)"),
    Mistake("mask applied after the softmax", edit(ATTENTION, (_MASKED_FILL, "pass"), MASK_AFTER), 5,
            "after the softmax"),
    Mistake("no sqrt(d_k) scaling", _qk(""), 2, "not divided by sqrt(d_k)"),
    Mistake("scaled by d_k", _qk(" / d_k"), 2, "divided by d_k instead"),
    Mistake("scores multiplied by sqrt(d_k)", _qk(" * math.sqrt(d_k)"), 0, "multiplied by sqrt(d_k) instead "
                                                                           "of divided",
            title="equals F.scaled"),
    Mistake("scores divided by sqrt(len_q)", _qk(" / math.sqrt(q.size(-2))"), 2, "sqrt(len_q)"),
    Mistake("sqrt(d_k) hard-coded to sqrt(8)", _qk(" / math.sqrt(8)"), 6, "not a fixed number"),
    Mistake("weights divided by sqrt(d_k) after the softmax",
            edit(ATTENTION, (" / math.sqrt(d_k)  #", "  #"), (
        "softmax(scores, dim=-1)", "softmax(scores, dim=-1) / math.sqrt(d_k)")), 1,
            ("divide the scores before the softmax", "mind the parentheses")),
    Mistake("mask polarity inverted", _filled("mask, -1e9"), 4, "polarity"),
    Mistake("mask polarity inverted, filled with -inf", _filled("mask, float('-inf')"), 4,
            ("polarity", "NaN")),
    Mistake("NaN on a fully masked row", _filled("~mask, float('-inf')"), 6, "NaN"),
    Mistake("masked with 0", _filled("~mask, 0.0"), 5, "filled with 0"),
    Mistake("masked scores filled with -1", _filled("~mask, -1.0"), 5,
            ("masked keys still get weight", "large negative")),
    Mistake("masked scores filled with -10", _filled("~mask, -10.0"), 6,  # weights of about 1e-5 where masked
            ("masked keys still get weight", "torch.finfo(scores.dtype).min"), not_says="float('-inf')"),
    Mistake("mask polarity inverted, a finfo.min fill", _filled("mask, torch.finfo(scores.dtype).min"), 0,
            "mask polarity inverted: the weight falls only where the mask is False", title="a boolean mask"),
    # an additive -inf mask patched after the softmax: a finite forward pass, a NaN gradient (lesson 03 shows
    # it)
    Mistake("additive -inf mask, nan_to_num", _att(
        "s = q.matmul(k.mT) * (1.0 / q.size(-1) ** 0.5)", "if mask is not None:",
        '    s = s + torch.zeros_like(s).masked_fill(~mask, float("-inf"))',
                                                   "w = s.softmax(-1).nan_to_num(0.0)",
        "if dropout:", "    w = dropout(w)", "return w @ v, w"), 6,
            ("with respect to q, k", "NaN in the gradient")),
    Mistake("additive -inf mask, fully masked rows zeroed", _att(
        "s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))", "if mask is not None:",
        '    s = s + torch.where(mask, 0.0, float("-inf"))', "w = torch.softmax(s, -1)",
                                                                 "if mask is not None:",
        "    w = torch.where(mask.any(-1, keepdim=True), w, 0.0)", *_IF_DROPOUT, "return w @ v, w"), 6,
            "NaN in the gradient even when the forward pass is patched"),
    Mistake("exp without the max, a -1e9 fill", edit(
        ATTENTION, (_MASKED_FILL, "scores = scores.masked_fill(~mask, -1e9)"),
        ("weights = softmax(scores, dim=-1)",
         "weights = scores.exp() / scores.exp().sum(-1, keepdim=True)")), 6,
            ("0/0 = NaN", "subtract the row's max before exp"), not_says="instead of -inf"),
    Mistake("scores[~mask] with a broadcast mask", _fill("scores[~mask] = -1e9"), 6,
            ("boolean indexing", "masked_fill(~mask, ...) lets the mask broadcast")),
    Mistake("mask.unsqueeze(1) on a 4-d mask", _filled("~mask.unsqueeze(1), -1e9"), 4,
            "the mask gained a dimension"),
    Mistake("mask flipped in place", _fill("mask = mask.logical_not_()\n        scores = "
                                           "scores.masked_fill(mask, -1e9)"), 6,
            "mask was modified in place"),
    Mistake("q scaled in place", _scores("(q.div_(math.sqrt(d_k))) @ k.transpose(-2, -1)"), 5,
            "q was modified in place"),
    Mistake("k not transposed", _scores("q @ k / math.sqrt(d_k)"), 0,
            ("wrong shape inside your function, at `scores = q @ k / math.sqrt(d_k)",
             "Likely: q @ k multiplies (..., Lq, d_k) by (..., Lk, d_k)")),
    Mistake("k.T on 4-d inputs", _scores("q @ k.T / math.sqrt(d_k)"), 0,
            ("wrong shape", "k.transpose(-2, -1)")),
    # issue 40: the error's shapes only, no Likely
    Mistake("q and k swapped in the scores", _scores("k @ q.transpose(-2, -1) / math.sqrt(d_k)"), 0,
            "Likely: q and k swapped in the scores"),
    Mistake("recentered without keepdim", _weights("softmax(scores - scores.amax(-1), dim=-1)"), 0,
            ("your code raised RuntimeError", "with scores (2, 3, 4, 5)",
             "Likely: 5 is scores's size at dim 3 and 4 is scores's size at dim 2"),
            not_says=("transpose only the last two dims", "k needs its last two dims")),
    Mistake("weights returned transposed", _returns("weights @ v, weights.transpose(-2, -1)"), 3,
            "wrong shape"),
    Mistake("returns (weights, output)", _returns("weights, weights @ v"), 0,
            ("(weights, output)", "return the output first")),
    Mistake("weights returned before masking", _returns(
        "weights @ v, softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k))"), 0,
            "weights returned are not the ones",
            title="a boolean mask"),
    Mistake("dropout applied twice", _dropout("dropout(dropout(weights))"), 6,
            "dropout module was applied twice"),
    Mistake("dropout applied to the scores",
            edit(ATTENTION, ("    d_k = q.size(-1)\n", "    d_k = q.size(-1)\n    dropout, drop = None, "
                                                       "dropout\n"),
                 ("    if mask is not None:\n", "    scores = drop(scores) if drop is not None else scores\n"
                  "    if mask is not None:\n")), 6,
            "dropout module was given the scores"),
    Mistake("the dropout module never called (F.dropout with its p)",
            _dropout("torch.nn.functional.dropout(weights, dropout.p, dropout.training)"), 0, "never called",
            title="applies the dropout"),
    Mistake("attention weights from numpy", _att(
        "import numpy as np", "qn, kn = q.numpy().astype(np.float64), k.numpy().astype(np.float64)",
        "s = qn @ np.swapaxes(kn, -1, -2) / np.sqrt(qn.shape[-1])", "if mask is not None:",
        "    s = np.where(mask.numpy(), s, -1e30)", "e = np.exp(s - s.max(-1, keepdims=True))",
        "w = torch.from_numpy(e / e.sum(-1, keepdims=True)).to(q.dtype)", "if dropout is not None:",
        "    w = dropout(w)", "return w @ v, w"), max_points("scaled_dot_product_attention") - 1,
            ("requires grad", "left autograd")),
]
ROWS = [pytest.param(*p.values, id=f"{contract}: {p.id}") for contract, table in [
    ("softmax", SOFTMAX_MISTAKES), ("scaled_dot_product_attention", ATTENTION_MISTAKES)]
    for p in mistakes(contract, table)]


@pytest.mark.parametrize("m", ROWS)
def test_mistakes(m):
    assert_mistake(m)


def test_a_wrong_scale_is_not_blamed_on_the_dropout():
    """The dropout module given softmax weights computed from wrong scores: the message points at the
    scores."""
    _, text = grade(_scores("q @ k.transpose(-2, -1) / math.sqrt(q.size(-2))"),
                    "scaled_dot_product_attention")
    line = [ln for ln in text.splitlines() if "dropout module" in ln][0]
    assert "not to the scores or the output" not in line and "the scores are wrong" in line, line


def test_a_dropout_applied_only_when_it_is_an_nn_dropout_is_right():
    fn = edit(ATTENTION, ("if dropout is not None:", "if isinstance(dropout, torch.nn.Dropout):"))
    points, line = grade_one(fn, "scaled_dot_product_attention", "applies the dropout")
    assert points == 1, line  # the check's recording module is an nn.Dropout


# ---------------------------------------------------------------- the checks themselves
def test_check_never_raises_and_never_writes_to_stderr(capfd):
    import warnings

    def scaled_dot_product_attention(q, k, v, mask=None, dropout=None):
        warnings.warn("a learner's warning")  # noqa: B028 (a learner's code, as written)
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
@pytest.mark.parametrize("fn", [
    lambda x, dim=-1: torch.softmax(x, dim), lambda x, dim=-1: x.softmax(dim),
    lambda x, dim=-1: torch.nn.functional.softmax(x, dim=dim), lambda x, dim=-1: torch.nn.Softmax(dim)(x),
    lambda x, dim=-1: torch.log_softmax(x, dim).exp(), lambda x,
                                dim=-1: torch.ops.aten._softmax(x, dim, False),
    torch.softmax], ids=["torch.softmax", "method", "F.softmax", "nn.Softmax", "log_softmax.exp", "aten",
                         "itself"])
def test_a_library_softmax_earns_nothing(fn):
    """Lesson 03 teaches the softmax: PyTorch's doing the work (whatever the alias, or the function itself)
    earns no point, and every check says why."""
    points, text = grade(fn, None if fn is torch.softmax else "softmax")
    assert points == 0 and text.count("a library softmax") == 3, text


def test_pytorch_attention_earns_nothing():
    fn = _returns("torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask), weights")
    points, text = grade(fn, "scaled_dot_product_attention")
    assert points == 0 and text.count("F.scaled_dot_product_attention (or nn.MultiheadAttention)") == 7, text


def test_the_checks_own_references_are_not_shortcuts():
    """The checks compare with torch.softmax and F.scaled_dot_product_attention themselves, and the attention
    may use any softmax (lesson 03 grades the softmax on its own): torch.softmax inside the attention is
    allowed."""
    assert_full_marks(ATTENTION_STYLES["where"], "scaled_dot_product_attention")
