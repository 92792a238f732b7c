"""Stage 07: layer normalization against nn.LayerNorm with random weight and bias copied in, and the
residual sublayer connection (post-norm and pre-norm) against the formulas written out with F.layer_norm.
SublayerConnection's checks put PyTorch's nn.LayerNorm in place of the learner's `norm`, so that they
grade the connection alone, whatever the learner's LayerNorm does."""
from __future__ import annotations

import copy

import torch
from torch import nn

from ..explain import failing_line
from ..registry import CheckFailure, forbid, register
from ._util import (
    LEFT_AUTOGRAD,
    as_module,
    as_tensor,
    build,
    close,
    diagnose,
    expect_all_dropped,
    expect_close,
    expect_grads,
    expect_no_dropout_in_eval,
    expect_shape,
    reduces_without_keepdim,
    seeded,
)

# the lesson's own work, which a library call must not do for the learner (SublayerConnection may use any
# LayerNorm: its checks put nn.LayerNorm in place of the learner's)
forbid("LayerNorm", "nn.LayerNorm (or F.layer_norm)", functions=("layer_norm", "native_layer_norm"),
       classes=("torch.nn.LayerNorm",))

INPLACE_HINT = ("an in-place operation on the input (x -= mean, x += ..., x.sub_(...), x.masked_fill_(...)) "
                "changes the caller's tensor; in pre-norm that tensor is the residual x itself: write "
                "x = x - mean, x = x + ...")


def _keeps_input(fn, x: torch.Tensor, what: str):
    """fn(), failing when it changed x in place (a broadcasting error from a mean or var without keepdim
    named)."""
    before = x.clone()
    try:
        out = fn()
    except RuntimeError as e:
        if "must match the size" not in str(e) or not reduces_without_keepdim(failing_line(e)):
            raise  # described as any error is: the line, its tensors' shapes, and a Likely only from those
        raise CheckFailure(what, f"an output of shape {tuple(x.shape)}", f"RuntimeError: {str(e)[:100]}",
                           "the mean or the variance lost its dimension: keepdim=True, x.mean(-1, "
                           "keepdim=True), so that it broadcasts back against x") from None
    if x.shape != before.shape or not torch.equal(x, before):
        raise CheckFailure(f"{what}: the input x after the call", "unchanged", "changed in place",
                           INPLACE_HINT)
    return out


# ------------------------------------------------------------------------------------- LayerNorm
OTHER_NAMES = ("gamma", "beta", "g", "b", "a_2", "b_2", "scale", "shift", "alpha", "w", "gain")


def _make_ln(LN, d, eps=None, seed=0):
    """The learner's LayerNorm with random weight and bias, and nn.LayerNorm with the same ones."""
    what = f"LayerNorm({d})" if eps is None else f"LayerNorm({d}, eps={eps})"
    ln = build(LN, d, what=what) if eps is None else build(LN, d, eps=eps, what=what)
    as_module(ln, what)
    weight, bias = _weight_bias(ln, d, what)
    ref = nn.LayerNorm(d, eps=1e-5 if eps is None else eps)
    with seeded(seed), torch.no_grad():
        ref.weight.normal_(1.0, 0.5)
        ref.bias.normal_(0.0, 0.5)
        weight.copy_(ref.weight)
        bias.copy_(ref.bias)
    return ln, ref


def _weight_bias(ln, d, what):
    weight, bias = getattr(ln, "weight", None), getattr(ln, "bias", None)
    if weight is None or bias is None:
        others = [n for n in OTHER_NAMES if isinstance(getattr(ln, n, None), torch.Tensor)]
        raise CheckFailure(f"{what}: attributes `weight` and `bias`", "parameters named weight and bias",
                           f"{', '.join(others)}" if others else "no such attributes",
                           f"the parameters must be named weight and bias (not {' and '.join(others)}), as "
                           "in nn.LayerNorm, so that weights can be copied to and from PyTorch" if others else
                           "self.weight = nn.Parameter(torch.ones(d_model)); "
                           "self.bias = nn.Parameter(torch.zeros(d_model))")
    for name, t in (("weight", weight), ("bias", bias)):
        if not isinstance(t, torch.Tensor):
            raise CheckFailure(f"{what}.{name}", "a tensor (nn.Parameter)", type(t).__name__,
                               f"self.{name} = nn.Parameter(...)")
        expect_shape(t, (d,), f"{what}.{name}", "one value per feature: shape (d_model,)")
    return weight, bias


