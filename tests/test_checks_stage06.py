"""Stage 06's checks: full marks for the reference and for feed-forward networks written differently;
points lost, with the mistake named, for each classic mistake (activation, dropout's place, shapes)."""
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from tests.grading import assert_caught, assert_full_marks, grade

NAME = "PositionwiseFeedForward"


def test_reference_gets_full_marks():
    assert_full_marks(solutions.PositionwiseFeedForward)


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


@pytest.mark.parametrize("cls", [FFNSequential, FFNFunctional, FFNMatmul, FFNEinsum, FFNHandDropout, FFNConv1d,
                                 FFNModuleDict])
def test_other_correct_feed_forward(cls):
    assert_full_marks(cls, NAME)


# ---------------------------------------------------------------- classic mistakes
class Base(solutions.PositionwiseFeedForward):
    def act(self, h):
        return torch.relu(h)

    def forward(self, x):
        return self.w_2(self.dropout(self.act(self.w_1(x))))


class Gelu(Base):
    def act(self, h):
        return F.gelu(h)


class ActivationAfterW2(Base):
    def forward(self, x):
        return torch.relu(self.w_2(self.dropout(self.w_1(x))))


class NoActivation(Base):
    def act(self, h):
        return h


class DropoutAfterW2(Base):
    def forward(self, x):
        return self.dropout(self.w_2(torch.relu(self.w_1(x))))


class DropoutOnInput(Base):
    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(self.dropout(x))))


class NoDropout(Base):
    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class DropoutAlwaysOn(Base):
    def forward(self, x):
        return self.w_2(F.dropout(torch.relu(self.w_1(x)), self.dropout.p, training=True))


class SquareLayers(Base):
    """d_ff ignored: d_model -> d_model -> d_model."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__(d_model, d_ff, dropout)
        self.w_1, self.w_2 = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)


class SwappedArguments(Base):
    """nn.Linear(out, in) written the other way round: fails at the first call."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__(d_model, d_ff, dropout)
        self.w_1, self.w_2 = nn.Linear(d_ff, d_model), nn.Linear(d_model, d_ff)


class NoBias(Base):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__(d_model, d_ff, dropout)
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)


class OtherNames(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class Relu6(Base):
    def act(self, h):
        return F.relu6(h)


class Detached(Base):
    def forward(self, x):
        return super().forward(x).detach()


class OverwritesInput(Base):
    def forward(self, x):
        return x.copy_(super().forward(x))  # the right values, written into the caller's x


def _hand_dropout(h, p, training):
    return h * (torch.rand_like(h) >= p).float() / (1 - p) if training else h


class HandDropoutAfterW2(Base):
    def forward(self, x):
        return _hand_dropout(self.w_2(torch.relu(self.w_1(x))), self.dropout.p, self.training)


MISTAKES = [
    ("GELU instead of ReLU", Gelu, ["GELU instead of ReLU"]),
    ("activation after w_2", ActivationAfterW2, ["activation is after w_2"]),
    ("no activation", NoActivation, ["no activation"]),
    ("dropout after w_2", DropoutAfterW2, ["dropout after w_2"]),
    ("dropout on the input", DropoutOnInput, ["dropout on the input"]),
    ("no dropout", NoDropout, ["dropout not applied", "not used"]),
    ("dropout on in eval mode", DropoutAlwaysOn, ["dropout still acts in eval mode", "nn.Dropout module"]),
    ("d_ff ignored", SquareLayers, ["wrong shapes", "d_model -> d_ff -> d_model"]),
    ("Linear arguments swapped", SwappedArguments, ["wrong shapes"]),
    ("no bias", NoBias, ["keep the biases"]),
    ("other attribute names", OtherNames, ["w_1 and w_2"]),
    ("relu6 instead of relu", Relu6, ["capped activation"]),
    ("output detached from autograd", Detached, ["requires_grad", ".detach()"]),
    ("x overwritten in place", OverwritesInput, ["x was modified in place"]),
    ("hand-written dropout after w_2", HandDropoutAfterW2, ["between relu and w_2"]),
]


@pytest.mark.parametrize("label,cls,keywords", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_feed_forward_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, NAME, *keywords)


def test_gelu_loses_every_numeric_check():
    points, text = grade(Gelu, NAME)
    assert points <= 2, text


# ---------------------------------------------------------------- stubs, speed
def test_stub_gets_zero_and_says_not_implemented():
    class PositionwiseFeedForward(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.1):
            super().__init__()
            raise NotImplementedError()

        def forward(self, x):
            raise NotImplementedError()

    points, text = grade(PositionwiseFeedForward)
    assert points == 0 and text.count("not implemented yet") == len(text.splitlines()) - 1, text


def test_checks_are_fast_on_the_reference():
    from autograder import REGISTRY
    for c in REGISTRY[NAME]:
        times = []
        for _ in range(2):
            start = time.perf_counter()
            c.fn(solutions.PositionwiseFeedForward)
            times.append(time.perf_counter() - start)
        assert min(times) < 1.0, f"{c.title} takes {min(times):.2f} s"


# ---------------------------------------------------------------- second review: more styles, more mistakes
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


@pytest.mark.parametrize("cls", [FFNInPlaceRelu, FFNClampInPlace, FFNThreshold, FFNReluMaskUnderNoGrad, FFNFloat64,
                                 FFNAddmm, FFNKeywordOnlyActivation])
def test_second_review_correct_feed_forward(cls):
    assert_full_marks(cls, NAME)


class DropoutTwiceOnHidden(Base):
    def forward(self, x):
        return self.w_2(self.dropout(self.dropout(torch.relu(self.w_1(x)))))


class HandDropoutNotRescaled(Base):
    def forward(self, x):
        h = torch.relu(self.w_1(x))
        if self.training:
            h = h * (torch.rand_like(h) >= self.dropout.p).float()
        return self.w_2(h)


class DropoutOnInputAndHidden(Base):
    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(self.dropout(x)))))


