"""Stage 07's checks: full marks for the reference and for layer norms and residual connections written
differently; points lost, with the mistake named, for each classic mistake (unbiased variance, eps outside
the sqrt, wrong dimension, post-/pre-norm confused, residual missing, dropout on the sum, norm twice)."""
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from autograder import max_points
from tests.grading import assert_caught, assert_full_marks, grade

NAMES = ["LayerNorm", "SublayerConnection"]


@pytest.mark.parametrize("name", NAMES)
def test_reference_gets_full_marks(name):
    assert_full_marks(getattr(solutions, name))


# ---------------------------------------------------------------- correct, written differently
class LayerNormRsqrt(nn.Module):
    """torch.var_mean and rsqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class LayerNormMoments(nn.Module):
    """The variance as E[x^2] - E[x]^2, eps kept in a buffer."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.register_parameter("weight", nn.Parameter(torch.ones(d_model)))
        self.register_parameter("bias", nn.Parameter(torch.zeros(d_model)))
        self.register_buffer("eps", torch.tensor(eps))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean ** 2
        return self.weight * (x - mean) / (var + self.eps).sqrt() + self.bias


class LayerNormFunctional(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps, self.shape = eps, (d_model,)

    def forward(self, x):
        return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)


class SublayerFunctionalDropout(nn.Module):
    """F.dropout with the training flag, two branches as methods, PyTorch's nn.LayerNorm as the norm."""

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


class SublayerResidualFirst(nn.Module):
    """The residual kept in a variable, the learner's own LayerNorm class."""

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


@pytest.mark.parametrize("cls", [LayerNormRsqrt, LayerNormMoments])
def test_other_correct_layer_norms(cls):
    assert_full_marks(cls, "LayerNorm")


class LayerNormSubclass(nn.LayerNorm):
    pass


class LayerNormWrapper(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.inner = nn.LayerNorm(d_model, eps=eps)
        self.weight, self.bias = self.inner.weight, self.inner.bias

    def forward(self, x):
        return self.inner(x)


@pytest.mark.parametrize("cls", [LayerNormSubclass, LayerNormWrapper, LayerNormFunctional])
def test_pytorch_layer_norm_does_the_work_and_earns_nothing(cls):
    """The lesson teaches layer normalization: every check in which nn.LayerNorm or F.layer_norm does it
    earns nothing, and says why (only LayerNormFunctional's own parameters earn their point);
    SublayerConnection may still use nn.LayerNorm (see SublayerFunctionalDropout)."""
    points, text = grade(cls, "LayerNorm")
    assert points == (1 if cls is LayerNormFunctional else 0), text
    assert text.count("your code calls nn.LayerNorm (or F.layer_norm)") == text.count("✗") >= 4, text


@pytest.mark.parametrize("cls", [SublayerFunctionalDropout, SublayerResidualFirst])
def test_other_correct_sublayer_connections(cls):
    assert_full_marks(cls, "SublayerConnection")


# ---------------------------------------------------------------- classic mistakes: LayerNorm
class LNBase(solutions.LayerNorm):
    def stats(self, x):
        return x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)

    def forward(self, x):
        mean, var = self.stats(x)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class Unbiased(LNBase):
    def stats(self, x):
        return x.mean(-1, keepdim=True), x.var(-1, keepdim=True)


class AnnotatedTransformer(LNBase):
    """a_2 * (x - mean) / (std + eps) + b_2, with the unbiased std of x.std()."""

    def forward(self, x):
        return self.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + self.eps) + self.bias


class EpsOutsideSqrt(LNBase):
    def forward(self, x):
        mean, var = self.stats(x)
        return self.weight * (x - mean) / (var.sqrt() + self.eps) + self.bias


class NoEps(LNBase):
    def forward(self, x):
        mean, var = self.stats(x)
        return self.weight * (x - mean) / var.sqrt() + self.bias


class EpsFixed(LNBase):
    def forward(self, x):
        mean, var = self.stats(x)
        return self.weight * (x - mean) / torch.sqrt(var + 1e-5) + self.bias