def _ln_mistakes(x, ref, eps=None):
    w, b = ref.weight.detach(), ref.bias.detach()
    eps = ref.eps if eps is None else eps
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    unbiased = x.var(-1, unbiased=True, keepdim=True)
    mk = lambda xhat: w * xhat + b  # noqa: E731
    out = {
        "the unbiased variance (divides by d - 1): layer norm uses the biased one, "
        "x.var(-1, unbiased=False, keepdim=True)": mk((x - mean) / torch.sqrt(unbiased + eps)),
        "eps added outside the square root: (x - mean) / sqrt(var + eps), not / (std + eps)":
            mk((x - mean) / (var.sqrt() + eps)),
        "eps outside the square root and the unbiased std (x.std()): use (x - mean) / sqrt(var + eps) with "
        "the biased variance": mk((x - mean) / (unbiased.sqrt() + eps)),
        "eps ignored: sqrt(var + eps) with the eps argument": mk((x - mean) / var.sqrt()),
        "eps fixed at 1e-5: use the eps argument": mk((x - mean) / torch.sqrt(var + 1e-5)),
        "the mean is not subtracted: (x - mean) / sqrt(var + eps)": mk(x / torch.sqrt(var + eps)),
        "the mean was not subtracted (RMSNorm): x / sqrt(mean(x^2) + eps) is RMSNorm; layer norm centres x "
        "first, (x - mean) / sqrt(var + eps), var the mean of (x - mean)^2":
            mk(x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)),
        "weight and bias swapped: weight * x_hat + bias": b * ((x - mean) / torch.sqrt(var + eps)) + w,
        "the bias is not added: weight * x_hat + bias": w * ((x - mean) / torch.sqrt(var + eps)),
        "the weight is not applied: weight * x_hat + bias": (x - mean) / torch.sqrt(var + eps) + b,
        "weight and bias not applied: weight * x_hat + bias": (x - mean) / torch.sqrt(var + eps),
        "eps added after the division: it goes inside the square root, (x - mean) / sqrt(var + eps)":
            mk((x - mean) / var.sqrt() + eps),
        "divided by the variance, not the standard deviation: (x - mean) / sqrt(var + eps)":
            mk((x - mean) / (var + eps)),
        "the bias inside the product: weight * x_hat + bias, not weight * (x_hat + bias)":
            w * ((x - mean) / torch.sqrt(var + eps) + b),
        "the variance is the mean of x^2, not of (x - mean)^2: center x first (or use E[x^2] - mean^2)":
            mk((x - mean) / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)),
    }
    if eps != 1e-6:
        out["eps of 1e-6 instead of the eps argument (whose default, as nn.LayerNorm's, is 1e-5)"] = \
            mk((x - mean) / torch.sqrt(var + 1e-6))
    if x.dim() >= 2:
        out["normalized over dim=-2 (the positions) instead of the last dimension (the features)"] = \
            mk((x - x.mean(-2, keepdim=True)) / torch.sqrt(x.var(-2, unbiased=False, keepdim=True) + eps))
        out["normalized over dim 0 (the batch) instead of the last dimension (the features)"] = \
            mk((x - x.mean(0, keepdim=True)) / torch.sqrt(x.var(0, unbiased=False, keepdim=True) + eps))
        out["normalized over the whole tensor instead of the last dimension (the features) of each "
            "position"] = \
            mk((x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps))
    for d in range(1, x.dim() - 2):  # the dims between the batch and the positions (4-d inputs)
        out[f"normalized over dim {d} instead of the last dimension (the features): mean and var over "
            "dim=-1"] = \
            mk((x - x.mean(d, keepdim=True)) / torch.sqrt(x.var(d, unbiased=False, keepdim=True) + eps))
    if x.dim() >= 3:
        out["normalized over the last two dimensions instead of the last one (the features)"] = \
            mk((x - x.mean((-2, -1),
                           keepdim=True)) / torch.sqrt(x.var((-2, -1), unbiased=False, keepdim=True) + eps))
    return out


