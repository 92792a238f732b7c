"""Stage 08's checks: full marks for correct code however written; for each classic mistake of the encoder layer and
stack, exactly the points it earns and the words that name it (the reference and the stub: tests/test_registry.py).
Stage 09 and 10 build their correct styles on the modules defined here."""
import copy
import functools
import inspect
import math
import textwrap

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as checkpoint
from torch import nn

import solutions
from solutions import LayerNorm, MultiHeadAttention, PositionwiseFeedForward, SublayerConnection
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade, grade_one, grade_one_across, mistakes

LAYER, ENCODER = solutions.EncoderLayer, solutions.Encoder


# ---------------------------------------------------------------- changes for edit() (stage 09 uses them too)
def _body(reference):
    """The lines of the reference's forward, as written (its last solution region)."""
    return textwrap.dedent(inspect.getsource(reference)).split("### BEGIN SOLUTION\n")[-1].split("        ### END")[0]


def new_forward(reference, *lines):
    """The change that writes the reference's forward anew, one line a string (relative indentation kept)."""
    return _body(reference), "".join(f"        {line}\n" for line in lines)


def forward_first(reference, *lines):
    """The change that runs `lines` first in the reference's forward."""
    return _body(reference), "".join(f"        {line}\n" for line in lines) + _body(reference)


def forward_under(reference, statement):
    """The change that runs the reference's whole forward under `statement` (a `with ...:`)."""
    return _body(reference), f"        {statement}\n" + textwrap.indent(_body(reference), "    ")


def init_also(*lines):
    """The change that adds `lines` at the start of __init__ (after super().__init__())."""
    return "super().__init__()\n", "super().__init__()\n" + "".join(f"        {line}\n" for line in lines)


# ---------------------------------------------------------------- parts written differently (stage 09 imports them)
class EinsumAttention(nn.Module):
    """Multi-head attention with einsum, heads as an explicit axis, a -1e9 fill, no stored weights."""

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        B, Lq, d = query.shape
        q = self.w_q(query).reshape(B, Lq, self.h, -1)                 # (B, Lq, h, d_k)
        k = self.w_k(key).reshape(B, key.size(1), self.h, -1)          # (B, Lk, h, d_k)
        v = self.w_v(value).reshape(B, key.size(1), self.h, -1)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), -1e9)
        w = self.drop(scores.softmax(-1))
        return self.w_o(torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, Lq, d))


class SDPAAttention(nn.Module):
    """F.scaled_dot_product_attention with the boolean mask (True = may attend is PyTorch's convention there too)."""

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h, self.p = n_heads, dropout
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        def split(t):
            return t.unflatten(-1, (self.h, -1)).transpose(1, 2)
        out = F.scaled_dot_product_attention(split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value)),
                                             attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        return self.w_o(out.transpose(1, 2).flatten(2))


class Float64Attention(nn.Module):
    """Scores in float64 through bmm over batch * heads, -inf fill then nan_to_num."""

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        B, Lq, d = query.shape
        Lk, h, dk = key.size(1), self.h, d // self.h

        def heads(t, L):
            return t.view(B, L, h, dk).permute(0, 2, 1, 3).reshape(B * h, L, dk)
        q, k, v = heads(self.w_q(query), Lq).double(), heads(self.w_k(key), Lk).double(), heads(self.w_v(value), Lk)
        s = (torch.bmm(q, k.transpose(1, 2)) * dk ** -0.5).view(B, h, Lq, Lk)
        if mask is not None:
            s = s.masked_fill(~mask.expand(B, h, Lq, Lk), float("-inf"))
        w = self.drop(torch.softmax(s, -1).nan_to_num(0.0).float()).reshape(B * h, Lq, Lk)
        return self.w_o(torch.bmm(w, v).view(B, h, Lq, dk).permute(0, 2, 1, 3).reshape(B, Lq, d))


class AdditiveAttention(nn.Module):
    """Takes an additive float mask (0 or -1e9) instead of a boolean one."""

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    def forward(self, q, k, v, add=None):
        B, L, d = q.shape
        Q, K = self.w_q(q).view(B, L, self.h, -1), self.w_k(k).view(B, k.size(1), self.h, -1)
        V = self.w_v(v).view(B, k.size(1), self.h, -1)
        s = torch.einsum("bqhd,bkhd->bhqk", Q, K) / math.sqrt(Q.size(-1))
        if add is not None:
            s = s + add
        return self.w_o(torch.einsum("bhqk,bkhd->bqhd", self.drop(s.softmax(-1)), V).reshape(B, L, d))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout):
        super().__init__()
        self.w_1, self.w_2, self.p = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), dropout

    def forward(self, x):
        return self.w_2(F.dropout(F.relu(self.w_1(x)), self.p, training=self.training))


