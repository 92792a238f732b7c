"""Stage 07's checks: full marks for layer norms and residual connections however written; for each classic mistake
(unbiased variance, eps outside the sqrt, wrong dimension, post-/pre-norm confused, residual missing, dropout on the
sum, norm twice...), exactly the points it earns and the words that name it (the reference and the stub:
tests/test_registry.py)."""
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade, mistakes

LAYER_NORM, CONNECTION = solutions.LayerNorm, solutions.SublayerConnection


# ---------------------------------------------------------------- LayerNorm: correct, written differently
class _Affine(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps


def _with_forwards(base, holder):
    """One class per method of `holder`: `base` (its parameters) with that method as forward, the method's name as
    the test's id: a style that differs only in its forward, without a class statement of its own."""
    return [pytest.param(type(name, (base,), {"forward": f}), id=name) for name, f in vars(holder).items()
            if callable(f) and not name.startswith("_")]


class LayerNormForwards:
    def sums_rsqrt_addcmul(self, x):
        n = x.shape[-1]
        c = x - x.sum(-1, keepdim=True) / n
        return torch.addcmul(self.bias, self.weight, c * torch.rsqrt(c.pow(2).sum(-1, keepdim=True) / n + self.eps))

    def biased_std_squared_under_the_root(self, x):
        std = x.std(-1, unbiased=False, keepdim=True)
        return self.weight * (x - x.mean(-1, keepdim=True)) / (std ** 2 + self.eps) ** 0.5 + self.bias

    def means_by_matmul_weight_by_einsum(self, x):
        col = torch.full((x.size(-1), 1), 1.0 / x.size(-1), dtype=x.dtype)
        mu = x @ col
        var = (x - mu) ** 2 @ col
        return torch.einsum("...d,d->...d", (x - mu) / torch.sqrt(var + self.eps), self.weight) + self.bias

    def flattened_to_rows(self, x):
        rows = x.reshape(-1, x.shape[-1])
        var, mean = torch.var_mean(rows, dim=1, unbiased=False, keepdim=True)
        return ((rows - mean) / (var + self.eps).sqrt()).reshape(x.shape) * self.weight + self.bias

    def std_mean(self, x):
        std, mean = torch.std_mean(x, -1, unbiased=False, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(std ** 2 + self.eps) + self.bias

    def a_loop_over_rows(self, x):
        rows = []
        for r in x.reshape(-1, x.shape[-1]):
            m = r.mean()
            rows.append((r - m) / torch.sqrt(((r - m) ** 2).mean() + self.eps))
        return torch.stack(rows).reshape(x.shape) * self.weight + self.bias

    def addcdiv(self, x):
        n = x.size(-1)
        mean = x.sum(-1, keepdim=True) / n
        var = ((x - mean) ** 2).sum(-1, keepdim=True) / n
        return torch.addcdiv(self.bias, self.weight * (x - mean), torch.sqrt(var + self.eps))


class LayerNormRsqrt(_Affine):  # torch.var_mean and rsqrt
    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class LayerNormMoments(nn.Module):  # the variance as E[x^2] - E[x]^2, eps kept in a buffer
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.register_parameter("weight", nn.Parameter(torch.ones(d_model)))
        self.register_parameter("bias", nn.Parameter(torch.zeros(d_model)))
        self.register_buffer("eps", torch.tensor(eps))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean ** 2
        return self.weight * (x - mean) / (var + self.eps).sqrt() + self.bias


class LayerNormFloat64(_Affine):  # float64 inside and back to x's dtype; an extra keyword argument with a default
    def __init__(self, d_model, eps=1e-5, elementwise_affine=True):
        super().__init__(d_model, eps)

    def forward(self, x):
        y = x.double()
        y = (y - y.mean(-1, keepdim=True)) / (y.var(-1, correction=0, keepdim=True) + self.eps).sqrt()
        return (y * self.weight.double() + self.bias.double()).to(x.dtype)


# torch.empty then reset_parameters(); einsum means; a keyword-only extra; **kwargs in forward
class LayerNormResetParameters(nn.Module):
    def __init__(self, d_model, eps=1e-5, *, bias=True):
        super().__init__()
        self.variance_epsilon = eps
        self.weight = nn.Parameter(torch.empty(d_model))
        self.bias = nn.Parameter(torch.empty(d_model))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x, **kwargs):
        c = x - torch.einsum("...d->...", x)[..., None] / x.shape[-1]
        var = torch.einsum("...d,...d->...", c, c)[..., None] / x.shape[-1]
        return c * (var + self.variance_epsilon).rsqrt() * self.weight + self.bias


@pytest.mark.parametrize("cls", [LayerNormRsqrt, LayerNormMoments, LayerNormFloat64, LayerNormResetParameters,
                                 *_with_forwards(_Affine, LayerNormForwards)])
def test_other_correct_layer_norms(cls):
    assert_full_marks(cls, "LayerNorm")


# ---------------------------------------------------------------- LayerNorm: nn.LayerNorm doing the work
class LayerNormSubclass(nn.LayerNorm):
    pass


class LayerNormWrapper(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.inner = nn.LayerNorm(d_model, eps=eps)
        self.weight, self.bias = self.inner.weight, self.inner.bias

    def forward(self, x):
        return self.inner(x)


class LayerNormFunctional(_Affine):
    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


@pytest.mark.parametrize("cls", [LayerNormSubclass, LayerNormWrapper, LayerNormFunctional])
def test_pytorch_layer_norm_does_the_work_and_earns_nothing(cls):
    """The lesson teaches layer normalization: every check in which nn.LayerNorm or F.layer_norm does it
    earns nothing, and says why (only LayerNormFunctional's own parameters earn their point);
    SublayerConnection may still use nn.LayerNorm (see SublayerFunctionalDropout)."""
    points, text = grade(cls, "LayerNorm")
    assert points == (1 if cls is LayerNormFunctional else 0), text
    assert text.count("your code calls nn.LayerNorm (or F.layer_norm)") == text.count("✗") >= 4, text


# ---------------------------------------------------------------- LayerNorm: classic mistakes, one row each
_MEAN = "x.mean(dim=-1, keepdim=True)"
_VAR = "var = (centered ** 2).mean(dim=-1, keepdim=True)"
_RETURN = "return self.weight * centered / torch.sqrt(var + self.eps) + self.bias"


def _ln_over(dims):
    """Mean and (biased) variance both over `dims` instead of the last dimension."""
    return edit(LAYER_NORM, (_MEAN, f"x.mean({dims})"), (_VAR, f"var = (centered ** 2).mean({dims})"))


def _ln_var(new):
    return edit(LAYER_NORM, (_VAR, f"var = {new}"))


def _ln_returns(new):
    return edit(LAYER_NORM, (_RETURN, f"return {new}"))


class LayerNormNumpy(_Affine):
    def forward(self, x):
        import numpy as np
        a = x.detach().numpy().astype(np.float64)
        xhat = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + self.eps)
        return torch.from_numpy(xhat).to(x.dtype) * self.weight + self.bias


class LayerNormInPlaceOnItsOwn(_Affine):
    def forward(self, x):
        y = x - x.mean(-1, keepdim=True)
        y.div_(y.pow(2).mean(-1, keepdim=True).add(self.eps).sqrt_())
        return y.mul_(self.weight).add_(self.bias)


UNBIASED = _ln_var("x.var(dim=-1, keepdim=True)")
RMS_NORM = edit(LAYER_NORM, (f"centered = x - {_MEAN}", "centered = x"))  # x / sqrt(mean(x^2) + eps)
LAYER_NORM_MISTAKES = [
    # the variance and eps
    Mistake("unbiased variance", UNBIASED, 2, "unbiased variance"),
    Mistake("x.std() + eps (the Annotated Transformer)",
            _ln_returns("self.weight * centered / (x.std(-1, keepdim=True) + self.eps) + self.bias"), 2,
            ("eps outside the square root", "unbiased std")),
    Mistake("eps outside the sqrt", _ln_returns("self.weight * centered / (torch.sqrt(var) + self.eps) + self.bias"),
            2, "eps added outside the square root"),
    Mistake("eps after the division", _ln_returns("self.weight * (centered / torch.sqrt(var) + self.eps) + self.bias"),
            1, "eps added after the division"),
    Mistake("no eps", _ln_returns("self.weight * centered / torch.sqrt(var) + self.bias"), 1, ("eps ignored", "NaN")),
    Mistake("eps fixed at 1e-5", _ln_returns("self.weight * centered / torch.sqrt(var + 1e-5) + self.bias"), 4,
            "eps fixed at 1e-5"),
    Mistake("eps default 1e-6", edit(LAYER_NORM, ("eps: float = 1e-5", "eps: float = 1e-6")), 3, "eps of 1e-6"),
    Mistake("divided by the variance", _ln_returns("self.weight * centered / (var + self.eps) + self.bias"), 2,
            "divided by the variance, not the standard deviation"),
    Mistake("variance not centred", _ln_var("(x ** 2).mean(dim=-1, keepdim=True)"), 2,
            "mean of x^2, not of (x - mean)^2"),
    # the mean
    Mistake("mean not subtracted", _ln_returns("self.weight * x / torch.sqrt(var + self.eps) + self.bias"), 1,
            "mean is not subtracted"),
    Mistake("mean subtracted nowhere (RMSNorm)", RMS_NORM, 1, "mean was not subtracted (RMSNorm)",
            not_says=("keep eps", "dim 0")),
    Mistake("mean without keepdim", edit(LAYER_NORM, (_MEAN, "x.mean(dim=-1)")), 1,
            "Likely: the mean or the variance lost its dimension: keepdim=True"),
    Mistake("mean squeezed after keepdim (the error is on `x - mean`)",
            edit(LAYER_NORM, (f"centered = x - {_MEAN}", f"mean = {_MEAN}.squeeze(-1)\n        centered = x - mean"),
                 ("# (..., d_model): x - mu", "")),
            1, "`centered = x - mean`), with x (2, 4, 8), mean (2, 4)", not_says="lost its dimension"),
    Mistake("x centred in place", edit(LAYER_NORM, (f"centered = x - {_MEAN}", f"x -= {_MEAN}\n        centered = x")),
            1, ("changed in place", "x = x - mean")),
    # the dimension
    Mistake("over the positions", _ln_over("-2, keepdim=True"), 2, "dim=-2"),
    Mistake("over dim 1", _ln_over("1, keepdim=True"), 2, ("dim=-2", "normalized over dim 1 instead")),
    Mistake("over the batch", _ln_over("0, keepdim=True"), 1, "dim 0"),
    Mistake("over the whole tensor", _ln_over(""), 1, "whole tensor"),
    # weight and bias
    Mistake("bias forgotten", _ln_returns("self.weight * centered / torch.sqrt(var + self.eps)"), 1,
            "the bias is not added"),
    Mistake("bias inside the product", _ln_returns("self.weight * (centered / torch.sqrt(var + self.eps) + self.bias)"),
            1, "the bias inside the product"),
    Mistake("gamma and beta", edit(LAYER_NORM, ("self.weight = ", "self.gamma = "), ("self.bias = ", "self.beta = "),
                                   (_RETURN, "return self.gamma * centered / torch.sqrt(var + self.eps) + self.beta")),
            0, ("named weight and bias", "gamma")),
    Mistake("plain tensors", edit(LAYER_NORM, *[(f"nn.Parameter(torch.{f}(d_model))",
                                                 f"torch.{f}(d_model, requires_grad=True)")
                                                for f in ("ones", "zeros")]), 4, "nn.Parameter"),
    Mistake("random initial weight", edit(LAYER_NORM, ("torch.ones(d_model)", "torch.randn(d_model)")), 4,
            "ones and zeros"),
    # right values, no training through them: only the gradient point is lost
    Mistake("in numpy", LayerNormNumpy, 4, ("gradient", "left autograd")),
    Mistake("in place on its own tensors", LayerNormInPlaceOnItsOwn, 4, ("backward()", "in-place")),
    Mistake("detached mean and variance", edit(LAYER_NORM, (_MEAN, f"{_MEAN}.detach()"), (_VAR, f"{_VAR}.detach()")), 4,
            ("gradient", "with respect to x", "detached mean or variance")),
]


@pytest.mark.parametrize("m", mistakes("LayerNorm", LAYER_NORM_MISTAKES))
def test_layer_norm_mistakes(m):
    assert_mistake(m)


def test_rms_norm_is_named_by_every_check_it_fails():
    _, text = grade(RMS_NORM, "LayerNorm")
    failed = [line for line in text.splitlines() if line.startswith("✗")]
    assert len(failed) == 4 and all("RMSNorm" in line for line in failed), text


@pytest.mark.parametrize("line,without", [
    ("x - x.mean(-1)", True), ("x - x.mean(-1, keepdim=True)", False), ("e / e.sum(dim)", True),
    ("x.var(-1, False, True)", False), ("(x - x.mean(-1, keepdim=True)) / x.std(-1)", True),
    ("x - mean", False), ("torch.sum(x, dim=-1, keepdim = True)", False), ("x.amax(dim=-1)", True)])
def test_which_lines_reduce_without_keepdim(line, without):
    from autograder.checks._util import reduces_without_keepdim
    assert reduces_without_keepdim(line) is without


# ---------------------------------------------------------------- SublayerConnection: correct, written differently
class _Connection(nn.Module):
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm = solutions.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.pre = norm_first


class ConnectionForwards:  # on the reference's norm, dropout and norm_first
    def extra_arguments(self, x, sublayer, *args, **kwargs):
        y = self.dropout(sublayer(self.norm(x) if self.norm_first else x, *args, **kwargs))
        return x + y if self.norm_first else self.norm(x + y)

    def adds_in_place_to_its_output(self, x, sublayer):
        out = self.dropout(sublayer(self.norm(x) if self.norm_first else x))
        out += x
        return out if self.norm_first else self.norm(out)

    def norm_forward_and_a_stacked_sum(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm.forward(x)))
        return self.norm.forward(torch.stack([x, self.dropout(sublayer(x))]).sum(0))