def _ln_input(seed, shape):
    """Rows of very different scales: tiny centred rows (var 1e-4, where eps inside or outside the sqrt
    differs by 5%) and wide rows with offsets (where a missing mean shows). No tiny row has a large offset,
    so E[x^2] - E[x]^2, a valid way to the variance, stays accurate in float32."""
    with seeded(seed):
        x = torch.randn(*shape)
        scale = torch.tensor([0.01, 1.0, 5.0, 0.02])[torch.arange(shape[-2]) % 4][:, None]  # (L, 1)
        offset = (torch.rand(shape[-2], 1) * 6 - 3) * (scale >= 1)
        return x * scale + offset


@register("LayerNorm", "parameters `weight` (ones) and `bias` (zeros) of shape (d_model,), as nn.Parameters")
def _ln_params(LN):
    ln = build(LN, 6, what="LayerNorm(6)")
    weight, bias = _weight_bias(ln, 6, "LayerNorm(6)")
    named = dict(ln.named_parameters())
    for name, t in (("weight", weight), ("bias", bias)):
        if not isinstance(t, nn.Parameter) or named.get(name) is not t:
            raise CheckFailure(f"LayerNorm(6).{name}", "an nn.Parameter registered under that name",
                               f"a plain {type(t).__name__}",
                               f"wrap it: self.{name} = nn.Parameter(...); otherwise the optimizer never "
                               "trains it and it is missing from state_dict()")
    if not torch.equal(weight.detach(), torch.ones(6)) or not torch.equal(bias.detach(), torch.zeros(6)):
        raise CheckFailure("LayerNorm(6)'s initial weight and bias", "ones and zeros (as nn.LayerNorm)",
                           f"weight {[round(v, 3) for v in weight.detach().flatten()[:3].tolist()]}..., "
                           f"bias {[round(v, 3) for v in bias.detach().flatten()[:3].tolist()]}...",
                           "start from the identity: weight = torch.ones(d_model), bias = "
                           "torch.zeros(d_model)")


def _expect_dtype_kept(ln, x, what):
    """ln(x) has x's dtype, as nn.LayerNorm's output: float32 in, float32 out; float64 in, float64 out."""
    for dtype in (torch.float32, torch.float64):
        got = as_tensor(ln(x.to(dtype)), what).dtype
        if got != dtype:
            params = sorted({str(p.dtype) for p in ln.parameters()} - {str(torch.float32)})
            raise CheckFailure(f"{what}, x of dtype {dtype}: the output's dtype", str(dtype), str(got),
                               f"the parameters were made {', '.join(params)} (torch.ones(d_model, "
                               "dtype=...)): they change the output's dtype; keep them in the default dtype, "
                               "as nn.LayerNorm"
                               if params and dtype == torch.float32 else
                               "the input is cast (x.float(), x.double(), .to(some dtype)) and the result "
                               "not cast back: the output keeps x's dtype, as nn.LayerNorm's (compute in "
                               "another dtype if you like, then .to(x.dtype))")


@register("LayerNorm", "equals nn.LayerNorm (eps=1e-5) with the same random weight and bias, gradients too, "
          "keeps x's dtype")
def _ln_default(LN):
    ln, ref = _make_ln(LN, 8, seed=1)
    x = _ln_input(11, (2, 4, 8))
    with torch.no_grad():
        expect_close(as_tensor(_keeps_input(lambda: ln(x), x, "LayerNorm(8)(x)"), "LayerNorm(8)(x)"), ref(x),
                     "LayerNorm(8)(x), x of shape (2, 4, 8)",
                     hint="weight * (x - mean) / sqrt(var + eps) + bias over the last dimension, biased "
                          "variance",
                     mistakes=_ln_mistakes(x, ref))
        _expect_dtype_kept(ln, x, "LayerNorm(8)(x)")
    weight, bias = _weight_bias(ln, 8, "LayerNorm(8)")
    for t in (weight, bias, ref.weight, ref.bias):
        t.grad = None
    leaf, ref_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    expect_grads(lambda: ln(leaf), lambda: ref(ref_leaf),
                 {"x": (leaf, ref_leaf), "weight": (weight, ref.weight), "bias": (bias, ref.bias)},
                 "LayerNorm(8)(x)", hint=LEFT_AUTOGRAD + "; the mean and the variance stay in the graph too "
                                                         "(a "
                 "detached mean or variance gives x the wrong gradient)")