class OverPositions(LNBase):
    def stats(self, x):
        return x.mean(-2, keepdim=True), x.var(-2, unbiased=False, keepdim=True)


class OverBatch(LNBase):
    def stats(self, x):
        return x.mean(0, keepdim=True), x.var(0, unbiased=False, keepdim=True)


class OverEverything(LNBase):
    def stats(self, x):
        return x.mean(), x.var(unbiased=False)


class NoMean(LNBase):
    def forward(self, x):
        mean, var = self.stats(x)
        return self.weight * x / torch.sqrt(var + self.eps) + self.bias


class GammaBeta(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma, self.beta, self.eps = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model)), eps

    def forward(self, x):
        return self.gamma * (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, False, True) + self.eps) + self.beta


class PlainTensors(LNBase):
    def __init__(self, d_model, eps=1e-5):
        nn.Module.__init__(self)
        self.eps = eps
        self.weight = torch.ones(d_model, requires_grad=True)
        self.bias = torch.zeros(d_model, requires_grad=True)


class RandomInit(LNBase):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.weight = nn.Parameter(torch.randn(d_model))


LN_MISTAKES = [
    ("unbiased variance", Unbiased, ["unbiased variance"]),
    ("x.std() + eps (the Annotated Transformer)", AnnotatedTransformer, ["eps outside the square root",
                                                                          "unbiased std"]),
    ("eps outside the sqrt", EpsOutsideSqrt, ["eps added outside the square root"]),
    ("no eps", NoEps, ["eps ignored", "NaN"]),
    ("eps fixed at 1e-5", EpsFixed, ["eps fixed at 1e-5"]),
    ("over the positions", OverPositions, ["dim=-2"]),
    ("over the batch", OverBatch, ["dim 0"]),
    ("over the whole tensor", OverEverything, ["whole tensor"]),
    ("mean not subtracted", NoMean, ["mean is not subtracted"]),
    ("gamma and beta", GammaBeta, ["named weight and bias", "gamma"]),
    ("plain tensors", PlainTensors, ["nn.Parameter"]),
    ("random initial weight", RandomInit, ["ones and zeros"]),
]


@pytest.mark.parametrize("label,cls,keywords", LN_MISTAKES, ids=[m[0] for m in LN_MISTAKES])
def test_layer_norm_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "LayerNorm", *keywords)


# ---------------------------------------------------------------- classic mistakes: SublayerConnection
class SCBase(solutions.SublayerConnection):
    pass


class AlwaysPost(SCBase):
    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


class AlwaysPre(SCBase):
    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class FlagReversed(SCBase):
    def forward(self, x, sublayer):
        if not self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class NoResidual(SCBase):
    def forward(self, x, sublayer):
        if self.norm_first:
            return self.dropout(sublayer(self.norm(x)))
        return self.norm(self.dropout(sublayer(x)))


class DropoutOnSum(SCBase):
    def forward(self, x, sublayer):
        if self.norm_first:
            return self.dropout(x + sublayer(self.norm(x)))
        return self.norm(self.dropout(x + sublayer(x)))


class NormTwice(SCBase):
    def forward(self, x, sublayer):
        if self.norm_first:
            return self.norm(x + self.dropout(sublayer(self.norm(x))))
        return self.norm(x + self.dropout(sublayer(self.norm(x))))


class PreNormResidualFromNormed(SCBase):
    def forward(self, x, sublayer):
        if self.norm_first:
            x = self.norm(x)
            return x + self.dropout(sublayer(x))
        return super().forward(x, sublayer)


class NoDropout(SCBase):
    def forward(self, x, sublayer):
        return x + sublayer(self.norm(x)) if self.norm_first else self.norm(x + sublayer(x))


class DropoutAlwaysOn(SCBase):
    def forward(self, x, sublayer):
        drop = lambda t: F.dropout(t, self.dropout.p, training=True)  # noqa: E731
        return x + drop(sublayer(self.norm(x))) if self.norm_first else self.norm(x + drop(sublayer(x)))


