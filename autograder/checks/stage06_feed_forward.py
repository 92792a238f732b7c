"""Stage 06: the position-wise feed-forward network, against the paper's formula written out with the
learner's own weights, FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, and dropout between the two layers."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import CheckFailure, register
from ._util import (
    as_module,
    as_tensor,
    build,
    close,
    expect_all_dropped,
    expect_close,
    expect_no_dropout_in_eval,
    expect_shape,
    seeded,
)


def _make(FFN, d_model=6, d_ff=10, dropout=0.0, seed=0):
    ffn = build(FFN, d_model, d_ff, dropout=dropout,
                what=f"PositionwiseFeedForward({d_model}, {d_ff}, dropout={dropout})")
    as_module(ffn, "PositionwiseFeedForward")
    w_1, w_2 = _linears(ffn, d_model, d_ff)
    with seeded(seed), torch.no_grad():  # random weights and biases, whatever the learner's initialisation
        for lin in (w_1, w_2):
            lin.weight.normal_(0, 0.5)
            lin.bias.normal_(0, 0.5)
    return ffn


def _linears(ffn, d_model, d_ff):
    out = []
    for name, (fan_in, fan_out) in (("w_1", (d_model, d_ff)), ("w_2", (d_ff, d_model))):
        lin = getattr(ffn, name, None)
        what = f"PositionwiseFeedForward({d_model}, {d_ff}).{name}"
        if not isinstance(lin, nn.Linear):
            raise CheckFailure(what, f"an nn.Linear({fan_in}, {fan_out})",
                               type(lin).__name__ if lin is not None else "no such attribute",
                               "name the two layers w_1 and w_2 (nn.Linear), as in the contract")
        if tuple(lin.weight.shape) != (fan_out, fan_in):
            got_in, got_out = lin.weight.shape[1], lin.weight.shape[0]
            raise CheckFailure(what, f"nn.Linear({fan_in}, {fan_out}) (weight of shape {(fan_out, fan_in)})",
                               f"nn.Linear({got_in}, {got_out})",
                               "w_1 and w_2 have the wrong shapes: w_1 = nn.Linear(d_model, d_ff) widens, "
                               "w_2 = nn.Linear(d_ff, d_model) narrows back (d_model -> d_ff -> d_model)")
        if lin.bias is None:
            raise CheckFailure(f"{what}.bias", "a bias", "None",
                               "FFN(x) = max(0, x W_1 + b_1) W_2 + b_2: keep the biases (bias=True)")
        out.append(lin)
    return out


def _parts(ffn):
    return ((ffn.w_1.weight.detach(), ffn.w_1.bias.detach()),
            (ffn.w_2.weight.detach(), ffn.w_2.bias.detach()))


def _formula(ffn, x):
    (W1, b1), (W2, b2) = _parts(ffn)
    return F.relu(x @ W1.T + b1) @ W2.T + b2  # (..., d_model) -> (..., d_ff) -> (..., d_model)


def _mistakes(ffn, x):
    (W1, b1), (W2, b2) = _parts(ffn)
    l1 = lambda t: t @ W1.T + b1  # noqa: E731
    l2 = lambda t: t @ W2.T + b2  # noqa: E731
    return {
        "GELU instead of ReLU: the paper's FFN uses max(0, .) = torch.relu": l2(F.gelu(l1(x))),
        "GELU (tanh approximation) instead of ReLU: the paper's FFN uses torch.relu":
            l2(F.gelu(l1(x), approximate="tanh")),
        "the activation is after w_2 instead of between the layers: w_2(relu(w_1(x)))": F.relu(l2(l1(x))),
        "the activation is after both layers: only between them, "
        "w_2(relu(w_1(x)))": F.relu(l2(F.relu(l1(x)))),
        "the activation is before w_1 instead of between the layers: w_2(relu(w_1(x)))": l2(l1(F.relu(x))),
        "no activation: without relu the two layers collapse into one linear map": l2(l1(x)),
        "a capped activation (relu6 or clamp(0, 6)) instead of relu: max(0, .) has no upper limit":
            l2(F.relu6(l1(x))),
        "LeakyReLU instead of ReLU: the paper's max(0, .) sets every negative value to 0, torch.relu":
            l2(F.leaky_relu(l1(x))),
        "tanh instead of ReLU: the paper's FFN uses max(0, .) = torch.relu": l2(torch.tanh(l1(x))),
        "sigmoid instead of ReLU: the paper's FFN uses max(0, .) = torch.relu": l2(torch.sigmoid(l1(x))),
        "SiLU (swish) instead of ReLU: the paper's FFN uses max(0, .) = torch.relu": l2(F.silu(l1(x))),
        "softplus instead of ReLU: the paper's FFN uses max(0, .) = torch.relu": l2(F.softplus(l1(x))),
        "the input x is added to the output: the FFN returns w_2(relu(w_1(x))) alone; the residual "
        "connection is SublayerConnection's work (stage 07)": x + l2(F.relu(l1(x))),
        "the biases are missing: use the layers themselves, self.w_1(x) and self.w_2(h) (or add b_1 and b_2)":
            F.relu(x @ W1.T) @ W2.T,
    }


def _forward(ffn, x, what):
    """ffn(a copy of x): the check's own x stays intact whatever the network does to its input."""
    return as_tensor(_run(ffn, x.clone(), what), what)


