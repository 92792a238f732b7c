"""Stage 09's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake of the decoder layer and stack."""
import copy
import functools
import math

import pytest
import torch
import torch.utils.checkpoint as checkpoint
from torch import nn

import solutions
from solutions import LayerNorm, MultiHeadAttention, PositionwiseFeedForward, SublayerConnection
from autograder import max_points
from tests.grading import assert_caught, assert_full_marks, grade, grade_one
from tests.test_checks_stage08 import (AdditiveAttention, EinsumAttention, FeedForward, Float64Attention,
                                       InPlaceConnection, Residual, SDPAAttention, SequentialFeedForward,
                                       VarMeanLayerNorm)


def test_reference_gets_full_marks():
    assert_full_marks(solutions.DecoderLayer)
    assert_full_marks(solutions.Decoder)


# ---------------------------------------------------------------- correct, written differently
class DecoderLayerExplicit(nn.Module):
    """Einsum attention, nn.LayerNorm, the residual sums written out; a mask of None is no mask."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = EinsumAttention(d_model, n_heads, dropout)
        self.cross_attn = EinsumAttention(d_model, n_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(Residual(d_model, dropout) for _ in range(3))
        self.norm_first = norm_first

    def _res(self, i, x, f):
        sub = self.sublayers[i]
        return x + sub.dropout(f(sub.norm(x))) if self.norm_first else sub.norm(x + sub.dropout(f(x)))

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self._res(0, x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self._res(1, x, lambda y: self.cross_attn(y, memory, memory, src_mask))
        return self._res(2, x, self.feed_forward)


class DecoderLayerSolutionsParts(nn.Module):
    """The course's parts, keyword arguments, the memory's mask made boolean again (harmless)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList([SublayerConnection(d_model, dropout, norm_first),
                                        SublayerConnection(d_model, dropout, norm_first),
                                        SublayerConnection(d_model, dropout, norm_first)])

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        m = None if src_mask is None else src_mask.bool()
        steps = [lambda q: self.self_attn(query=q, key=q, value=q, mask=tgt_mask),
                 lambda q: self.cross_attn(query=q, key=memory, value=memory, mask=m),
                 self.feed_forward]
        for sub, step in zip(self.sublayers, steps):
            x = sub(x, step)
        return x


class DecoderClones(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        layer = DecoderLayerExplicit(d_model, n_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


class DecoderWhile(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(DecoderLayerSolutionsParts(d_model, n_heads, d_ff, dropout, norm_first))
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, memory, src_mask, tgt_mask):
        i = 0
        while i < len(self.layers):
            x = self.layers[i](x, memory, src_mask=src_mask, tgt_mask=tgt_mask)
            i += 1
        return self.norm(x)


class PerHeadAttention(nn.Module):
    """The contract's w_q, w_k, w_v, w_o; one head at a time in a Python loop, the mask added as -1e9 scores."""

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        heads = []
        for i in range(self.h):
            part = slice(i * self.d_k, (i + 1) * self.d_k)
            scores = q[..., part] @ k[..., part].transpose(-1, -2) / math.sqrt(self.d_k)
            if mask is not None:
                scores = scores + torch.zeros_like(scores).masked_fill(~mask[:, 0].bool(), -1e9)
            heads.append(self.drop(scores.softmax(-1)) @ v[..., part])
        return self.w_o(torch.cat(heads, -1))


class NormOnly(nn.Module):
    """A sublayer connection that keeps only its `norm`; the layer does the residual sum itself."""

    def __init__(self, d_model):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)


class DecoderLayerPerHead(nn.Module):
    """Per-head attention, clamp as the ReLU, sublayers in an nn.Sequential holding only norms, separate
    dropout modules, an extra constructor argument and **kwargs in forward."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, activation="relu"):
        super().__init__()
        self.self_attn = PerHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = PerHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.Sequential(*[NormOnly(d_model) for _ in range(3)])
        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(3))
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None, **unused):
        steps = (lambda y: self.self_attn(y, y, y, tgt_mask), lambda y: self.cross_attn(y, memory, memory, src_mask),
                 self.feed_forward)
        for sub, drop, f in zip(self.sublayers, self.drops, steps):
            x = x + drop(f(sub.norm(x))) if self.norm_first else sub.norm(x + drop(f(x)))
        return x


class DecoderLayerFloat64(solutions.DecoderLayer):
    """Computes in float64 on non-contiguous views, returns float32."""

    def forward(self, x, memory, src_mask, tgt_mask):
        self.double()
        try:
            out = super().forward(x.double().transpose(0, 1).transpose(0, 1),
                                  memory.double().permute(1, 0, 2).permute(1, 0, 2), src_mask, tgt_mask)
        finally:
            self.float()
        return out.to(x.dtype)


class DecoderReduce(nn.Module):
    """functools.reduce over the layers; `norm` None in post-norm."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayerPerHead(d_model, n_heads, d_ff, dropout, norm_first)
                                    for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask, tgt_mask):
        x = functools.reduce(lambda h, layer: layer(h, memory, src_mask, tgt_mask), self.layers, x)
        return x if self.norm is None else self.norm(x)