class DropoutMaskSharedByPositions(Base):
    def forward(self, x):
        h = torch.relu(self.w_1(x))
        if self.training:
            h = h * (torch.rand(h.shape[-1]) >= self.dropout.p).float() / (1 - self.dropout.p)
        return self.w_2(h)


class DropoutRateFixed(Base):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__(d_model, d_ff, 0.1)


class LeakyRelu(Base):
    def act(self, h):
        return F.leaky_relu(h)


class Tanh(Base):
    def act(self, h):
        return torch.tanh(h)


class ResidualInside(Base):
    def forward(self, x):
        return x + super().forward(x)


class BiasesLeftOut(Base):
    def forward(self, x):
        return F.linear(self.dropout(torch.relu(F.linear(x, self.w_1.weight))), self.w_2.weight)


class LayersUsedTheWrongWayRound(Base):
    def forward(self, x):
        return self.w_1(self.dropout(torch.relu(self.w_2(x))))


SECOND_REVIEW_MISTAKES = [
    ("dropout twice on the hidden layer", DropoutTwiceOnHidden, ["dropout applied twice"]),
    ("hand-written dropout without 1/(1-p)", HandDropoutNotRescaled, ["not scaled by 1 / (1 - p)"]),
    ("dropout on the input and the hidden layer", DropoutOnInputAndHidden, ["not on the input x"]),
    ("one dropout mask for all positions", DropoutMaskSharedByPositions, ["the same units dropped at every position"]),
    ("dropout rate fixed at 0.1", DropoutRateFixed, ["dropout argument is not used"]),
    ("LeakyReLU", LeakyRelu, ["LeakyReLU instead of ReLU"]),
    ("tanh", Tanh, ["tanh instead of ReLU"]),
    ("x added inside the FFN", ResidualInside, ["the input x is added to the output"]),
    ("biases left out", BiasesLeftOut, ["the biases are missing"]),
    ("w_2 before w_1", LayersUsedTheWrongWayRound, ["w_1 takes x (d_model -> d_ff)"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_REVIEW_MISTAKES, ids=[m[0] for m in SECOND_REVIEW_MISTAKES])
def test_second_review_feed_forward_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, NAME, *keywords)


def test_a_wrong_activation_does_not_cost_the_dropout_point():
    """Dropout is judged against the network's own hidden layer: tanh in place of relu loses the formula's points,
    not the dropout's."""
    _, text = grade(Tanh, NAME)
    assert "✓ dropout sits between relu and w_2" in text, text


def test_a_network_without_biases_is_not_told_its_dropout_is_after_w_2():
    _, text = grade(BiasesLeftOut, NAME)
    assert "dropout after w_2" not in text, text