class CallsTwice(SCBase):
    def forward(self, x, sublayer):
        shape = sublayer(x).shape  # noqa: F841  (a look at the shape costs a whole extra call)
        return super().forward(x, sublayer)


class OtherNormName(nn.Module):
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.layer_norm, self.dropout, self.norm_first = nn.LayerNorm(d_model), nn.Dropout(dropout), norm_first

    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.layer_norm(x)))
        return self.layer_norm(x + self.dropout(sublayer(x)))


SC_MISTAKES = [
    ("norm_first ignored (always post-norm)", AlwaysPost, ["post-norm instead of pre-norm", "norm_first"]),
    ("norm_first ignored (always pre-norm)", AlwaysPre, ["pre-norm instead of post-norm", "norm_first"]),
    ("norm_first reversed", FlagReversed, ["pre-norm instead of post-norm", "post-norm instead of pre-norm"]),
    ("residual missing", NoResidual, ["residual is missing"]),
    ("dropout on the residual sum", DropoutOnSum, ["dropout applied to the residual sum"]),
    ("norm applied twice", NormTwice, ["norm is applied twice"]),
    ("pre-norm residual from norm(x)", PreNormResidualFromNormed, ["residual adds norm(x) instead of x"]),
    ("no dropout", NoDropout, ["dropout not applied"]),
    ("dropout on in eval mode", DropoutAlwaysOn, ["dropout still acts in eval mode"]),
    ("sublayer called twice", CallsTwice, ["calls of the sublayer", "call the sublayer once"]),
    ("norm under another name", OtherNormName, ["attribute `norm`"]),
]


@pytest.mark.parametrize("label,cls,keywords", SC_MISTAKES, ids=[m[0] for m in SC_MISTAKES])
def test_sublayer_connection_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "SublayerConnection", *keywords)


def test_sublayer_connection_is_graded_apart_from_the_layer_norm():
    """A connection built on a broken LayerNorm still gets full marks: the checks swap in nn.LayerNorm."""
    class SublayerOnBrokenNorm(solutions.SublayerConnection):
        def __init__(self, d_model, dropout=0.1, norm_first=False):
            super().__init__(d_model, dropout, norm_first)
            self.norm = Unbiased(d_model)
    assert_full_marks(SublayerOnBrokenNorm, "SublayerConnection")


# ---------------------------------------------------------------- review: more styles, more mistakes
class _Affine(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps


class LayerNormSumsAddcmul(_Affine):
    """Sums divided by d, rsqrt, and addcmul for weight * x_hat + bias."""

    def forward(self, x):
        n = x.shape[-1]
        c = x - x.sum(-1, keepdim=True) / n
        return torch.addcmul(self.bias, self.weight, c * torch.rsqrt(c.pow(2).sum(-1, keepdim=True) / n + self.eps))


class LayerNormBiasedStd(_Affine):
    """The biased std, squared back under the root with eps."""

    def forward(self, x):
        std = x.std(-1, unbiased=False, keepdim=True)
        return self.weight * (x - x.mean(-1, keepdim=True)) / (std ** 2 + self.eps) ** 0.5 + self.bias


class LayerNormFloat64(_Affine):
    """float64 inside and back to x's dtype; an extra keyword argument with a default."""

    def __init__(self, d_model, eps=1e-5, elementwise_affine=True):
        super().__init__(d_model, eps)

    def forward(self, x):
        y = x.double()
        y = (y - y.mean(-1, keepdim=True)) / (y.var(-1, correction=0, keepdim=True) + self.eps).sqrt()
        return (y * self.weight.double() + self.bias.double()).to(x.dtype)


class LayerNormMatmulMeans(_Affine):
    """Means as a product with a (d, 1) column of 1/d, the weight applied with einsum."""

    def forward(self, x):
        col = torch.full((x.size(-1), 1), 1.0 / x.size(-1), dtype=x.dtype)
        mu = x @ col
        var = (x - mu) ** 2 @ col
        return torch.einsum("...d,d->...d", (x - mu) / torch.sqrt(var + self.eps), self.weight) + self.bias


class LayerNormRows(_Affine):
    """Flattened to (rows, d), var_mean, reshaped back."""

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        var, mean = torch.var_mean(rows, dim=1, unbiased=False, keepdim=True)
        return ((rows - mean) / (var + self.eps).sqrt()).reshape(x.shape) * self.weight + self.bias


@pytest.mark.parametrize("cls", [LayerNormSumsAddcmul, LayerNormBiasedStd, LayerNormFloat64, LayerNormMatmulMeans,
                                 LayerNormRows])
def test_more_correct_layer_norms(cls):
    assert_full_marks(cls, "LayerNorm")


class _Connection(nn.Module):
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm = solutions.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.pre = norm_first


class SublayerOneExpression(_Connection):
    """The sublayer's input chosen first, one residual sum, the norm last only in post-norm; extra keywords."""

    def forward(self, x, sublayer, **kwargs):
        out = x + self.drop(sublayer(self.norm(x) if self.pre else x))
        return out if self.pre else self.norm(out)


class SublayerNormByTwoNames(nn.Module):
    """The norm kept as self.ln too, and used through `norm`."""

    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.ln = solutions.LayerNorm(d_model)
        self.norm, self.dropout, self.norm_first = self.ln, nn.Dropout(dropout), norm_first

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x))) if self.norm_first else self.norm(x + self.dropout(sublayer(x)))