# The sublayer's input chosen first, one residual sum, the norm last only in post-norm; extra keywords
class SublayerOneExpression(_Connection):
    def forward(self, x, sublayer, **kwargs):
        out = x + self.drop(sublayer(self.norm(x) if self.pre else x))
        return out if self.pre else self.norm(out)


# F.dropout with the training flag, two branches as methods, PyTorch's nn.LayerNorm as the norm
class SublayerFunctionalDropout(nn.Module):
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.p, self.pre = dropout, norm_first

    def _post(self, x, sublayer):
        return self.norm(x + F.dropout(sublayer(x), self.p, self.training))

    def _pre(self, x, sublayer):
        return x + F.dropout(sublayer(self.norm(x)), self.p, self.training)

    def forward(self, x, sublayer):
        return (self._pre if self.pre else self._post)(x, sublayer)


class SublayerResidualFirst(nn.Module):  # the residual kept in a variable, the learner's own LayerNorm class
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.norm = LayerNormRsqrt(d_model)
        self.drop = nn.Dropout(p=dropout)

    def forward(self, x, sublayer):
        residual = x
        if self.norm_first:
            x = self.norm(x)
        x = residual + self.drop(sublayer(x))
        if not self.norm_first:
            x = self.norm(x)
        return x


class SublayerNormByTwoNames(nn.Module):  # the norm kept as self.ln too, and used through `norm`
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.ln = solutions.LayerNorm(d_model)
        self.norm, self.dropout, self.norm_first = self.ln, nn.Dropout(dropout), norm_first

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x))) if self.norm_first else self.norm(x + self.dropout(sublayer(x)))