def _run(ffn, x, what):
    """ffn(x), a shape error from layers used the wrong way round explained."""
    try:
        return ffn(x)
    except RuntimeError as e:
        if "cannot be multiplied" not in str(e):
            raise
        raise CheckFailure(what, "an output of the input's shape", f"RuntimeError: {str(e)[:90]}",
                           "w_1 takes x (d_model -> d_ff) and w_2 takes the hidden layer (d_ff -> d_model): "
                           "w_2(dropout(relu(w_1(x)))), in that order") from None


@register("PositionwiseFeedForward", "w_1 = nn.Linear(d_model, d_ff), w_2 = nn.Linear(d_ff, d_model), with "
                                     "biases")
def _ffn_attributes(FFN):
    ffn = build(FFN, 6, 10, what="PositionwiseFeedForward(6, 10)")  # dropout has a default
    _linears(ffn, 6, 10)
    params = {id(p) for p in ffn.parameters()}
    if id(ffn.w_1.weight) not in params or id(ffn.w_2.weight) not in params:
        raise CheckFailure("PositionwiseFeedForward(6, 10).parameters()", "w_1's and w_2's weights",
                           "missing",
                           "assign the layers as attributes after super().__init__()")


@register("PositionwiseFeedForward", "equals w_2(relu(w_1(x))) (the paper's formula) in eval mode, gradients "
                                     "too")
def _ffn_formula(FFN):
    ffn = _make(FFN, 6, 10, dropout=0.0, seed=1).eval()
    with seeded(11):
        x = torch.randn(2, 4, 6) * 4  # hidden values well above 6: a capped activation (relu6, clamp) shows
    what = "PositionwiseFeedForward(6, 10)(x), x of shape (2, 4, 6)"
    arg = x.clone()
    with torch.no_grad():
        got = as_tensor(_run(ffn, arg, what), what)
        expect_close(got, _formula(ffn, x), what, hint="w_2(dropout(relu(w_1(x))))",
                     mistakes=_mistakes(ffn, x))
    if not torch.equal(arg, x):
        raise CheckFailure(f"x after {what}", "unchanged", "changed",
                           "x was modified in place (relu_, an inplace=True module or x += ... applied to "
                           "x): the caller still needs its x; the layers make new tensors")
    ffn.zero_grad(set_to_none=True)
    out = ffn(x.clone())
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        raise CheckFailure(f"{what}.requires_grad", "True (the output depends on w_1 and w_2)", "False",
                           "the computation left autograd (.detach(), .data, torch.no_grad() or numpy inside "
                           "forward): keep to torch operations on the layers' own tensors so that training "
                           "reaches w_1 and w_2")
    out.sum().backward()
    (W1, b1), (W2, b2) = _parts(ffn)
    ref = [p.detach().clone().requires_grad_() for p in (W1, b1, W2, b2)]
    (F.relu(x @ ref[0].T + ref[1]) @ ref[2].T + ref[3]).sum().backward()
    for name, param, r in zip(("w_1.weight", "w_1.bias", "w_2.weight", "w_2.bias"),
                              (ffn.w_1.weight, ffn.w_1.bias, ffn.w_2.weight, ffn.w_2.bias), ref):
        if param.grad is None:
            raise CheckFailure(f"the gradient of {name} after backward()", "a gradient", "None",
                               f"{name} does not take part in the output's computation graph (.detach(), "
                               ".data or a copy of the weights): use the layers themselves, self.w_1(x) and "
                               "self.w_2(h)")
        expect_close(param.grad, r.grad, f"the gradient of {name} after {what}.sum().backward()",
                     hint="let autograd differentiate w_2(relu(w_1(x))): no detached or copied tensors in "
                          "forward")


