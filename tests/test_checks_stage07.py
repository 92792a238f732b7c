"""Stage 07's checks: full marks for layer norms and residual connections however written; for each classic
mistake (unbiased variance, eps outside the sqrt, wrong dimension, post-/pre-norm confused, residual missing,
dropout on the sum, norm twice...), exactly the points it earns and the words that name it (the reference and
the stub: tests/test_registry.py)."""
import functools
import inspect
import timeit

import pytest
from torch import nn

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade, mistakes

LAYER_NORM, CONNECTION = solutions.LayerNorm, solutions.SublayerConnection


def _maker(ref, *changes):
    """A function of one argument: `ref` with `changes` (old, new), the argument in the braces of each new."""
    return lambda arg: edit(ref, *[(old, new.format(arg)) for old, new in changes])


def _written(ref, *forward, init=(), args="", methods=(), changes=()):
    """`ref` with forward's body written as the lines `forward` (the last one returns), __init__'s (after
    super().__init__()) as the lines `init`, `args` added after __init__'s parameters, the lines `methods`
    before forward, and other `changes`."""
    def indented(lines, by=8):
        return "".join(f"{' ' * by}{line}\n" for line in lines)
    src = inspect.getsource(ref)
    init_body, forward_body = [b[:b.index("        ### END SOLUTION")] for b in src.split("### BEGIN "
                                                                                          "SOLUTION\n")[1:]]
    signature = next(line for line in src.splitlines() if "def __init__(self" in line)
    more = [*changes, *[(init_body, indented(init))] * bool(init),
            *[(signature, signature.replace("):", f"{args}):"))]
            * bool(args), *[("    def forward", indented(methods, 4) + "\n    def forward")] * bool(methods)]
    return edit(ref, (forward_body, indented(forward)), *more)


_ln, _sc_written = functools.partial(_written, LAYER_NORM), functools.partial(_written, CONNECTION)


# ---------------------------------------------------------------- LayerNorm: correct, written differently
LAYER_NORM_STYLES = {
    "sums, rsqrt, addcmul": _ln("n = x.shape[-1]", "c = x - x.sum(-1, keepdim=True) / n",
                                "return torch.addcmul("
                                "self.bias, self.weight, c * torch.rsqrt(c.pow(2).sum(-1, keepdim=True) / n "
                                "+ self.eps))"),
    "biased std squared under the root": _ln(
        "std = x.std(-1, unbiased=False, keepdim=True)",
        "return self.weight * (x - x.mean(-1, keepdim=True)) / (std ** 2 + self.eps) ** 0.5 + self.bias"),
    "means by matmul, weight by einsum": _ln(
        "col = torch.full((x.size(-1), 1), 1.0 / x.size(-1), dtype=x.dtype)", "mu = x @ col",
        "var = (x - mu) ** 2 @ col",
        'return torch.einsum("...d,d->...d", (x - mu) / torch.sqrt(var + self.eps), self.weight) + '
        'self.bias'),
    "flattened to rows": _ln(
        "rows = x.reshape(-1, x.shape[-1])", "var, mean = torch.var_mean(rows, dim=1, unbiased=False, "
                                             "keepdim=True)",
        "return ((rows - mean) / (var + self.eps).sqrt()).reshape(x.shape) * self.weight + self.bias"),
    "std_mean": _ln("std, mean = torch.std_mean(x, -1, unbiased=False, keepdim=True)",
                    "return self.weight * (x - mean) / torch.sqrt(std ** 2 + self.eps) + self.bias"),
    "a loop over rows": _ln("rows = []", "for r in x.reshape(-1, x.shape[-1]):", "    m = r.mean()",
                            "    rows.append((r - m) / torch.sqrt(((r - m) ** 2).mean() + self.eps))",
                            "return torch.stack(rows).reshape(x.shape) * self.weight + self.bias"),
    "addcdiv": _ln("n = x.size(-1)", "mean = x.sum(-1, keepdim=True) / n",
                   "var = ((x - mean) ** 2).sum(-1, keepdim=True) / n",
                   "return torch.addcdiv(self.bias, self.weight * (x - mean), torch.sqrt(var + self.eps))"),
    "var_mean and rsqrt": _ln("var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)",
                              "return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias"),
    "E[x^2] - E[x]^2, eps kept in a buffer": _ln(
        "mean = x.mean(-1, keepdim=True)", "var = (x * x).mean(-1, keepdim=True) - mean ** 2",
        "return self.weight * (x - mean) / (var + self.eps).sqrt() + self.bias",
        init=['self.register_parameter("weight", nn.Parameter(torch.ones(d_model)))',
              'self.register_parameter("bias", nn.Parameter(torch.zeros(d_model)))',
              'self.register_buffer("eps", torch.tensor(eps))']),
    "float64 inside, back to x's dtype; an extra keyword argument with a default": _ln(
        "y = x.double()",
        "y = (y - y.mean(-1, keepdim=True)) / (y.var(-1, correction=0, keepdim=True) + self.eps).sqrt()",
        "return (y * self.weight.double() + "
        "self.bias.double()).to(x.dtype)", args=", elementwise_affine=True"),
    # torch.empty then reset_parameters(); einsum means; a keyword-only extra; **kwargs in forward
    "reset_parameters": _ln(
        'c = x - torch.einsum("...d->...", x)[..., None] / x.shape[-1]',
        'var = torch.einsum("...d,...d->...", c, c)[..., None] / x.shape[-1]',
        "return c * (var + self.variance_epsilon).rsqrt() * self.weight + self.bias", args=", *, bias=True",
        init=["self.variance_epsilon = eps", "self.weight = nn.Parameter(torch.empty(d_model))",
              "self.bias = nn.Parameter(torch.empty(d_model))", "self.reset_parameters()"],
        methods=["def reset_parameters(self):", "    nn.init.ones_(self.weight)",
                 "    nn.init.zeros_(self.bias)"],
        changes=[("forward(self, x: torch.Tensor)", "forward(self, x: torch.Tensor, **kwargs)")]),
}