class SublayerHandDropout(_Connection):  # dropout written by hand: a Bernoulli keep-mask and the 1 / (1 - p) rescaling
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__(d_model, dropout, norm_first)
        self.p = dropout

    def dropped(self, t):
        if not self.training or self.p == 0:
            return t
        if self.p >= 1:
            return torch.zeros_like(t)
        return t * (torch.rand_like(t) >= self.p).to(t.dtype) / (1 - self.p)

    def forward(self, x, sublayer):
        if self.pre:
            return x + self.dropped(sublayer(self.norm(x)))
        return self.norm(x + self.dropped(sublayer(x)))


class SublayerKeywordOnlyFlag(nn.Module):
    def __init__(self, d_model, dropout=0.1, *, norm_first=False):
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), nn.Dropout(dropout), norm_first

    def forward(self, x, sublayer):
        if self.pre_norm:
            return torch.add(x, self.dropout(sublayer(self.norm(x))))
        return self.norm(x.add(self.dropout(sublayer(x))))


class SublayerTwoStrategies(nn.Module):
    class _Post(nn.Module):
        def forward(self, x, sub, norm, drop):
            return norm(x + drop(sub(x)))

    class _Pre(nn.Module):
        def forward(self, x, sub, norm, drop):
            return x + drop(sub(norm(x)))

    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm, self.drop = solutions.LayerNorm(d_model), nn.Dropout(dropout)
        self.mode = self._Pre() if norm_first else self._Post()

    def forward(self, x, sublayer):
        return self.mode(x, sublayer, self.norm, self.drop)