@register("LayerNorm", "uses the eps argument: equals nn.LayerNorm(d, eps=0.1)")
def _ln_eps(LN):
    ln, ref = _make_ln(LN, 8, eps=0.1, seed=2)
    x = _ln_input(12, (2, 4, 8))
    with torch.no_grad():
        expect_close(as_tensor(_keeps_input(lambda: ln(x), x, "LayerNorm(8, eps=0.1)(x)"),
                               "LayerNorm(8, eps=0.1)(x)"),
                     ref(x),
                     "LayerNorm(8, eps=0.1)(x), x of shape (2, 4, 8)",
                     hint="keep eps (self.eps = eps) and use it: sqrt(var + self.eps)",
                     mistakes=_ln_mistakes(x, ref))


@register("LayerNorm", "normalizes over the last dimension only, for 2-d and 4-d inputs")
def _ln_shapes(LN):
    ln, ref = _make_ln(LN, 6, seed=3)
    with torch.no_grad():
        for shape in ((5, 6), (2, 3, 4, 6)):
            x = _ln_input(13, shape)
            what = f"LayerNorm(6)(x), x of shape {shape}"
            got = as_tensor(_keeps_input(lambda: ln(x), x, what), what)  # noqa: B023 (called at once)
            expect_close(got, ref(x), what, mistakes=_ln_mistakes(x, ref),
                         hint="mean and var over dim=-1 with keepdim=True, whatever the number of dimensions")


@register("LayerNorm", "a constant row (zero variance) gives the bias, not NaN")
def _ln_constant(LN):
    ln, ref = _make_ln(LN, 5, seed=4)
    # three sentences: normalizing over the batch (dim 0) does not give +-1 here,
    x = torch.full((3, 3, 5), 2.5)
    x[1] = -7.0                     # as RMSNorm (no mean subtracted) does, so that the two are told apart
    x[2] = 0.75
    with torch.no_grad():
        got = _keeps_input(lambda: ln(x), x, "LayerNorm(5)(constant x)")
        expect_close(as_tensor(got, "LayerNorm(5)(constant x)"), ref.bias.detach().expand(3, 3, 5),
                     "LayerNorm(5)(x) where every row is constant", mistakes=_ln_mistakes(x, ref),
                     hint="x - mean is 0 and var is 0: eps inside the sqrt keeps 0 / sqrt(0 + eps) = 0")


# ------------------------------------------------------------------------------ SublayerConnection
class _Sublayer(nn.Module):
    """A fixed nonlinear map (B, L, d) -> (B, L, d) that records what it was called with."""

    def __init__(self, d, seed=0):
        super().__init__()
        with seeded(seed):
            self.A = torch.randn(d, d) / d ** 0.5
            self.c = torch.randn(d)
        self.calls = []

    def forward(self, t):
        self.calls.append(t.detach().clone())
        return torch.tanh(t @ self.A + self.c) * 2


def _make_sc(SC, d=6, dropout=0.0, norm_first=None, seed=0):
    """The learner's connection with nn.LayerNorm (random weight and bias) in place of its `norm`."""
    kwargs = {"dropout": dropout} if norm_first is None else {"dropout": dropout, "norm_first": norm_first}
    args = ", ".join([str(d)] + [f"{k}={v}" for k, v in kwargs.items()])
    sc = build(SC, d, what=f"SublayerConnection({args})", **kwargs)
    as_module(sc, "SublayerConnection")
    own = _norm_attr(sc, d, f"SublayerConnection({args})")
    norm = nn.LayerNorm(d)
    with seeded(seed), torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
        norm.bias.normal_(0.0, 0.5)
        own.weight.copy_(norm.weight)  # the same numbers in the learner's own norm, should forward reach it
        own.bias.copy_(norm.bias)      # by another name
    sc.norm = norm
    return sc, norm


