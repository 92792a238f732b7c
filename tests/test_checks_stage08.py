"""Stage 08's checks: full marks for correct code however written; for each classic mistake of the encoder
layer and stack, exactly the points it earns and the words that name it (the reference and the stub:
tests/test_registry.py). Stage 09 and 10 build their correct styles on the modules defined here."""
import copy  # noqa: F401 (copy, math, F, checkpoint: for the styles' code, which sees this file's names)
import functools
import inspect
import math  # noqa: F401
import textwrap

import pytest
import torch.nn.functional as F  # noqa: F401
import torch.utils.checkpoint as checkpoint  # noqa: F401
from torch import nn

import solutions
from solutions import LayerNorm, MultiHeadAttention, PositionwiseFeedForward, SublayerConnection
from tests.grading import (
    Mistake,
    assert_full_marks,
    assert_mistake,
    edit,
    grade,
    grade_one,
    grade_one_across,
    mistakes,
)

LAYER, ENCODER = solutions.EncoderLayer, solutions.Encoder


# ---------------------------------------------------------------- changes for edit() (stage 09 uses them too)
def _body(reference, region=-1):
    """The lines of one of the reference's solution regions, as written (-1: its forward's, 1: its
    __init__'s)."""
    source = textwrap.dedent(inspect.getsource(reference))
    return source.split("### BEGIN SOLUTION\n")[region].split("        ### END")[0]


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


def _style(reference, *changes, init=(), forward=(), methods=(), name=None):
    """The reference with its __init__'s and its forward's solution lines written anew as `init` and `forward`
    (one line a string; none: as written), `methods` (lines) put before forward, then `changes`. Its code may
    use this file's names as they are when it is made (copy, functools, F, checkpoint, the parts and styles
    above it)."""
    for region, lines in ((1, init), (-1, forward)):
        if lines:
            changes = ((_body(reference, region), "".join(f"        {line}\n" for line in lines)), *changes)
    if methods:
        changes = (*changes,
                   ("    def forward", "".join(f"    {line}\n" for line in methods) + "\n    def forward"))
    made = edit(reference, *changes, name=name)
    for key, value in globals().items():
        made.forward.__globals__.setdefault(key, value)
    return made


# ---------------------------------------------------------- parts written differently (stage 09 imports them)
_HEADS = "self.h = n_heads", ("self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ "
                              "in range(4))")
_EINSUM = dict(init=[*_HEADS, "self.drop = nn.Dropout(dropout)"], forward=[
    "B, Lq, d = query.shape", "q = self.w_q(query).reshape(B, Lq, self.h, -1)  # (B, Lq, h, d_k)",
    "k = self.w_k(key).reshape(B, key.size(1), self.h, -1)  # (B, Lk, h, d_k)",
    "v = self.w_v(value).reshape(B, key.size(1), self.h, -1)",
    'scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.size(-1))',
    "if mask is not None:", "    scores = scores.masked_fill(mask.logical_not(), -1e9)",
    'w = self.drop(scores.softmax(-1))', 'return self.w_o(torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, '
                                         'Lq, d))'])
# multi-head attention with einsum, heads as an explicit axis, a -1e9 fill, no stored weights
EinsumAttention = _style(MultiHeadAttention, **_EINSUM, name="EinsumAttention")
# the same, taking an additive float mask (0 or -1e9) instead of a boolean one
AdditiveAttention = _style(MultiHeadAttention, ("mask=None", "add=None"), (
    "if mask is not None:\n            scores = scores.masked_fill(mask.logical_not(), -1e9)",
    "if add is not None:\n            scores = scores + add"), **_EINSUM, name="AdditiveAttention")
# F.scaled_dot_product_attention with the boolean mask (True = may attend is PyTorch's convention there too)
SDPAAttention = _style(MultiHeadAttention, init=[*_HEADS, "self.p = dropout"], forward=[
    "def split(t):", "    return t.unflatten(-1, (self.h, -1)).transpose(1, 2)",
    "out = F.scaled_dot_product_attention(split(self.w_q(query)), split(self.w_k(key)), "
    "split(self.w_v(value)),",
    "                                     attn_mask=mask, dropout_p=self.p if self.training else 0.0)",
    "return self.w_o(out.transpose(1, 2).flatten(2))"], name="SDPAAttention")
# scores in float64 through bmm over batch * heads, -inf fill then nan_to_num
Float64Attention = _style(MultiHeadAttention, init=[*_HEADS, "self.drop = nn.Dropout(dropout)"], forward=[
    "B, Lq, d = query.shape", "Lk, h, dk = key.size(1), self.h, d // self.h", "", "def heads(t, L):",
    "    return t.view(B, L, h, dk).permute(0, 2, 1, 3).reshape(B * h, L, dk)",
    "q, k, v = heads(self.w_q(query), Lq).double(), heads(self.w_k(key), Lk).double(), "
    "heads(self.w_v(value), Lk)",
    "s = (torch.bmm(q, k.transpose(1, 2)) * dk ** -0.5).view(B, h, Lq, Lk)",
    "if mask is not None:", '    s = s.masked_fill(~mask.expand(B, h, Lq, Lk), float("-inf"))',
    "w = self.drop(torch.softmax(s, -1).nan_to_num(0.0).float()).reshape(B * h, Lq, Lk)",
    "return self.w_o(torch.bmm(w, v).view(B, h, Lq, dk).permute(0, 2, 1, 3).reshape(B, Lq, d))"],
    name="Float64Attention")