class SequentialFeedForward(nn.Module):
    """w_1 and w_2 registered, and run through an nn.Sequential with an in-place ReLU."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.w_1, nn.ReLU(inplace=True), nn.Dropout(dropout), self.w_2)

    def forward(self, x):
        return self.net(x)


class VarMeanLayerNorm(nn.Module):
    """torch.var_mean and addcmul; eps keyword-only."""

    def __init__(self, d, *, eps=1e-5):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d)), eps

    def forward(self, x):
        var, mean = torch.var_mean(x, -1, unbiased=False, keepdim=True)
        return torch.addcmul(self.bias, self.weight, (x - mean) * torch.rsqrt(var + self.eps))


class Residual(nn.Module):
    """Holds a PyTorch LayerNorm and a dropout rate; the layer writes the residual sum out itself."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm, self.dropout = nn.LayerNorm(d_model), nn.Dropout(dropout)


class InPlaceConnection(nn.Module):
    """Its own connection: an in-place dropout, and `out += x` on the tensor it created itself."""

    def __init__(self, d, p, norm_first):
        super().__init__()
        self.norm, self.dropout, self.norm_first = VarMeanLayerNorm(d), nn.Dropout(p, inplace=True), norm_first

    def forward(self, x, f):
        if self.norm_first:
            return x + self.dropout(f(self.norm(x)))
        out = self.dropout(f(x))
        out += x
        return self.norm(out)


# ---------------------------------------------------------------- EncoderLayer: correct, written differently
class EncoderLayerExplicit(nn.Module):
    """Everything written out: einsum attention, nn.LayerNorm, the residual sums in forward."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = EinsumAttention(d_model, n_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(Residual(d_model, dropout) for _ in range(2))
        self.norm_first = norm_first

    def forward(self, x, src_mask):
        steps = (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)
        for sub, f in zip(self.sublayers, steps):
            if self.norm_first:
                x = x + sub.dropout(f(sub.norm(x)))
            else:
                x = sub.norm(x + sub.dropout(f(x)))
        return x


class EncoderLayerSolutionsParts(nn.Module):
    """The course's parts, the sublayers built one by one, an extra attribute of its own."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList()
        self.sublayers.append(SublayerConnection(d_model, dropout, norm_first))
        self.sublayers.append(SublayerConnection(d_model, dropout, norm_first))
        self.size = d_model

    def forward(self, x, src_mask=None):
        attended = self.sublayers[0](x, lambda q: self.self_attn(query=q, key=q, value=q, mask=src_mask))
        return self.sublayers[1](attended, lambda h: self.feed_forward(h))


class EncoderLayerLoop(nn.Module):
    """The sublayers zipped with a list of callables; deep-copied connections; an extra keyword argument."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, activation="relu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(copy.deepcopy(SublayerConnection(d_model, dropout, norm_first)) for _ in "ab")

    def forward(self, x, src_mask=None):
        steps = [lambda t: self.self_attn(t, t, t, mask=src_mask), self.feed_forward]
        for connection, step in zip(self.sublayers, steps):
            x = connection(x, step)
        return x


class EncoderLayerSequentialHolder(nn.Module):
    """The two connections in an nn.Sequential (indexable), a named inner function for the attention."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.Sequential(SublayerConnection(d_model, dropout, norm_first),
                                       SublayerConnection(d_model, dropout, norm_first))

    def forward(self, x, src_mask):
        def attend(q):
            return self.self_attn(q, q, q, src_mask)
        return self.sublayers[1](self.sublayers[0](x, attend), self.feed_forward)


class EncoderLayerSDPA(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, *, eps=1e-5):
        super().__init__()
        self.self_attn = SDPAAttention(d_model, n_heads, dropout)
        self.feed_forward = SequentialFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList([InPlaceConnection(d_model, dropout, norm_first) for _ in range(2)])

    def forward(self, x, src_mask=None, *, need_weights=False):
        x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, src_mask))
        return self.sublayers[1](x, self.feed_forward)


class EncoderLayerFloat64(nn.Module):
    """float64 attention; the mask flattened to (B, L) and rebuilt as (B, 1, 1, L)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = Float64Attention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(2))

    def forward(self, x, src_mask):
        m = None if src_mask is None else src_mask.reshape(src_mask.size(0), -1)[:, None, None, :]
        x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, m))
        return self.sublayers[1](x, self.feed_forward)


class EncoderLayerPerSentence(solutions.EncoderLayer):
    """One sentence at a time, on its real tokens only (no mask needed then); zeros at the padding positions."""

    def one(self, x):
        x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t))
        return self.sublayers[1](x, self.feed_forward)

    def forward(self, x, src_mask):
        if src_mask is None:
            return self.one(x)
        keep = src_mask.reshape(x.size(0), x.size(1))
        out = torch.zeros_like(x)
        for b in range(x.size(0)):
            idx = keep[b].nonzero().flatten()
            out[b, idx] = self.one(x[b:b + 1, idx])[0]
        return out


class EncoderLayerPartial(nn.Module):
    """Keyword construction, *args in forward, functools.partial for the attention, an extra **kwargs."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, activation="relu", **kwargs):
        super().__init__()
        self.feed_forward = PositionwiseFeedForward(d_model=d_model, d_ff=d_ff, dropout=dropout)
        self.self_attn = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.sublayers = nn.ModuleList()
        self.sublayers.extend([SublayerConnection(d_model, dropout=dropout, norm_first=norm_first) for _ in range(2)])

    def _attend(self, y, mask):
        return self.self_attn(y, y, y, mask)

    def forward(self, *args):
        x, src_mask = args[0], args[1] if len(args) > 1 else None
        h = self.sublayers[0](x, functools.partial(self._attend, mask=src_mask))
        return self.sublayers[1](h, self.feed_forward.forward)