class SublayerHandDropout(_Connection):
    """Dropout written by hand: a Bernoulli keep-mask and the 1 / (1 - p) rescaling."""

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


@pytest.mark.parametrize("cls", [SublayerOneExpression, SublayerNormByTwoNames, SublayerHandDropout])
def test_more_correct_sublayer_connections(cls):
    assert_full_marks(cls, "SublayerConnection")


class CentredInPlace(_Affine):
    def forward(self, x):
        x -= x.mean(-1, keepdim=True)  # the caller's tensor is centred too
        return self.weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) + self.bias


class BiasForgotten(_Affine):
    def forward(self, x):
        return self.weight * (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True)
                                                                         + self.eps)


def test_more_layer_norm_mistakes_are_caught():
    assert_caught(CentredInPlace, "LayerNorm", "changed in place", "x = x - mean")
    assert_caught(BiasForgotten, "LayerNorm", "the bias is not added")


class ResidualAddedInPlace(_Connection):
    def forward(self, x, sublayer):
        if self.pre:
            x += self.drop(sublayer(self.norm(x)))
            return x
        x += self.drop(sublayer(x))
        return self.norm(x)


class DropoutRateFixed(SublayerHandDropout):
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__(d_model, 0.1, norm_first)


class DropoutTwice(_Connection):
    def forward(self, x, sublayer):
        if self.pre:
            return x + self.drop(self.drop(sublayer(self.norm(x))))
        return self.norm(x + self.drop(self.drop(sublayer(x))))


class DropoutNotRescaled(SublayerHandDropout):
    def dropped(self, t):
        if not self.training:
            return t
        return t * (torch.rand_like(t) >= self.p).to(t.dtype)


class DropoutOnXToo(_Connection):
    def forward(self, x, sublayer):
        if self.pre:
            return self.drop(x) + self.drop(sublayer(self.norm(x)))
        return self.norm(self.drop(x) + self.drop(sublayer(x)))


class PostNormOnXOnly(_Connection):
    def forward(self, x, sublayer):
        if self.pre:
            return x + self.drop(sublayer(self.norm(x)))
        return self.norm(x) + self.drop(sublayer(x))


REVIEW_SC_MISTAKES = [
    ("x += ... in place", ResidualAddedInPlace, ["changed in place"]),
    ("dropout rate fixed at 0.1", DropoutRateFixed, ["dropout argument is not used"]),
    ("dropout applied twice", DropoutTwice, ["dropout applied twice"]),
    ("hand-written dropout without 1/(1-p)", DropoutNotRescaled, ["not scaled by 1 / (1 - p)"]),
    ("dropout on x as well", DropoutOnXToo, ["dropout applied to the residual sum (or to x itself)"]),
    ("post-norm: norm(x) + sublayer(x)", PostNormOnXOnly, ["the norm is applied to x, not to the sum"]),
]