_FFN_DROP, _FFN_RETURN = ("self.dropout = nn.Dropout(dropout)",
                          "return self.w_2(self.dropout(torch.relu(self.w_1(x))))")
# F.dropout with the module's training flag, no default for dropout
FeedForward = _style(PositionwiseFeedForward, ("dropout: float = 0.1)", "dropout)"),
                     (_FFN_DROP, "self.p = dropout"),
                     (_FFN_RETURN, "return self.w_2(F.dropout(F.relu(self.w_1(x)), self.p, "
                                   "training=self.training))"),
                     name="FeedForward")
# w_1 and w_2 registered, and run through an nn.Sequential with an in-place ReLU
SequentialFeedForward = _style(
    PositionwiseFeedForward, (_FFN_RETURN, "return self.net(x)"),
    (_FFN_DROP, "self.net = nn.Sequential(self.w_1, nn.ReLU(inplace=True), nn.Dropout(dropout), self.w_2)"),
    name="SequentialFeedForward")
# torch.var_mean and addcmul; eps keyword-only
VarMeanLayerNorm = _style(LayerNorm, ("d_model: int, eps", "d_model: int, *, eps"), forward=[
    "var, mean = torch.var_mean(x, -1, unbiased=False, keepdim=True)",
    "return torch.addcmul(self.bias, self.weight, (x - mean) * torch.rsqrt(var + self.eps))"],
                          name="VarMeanLayerNorm")