def _norm_attr(sc, d, what):
    norm = getattr(sc, "norm", None)
    if not isinstance(norm, nn.Module):
        raise CheckFailure(f"{what}: attribute `norm`", "a LayerNorm module named norm",
                           type(norm).__name__ if norm is not None else "no such attribute",
                           "self.norm = LayerNorm(d_model): the contract's name, so weights can be copied")
    w, b = getattr(norm, "weight", None), getattr(norm, "bias", None)
    if not isinstance(w, torch.Tensor) or not isinstance(b, torch.Tensor) or \
            w.shape != (d,) or b.shape != (d,):
        raise CheckFailure(f"{what}.norm", f"a LayerNorm({d}) with weight and bias of shape ({d},)",
                           type(norm).__name__, "self.norm = LayerNorm(d_model)")
    return norm


def _sc_input(seed=0, shape=(2, 4, 6)):
    with seeded(seed):
        return torch.randn(*shape) * 2 + 1


def _call(sc, x, sub, what):
    return as_tensor(_keeps_input(lambda: sc(x, sub), x, what), what)


def _sc_mistakes(x, N, S, norm_first):
    post, pre = N(x + S(x)), x + S(N(x))
    twice = "the norm is applied twice: apply it once, "
    common = {
        "the residual is missing: the sublayer's output is added to its input x":
            S(N(x)) if norm_first else N(S(x)),
        "the norm is on the sublayer's output only, not on the sum: norm(x + sublayer(x)) (post-norm) or "
        "x + sublayer(norm(x)) (pre-norm)": x + N(S(x)),
        "the norm is not applied": x + S(x),
        twice + "around the sum (post-norm) or to the sublayer's input (pre-norm)": N(x + S(N(x))),
        twice + "around the sum (post-norm) or to the sublayer's input (pre-norm); here the sum is "
                "normalized twice":
            N(N(x + S(x))),
        twice + "around the sum (post-norm) or to the sublayer's input (pre-norm); here both, and the "
                "residual is norm(x)":
            N(N(x) + S(N(x))),
    }
    if norm_first:
        return {"post-norm instead of pre-norm: the norm_first flag is ignored or reversed; norm_first=True "
                "gives x + dropout(sublayer(norm(x)))": post,
                "the residual adds norm(x) instead of x: x + dropout(sublayer(norm(x)))": N(x) + S(N(x)),
                **common}
    return {"pre-norm instead of post-norm: the norm_first flag is ignored or reversed; the default "
            "(norm_first=False) is the paper's norm(x + dropout(sublayer(x)))": pre,
            "the norm is applied to x, not to the sum: post-norm is norm(x + dropout(sublayer(x)))": N(x) +
            S(x),
            **common}


@register("SublayerConnection",
          "has `norm`, a LayerNorm(d_model) with weight and bias, as LayerNorm(d_model) builds it")
def _sc_attr(SC):
    for kwargs in ({}, {"norm_first": True}):
        sc = build(SC, 6, what=f"SublayerConnection(6{', norm_first=True' if kwargs else ''})", **kwargs)
        _norm_attr(sc, 6, "SublayerConnection(6)")
    sc, _ = _make_sc(SC, 6, 0.0, None)
    sc.eval()
    with torch.no_grad():
        _call(sc, _sc_input(), _Sublayer(6), "SublayerConnection(6)(x, sublayer)")
    _own_norm(SC)