# ---------------------------------------------------------------- LayerNorm: nn.LayerNorm doing the work
THE_WORK = [  # (the class, its points: only the functional one's own parameters earn theirs)
    pytest.param(type("LayerNormSubclass", (nn.LayerNorm,), {}), 0, id="subclass"),
    pytest.param(_ln("return self.inner(x)", init=["self.inner = nn.LayerNorm(d_model, eps=eps)",
                                                   "self.weight, self.bias = self.inner.weight, "
                                                   "self.inner.bias"]),
                 0, id="wrapper"),
    pytest.param(_ln("return nn.functional.layer_norm(x, self.weight.shape, self.weight, self.bias, "
                     "self.eps)"), 1,
                 id="functional"),
]


@pytest.mark.parametrize("cls,points", THE_WORK)
def test_pytorch_layer_norm_does_the_work_and_earns_nothing(cls, points):
    """The lesson teaches layer normalization: every check in which nn.LayerNorm or F.layer_norm does it earns
    nothing, and says why (only the functional one's own parameters earn their point); SublayerConnection may
    still use nn.LayerNorm (see the style "F.dropout, two branches as methods, nn.LayerNorm")."""
    got, text = grade(cls, "LayerNorm")
    assert got == points, text
    assert text.count("your code calls nn.LayerNorm (or F.layer_norm)") == text.count("✗") >= 4, text


# ---------------------------------------------------------------- LayerNorm: classic mistakes, one row each
_MEAN = "x.mean(dim=-1, keepdim=True)"
_VAR = "var = (centered ** 2).mean(dim=-1, keepdim=True)"
_RETURN = "return self.weight * centered / torch.sqrt(var + self.eps) + self.bias"