class EncoderLayerNoGradMask(nn.Module):
    """An additive float mask built under torch.no_grad() (harmless: the mask needs no gradient)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = AdditiveAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(2))

    def forward(self, x, src_mask):
        with torch.no_grad():
            add = None if src_mask is None else torch.zeros(src_mask.shape).masked_fill(~src_mask, -1e9)
        x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, add))
        return self.sublayers[1](x, self.feed_forward)


class EncoderLayerFloat64FeedForward(solutions.EncoderLayer):
    """The feed-forward computed in float64 with F.linear on cast weights; F.dropout(training=self.training)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.p = dropout

    def ff64(self, y):
        f = self.feed_forward
        h = F.dropout(F.relu(F.linear(y.double(), f.w_1.weight.double(), f.w_1.bias.double())), self.p, self.training)
        return F.linear(h, f.w_2.weight.double(), f.w_2.bias.double()).to(y.dtype)

    def forward(self, x, src_mask):
        x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, src_mask))
        return self.sublayers[1](x, self.ff64)


CORRECT_LAYERS = {
    "explicit": EncoderLayerExplicit, "the course's parts": EncoderLayerSolutionsParts, "a loop": EncoderLayerLoop,
    "connections in an nn.Sequential": EncoderLayerSequentialHolder, "SDPA, in-place connections": EncoderLayerSDPA,
    "float64 attention": EncoderLayerFloat64, "one sentence at a time": EncoderLayerPerSentence,
    "functools.partial, *args": EncoderLayerPartial, "an additive mask built under no_grad": EncoderLayerNoGradMask,
    "float64 feed-forward": EncoderLayerFloat64FeedForward,
    "the mask expanded to (B, 1, L, L)": edit(LAYER, forward_first(LAYER, "src_mask = None if src_mask is None else "
                                                                           "src_mask.expand(-1, 1, x.size(1), -1)")),
    "its output kept, detached": edit(LAYER, ("return self.sublayers[1](x, self.feed_forward)",
                                              "out = self.sublayers[1](x, self.feed_forward)\n"
                                              "        self.last = out.detach()\n        return out")),
    "no autograd in eval mode": edit(LAYER, forward_under(LAYER, "with torch.set_grad_enabled(self.training and "
                                                                  "torch.is_grad_enabled()):")),
}


@pytest.mark.parametrize("cls", CORRECT_LAYERS.values(), ids=CORRECT_LAYERS)
def test_other_correct_encoder_layers(cls):
    assert_full_marks(cls, "EncoderLayer")


_DROP = init_also("self.drop = nn.Dropout(dropout)")  # a dropout of the layer's own


def test_one_dropout_in_the_lambda_instead_of_the_connection_is_fine():
    """The connections built without dropout, each sublayer's output dropped once in its lambda instead."""
    cls = edit(LAYER, _DROP, ("(d_model, dropout, norm_first)", "(d_model, 0.0, norm_first)"),
               ("self.self_attn(y, y, y, src_mask)", "self.drop(self.self_attn(y, y, y, src_mask))"),
               ("(x, self.feed_forward)", "(x, lambda y: self.drop(self.feed_forward(y)))"))
    points, line = grade_one(cls, "EncoderLayer", "uses the dropout argument")
    assert points == 1, line


# ---------------------------------------------------------------- EncoderLayer: classic mistakes
def _layer(*changes):
    return edit(LAYER, *changes)


def _attend(new):
    return edit(LAYER, ("self.self_attn(y, y, y, src_mask)", new))


def _connection(new):
    return edit(LAYER, ("SublayerConnection(d_model, dropout, norm_first)", new))


def _connections(new):
    return edit(LAYER, ("nn.ModuleList([SublayerConnection(d_model, dropout, norm_first) for _ in range(2)])", new))


def _forward(*lines):
    return edit(LAYER, new_forward(LAYER, *lines))


def _first(*lines):
    return edit(LAYER, forward_first(LAYER, *lines))