@pytest.mark.parametrize("label,cls,keywords", REVIEW_SC_MISTAKES, ids=[m[0] for m in REVIEW_SC_MISTAKES])
def test_more_sublayer_connection_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "SublayerConnection", *keywords)


# ---------------------------------------------------------------- stubs, speed
def test_stubs_get_zero_and_say_not_implemented():
    class LayerNorm(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            raise NotImplementedError()

        def forward(self, x):
            raise NotImplementedError()

    class SublayerConnection(nn.Module):
        def __init__(self, d_model, dropout=0.1, norm_first=False):
            super().__init__()
            raise NotImplementedError()

        def forward(self, x, sublayer):
            raise NotImplementedError()

    for stub in (LayerNorm, SublayerConnection):
        points, text = grade(stub)
        assert points == 0 and text.count("not implemented yet") == len(text.splitlines()) - 1, text


def test_checks_are_fast_on_the_reference():
    from autograder import REGISTRY
    for name in NAMES:
        for c in REGISTRY[name]:
            times = []
            for _ in range(2):
                start = time.perf_counter()
                c.fn(getattr(solutions, name))
                times.append(time.perf_counter() - start)
            assert min(times) < 1.0, f"{name}: {c.title} takes {min(times):.2f} s"


# ---------------------------------------------------------------- second review: more styles, more mistakes
class LayerNormStdMean(_Affine):
    def forward(self, x):
        std, mean = torch.std_mean(x, -1, unbiased=False, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(std ** 2 + self.eps) + self.bias


class LayerNormResetParameters(nn.Module):
    """torch.empty then reset_parameters(); einsum means; a keyword-only extra; **kwargs in forward."""

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


class LayerNormRowLoop(_Affine):
    def forward(self, x):
        rows = []
        for r in x.reshape(-1, x.shape[-1]):
            m = r.mean()
            rows.append((r - m) / torch.sqrt(((r - m) ** 2).mean() + self.eps))
        return torch.stack(rows).reshape(x.shape) * self.weight + self.bias


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


class LayerNormAddcdiv(_Affine):
    def forward(self, x):
        n = x.size(-1)
        mean = x.sum(-1, keepdim=True) / n
        var = ((x - mean) ** 2).sum(-1, keepdim=True) / n
        return torch.addcdiv(self.bias, self.weight * (x - mean), torch.sqrt(var + self.eps))


@pytest.mark.parametrize("cls", [LayerNormStdMean, LayerNormResetParameters, LayerNormRowLoop, LayerNormAddcdiv])
def test_second_review_correct_layer_norms(cls):
    assert_full_marks(cls, "LayerNorm")


class SublayerKeywordOnlyFlag(nn.Module):
    def __init__(self, d_model, dropout=0.1, *, norm_first=False):
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), nn.Dropout(dropout), norm_first

    def forward(self, x, sublayer):
        if self.pre_norm:
            return torch.add(x, self.dropout(sublayer(self.norm(x))))
        return self.norm(x.add(self.dropout(sublayer(x))))


class SublayerExtraArguments(solutions.SublayerConnection):
    def forward(self, x, sublayer, *args, **kwargs):
        y = self.dropout(sublayer(self.norm(x) if self.norm_first else x, *args, **kwargs))
        return x + y if self.norm_first else self.norm(x + y)


class SublayerAddsInPlaceToItsOutput(solutions.SublayerConnection):
    def forward(self, x, sublayer):
        out = self.dropout(sublayer(self.norm(x) if self.norm_first else x))
        out += x
        return out if self.norm_first else self.norm(out)


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


class SublayerStackSum(solutions.SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm.forward(x)))
        return self.norm.forward(torch.stack([x, self.dropout(sublayer(x))]).sum(0))