_ln_var, _ln_returns = _maker(LAYER_NORM, (_VAR, "var = {}")), _maker(LAYER_NORM, (_RETURN, "return {}"))
# divided by the argument
_ln_div = _maker(LAYER_NORM, (_RETURN, "return self.weight * centered / {} + self.bias"))
# over other dims
_ln_over = _maker(LAYER_NORM, (_MEAN, "x.mean({})"), (_VAR, "var = (centered ** 2).mean({})"))
UNBIASED = _ln_var("x.var(dim=-1, keepdim=True)")
RMS_NORM = edit(LAYER_NORM, (f"centered = x - {_MEAN}", "centered = x"))  # x / sqrt(mean(x^2) + eps)
LAYER_NORM_MISTAKES = [
    # the variance and eps
    Mistake("unbiased variance", UNBIASED, 2, "unbiased variance"),
    Mistake("x.std() + eps (the Annotated Transformer)", _ln_div("(x.std(-1, keepdim=True) + self.eps)"), 2,
            ("eps outside the square root", "unbiased std")),
    Mistake("eps outside the sqrt", _ln_div("(torch.sqrt(var) + self.eps)"), 2,
            "eps added outside the square root"),
    Mistake("eps after the division", _ln_returns("self.weight * (centered / torch.sqrt(var) + self.eps) + "
                                                  "self.bias"),
            1, "eps added after the division"),
    Mistake("no eps", _ln_div("torch.sqrt(var)"), 1, ("eps ignored", "NaN")),
    Mistake("eps fixed at 1e-5", _ln_div("torch.sqrt(var + 1e-5)"), 4, "eps fixed at 1e-5"),
    Mistake("eps default 1e-6", edit(LAYER_NORM, ("eps: float = 1e-5", "eps: float = 1e-6")), 3,
            "eps of 1e-6"),
    Mistake("divided by the variance", _ln_div("(var + self.eps)"), 2,
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
            edit(LAYER_NORM, (f"centered = x - {_MEAN}", f"mean = {_MEAN}.squeeze(-1)\n        centered = x "
                                                         "- mean"),
                 ("# (..., d_model): x - mu", "")),
            1, "`centered = x - mean`), with x (2, 4, 8), mean (2, 4)", not_says="lost its dimension"),
    Mistake("x centred in place",
            edit(LAYER_NORM, (f"centered = x - {_MEAN}", f"x -= {_MEAN}\n        centered = x")),
            1, ("changed in place", "x = x - mean")),
    # the dimension
    Mistake("over the positions", _ln_over("-2, keepdim=True"), 2, "dim=-2"),
    Mistake("over dim 1", _ln_over("1, keepdim=True"), 2, ("dim=-2", "normalized over dim 1 instead")),
    Mistake("over the batch", _ln_over("0, keepdim=True"), 1, "dim 0"),
    Mistake("over the whole tensor", _ln_over(""), 1, "whole tensor"),
    # weight and bias
    Mistake("bias forgotten", _ln_returns("self.weight * centered / torch.sqrt(var + self.eps)"), 1,
            "the bias is not added"),
    Mistake("bias inside the product", _ln_returns("self.weight * (centered / torch.sqrt(var + self.eps) + "
                                                   "self.bias)"),
            1, "the bias inside the product"),
    Mistake("gamma and beta",
            edit(LAYER_NORM, ("self.weight = ", "self.gamma = "), ("self.bias = ", "self.beta = "),
                                   (_RETURN, "return self.gamma * centered / torch.sqrt(var + self.eps) + "
                                             "self.beta")),
            0, ("named weight and bias", "gamma")),
    Mistake("plain tensors", edit(LAYER_NORM, *[(f"nn.Parameter(torch.{f}(d_model))",
                                                 f"torch.{f}(d_model, requires_grad=True)")
                                                for f in ("ones", "zeros")]), 4, "nn.Parameter"),
    Mistake("random initial weight", edit(LAYER_NORM, ("torch.ones(d_model)", "torch.randn(d_model)")), 4,
            "ones and zeros"),
    # right values, no training through them: only the gradient point is lost
    Mistake("in numpy", _ln("import numpy as np", "a = x.detach().numpy().astype(np.float64)",
                            "xhat = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + "
                            "self.eps)",
                            "return torch.from_numpy(xhat).to(x.dtype) * self.weight + self.bias"), 4,
            ("gradient", "left autograd")),
    Mistake("in place on its own tensors", _ln("y = x - x.mean(-1, keepdim=True)",
                                               "y.div_(y.pow(2).mean(-1, "
                                               "keepdim=True).add(self.eps).sqrt_())",
                                               "return y.mul_(self.weight).add_(self.bias)"), 4,
            ("backward()", "in-place")),
    # the output's dtype is x's, as nn.LayerNorm's
    Mistake("float64 parameters",
            edit(LAYER_NORM, *[(f"torch.{f}(d_model)", f"torch.{f}(d_model, dtype=torch.float64)")
                                                     for f in ("ones", "zeros")]), 4,
            ("dtype", "parameters were made torch.float64")),
    Mistake("input cast to float32", edit(LAYER_NORM, (f"centered = x - {_MEAN}",
                                                       f"x = x.float()\n        centered = x - {_MEAN}")), 4,
            ("x of dtype torch.float64", "the input is cast"), not_says="parameters were made"),
    Mistake("detached mean and variance",
            edit(LAYER_NORM, (_MEAN, f"{_MEAN}.detach()"), (_VAR, f"{_VAR}.detach()")), 4,
            ("gradient", "with respect to x", "detached mean or variance")),
]


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