def _each_sublayer(*lines):
    """The forward as a loop over (connection, sublayer) pairs, the connection's parts used by hand."""
    return _forward("for sub, f in zip(self.sublayers, (lambda y: self.self_attn(y, y, y, src_mask), "
                    "self.feed_forward)):", *(f"    {line}" for line in lines), "return x")


_ATTEND, _FEED = "x = self.sublayers[0]", "return self.sublayers[1]"
ENCODER_LAYER_MISTAKES = [
    # the sublayer connections
    Mistake("norm_first ignored", _connection("SublayerConnection(d_model, dropout)"), 4, "norm_first ignored"),
    Mistake("always pre-norm", _connection("SublayerConnection(d_model, dropout, True)"), 3,
            "pre-norm computed where post-norm was asked"),
    Mistake("SublayerConnection(d_model, norm_first)", _connection("SublayerConnection(d_model, norm_first)"), 3,
            ("norm_first ignored", "SublayerConnection(d_model, dropout, norm_first), in that order")),
    Mistake("one sublayer object repeated",
            _connections("nn.ModuleList([SublayerConnection(d_model, dropout, norm_first)] * 2)"), 1,
            ("repeated", "* n")),
    Mistake("sublayers in a Python list",
            _connections("[SublayerConnection(d_model, dropout, norm_first) for _ in range(2)]"), 3,
            "plain Python list"),
    # which sublayer, through which connection, on what
    Mistake("sublayer order wrong", _forward("x = self.sublayers[0](x, self.feed_forward)", "return self.sublayers[1]"
                                             "(x, lambda y: self.self_attn(y, y, y, src_mask))"), 2,
            "sublayer order wrong"),
    Mistake("sublayer norms swapped", _layer((_FEED, "return self.sublayers[0]"), (_ATTEND, "x = self.sublayers[1]")),
            2, "norms swapped"),
    Mistake("sublayers[0] used twice", _layer((_FEED, "return self.sublayers[0]")), 2, "sublayers[0] used for both"),
    Mistake("feed-forward sublayer missing", _layer((_ATTEND, "return self.sublayers[0]")), 2,
            "feed-forward sublayer is missing"),
    Mistake("feed-forward on the layer's input", _layer((_ATTEND, "self.sublayers[0]")), 2, "got the layer's input x"),
    Mistake("the lambda uses x, not its argument", _attend("self.self_attn(x, x, x, src_mask)"), 4,
            "lambda uses x instead of its argument"),
    Mistake("pre-norm: keys and values from x", _attend("self.self_attn(y, x, x, src_mask)"), 4,
            "keys and values taken from x"),
    # the residual sum and the norms
    Mistake("residual missing", _each_sublayer("x = sub.norm(sub.dropout(f(x))) if not sub.norm_first else "
                                               "sub.dropout(f(sub.norm(x)))"), 2, "residual connection missing"),
    Mistake("norm on the sublayer output only", _each_sublayer("x = x + sub.norm(sub.dropout(f(x)))"), 2,
            "x + LayerNorm(sublayer(x))"),
    Mistake("no LayerNorm at all", _each_sublayer("x = x + sub.dropout(f(x))"), 2, "LayerNorm missing"),
    Mistake("pre-norm residual after the norm",
            _each_sublayer("if sub.norm_first:", "    n = sub.norm(x)", "    x = n + sub.dropout(f(n))", "else:",
                           "    x = sub(x, f)"), 4, "residual taken after the norm"),
    Mistake("pre-norm layer normalizes its output",
            _layer((_FEED + "(x, self.feed_forward)", "x = self.sublayers[1](x, self.feed_forward)\n        return "
                    "self.sublayers[1].norm(x) if self.sublayers[1].norm_first else x")), 4,
            "normalized again at its end"),
    Mistake("x += ... in place", _each_sublayer("if sub.norm_first:", "    x += sub.dropout(f(sub.norm(x)))", "else:",
                                                "    x = sub(x, f)"), 4, "changed in place"),
    Mistake("residual path detached", _each_sublayer("x = sub.norm(x.detach() + sub.dropout(f(x))) "
                                                     "if not sub.norm_first else x + sub.dropout(f(sub.norm(x)))"),
            4, ("gradient with respect to x", "cut off from autograd")),
    Mistake("forward under torch.no_grad()", _layer(forward_under(LAYER, "with torch.no_grad():")), 4,
            ("cut off from autograd", "no_grad")),
    Mistake("self.eval() inside forward", _first("self.eval()"), 4, "switched to eval mode"),
    # the mask
    Mistake("src_mask not passed to self-attention", _attend("self.self_attn(y, y, y, None)"), 4,
            "src_mask not passed"),
    Mistake("src_mask inverted", _attend("self.self_attn(y, y, y, ~src_mask)"), 0, "src_mask inverted"),
    Mistake("src_mask == 0", _attend("self.self_attn(y, y, y, src_mask == 0)"), 0,  # PyTorch's key_padding_mask habit
            "src_mask inverted"),
    Mistake("mask transposed onto the queries",
            _attend("self.self_attn(y, y, y, None if src_mask is None else src_mask.transpose(-1, -2))"), 4,
            "hides queries instead of keys"),
    Mistake("mask.unsqueeze(1) on a 4-d mask",  # the Annotated Transformer's habit; it raised deep inside multi-head
            _first("src_mask = None if src_mask is None else src_mask.unsqueeze(1)"), 2,  # attention with no Likely
            ("works without the mask and fails with it", "no mask.unsqueeze(1)")),
    Mistake("the first call's mask kept",
            _layer(init_also("self.mask = None"), ("y, y, y, src_mask", "y, y, y, self.mask"),
                   (_ATTEND, "self.mask = src_mask if self.mask is None else self.mask\n        " + _ATTEND)), 4,
            ("second batch", "earlier call")),
    Mistake("the caller's mask flipped in place",  # then flipped back for its own use: the next layer gets it flipped
            _first("if src_mask is not None:", "    src_mask.logical_not_()", "    src_mask = ~src_mask"), 2,
            ("src_mask after the call", "changed in place")),
    # the dropout argument
    Mistake("dropout argument ignored", _layer(init_also("dropout = 0.1")), 4, "dropout argument is ignored"),
    Mistake("dropout never applied", _layer(init_also("dropout = 0.0")), 4, "dropout argument is not used"),
    Mistake("attention dropout left at its default", _layer(("(d_model, n_heads, dropout)", "(d_model, n_heads)")), 4,
            "dropout argument is ignored"),
    Mistake("F.dropout active in eval mode",
            _attend("torch.nn.functional.dropout(self.self_attn(y, y, y, src_mask), 0.5)"), 1, "eval mode"),
    Mistake("dropout on the residual sum", _each_sublayer("x = x + sub.dropout(f(sub.norm(x))) if sub.norm_first "
                                                          "else sub.norm(sub.dropout(x + f(x)))"),
            4, "dropout applied to the residual sum"),
    Mistake("a second dropout on self_attn's output",  # which the connection drops again (p = 1 cannot tell)
            _layer(_DROP, ("self.self_attn(y, y, y, src_mask)", "self.drop(self.self_attn(y, y, y, src_mask))")), 0,
            ("second dropout on the self_attn sublayer", "dropped twice"), title="uses the dropout argument"),
    Mistake("a second dropout on feed_forward's output",
            _layer(_DROP, ("(x, self.feed_forward)", "(x, lambda y: self.drop(self.feed_forward(y)))")), 0,
            ("second dropout on the feed_forward sublayer", "dropped twice"), title="uses the dropout argument"),
    # the contract's names and sizes
    Mistake("d_ff hard-coded as 2 * d_model",  # the check's own sizes (16, 32) would hide it
            _layer(("(d_model, d_ff, dropout)", "(d_model, 2 * d_model, dropout)")), 4,
            ("feed_forward.w_1.weight", "no fixed sizes")),
    Mistake("self_attn.w_q named otherwise",  # every check needs the contract's names: all lose their point
            _layer(("n_heads, dropout)\n", "n_heads, dropout)\n        self.self_attn.query = self.self_attn.w_q\n"
                                            "        del self.self_attn.w_q\n")), 0, ("self_attn.w_q", "contract")),
]


