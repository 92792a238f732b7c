"""Stage 08's checks of Encoder (the stack; stage08_encoder.py holds what the stage's checks share): its
layers, post-norm and pre-norm against nn.TransformerEncoder with the same weights, and the padding mask."""
from __future__ import annotations

import torch

from ..registry import register
from ._util import as_module, build, expect_shape, seeded
from .stage08_encoder import (
    FF,
    PAD,
    STATE,
    D,
    H,
    check_dropout,
    check_residual_path,
    check_stack_distinct,
    check_stack_parts,
    close_at,
    computes_like,
    copies_into,
    copy_final_norm,
    copy_layer,
    default_layer_norm,
    enc_layer_ref,
    ids_with_lengths,
    inverted,
    keeps_input,
    key_mask,
    ref_encoder,
    same_gradients,
    stack_layers,
    stack_mistakes,
)


def _make_encoder(Encoder, n_layers, norm_first=False, dropout=0.0, seed=0):
    what = f"Encoder({D}, {H}, {FF}, {n_layers}, dropout={dropout}, norm_first={norm_first})"
    with seeded(seed):
        enc = build(Encoder, D, H, FF, n_layers, dropout=dropout, norm_first=norm_first, what=what)
    return as_module(enc, what), what


def _encoder_vs_torch(Encoder, norm_first, seed, lengths, n_layers=2, grads=False):
    enc, what = _make_encoder(Encoder, n_layers, norm_first)
    ref = ref_encoder(n_layers, norm_first, seed)
    layers = stack_layers(enc, what, n_layers)
    for i in range(n_layers):
        copy_layer(layers[i], ref.layers[i], f"{what}.layers[{i}]")
    if norm_first:
        copy_final_norm(enc, ref.norm, what, "encoder")
    enc.eval()
    L = max(lengths)
    ids = ids_with_lengths(lengths, L, seed)
    with seeded(seed + 100):
        x = torch.randn(len(lengths), L, D)
    src_mask = key_mask(ids)
    got = keeps_input(lambda: enc(x, src_mask), x, f"{what}(x, src_mask)", masks=[("src_mask", src_mask)],
                      without=lambda: enc(x, None))
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=ids == PAD)
        mask = key_mask(ids)  # the reference's own, computed once (src_mask went to the learner's stack)

        def run_layer(lay, inp, mode, masked, allowed=mask):
            return enc_layer_ref(lay, x if inp is None else inp, allowed if masked else None, mode)
        mistakes = stack_mistakes(list(ref.layers), run_layer, ref.norm, norm_first, default_layer_norm)
        h = x
        for lay in ref.layers:
            h = run_layer(lay, h, "pre" if norm_first else "post", True, allowed=inverted(key_mask(ids)))
        mistakes["src_mask inverted before it reaches the layers (~src_mask or src_mask == 0): True means "
                 "'may attend'; pass src_mask on as it is"] = ref.norm(h) if norm_first else h
    close_at(got, expected, ids != PAD,
             f"{what}(x, src_mask) vs nn.TransformerEncoder({'with' if norm_first else 'without'} a final "
             "LayerNorm)",
             hint="x = layer(x, src_mask) for each layer in turn, then self.norm(x) (a LayerNorm in "
                  "pre-norm, the identity in post-norm)", mistakes=mistakes)
    if grads:  # in train mode (dropout=0.0: the same numbers), where a model is trained
        enc.train()
        same_gradients(lambda t: enc(t, key_mask(ids)), lambda t: ref(t, src_key_padding_mask=ids == PAD),
                       [("x", x)], ids != PAD, f"{what}(x, src_mask)", seed=seed, module=enc)
    return enc, ref, x, ids


@register("Encoder",
          "has n_layers layers in an nn.ModuleList, `norm` only in pre-norm, and passes dropout on")
def _enc_parts(Encoder):
    check_stack_parts(lambda n, norm_first=False: _make_encoder(Encoder, n, norm_first), "encoder")
    with seeded(13):
        x = torch.randn(2, 5, D)
    what = f"Encoder({D}, {H}, {FF}, 2)"
    check_dropout(lambda p: _make_encoder(Encoder, 2, dropout=p)[0],
                  lambda m: expect_shape(keeps_input(lambda: m(x, None), x, what), (2, 5, D),
                                         f"{what}(x (2, 5, {D}), src_mask=None)"), what)
    for norm_first in (False, True):
        enc, what = _make_encoder(Encoder, 2, norm_first, dropout=1.0)
        ref = ref_encoder(2, norm_first, seed=14)
        if not copies_into(enc, ref, what, 2, norm_first, "encoder") or \
                not computes_like(enc, lambda: enc(x, None), lambda: ref(x)):  # noqa: B023 (called at once)
            continue  # a wrong stack: the post-norm and pre-norm checks say what is wrong with it
        enc.train()
        with torch.no_grad():
            got = keeps_input(lambda: enc(x, None), x, f"{what}.train()(x, None)")  # noqa: B023 (called at once)
            check_residual_path(got, x, list(ref.layers), ("norm1", "norm2"), ref.norm, norm_first,
                                f"{what}.train()(x, None)", "encoder")


@register("Encoder", "its layers are distinct, each with its own parameters")
def _enc_distinct(Encoder):
    check_stack_distinct(lambda n: _make_encoder(Encoder, n), "encoder")


@register("Encoder", "post-norm stack equals nn.TransformerEncoder without a final norm")
def _enc_post(Encoder):
    _encoder_vs_torch(Encoder, False, seed=6, lengths=[6, 6], grads=True)


@register("Encoder", "pre-norm stack equals nn.TransformerEncoder(norm_first=True) with its final LayerNorm")
def _enc_pre(Encoder):
    _encoder_vs_torch(Encoder, True, seed=7, lengths=[5, 5])


@register("Encoder", "src_mask reaches every layer: padding changes nothing at real positions")
def _enc_padding(Encoder):
    enc, ref, x, ids = _encoder_vs_torch(Encoder, False, seed=8, lengths=[7, 3])
    x2 = x.clone()
    with seeded(88):
        x2[ids == PAD] = torch.randn(int((ids == PAD).sum()), D) * 3
    close_at(enc(x2, key_mask(ids)), enc(x, key_mask(ids)), ids != PAD,
             "output after changing only the vectors at padding positions",
             hint="pass src_mask to every layer: padding positions must not change the real ones")
    # a second batch with other lengths through the same stack: nothing of the earlier calls may be kept
    ids2 = ids_with_lengths([4, 7], 7, seed=81)
    with seeded(82):
        x3 = torch.randn(2, 7, D)
    with torch.no_grad():
        expected = ref(x3, src_key_padding_mask=ids2 == PAD)
    close_at(enc(x3, key_mask(ids2)), expected, ids2 != PAD,
             "a second batch (other lengths, another src_mask) through the same encoder", hint=STATE)