# ----------------------------------------------------------- SublayerConnection: correct, written differently
# other names
_OWN = ["self.norm = LayerNorm(d_model)", "self.drop = nn.Dropout(dropout)", "self.pre = norm_first"]
_HAND_DROPOUT = ["def dropped(self, t):", "    if not self.training or self.p == 0:", "        return t",
                 "    if self.p >= 1:", "        return torch.zeros_like(t)",
                 "    return t * (torch.rand_like(t) >= self.p).to(t.dtype) / (1 - self.p)"]


class SublayerResidualFirst(nn.Module):  # the residual kept in a variable, the learner's own LayerNorm class
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.norm = LAYER_NORM_STYLES["var_mean and rsqrt"](d_model)
        self.drop = nn.Dropout(p=dropout)

    def forward(self, x, sublayer):
        residual = x
        if self.norm_first:
            x = self.norm(x)
        x = residual + self.drop(sublayer(x))
        if not self.norm_first:
            x = self.norm(x)
        return x


# Graded apart from its LayerNorm: on a broken one it still gets full marks (the checks swap in nn.LayerNorm)
class SublayerOnBrokenNorm(solutions.SublayerConnection):
    def __init__(self, d_model, dropout=0.1, norm_first=False):
        super().__init__(d_model, dropout, norm_first)
        self.norm = UNBIASED(d_model)


CONNECTION_STYLES = {
    "extra arguments": _sc_written(
        "y = self.dropout(sublayer(self.norm(x) if self.norm_first else x, *args, **kwargs))",
        "return x + y if self.norm_first else self.norm(x + y)",
        changes=[("sublayer) ->", "sublayer, *args, **kwargs) ->")]),
    "adds in place to its output": _sc_written("out = self.dropout(sublayer(self.norm(x) if self.norm_first "
                                               "else x))",
                                               "out += x",
                                               "return out if self.norm_first else self.norm(out)"),
    "norm.forward and a stacked sum": _sc_written(
        "if self.norm_first:", "    return x + self.dropout(sublayer(self.norm.forward(x)))",
        "return self.norm.forward(torch.stack([x, self.dropout(sublayer(x))]).sum(0))"),
    # the sublayer's input chosen first, one residual sum, the norm last only in post-norm; extra keywords
    "one expression": _sc_written("out = x + self.drop(sublayer(self.norm(x) if self.pre else x))",
                                  "return out if self.pre else self.norm(out)", init=_OWN,
                                  changes=[("sublayer) ->", "sublayer, **kwargs) ->")]),
    # F.dropout with the training flag, two branches as methods, PyTorch's nn.LayerNorm as the norm
    "F.dropout, two branches as methods, nn.LayerNorm": _sc_written(
        "return (self._pre if self.pre else self._post)(x, sublayer)",
        init=["self.norm = nn.LayerNorm(d_model)", "self.p, self.pre = dropout, norm_first"],
        methods=["def _post(self, x, sublayer):",
                 "    return self.norm(x + nn.functional.dropout(sublayer(x), self.p, self.training))", "",
                 "def _pre(self, x, sublayer):",
                 "    return x + nn.functional.dropout(sublayer(self.norm(x)), self.p, self.training)"]),
    "residual first": SublayerResidualFirst,
    "the norm kept as self.ln too, used through `norm`": _sc_written(
        "return x + self.dropout(sublayer(self.norm(x))) if self.norm_first else "
        "self.norm(x + self.dropout(sublayer(x)))", init=[
            "self.ln = LayerNorm(d_model)",
            "self.norm, self.dropout, self.norm_first = self.ln, nn.Dropout(dropout), norm_first"]),
    # dropout written by hand: a Bernoulli keep-mask and the 1 / (1 - p) rescaling
    "hand-written dropout": _sc_written("if self.pre:", "    return x + self.dropped(sublayer(self.norm(x)))",
                                        "return self.norm(x + self.dropped(sublayer(x)))",
                                        init=[*_OWN, "self.p = dropout"], methods=_HAND_DROPOUT),
    "keyword-only flag": _sc_written(
        "if self.pre_norm:", "    return torch.add(x, self.dropout(sublayer(self.norm(x))))",
        "return self.norm(x.add(self.dropout(sublayer(x))))",
        init=["self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), nn.Dropout(dropout), "
              "norm_first"],
        changes=[("dropout: float = 0.1, norm_first", "dropout: float = 0.1, *, norm_first")]),
    "two strategies": _sc_written(
        "return self.mode(x, sublayer, self.norm, self.drop)",
        init=["self.norm, self.drop = LayerNorm(d_model), nn.Dropout(dropout)",
              "self.mode = self._Pre() if norm_first else self._Post()"],
        methods=["class _Post(nn.Module):", "    def forward(self, x, sub, norm, drop):",
                 "        return norm(x + drop(sub(x)))", "", "class _Pre(nn.Module):",
                 "    def forward(self, x, sub, norm, drop):", "        return x + drop(sub(norm(x)))"]),
    "Bernoulli dropout": _sc_written(
        "s = sublayer(self.norm(x) if self.norm_first else x)", "if self.training and self.p > 0:",
        "    s = s * torch.empty_like(s).bernoulli_(1 - self.p) / (1 - self.p) if self.p < 1 else s * 0",
        "return x + s if self.norm_first else self.norm(x + s)",
        init=["self.norm, self.p, self.norm_first = nn.LayerNorm(d_model), dropout, norm_first"]),
    "on a broken norm": SublayerOnBrokenNorm,
}
CORRECT = [pytest.param(contract, cls, id=f"{contract}: {style}") for contract, styles in [
    ("LayerNorm",
     LAYER_NORM_STYLES), ("SublayerConnection", CONNECTION_STYLES)] for style, cls in styles.items()]