@pytest.mark.parametrize("m", mistakes("EncoderLayer", ENCODER_LAYER_MISTAKES))
def test_encoder_layer_mistakes(m):
    assert_mistake(m)


class EncoderLayerTorch(nn.TransformerEncoderLayer):
    """PyTorch's encoder layer under the contract's name."""

    def __init__(self, d_model, self_attn=None, feed_forward=None, dropout=0.1, norm_first=False):
        super().__init__(d_model, 4, 4 * d_model, dropout, batch_first=True, norm_first=norm_first)


def test_pytorch_encoder_layer_earns_nothing():
    points, text = grade(EncoderLayerTorch, "EncoderLayer")
    assert points == 0 and text.count("PyTorch's nn.Transformer modules") == text.count("✗") > 0, text


# ---------------------------------------------------------------- Encoder: correct, written differently
class EncoderClones(nn.Module):
    """The Annotated Transformer's way: deep copies of one layer, PyTorch's LayerNorm at the end."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        layer = EncoderLayerExplicit(d_model, n_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, src_mask):
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class EncoderReduce(nn.Module):
    """functools.reduce over the layers; `norm` is None in post-norm (it has no parameters either way)."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayerSolutionsParts(d_model, n_heads, d_ff, dropout, norm_first)
                                    for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask):
        x = functools.reduce(lambda h, layer: layer(h, src_mask), self.layers, x)
        return x if self.norm is None else self.norm(x)


