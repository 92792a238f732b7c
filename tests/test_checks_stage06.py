"""Stage 06's checks: full marks for feed-forward networks however written; for each classic mistake
(activation, dropout's place, shapes), exactly the points it earns and the words that name it (the reference
and the stub: tests/test_registry.py)."""
import timeit

import pytest

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes

NAME, FFN = "PositionwiseFeedForward", solutions.PositionwiseFeedForward
_FORWARD, _DROPOUT = "self.w_2(self.dropout(torch.relu(self.w_1(x))))", "self.dropout = nn.Dropout(dropout)"
_LINEARS = "self.w_1 = nn.Linear(d_model, d_ff)\n        self.w_2 = nn.Linear(d_ff, d_model)"


def _ffn(*lines, init=_DROPOUT, args="", changes=()):
    """The reference with forward's body as `lines`, its dropout line as `init`, `args` added to its
    parameters."""
    return edit(FFN, (f"return {_FORWARD}", "\n        ".join(lines)), (_DROPOUT, init),
                ("dropout: float = 0.1)", f"dropout: float = 0.1{args})"), *changes)


def _returns(new):
    return _ffn(f"return {new}")


def _hand_dropout(p, keep="torch.rand_like(h)", scale=True, **kw):
    """forward with a hand-written dropout of rate `p` on the hidden layer: h * (`keep` >= p) / (1 - p) if
    `scale`."""
    return _ffn("h = torch.relu(self.w_1(x))", "if self.training:",
                f"    h = h * ({keep} >= {p}).float()" + (f" / (1 - {p})" if scale else ""),
                "return self.w_2(h)", **kw)


def _module_dict(inplace_dropout):
    """The layers in an nn.ModuleDict, w_1 and w_2 as properties, an in-place ReLU, an
    nn.Dropout(inplace=...)."""
    return _ffn('for name in ("w_1", "act", "drop", "w_2"):', "    x = self.layers[name](x)", "return x",
                init="",
                changes=[(_LINEARS, 'self.layers = nn.ModuleDict({"w_1": nn.Linear(d_model, d_ff), '
                          '"act": nn.ReLU(inplace=True), '
                          f'"drop": nn.Dropout(dropout, inplace={inplace_dropout}), '
                          '"w_2": nn.Linear(d_ff, d_model)})'),
                         ("    def forward", '    w_1 = property(lambda self: self.layers["w_1"])\n'
                          '    w_2 = property(lambda self: self.layers["w_2"])\n\n    def forward')])