@pytest.mark.parametrize("contract,cls", CORRECT)
def test_other_correct_styles(contract, cls):
    assert_full_marks(cls, contract)


# --------------------------------------------------------- SublayerConnection: classic mistakes, one row each
AS_PRE, AS_POST = "x + self.dropout(sublayer(self.norm(x)))", "self.norm(x + self.dropout(sublayer(x)))"


def _sc(pre=None, post=None, *more):
    """The reference with the pre-norm and/or the post-norm branch returning other expressions."""
    both = f"return {pre or AS_PRE}\n        return {post or AS_POST}"
    return edit(CONNECTION, (f"return {AS_PRE}\n        return {AS_POST}", both), *more)


def _both(sum_):
    """The reference with both branches returning `sum_`, the sublayer's input in its braces (post-norm:
    normed)."""
    return _sc(sum_.format("self.norm(x)"), f"self.norm({sum_.format('x')})")


# run first
_sc_first = _maker(CONNECTION, ("        if self.norm_first:", "        {}\n        if self.norm_first:"))
NORM_TWICE = "self.norm(x + self.dropout(sublayer(self.norm(x))))"
POST_NOT_PRE, PRE_NOT_POST = "post-norm instead of pre-norm", "pre-norm instead of post-norm"
_BY_DROPOUT_CHECK = dict(title="dropout on the sublayer's output only", not_says="norm_first flag")
RESIDUAL_FROM_NORMED = _sc("x + self.dropout(sublayer(x))", None,
                           ("if self.norm_first:", "if self.norm_first:\n"
                                                                   "            x = self.norm(x)"))