class Residual(nn.Module):
    """Holds a PyTorch LayerNorm and a dropout rate; the layer writes the residual sum out itself."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm, self.dropout = nn.LayerNorm(d_model), nn.Dropout(dropout)


# its own connection: an in-place dropout, and `out += x` on the tensor it created itself
InPlaceConnection = _style(SublayerConnection, ("LayerNorm(d_model)", "VarMeanLayerNorm(d_model)"),
                           ("nn.Dropout(dropout)", "nn.Dropout(dropout, inplace=True)"),
                           ("return self.norm(x + self.dropout(sublayer(x)))",
                            "out = self.dropout(sublayer(x))\n        out += x\n        return "
                            "self.norm(out)"),
                           name="InPlaceConnection")

# ------------------------------------------------------- EncoderLayer and Encoder: correct, written otherwise
_MASK_ARG, _LAST_ARG = "src_mask: torch.Tensor | None)", "norm_first: bool = False"
_CONNECTION = "SublayerConnection(d_model, dropout, norm_first)"
_CONNECTIONS = f"nn.ModuleList([{_CONNECTION} for _ in range(2)])"
# everything written out: einsum attention, nn.LayerNorm, the residual sums in forward
EncoderLayerExplicit = _style(LAYER, init=[
    "self.self_attn = EinsumAttention(d_model, n_heads, dropout)", "self.feed_forward = FeedForward(d_model, "
                                                                   "d_ff, "
    "dropout)", "self.sublayers = nn.ModuleList(Residual(d_model, dropout) for _ in range(2))",
    "self.norm_first = norm_first"], forward=[
    "for sub, f in zip(self.sublayers, (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)):",
    "    x = x + sub.dropout(f(sub.norm(x))) if self.norm_first else sub.norm(x + sub.dropout(f(x)))",
                                              "return x"])
# the course's parts, the sublayers built one by one, an extra attribute of its own
EncoderLayerSolutionsParts = _style(LAYER, (_MASK_ARG, "src_mask=None)"), init=[
    "self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)",
    "self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)", "self.sublayers = nn.ModuleList()",
    f"self.sublayers.append({_CONNECTION})", f"self.sublayers.append({_CONNECTION})", "self.size = d_model"],
                                    forward=[
    "attended = self.sublayers[0](x, lambda q: self.self_attn(query=q, key=q, value=q, mask=src_mask))",
    "return self.sublayers[1](attended, lambda h: self.feed_forward(h))"])
# the sublayers zipped with a list of callables; deep-copied connections; an extra keyword argument
EncoderLayerLoop = _style(LAYER, (_LAST_ARG, f'{_LAST_ARG}, activation="relu"'),
                          (_MASK_ARG, "src_mask=None)"),
                          (_CONNECTIONS, f'nn.ModuleList(copy.deepcopy({_CONNECTION}) for _ in "ab")'),
                          forward=[
    "steps = [lambda t: self.self_attn(t, t, t, mask=src_mask), self.feed_forward]",
    "for connection, step in zip(self.sublayers, steps):", "    x = connection(x, step)", "return x"])
EncoderLayerSDPA = _style(
    LAYER, ("MultiHeadAttention(", "SDPAAttention("), ("PositionwiseFeedForward(", "SequentialFeedForward("),
    ("SublayerConnection(", "InPlaceConnection("), (_LAST_ARG, f"{_LAST_ARG}, *, eps=1e-5"),
    (_MASK_ARG, "src_mask=None, *, need_weights=False)"))
# float64 attention; the mask flattened to (B, L) and rebuilt as (B, 1, 1, L)
EncoderLayerFloat64 = _style(LAYER, ("MultiHeadAttention(", "Float64Attention("), forward_first(
    LAYER, "src_mask = None if src_mask is None else src_mask.reshape(src_mask.size(0), -1)[:, None, None, "
           ":]"))
# one sentence at a time, on its real tokens only (no mask needed then); zeros at the padding positions
EncoderLayerPerSentence = _style(LAYER, methods=[
    "def one(self, x):", "    x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t))",
    "    return self.sublayers[1](x, self.feed_forward)"], forward=[
    "if src_mask is None:", "    return self.one(x)",
    "keep, out = src_mask.reshape(x.size(0), x.size(1)), torch.zeros_like(x)", "for b in range(x.size(0)):",
    "    idx = keep[b].nonzero().flatten()", "    out[b, idx] = self.one(x[b:b + 1, idx])[0]", "return out"])
# the feed-forward computed in float64 with F.linear on cast weights; F.dropout(training=self.training)
EncoderLayerFloat64FeedForward = _style(LAYER, init_also("self.p = dropout"), ("(x, self.feed_forward)",
                                                                                 "(x, self.ff64)"), methods=[
    "def ff64(self, y):", "    f = self.feed_forward",
    "    h = F.linear(y.double(), f.w_1.weight.double(), f.w_1.bias.double())",
    "    h = F.dropout(F.relu(h), self.p, self.training)",
    "    return F.linear(h, f.w_2.weight.double(), f.w_2.bias.double()).to(y.dtype)"])
CORRECT = [("EncoderLayer", name, cls) for name, cls in {
    "explicit": EncoderLayerExplicit, "the course's parts": EncoderLayerSolutionsParts,
                                                         "a loop": EncoderLayerLoop,
    # the two connections in an nn.Sequential (indexable), a named inner function for the attention
    "connections in an nn.Sequential": _style(LAYER, (_CONNECTIONS, f"nn.Sequential({_CONNECTION}, "
                                                                    f"{_CONNECTION})"),
                                              forward=[
        "def attend(q):", "    return self.self_attn(q, q, q, src_mask)",
        "return self.sublayers[1](self.sublayers[0](x, attend), self.feed_forward)"]),
    "SDPA, in-place connections": EncoderLayerSDPA, "float64 attention": EncoderLayerFloat64,
    "one sentence at a time": EncoderLayerPerSentence, "float64 feed-forward": EncoderLayerFloat64FeedForward,
    # keyword construction, *args in forward, functools.partial for the attention, an extra **kwargs
    "functools.partial, *args": _style(
        LAYER, (_LAST_ARG,
                f'{_LAST_ARG}, activation="relu", **kwargs'), (f"x: torch.Tensor, {_MASK_ARG}", "*args)"),
        init=["self.feed_forward = PositionwiseFeedForward(d_model=d_model, d_ff=d_ff, dropout=dropout)",
              "self.self_attn = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)",
              "self.sublayers = nn.ModuleList()", "self.sublayers.extend([SublayerConnection(d_model, "
                                                  "dropout=dropout, norm_first=norm_first) for _ in "
                                                  "range(2)])"],
        methods=["def _attend(self, y, mask):", "    return self.self_attn(y, y, y, mask)"],
        forward=["x, src_mask = args[0], args[1] if len(args) > 1 else None",
                 "h = self.sublayers[0](x, functools.partial(self._attend, mask=src_mask))",
                 "return self.sublayers[1](h, self.feed_forward.forward)"]),
    # an additive float mask built under torch.no_grad() (harmless: the mask needs no gradient)
    "an additive mask built under no_grad": _style(LAYER, ("MultiHeadAttention(", "AdditiveAttention("),
                                                   forward_first(
        LAYER, "with torch.no_grad():",
        "    add = None if src_mask is None else torch.zeros(src_mask.shape).masked_fill(~src_mask, -1e9)"),
        ("y, y, y, src_mask", "y, y, y, add")),
    "the mask expanded to (B, 1, L, L)": edit(LAYER, forward_first(LAYER, "src_mask = None if src_mask is "
                                                                          "None else src_mask.expand(-1, 1, "
                                                                          "x.size(1), -1)")),
    "its output kept, detached": edit(LAYER, ("return self.sublayers[1](x, self.feed_forward)",
                                              "out = self.sublayers[1](x, self.feed_forward)\n"
                                              "        self.last = out.detach()\n        return out")),
    "no autograd in eval mode": edit(LAYER, forward_under(LAYER, "with torch.set_grad_enabled(self.training "
                                                                 "and torch.is_grad_enabled()):")),
}.items()]

_EACH, _NORM = "x = layer(x, src_mask)", "return self.norm(x)"
_FINAL, _LOOP = "LayerNorm(d_model) if norm_first else nn.Identity()", ("for layer in self.layers:\n         "
                                                                        f"   {_EACH}")
# `norm` is None in post-norm (it has no parameters either way)
_NONE = (_FINAL, "LayerNorm(d_model) if norm_first else None"), (_NORM, "return x if self.norm is None else "
                                                                         "self.norm(x)")
# the Annotated Transformer's way: deep copies of one layer, PyTorch's LayerNorm at the end
EncoderClones = _style(ENCODER, name="EncoderClones", init=[
    "layer = EncoderLayerExplicit(d_model, n_heads, d_ff, dropout, norm_first)",
    "self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(n_layers))", f"self.norm = nn.{_FINAL}"])
# gradient checkpointing per layer, reentrant (torch.autograd.grad would refuse it: the check uses backward)
EncoderCheckpointed = _style(ENCODER, (_EACH, "x = checkpoint.checkpoint(layer, x, src_mask, "
                                              "use_reentrant=True)"),
                             name="EncoderCheckpointed")
# children() of the ModuleList, a keyword-only extra argument, its own LayerNorm, **kwargs in forward
EncoderChildren = _style(ENCODER, ("EncoderLayer(", "EncoderLayerSDPA("), (_FINAL, f"VarMean{_FINAL}"),
                         (_LAST_ARG, f"{_LAST_ARG}, *, share=False"), (_MASK_ARG, "src_mask=None, **kwargs)"),
                         ("in self.layers:", "in self.layers.children():"), name="EncoderChildren")
CORRECT += [("Encoder", name, cls) for name, cls in {
    "deep copies of one layer": EncoderClones, "checkpointed, reentrant": EncoderCheckpointed,
    "checkpointed": edit(ENCODER, (_EACH, "x = torch.utils.checkpoint.checkpoint(layer, x, src_mask, "
                                          "use_reentrant=False)")),
    "children()": EncoderChildren,
    "one sentence at a time": _style(ENCODER, ("EncoderLayer(", "EncoderLayerPerSentence("), *_NONE),
    "functools.reduce": _style(ENCODER, ("EncoderLayer(", "EncoderLayerSolutionsParts("), *_NONE, (
        _LOOP, "x = functools.reduce(lambda h, layer: layer(h, src_mask), self.layers, x)")),
    "recursive": _style(ENCODER, ("EncoderLayer(", "EncoderLayerLoop("), (_LOOP + "\n        " + _NORM,
                                                                          "return self.norm(self.run(x, "
                                                                          "src_mask))"),
                        methods=["def run(self, x, mask, i=0):", "    return x if i == len(self.layers) else "
                                 "self.run(self.layers[i](x, mask), mask, i + 1)"]),
    # layers appended one by one; in post-norm `norm` is a plain function (no parameters)
    "a function as the post-norm norm": _style(
        ENCODER, (_LOOP, "for i in range(len(self.layers)):\n            x = self.layers[i](x, src_mask)"),
                                               init=[
            "self.layers = nn.ModuleList()", "for _ in range(n_layers):",
            "    self.layers.append(EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first=norm_first))",
            "self.norm = LayerNorm(d_model) if norm_first else (lambda t: t)"]),
    # layers in an nn.Sequential, indexed in a range loop over a stored count
    "nn.Sequential, indexed": _style(ENCODER, init=[
        "self.layers = nn.Sequential(*[EncoderLayerFloat64(d_model, n_heads, d_ff, dropout, norm_first)",
        "                              for _ in range(n_layers)])", f"self.norm = {_FINAL}",
                                                    "self.n = n_layers"],
        forward=["h = x", "for i in range(self.n):", "    h = self.layers[i](h, src_mask)",
                 "return self.norm(h)"]),
    # deep copies of one layer, each re-initialised; the input cloned first; nn.LayerNorm at the end
    "re-initialised copies": _style(ENCODER, init=[
        "proto = EncoderLayerFloat64FeedForward(d_model, n_heads, d_ff, dropout, norm_first)",
        "self.layers = nn.ModuleList([copy.deepcopy(proto) for _ in range(n_layers)])",
                                                   "for layer in self.layers:",
        "    for p in layer.parameters():", "        if p.dim() > 1:", "            "
                                                                       "nn.init.xavier_uniform_(p)",
        f"self.norm = nn.{_FINAL}"], forward=["out = x.clone()", "for layer in self.layers:",
                                               "    out = layer(out, src_mask)", "return self.norm(out)"]),
}.items()]


@pytest.mark.parametrize("name,cls", [pytest.param(n, c, id=f"{n}: {i}") for n, i, c in CORRECT])
def test_other_correct_styles(name, cls):
    assert_full_marks(cls, name)


_DROP = init_also("self.drop = nn.Dropout(dropout)")  # a dropout of the layer's own


@pytest.mark.parametrize("cls,name,title", [
    # the connections built without dropout, each sublayer's output dropped once in its lambda instead: fine
    (edit(LAYER, _DROP, ("(d_model, dropout, norm_first)", "(d_model, 0.0, norm_first)"),
          ("self.self_attn(y, y, y, src_mask)", "self.drop(self.self_attn(y, y, y, src_mask))"),
          ("(x, self.feed_forward)", "(x, lambda y: self.drop(self.feed_forward(y)))")),
     "EncoderLayer", "uses the dropout argument"),
    # a part built without the dropout argument (its default 0.1 where 0.0 was asked): the dropout check alone
    # names it, these not (a dropout not passed on is not blamed on a detach)
    (edit(LAYER, ("MultiHeadAttention(d_model, n_heads, dropout)", "MultiHeadAttention(d_model, n_heads)")),
     "EncoderLayer", "post-norm equals"),
    (edit(ENCODER, ("EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)",
                    "EncoderLayer(d_model, n_heads, d_ff, norm_first=norm_first)")), "Encoder",
     "post-norm stack")],
    ids=["one dropout in the lambda instead of the connection", "dropout not passed on: attention",
         "dropout not passed on: layers"])
def test_one_check_earns_its_point(cls, name, title):
    points, line = grade_one(cls, name, title)
    assert points == 1, line


class EncoderLayerTorch(nn.TransformerEncoderLayer):
    """PyTorch's encoder layer under the contract's name."""

    def __init__(self, d_model, self_attn=None, feed_forward=None, dropout=0.1, norm_first=False):
        super().__init__(d_model, 4, 4 * d_model, dropout, batch_first=True, norm_first=norm_first)


def test_pytorch_encoder_layer_earns_nothing():
    points, text = grade(EncoderLayerTorch, "EncoderLayer")
    assert points == 0 and text.count("PyTorch's nn.Transformer modules") == text.count("✗") > 0, text


# ---------------------------------------------------------------- EncoderLayer: classic mistakes
def _swap(reference, old, new, template="{}"):
    """The reference with `old` replaced by `template` filled with `new`."""
    return edit(reference, (old, template.format(new)))


_layer, _encoder = functools.partial(edit, LAYER), functools.partial(edit, ENCODER)
_SELF_ATTN = "self.self_attn(y, y, y, src_mask)"
# called with other arguments
_attend = functools.partial(_swap, LAYER, _SELF_ATTN, template="self.self_attn({})")
# built with others
_connection = functools.partial(_swap, LAYER, _CONNECTION, template="SublayerConnection({})")
_connections = functools.partial(_swap, LAYER, _CONNECTIONS)


def _forward(*lines):
    return edit(LAYER, new_forward(LAYER, *lines))


def _first(*lines):
    return edit(LAYER, forward_first(LAYER, *lines))


def _each_sublayer(*lines):
    """The forward as a loop over (connection, sublayer) pairs, the connection's parts used by hand."""
    return _forward("for sub, f in zip(self.sublayers, (lambda y: self.self_attn(y, y, y, src_mask), "
                    "self.feed_forward)):", *(f"    {line}" for line in lines), "return x")


