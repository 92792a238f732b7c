"""Stage 08's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake of the encoder layer and stack."""
import copy
import functools
import math

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as checkpoint
from torch import nn

import solutions
from solutions import LayerNorm, MultiHeadAttention, PositionwiseFeedForward, SublayerConnection
from tests.grading import assert_caught, assert_full_marks, grade, grade_one, grade_one_across


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


# ---------------------------------------------------------------- second review: more correct styles


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


class EncoderLayerPerSentence(nn.Module):
    """One sentence at a time, on its real tokens only (no mask needed then); zeros at the padding positions."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(2))

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


class AdditiveAttention(nn.Module):
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


class EncoderLayerStoresOutput(solutions.EncoderLayer):
    """Keeps its last output, detached, for a plot (harmless)."""

    def forward(self, x, src_mask):
        out = super().forward(x, src_mask)
        self.last = out.detach()
        return out


class EncoderLayerNoGradInEval(solutions.EncoderLayer):
    """Skips autograd in eval mode (an inference shortcut); gradients flow in train mode, where it is trained."""

    def forward(self, x, src_mask):
        with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):
            return super().forward(x, src_mask)


class EncoderCheckpointed(solutions.Encoder):
    """Gradient checkpointing per layer, reentrant (torch.autograd.grad would refuse it: the check uses backward)."""

    def forward(self, x, src_mask):
        for layer in self.layers:
            x = checkpoint.checkpoint(layer, x, src_mask, use_reentrant=True)
        return self.norm(x)


class EncoderCheckpointedNonReentrant(solutions.Encoder):
    def forward(self, x, src_mask):
        for layer in self.layers:
            x = checkpoint.checkpoint(layer, x, src_mask, use_reentrant=False)
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


SECOND_ROUND_LAYERS = [EncoderLayerSDPA, EncoderLayerFloat64, EncoderLayerPerSentence, EncoderLayerPartial,
                       EncoderLayerNoGradMask, EncoderLayerFloat64FeedForward, EncoderLayerStoresOutput,
                       EncoderLayerNoGradInEval]
SECOND_ROUND_ENCODERS = [EncoderCheckpointed, EncoderCheckpointedNonReentrant, EncoderChildren,
                         EncoderSequentialIndexed, EncoderPerSentence, EncoderReinitialisedCopies]


@pytest.mark.parametrize("cls", SECOND_ROUND_LAYERS)
def test_second_round_correct_encoder_layers(cls):
    assert_full_marks(cls, "EncoderLayer")


@pytest.mark.parametrize("cls", SECOND_ROUND_ENCODERS)
def test_second_round_correct_encoders(cls):
    assert_full_marks(cls, "Encoder")


# ---------------------------------------------------------------- second review: more mistakes
class LayerNoGrad(solutions.EncoderLayer):
    def forward(self, x, src_mask):
        with torch.no_grad():
            return super().forward(x, src_mask)


class LayerResidualDetached(solutions.EncoderLayer):
    def forward(self, x, src_mask):
        for sub, f in zip(self.sublayers, (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)):
            x = sub.norm(x.detach() + sub.dropout(f(x))) if not sub.norm_first else x + sub.dropout(f(sub.norm(x)))
        return x


class LayerEvalInForward(solutions.EncoderLayer):
    def forward(self, x, src_mask):
        self.eval()
        return super().forward(x, src_mask)


class LayerCachesMask(solutions.EncoderLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mask = None

    def forward(self, x, src_mask):
        if self.mask is None:
            self.mask = src_mask
        return super().forward(x, self.mask)


class LayerFlipsMaskInPlace(solutions.EncoderLayer):
    """~ computed in place on the caller's mask (then inverted back for its own use): the next layer gets it flipped."""

    def forward(self, x, src_mask):
        if src_mask is None:
            return super().forward(x, None)
        src_mask.logical_not_()
        return super().forward(x, ~src_mask)


class LayerMaskOnQueries(solutions.EncoderLayer):
    def forward(self, x, src_mask):
        return super().forward(x, None if src_mask is None else src_mask.transpose(-1, -2))