class DecoderRecursive(nn.Module):
    """The layers in an nn.Sequential, applied by a recursive helper; an extra keyword argument in forward."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.Sequential(*[DecoderLayerSolutionsParts(d_model, n_heads, d_ff, dropout, norm_first)
                                      for _ in range(n_layers)])
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def _through(self, i, x, memory, src_mask, tgt_mask):
        if i == len(self.layers):
            return x
        return self._through(i + 1, self.layers[i](x, memory, src_mask, tgt_mask), memory, src_mask, tgt_mask)

    def forward(self, x, memory, src_mask=None, tgt_mask=None, keep_states=False):
        return self.norm(self._through(0, x, memory, src_mask, tgt_mask))


@pytest.mark.parametrize("cls", [DecoderLayerExplicit, DecoderLayerSolutionsParts, DecoderLayerPerHead,
                                 DecoderLayerFloat64])
def test_other_correct_decoder_layers(cls):
    assert_full_marks(cls, "DecoderLayer")


@pytest.mark.parametrize("cls", [DecoderClones, DecoderWhile, DecoderReduce, DecoderRecursive])
def test_other_correct_decoders(cls):
    assert_full_marks(cls, "Decoder")


# ---------------------------------------------------------------- classic mistakes: DecoderLayer
def layer_variant(fixed_norm_first=None, fixed_dropout=None, change=None, fwd=None):
    """A solutions.DecoderLayer with one thing changed."""
    class Variant(solutions.DecoderLayer):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
            super().__init__(d_model, n_heads, d_ff, dropout if fixed_dropout is None else fixed_dropout,
                             norm_first if fixed_norm_first is None else fixed_norm_first)
            if change is not None:
                change(self, d_model, n_heads, d_ff, dropout, norm_first)

        if fwd is not None:
            def forward(self, x, memory, src_mask, tgt_mask):
                return fwd(self, x, memory, src_mask, tgt_mask)
    return Variant


def steps(self, x, memory, src_mask, tgt_mask, self_mask="tgt", cross_kv="memory", cross_mask="src"):
    masks = {"tgt": tgt_mask, "src": src_mask, None: None}
    kv = {"memory": (memory, memory)}

    def cross(y):
        k, v = kv.get(cross_kv, (y, y))
        return self.cross_attn(y, k, v, masks[cross_mask])
    return [lambda y: self.self_attn(y, y, y, masks[self_mask]), cross, self.feed_forward]


def run(self, parts, order=(0, 1, 2)):
    def f(x):
        for sub, i in zip(self.sublayers, order):
            x = sub(x, parts[i])
        return x
    return f


def fwd_no_causal(self, x, memory, src_mask, tgt_mask):
    return run(self, steps(self, x, memory, src_mask, tgt_mask, self_mask=None))(x)


def fwd_kv_from_decoder(self, x, memory, src_mask, tgt_mask):
    return run(self, steps(self, x, memory, src_mask, tgt_mask, cross_kv="x"))(x)


def fwd_kv_from_decoder_no_mask(self, x, memory, src_mask, tgt_mask):
    return run(self, steps(self, x, memory, src_mask, tgt_mask, cross_kv="x", cross_mask=None))(x)


def fwd_cross_without_src_mask(self, x, memory, src_mask, tgt_mask):
    return run(self, steps(self, x, memory, src_mask, tgt_mask, cross_mask=None))(x)


def fwd_cross_first(self, x, memory, src_mask, tgt_mask):
    return run(self, steps(self, x, memory, src_mask, tgt_mask), order=(1, 0, 2))(x)


def fwd_no_residual(self, x, memory, src_mask, tgt_mask):
    for sub, f in zip(self.sublayers, steps(self, x, memory, src_mask, tgt_mask)):
        x = sub.norm(f(x)) if not sub.norm_first else f(sub.norm(x))
    return x


def same_attention_twice(self, d, h, ff, p, nf):
    self.cross_attn = self.self_attn


def one_sublayer_repeated(self, d, h, ff, p, nf):
    del self.sublayers
    self.sublayers = nn.ModuleList([SublayerConnection(d, p, nf)] * 3)


def three_steps(self, x, first, second, third):
    x = self.sublayers[0](x, first)
    x = self.sublayers[1](x, second)
    return self.sublayers[2](x, third)


def fwd_memory_as_query(self, x, memory, src_mask, tgt_mask):
    return three_steps(self, x, lambda y: self.self_attn(y, y, y, tgt_mask),
                       lambda y: self.cross_attn(memory, y, y, src_mask), self.feed_forward)


def fwd_tgt_mask_in_cross(self, x, memory, src_mask, tgt_mask):
    return three_steps(self, x, lambda y: self.self_attn(y, y, y, tgt_mask),
                       lambda y: self.cross_attn(y, memory, memory, tgt_mask), self.feed_forward)


def fwd_masks_swapped(self, x, memory, src_mask, tgt_mask):
    return three_steps(self, x, lambda y: self.self_attn(y, y, y, src_mask),
                       lambda y: self.cross_attn(y, memory, memory, tgt_mask), self.feed_forward)


def fwd_tgt_mask_inverted(self, x, memory, src_mask, tgt_mask):
    return three_steps(self, x, lambda y: self.self_attn(y, y, y, ~tgt_mask),
                       lambda y: self.cross_attn(y, memory, memory, src_mask), self.feed_forward)


def fwd_src_mask_eq_zero(self, x, memory, src_mask, tgt_mask):
    return three_steps(self, x, lambda y: self.self_attn(y, y, y, tgt_mask),
                       lambda y: self.cross_attn(y, memory, memory, src_mask == 0), self.feed_forward)


def fwd_own_causal_mask(self, x, memory, src_mask, tgt_mask):
    """tgt_mask ignored: a causal mask built here hides the future, not the target's padding."""
    own = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    return three_steps(self, x, lambda y: self.self_attn(y, y, y, own),
                       lambda y: self.cross_attn(y, memory, memory, src_mask), self.feed_forward)