@register("PositionwiseFeedForward", "acts on each position alone: the same network at every position")
def _ffn_positionwise(FFN):
    ffn = _make(FFN, 4, 8, dropout=0.0, seed=2).eval()
    with seeded(12):
        x = torch.randn(3, 5, 4)
    with torch.no_grad():
        full = _forward(ffn, x, "PositionwiseFeedForward(4, 8)(x), x of shape (3, 5, 4)")
        expect_close(full, _formula(ffn, x), "PositionwiseFeedForward(4, 8)(x), x of shape (3, 5, 4)",
                     hint="w_2(relu(w_1(x))), applied to the last dimension", mistakes=_mistakes(ffn, x))
        one = _forward(ffn, x[:, 2:3], "PositionwiseFeedForward(4, 8)(x[:, 2:3]), one position per sentence")
        expect_close(one, full[:, 2:3], "the output for position 2 alone, x[:, 2:3] of shape (3, 1, 4)",
                     hint="each position goes through the same network on its own: nothing mixes positions")
        flat = _forward(ffn, x.reshape(15, 1, 4), "PositionwiseFeedForward(4, 8)(x.reshape(15, 1, 4))")
        expect_close(flat, full.reshape(15, 1, 4), "the output for the 15 positions as a batch of shape (15, "
                                                   "1, 4)",
                     hint="the network must not depend on the batch or length dimensions")


@register("PositionwiseFeedForward", "dropout sits between relu and w_2 (train mode, p=1 leaves w_2.bias)")
def _ffn_dropout_place(FFN):
    ffn = _make(FFN, 6, 10, dropout=1.0, seed=3)
    with seeded(13):
        x = torch.randn(2, 3, 6)
    (W1, b1), (W2, b2) = _parts(ffn)
    what = "PositionwiseFeedForward(6, 10, dropout=1.0).train()(x)"
    with torch.no_grad():
        evaluated = _forward(ffn.eval(), x, "PositionwiseFeedForward(6, 10, dropout=1.0).eval()(x)")
        right_in_eval = close(evaluated, _formula(ffn, x))
        ffn.train()
        got = _forward(ffn, x, what)
        finite = not (isinstance(got, torch.Tensor) and got.shape == (2, 3, 6) and
                      not torch.isfinite(got).all())
        if finite:  # a hand-written dropout, h * keep / (1 - p), is 0/0 at p = 1: judged at p = 0.5 alone
            expect_all_dropped(got, b2.expand(2, 3, 6), lambda: _forward(ffn, x, what), 14, what,
                               "hidden unit")
            # p = 1 zeroes every hidden unit, so w_2 sees zeros and returns its bias at every position
            mistakes = {"dropout after w_2 instead of between relu and w_2: w_2(dropout(relu(w_1(x))))":
                            torch.zeros(2, 3, 6),
                        "dropout on the input, before w_1, instead of between relu and w_2":
                            (F.relu(b1) @ W2.T + b2).expand(2, 3, 6),
                        "dropout not applied in train mode: w_2(dropout(relu(w_1(x)))) with "
                        "self.dropout = nn.Dropout(dropout)": _formula(ffn, x)}
            expect_close(got, b2.expand(2, 3, 6), what, mistakes=mistakes if right_in_eval else None,
                         hint="w_2(dropout(relu(w_1(x)))): dropout on the hidden layer" if right_in_eval else
                         "the network is not w_2(dropout(relu(w_1(x)))) (see the check of the formula in "
                         "eval mode)")
    _dropout_place_half(FFN)