class LayerKeysFromOuterX(solutions.EncoderLayer):
    def forward(self, x, src_mask):
        h = self.sublayers[0](x, lambda y: self.self_attn(y, x, x, src_mask))
        return self.sublayers[1](h, self.feed_forward)


class LayerWithoutNorm(solutions.EncoderLayer):
    def forward(self, x, src_mask):
        for sub, f in zip(self.sublayers, (lambda y: self.self_attn(y, y, y, src_mask), self.feed_forward)):
            x = x + sub.dropout(f(x))
        return x


class LayerWithoutFeedForward(solutions.EncoderLayer):
    def forward(self, x, src_mask):
        return self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))


class LayerFeedForwardOnInput(solutions.EncoderLayer):
    def forward(self, x, src_mask):
        self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.sublayers[1](x, self.feed_forward)


class LayerPositionalSlip(solutions.EncoderLayer):
    """SublayerConnection(d_model, norm_first): norm_first lands in the dropout slot."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        del self.sublayers
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, norm_first) for _ in range(2))


class LayerAttentionDefaultDropout(solutions.EncoderLayer):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, n_heads)  # dropout left at its default 0.1


SECOND_ROUND_LAYER_MISTAKES = [
    ("forward under torch.no_grad()", LayerNoGrad, ["cut off from autograd", "no_grad"]),
    ("residual path detached", LayerResidualDetached, ["gradient with respect to x", "cut off from autograd"]),
    ("self.eval() inside forward", LayerEvalInForward, ["switched to eval mode"]),
    ("the first call's mask kept", LayerCachesMask, ["second batch", "earlier call"]),
    ("the caller's mask flipped in place", LayerFlipsMaskInPlace, ["src_mask after the call", "changed in place"]),
    ("mask transposed onto the queries", LayerMaskOnQueries, ["hides queries instead of keys"]),
    ("pre-norm: keys and values from x", LayerKeysFromOuterX, ["keys and values taken from x"]),
    ("no LayerNorm at all", LayerWithoutNorm, ["LayerNorm missing"]),
    ("feed-forward sublayer missing", LayerWithoutFeedForward, ["feed-forward sublayer is missing"]),
    ("feed-forward on the layer's input", LayerFeedForwardOnInput, ["got the layer's input x"]),
    ("SublayerConnection(d_model, norm_first)", LayerPositionalSlip,
     ["norm_first ignored", "SublayerConnection(d_model, dropout, norm_first), in that order"]),
    ("attention dropout left at its default", LayerAttentionDefaultDropout, ["dropout argument is ignored"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_ROUND_LAYER_MISTAKES,
                         ids=[m[0] for m in SECOND_ROUND_LAYER_MISTAKES])
def test_second_round_encoder_layer_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "EncoderLayer", *keywords)


class EncoderNoGrad(solutions.Encoder):
    @torch.no_grad()
    def forward(self, x, src_mask):
        return super().forward(x, src_mask)


class EncoderInputDropout(solutions.Encoder):
    """Dropout on the stack's input: the positional encoding has already dropped the embeddings."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, src_mask):
        return super().forward(self.drop(x), src_mask)


def fwd_skip_first(self, x, src_mask):
    for i in range(1, len(self.layers)):
        x = self.layers[i](x, src_mask)
    return self.norm(x)


def fwd_skip_last(self, x, src_mask):
    for layer in self.layers[:-1]:
        x = layer(x, src_mask)
    return self.norm(x)


def fwd_reversed(self, x, src_mask):
    for layer in reversed(self.layers):
        x = layer(x, src_mask)
    return self.norm(x)


def fwd_mask_inverted(self, x, src_mask):
    for layer in self.layers:
        x = layer(x, ~src_mask)
    return self.norm(x)