def fwd_self_attn_for_cross(self, x, memory, src_mask, tgt_mask):
    return three_steps(self, x, lambda y: self.self_attn(y, y, y, tgt_mask),
                       lambda y: self.self_attn(y, memory, memory, src_mask), self.feed_forward)


def fwd_residual_in_place(self, x, memory, src_mask, tgt_mask):
    x += self.self_attn(x, x, x, tgt_mask)  # the caller's x changes
    x = self.sublayers[0].norm(x)
    x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask))
    return self.sublayers[2](x, self.feed_forward)


LAYER_MISTAKES = [
    ("cross-attention queries from the memory", layer_variant(fwd=fwd_memory_as_query), ["lengths got mixed up"]),
    ("tgt_mask in cross-attention", layer_variant(fwd=fwd_tgt_mask_in_cross), ["lengths got mixed up"]),
    ("masks swapped", layer_variant(fwd=fwd_masks_swapped), ["lengths got mixed up", "src_mask"]),
    ("tgt_mask inverted", layer_variant(fwd=fwd_tgt_mask_inverted), ["tgt_mask inverted"]),
    ("src_mask == 0 in cross-attention", layer_variant(fwd=fwd_src_mask_eq_zero), ["src_mask inverted"]),
    ("own causal mask, tgt_mask ignored", layer_variant(fwd=fwd_own_causal_mask), ["tgt_mask ignored"]),
    ("self_attn used for cross-attention", layer_variant(fwd=fwd_self_attn_for_cross), ["computed with self_attn"]),
    ("residual added in place", layer_variant(fwd=fwd_residual_in_place), ["changed in place"]),
    ("norm_first ignored", layer_variant(fixed_norm_first=False), ["norm_first ignored"]),
    ("always pre-norm", layer_variant(fixed_norm_first=True), ["pre-norm computed where post-norm"]),
    ("no causal mask in self-attention", layer_variant(fwd=fwd_no_causal), ["tgt_mask not passed", "causal"]),
    ("cross-attention keys and values from the decoder", layer_variant(fwd=fwd_kv_from_decoder),
     ["keys and values taken from the decoder"]),
    ("cross-attention on the decoder, no mask", layer_variant(fwd=fwd_kv_from_decoder_no_mask),
     ["keys and values taken from the decoder"]),
    ("cross-attention without src_mask", layer_variant(fwd=fwd_cross_without_src_mask),
     ["without the source padding mask"]),
    ("cross-attention before self-attention", layer_variant(fwd=fwd_cross_first), ["sublayer order wrong"]),
    ("residual missing", layer_variant(fwd=fwd_no_residual), ["residual connection missing"]),
    ("one attention module for both", layer_variant(change=same_attention_twice),
     ["self_attn and cross_attn are one module"]),
    ("one sublayer object repeated", layer_variant(change=one_sublayer_repeated), ["repeated"]),
    ("dropout argument ignored", layer_variant(fixed_dropout=0.1), ["dropout argument is ignored"]),
]


@pytest.mark.parametrize("label,cls,keywords", LAYER_MISTAKES, ids=[m[0] for m in LAYER_MISTAKES])
def test_decoder_layer_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "DecoderLayer", *keywords)