class SublayerBernoulliDropout(nn.Module):
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm, self.p, self.norm_first = nn.LayerNorm(d_model), dropout, norm_first

    def forward(self, x, sublayer):
        s = sublayer(self.norm(x) if self.norm_first else x)
        if self.training and self.p > 0:
            s = s * torch.empty_like(s).bernoulli_(1 - self.p) / (1 - self.p) if self.p < 1 else s * 0
        return x + s if self.norm_first else self.norm(x + s)


# Graded apart from its LayerNorm: on a broken one it still gets full marks (the checks swap in nn.LayerNorm)
class SublayerOnBrokenNorm(solutions.SublayerConnection):
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__(d_model, dropout, norm_first)
        self.norm = UNBIASED(d_model)


@pytest.mark.parametrize("cls", [SublayerOneExpression, SublayerFunctionalDropout, SublayerResidualFirst,
                                 SublayerNormByTwoNames, SublayerHandDropout, SublayerKeywordOnlyFlag,
                                 SublayerTwoStrategies, SublayerBernoulliDropout, SublayerOnBrokenNorm,
                                 *_with_forwards(CONNECTION, ConnectionForwards)])
def test_other_correct_sublayer_connections(cls):
    assert_full_marks(cls, "SublayerConnection")


# ---------------------------------------------------------------- SublayerConnection: classic mistakes, one row each
AS_PRE, AS_POST = "x + self.dropout(sublayer(self.norm(x)))", "self.norm(x + self.dropout(sublayer(x)))"