def _undo_w2(W2, b2, out):
    """The hidden layer (rows, d_ff) that w_2 turned into `out` (..., d_model), by least squares (d_model
    > d_ff)."""
    return torch.linalg.lstsq(W2.double(), (out.double() - b2.double()).reshape(-1, W2.shape[0]).T).solution.T


def _dropout_place_half(FFN):
    """Dropout's place and kind at p = 0.5, with d_model > d_ff so that w_2 can be undone: the hidden layer
    that w_2 was given must hold, unit by unit, 0 or 2 * relu(w_1(x)) (nn.Dropout's keep-and-rescale), with a
    mask drawn afresh for every value."""
    ffn = _make(FFN, 12, 4, dropout=0.5, seed=3).train()
    with seeded(13):
        x = torch.randn(4, 8, 12)
    (W1, b1), (W2, b2) = _parts(ffn)
    what = "PositionwiseFeedForward(12, 4, dropout=0.5).train()(x)"
    with torch.no_grad(), seeded(15):
        got = expect_shape(_forward(ffn, x, what), (4, 8, 12), what)
    if not torch.isfinite(got).all():
        raise CheckFailure(f"{what}: {(~torch.isfinite(got)).sum().item()} values are NaN or inf",
                           "finite values", "NaN or inf", "dropout: keep each value with probability 1 - p "
                                                          "and scale it by 1 / (1 - p); nn.Dropout(dropout) "
                                                          "does it (and gives zeros at p = 1)")
    hidden = _undo_w2(W2, b2, got)  # (32, 4)
    # compared with the network's own hidden layer in eval mode (so that a wrong activation, graded by the
    # formula checks, does not count twice here), or with relu(w_1(x)) when eval mode is itself random
    h = F.relu(x @ W1.T + b1).reshape(-1, 4).double()
    with torch.no_grad():
        ffn.eval()
        first, second = _forward(ffn, x, what), _forward(ffn, x, what)
    if first.shape == (4, 8, 12) and torch.isfinite(first).all() and torch.equal(first, second):
        own = _undo_w2(W2, b2, first)
        if ((own @ W2.double().T + b2.double()).reshape(4, 8, 12) - first.double()).abs().max() > 1e-3:
            return  # not of the form w_2(hidden) in eval mode (e.g. x added): the formula checks say so
        h = own
    if ((hidden @ W2.double().T + b2.double()).reshape(4, 8, 12) - got.double()).abs().max() > 1e-3:
        raise CheckFailure(what, "w_2 applied to the hidden layer with dropout on it",
                           "an output that w_2 cannot give",
                           "w_2(dropout(relu(w_1(x)))): dropout between relu and w_2, not after w_2")
    tol = 1e-3 * (1 + h.abs())
    live = h.abs() > 1e-3  # where the hidden unit is not 0: kept or dropped shows
    if bool((hidden[~live].abs() > (2 * h.abs() + tol)[~live]).any()):
        raise CheckFailure(what, "w_2 applied to relu(w_1(x)) with each hidden unit dropped (0) or doubled",
                           "something else", "w_2(dropout(relu(w_1(x)))): dropout on the hidden layer only, "
                                             "between relu and w_2 (not on the input x too)")
    _dropped_or_doubled(what, hidden, h, tol, live)