# ---------------------------------------------------------------- correct, written differently
CORRECT = {
    "nn.Sequential, w_1 and w_2 as names for its members": _ffn("return self.net(x)",
                          init="self.net = nn.Sequential(self.w_1, nn.ReLU(), nn.Dropout(dropout), "
                               "self.w_2)"),
    # relu(dropout(h)) == dropout(relu(h)): dropout only scales by a non-negative factor
    "clamp, F.dropout before the activation": _ffn(
        "return self.w_2(nn.functional.dropout(self.w_1(x), self.p, self.training).clamp(min=0))",
        init="self.p = dropout"),
    "the paper's formula, flattened positions": _ffn("B, L, d = x.shape", "flat = x.reshape(B * L, d)",
        "h = torch.maximum(flat @ self.w_1.weight.T + self.w_1.bias, torch.zeros(()))",
        "return (self.dropout(h) @ self.w_2.weight.T + self.w_2.bias).reshape(B, L, d)"),
    "einsum, torch.where, extra keyword": _ffn('h = torch.einsum("...d,fd->...f", x, self.w_1.weight) + '
                                               'self.w_1.bias',
        "h = torch.where(h > 0, h, torch.zeros_like(h))",
        'return torch.einsum("...f,df->...d", self.drop(h), self.w_2.weight) + self.w_2.bias',
        init="self.drop = nn.Dropout(dropout)", args=', activation="relu"'),
    # NaN at p = 1: judged at p = 0.5
    "inverted dropout by hand": _hand_dropout("self.p", init="self.p = dropout"),
    "kernel-1 convolutions over (B, d, L)": _ffn(
        "h = nn.functional.conv1d(x.transpose(1, 2), self.w_1.weight[:, :, None], self.w_1.bias)",
        "h = self.dropout(nn.functional.relu(h))",
        "return nn.functional.conv1d(h, self.w_2.weight[:, :, None], self.w_2.bias).transpose(1, 2)"),
    # an in-place ReLU right after a Linear is fine (the Linear's backward does not need its output); an
    # in-place dropout after it is not (relu's backward does): see the mistakes
    "ModuleDict, w_1 and w_2 as properties, in-place ReLU": _module_dict(inplace_dropout=False),
    "F.relu in place": _returns("self.w_2(self.dropout(nn.functional.relu(self.w_1(x), inplace=True)))"),
    "clamp_ in place": _returns("self.w_2(self.dropout(self.w_1(x).clamp_(min=0)))"),
    "F.threshold": _returns("self.w_2(self.dropout(nn.functional.threshold(self.w_1(x), 0.0, 0.0)))"),
    # the ReLU as a product with a 0/1 mask computed under torch.no_grad(): the gradient still flows through h
    "ReLU mask under no_grad": _ffn("h = self.w_1(x)", "with torch.no_grad():",
                                    "    keep = (h > 0).to(h.dtype)",
                                    "return self.w_2(self.dropout(h * keep))"),
    "float64, F.linear": _ffn(
        "h = nn.functional.linear(x.double(), self.w_1.weight.double(), self.w_1.bias.double()).relu()",
        "h = nn.functional.dropout(h, self.p, self.training)",
        "return nn.functional.linear(h, self.w_2.weight.double(), self.w_2.bias.double()).to(x.dtype)",
        init=f"{_DROPOUT}\n        self.p = dropout"),
    "addmm": _ffn("flat = x.reshape(-1, x.shape[-1])",
                  "h = torch.addmm(self.w_1.bias, flat, self.w_1.weight.t()).relu()",
                  "return torch.addmm(self.w_2.bias, self.dropout(h), "
                  "self.w_2.weight.t()).view(*x.shape[:-1], -1)"),
    "keyword-only activation and bias": _ffn(
        "return self.w_2(self.drop(self.act(self.w_1(x))))", args=", *, activation=nn.functional.relu, "
                                                                  "bias=True",
        init="self.act, self.drop = activation, nn.Dropout(p=dropout)",
        changes=[(_LINEARS,
                  _LINEARS.replace("d_ff)", "d_ff, bias=bias)").replace("d_model)", "d_model, bias=bias)"))]),
}


@pytest.mark.parametrize("cls", CORRECT.values(), ids=CORRECT)
def test_other_correct_feed_forward(cls):
    assert_full_marks(cls, NAME)


# ---------------------------------------------------------------- classic mistakes, one row each
def _activation(new):
    return edit(FFN, ("torch.relu(", f"{new}("))


def _layers(w_1, w_2):
    """The layers built as `w_1` and `w_2`."""
    return edit(FFN, (_LINEARS, f"self.w_1 = {w_1}\n        self.w_2 = {w_2}"))