_ATTEND, _FEED, _ELSE = "x = self.sublayers[0]", "return self.sublayers[1]", ("else:", "    x = sub(x, f)")
ENCODER_LAYER_MISTAKES = [
    # the sublayer connections
    Mistake("norm_first ignored", _connection("d_model, dropout"), 4, "norm_first ignored"),
    Mistake("always pre-norm", _connection("d_model, dropout, True"), 3, "pre-norm computed where post-norm "
                                                                         "was asked"),
    Mistake("SublayerConnection(d_model, norm_first)", _connection("d_model, norm_first"), 3,
            ("norm_first ignored", "SublayerConnection(d_model, dropout, norm_first), in that order")),
    Mistake("one sublayer object repeated", _connections(f"nn.ModuleList([{_CONNECTION}] * 2)"), 1,
            ("repeated", "* n")),
    Mistake("sublayers in a Python list", _connections(f"[{_CONNECTION} for _ in range(2)]"), 3,
            "plain Python list"),
    # which sublayer, through which connection, on what
    Mistake("sublayer order wrong", _forward("x = self.sublayers[0](x, self.feed_forward)",
                                             f"return self.sublayers[1](x, lambda y: {_SELF_ATTN})"), 2,
            "sublayer order wrong"),
    Mistake("sublayer norms swapped",
            _layer((_FEED, "return self.sublayers[0]"), (_ATTEND, "x = self.sublayers[1]")),
            2, "norms swapped"),
    Mistake("sublayers[0] used twice", _layer((_FEED, "return self.sublayers[0]")), 2,
            "sublayers[0] used for both"),
    Mistake("feed-forward sublayer missing", _layer((_ATTEND, "return self.sublayers[0]")), 2,
            "feed-forward sublayer is missing"),
    Mistake("feed-forward on the layer's input", _layer((_ATTEND, "self.sublayers[0]")), 2,
            "got the layer's input x"),
    Mistake("the lambda uses x, not its argument", _attend("x, x, x, src_mask"), 4,
            "lambda uses x instead of its argument"),
    Mistake("pre-norm: keys and values from x", _attend("y, x, x, src_mask"), 4,
            "keys and values taken from x"),
    # the residual sum and the norms
    Mistake("residual missing", _each_sublayer("x = sub.norm(sub.dropout(f(x))) if not sub.norm_first else "
                                               "sub.dropout(f(sub.norm(x)))"), 2,
            "residual connection missing"),
    Mistake("norm on the sublayer output only", _each_sublayer("x = x + sub.norm(sub.dropout(f(x)))"), 2,
            "x + LayerNorm(sublayer(x))"),
    Mistake("no LayerNorm at all", _each_sublayer("x = x + sub.dropout(f(x))"), 2, "LayerNorm missing"),
    Mistake("pre-norm residual after the norm", _each_sublayer("if sub.norm_first:", "    n = sub.norm(x)",
                                                               "    x = n + sub.dropout(f(n))", *_ELSE), 4,
            "residual taken after the norm"),
    Mistake("pre-norm layer normalizes its output",
            _layer((_FEED + "(x, self.feed_forward)", "x = self.sublayers[1](x, self.feed_forward)\n        "
                                                      "return self.sublayers[1].norm(x) if "
                                                      "self.sublayers[1].norm_first else x")), 4,
            "normalized again at its end"),
    Mistake("x += ... in place",
            _each_sublayer("if sub.norm_first:", "    x += sub.dropout(f(sub.norm(x)))", *_ELSE),
            4, "changed in place"),
    Mistake("residual path detached", _each_sublayer("x = sub.norm(x.detach() + sub.dropout(f(x))) "
                                                     "if not sub.norm_first else x + "
                                                     "sub.dropout(f(sub.norm(x)))"),
            4, ("gradient with respect to x", "cut off from autograd")),
    Mistake("forward under torch.no_grad()", _layer(forward_under(LAYER, "with torch.no_grad():")), 4,
            ("cut off from autograd", "no_grad")),
    Mistake("self.eval() inside forward", _first("self.eval()"), 4, "switched to eval mode"),
    # the mask
    Mistake("src_mask not passed to self-attention", _attend("y, y, y, None"), 4, "src_mask not passed"),
    Mistake("src_mask inverted", _attend("y, y, y, ~src_mask"), 0, "src_mask inverted"),
    # key_padding_mask's habit
    Mistake("src_mask == 0", _attend("y, y, y, src_mask == 0"), 0, "src_mask inverted"),
    Mistake("mask transposed onto the queries",
            _attend("y, y, y, None if src_mask is None else src_mask.transpose(-1, -2)"), 4,
            "hides queries instead of keys"),
    # the Annotated Transformer's habit; it raised deep inside multi-head
    Mistake("mask.unsqueeze(1) on a 4-d mask",
            # attention with no Likely
            _first("src_mask = None if src_mask is None else src_mask.unsqueeze(1)"), 2,
            ("works without the mask and fails with it", "no mask.unsqueeze(1)")),
    Mistake("the first call's mask kept",
            _layer(init_also("self.mask = None"), ("y, y, y, src_mask", "y, y, y, self.mask"),
                   (_ATTEND, "self.mask = src_mask if self.mask is None else self.mask\n        " +
                    _ATTEND)), 4,
            ("second batch", "earlier call")),
    # then flipped back for its own use: the next layer gets it flipped
    Mistake("the caller's mask flipped in place",
            _first("if src_mask is not None:", "    src_mask.logical_not_()", "    src_mask = ~src_mask"), 2,
            ("src_mask after the call", "changed in place")),
    # the dropout argument
    Mistake("dropout argument ignored", _layer(init_also("dropout = 0.1")), 4, "dropout argument is ignored"),
    Mistake("dropout never applied", _layer(init_also("dropout = 0.0")), 4, "dropout argument is not used"),
    Mistake("attention dropout left at its default",
            _layer(("(d_model, n_heads, dropout)", "(d_model, n_heads)")), 4,
            "dropout argument is ignored"),
    # p = 1 drops the whole sublayer output in the connection, hiding a part that drops nothing itself
    Mistake("attention built with dropout 0.0",
            _layer(("(d_model, n_heads, dropout)", "(d_model, n_heads, 0.0)")), 4,
            ("`self_attn` ignores the dropout argument", "attention weights are never dropped")),
    Mistake("feed-forward built with dropout 0.0",
            _layer(("(d_model, d_ff, dropout)", "(d_model, d_ff, 0.0)")), 4,
            ("`feed_forward` ignores the dropout argument", "hidden units are never dropped")),
    Mistake("F.dropout active in eval mode", _layer((_SELF_ATTN, f"torch.nn.functional.dropout({_SELF_ATTN}, "
                                                                 "0.5)")), 1,
            "eval mode"),
    Mistake("dropout on the residual sum", _each_sublayer("x = x + sub.dropout(f(sub.norm(x))) if "
                                                          "sub.norm_first else sub.norm(sub.dropout(x + "
                                                          "f(x)))"),
            4, "dropout applied to the residual sum"),
    Mistake("a second dropout on self_attn's output",  # which the connection drops again (p = 1 cannot tell)
            _layer(_DROP, (_SELF_ATTN, f"self.drop({_SELF_ATTN})")), 0,
            ("second dropout on the self_attn sublayer", "dropped twice"), title="uses the dropout argument"),
    Mistake("a second dropout on feed_forward's output",
            _layer(_DROP, ("(x, self.feed_forward)", "(x, lambda y: self.drop(self.feed_forward(y)))")), 0,
            ("second dropout on the feed_forward sublayer", "dropped twice"),
            title="uses the dropout argument"),
    # the contract's names and sizes
    Mistake("d_ff hard-coded as 2 * d_model",  # the check's own sizes (16, 32) would hide it
            _layer(("(d_model, d_ff, dropout)", "(d_model, 2 * d_model, dropout)")), 4,
            ("feed_forward.w_1.weight", "no fixed sizes")),
    Mistake("n_heads hard-coded as 8",  # 8 divides the check's d_model, 16
            _layer(("(d_model, n_heads, dropout)",
                    "(d_model, 8 if d_model % 8 == 0 else n_heads, dropout)")), 2,
            "n_heads not passed on to MultiHeadAttention: 8 heads computed where 4 were asked"),
    Mistake("self_attn.w_q named otherwise",  # every check needs the contract's names: all lose their point
            _layer(("n_heads, dropout)\n", "n_heads, dropout)\n        self.self_attn.query = "
                                           "self.self_attn.w_q\n        del self.self_attn.w_q\n")), 0,
            ("self_attn.w_q", "contract")),
]

