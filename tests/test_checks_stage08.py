"""Stage 08's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake of the encoder layer and stack."""
import copy
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from solutions import LayerNorm, MultiHeadAttention, PositionwiseFeedForward, SublayerConnection
from tests.grading import assert_caught, assert_full_marks, grade


def test_reference_gets_full_marks():
    assert_full_marks(solutions.EncoderLayer)
    assert_full_marks(solutions.Encoder)


# ---------------------------------------------------------------- correct, written differently
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


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout):
        super().__init__()
        self.w_1, self.w_2, self.p = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), dropout

    def forward(self, x):
        return self.w_2(F.dropout(F.relu(self.w_1(x)), self.p, training=self.training))


class Residual(nn.Module):
    """Holds a PyTorch LayerNorm and a dropout rate; the layer writes the residual sum out itself."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm, self.dropout = nn.LayerNorm(d_model), nn.Dropout(dropout)


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


@pytest.mark.parametrize("cls", [EncoderLayerExplicit, EncoderLayerSolutionsParts])
def test_other_correct_encoder_layers(cls):
    assert_full_marks(cls, "EncoderLayer")


@pytest.mark.parametrize("cls", [EncoderClones, EncoderReduce])
def test_other_correct_encoders(cls):
    assert_full_marks(cls, "Encoder")


# ---------------------------------------------------------------- classic mistakes: EncoderLayer
def layer_variant(fixed_norm_first=None, fixed_dropout=None, sublayers=None, fwd=None):
    """A solutions.EncoderLayer with one thing changed."""
    class Variant(solutions.EncoderLayer):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
            super().__init__(d_model, n_heads, d_ff, dropout if fixed_dropout is None else fixed_dropout,
                             norm_first if fixed_norm_first is None else fixed_norm_first)
            if sublayers is not None:
                del self.sublayers  # a learner's __init__ would assign it only once
                self.sublayers = sublayers(d_model, dropout, norm_first)

        if fwd is not None:
            def forward(self, x, src_mask):
                return fwd(self, x, src_mask)
    return Variant


def fwd_src_mask_ignored(self, x, src_mask):
    x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, None))
    return self.sublayers[1](x, self.feed_forward)


def fwd_src_mask_inverted(self, x, src_mask):
    """~src_mask: the real tokens hidden, the padding attended."""
    x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, ~src_mask))
    return self.sublayers[1](x, self.feed_forward)


def fwd_src_mask_eq_zero(self, x, src_mask):
    """src_mask == 0, a PyTorch habit (its key_padding_mask is True at padding)."""
    x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask == 0))
    return self.sublayers[1](x, self.feed_forward)


def fwd_order_swapped(self, x, src_mask):
    x = self.sublayers[0](x, self.feed_forward)
    return self.sublayers[1](x, lambda y: self.self_attn(y, y, y, src_mask))


def fwd_norms_swapped(self, x, src_mask):
    x = self.sublayers[1](x, lambda y: self.self_attn(y, y, y, src_mask))
    return self.sublayers[0](x, self.feed_forward)


def fwd_first_sublayer_twice(self, x, src_mask):
    x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))
    return self.sublayers[0](x, self.feed_forward)


def fwd_no_residual(self, x, src_mask):
    post = not self.sublayers[0].norm_first
    for sub, f in zip(self.sublayers, (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)):
        x = sub.norm(sub.dropout(f(x))) if post else sub.dropout(f(sub.norm(x)))
    return x


def fwd_norm_inside(self, x, src_mask):
    for sub, f in zip(self.sublayers, (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)):
        x = x + sub.norm(sub.dropout(f(x)))
    return x


def fwd_pre_norm_residual_after_norm(self, x, src_mask):
    for sub, f in zip(self.sublayers, (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)):
        if sub.norm_first:
            n = sub.norm(x)
            x = n + sub.dropout(f(n))
        else:
            x = sub(x, f)
    return x


def fwd_functional_dropout(self, x, src_mask):
    """F.dropout without training=self.training: random even in eval mode."""
    x = self.sublayers[0](x, lambda y: F.dropout(self.self_attn(y, y, y, src_mask), 0.5))
    return self.sublayers[1](x, self.feed_forward)


def one_sublayer_repeated(d, p, nf):
    return nn.ModuleList([SublayerConnection(d, p, nf)] * 2)


def sublayers_in_a_list(d, p, nf):
    return [SublayerConnection(d, p, nf) for _ in range(2)]


LAYER_MISTAKES = [
    ("norm_first ignored", layer_variant(fixed_norm_first=False), ["norm_first ignored"]),
    ("always pre-norm", layer_variant(fixed_norm_first=True), ["pre-norm computed where post-norm was asked"]),
    ("src_mask not passed to self-attention", layer_variant(fwd=fwd_src_mask_ignored), ["src_mask not passed"]),
    ("src_mask inverted", layer_variant(fwd=fwd_src_mask_inverted), ["src_mask inverted"]),
    ("src_mask == 0", layer_variant(fwd=fwd_src_mask_eq_zero), ["src_mask inverted"]),
    ("sublayer order wrong", layer_variant(fwd=fwd_order_swapped), ["sublayer order wrong"]),
    ("sublayer norms swapped", layer_variant(fwd=fwd_norms_swapped), ["norms swapped"]),
    ("sublayers[0] used twice", layer_variant(fwd=fwd_first_sublayer_twice), ["sublayers[0] used for both"]),
    ("residual missing", layer_variant(fwd=fwd_no_residual), ["residual connection missing"]),
    ("norm on the sublayer output only", layer_variant(fwd=fwd_norm_inside), ["x + LayerNorm(sublayer(x))"]),
    ("pre-norm residual after the norm", layer_variant(fwd=fwd_pre_norm_residual_after_norm),
     ["residual taken after the norm"]),
    ("one sublayer object repeated", layer_variant(sublayers=one_sublayer_repeated), ["repeated", "* n"]),
    ("sublayers in a Python list", layer_variant(sublayers=sublayers_in_a_list), ["plain Python list"]),
    ("dropout argument ignored", layer_variant(fixed_dropout=0.1), ["dropout argument is ignored"]),
    ("dropout never applied", layer_variant(fixed_dropout=0.0), ["dropout argument is not used"]),
    ("F.dropout active in eval mode", layer_variant(fwd=fwd_functional_dropout), ["eval mode"]),
]


@pytest.mark.parametrize("label,cls,keywords", LAYER_MISTAKES, ids=[m[0] for m in LAYER_MISTAKES])
def test_encoder_layer_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "EncoderLayer", *keywords)


class LayerWithoutBias(solutions.EncoderLayer):
    """Attention projections named differently from the contract: copying weights in must say so."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.self_attn.query = self.self_attn.w_q
        del self.self_attn.w_q