SECOND_ROUND_ENCODER_MISTAKES = [
    ("forward under torch.no_grad()", EncoderNoGrad, ["cut off from autograd"]),
    ("dropout on the stack's input", EncoderInputDropout, ["dropout applied to the encoder's input"]),
    ("the first layer skipped", encoder_variant(fwd=fwd_skip_first), ["first layer skipped"]),
    ("the last layer skipped", encoder_variant(fwd=fwd_skip_last), ["stops early"]),
    ("layers in reverse order", encoder_variant(fwd=fwd_reversed), ["reverse order"]),
    ("mask inverted before the layers", encoder_variant(fwd=fwd_mask_inverted), ["src_mask inverted"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_ROUND_ENCODER_MISTAKES,
                         ids=[m[0] for m in SECOND_ROUND_ENCODER_MISTAKES])
def test_second_round_encoder_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "Encoder", *keywords)


# ---------------------------------------------------------------- third review
class LayerExtraDropoutInLambda(solutions.EncoderLayer):
    """A dropout of its own on the attention's output, which the sublayer connection drops again (p = 1 cannot tell)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, src_mask):
        x = self.sublayers[0](x, lambda y: self.drop(self.self_attn(y, y, y, src_mask)))
        return self.sublayers[1](x, self.feed_forward)


class LayerExtraDropoutOnFeedForward(LayerExtraDropoutInLambda):
    def forward(self, x, src_mask):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.sublayers[1](x, lambda y: self.drop(self.feed_forward(y)))


class LayerDropoutInLambdaOnly(LayerExtraDropoutInLambda):
    """Correct: the connections built without dropout, each sublayer's output dropped once in its lambda instead."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        del self.sublayers
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, 0.0, norm_first) for _ in range(2))

    def forward(self, x, src_mask):
        x = self.sublayers[0](x, lambda y: self.drop(self.self_attn(y, y, y, src_mask)))
        return self.sublayers[1](x, lambda y: self.drop(self.feed_forward(y)))


@pytest.mark.parametrize("cls,part", [(LayerExtraDropoutInLambda, "self_attn"),
                                      (LayerExtraDropoutOnFeedForward, "feed_forward")])
def test_a_second_dropout_on_a_sublayer_output_is_caught(cls, part):
    points, line = grade_one(cls, "EncoderLayer", "uses the dropout argument")
    assert points == 0 and f"second dropout on the {part} sublayer" in line and "dropped twice" in line, line


def test_one_dropout_in_the_lambda_instead_of_the_connection_is_fine():
    points, line = grade_one(LayerDropoutInLambdaOnly, "EncoderLayer", "uses the dropout argument")
    assert points == 1, line


# ---------------------------------------------------------------- dropout not passed on: one point, not two
class LayerAttentionDropoutForgotten(solutions.EncoderLayer):
    """MultiHeadAttention(d_model, n_heads): its default dropout (0.1) where dropout=0.0 was asked."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, n_heads)


class EncoderLayersDropoutForgotten(solutions.Encoder):
    """Its layers built without the dropout argument (their default 0.1)."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.layers = nn.ModuleList(solutions.EncoderLayer(d_model, n_heads, d_ff, norm_first=norm_first)
                                    for _ in range(n_layers))


@pytest.mark.parametrize("cls,name,title", [(LayerAttentionDropoutForgotten, "EncoderLayer", "post-norm equals"),
                                            (EncoderLayersDropoutForgotten, "Encoder", "post-norm stack")])
def test_dropout_not_passed_on_is_not_blamed_on_detach(cls, name, title):
    points, line = grade_one(cls, name, title)  # the dropout check alone names it
    assert points == 1, line


class LayerUnsqueezesTheMask(solutions.EncoderLayer):
    """The Annotated Transformer's habit, mask.unsqueeze(1), with the course's 4-d masks: it raised deep inside
    multi-head attention and the message had no 'Likely' (found by a learner simulation)."""

    def forward(self, x, src_mask=None):
        return super().forward(x, None if src_mask is None else src_mask.unsqueeze(1))


def test_a_mask_unsqueezed_on_the_way_is_named():
    assert_caught(LayerUnsqueezesTheMask, "EncoderLayer", "works without the mask and fails with it",
                  "no mask.unsqueeze(1)")


# ---------------------------------------------------------------- issue 17: an error in the learner's code
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