# ---------------------------------------------------------------- Encoder: classic mistakes
_LAYER = "EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)"
_layers = functools.partial(_swap, ENCODER, f"nn.ModuleList([{_LAYER}\n{' ' * 37}for _ in range(n_layers)])")
_final = functools.partial(_swap, ENCODER, _FINAL)
_loop = functools.partial(_swap, ENCODER, "for layer in self.layers:")
ENCODER_MISTAKES = [
    # issue 40: was told only "n_layers layers in an nn.ModuleList"
    Mistake("range(n_heads) for the layers",
            edit(ENCODER, ("for _ in range(n_layers)", "for _ in range(n_heads)")), 0,
            "Likely: n_heads (4) layers",
            not_says="Likely: n_layers layers in an nn.ModuleList"),
    # the layers
    Mistake("one layer repeated n times", _layers(f"nn.ModuleList([{_LAYER}] * n_layers)"), 1,
            ("repeated", "deepcopy")),
    Mistake("layers share parameters", _layers(f"nn.ModuleList({_LAYER} for _ in range(n_layers))\n"
                                               "        for layer in self.layers[1:]:\n"
                                               "            layer.self_attn = self.layers[0].self_attn"), 1,
            "share parameter"),
    Mistake("layers in a Python list", _layers(f"[{_LAYER} for _ in range(n_layers)]"), 4,
            "plain Python list"),
    Mistake("norm_first not passed to the layers", _encoder(("dropout, norm_first)\n", "dropout)\n")), 4,
            "norm_first not passed"),
    Mistake("pre-norm layers in a post-norm stack", _encoder(("dropout, norm_first)\n", "dropout, True)\n")),
            3,
            "norm_first ignored"),
    # the final norm
    Mistake("final norm in post-norm", _final("LayerNorm(d_model)"), 2,
            "final norm present in the post-norm"),
    Mistake("final norm missing in pre-norm", _final("nn.Identity()"), 3, "final norm missing"),
    Mistake("final norm without weight and bias",
            _final("nn.LayerNorm(d_model, elementwise_affine=False) if norm_first else nn.Identity()"), 3,
            ("without its weight and bias (elementwise_affine=False)", "no weight and bias of its own"),
            not_says="final norm missing"),
    Mistake("final norm built but not applied", _encoder((_NORM, "return x")), 4, "final norm missing"),
    Mistake("final norm after every layer",
            _encoder((_EACH, "x = self.norm(layer(x, src_mask))"), (_NORM, "return x")),
            4, "after every layer"),
    Mistake("final norm applied twice", _encoder((_NORM, "return self.norm(self.norm(x))")), 4,
            "final norm applied twice"),
    # the loop
    Mistake("each layer applied to the input", _encoder(("for layer", "out = x\n        for layer"), (
        _EACH, "out = layer(x, src_mask)"), (_NORM, "return self.norm(out)")), 2, "stack's input"),
    Mistake("return inside the loop", _encoder((_EACH, "return self.norm(layer(x, src_mask))")), 2,
            "only the first layer"),
    Mistake("the first layer skipped", _loop("for layer in self.layers[1:]:"), 2, "first layer skipped"),
    Mistake("the last layer skipped", _loop("for layer in self.layers[:-1]:"), 2, "stops early"),
    Mistake("layers in reverse order", _loop("for layer in reversed(self.layers):"), 2, "reverse order"),
    Mistake("layers' outputs copied into x", _encoder((_EACH, "x.copy_(layer(x, src_mask))")), 1,
            "changed in place"),
    Mistake("dropout on the stack's input",  # the positional encoding has already dropped the embeddings
            _encoder(("self.norm = ", "self.drop = nn.Dropout(dropout)\n        self.norm = "),
                     ("for layer", "x = self.drop(x)\n        for layer")), 4,
            "dropout applied to the encoder's input"),
    Mistake("forward under torch.no_grad()", _encoder(forward_under(ENCODER, "with torch.no_grad():")), 4,
            "cut off from autograd"),
    # the mask
    Mistake("src_mask not passed", _encoder((_EACH, "x = layer(x, None)")), 4, "mask is not passed"),
    Mistake("src_mask to the first layer only",
            _encoder(("layer in self.layers", "i, layer in enumerate(self.layers)"),
                                                         (_EACH, "x = layer(x, src_mask if i == 0 else "
                                                                 "None)")), 4,
            "first layer only"),
    Mistake("mask inverted before the layers", _encoder((_EACH, "x = layer(x, ~src_mask)")), 1,
            "src_mask inverted"),
    # the dropout argument
    Mistake("dropout argument ignored", _encoder(init_also("dropout = 0.1")), 4,
            "dropout argument is ignored"),
    Mistake("layers built without dropout", _encoder(init_also("dropout = 0.0")), 4,
            "dropout argument is not used"),
]