def _own_norm(SC):
    """The other checks swap nn.LayerNorm in for `norm`; this one runs the learner's own part once: its norm
    must act as its own class built with the defaults, LayerNorm(d_model) (eps 1e-5). A wrong LayerNorm class
    is LayerNorm's mistake (its checks pay for it): the norm is compared with that same class, not with
    PyTorch's."""
    sc = build(SC, 6, dropout=0.0, what="SublayerConnection(6, dropout=0.0)")
    sc.eval()
    own = _norm_attr(sc, 6, "SublayerConnection(6)")
    try:
        default = type(own)(6)
    except Exception:  # noqa: BLE001 (a norm class this check cannot build alone: nothing to compare with)
        return
    if not isinstance(default, nn.Module) or not isinstance(getattr(default, "weight", None), torch.Tensor):
        return
    with torch.no_grad():
        default.load_state_dict(own.state_dict(), strict=False)
        x = _sc_input(24) * 1e-3  # a variance of about 4e-6: an eps of 1e-6 or 1e-12 instead of 1e-5 shows
        what = ("SublayerConnection(6, dropout=0.0) with its own norm, (x, a sublayer that returns zeros), "
                "x of std 0.002")
        got = _call(sc, x, lambda t: torch.zeros_like(t), what)
        if close(got, default(x), atol=1e-4, rtol=1e-3) or not close(own(x), got, atol=1e-4, rtol=1e-3):
            return  # right, or the composition is wrong (the checks with nn.LayerNorm say how)
    eps = getattr(own, "eps", None)
    raise CheckFailure(f"{what}: its norm", f"{type(own).__name__}(d_model) as built by default (eps=1e-5)",
                       f"another norm{f' (eps={eps:g})' if isinstance(eps, float) else ''}",
                       "SublayerConnection builds its norm with other arguments (another eps, such as 1e-6 "
                       "from another codebase): self.norm = LayerNorm(d_model); the contract's eps is "
                       "LayerNorm's default, 1e-5, as nn.Transformer's")


@register("SublayerConnection", "post-norm (the default): norm(x + sublayer(x)), gradients too")
def _sc_post(SC):
    sc, N = _make_sc(SC, 6, 0.0, None, seed=1)
    sc.eval()
    S, x = _Sublayer(6, 11), _sc_input(21)
    what = "SublayerConnection(6, dropout=0.0)(x, sublayer)"
    with torch.no_grad():
        got = _call(sc, x, S, what)
        expect_close(got, N(x + S(x)), what, hint="post-norm: self.norm(x + self.dropout(sublayer(x)))",
                     mistakes=_sc_mistakes(x, N, S, norm_first=False))
    sc, N = _make_sc(SC, 6, 0.0, False, seed=1)
    sc.eval()
    with torch.no_grad():
        what = "SublayerConnection(6, dropout=0.0, norm_first=False)(x, sublayer)"
        expect_close(_call(sc, x, S, what), N(x + S(x)), what,
                     mistakes=_sc_mistakes(x, N, S, norm_first=False),
                     hint="post-norm when norm_first is False: self.norm(x + self.dropout(sublayer(x)))")
    leaf, ref_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    expect_grads(lambda: sc(leaf, S), lambda: N(ref_leaf + S(ref_leaf)), {"x": (leaf, ref_leaf)}, what,
                 hint=LEFT_AUTOGRAD + "; the gradient reaches x along both paths, the residual and the "
                                      "sublayer (no x.detach() handed to the sublayer)")


@register("SublayerConnection", "pre-norm (norm_first=True): x + sublayer(norm(x)), gradients too")
def _sc_pre(SC):
    sc, N = _make_sc(SC, 6, 0.0, True, seed=2)
    sc.eval()
    S, x = _Sublayer(6, 12), _sc_input(22)
    what = "SublayerConnection(6, dropout=0.0, norm_first=True)(x, sublayer)"
    with torch.no_grad():
        expect_close(_call(sc, x, S, what), x + S(N(x)), what,
                     mistakes=_sc_mistakes(x, N, S, norm_first=True),
                     hint="pre-norm: x + self.dropout(sublayer(self.norm(x)))")
    ref_norm = copy.deepcopy(N)
    leaf, ref_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    expect_grads(lambda: sc(leaf, S), lambda: ref_leaf + S(ref_norm(ref_leaf)),
                 {"x": (leaf, ref_leaf), "norm.weight": (N.weight, ref_norm.weight),
                  "norm.bias": (N.bias, ref_norm.bias)}, what,
                 hint=LEFT_AUTOGRAD + "; no gradient reaches the norm, or x through the sublayer: keep "
                                      "norm(x) in the graph (no .detach(), no torch.no_grad() around it), x "
                                      "+ dropout(sublayer(norm(x)))")