@pytest.mark.parametrize("cls", [SublayerKeywordOnlyFlag, SublayerExtraArguments, SublayerAddsInPlaceToItsOutput,
                                 SublayerTwoStrategies, SublayerBernoulliDropout, SublayerStackSum])
def test_second_review_correct_sublayer_connections(cls):
    assert_full_marks(cls, "SublayerConnection")


class EpsAfterTheDivision(LNBase):
    def forward(self, x):
        mean, var = self.stats(x)
        return self.weight * ((x - mean) / torch.sqrt(var) + self.eps) + self.bias


class DividedByTheVariance(LNBase):
    def forward(self, x):
        mean, var = self.stats(x)
        return self.weight * (x - mean) / (var + self.eps) + self.bias


class MeanWithoutKeepdim(LNBase):
    def forward(self, x):
        return self.weight * (x - x.mean(-1)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps) + self.bias


class EpsDefaultOneMillionth(LNBase):
    def __init__(self, d_model, eps=1e-6):
        super().__init__(d_model, eps)


class BiasInsideTheProduct(LNBase):
    def forward(self, x):
        mean, var = self.stats(x)
        return self.weight * ((x - mean) / torch.sqrt(var + self.eps) + self.bias)


class VarianceNotCentred(LNBase):
    def stats(self, x):
        return x.mean(-1, keepdim=True), (x * x).mean(-1, keepdim=True)


class OverDimOne(LNBase):
    def stats(self, x):
        return x.mean(1, keepdim=True), x.var(1, unbiased=False, keepdim=True)


SECOND_REVIEW_LN_MISTAKES = [
    ("eps after the division", EpsAfterTheDivision, ["eps added after the division"]),
    ("divided by the variance", DividedByTheVariance, ["divided by the variance, not the standard deviation"]),
    ("mean without keepdim", MeanWithoutKeepdim, ["Likely: the mean or the variance lost its dimension: keepdim=True"]),
    ("eps default 1e-6", EpsDefaultOneMillionth, ["eps of 1e-6"]),
    ("bias inside the product", BiasInsideTheProduct, ["the bias inside the product"]),
    ("variance not centred", VarianceNotCentred, ["mean of x^2, not of (x - mean)^2"]),
    ("over dim 1", OverDimOne, ["dim=-2", "normalized over dim 1 instead"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_REVIEW_LN_MISTAKES, ids=[m[0] for m in SECOND_REVIEW_LN_MISTAKES])
def test_second_review_layer_norm_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "LayerNorm", *keywords)


class DropoutAfterTheNorm(SCBase):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.dropout(self.norm(x + sublayer(x)))


class DropoutOnTheSublayersInput(SCBase):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + sublayer(self.dropout(self.norm(x)))
        return self.norm(x + sublayer(self.dropout(x)))


class KeepsTheFirstSublayer(SCBase):
    """The sublayer of the first call kept in self and used ever after (in a decoder: the first call's mask)."""

    def forward(self, x, sublayer):
        if not hasattr(self, "_sub"):
            self._sub = sublayer
        return super().forward(x, self._sub)


class PostNormByDefault(SCBase):
    def __init__(self, d_model, dropout=0.1, norm_first=True):
        super().__init__(d_model, dropout, norm_first)


SECOND_REVIEW_SC_MISTAKES = [
    ("dropout after the norm", DropoutAfterTheNorm, ["dropout applied after the norm"]),
    ("dropout on the sublayer's input", DropoutOnTheSublayersInput, ["dropout applied to the sublayer's input"]),
    ("the first sublayer kept", KeepsTheFirstSublayer, ["use the sublayer passed to this call"]),
    ("norm_first defaults to True", PostNormByDefault, ["pre-norm instead of post-norm"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_REVIEW_SC_MISTAKES, ids=[m[0] for m in SECOND_REVIEW_SC_MISTAKES])
def test_second_review_sublayer_connection_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "SublayerConnection", *keywords)


# ---------------------------------------------------------------- right values, no training through them
class LayerNormDetachedStatistics(_Affine):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True).detach()
        var = x.var(-1, unbiased=False, keepdim=True).detach()
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class SublayerGivenDetachedX(solutions.SublayerConnection):
    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x.detach())))