@pytest.mark.parametrize("m", [pytest.param(*p.values, id=f"{p.values[0].contract}: {p.id}") for p in [
    *mistakes("EncoderLayer", ENCODER_LAYER_MISTAKES), *mistakes("Encoder", ENCODER_MISTAKES)]])
def test_mistakes(m):
    assert_mistake(m)


# -------------------------------------------------------- an error in the learner's code: where, which shapes
def test_an_error_of_no_known_kind_says_where_and_guesses_nothing():
    """A shape mistake of no known kind: the message says where, with which shapes, after which call, and
    guesses no cause (5 is the length of both x and h: the sizes do not point at one tensor's dimension)."""
    transposes = _forward("h = self.self_attn(x, x, x, src_mask)", "y = x + h.transpose(0, 1)",
                          "return self.sublayers[1](self.sublayers[0].norm(y), self.feed_forward)")
    points, line = grade_one(transposes, "EncoderLayer", "has self_attn")
    assert points == 0, line
    assert ("your code raised RuntimeError: The size of tensor a (5) must match the size of tensor b (2) at "
            "non-singleton dimension 1 (in forward, line ") in line, line
    assert line.endswith(": `y = x + h.transpose(0, 1)`), with x (2, 5, 16), h (2, 5, 16); the call was "
                         "EncoderLayer.forward(x (2, 5, 16), src_mask=None)"), line
    assert "Likely:" not in line, line


