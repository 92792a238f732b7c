"""Stage 08's checks of EncoderLayer: its parts, post-norm and pre-norm against nn.TransformerEncoderLayer
with the same weights, the padding mask, and dropout."""
from __future__ import annotations

import torch

from ..registry import register
from ._util import as_module, build, expect_close, expect_shape, seeded
from .stage08_encoder import (
    FF,
    PAD,
    STATE,
    D,
    H,
    check_dropout,
    check_layer_parts,
    check_parts_drop,
    check_sublayer_dropout,
    close_at,
    computes_like,
    copy_layer,
    enc_layer_ref,
    ffn,
    get_path,
    heads_mistakes,
    ids_with_lengths,
    inverted,
    keeps_input,
    key_mask,
    layer_mistakes,
    mha,
    part_calls,
    ref_encoder_layer,
    same_gradients,
)

EXTRA_NORM = ("the pre-norm layer's output normalized again at its end: a pre-norm layer returns "
              "x + dropout(ff(norm(x))) unnormalized (the Encoder's final norm normalizes the last layer's "
              "output)")


def _make_layer(EncoderLayer, norm_first=False, dropout=0.0, seed=0):
    what = f"EncoderLayer({D}, {H}, {FF}, dropout={dropout}, norm_first={norm_first})"
    with seeded(seed):
        layer = build(EncoderLayer, D, H, FF, dropout=dropout, norm_first=norm_first, what=what)
    return as_module(layer, what), what


def _layer_mistakes_named(ref, x, ids, norm_first):
    """_layer_vs_torch's table of mistakes: the reference layer's output with each classic mistake put in."""
    mask = key_mask(ids)  # the reference's own, computed once (src_mask went to the learner's layer)

    def fn(mode="post", order="af", norms=(0, 1), allowed=mask):
        return enc_layer_ref(ref, x, allowed, mode, order, norms)
    mistakes = layer_mistakes(fn, norm_first)
    mode = "pre" if norm_first else "post"
    mistakes["sublayer order wrong: the feed-forward ran before self-attention (sublayers[0] wraps "
             "self-attention, sublayers[1] the feed-forward)"] = fn(mode, "fa", (0, 1))
    mistakes["the two sublayers' norms swapped: sublayers[0] must wrap self-attention, sublayers[1] the "
             "feed-forward"] = fn(mode, "af", (1, 0))
    mistakes["sublayers[0] used for both sublayers: the feed-forward must go through sublayers[1]"] = \
        fn(mode, "af", (0, 0))
    mistakes["one sublayer connection (one LayerNorm) shared by both sublayers: build a new "
             "SublayerConnection for each"] = fn(mode, "af", (1, 1))
    mistakes["the feed-forward sublayer is missing: the layer returns after self-attention; then "
             "x = sublayers[1](x, feed_forward)"] = fn(mode, "a", (0,))
    mistakes["the feed-forward sublayer got the layer's input x instead of the self-attention sublayer's "
             "output: x = sublayers[0](x, ...); return sublayers[1](x, feed_forward), each step on the "
             "previous one's result"] = fn(mode, "f", (1,))
    if norm_first:
        h = x + mha(ref.self_attn, x, x, x, key_mask(ids))
        mistakes["the attention's lambda uses x instead of its argument (lambda y: self.self_attn(x, x, x, "
                 "mask)): in pre-norm the sublayer connection hands it norm(x); use lambda y: "
                 "self.self_attn(y, y, y, mask)"] = h + ffn(ref, ref.norm2(h))
        mistakes[EXTRA_NORM] = ref.norm2(fn(mode))
        n1 = ref.norm1(x)
        h = x + mha(ref.self_attn, n1, x, x, key_mask(ids))
        mistakes["self-attention's keys and values taken from x instead of the lambda's argument (lambda y: "
                 "self.self_attn(y, x, x, mask)): in pre-norm the sublayer connection hands it norm(x); use "
                 "lambda y: self.self_attn(y, y, y, mask)"] = h + ffn(ref, ref.norm2(h))
    mistakes["src_mask inverted (~src_mask or src_mask == 0 given to self-attention): True means 'may "
             "attend'; pass src_mask on as it is"] = fn(mode, allowed=inverted(key_mask(ids)))
    mistakes.update(heads_mistakes(lambda r: enc_layer_ref(r, x, key_mask(ids), mode), ref))
    if (ids == PAD).any():
        mistakes["src_mask not passed to self-attention (or reshaped so that it hides queries instead of "
                 "keys: keep its (B, 1, 1, L) shape): the padding positions were "
                 "attended"] = fn(mode, allowed=None)
        mistakes["src_mask not passed to self-attention, and " + (
            "norm_first ignored" if norm_first else "pre-norm computed")] = \
            fn("post" if norm_first else "pre", allowed=None)
    return mistakes