@register("SublayerConnection", "calls the sublayer once, on x (post-norm) or on norm(x) (pre-norm)")
def _sc_calls(SC):
    x = _sc_input(23)
    for norm_first in (False, True):
        sc, N = _make_sc(SC, 6, 0.0, norm_first, seed=3)
        sc.eval()
        S = _Sublayer(6, 13)
        what = f"SublayerConnection(6, norm_first={norm_first})(x, sublayer)"
        with torch.no_grad():
            _call(sc, x, S, what)
            if len(S.calls) != 1:
                raise CheckFailure(f"{what}: calls of the sublayer", "1", str(len(S.calls)),
                                   "call the sublayer once and keep its output: it is a whole attention or "
                                   "feed-forward block, and with dropout inside two calls differ")
            expected = N(x) if norm_first else x
            # another sublayer on the next call: the same result as a fresh module's, nothing of the first
            # call kept
            S2 = _Sublayer(6, 17)
            second = _call(sc, x, S2, what + ", then again with another sublayer")
            fresh, _ = _make_sc(SC, 6, 0.0, norm_first, seed=3)
            fresh.eval()
            alone = _call(fresh, x, _Sublayer(6, 17), what + " with another sublayer")
            if len(S2.calls) != 1 or not close(second, alone):
                raise CheckFailure(f"{what}, called again with another sublayer",
                                   "the new sublayer called once, and its result",
                                   f"{len(S2.calls)} calls of it",
                                   "use the sublayer passed to this call: keep nothing (no sublayer, no "
                                   "output) from an earlier call in self")
            expect_close(S.calls[0], expected, f"{what}: what the sublayer was given",
                         hint=("pre-norm gives the sublayer norm(x)" if norm_first
                               else "post-norm gives the sublayer x itself"),
                         mistakes={"the sublayer was given x: pre-norm (norm_first=True) gives it norm(x)": x,
                                   "the sublayer was given norm(x): post-norm (the default) gives it x, and "
                                   "normalizes the sum after": N(x),
                                   "the sublayer was given the doubly normalized x: apply the norm "
                                   "once": N(N(x))})


def _formula_mistake(sc, x, N, S, norm_first, what):
    """The named mistake of the formula itself, seen in eval mode (dropout off), or None. With p=1 the
    sublayer's output is zero, so several wrong formulas give the same numbers (norm(x) in pre-norm: the flag
    ignored, the norm applied twice, the residual taken from norm(x)); the eval-mode output, with the
    sublayer's output kept, tells them apart."""
    sc.eval()
    try:
        got = _call(sc, x, S, what)
    finally:
        sc.train()
    if close(got, x + S(N(x)) if norm_first else N(x + S(x))):
        return None
    description = diagnose(got, _sc_mistakes(x, N, S, norm_first), close)
    return None if description is None else description + (" (in eval mode too, with the sublayer's output "
                                                           "kept)")


def _dropout_formula(norm_first):
    return "x + dropout(sublayer(norm(x)))" if norm_first else "norm(x + dropout(sublayer(x)))"


def _dropout_place_mistakes(x, N, S, norm_first):
    """The outputs of dropout put elsewhere than on the sublayer's output, with p=1 (all of it dropped)."""
    return {"dropout applied to the residual sum (or to x itself) instead of the sublayer's "
            "output only (or the residual x is missing): " + _dropout_formula(norm_first):
                torch.zeros_like(x) if norm_first else N(torch.zeros_like(x)),
            "dropout not applied in train mode: self.dropout = nn.Dropout(dropout) on the "
            "sublayer's output": x + S(N(x)) if norm_first else N(x + S(x)),
            "dropout applied to the sublayer's input instead of its output: " + _dropout_formula(norm_first):
                x + S(torch.zeros_like(x)) if norm_first else N(x + S(torch.zeros_like(x))),
            **({} if norm_first else {
                "dropout applied after the norm, to the whole output: only the sublayer's "
                "output goes through dropout, norm(x + dropout(sublayer(x)))":
                    torch.zeros_like(x)}),
            **_sc_mistakes(x, N, lambda t: torch.zeros_like(t), norm_first)}