# ---------------------------------------------------------------- classic mistakes: Decoder
def decoder_variant(layers=None, norm=None, layer_norm_first=None, fwd=None):
    class Variant(solutions.Decoder):
        def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
            super().__init__(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
            if layer_norm_first is not None:
                self.layers = nn.ModuleList(solutions.DecoderLayer(d_model, n_heads, d_ff, dropout, layer_norm_first)
                                            for _ in range(n_layers))
            if layers is not None:
                del self.layers  # a learner's __init__ would assign it only once
                self.layers = layers(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
            if norm is not None:
                self.norm = norm(d_model)

        if fwd is not None:
            def forward(self, x, memory, src_mask, tgt_mask):
                return fwd(self, x, memory, src_mask, tgt_mask)
    return Variant


def repeated_layer(d, h, ff, n, p, nf):
    return nn.ModuleList([solutions.DecoderLayer(d, h, ff, p, nf)] * n)


def layers_in_a_list(d, h, ff, n, p, nf):
    return [solutions.DecoderLayer(d, h, ff, p, nf) for _ in range(n)]


def stack_fwd(self_mask="tgt", cross_mask="src", feed="chain", final=True):
    def forward(self, x, memory, src_mask, tgt_mask):
        masks = {"tgt": tgt_mask, "src": src_mask, None: None}
        out = x
        for layer in self.layers:
            out = layer(out if feed == "chain" else x, memory, masks[cross_mask], masks[self_mask])
        return self.norm(out) if final else out
    return forward


def stack_own_causal(self, x, memory, src_mask, tgt_mask):
    own = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    for layer in self.layers:
        x = layer(x, memory, src_mask, own)
    return self.norm(x)


def stack_masks_swapped(self, x, memory, src_mask, tgt_mask):
    for layer in self.layers:
        x = layer(x, memory, tgt_mask, src_mask)
    return self.norm(x)


class DecoderFixedDropout(solutions.Decoder):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, n_layers, 0.1, norm_first)


class DecoderNoDropout(solutions.Decoder):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, n_layers, 0.0, norm_first)


DECODER_MISTAKES = [
    ("own causal mask passed to the layers", decoder_variant(fwd=stack_own_causal), ["tgt_mask not passed on"]),
    ("masks swapped in the layer call", decoder_variant(fwd=stack_masks_swapped), ["lengths got mixed up"]),
    ("dropout fixed at 0.1", DecoderFixedDropout, ["dropout argument is ignored"]),
    ("dropout fixed at 0", DecoderNoDropout, ["dropout argument is not used"]),
    ("one layer repeated n times", decoder_variant(layers=repeated_layer), ["repeated", "deepcopy"]),
    ("layers in a Python list", decoder_variant(layers=layers_in_a_list), ["plain Python list"]),
    ("final norm in post-norm", decoder_variant(norm=LayerNorm), ["final norm present in the post-norm"]),
    ("final norm missing in pre-norm", decoder_variant(norm=lambda d: nn.Identity()), ["final norm missing"]),
    ("final norm built but not applied", decoder_variant(fwd=stack_fwd(final=False)), ["final norm missing"]),
    ("norm_first not passed to the layers", decoder_variant(layer_norm_first=False), ["norm_first not passed"]),
    ("tgt_mask not passed", decoder_variant(fwd=stack_fwd(self_mask=None)), ["tgt_mask not passed"]),
    ("src_mask not passed", decoder_variant(fwd=stack_fwd(cross_mask=None)), ["src_mask not passed"]),
    ("no masks passed", decoder_variant(fwd=stack_fwd(None, None)), ["mask is not passed"]),
    ("each layer applied to the input", decoder_variant(fwd=stack_fwd(feed="input")), ["stack's input"]),
]


@pytest.mark.parametrize("label,cls,keywords", DECODER_MISTAKES, ids=[m[0] for m in DECODER_MISTAKES])
def test_decoder_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "Decoder", *keywords)