NO_GRADIENT = [
    ("LayerNorm in numpy", LayerNormNumpy, "LayerNorm", ["gradient", "left autograd"]),
    ("LayerNorm in place on its own tensors", LayerNormInPlaceOnItsOwn, "LayerNorm", ["backward()", "in-place"]),
    ("LayerNorm with detached mean and variance", LayerNormDetachedStatistics, "LayerNorm",
     ["gradient", "with respect to x", "detached mean or variance"]),
    ("sublayer given x.detach()", SublayerGivenDetachedX, "SublayerConnection",
     ["gradient", "with respect to x", "x.detach()"]),
]


@pytest.mark.parametrize("label,cls,name,keywords", NO_GRADIENT, ids=[m[0] for m in NO_GRADIENT])
def test_right_values_without_gradients_lose_the_gradient_point(label, cls, name, keywords):
    points, text = assert_caught(cls, name, *keywords)
    assert points == max_points(name) - 1, text  # the values are right: only the gradient point is lost


# ---------------------------------------------------------------- messages that name the real mistake
class RMSNorm(LNBase):
    """The mean never subtracted, anywhere: x / sqrt(mean(x^2) + eps), RMSNorm."""

    def forward(self, x):
        return self.weight * x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + self.eps) + self.bias


def test_rms_norm_is_named_by_every_check_it_fails():
    points, text = assert_caught(RMSNorm, "LayerNorm", "mean was not subtracted (RMSNorm)")
    failed = [line for line in text.splitlines() if line.startswith("✗")]
    assert len(failed) == 4 and all("RMSNorm" in line for line in failed), text
    assert "keep eps" not in text and "dim 0" not in text, text


class NormTwiceInPreNorm(SCBase):
    """Post-norm right; pre-norm normalizes the sum as well: the flag is honoured, the norm applied twice."""

    def forward(self, x, sublayer):
        if self.norm_first:
            return self.norm(x + self.dropout(sublayer(self.norm(x))))
        return self.norm(x + self.dropout(sublayer(x)))


@pytest.mark.parametrize("cls,named", [(NormTwiceInPreNorm, "norm is applied twice"),
                                       (PreNormResidualFromNormed, "residual adds norm(x) instead of x")])
def test_the_dropout_check_names_the_formula_not_the_flag(cls, named):
    from tests.grading import grade_one
    points, line = grade_one(cls, "SublayerConnection", "dropout on the sublayer's output only")
    assert points == 0 and named in line and "norm_first flag" not in line, line


class LayerNormSqueezesTheMean(LNBase):
    """The mean keeps its dimension and the next line takes it away: the error is on `x - mean`, where no reduction
    is, so the message gives that line and its shapes and does not advise keepdim=True, which the code already uses."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True).squeeze(-1)
        centered = x - mean
        return self.weight * centered / torch.sqrt(centered.pow(2).mean(-1, keepdim=True) + self.eps) + self.bias


def test_a_broadcasting_error_off_the_reduction_line_is_not_called_keepdim():
    points, text = grade(LayerNormSqueezesTheMean, "LayerNorm")
    assert points < max_points("LayerNorm"), text
    assert "`centered = x - mean`), with x (2, 4, 8), mean (2, 4)" in text, text
    assert "lost its dimension" not in text, text


@pytest.mark.parametrize("line,without", [
    ("x - x.mean(-1)", True), ("x - x.mean(-1, keepdim=True)", False), ("e / e.sum(dim)", True),
    ("x.var(-1, False, True)", False), ("(x - x.mean(-1, keepdim=True)) / x.std(-1)", True),
    ("x - mean", False), ("torch.sum(x, dim=-1, keepdim = True)", False), ("x.amax(dim=-1)", True)])
def test_which_lines_reduce_without_keepdim(line, without):
    from autograder.checks._util import reduces_without_keepdim
    assert reduces_without_keepdim(line) is without