def test_wrong_attribute_names_are_named():
    points, text = assert_caught(LayerWithoutBias, "EncoderLayer", "self_attn.w_q", "contract")
    assert points == 0  # every check needs the contract's names


# ---------------------------------------------------------------- classic mistakes: Encoder
def encoder_variant(layers=None, norm=None, layer_norm_first=None, fwd=None):
    class Variant(solutions.Encoder):
        def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
            super().__init__(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
            if layer_norm_first is not None:
                self.layers = nn.ModuleList(solutions.EncoderLayer(d_model, n_heads, d_ff, dropout, layer_norm_first)
                                            for _ in range(n_layers))
            if layers is not None:
                del self.layers  # a learner's __init__ would assign it only once
                self.layers = layers(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
            if norm is not None:
                self.norm = norm(d_model)

        if fwd is not None:
            def forward(self, x, src_mask):
                return fwd(self, x, src_mask)
    return Variant


def repeated_layer(d, h, ff, n, p, nf):
    return nn.ModuleList([solutions.EncoderLayer(d, h, ff, p, nf)] * n)


def shared_attention(d, h, ff, n, p, nf):
    layers = nn.ModuleList(solutions.EncoderLayer(d, h, ff, p, nf) for _ in range(n))
    for layer in layers[1:]:
        layer.self_attn = layers[0].self_attn
    return layers


def layers_in_a_list(d, h, ff, n, p, nf):
    return [solutions.EncoderLayer(d, h, ff, p, nf) for _ in range(n)]


def fwd_no_final_norm(self, x, src_mask):
    for layer in self.layers:
        x = layer(x, src_mask)
    return x


def fwd_each_on_input(self, x, src_mask):
    out = x
    for layer in self.layers:
        out = layer(x, src_mask)
    return self.norm(out)


def fwd_mask_first_only(self, x, src_mask):
    for i, layer in enumerate(self.layers):
        x = layer(x, src_mask if i == 0 else None)
    return self.norm(x)


def fwd_no_mask(self, x, src_mask):
    for layer in self.layers:
        x = layer(x, None)
    return self.norm(x)


def fwd_return_in_loop(self, x, src_mask):
    for layer in self.layers:
        return self.norm(layer(x, src_mask))


ENCODER_MISTAKES = [
    ("one layer repeated n times", encoder_variant(layers=repeated_layer), ["repeated", "deepcopy"]),
    ("layers share parameters", encoder_variant(layers=shared_attention), ["share parameter"]),
    ("layers in a Python list", encoder_variant(layers=layers_in_a_list), ["plain Python list"]),
    ("final norm in post-norm", encoder_variant(norm=LayerNorm), ["final norm present in the post-norm"]),
    ("final norm missing in pre-norm", encoder_variant(norm=lambda d: nn.Identity()), ["final norm missing"]),
    ("final norm built but not applied", encoder_variant(fwd=fwd_no_final_norm), ["final norm missing"]),
    ("norm_first not passed to the layers", encoder_variant(layer_norm_first=False), ["norm_first not passed"]),
    ("pre-norm layers in a post-norm stack", encoder_variant(layer_norm_first=True), ["norm_first ignored"]),
    ("src_mask not passed", encoder_variant(fwd=fwd_no_mask), ["mask is not passed"]),
    ("src_mask to the first layer only", encoder_variant(fwd=fwd_mask_first_only), ["first layer only"]),
    ("each layer applied to the input", encoder_variant(fwd=fwd_each_on_input), ["stack's input"]),
    ("return inside the loop", encoder_variant(fwd=fwd_return_in_loop), ["only the first layer"]),
]


@pytest.mark.parametrize("label,cls,keywords", ENCODER_MISTAKES, ids=[m[0] for m in ENCODER_MISTAKES])
def test_encoder_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "Encoder", *keywords)


# ---------------------------------------------------------------- review: more styles, more mistakes
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


class EncoderLayerMaskExpanded(EncoderLayerLoop):
    """Expands the (B, 1, 1, L) mask to (B, 1, L, L) itself: still the contract's broadcasting."""

    def forward(self, x, src_mask=None):
        m = None if src_mask is None else src_mask.expand(-1, 1, x.size(1), -1)
        return super().forward(x, m)


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


@pytest.mark.parametrize("cls", [EncoderLayerLoop, EncoderLayerSequentialHolder, EncoderLayerMaskExpanded])
def test_more_correct_encoder_layers(cls):
    assert_full_marks(cls, "EncoderLayer")


@pytest.mark.parametrize("cls", [EncoderRecursive, EncoderFunctionNorm])
def test_more_correct_encoders(cls):
    assert_full_marks(cls, "Encoder")


class DropoutOnResidualSum(EncoderLayerExplicit):
    """Every train-mode output differs from eval, as it should, but the dropout sits on the sum."""

    def forward(self, x, src_mask):
        steps = (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)
        for sub, f in zip(self.sublayers, steps):
            x = x + sub.dropout(f(sub.norm(x))) if self.norm_first else sub.norm(sub.dropout(x + f(x)))
        return x


class FeedForwardTwiceDModel(EncoderLayerLoop):
    """d_ff written as 2 * d_model: the check's own sizes (16, 32) would hide it."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.feed_forward = PositionwiseFeedForward(d_model, 2 * d_model, dropout)


class AttentionOnOuterX(EncoderLayerLoop):
    def forward(self, x, src_mask=None):
        h = self.sublayers[0](x, lambda y: self.self_attn(x, x, x, src_mask))
        return self.sublayers[1](h, self.feed_forward)


class ResidualAddedInPlace(EncoderLayerExplicit):
    def forward(self, x, src_mask):
        steps = (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)
        for sub, f in zip(self.sublayers, steps):
            if self.norm_first:
                x += sub.dropout(f(sub.norm(x)))
            else:
                x = sub.norm(x + sub.dropout(f(x)))
        return x


class PreNormLayerNormalizesItsOutput(EncoderLayerLoop):
    def forward(self, x, src_mask=None):
        x = super().forward(x, src_mask)
        return self.sublayers[1].norm(x) if self.sublayers[1].norm_first else x


REVIEW_LAYER_MISTAKES = [
    ("dropout on the residual sum", DropoutOnResidualSum, ["dropout applied to the residual sum"]),
    ("d_ff hard-coded as 2 * d_model", FeedForwardTwiceDModel, ["feed_forward.w_1.weight", "no fixed sizes"]),
    ("the lambda uses x, not its argument", AttentionOnOuterX, ["lambda uses x instead of its argument"]),
    ("x += ... in place", ResidualAddedInPlace, ["changed in place"]),
    ("pre-norm layer normalizes its output", PreNormLayerNormalizesItsOutput, ["normalized again at its end"]),
]


@pytest.mark.parametrize("label,cls,keywords", REVIEW_LAYER_MISTAKES, ids=[m[0] for m in REVIEW_LAYER_MISTAKES])
def test_more_encoder_layer_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "EncoderLayer", *keywords)


def fwd_norm_after_every_layer(self, x, src_mask):
    for layer in self.layers:
        x = self.norm(layer(x, src_mask))
    return x


def fwd_norm_twice(self, x, src_mask):
    for layer in self.layers:
        x = layer(x, src_mask)
    return self.norm(self.norm(x))


def fwd_copied_into_input(self, x, src_mask):
    for layer in self.layers:
        x.copy_(layer(x, src_mask))
    return self.norm(x)


REVIEW_ENCODER_MISTAKES = [
    ("final norm after every layer", encoder_variant(fwd=fwd_norm_after_every_layer), ["after every layer"]),
    ("final norm applied twice", encoder_variant(fwd=fwd_norm_twice), ["final norm applied twice"]),
    ("layers' outputs copied into x", encoder_variant(fwd=fwd_copied_into_input), ["changed in place"]),
]


@pytest.mark.parametrize("label,cls,keywords", REVIEW_ENCODER_MISTAKES, ids=[m[0] for m in REVIEW_ENCODER_MISTAKES])
def test_more_encoder_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "Encoder", *keywords)


# ---------------------------------------------------------------- stubs
def test_stubs_get_zero_and_say_not_implemented():
    from autograder import REGISTRY

    class EncoderLayer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
            super().__init__()
            raise NotImplementedError()

    class Encoder(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
            super().__init__()
            raise NotImplementedError()

    for stub in (EncoderLayer, Encoder):
        points, text = grade(stub)
        assert points == 0 and text.count("not implemented yet") == len(REGISTRY[stub.__name__]), text


class EncoderLayerTorch(nn.TransformerEncoderLayer):
    """PyTorch's encoder layer under the contract's name."""

    def __init__(self, d_model, self_attn=None, feed_forward=None, dropout=0.1, norm_first=False):
        super().__init__(d_model, 4, 4 * d_model, dropout, batch_first=True, norm_first=norm_first)


def test_pytorch_encoder_layer_earns_nothing():
    points, text = grade(EncoderLayerTorch, "EncoderLayer")
    assert points == 0 and text.count("PyTorch's nn.Transformer modules") == text.count("✗") > 0, text


# ---------------------------------------------------------------- the dropout argument reaches the layers
class EncoderFixedDropout(solutions.Encoder):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, n_layers, 0.1, norm_first)  # the argument dropped


class EncoderNoDropout(solutions.Encoder):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, n_layers, 0.0, norm_first)  # layers built without dropout


@pytest.mark.parametrize("cls,keyword", [(EncoderFixedDropout, "dropout argument is ignored"),
                                         (EncoderNoDropout, "dropout argument is not used")])
def test_encoder_that_drops_the_dropout_argument_is_caught(cls, keyword):
    assert_caught(cls, "Encoder", keyword)