@register("SublayerConnection",
          "dropout on the sublayer's output only (train mode, p=1: post-norm gives norm(x), pre-norm x)")
def _sc_dropout_place(SC):
    x = _sc_input(24)
    for norm_first in (False, True):
        sc, N = _make_sc(SC, 6, 1.0, norm_first, seed=4)
        sc.train()
        S = _Sublayer(6, 14)
        what = f"SublayerConnection(6, dropout=1.0, norm_first={norm_first}).train()(x, sublayer)"
        with torch.no_grad():
            got = _call(sc, x, S, what)
            # p = 1 zeroes the sublayer's output: what remains is the residual path alone
            expected = x if norm_first else N(x)
            expect_all_dropped(got, expected, lambda: _call(sc, x, S, what), 1, what, "value",  # noqa: B023 (at once)
                               equal_nan=True)
            formula = _formula_mistake(sc, x, N, S, norm_first, what) if not close(got, expected) else None
            expect_close(got, expected, what,
                         hint="dropout applies to the sublayer's output, before the residual sum: "
                              + _dropout_formula(norm_first),
                         mistakes={formula: got} if formula is not None else
                         _dropout_place_mistakes(x, N, S, norm_first))
    # p = 0.5, pre-norm: x is added back untouched, so out - x is dropout(sublayer(norm(x))) itself: each
    # value 0 or 2 * sublayer(norm(x)), about half of them 0 (a fixed rate, two dropouts, or no rescaling show
    # here)
    sc, N = _make_sc(SC, 16, 0.5, True, seed=6)
    sc.train()
    S = _Sublayer(16, 16)
    x = _sc_input(26, (4, 32, 16))
    what = "SublayerConnection(16, dropout=0.5, norm_first=True).train()(x, sublayer)"
    with torch.no_grad(), seeded(6):
        got = _call(sc, x, S, what)
        if got.shape == x.shape:
            s = S(N(x))
            valid = s.abs() > 1e-2  # away from 0, where float32 rounding blurs the ratio
            ratio = ((got - x).double() / s.double())[valid]  # 0 where dropped, 1 / (1 - p) = 2 where kept
            zero = ratio.abs() < 1e-3
            dropped = float(zero.double().mean())
            hint = None
            if bool((zero | ((ratio - 2).abs() < 1e-3)).all()) and not 0.4 <= dropped <= 0.6:
                hint = "the dropout argument is not used: self.dropout = nn.Dropout(dropout)"
            elif bool((zero | ((ratio - 4).abs() < 1e-3)).all()):
                hint = ("dropout applied twice (the sublayer's output went through dropout two times: 75% "
                        "dropped, the rest scaled by 4): apply self.dropout once")
            elif bool((zero | ((ratio - 1).abs() < 1e-3)).all()):
                hint = ("the kept values are not scaled by 1 / (1 - p), as nn.Dropout does: use "
                        "nn.Dropout(dropout) (or F.dropout(t, p, training=self.training))")
            if hint is not None:  # any other mismatch is named by the checks of the formula
                raise CheckFailure(f"{what}: the values added to x", "about 50% of sublayer(norm(x)) "
                                                                     "dropped, the rest "
                                   "scaled by 1 / (1 - 0.5) = 2", f"{dropped:.0%} dropped", hint)


@register("SublayerConnection", "dropout is off in eval mode")
def _sc_eval(SC):
    x = _sc_input(25)
    for norm_first in (False, True):
        sc, N = _make_sc(SC, 6, 0.5, norm_first, seed=5)
        sc.eval()
        S = _Sublayer(6, 15)
        what = f"SublayerConnection(6, dropout=0.5, norm_first={norm_first}).eval()(x, sublayer)"
        with torch.no_grad():
            first, second = _call(sc, x, S, what), _call(sc, x, S, what)
            expect_no_dropout_in_eval(first, second, what)
            expect_close(first, x + S(N(x)) if norm_first else N(x + S(x)), what,
                         mistakes=_sc_mistakes(x, N, S, norm_first),
                         hint="in eval mode: " + ("x + sublayer(norm(x))" if norm_first else "norm(x + "
                                                                                             "sublayer(x))"))