MISTAKES = [
    # the activation
    # numeric checks lost
    Mistake("GELU instead of ReLU", _activation("nn.functional.gelu"), 2, "GELU instead of ReLU"),
    Mistake("LeakyReLU", _activation("nn.functional.leaky_relu"), 2, "LeakyReLU instead of ReLU"),
    # dropout is judged against the network's own hidden layer: a wrong activation does not cost the dropout's
    # point
    Mistake("tanh", _activation("torch.tanh"), 2, ("tanh instead of ReLU", "✓ dropout sits between relu and "
                                                                           "w_2")),
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
    Mistake("other attribute names",
            edit(FFN, ("self.w_1 =", "self.linear1 ="), ("self.w_2 =", "self.linear2 ="),
                                          ("self.w_1(x)", "self.linear1(x)"),
                 ("self.w_2(", "self.linear2(")), 0,
            "w_1 and w_2"),
    Mistake("x added inside the FFN", _returns(f"x + {_FORWARD}"), 1, "the input x is added to the output"),
    Mistake("output detached from autograd", _returns(f"{_FORWARD}.detach()"), 4,
            ("requires_grad", ".detach()")),
    # (w_1 saved x for its gradient: backward() in train mode fails too)
    Mistake("x overwritten in place", _returns(f"x.copy_({_FORWARD})"), 3, "x was modified in place",
            not_says="in-place dropout"),
    # the dropout
    Mistake("no dropout", _returns("self.w_2(torch.relu(self.w_1(x)))"), 3,
            ("dropout not applied", "not used")),
    Mistake("dropout after w_2", _returns("self.dropout(self.w_2(torch.relu(self.w_1(x))))"), 4,
            "dropout after w_2"),
    Mistake("hand-written dropout after w_2", _ffn(
        "h = self.w_2(torch.relu(self.w_1(x)))",
        "return h * (torch.rand_like(h) >= self.dropout.p).float() / (1 - self.dropout.p) if self.training "
        "else h"),
            4, "between relu and w_2"),
    Mistake("dropout on the input", _returns("self.w_2(torch.relu(self.w_1(self.dropout(x))))"), 4,
            "dropout on the input"),
    Mistake("dropout on the input and the hidden layer",
            _returns("self.w_2(self.dropout(torch.relu(self.w_1(self.dropout(x)))))"), 4,
            "not on the input x"),
    Mistake("dropout twice on the hidden layer",
            _returns("self.w_2(self.dropout(self.dropout(torch.relu(self.w_1(x)))))"), 4,
            "dropout applied twice"),
    Mistake("dropout on in eval mode",
            _returns("self.w_2(nn.functional.dropout(torch.relu(self.w_1(x)), self.dropout.p, "
                     "training=True))"), 4,
            ("dropout still acts in eval mode", "nn.Dropout module")),
    Mistake("dropout rate fixed at 0.1", edit(FFN, ("nn.Dropout(dropout)", "nn.Dropout(0.1)")), 4,
            "dropout argument is not used"),
    Mistake("hand-written dropout without 1/(1-p)", _hand_dropout("self.dropout.p", scale=False), 4,
            "not scaled by 1 / (1 - p)"),
    # relu saves its output for backward: an in-place dropout on it breaks backward() in train mode (eval
    # mode, where dropout does nothing, is fine); used to get full marks
    Mistake("in-place dropout after relu", edit(FFN, (_DROPOUT, "self.dropout = nn.Dropout(dropout, "
                                                                "inplace=True)")),
            4, ("backward()", "in-place dropout after relu", "without inplace")),
    Mistake("ModuleDict, in-place ReLU and dropout (was a correct style)",
            _module_dict(inplace_dropout=True), 4,
            "in-place dropout after relu"),
    Mistake("F.dropout in place", _returns("self.w_2(nn.functional.dropout(torch.relu(self.w_1(x)), "
                                           "self.dropout.p, self.training, inplace=True))"), 4,
            "without inplace"),
    Mistake("one dropout mask for all positions",
            _hand_dropout("self.dropout.p", keep="torch.rand(h.shape[-1])"), 4,
            "the same units dropped at every position"),
]


@pytest.mark.parametrize("m", mistakes(NAME, MISTAKES))
def test_feed_forward_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- the checks themselves
def test_checks_are_fast_on_the_reference():
    from autograder import REGISTRY
    for c in REGISTRY[NAME]:
        best = min(timeit.repeat(lambda: c.fn(FFN), number=1, repeat=2))  # noqa: B023 (called at once)
        assert best < 1.0, f"{c.title} takes {best:.2f} s"