def _sc(pre=None, post=None, *more):
    """The reference with the pre-norm and/or the post-norm branch returning other expressions."""
    both = f"return {pre or AS_PRE}\n        return {post or AS_POST}"
    return edit(CONNECTION, (f"return {AS_PRE}\n        return {AS_POST}", both), *more)


def _sc_first(line):
    """The reference with `line` run first in forward."""
    return edit(CONNECTION, ("        if self.norm_first:", f"        {line}\n        if self.norm_first:"))


# The sublayer of the first call kept in self and used ever after (in a decoder: the first call's mask)
class KeepsTheFirstSublayer(solutions.SublayerConnection):
    def forward(self, x, sublayer):
        if not hasattr(self, "_sub"):
            self._sub = sublayer
        return super().forward(x, self._sub)


class DropoutNotRescaled(SublayerHandDropout):
    def dropped(self, t):
        return t * (torch.rand_like(t) >= self.p).to(t.dtype) if self.training else t


NORM_TWICE = "self.norm(x + self.dropout(sublayer(self.norm(x))))"
RESIDUAL_FROM_NORMED = _sc("x + self.dropout(sublayer(x))", None, ("if self.norm_first:", "if self.norm_first:\n"
                                                                   "            x = self.norm(x)"))
DROPOUT_ALWAYS_ON = "nn.functional.dropout({}, self.dropout.p, training=True)"
CONNECTION_MISTAKES = [
    # post-norm and pre-norm
    Mistake("norm_first ignored (always post-norm)", _sc(pre=AS_POST), 2, ("post-norm instead of pre-norm",
                                                                           "norm_first")),
    Mistake("norm_first ignored (always pre-norm)", _sc(post=AS_PRE), 2, ("pre-norm instead of post-norm",
                                                                         "norm_first")),
    Mistake("norm_first reversed", _sc(AS_POST, AS_PRE), 1, ("pre-norm instead of post-norm",
                                                              "post-norm instead of pre-norm")),
    Mistake("norm_first defaults to True", edit(CONNECTION, ("norm_first: bool = False", "norm_first: bool = True")),
            5, "pre-norm instead of post-norm"),
    Mistake("norm applied twice", _sc(NORM_TWICE, NORM_TWICE), 1, "norm is applied twice"),
    Mistake("pre-norm residual from norm(x)", RESIDUAL_FROM_NORMED, 3, "residual adds norm(x) instead of x"),
    Mistake("post-norm: norm(x) + sublayer(x)", _sc(post="self.norm(x) + self.dropout(sublayer(x))"), 4,
            "the norm is applied to x, not to the sum"),
    Mistake("norm under another name",
            _sc("x + self.dropout(sublayer(self.layer_norm(x)))", "self.layer_norm(x + self.dropout(sublayer(x)))",
                ("self.norm = LayerNorm(d_model)", "self.layer_norm = nn.LayerNorm(d_model)")), 0, "attribute `norm`"),
    # the residual
    Mistake("residual missing", _sc("self.dropout(sublayer(self.norm(x)))", "self.norm(self.dropout(sublayer(x)))"), 2,
            "residual is missing"),
    Mistake("x += ... in place", _sc("x.add_(self.dropout(sublayer(self.norm(x))))",
                                     "self.norm(x.add_(self.dropout(sublayer(x))))"), 0, "changed in place"),
    # the dropout
    Mistake("no dropout", _sc("x + sublayer(self.norm(x))", "self.norm(x + sublayer(x))"), 5, "dropout not applied"),
    Mistake("dropout on the residual sum", _sc("self.dropout(x + sublayer(self.norm(x)))",
                                               "self.norm(self.dropout(x + sublayer(x)))"), 5,
            "dropout applied to the residual sum"),
    Mistake("dropout on x as well", _sc("self.dropout(x) + self.dropout(sublayer(self.norm(x)))",
                                        "self.norm(self.dropout(x) + self.dropout(sublayer(x)))"), 5,
            "dropout applied to the residual sum (or to x itself)"),
    Mistake("dropout after the norm", _sc(post="self.dropout(self.norm(x + sublayer(x)))"), 5,
            "dropout applied after the norm"),
    Mistake("dropout on the sublayer's input", _sc("x + sublayer(self.dropout(self.norm(x)))",
                                                   "self.norm(x + sublayer(self.dropout(x)))"), 5,
            "dropout applied to the sublayer's input"),
    Mistake("dropout applied twice", _sc("x + self.dropout(self.dropout(sublayer(self.norm(x))))",
                                         "self.norm(x + self.dropout(self.dropout(sublayer(x))))"), 5,
            "dropout applied twice"),
    Mistake("dropout on in eval mode", _sc("x + " + DROPOUT_ALWAYS_ON.format("sublayer(self.norm(x))"),
                                           "self.norm(x + " + DROPOUT_ALWAYS_ON.format("sublayer(x)") + ")"), 5,
            "dropout still acts in eval mode"),
    Mistake("dropout rate fixed at 0.1", edit(CONNECTION, ("nn.Dropout(dropout)", "nn.Dropout(0.1)")), 5,
            "dropout argument is not used"),
    Mistake("hand-written dropout without 1/(1-p)", DropoutNotRescaled, 5, "not scaled by 1 / (1 - p)"),
    # the sublayer
    Mistake("sublayer called twice", _sc_first("shape = sublayer(x).shape  # a look costs a whole call"), 5,
            ("calls of the sublayer", "call the sublayer once")),
    Mistake("the first sublayer kept", KeepsTheFirstSublayer, 5,
            "use the sublayer passed to this call"),
    # right values, no training through them: only the gradient point is lost
    Mistake("sublayer given x.detach()", _sc(post="self.norm(x + self.dropout(sublayer(x.detach())))"), 5,
            ("gradient", "with respect to x", "x.detach()")),
    # the dropout check names the formula, not the flag
    Mistake("pre-norm normalizes the sum too", _sc(pre=NORM_TWICE), 0, "norm is applied twice",
            title="dropout on the sublayer's output only", not_says="norm_first flag"),
    Mistake("pre-norm residual from norm(x), the dropout check", RESIDUAL_FROM_NORMED, 0,
            "residual adds norm(x) instead of x", title="dropout on the sublayer's output only",
            not_says="norm_first flag"),
]


@pytest.mark.parametrize("m", mistakes("SublayerConnection", CONNECTION_MISTAKES))
def test_sublayer_connection_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- speed
def test_checks_are_fast_on_the_reference():
    from autograder import REGISTRY
    for name in ("LayerNorm", "SublayerConnection"):
        for c in REGISTRY[name]:
            times = []
            for _ in range(2):
                start = time.perf_counter()
                c.fn(getattr(solutions, name))
                times.append(time.perf_counter() - start)
            assert min(times) < 1.0, f"{name}: {c.title} takes {min(times):.2f} s"