class EncoderRecursive(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayerLoop(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def run(self, x, mask, i=0):
        return x if i == len(self.layers) else self.run(self.layers[i](x, mask), mask, i + 1)

    def forward(self, x, src_mask):
        return self.norm(self.run(x, src_mask))


class EncoderFunctionNorm(nn.Module):
    """Layers appended one by one; in post-norm `norm` is a plain function (no parameters)."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(solutions.EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first=norm_first))
        self.norm = LayerNorm(d_model) if norm_first else (lambda t: t)

    def forward(self, x, src_mask):
        for i in range(len(self.layers)):
            x = self.layers[i](x, src_mask)
        return self.norm(x)


class EncoderCheckpointed(solutions.Encoder):
    """Gradient checkpointing per layer, reentrant (torch.autograd.grad would refuse it: the check uses backward)."""

    def forward(self, x, src_mask):
        for layer in self.layers:
            x = checkpoint.checkpoint(layer, x, src_mask, use_reentrant=True)
        return self.norm(x)


class EncoderChildren(nn.Module):
    """children() of the ModuleList, a keyword-only extra argument, its own LayerNorm, **kwargs in forward."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False, *, share=False):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayerSDPA(d_model, n_heads, d_ff, dropout, norm_first)
                                     for _ in range(n_layers)])
        self.norm = VarMeanLayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, src_mask=None, **kwargs):
        for layer in self.layers.children():
            x = layer(x, src_mask)
        return self.norm(x)


class EncoderSequentialIndexed(nn.Module):
    """Layers in an nn.Sequential, indexed in a range loop over a stored count."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.Sequential(*[EncoderLayerFloat64(d_model, n_heads, d_ff, dropout, norm_first)
                                      for _ in range(n_layers)])
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()
        self.n = n_layers

    def forward(self, x, src_mask):
        h = x
        for i in range(self.n):
            h = self.layers[i](h, src_mask)
        return self.norm(h)


class EncoderPerSentence(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayerPerSentence(d_model, n_heads, d_ff, dropout, norm_first)
                                    for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask):
        for layer in self.layers:
            x = layer(x, src_mask)
        return x if self.norm is None else self.norm(x)


class EncoderReinitialisedCopies(nn.Module):
    """Deep copies of one layer, each re-initialised; the input cloned first; nn.LayerNorm at the end."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        proto = EncoderLayerFloat64FeedForward(d_model, n_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList([copy.deepcopy(proto) for _ in range(n_layers)])
        for layer in self.layers:
            for p in layer.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, src_mask):
        out = x.clone()
        for layer in self.layers:
            out = layer(out, src_mask)
        return self.norm(out)


CORRECT_ENCODERS = {
    "deep copies of one layer": EncoderClones, "functools.reduce": EncoderReduce, "recursive": EncoderRecursive,
    "a function as the post-norm norm": EncoderFunctionNorm, "checkpointed, reentrant": EncoderCheckpointed,
    "checkpointed": edit(ENCODER, ("x = layer(x, src_mask)",
                                   "x = torch.utils.checkpoint.checkpoint(layer, x, src_mask, use_reentrant=False)")),
    "children()": EncoderChildren, "nn.Sequential, indexed": EncoderSequentialIndexed,
    "one sentence at a time": EncoderPerSentence, "re-initialised copies": EncoderReinitialisedCopies,
}


@pytest.mark.parametrize("cls", CORRECT_ENCODERS.values(), ids=CORRECT_ENCODERS)
def test_other_correct_encoders(cls):
    assert_full_marks(cls, "Encoder")


@pytest.mark.parametrize("cls,name,title", [
    (edit(LAYER, ("MultiHeadAttention(d_model, n_heads, dropout)", "MultiHeadAttention(d_model, n_heads)")),
     "EncoderLayer", "post-norm equals"),
    (edit(ENCODER, ("EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)",
                    "EncoderLayer(d_model, n_heads, d_ff, norm_first=norm_first)")), "Encoder", "post-norm stack")],
    ids=["attention", "layers"])
def test_dropout_not_passed_on_is_not_blamed_on_detach(cls, name, title):
    """A part built without the dropout argument (its default 0.1 where 0.0 was asked): the dropout check alone
    names it."""
    points, line = grade_one(cls, name, title)
    assert points == 1, line


# ---------------------------------------------------------------- Encoder: classic mistakes
def _encoder(*changes):
    return edit(ENCODER, *changes)


def _layers(new):
    return edit(ENCODER, ("nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)\n"
                          "                                     for _ in range(n_layers)])", new))


def _final(new):
    return edit(ENCODER, ("LayerNorm(d_model) if norm_first else nn.Identity()", new))


def _loop(new):
    return edit(ENCODER, ("for layer in self.layers:", new))


