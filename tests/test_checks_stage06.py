"""Stage 06's checks: full marks for feed-forward networks however written; for each classic mistake (activation,
dropout's place, shapes), exactly the points it earns and the words that name it (the reference and the stub:
tests/test_registry.py)."""
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes

NAME, FFN = "PositionwiseFeedForward", solutions.PositionwiseFeedForward


# ---------------------------------------------------------------- correct, written differently
class FFNSequential(nn.Module):
    """The layers composed in an nn.Sequential, with w_1 and w_2 as names for its members."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.w_1, nn.ReLU(), nn.Dropout(dropout), self.w_2)

    def forward(self, x):
        return self.net(x)


class FFNFunctional(nn.Module):
    """clamp for the ReLU, F.dropout with the module's training flag, dropout before the activation
    (relu(dropout(h)) == dropout(relu(h)): dropout only scales by a non-negative factor)."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        h = F.dropout(self.w_1(x), self.p, self.training).clamp(min=0)
        return self.w_2(h)


class FFNMatmul(nn.Module):
    """The paper's formula with the Linear's tensors: max(0, x W_1 + b_1) W_2 + b_2, flattened positions."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, L, d = x.shape
        flat = x.reshape(B * L, d)
        h = torch.maximum(flat @ self.w_1.weight.T + self.w_1.bias, torch.zeros(()))
        return (self.dropout(h) @ self.w_2.weight.T + self.w_2.bias).reshape(B, L, d)


class FFNEinsum(nn.Module):
    """einsum with the Linear's tensors, torch.where for the ReLU, an extra keyword with a default."""

    def __init__(self, d_model, d_ff, dropout=0.1, activation="relu"):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = torch.einsum("...d,fd->...f", x, self.w_1.weight) + self.w_1.bias
        h = torch.where(h > 0, h, torch.zeros_like(h))
        return torch.einsum("...f,df->...d", self.drop(h), self.w_2.weight) + self.w_2.bias


class FFNHandDropout(nn.Module):
    """A hand-written inverted dropout, h * keep / (1 - p): NaN at p = 1 (0/0), judged at p = 0.5 then."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        h = torch.relu(self.w_1(x))
        if self.training:
            h = h * (torch.rand_like(h) >= self.p).float() / (1 - self.p)
        return self.w_2(h)


class FFNConv1d(nn.Module):
    """Position-wise as kernel-1 convolutions over (B, d, L), with w_1's and w_2's own tensors."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.dropout(F.relu(F.conv1d(x.transpose(1, 2), self.w_1.weight[:, :, None], self.w_1.bias)))
        return F.conv1d(h, self.w_2.weight[:, :, None], self.w_2.bias).transpose(1, 2)