def _dropped_or_doubled(what, hidden, h, tol, live):
    """_dropout_place_half's last part: each live hidden unit dropped (0) or doubled, with a fresh mask per
    value; else the likely mistake (one mask for all positions, dropout twice, no rescaling)."""
    ratio, slack = hidden[live] / h[live], (tol / h.abs().clamp_min(1e-3))[live]
    dropped = ratio.abs() <= slack

    def only(k):
        return bool((dropped | ((ratio - k).abs() <= slack * (1 + k))).all())
    if only(2.0) and bool(dropped.any()) and not bool(dropped.all()):
        kept = (hidden.abs() > tol).reshape(32, 4)
        same = all(bool(kept[live.reshape(32, 4)[:, j],
                             j].all() | (~kept[live.reshape(32, 4)[:, j], j]).all())
                   for j in range(4))
        if same:
            raise CheckFailure(what, "a fresh dropout mask for every value",
                               "the same units dropped at every position",
                               "one mask of shape (d_ff,) shared by all positions: nn.Dropout draws one for "
                               "each value, rand_like(h)")
        return
    if only(4.0) and bool(dropped.any()):
        hint = ("dropout applied twice (75% dropped, the rest scaled by 4): apply self.dropout once, to the "
                "hidden layer")
    elif only(1.0) and bool(dropped.any()):
        hint = ("the kept values are not scaled by 1 / (1 - p), as nn.Dropout does: use nn.Dropout(dropout) "
                "(or F.dropout(h, p, training=self.training))")
    else:
        hint = ("w_2(dropout(relu(w_1(x)))): dropout on the hidden layer only, between relu and w_2 (not on "
                "the input x, and once)")
    raise CheckFailure(what, "w_2 applied to relu(w_1(x)) with each hidden unit dropped (0) or doubled",
                       "something else", hint)


@register("PositionwiseFeedForward", "dropout is off in eval mode and random in train mode, backward() works")
def _ffn_dropout_modes(FFN):
    ffn = _make(FFN, 6, 10, dropout=0.5, seed=4)
    with seeded(14):
        x = torch.randn(4, 5, 6)
    what = "PositionwiseFeedForward(6, 10, dropout=0.5).eval()(x)"
    with torch.no_grad():
        ffn.eval()
        first, second = _forward(ffn, x, what), _forward(ffn, x, what)
        expect_no_dropout_in_eval(first, second, what)
        expect_close(first, _formula(ffn, x), what, hint="in eval mode: w_2(relu(w_1(x))), no dropout",
                     mistakes=_mistakes(ffn, x))
        ffn.train()
        with seeded(15):
            a = _forward(ffn, x, "PositionwiseFeedForward(6, 10, dropout=0.5).train()(x)")
            b = _forward(ffn, x, "PositionwiseFeedForward(6, 10, dropout=0.5).train()(x)")
    expect_shape(a, (4, 5, 6), "PositionwiseFeedForward(6, 10, dropout=0.5).train()(x), x of shape (4, 5, 6)")
    expect_shape(b, (4, 5, 6), "PositionwiseFeedForward(6, 10, dropout=0.5).train()(x), x of shape (4, 5, 6)")
    if torch.allclose(a, b):
        raise CheckFailure("two calls in train mode with dropout=0.5", "different (random) outputs",
                           "the same output" + (", equal to the formula without dropout"
                                                if torch.allclose(a, _formula(ffn, x)) else ""),
                           "the dropout argument is not used: self.dropout = nn.Dropout(dropout), applied in "
                           "forward")
    _expect_backward_in_train_mode(ffn, x)


IN_PLACE_DROPOUT = ("an in-place dropout after relu (nn.Dropout(p, inplace=True), F.dropout(..., "
                    "inplace=True) or h *= mask) overwrote relu's output, which backward needs: use "
                    "nn.Dropout(p) without inplace (a new tensor)")


def _expect_backward_in_train_mode(ffn, x):
    """A training step's forward and backward pass (the gradient check runs in eval mode, where dropout does
    nothing): an in-place dropout on relu's output breaks backward here only."""
    what = "PositionwiseFeedForward(6, 10, dropout=0.5).train()(x).sum().backward()"
    ffn.train().zero_grad(set_to_none=True)
    arg = x.clone()
    with seeded(16):
        out = as_tensor(_run(ffn, arg, what), what)
    if not out.requires_grad:
        return  # (left autograd: the formula check says so)
    try:
        out.sum().backward()
    except RuntimeError as e:
        if "inplace" not in str(e) and "in-place" not in str(e):
            raise
        raise CheckFailure(what, "gradients for w_1 and w_2", f"RuntimeError: {str(e)[:110]}",
                           IN_PLACE_DROPOUT if torch.equal(arg, x) else
                           "x was modified in place, and w_1 needs it to compute its gradient: the layers "
                           "make new tensors") from None