EncoderLayerCentersWithoutKeepdim = _first("x = x - x.mean(-1)")


_LIKELY = ("Likely: 16 is x's size at dim 2 and 5 is x's size at dim 1: on this line the one stands where "
           "the other was needed (a sum or a mean without keepdim=True, an index, a transpose or a view that "
           "took the wrong dimension)")


def test_sizes_that_point_at_one_dimension_each_are_named():
    """x - x.mean(-1): the mean lost its dimension, (2, 5) against (2, 5, 16). The sizes in the error, 16 and
    5, are each one dimension of x, which the message says. x is reassigned before the error: the call still
    shows it as the check gave it (from the module call that entered forward)."""
    points, line = grade_one(EncoderLayerCentersWithoutKeepdim, "EncoderLayer", "has self_attn")
    assert points == 0, line
    assert line.endswith(": `x = x - x.mean(-1)`), with x (2, 5, 16); the call was EncoderLayer.forward(x "
                         f"(2, 5, 16), src_mask=None). {_LIKELY}"), line


def _raised_across(message, frames, site=None):
    """(points, line) of a check that raises what the channel rebuilds: RuntimeError(message) with the frames
    the kernel sent (file, line, function, line's text) and, if given, the `site` it sent (the failing line's
    shapes)."""
    from autograder.core import Check, run_check

    def raises_as_the_channel_does(obj):
        e = RuntimeError(message)
        e.remote_frames = frames
        if site is not None:
            e.remote_site = site
        raise e
    return run_check(Check("EncoderLayer", "a check", 1.0, raises_as_the_channel_does, 10.0), object())