class FFNModuleDict(nn.Module):
    """Layers in a ModuleDict, w_1 and w_2 as properties, in-place ReLU and dropout on the hidden layer."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleDict({"w_1": nn.Linear(d_model, d_ff), "act": nn.ReLU(inplace=True),
                                     "drop": nn.Dropout(dropout, inplace=True), "w_2": nn.Linear(d_ff, d_model)})

    @property
    def w_1(self):
        return self.layers["w_1"]

    @property
    def w_2(self):
        return self.layers["w_2"]

    def forward(self, x):
        for name in ("w_1", "act", "drop", "w_2"):
            x = self.layers[name](x)
        return x


class _Layers(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout, self.p = nn.Dropout(dropout), dropout


class FFNInPlaceRelu(_Layers):
    def forward(self, x):
        return self.w_2(self.dropout(F.relu(self.w_1(x), inplace=True)))


class FFNClampInPlace(_Layers):
    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x).clamp_(min=0)))


class FFNThreshold(_Layers):
    def forward(self, x):
        return self.w_2(self.dropout(F.threshold(self.w_1(x), 0.0, 0.0)))


class FFNReluMaskUnderNoGrad(_Layers):
    """The ReLU as a product with a 0/1 mask computed under torch.no_grad(): the gradient still flows through h."""

    def forward(self, x):
        h = self.w_1(x)
        with torch.no_grad():
            keep = (h > 0).to(h.dtype)
        return self.w_2(self.dropout(h * keep))


class FFNFloat64(_Layers):
    def forward(self, x):
        h = F.linear(x.double(), self.w_1.weight.double(), self.w_1.bias.double()).relu()
        h = F.dropout(h, self.p, self.training)
        return F.linear(h, self.w_2.weight.double(), self.w_2.bias.double()).to(x.dtype)


class FFNAddmm(_Layers):
    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        h = torch.addmm(self.w_1.bias, flat, self.w_1.weight.t()).relu()
        return torch.addmm(self.w_2.bias, self.dropout(h), self.w_2.weight.t()).view(*x.shape[:-1], -1)


class FFNKeywordOnlyActivation(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1, *, activation=F.relu, bias=True):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff, bias=bias), nn.Linear(d_ff, d_model, bias=bias)
        self.act, self.drop = activation, nn.Dropout(p=dropout)

    def forward(self, x):
        return self.w_2(self.drop(self.act(self.w_1(x))))


@pytest.mark.parametrize("cls", [FFNSequential, FFNFunctional, FFNMatmul, FFNEinsum, FFNHandDropout, FFNConv1d,
                                 FFNModuleDict, FFNInPlaceRelu, FFNClampInPlace, FFNThreshold, FFNReluMaskUnderNoGrad,
                                 FFNFloat64, FFNAddmm, FFNKeywordOnlyActivation])
def test_other_correct_feed_forward(cls):
    assert_full_marks(cls, NAME)


# ---------------------------------------------------------------- classic mistakes, one row each
_FORWARD = "self.w_2(self.dropout(torch.relu(self.w_1(x))))"


def _returns(new):
    """forward returns `new` instead of w_2(dropout(relu(w_1(x))))."""
    return edit(FFN, (f"return {_FORWARD}", f"return {new}"))


def _activation(new):
    return edit(FFN, ("torch.relu(", f"{new}("))


def _layers(w_1, w_2):
    """The layers built as `w_1` and `w_2`."""
    layers = "self.w_1 = {}\n        self.w_2 = {}"
    return edit(FFN, (layers.format("nn.Linear(d_model, d_ff)", "nn.Linear(d_ff, d_model)"), layers.format(w_1, w_2)))


class HandDropoutAfterW2(FFN):
    def forward(self, x):
        h = self.w_2(torch.relu(self.w_1(x)))
        return h * (torch.rand_like(h) >= self.dropout.p).float() / (1 - self.dropout.p) if self.training else h


class HandDropoutNotRescaled(FFN):
    def forward(self, x):
        h = torch.relu(self.w_1(x))
        if self.training:
            h = h * (torch.rand_like(h) >= self.dropout.p).float()
        return self.w_2(h)


class DropoutMaskSharedByPositions(FFN):
    def forward(self, x):
        h = torch.relu(self.w_1(x))
        if self.training:
            h = h * (torch.rand(h.shape[-1]) >= self.dropout.p).float() / (1 - self.dropout.p)
        return self.w_2(h)


MISTAKES = [
    # the activation
    Mistake("GELU instead of ReLU", _activation("nn.functional.gelu"), 2, "GELU instead of ReLU"),  # numeric checks lost
    Mistake("LeakyReLU", _activation("nn.functional.leaky_relu"), 2, "LeakyReLU instead of ReLU"),
    # dropout is judged against the network's own hidden layer: a wrong activation does not cost the dropout's point
    Mistake("tanh", _activation("torch.tanh"), 2, ("tanh instead of ReLU", "✓ dropout sits between relu and w_2")),
    Mistake("relu6 instead of relu", _activation("nn.functional.relu6"), 4, "capped activation"),
    Mistake("no activation", _returns("self.w_2(self.dropout(self.w_1(x)))"), 2, "no activation"),
    Mistake("activation after w_2", _returns("torch.relu(self.w_2(self.dropout(self.w_1(x))))"), 1,
            "activation is after w_2"),
    # the layers
    Mistake("d_ff ignored", _layers("nn.Linear(d_model, d_model)", "nn.Linear(d_model, d_model)"), 0,
            ("wrong shapes", "d_model -> d_ff -> d_model")),
    Mistake("Linear arguments swapped", _layers("nn.Linear(d_ff, d_model)", "nn.Linear(d_model, d_ff)"), 0,
            "wrong shapes"),  # fails at the first call
    Mistake("w_2 before w_1", _returns("self.w_1(self.dropout(torch.relu(self.w_2(x))))"), 1,
            "w_1 takes x (d_model -> d_ff)"),
    Mistake("no bias", _layers("nn.Linear(d_model, d_ff, bias=False)", "nn.Linear(d_ff, d_model)"), 0,
            "keep the biases"),
    Mistake("biases left out", _returns("nn.functional.linear(self.dropout(torch.relu(nn.functional.linear("
                                        "x, self.w_1.weight))), self.w_2.weight)"), 1,
            "the biases are missing", not_says="dropout after w_2"),  # its dropout is where it belongs
    Mistake("other attribute names", edit(FFN, ("self.w_1 =", "self.linear1 ="), ("self.w_2 =", "self.linear2 ="),
                                          ("self.w_1(x)", "self.linear1(x)"), ("self.w_2(", "self.linear2(")), 0,
            "w_1 and w_2"),
    Mistake("x added inside the FFN", _returns(f"x + {_FORWARD}"), 1, "the input x is added to the output"),
    Mistake("output detached from autograd", _returns(f"{_FORWARD}.detach()"), 4, ("requires_grad", ".detach()")),
    Mistake("x overwritten in place", _returns(f"x.copy_({_FORWARD})"), 4, "x was modified in place"),
    # the dropout
    Mistake("no dropout", _returns("self.w_2(torch.relu(self.w_1(x)))"), 3, ("dropout not applied", "not used")),
    Mistake("dropout after w_2", _returns("self.dropout(self.w_2(torch.relu(self.w_1(x))))"), 4, "dropout after w_2"),
    Mistake("hand-written dropout after w_2", HandDropoutAfterW2, 4, "between relu and w_2"),
    Mistake("dropout on the input", _returns("self.w_2(torch.relu(self.w_1(self.dropout(x))))"), 4,
            "dropout on the input"),
    Mistake("dropout on the input and the hidden layer",
            _returns("self.w_2(self.dropout(torch.relu(self.w_1(self.dropout(x)))))"), 4, "not on the input x"),
    Mistake("dropout twice on the hidden layer",
            _returns("self.w_2(self.dropout(self.dropout(torch.relu(self.w_1(x)))))"), 4, "dropout applied twice"),
    Mistake("dropout on in eval mode",
            _returns("self.w_2(nn.functional.dropout(torch.relu(self.w_1(x)), self.dropout.p, training=True))"), 4,
            ("dropout still acts in eval mode", "nn.Dropout module")),
    Mistake("dropout rate fixed at 0.1", edit(FFN, ("nn.Dropout(dropout)", "nn.Dropout(0.1)")), 4,
            "dropout argument is not used"),
    Mistake("hand-written dropout without 1/(1-p)", HandDropoutNotRescaled, 4, "not scaled by 1 / (1 - p)"),
    Mistake("one dropout mask for all positions", DropoutMaskSharedByPositions, 4,
            "the same units dropped at every position"),
]


@pytest.mark.parametrize("m", mistakes(NAME, MISTAKES))
def test_feed_forward_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- the checks themselves
def test_checks_are_fast_on_the_reference():
    from autograder import REGISTRY
    for c in REGISTRY[NAME]:
        times = []
        for _ in range(2):
            start = time.perf_counter()
            c.fn(FFN)
            times.append(time.perf_counter() - start)
        assert min(times) < 1.0, f"{c.title} takes {min(times):.2f} s"