def _layer_vs_torch(EncoderLayer, norm_first, seed, lengths, grads=False):
    layer, what = _make_layer(EncoderLayer, norm_first)
    ref = ref_encoder_layer(norm_first, seed)
    copy_layer(layer, ref, what)
    layer.eval()
    L = max(lengths)
    ids = ids_with_lengths(lengths, L, seed)
    with seeded(seed + 100):
        x = torch.randn(len(lengths), L, D)
    src_mask = key_mask(ids)
    got = keeps_input(lambda: layer(x, src_mask), x, f"{what}(x, src_mask)", masks=[("src_mask", src_mask)],
                      without=lambda: layer(x, None))
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=ids == PAD)
        mistakes = _layer_mistakes_named(ref, x, ids, norm_first)
    real = ids != PAD
    close_at(got, expected, real, f"{what}(x, src_mask) vs "
                                  f"nn.TransformerEncoderLayer(norm_first={norm_first})",
             hint=("pre-norm: x = x + dropout(self_attn(norm(x))), then x + "
                   "dropout(ff(norm(x)))" if norm_first else
                   "post-norm (the paper): x = norm(x + dropout(self_attn(x))), then norm(x + "
                   "dropout(ff(x)))"),
             mistakes=mistakes)
    if grads:  # in train mode (dropout=0.0: the same numbers), where a model is trained
        layer.train()
        same_gradients(lambda t: layer(t, key_mask(ids)), lambda t: ref(t, src_key_padding_mask=ids == PAD),
                       [("x", x)], ids != PAD, f"{what}(x, src_mask)", seed=seed, module=layer)
    return layer, ref, x, ids


@register("EncoderLayer", "has self_attn, feed_forward and 2 sublayers, each with its own LayerNorm; keeps "
                          "the shape")
def _el_parts(EncoderLayer):
    layer, what = _make_layer(EncoderLayer)
    check_layer_parts(layer, what, cross=False)
    layer.eval()
    with seeded(1):
        x = torch.randn(2, 5, D)
    expect_shape(layer(x, None), (2, 5, D), f"{what}(x of shape (2, 5, {D}), src_mask=None)",
                 "each sublayer keeps (B, L, d_model); src_mask=None means no mask")
    # other sizes, so that a size written into the code (d_ff = 2 * d_model, ...) cannot match by chance
    what = "EncoderLayer(12, 3, 20, dropout=0.0)"
    with seeded(0):
        other = as_module(build(EncoderLayer, 12, 3, 20, dropout=0.0, what=what), what)
    for path, shape in (("self_attn.w_q.weight", (12, 12)), ("feed_forward.w_1.weight", (20, 12)),
                        ("feed_forward.w_2.weight", (12, 20)), ("sublayers.1.norm.weight", (12,))):
        expect_shape(get_path(other, path, what), shape, f"{what}: {path}",
                     "build the parts from the arguments: MultiHeadAttention(d_model, n_heads, dropout), "
                     "PositionwiseFeedForward(d_model, d_ff, dropout), SublayerConnection(d_model, ...); "
                     "no fixed sizes")


@register("EncoderLayer", "post-norm equals nn.TransformerEncoderLayer with the same weights")
def _el_post(EncoderLayer):
    _layer_vs_torch(EncoderLayer, False, seed=2, lengths=[6, 6], grads=True)


@register("EncoderLayer", "pre-norm (norm_first=True) equals nn.TransformerEncoderLayer(norm_first=True)")
def _el_pre(EncoderLayer):
    _layer_vs_torch(EncoderLayer, True, seed=3, lengths=[5, 5])