def test_an_error_raised_in_the_kernel_names_the_learners_line_too():
    """Graded by `python -m autograder grade`, the learner's code runs in the notebook's kernel and its errors
    come back rebuilt, with the frames the kernel sent (file, line, function, line's text): the message names
    the same line as in a lesson."""
    points, line = _raised_across(
        "The size of tensor a (5) must match the size of tensor b (2) at non-singleton dimension 1",
        [("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", "1775", "_call_impl", ""),
         ("/tmp/ipykernel_77/1234.py", "18", "forward", "    y = x + h.transpose(0, 1)")])
    assert points == 0 and line.endswith("your code raised RuntimeError: The size of tensor a (5) must match "
                                         "the size of tensor b (2) at non-singleton dimension 1 (in forward, "
                                         "line 18: `y = x + h.transpose(0, 1)`)"), line


def test_an_error_raised_in_the_kernel_gives_the_call_the_shapes_and_the_likely():
    """Across the channel the kernel's locals stay there: the kernel sends the shapes of the tensors on the
    failing line with the error (serve.LearnerEndpoint._describe), so the message is the one a lesson gives:
    the learner's line, those shapes and the Likely made from them; the call as the check made it, with the
    shapes of the check's own tensors, named after the parameters of the function it entered, which the kernel
    sends too."""
    # the class a notebook defines: the contract's name
    class EncoderLayer(EncoderLayerCentersWithoutKeepdim):
        pass
    points, line = grade_one_across(EncoderLayer, "EncoderLayer", "has self_attn")
    assert points == 0, line
    assert ("your code raised RuntimeError: The size of tensor a (16) must match the size of tensor b (5) at "
            "non-singleton dimension 2 (in forward, line ") in line, line
    assert line.endswith(": `x = x - x.mean(-1)`), with x (2, 5, 16); the call was EncoderLayer.forward(x "
                         f"(2, 5, 16), src_mask=None). {_LIKELY}"), line


@pytest.mark.parametrize("site", [
    # another frame
    {"file": "/tmp/ipykernel_77/999.py", "line": 18, "shapes": {"x": [2, 5, 16]}, "last": {}},
    {"file": "/tmp/ipykernel_77/1234.py", "line": 18, "shapes": {"x": "(2, 5, 16)", "1x": [5]}, "last": [1]},
    {"file": "/tmp/ipykernel_77/1234.py", "line": 18, "shapes": {"x": [2, -5, 16.0]},
     "last": {"h": [2] * 99}}])
def test_shapes_the_kernel_sends_are_read_as_data_and_checked(site):
    """What the kernel sends with an error is the learner's side's word: shapes that are not lists of sizes,
    names that are not names, or a frame other than the failing one's are left out (the message gives no
    shapes and no Likely), never shown as sent."""
    points, line = _raised_across(
        "The size of tensor a (16) must match the size of tensor b (5) at non-singleton dimension 2",
        [("/tmp/ipykernel_77/1234.py", "18", "forward", "    x = x - x.mean(-1)")], site)
    assert points == 0 and line.endswith("(in forward, line 18: `x = x - x.mean(-1)`)"), line