_EACH, _NORM = "x = layer(x, src_mask)", "return self.norm(x)"
_LAYER = "EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)"
ENCODER_MISTAKES = [
    # the layers
    Mistake("one layer repeated n times", _layers(f"nn.ModuleList([{_LAYER}] * n_layers)"), 1,
            ("repeated", "deepcopy")),
    Mistake("layers share parameters", _layers(f"nn.ModuleList({_LAYER} for _ in range(n_layers))\n"
                                               "        for layer in self.layers[1:]:\n"
                                               "            layer.self_attn = self.layers[0].self_attn"), 1,
            "share parameter"),
    Mistake("layers in a Python list", _layers(f"[{_LAYER} for _ in range(n_layers)]"), 4, "plain Python list"),
    Mistake("norm_first not passed to the layers", _encoder(("dropout, norm_first)\n", "dropout)\n")), 4,
            "norm_first not passed"),
    Mistake("pre-norm layers in a post-norm stack", _encoder(("dropout, norm_first)\n", "dropout, True)\n")), 3,
            "norm_first ignored"),
    # the final norm
    Mistake("final norm in post-norm", _final("LayerNorm(d_model)"), 2, "final norm present in the post-norm"),
    Mistake("final norm missing in pre-norm", _final("nn.Identity()"), 3, "final norm missing"),
    Mistake("final norm built but not applied", _encoder((_NORM, "return x")), 4, "final norm missing"),
    Mistake("final norm after every layer", _encoder((_EACH, "x = self.norm(layer(x, src_mask))"), (_NORM, "return x")),
            4, "after every layer"),
    Mistake("final norm applied twice", _encoder((_NORM, "return self.norm(self.norm(x))")), 4,
            "final norm applied twice"),
    # the loop
    Mistake("each layer applied to the input", _encoder(("for layer", "out = x\n        for layer"),
                                                        (_EACH, "out = layer(x, src_mask)"),
                                                        (_NORM, "return self.norm(out)")), 2, "stack's input"),
    Mistake("return inside the loop", _encoder((_EACH, "return self.norm(layer(x, src_mask))")), 2,
            "only the first layer"),
    Mistake("the first layer skipped", _loop("for layer in self.layers[1:]:"), 2, "first layer skipped"),
    Mistake("the last layer skipped", _loop("for layer in self.layers[:-1]:"), 2, "stops early"),
    Mistake("layers in reverse order", _loop("for layer in reversed(self.layers):"), 2, "reverse order"),
    Mistake("layers' outputs copied into x", _encoder((_EACH, "x.copy_(layer(x, src_mask))")), 1, "changed in place"),
    Mistake("dropout on the stack's input",  # the positional encoding has already dropped the embeddings
            _encoder(("self.norm = ", "self.drop = nn.Dropout(dropout)\n        self.norm = "),
                     ("for layer", "x = self.drop(x)\n        for layer")), 4,
            "dropout applied to the encoder's input"),
    Mistake("forward under torch.no_grad()", _encoder(forward_under(ENCODER, "with torch.no_grad():")), 4,
            "cut off from autograd"),
    # the mask
    Mistake("src_mask not passed", _encoder((_EACH, "x = layer(x, None)")), 4, "mask is not passed"),
    Mistake("src_mask to the first layer only", _encoder(("layer in self.layers", "i, layer in enumerate(self.layers)"),
                                                         (_EACH, "x = layer(x, src_mask if i == 0 else None)")), 4,
            "first layer only"),
    Mistake("mask inverted before the layers", _encoder((_EACH, "x = layer(x, ~src_mask)")), 1, "src_mask inverted"),
    # the dropout argument
    Mistake("dropout argument ignored", _encoder(init_also("dropout = 0.1")), 4, "dropout argument is ignored"),
    Mistake("layers built without dropout", _encoder(init_also("dropout = 0.0")), 4, "dropout argument is not used"),
]


@pytest.mark.parametrize("m", mistakes("Encoder", ENCODER_MISTAKES))
def test_encoder_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- an error in the learner's code: where, which shapes
class EncoderLayerTransposesTheAttention(solutions.EncoderLayer):
    """A shape mistake of no known kind: the message says where, with which shapes, after which call, and guesses no
    cause (5 is the length of both x and h: the sizes do not point at one tensor's dimension)."""

    def forward(self, x, src_mask):
        h = self.self_attn(x, x, x, src_mask)
        y = x + h.transpose(0, 1)
        return self.sublayers[1](self.sublayers[0].norm(y), self.feed_forward)


def test_an_error_of_no_known_kind_says_where_and_guesses_nothing():
    points, line = grade_one(EncoderLayerTransposesTheAttention, "EncoderLayer", "has self_attn")
    assert points == 0, line
    assert ("your code raised RuntimeError: The size of tensor a (5) must match the size of tensor b (2) at "
            "non-singleton dimension 1 (in forward, line ") in line, line
    assert line.endswith(": `y = x + h.transpose(0, 1)`), with x (2, 5, 16), h (2, 5, 16); the call was "
                         "EncoderLayer.forward(x (2, 5, 16), src_mask=None)"), line
    assert "Likely:" not in line, line