@register("EncoderLayer", "src_mask hides padding: real positions equal PyTorch's and ignore the padding")
def _el_padding(EncoderLayer):
    layer, ref, x, ids = _layer_vs_torch(EncoderLayer, False, seed=4, lengths=[7, 4])
    x2 = x.clone()
    with seeded(44):
        x2[ids == PAD] = torch.randn(int((ids == PAD).sum()), D) * 3
    real = ids != PAD
    close_at(layer(x2, key_mask(ids)), layer(x, key_mask(ids)), real,
             "output after changing only the vectors at padding positions",
             hint="src_mask not passed to self-attention: padding positions must not change the real ones")
    # a second batch with other lengths through the same layer: nothing of the earlier calls may be kept
    ids2 = ids_with_lengths([3, 7], 7, seed=41)
    with seeded(42):
        x3 = torch.randn(2, 7, D)
    with torch.no_grad():
        expected = ref(x3, src_key_padding_mask=ids2 == PAD)
    close_at(layer(x3, key_mask(ids2)), expected, ids2 != PAD,
             "a second batch (other lengths, another src_mask) through the same layer", hint=STATE)


@register("EncoderLayer", "uses the dropout argument: active in train mode, off in eval mode")
def _el_dropout(EncoderLayer):
    with seeded(5):
        x = torch.randn(2, 6, D)
    check_dropout(lambda p: _make_layer(EncoderLayer, dropout=p)[0], lambda m: m(x, None),
                  f"EncoderLayer({D}, {H}, {FF})")
    check_parts_drop(_make_layer(EncoderLayer, dropout=0.5)[0], part_calls(x),
                     f"EncoderLayer({D}, {H}, {FF})")
    # p = 1 in train mode drops each sublayer's whole output: only the residual path is left, norm2(norm1(x))
    # in post-norm and x itself in pre-norm; dropout on the residual path (x or the sum) shows here
    for norm_first in (False, True):
        layer, what = _make_layer(EncoderLayer, norm_first, dropout=1.0)
        ref = ref_encoder_layer(norm_first, seed=5)
        copy_layer(layer, ref, what)
        if not computes_like(layer, lambda: layer(x, None), lambda: ref(x)):  # noqa: B023 (called at once)
            continue  # a wrong layer: the post-norm and pre-norm checks say what is wrong with it
        layer.train()
        with torch.no_grad():
            got = keeps_input(lambda: layer(x, None), x, f"{what}.train()(x, None)")  # noqa: B023 (called at once)
            expected = x if norm_first else ref.norm2(ref.norm1(x))
            zero = torch.zeros_like(x)
            # only the attention (its weights) and the feed-forward (its hidden units) drop: each leaves its
            # bias
            b_o, b_2 = ref.self_attn.out_proj.bias, ref.linear2.bias
            biases_only = x + b_o + b_2 if norm_first else ref.norm2(ref.norm1(x + b_o) + b_2)
            expect_close(got, expected, f"{what}.train()(x, None)",
                         hint="with dropout=1.0 every sublayer's output is dropped and only the residual "
                              "path is left: " + ("x" if norm_first else "norm2(norm1(x))") + "; dropout "
                                                                                              "belongs on "
                                                                                              "each "
                              "sublayer's output only, never on x or on the residual sum",
                         mistakes={"dropout applied to the residual sum (or to x itself), not to the "
                                   "sublayer's output only: " +
                                   ("x + dropout(sublayer(norm(x)))" if norm_first else
                                                      "norm(x + dropout(sublayer(x)))"):
                                   zero if norm_first else ref.norm2.bias.detach().expand_as(x),
                                   "the sublayer connections do not drop the sublayer's output (only the "
                                   "attention and the feed-forward drop inside): pass the dropout argument "
                                   "on to SublayerConnection(d_model, dropout, norm_first), in that "
                                   "order": biases_only,
                                   **({EXTRA_NORM: ref.norm2(x)} if norm_first else {})})
        if norm_first:  # one dropout per sublayer output, not two (p = 1 cannot tell)
            check_sublayer_dropout(_make_layer(EncoderLayer, True, dropout=0.5)[0], lambda m: m(x, None), x,
                                   ("self_attn", "feed_forward"), f"EncoderLayer({D}, {H}, {FF}, "
                                                                  "norm_first=True)")