# ---------------------------------------------------------------- stubs
def test_stubs_get_zero_and_say_not_implemented():
    from autograder import REGISTRY

    class DecoderLayer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
            super().__init__()
            raise NotImplementedError()

    class Decoder(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
            super().__init__()
            raise NotImplementedError()

    for stub in (DecoderLayer, Decoder):
        points, text = grade(stub)
        assert points == 0 and text.count("not implemented yet") == len(REGISTRY[stub.__name__]), text


def test_a_forward_stub_gets_zero_too():
    class DecoderLayer(solutions.DecoderLayer):
        def forward(self, x, memory, src_mask, tgt_mask):
            raise NotImplementedError()
    points, text = grade(DecoderLayer)
    assert points == 0 and "not implemented yet" in text, text


# ---------------------------------------------------------------- second review: more correct styles
class DecoderLayerSDPA(nn.Module):
    """F.scaled_dot_product_attention, its own in-place connections, keyword-only extras."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, *, eps=1e-5):
        super().__init__()
        self.self_attn = SDPAAttention(d_model, n_heads, dropout)
        self.cross_attn = SDPAAttention(d_model, n_heads, dropout)
        self.feed_forward = SequentialFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList([InPlaceConnection(d_model, dropout, norm_first) for _ in range(3)])

    def forward(self, x, memory, src_mask=None, tgt_mask=None, *, cache=None):
        x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, tgt_mask))
        x = self.sublayers[1](x, lambda t: self.cross_attn(t, memory, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)


class DecoderLayerFloat64(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = Float64Attention(d_model, n_heads, dropout)
        self.cross_attn = Float64Attention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(3))

    def forward(self, x, memory, src_mask, tgt_mask):
        steps = [lambda t: self.self_attn(t, t, t, tgt_mask), lambda t: self.cross_attn(t, memory, memory, src_mask),
                 self.feed_forward]
        for sub, f in zip(self.sublayers, steps):
            x = sub(x, f)
        return x


class DecoderLayerOwnCausalToo(nn.Module):
    """ANDs tgt_mask with a causal mask of its own (redundant, correct); additive masks built under no_grad."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = AdditiveAttention(d_model, n_heads, dropout)
        self.cross_attn = AdditiveAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(3))

    @staticmethod
    def additive(m):
        with torch.no_grad():
            return None if m is None else torch.zeros(m.shape).masked_fill(~m, -1e9)

    def forward(self, x, memory, src_mask, tgt_mask):
        L = x.size(1)
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device))
        tm = causal if tgt_mask is None else tgt_mask & causal
        x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, self.additive(tm)))
        x = self.sublayers[1](x, lambda t: self.cross_attn(t, memory, memory, self.additive(src_mask)))
        return self.sublayers[2](x, self.feed_forward)


class DecoderLayerPerSentence(nn.Module):
    """One sentence at a time; the memory cut to its real tokens (then no source mask is needed)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(3))

    def forward(self, x, memory, src_mask, tgt_mask):
        outs = []
        for b in range(x.size(0)):
            xb, mb = x[b:b + 1], memory[b:b + 1]
            sm = None if src_mask is None else src_mask[b if src_mask.size(0) > 1 else 0][None]
            tm = None if tgt_mask is None else tgt_mask[b if tgt_mask.size(0) > 1 else 0][None]
            if sm is not None:
                mb, sm = mb[:, sm.reshape(-1).nonzero().flatten()], None
            h = self.sublayers[0](xb, lambda t: self.self_attn(t, t, t, tm))
            h = self.sublayers[1](h, lambda t: self.cross_attn(t, mb, mb, sm))
            outs.append(self.sublayers[2](h, self.feed_forward))
        return torch.cat(outs, 0)


class DecoderLayerKeywords(nn.Module):
    """Keyword calls everywhere, functools.partial sublayers, connections in an nn.Sequential, **kwargs."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False, **kwargs):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model=d_model, d_ff=d_ff, dropout=dropout)
        self.sublayers = nn.Sequential(*(SublayerConnection(d_model, dropout=dropout, norm_first=norm_first)
                                         for _ in range(3)))

    def forward(self, x, memory, src_mask, tgt_mask):
        sa = functools.partial(lambda t, m: self.self_attn(query=t, key=t, value=t, mask=m), m=tgt_mask)
        ca = functools.partial(lambda t, mem, m: self.cross_attn(query=t, key=mem, value=mem, mask=m),
                               mem=memory, m=src_mask)
        x = self.sublayers[0](x=x, sublayer=sa)
        x = self.sublayers[1](x=x, sublayer=ca)
        return self.sublayers[2](x=x, sublayer=self.feed_forward)


class DecoderLayerOwnClone(nn.Module):
    """Works on a clone of x, pre-norm sums added in place on that clone; its own dropout module."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(3))
        self.norm_first, self.drop = norm_first, nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        h = x.clone()
        steps = [lambda t: self.self_attn(t, t, t, tgt_mask), lambda t: self.cross_attn(t, memory, memory, src_mask),
                 self.feed_forward]
        for sub, f in zip(self.sublayers, steps):
            if self.norm_first:
                h += self.drop(f(sub.norm(h)))
            else:
                h = sub.norm(h + self.drop(f(h)))
        return h


class DecoderNoGradInEval(solutions.Decoder):
    """Skips autograd in eval mode (an inference shortcut); gradients flow in train mode, where it is trained."""

    def forward(self, x, memory, src_mask, tgt_mask):
        with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):
            return super().forward(x, memory, src_mask, tgt_mask)


class DecoderCheckpointed(solutions.Decoder):
    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = checkpoint.checkpoint(layer, x, memory, src_mask, tgt_mask, use_reentrant=True)
        return self.norm(x)


class DecoderChildren(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False, *, tie=False):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayerSDPA(d_model, n_heads, d_ff, dropout, norm_first)
                                     for _ in range(n_layers)])
        self.norm = VarMeanLayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, memory, src_mask=None, tgt_mask=None, **kwargs):
        for layer in self.layers.children():
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


class DecoderPerSentence(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayerPerSentence(d_model, n_heads, d_ff, dropout, norm_first)
                                    for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return x if self.norm is None else self.norm(x)


class DecoderMasksOnce(nn.Module):
    """Combines the causal mask with tgt_mask once, expands src_mask to (B, 1, Lt, Ls) once."""

    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayerKeywords(d_model, n_heads, d_ff, dropout, norm_first)
                                    for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, memory, src_mask, tgt_mask):
        L = x.size(1)
        tm = torch.ones(L, L, dtype=torch.bool).tril() & (True if tgt_mask is None else tgt_mask)
        sm = None if src_mask is None else src_mask.expand(x.size(0), 1, L, memory.size(1))
        for layer in self.layers:
            x = layer(x, memory, sm, tm)
        return self.norm(x)


class DecoderFloat64Layers(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.Sequential(*[DecoderLayerFloat64(d_model, n_heads, d_ff, dropout, norm_first)
                                      for _ in range(n_layers)])
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask=src_mask, tgt_mask=tgt_mask)
        return self.norm(x)


class DecoderCachesCausal(solutions.Decoder):
    """A harmless cache: causal masks by length, ANDed with the tgt_mask of each call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._causal = {}

    def forward(self, x, memory, src_mask, tgt_mask):
        L = x.size(1)
        if L not in self._causal:
            self._causal[L] = torch.ones(L, L, dtype=torch.bool).tril()
        return super().forward(x, memory, src_mask, tgt_mask & self._causal[L])