class EncoderLayerCentersWithoutKeepdim(solutions.EncoderLayer):
    """x - x.mean(-1): the mean lost its dimension, (2, 5) against (2, 5, 16). The sizes in the error, 16 and 5, are
    each one dimension of x, which the message says. x is reassigned before the error: the call still shows it as the
    check gave it (from the module call that entered forward)."""

    def forward(self, x, src_mask):
        x = x - x.mean(-1)
        return super().forward(x, src_mask)


def test_sizes_that_point_at_one_dimension_each_are_named():
    points, line = grade_one(EncoderLayerCentersWithoutKeepdim, "EncoderLayer", "has self_attn")
    assert points == 0, line
    assert line.endswith(": `x = x - x.mean(-1)`), with x (2, 5, 16); the call was EncoderLayer.forward(x (2, 5, 16), "
                         "src_mask=None). "
                         "Likely: 16 is x's size at dim 2 and 5 is x's size at dim 1: on this line the one stands where "
                         "the other was needed (a sum or a mean without keepdim=True, an index, a transpose or a view "
                         "that took the wrong dimension)"), line


def test_an_error_raised_in_the_kernel_names_the_learners_line_too():
    """Graded by `python -m autograder grade`, the learner's code runs in the notebook's kernel and its errors come
    back rebuilt, with the frames the kernel sent (file, line, function, line's text): the message names the same
    line as in a lesson."""
    from autograder.core import Check, run_check

    def raises_as_the_channel_does(obj):
        e = RuntimeError("The size of tensor a (5) must match the size of tensor b (2) at non-singleton dimension 1")
        e.remote_frames = [("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", "1775", "_call_impl", ""),
                           ("/tmp/ipykernel_77/1234.py", "18", "forward", "    y = x + h.transpose(0, 1)")]
        raise e
    points, line = run_check(Check("EncoderLayer", "a check", 1.0, raises_as_the_channel_does, 10.0), object())
    assert points == 0 and line.endswith("your code raised RuntimeError: The size of tensor a (5) must match the size "
                                         "of tensor b (2) at non-singleton dimension 1 (in forward, line 18: "
                                         "`y = x + h.transpose(0, 1)`)"), line


def test_an_error_raised_in_the_kernel_gives_the_call_the_shapes_and_the_likely():
    """Across the channel the kernel's locals stay there: the kernel sends the shapes of the tensors on the failing
    line with the error (serve.LearnerEndpoint._describe), so the message is the one a lesson gives: the learner's
    line, those shapes and the Likely made from them; the call as the check made it, with the shapes of the check's
    own tensors (parameter names stay on the kernel's side: positional arguments are shown by shape alone)."""
    class EncoderLayer(EncoderLayerCentersWithoutKeepdim):  # the class a notebook defines: the contract's name
        pass
    points, line = grade_one_across(EncoderLayer, "EncoderLayer", "has self_attn")
    assert points == 0, line
    assert ("your code raised RuntimeError: The size of tensor a (16) must match the size of tensor b (5) at "
            "non-singleton dimension 2 (in forward, line ") in line, line
    assert line.endswith(": `x = x - x.mean(-1)`), with x (2, 5, 16); the call was EncoderLayer.forward((2, 5, 16), "
                         "None). Likely: 16 is x's size at dim 2 and 5 is x's size at dim 1: on this line the one "
                         "stands where the other was needed (a sum or a mean without keepdim=True, an index, a "
                         "transpose or a view that took the wrong dimension)"), line


@pytest.mark.parametrize("site", [
    {"file": "/tmp/ipykernel_77/999.py", "line": 18, "shapes": {"x": [2, 5, 16]}, "last": {}},  # another frame
    {"file": "/tmp/ipykernel_77/1234.py", "line": 18, "shapes": {"x": "(2, 5, 16)", "1x": [5]}, "last": [1]},
    {"file": "/tmp/ipykernel_77/1234.py", "line": 18, "shapes": {"x": [2, -5, 16.0]}, "last": {"h": [2] * 99}}])
def test_shapes_the_kernel_sends_are_read_as_data_and_checked(site):
    """What the kernel sends with an error is the learner's side's word: shapes that are not lists of sizes, names
    that are not names, or a frame other than the failing one's are left out (the message gives no shapes and no
    Likely), never shown as sent."""
    from autograder.core import Check, run_check

    def raises_as_the_channel_does(obj):
        e = RuntimeError("The size of tensor a (16) must match the size of tensor b (5) at non-singleton dimension 2")
        e.remote_frames = [("/tmp/ipykernel_77/1234.py", "18", "forward", "    x = x - x.mean(-1)")]
        e.remote_site = site
        raise e
    points, line = run_check(Check("EncoderLayer", "a check", 1.0, raises_as_the_channel_does, 10.0), object())
    assert points == 0 and line.endswith("(in forward, line 18: `x = x - x.mean(-1)`)"), line