CONNECTION_MISTAKES = [
    # a part the checks replace: its own norm built with another eps (the checks put nn.LayerNorm in its
    # place)
    Mistake("its own norm with eps=1e-6", edit(CONNECTION, ("self.norm = LayerNorm(d_model)",
                                                            "self.norm = LayerNorm(d_model, eps=1e-6)")), 5,
            ("with its own norm", "eps=1e-06", "LayerNorm(d_model)")),
    Mistake("its own nn.LayerNorm with eps=1e-12", edit(CONNECTION, ("self.norm = LayerNorm(d_model)",
                                                                     "self.norm = nn.LayerNorm(d_model, "
                                                                     "eps=1e-12)")),
            5, ("with its own norm", "another eps")),
    # post-norm and pre-norm
    Mistake("norm_first ignored (always post-norm)", _sc(pre=AS_POST), 2, (POST_NOT_PRE, "norm_first")),
    Mistake("norm_first ignored (always pre-norm)", _sc(post=AS_PRE), 2, (PRE_NOT_POST, "norm_first")),
    Mistake("norm_first reversed", _sc(AS_POST, AS_PRE), 1, (PRE_NOT_POST, POST_NOT_PRE)),
    Mistake("norm_first defaults to True",
            edit(CONNECTION, ("norm_first: bool = False", "norm_first: bool = True")),
            5, PRE_NOT_POST),
    Mistake("norm applied twice", _sc(NORM_TWICE, NORM_TWICE), 1, "norm is applied twice"),
    Mistake("pre-norm residual from norm(x)", RESIDUAL_FROM_NORMED, 3, "residual adds norm(x) instead of x"),
    Mistake("post-norm: norm(x) + sublayer(x)", _sc(post="self.norm(x) + self.dropout(sublayer(x))"), 4,
            "the norm is applied to x, not to the sum"),
    Mistake("norm under another name",
            _sc("x + self.dropout(sublayer(self.layer_norm(x)))", "self.layer_norm(x + "
                                                                  "self.dropout(sublayer(x)))",
                ("self.norm = LayerNorm(d_model)", "self.layer_norm = nn.LayerNorm(d_model)")), 0,
            "attribute `norm`"),
    # the residual
    Mistake("residual missing", _both("self.dropout(sublayer({}))"), 2, "residual is missing"),
    Mistake("x += ... in place", _both("x.add_(self.dropout(sublayer({})))"), 0, "changed in place"),
    # the dropout
    Mistake("no dropout", _both("x + sublayer({})"), 5, "dropout not applied"),
    Mistake("dropout on the residual sum", _both("self.dropout(x + sublayer({}))"), 5,
            "dropout applied to the residual sum"),
    Mistake("dropout on x as well", _both("self.dropout(x) + self.dropout(sublayer({}))"), 5,
            "dropout applied to the residual sum (or to x itself)"),
    Mistake("dropout after the norm", _sc(post="self.dropout(self.norm(x + sublayer(x)))"), 5,
            "dropout applied after the norm"),
    Mistake("dropout on the sublayer's input", _both("x + sublayer(self.dropout({}))"), 5,
            "dropout applied to the sublayer's input"),
    Mistake("dropout applied twice", _both("x + self.dropout(self.dropout(sublayer({})))"), 5,
            "dropout applied twice"),
    Mistake("dropout on in eval mode", _both("x + nn.functional.dropout(sublayer({}), self.dropout.p, "
                                             "training=True)"),
            5, "dropout still acts in eval mode"),
    Mistake("dropout rate fixed at 0.1", edit(CONNECTION, ("nn.Dropout(dropout)", "nn.Dropout(0.1)")), 5,
            "dropout argument is not used"),
    Mistake("hand-written dropout without 1/(1-p)", edit(CONNECTION_STYLES["hand-written dropout"],
                                                         (" / (1 - self.p)\n", "\n")), 5,
            "not scaled by 1 / (1 - p)"),
    # the sublayer
    Mistake("sublayer called twice", _sc_first("shape = sublayer(x).shape  # a look costs a whole call"), 5,
            ("calls of the sublayer", "call the sublayer once")),
    # the sublayer of the first call kept in self and used ever after (in a decoder: the first call's mask)
    Mistake("the first sublayer kept", _sc_first('if not hasattr(self, "_sub"):\n            self._sub = '
                                                 'sublayer\n'
                                                 "        sublayer = self._sub"), 5,
            "use the sublayer passed to this call"),
    # right values, no training through them: only the gradient point is lost
    Mistake("sublayer given x.detach()", _sc(post="self.norm(x + self.dropout(sublayer(x.detach())))"), 5,
            ("gradient", "with respect to x", "x.detach()")),
    Mistake("pre-norm: norm(x) detached", _sc(pre="x + self.dropout(sublayer(self.norm(x).detach()))"), 5,
            ("with respect to x", "no gradient reaches the norm")),
    # the dropout check names the formula, not the flag
    Mistake("pre-norm normalizes the sum too", _sc(pre=NORM_TWICE), 0, "norm is applied twice",
            **_BY_DROPOUT_CHECK),
    Mistake("pre-norm residual from norm(x), the dropout check", RESIDUAL_FROM_NORMED, 0,
            "residual adds norm(x) instead of x", **_BY_DROPOUT_CHECK),
]
ROWS = [pytest.param(*p.values, id=f"{contract}: {p.id}") for contract, table in [
    ("LayerNorm",
     LAYER_NORM_MISTAKES), ("SublayerConnection", CONNECTION_MISTAKES)] for p in mistakes(contract, table)]


@pytest.mark.parametrize("m", ROWS)
def test_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- speed
def test_checks_are_fast_on_the_reference():
    from autograder import REGISTRY
    for name in ("LayerNorm", "SublayerConnection"):
        for c in REGISTRY[name]:
            best = min(timeit.repeat(lambda c=c, name=name: c.fn(getattr(solutions, name)), number=1,
                                     repeat=2))
            assert best < 1.0, f"{name}: {c.title} takes {best:.2f} s"