@pytest.mark.parametrize("cls", [DecoderLayerSDPA, DecoderLayerFloat64, DecoderLayerOwnCausalToo,
                                 DecoderLayerPerSentence, DecoderLayerKeywords, DecoderLayerOwnClone])
def test_second_round_correct_decoder_layers(cls):
    assert_full_marks(cls, "DecoderLayer")


@pytest.mark.parametrize("cls", [DecoderCheckpointed, DecoderChildren, DecoderPerSentence, DecoderMasksOnce,
                                 DecoderFloat64Layers, DecoderCachesCausal, DecoderNoGradInEval])
def test_second_round_correct_decoders(cls):
    assert_full_marks(cls, "Decoder")


# ---------------------------------------------------------------- second review: more mistakes
class LayerNoGrad(solutions.DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        with torch.no_grad():
            return super().forward(x, memory, src_mask, tgt_mask)


class LayerMemoryDetached(solutions.DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, memory.detach(), src_mask, tgt_mask)


class LayerCrossUnderNoGrad(solutions.DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        def cross(y):
            with torch.no_grad():
                return self.cross_attn(y, memory, memory, src_mask)
        return three_steps(self, x, lambda y: self.self_attn(y, y, y, tgt_mask), cross, self.feed_forward)


class LayerCachesTgtMask(solutions.DecoderLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tm = None

    def forward(self, x, memory, src_mask, tgt_mask):
        if self.tm is None:
            self.tm = tgt_mask
        return super().forward(x, memory, src_mask, self.tm)


class LayerFlipsTgtMaskInPlace(solutions.DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        tgt_mask.logical_not_()
        return super().forward(x, memory, src_mask, ~tgt_mask)


def fwd_no_cross(self, x, memory, src_mask, tgt_mask):
    x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
    return self.sublayers[2](x, self.feed_forward)


def fwd_ff_before_cross(self, x, memory, src_mask, tgt_mask):
    return three_steps(self, x, lambda y: self.self_attn(y, y, y, tgt_mask), self.feed_forward,
                       lambda y: self.cross_attn(y, memory, memory, src_mask))


def fwd_cross_through_first_connection(self, x, memory, src_mask, tgt_mask):
    x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
    x = self.sublayers[0](x, lambda y: self.cross_attn(y, memory, memory, src_mask))
    return self.sublayers[2](x, self.feed_forward)


def fwd_lambdas_use_x(self, x, memory, src_mask, tgt_mask):
    """The closures read x (rebound after each step): right in post-norm, the un-normalized sum in pre-norm."""
    x = self.sublayers[0](x, lambda y: self.self_attn(x, x, x, tgt_mask))
    x = self.sublayers[1](x, lambda y: self.cross_attn(x, memory, memory, src_mask))
    return self.sublayers[2](x, self.feed_forward)


SECOND_ROUND_LAYER_MISTAKES = [
    ("forward under torch.no_grad()", LayerNoGrad, ["cut off from autograd"]),
    ("memory detached", LayerMemoryDetached, ["gradient with respect to memory", "memory.detach()"]),
    ("cross-attention under torch.no_grad()", LayerCrossUnderNoGrad, ["gradient with respect to x"]),
    ("the first call's tgt_mask kept", LayerCachesTgtMask, ["second batch", "earlier call"]),
    ("the caller's tgt_mask flipped in place", LayerFlipsTgtMaskInPlace, ["tgt_mask after the call"]),
    ("cross-attention sublayer missing", layer_variant(fwd=fwd_no_cross), ["cross-attention sublayer is missing"]),
    ("feed-forward before cross-attention", layer_variant(fwd=fwd_ff_before_cross),
     ["feed-forward ran before cross-attention"]),
    ("sublayers[0] used for cross-attention", layer_variant(fwd=fwd_cross_through_first_connection),
     ["sublayers[0] used for cross-attention"]),
    ("pre-norm lambdas read x", layer_variant(fwd=fwd_lambdas_use_x), ["lambdas use x instead of their argument"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_ROUND_LAYER_MISTAKES,
                         ids=[m[0] for m in SECOND_ROUND_LAYER_MISTAKES])
def test_second_round_decoder_layer_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "DecoderLayer", *keywords)


class DecoderNoGrad(solutions.Decoder):
    def forward(self, x, memory, src_mask, tgt_mask):
        with torch.no_grad():
            return super().forward(x, memory, src_mask, tgt_mask)


class DecoderMemoryDetached(solutions.Decoder):
    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, memory.detach(), src_mask, tgt_mask)


class DecoderInputDropout(solutions.Decoder):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(self.drop(x), memory, src_mask, tgt_mask)


def stack_reversed(self, x, memory, src_mask, tgt_mask):
    for layer in self.layers[::-1]:
        x = layer(x, memory, src_mask, tgt_mask)
    return self.norm(x)


def stack_tgt_inverted(self, x, memory, src_mask, tgt_mask):
    for layer in self.layers:
        x = layer(x, memory, src_mask, ~tgt_mask)
    return self.norm(x)


SECOND_ROUND_DECODER_MISTAKES = [
    ("forward under torch.no_grad()", DecoderNoGrad, ["cut off from autograd"]),
    ("memory detached", DecoderMemoryDetached, ["gradient with respect to memory"]),
    ("dropout on the stack's input", DecoderInputDropout, ["dropout applied to the decoder's input"]),
    ("layers in reverse order", decoder_variant(fwd=stack_reversed), ["reverse order"]),
    ("tgt_mask inverted before the layers", decoder_variant(fwd=stack_tgt_inverted), ["tgt_mask inverted"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_ROUND_DECODER_MISTAKES,
                         ids=[m[0] for m in SECOND_ROUND_DECODER_MISTAKES])
def test_second_round_decoder_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "Decoder", *keywords)


# ---------------------------------------------------------------- third review
class LayerExtraDropoutOnCrossAttention(solutions.DecoderLayer):
    """A dropout of its own on cross-attention's output, which the sublayer connection drops again."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayers[1](x, lambda y: self.drop(self.cross_attn(y, memory, memory, src_mask)))
        return self.sublayers[2](x, self.feed_forward)


def test_a_second_dropout_on_cross_attention_is_caught():
    from autograder import checks  # noqa: F401  (fills the registry)
    from autograder.core import REGISTRY, run_check
    LayerExtraDropoutOnCrossAttention.__name__ = "DecoderLayer"
    [c] = [c for c in REGISTRY["DecoderLayer"] if c.title.startswith("uses the dropout argument")]
    points, line = run_check(c, LayerExtraDropoutOnCrossAttention)
    assert points == 0 and "second dropout on the cross_attn sublayer" in line, line


# ---------------------------------------------------------------- a mask passed to the first layer only
def _decoder_masks_to_first_only(tgt_first_only):
    class DecoderFirstLayerMask(solutions.Decoder):
        def forward(self, x, memory, src_mask, tgt_mask):
            for i, layer in enumerate(self.layers):
                x = layer(x, memory, src_mask if tgt_first_only or i == 0 else None,
                          tgt_mask if not tgt_first_only or i == 0 else None)
            return self.norm(x)
    return DecoderFirstLayerMask


@pytest.mark.parametrize("tgt_first_only,named", [(True, "tgt_mask passed to the first layer only"),
                                                  (False, "src_mask passed to the first layer only")])
def test_a_mask_passed_to_the_first_layer_only_is_named(tgt_first_only, named):
    from tests.grading import grade_one
    points, line = grade_one(_decoder_masks_to_first_only(tgt_first_only), "Decoder", "post-norm stack")
    assert points == 0 and named in line, line


class DecoderLayerAttentionDropoutForgotten(solutions.DecoderLayer):
    """MultiHeadAttention(d_model, n_heads) for cross-attention: its default dropout where dropout=0.0 was asked."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)


def test_dropout_not_passed_on_is_not_blamed_on_detach():
    from tests.grading import grade_one
    points, line = grade_one(DecoderLayerAttentionDropoutForgotten, "DecoderLayer", "post-norm")
    assert points == 1, line  # the dropout check alone names it


# ---------------------------------------------------------------- issue 17: a dropout on the memory
# Eval mode cannot see it; in train mode with dropout=0.5, cross-attention's keys and values are the memory with half
# its entries zeroed and the others doubled.
class DecoderLayerDropsTheMemory(solutions.DecoderLayer):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, self.dropout(memory), src_mask, tgt_mask)


class DecoderLayerDropsTheMemoryInTheLambda(solutions.DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        drop = self.sublayers[1].dropout
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, drop(memory), drop(memory), src_mask))
        return self.sublayers[2](x, self.feed_forward)


class DecoderDropsTheMemory(solutions.Decoder):
    def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        memory = self.dropout(memory)
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


MEMORY_DROPPED = ("a dropout on the memory: the encoder's output is dropped nowhere in the decoder; dropout belongs on "
                  "each sublayer's output, the attention weights and the feed-forward's hidden units only. Pass memory "
                  "to cross-attention as it is")


@pytest.mark.parametrize("name,cls,where", [("DecoderLayer", DecoderLayerDropsTheMemory, "the key given to cross_attn"),
                                            ("DecoderLayer", DecoderLayerDropsTheMemoryInTheLambda,
                                             "the key given to cross_attn"),
                                            ("Decoder", DecoderDropsTheMemory, "the key given to layers[0].cross_attn")])
def test_a_dropout_on_the_memory_loses_the_dropout_point(name, cls, where):
    points, text = grade(cls, name)
    assert points == max_points(name) - 1, text
    assert f".train(): {where}; expected the memory itself; got the memory with" in text, text
    assert "(a dropout of rate 0.5). Likely: " + MEMORY_DROPPED in text, text


# ---------------------------------------------------------------- issue 17: a transposed tgt_mask is named
# The causal check said 'without the causal mask' for a mask that is there, upside down; the comparisons with PyTorch
# named nothing. A (B, 1, Lt, Lt) target mask, causal and padded, is not symmetric: its transpose shows.
class DecoderLayerTransposesTgtMask(solutions.DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, memory, src_mask, tgt_mask.transpose(-2, -1))  # "(B, 1, keys, queries)"


class DecoderTransposesTgtMask(solutions.Decoder):
    def forward(self, x, memory, src_mask, tgt_mask):
        mask = tgt_mask.transpose(2, 3)
        for layer in self.layers:
            x = layer(x, memory, src_mask, mask)
        return self.norm(x)


TRANSPOSED = ("Likely: tgt_mask transposed on its way to self-attention (its query and key axes swapped): each position "
              "sees itself and the LATER tokens; a (B, 1, Lt, Lt) mask goes to the attention as it is")


@pytest.mark.parametrize("name,cls,title", [("DecoderLayer", DecoderLayerTransposesTgtMask, "post-norm"),
                                            ("DecoderLayer", DecoderLayerTransposesTgtMask, "self-attention is causal"),
                                            ("Decoder", DecoderTransposesTgtMask, "post-norm stack"),
                                            ("Decoder", DecoderTransposesTgtMask, "pre-norm stack")])
def test_a_transposed_tgt_mask_is_named(name, cls, title):
    points, line = grade_one(cls, name, title)
    assert points == 0 and TRANSPOSED in line, line
    assert "without the causal mask" not in line, line


# ---------------------------------------------------------------- issue 17: a second line of one name that contradicts
def test_a_mask_built_in_the_code_is_not_told_as_state_kept_from_an_earlier_call():
    """A causal mask built in the layer (or the stack) in place of tgt_mask shows only where the target has padding in
    the middle: the comparison with PyTorch names it, and the second batch of the src_mask check (with such a hole)
    used to add 'something from an earlier call is kept', which the same batch through a new layer refutes. That line
    now gives the new layer's answer, the same cause, and the points stay what they were."""
    layer = layer_variant(fwd=fwd_own_causal_mask)
    points, text = grade(layer, "DecoderLayer")
    assert points == 5, text
    [line] = [line for line in text.splitlines() if line.startswith("✗ src_mask hides the source padding")]
    assert "Likely: tgt_mask ignored: a causal mask built inside the layer hides later tokens but not the target's " \
           "padding; pass tgt_mask itself to self-attention" in line, line
    assert "earlier call" not in text, text

    stack = decoder_variant(fwd=stack_own_causal)
    points, text = grade(stack, "Decoder")
    assert points == 3, text
    [line] = [line for line in text.splitlines() if line.startswith("✗ masks reach every layer")]
    assert "Likely: tgt_mask not passed on: the layers were given a causal mask built here, which hides later tokens " \
           "but not the target's padding; pass tgt_mask itself" in line, line
    assert "earlier call" not in text, text


def test_state_kept_from_an_earlier_call_is_still_named_when_a_new_layer_gets_the_batch_right():
    points, line = grade_one(LayerCachesTgtMask, "DecoderLayer", "src_mask hides the source padding")
    assert points == 0, line
    assert line.endswith("Likely: the same module gave a wrong answer on a second batch: something from an earlier "
                         "call is kept (a mask or a tensor saved on self and reused?); use the arguments of each call"), line
