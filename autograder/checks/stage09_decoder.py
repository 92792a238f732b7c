"""Stage 09: the decoder layer and stack, against nn.TransformerDecoderLayer / nn.TransformerDecoder with
copied weights (all parameters randomized, LayerNorms included), and by properties: a later target token
never changes an earlier output, source padding never changes anything; gradients reach x and the memory, and
nothing is kept from one call to the next. Classic mistakes are named."""
from __future__ import annotations

import functools
import re

import torch
from torch import nn

from ..explain import _describe_exception
from ..registry import CheckFailure, CheckPassed, CheckTimeout, forbid, register
from . import _util
from ._util import build, close, expect_shape, learners_own, seeded
from .stage08_encoder import (
    FF,
    MASK_CHANGED,
    PAD,
    STATE,
    TORCH_TRANSFORMER,
    D,
    H,
    as_module,
    check_dropout,
    check_layer_parts,
    check_parts_drop,
    check_residual_path,
    check_stack_distinct,
    check_stack_parts,
    check_sublayer_dropout,
    close_at,
    computes_like,
    copies_into,
    copy_final_norm,
    copy_layer,
    default_layer_norm,
    ffn,
    heads_mistakes,
    ids_with_lengths,
    inverted,
    key_mask,
    layer_mistakes,
    mha,
    part_calls,
    randomize,
    same_gradients,
    stack_layers,
    stack_mistakes,
    sublayer,
)

# the lesson's own work, which PyTorch's Transformer modules must not do for the learner
forbid(("DecoderLayer", "Decoder"), "PyTorch's nn.Transformer modules (nn.TransformerDecoderLayer, "
                                    "nn.TransformerDecoder, ...)",
       functions=("_transformer_encoder_layer_fwd",), classes=TORCH_TRANSFORMER)


def causal(L):
    """(1, 1, L, L), True on and below the diagonal (may attend)."""
    return torch.ones(L, L, dtype=torch.bool).tril()[None, None]


def everything(B, Ls):
    """(B, 1, 1, Ls) all True: a source without padding."""
    return torch.ones(B, 1, 1, Ls, dtype=torch.bool)


def tgt_mask_of(ids):
    """(B, 1, Lt, Lt): causal and not a padding key."""
    return causal(ids.size(1)) & key_mask(ids)


TRANSPOSED = ("tgt_mask transposed on its way to self-attention (its query and key axes swapped): each "
              "position sees itself and the LATER tokens; a (B, 1, Lt, Lt) mask goes to the attention as it "
              "is")
def transposed(allowed):
    """What attention computes with the mask's query and key axes swapped, additive (a query row left with no
    key gets uniform weights, as masked_fill with a large negative number gives it, not PyTorch's NaN)."""
    return torch.zeros(allowed.shape).masked_fill(~allowed.transpose(-2, -1), torch.finfo(torch.float32).min)


MIXED_LENGTHS = ("the target's and the source's lengths got mixed up: self-attention is self_attn(x, x, x, "
                 "tgt_mask), cross-attention is cross_attn(x, memory, memory, src_mask) (queries from the "
                 "decoder, keys and values from the memory; tgt_mask for self-attention, src_mask for "
                 "cross-attention), and a layer is called as layer(x, memory, src_mask, tgt_mask)")
IN_PLACE = ("work on new tensors: x = x + ... instead of x += ... (or another in-place `_` method), so that "
            "the caller's tensors stay as they were (autograd needs them too)")


def mentions_both(error, n, m) -> bool:
    """Whether an error names both lengths n != m (a size mismatch between the target and the source)."""
    numbers = {int(t) for t in re.findall(r"\d+", str(error))}
    return n != m and {n, m} <= numbers and any(w in str(error) for w in ("size", "shape"))


def run(module, x, memory, src_mask, tgt_mask, what):
    """module(x, memory, src_mask, tgt_mask), with the inputs checked unchanged afterwards, and a size
    mismatch between the target (Lt) and the source (Ls) explained: it comes from mixing up the two."""
    x_before, memory_before = x.clone(), memory.clone()
    masks_before = [(n, m, m.clone()) for n, m in (("src_mask", src_mask), ("tgt_mask", tgt_mask))
                    if isinstance(m, torch.Tensor)]
    try:
        out = module(x, memory, src_mask, tgt_mask)
    except RuntimeError as e:
        if not mentions_both(e, x.size(1), memory.size(1)):
            raise
        raise CheckFailure(f"{what} with a target of length {x.size(1)} and a source of length "
                           f"{memory.size(1)}",
                           None, f"an error: {_describe_exception(e)}", MIXED_LENGTHS) from None
    for name, now, before in (("x", x, x_before), ("memory", memory, memory_before)):
        if not torch.equal(now, before):
            raise CheckFailure(f"{what}: the caller's `{name}` after the call", f"{name} unchanged",
                               f"{name} changed in place", IN_PLACE)
    for name, m, m_before in masks_before:
        if m.shape != m_before.shape or m.dtype != m_before.dtype or not torch.equal(m, m_before):
            raise CheckFailure(f"{what}: the caller's {name} after the call", "unchanged", "changed in place",
                               MASK_CHANGED.format(name=name))
    return out


def ref_decoder_layer(norm_first: bool, seed: int) -> nn.TransformerDecoderLayer:
    with seeded(seed):
        ref = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)
        return randomize(ref).train()  # dropout=0.0: train mode computes what eval does, off the fast path


def ref_decoder(n_layers: int, norm_first: bool, seed: int) -> nn.TransformerDecoder:
    """nn.TransformerDecoder; its final LayerNorm only for pre-norm (the post-norm paper model has none)."""
    with seeded(seed):
        layer = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)
        ref = nn.TransformerDecoder(layer, n_layers, norm=nn.LayerNorm(D) if norm_first else None)
        return randomize(ref).train()


def run_ref_decoder(ref, x, memory, src_ids, tgt_ids):
    """PyTorch's masks are True where attending is NOT allowed."""
    with torch.no_grad():
        return run_ref_grad(ref, x, memory, src_ids, tgt_ids)


def run_ref_grad(ref, x, memory, src_ids, tgt_ids):
    Lt = x.size(1)
    return ref(x, memory, tgt_mask=~torch.ones(Lt, Lt, dtype=torch.bool).tril(),
               tgt_key_padding_mask=tgt_ids == PAD, memory_key_padding_mask=src_ids == PAD)


def dec_layer_ref(ref, x, memory, self_allowed, cross_allowed, mode="post", order="scf", norms=(0, 1, 2),
                  kv="memory",
                  sa="self"):
    """A decoder layer from ref's weights, written out; step k ("s" self-attention, "c" cross-attention,
    "f" feed-forward) uses norm norms[k]. kv says where cross-attention takes its keys and values."""
    def cross(y):
        if kv == "memory":
            return mha(ref.multihead_attn, y, memory, memory, cross_allowed)
        if kv == "x":
            return mha(ref.multihead_attn, y, y, y, cross_allowed)
        if kv == "k=x":
            return mha(ref.multihead_attn, y, y, memory, cross_allowed)
        if kv == "v=x":
            return mha(ref.multihead_attn, y, memory, y, cross_allowed)
        if kv == "q=memory":
            return mha(ref.multihead_attn, memory, y, y, cross_allowed)
        if kv == "self_attn":  # the right inputs, through the self-attention's projections
            return mha(ref.self_attn, y, memory, memory, cross_allowed)
        raise ValueError(kv)
    # sa="cross": self-attention through cross_attn
    attn = ref.multihead_attn if sa == "cross" else ref.self_attn
    parts = {"s": lambda y: mha(attn, y, y, y, self_allowed), "c": cross, "f": lambda y: ffn(ref, y)}
    ns = (ref.norm1, ref.norm2, ref.norm3)
    for step, k in zip(order, norms):
        x = sublayer(x, parts[step], ns[k], mode)
    return x


def _inputs(seed, tgt_lengths, src_lengths):
    Lt, Ls = max(tgt_lengths), max(src_lengths)
    tgt, src = ids_with_lengths(tgt_lengths, Lt, seed), ids_with_lengths(src_lengths, Ls, seed + 1)
    with seeded(seed + 100):
        x, memory = torch.randn(len(tgt_lengths), Lt, D), torch.randn(len(src_lengths), Ls, D)
    return x, memory, src, tgt


# ==================================================================================== DecoderLayer
def _make_layer(DecoderLayer, norm_first=False, dropout=0.0, seed=0):
    what = f"DecoderLayer({D}, {H}, {FF}, dropout={dropout}, norm_first={norm_first})"
    with seeded(seed):
        layer = build(DecoderLayer, D, H, FF, dropout=dropout, norm_first=norm_first, what=what)
    return as_module(layer, what), what


def _layer_vs_torch(DecoderLayer, norm_first, seed, tgt_lengths, src_lengths, hole=None, grads=False):
    """hole: a position of the first target made <pad> in the middle of the sentence, so that tgt_mask hides a
    key the causal mask alone would not (a layer that builds its own causal mask and ignores tgt_mask
    shows)."""
    layer, what = _make_layer(DecoderLayer, norm_first)
    ref = ref_decoder_layer(norm_first, seed)
    copy_layer(layer, ref, what)
    layer.eval()
    x, memory, src, tgt = _inputs(seed, tgt_lengths, src_lengths)
    if hole is not None:
        tgt[0, hole] = PAD
    got = run(layer, x, memory, key_mask(src), tgt_mask_of(tgt), f"{what}(x, memory, src_mask, tgt_mask)")
    expected = run_ref_decoder(ref, x, memory, src, tgt)
    with torch.no_grad():
        mistakes = _layer_mistakes(ref, x, memory, src, tgt, norm_first)
    close_at(got, expected, tgt != PAD,
             f"{what}(x, memory, src_mask, tgt_mask) vs nn.TransformerDecoderLayer(norm_first={norm_first})",
             hint=("self-attention(x, x, x, tgt_mask), then cross-attention(x, memory, memory, src_mask), "
                   "then the feed-forward, each in its sublayer connection"), mistakes=mistakes)
    if grads:  # in train mode (dropout=0.0: the same numbers), where a model is trained
        layer.train()
        same_gradients(lambda a, b: layer(a, b, key_mask(src), tgt_mask_of(tgt)),
                       lambda a, b: run_ref_grad(ref, a, b, src, tgt), [("x", x), ("memory", memory)],
                       tgt != PAD,
                       f"{what}(x, memory, src_mask, tgt_mask)", seed=seed, module=layer)
    return layer, ref, x, memory, src, tgt


def _layer_mistakes(ref, x, memory, src, tgt, norm_first):
    """The outputs of the classic decoder-layer mistakes on these inputs, by their description (close_at's
    `mistakes`), in the order they are tried."""
    self_mask, cross_mask = tgt_mask_of(tgt), key_mask(src)  # the reference's own, computed once

    def fn(mode="post" if not norm_first else "pre", order="scf", norms=(0, 1, 2), kv="memory",
           self_allowed=self_mask, cross_allowed=cross_mask, sa="self"):
        return dec_layer_ref(ref, x, memory, self_allowed, cross_allowed, mode, order, norms, kv, sa)
    mistakes = layer_mistakes(fn, norm_first)
    mistakes.update(_wiring_mistakes(fn, x, src, tgt))
    mistakes.update(heads_mistakes(lambda r: dec_layer_ref(r, x, memory, tgt_mask_of(tgt), key_mask(src),
                                                           "pre" if norm_first else "post"), ref))
    if norm_first:
        mistakes.update(_lambda_mistakes(ref, x, memory, src, tgt))
    if x.size(1) == memory.size(1):
        mistakes.update(_same_length_mistakes(fn, src, tgt))
    return mistakes


def _wiring_mistakes(fn, x, src, tgt):
    """The sublayers in the wrong order or connections, a mask missing, inverted or hand-made, the attentions
    mixed up: `fn` computes the layer so wired."""
    return {
        "sublayer order wrong: cross-attention ran before self-attention (self-attention, cross-attention, "
        "feed-forward, in sublayers[0], [1], [2])": fn(order="csf"),
        "sublayer order wrong: the feed-forward ran first": fn(order="fsc"),
        "the sublayers' norms mixed up: sublayers[0] wraps self-attention, [1] cross-attention, [2] the "
        "feed-forward": fn(norms=(1, 0, 2)),
        "decoder self-attention without the causal mask (only padding hidden): a position sees later "
        "target tokens": fn(self_allowed=key_mask(tgt)),
        "tgt_mask not passed to self-attention: no causal mask, no target padding "
        "mask": fn(self_allowed=None),
        TRANSPOSED: fn(self_allowed=transposed(tgt_mask_of(tgt))),
        "cross-attention without the source padding mask (src_mask): the memory's padding was attended":
            fn(cross_allowed=None),
        "tgt_mask inverted (~tgt_mask or tgt_mask == 0 given to self-attention): True means 'may attend'; "
        "pass tgt_mask on as it is": fn(self_allowed=inverted(tgt_mask_of(tgt))),
        "src_mask inverted (~src_mask or src_mask == 0 given to cross-attention): True means 'may attend'; "
        "pass src_mask on as it is": fn(cross_allowed=inverted(key_mask(src))),
        "cross-attention computed with self_attn: use self.cross_attn(x, memory, memory, src_mask), the "
        "module with its own projections": fn(kv="self_attn"),
        "self-attention run through the cross-attention module (self.cross_attn(x, x, x, tgt_mask)): the two "
        "attentions have their own projections, self-attention is self.self_attn(x, x, x, tgt_mask)":
            fn(sa="cross"),
        "the two attention modules swapped: self-attention ran through self.cross_attn and cross-attention "
        "through self.self_attn; self.self_attn(x, x, x, tgt_mask), then self.cross_attn(x, memory, memory, "
        "src_mask) (each module has its own projections)": fn(sa="cross", kv="self_attn"),
        "tgt_mask ignored: a causal mask built inside the layer hides later tokens but not the target's "
        "padding; pass tgt_mask itself to self-attention": fn(self_allowed=causal(x.size(1))),
        "sublayer order wrong: the feed-forward ran before cross-attention (self-attention, cross-attention, "
        "feed-forward, in sublayers[0], [1], [2])": fn(order="sfc"),
        "the cross-attention sublayer is missing: self-attention, then cross_attn(x, memory, memory, "
        "src_mask), then the feed-forward, in sublayers[0], [1], [2]": fn(order="sf", norms=(0, 2)),
        "the cross-attention sublayer is missing (and the feed-forward went through sublayers[1]): "
        "self-attention, cross-attention, feed-forward, in sublayers[0], [1], "
        "[2]": fn(order="sf", norms=(0, 1)),
        "sublayers[0] used for cross-attention too: each sublayer has its own connection, sublayers[1] for "
        "cross-attention": fn(norms=(0, 0, 2)),
        "sublayers[1] used for the feed-forward too: each sublayer has its own connection, sublayers[2] for "
        "the feed-forward": fn(norms=(0, 1, 1)),
    }


def _lambda_mistakes(ref, x, memory, src, tgt):
    """Pre-norm: the lambdas that use the closure's x (the un-normalized sum) instead of their argument."""
    def lambda_x(self_x=False, cross_x=False):  # the layer whose self- or cross-attention lambda uses x
        h = x
        n = ref.norm1(h)
        q = h if self_x else n
        h = h + mha(ref.self_attn, q, q, q, tgt_mask_of(tgt))
        n = ref.norm2(h)
        h = h + mha(ref.multihead_attn, h if cross_x else n, memory, memory, key_mask(src))
        return h + ffn(ref, ref.norm3(h))
    mistakes = {}
    mistakes["the attention's lambda uses x instead of its argument (lambda y: self.self_attn(x, x, x, "
             "tgt_mask)): in pre-norm the sublayer connection hands it norm(x); use lambda y: "
             "self.self_attn(y, y, y, tgt_mask)"] = lambda_x(self_x=True)
    mistakes["cross-attention's lambda uses x instead of its argument (lambda y: self.cross_attn(x, memory, "
             "memory, src_mask)): in pre-norm the sublayer connection hands it norm(x); use lambda y: "
             "self.cross_attn(y, memory, memory, src_mask)"] = lambda_x(cross_x=True)
    mistakes["the lambdas use x instead of their argument: in pre-norm the sublayer connection hands them "
             "norm(x); use lambda y: self.self_attn(y, y, y, tgt_mask) and lambda y: self.cross_attn(y, "
             "memory, memory, src_mask)"] = lambda_x(True, True)
    return mistakes


def _same_length_mistakes(fn, src, tgt):
    """What shows only when the target and the source have the same length: the masks or the memory's
    roles swapped."""
    return {
    "the masks swapped: src_mask given to self-attention and tgt_mask to cross-attention (self_attn(x, "
    "x, x, tgt_mask), cross_attn(x, memory, memory, src_mask))":
        fn(self_allowed=key_mask(src), cross_allowed=tgt_mask_of(tgt)),
    "tgt_mask given to cross-attention: cross-attention hides the source padding with src_mask":
        fn(cross_allowed=tgt_mask_of(tgt)),
    "src_mask given to self-attention: decoder self-attention takes tgt_mask (causal and target padding)":
        fn(self_allowed=key_mask(src)),
    "cross-attention keys and values taken from the decoder (x) instead of the memory":
        fn(kv="x"),
    "cross-attention keys and values taken from the decoder (x) instead of the memory, without a mask":
        fn(kv="x", cross_allowed=None),
    "cross-attention keys taken from the decoder (x): keys and values both come from the memory":
        fn(kv="k=x"),
    "cross-attention values taken from the decoder (x): keys and values both come from the memory":
        fn(kv="v=x"),
    "cross-attention roles swapped: the queries come from the decoder, keys and values from the memory":
        fn(kv="q=memory"),
    }


@register("DecoderLayer", "has self_attn, cross_attn, feed_forward and 3 sublayers, each its own; keeps the "
                          "shape")
def _dl_parts(DecoderLayer):
    layer, what = _make_layer(DecoderLayer)
    check_layer_parts(layer, what, cross=True)
    layer.eval()
    with seeded(1):
        x, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    call = f"{what}(x (2, 5, {D}), memory (2, 7, {D}), src_mask, tgt_mask=causal)"
    expect_shape(run(layer, x, memory, everything(2, 7), causal(5), call), (2, 5, D), call,
                 "the output has the target's length: queries come from x, keys and values from memory")


@register("DecoderLayer", "post-norm equals nn.TransformerDecoderLayer with the same weights and masks")
def _dl_post(DecoderLayer):
    _layer_vs_torch(DecoderLayer, False, seed=2, tgt_lengths=[5, 3], src_lengths=[7, 4], hole=2, grads=True)


@register("DecoderLayer", "pre-norm (norm_first=True) equals nn.TransformerDecoderLayer(norm_first=True)")
def _dl_pre(DecoderLayer):
    _layer_vs_torch(DecoderLayer, True, seed=3, tgt_lengths=[5, 4], src_lengths=[6, 3])


@register("DecoderLayer", "self-attention is causal: a later target token never changes earlier outputs")
def _dl_causal(DecoderLayer):
    layer, what = _make_layer(DecoderLayer, seed=4)
    layer.eval()
    with seeded(4):
        x, memory = torch.randn(2, 6, D), torch.randn(2, 4, D)
    x2 = x.clone()
    x2[:, -1] = x2[:, -1] * -2 + 1
    a = run(layer, x, memory, everything(2, 4), causal(6), what)
    b = run(layer, x2, memory, everything(2, 4), causal(6), what)
    expect_shape(a, (2, 6, D), what)
    expect_shape(b, (2, 6, D), what)
    if not close(b[:, :-1], a[:, :-1]):
        x3 = x.clone()
        x3[:, 0] = x3[:, 0] * -2 + 1
        c = run(layer, x3, memory, everything(2, 4), causal(6), what)
        if isinstance(c, torch.Tensor) and c.shape == a.shape and close(c[:, -1], a[:, -1]):
            hint = TRANSPOSED + " (here the last position's output ignores every earlier token)"
        else:
            hint = ("decoder self-attention without the causal mask: pass tgt_mask to self-attention "
                    "(self_attn(x, x, x, tgt_mask)) so that a position never sees later target tokens; and "
                    "cross-attention reads the memory (cross_attn(x, memory, memory, src_mask)), never x")
        raise CheckFailure(f"{what}: outputs at positions 0..4 after changing only the target at position 5",
                           "unchanged", "changed", hint)


@register("DecoderLayer", "cross-attention: keys and values from the memory, queries from the decoder")
def _dl_cross(DecoderLayer):
    layer, what = _make_layer(DecoderLayer, seed=5)
    layer.eval()
    with seeded(5):
        x, memory = torch.randn(2, 5, D), torch.randn(2, 5, D)
    a = expect_shape(run(layer, x, memory, everything(2, 5), causal(5), what), (2, 5, D), what)
    b = run(layer, x, memory * -1.5 + 0.5, everything(2, 5), causal(5), what)
    if close(a, b):
        raise CheckFailure(f"{what}: output after changing the memory", "a different output",
                           "the same output",
                           "cross-attention keys and values taken from the decoder instead of the memory: "
                           "cross_attn(x, memory, memory, src_mask)")
    _layer_vs_torch(DecoderLayer, False, seed=5, tgt_lengths=[5, 5], src_lengths=[5, 3])


@register("DecoderLayer", "src_mask hides the source padding in cross-attention")
def _dl_src_padding(DecoderLayer):
    layer, ref, x, memory, src, tgt = _layer_vs_torch(DecoderLayer, False, seed=6, tgt_lengths=[4, 4],
                                                      src_lengths=[6, 2])
    m2 = memory.clone()
    with seeded(66):
        m2[src == PAD] = torch.randn(int((src == PAD).sum()), D) * 3
    call = f"DecoderLayer({D}, {H}, {FF}, dropout=0.0)(x, memory, src_mask, tgt_mask)"
    close_at(run(layer, x, m2, key_mask(src), tgt_mask_of(tgt), call),
             run(layer, x, memory, key_mask(src), tgt_mask_of(tgt), call), tgt != PAD,
             "output after changing only the memory at the source's padding positions",
             hint="cross-attention without the source padding mask: cross_attn(x, memory, memory, src_mask)")
    # a second batch with other lengths through the same layer: nothing of the earlier calls may be kept
    x2, memory2, src2, tgt2 = _inputs(61, [4, 3], [3, 6])
    tgt2[0, 1] = PAD  # a hole: tgt_mask hides a key the causal mask alone would not
    _kept_or_its_own(lambda: close_at(run(layer, x2, memory2, key_mask(src2), tgt_mask_of(tgt2), call),
                                      run_ref_decoder(ref, x2, memory2, src2, tgt2), tgt2 != PAD,
                                      "a second batch (other lengths, other masks) through the same layer",
                                      hint=STATE),
                     lambda: _layer_vs_torch(DecoderLayer, False, seed=61, tgt_lengths=[4, 3],
                                             src_lengths=[3, 6],
                                             hole=1))


def _kept_or_its_own(same, fresh):
    """`same`: a second batch through the module that has seen the first, which says STATE (something kept
    from an earlier call) when it fails. That cause holds only when a new module gets this batch right;
    otherwise the batch shows a mistake of its own (its hole in the target's padding reveals a causal mask
    built in the code, which the first line of the same name may already have named), and `fresh`, the same
    batch through a new module compared with PyTorch and the known mistakes, gives the message: STATE is not
    guessed against it."""
    try:
        same()
    except CheckFailure:
        fresh()
        raise


@register("DecoderLayer", "uses the dropout argument: active in train mode, off in eval mode")
def _dl_dropout(DecoderLayer):
    with seeded(7):
        x, memory = torch.randn(2, 5, D), torch.randn(2, 6, D)
    check_dropout(lambda p: _make_layer(DecoderLayer, dropout=p)[0],
                  lambda m: expect_shape(run(m, x, memory, everything(2, 6), causal(5),
                                             f"DecoderLayer({D}, {H}, {FF})"),
                                         (2, 5, D), f"DecoderLayer({D}, {H}, {FF})(x (2, 5, {D}), memory (2, "
                                                    f"6, {D}), src_mask, tgt_mask)"),
                  f"DecoderLayer({D}, {H}, {FF})")
    layer = _make_layer(DecoderLayer, dropout=0.5)[0]
    check_parts_drop(layer, part_calls(x, memory), f"DecoderLayer({D}, {H}, {FF})")
    check_memory_untouched(layer, [layer], lambda m: m(x, memory, everything(2, 6), causal(5)), memory,
                           f"DecoderLayer({D}, {H}, {FF}, dropout=0.5)")
    # one dropout per sublayer output, not two: on a pre-norm layer that computes the right numbers
    layer, what = _make_layer(DecoderLayer, norm_first=True)
    ref = ref_decoder_layer(True, seed=7)
    # no padding: masks everything(2, 6) and causal(5)
    src, tgt = torch.full((2, 6), 5), torch.full((2, 5), 5)
    try:
        copy_layer(layer, ref, what)
    except CheckFailure:
        return  # the contract's names are missing: the other checks say so
    if computes_like(layer, lambda: run(layer, x, memory, everything(2, 6), causal(5), what),
                     lambda: run_ref_decoder(ref, x, memory, src, tgt)):
        check_sublayer_dropout(_make_layer(DecoderLayer, True, dropout=0.5)[0],
                               lambda m: run(m, x, memory, everything(2, 6), causal(5), what), x,
                               ("self_attn", "cross_attn", "feed_forward"),
                               f"DecoderLayer({D}, {H}, {FF}, norm_first=True)")


class _KeysSeen(nn.Module):
    """Stands in for a layer's cross-attention: remembers the keys and values it is given, returns zeros."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, query, key=None, value=None, mask=None, **kwargs):
        self.seen.append((key, value))
        return torch.zeros_like(query)


def check_memory_untouched(module, layers, call, memory, what):
    """In train mode with dropout=0.5, every layer's cross-attention gets the memory itself as keys and values
    (a dropout of the module's own on the memory shows as zeroed entries). Layers whose cross_attn cannot be
    replaced or is not called once as cross_attn(query, key, value, mask) are left alone."""
    stand_ins = []
    for layer in layers:
        stand_in = _KeysSeen()
        try:
            layer.cross_attn = stand_in
        except Exception:  # noqa: BLE001  (not a module attribute: another design, judged by the other checks)
            return
        stand_ins.append(stand_in)
    module.train()
    try:
        with seeded(16), torch.no_grad():
            call(module)
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001  (its parts are not used as the contract's modules)
        return
    for i, stand_in in enumerate(stand_ins):
        if len(stand_in.seen) != 1:
            return
        for name, got in zip(("key", "value"), stand_in.seen[0]):
            if not isinstance(got, torch.Tensor) or got.shape != memory.shape or torch.equal(got, memory):
                continue
            g = got.detach().double()
            dropped = torch.isclose(g, memory.double() * 2, atol=1e-5, rtol=1e-4) | (g == 0)
            where = f"{what}.train(): the {name} given to " + \
                (f"layers[{i}].cross_attn" if len(layers) > 1 or layers[0] is not module else "cross_attn")
            if bool(dropped.all()) and bool((g == 0).any()):
                raise CheckFailure(where, "the memory itself",
                                   f"the memory with {float((g == 0).double().mean()) * 100:.0f}% of its "
                                   "entries zeroed and the others x 2 (a dropout of rate 0.5)",
                                   "a dropout on the memory: the encoder's output is dropped nowhere in the "
                                   "decoder; dropout belongs on each sublayer's output, the attention "
                                   "weights and the feed-forward's hidden units only. Pass memory to "
                                   "cross-attention as it is")
            raise CheckFailure(where, "the memory itself", "something else in train mode",
                               "cross-attention takes its keys and values from the memory as it is: "
                               "cross_attn(y, memory, memory, src_mask)")


# ========================================================================================= Decoder
def _make_decoder(Decoder, n_layers, norm_first=False, dropout=0.0, seed=0):
    what = f"Decoder({D}, {H}, {FF}, {n_layers}, dropout={dropout}, norm_first={norm_first})"
    with seeded(seed):
        dec = build(Decoder, D, H, FF, n_layers, dropout=dropout, norm_first=norm_first, what=what)
    return as_module(dec, what), what


def _decoder_mistakes_named(ref, x, memory, src, tgt, norm_first):
    """_decoder_vs_torch's table of mistakes: the reference stack's output with each classic mistake put
    in."""
    mode = "pre" if norm_first else "post"
    self_mask, cross_mask = tgt_mask_of(tgt), key_mask(src)  # the reference's own, computed once

    def run_layer(lay, inp, mode, masked, self_allowed=self_mask, cross_allowed=cross_mask, mem=memory):
        return dec_layer_ref(lay, x if inp is None else inp, mem, self_allowed if masked else None,
                             cross_allowed if masked else None, mode)
    layers_ref = list(ref.layers)
    mistakes = stack_mistakes(layers_ref, run_layer, ref.norm, norm_first, default_layer_norm)

    def chain(**kw):
        h = x
        for lay in layers_ref:
            h = run_layer(lay, h, mode, True, **kw)
        return ref.norm(h) if ref.norm is not None else h
    def first_only(**kw):  # the masks kw (None) from the second layer on
        h = x
        for i, lay in enumerate(layers_ref):
            h = run_layer(lay, h, mode, True, **(kw if i else {}))
        return ref.norm(h) if ref.norm is not None else h
    mistakes["tgt_mask not passed on: the layers' self-attention is not causal"] = chain(self_allowed=None)
    mistakes[TRANSPOSED] = chain(self_allowed=transposed(tgt_mask_of(tgt)))
    mistakes["tgt_mask passed to the first layer only: the later layers' self-attention sees later tokens; "
             "pass it to every layer, x = layer(x, memory, src_mask, "
             "tgt_mask)"] = first_only(self_allowed=None)
    mistakes["src_mask passed to the first layer only: the later layers' cross-attention attends the source "
             "padding; pass it to every layer, x = layer(x, memory, src_mask, tgt_mask)"] = \
        first_only(cross_allowed=None)
    mistakes["src_mask not passed on: cross-attention attended the source "
             "padding"] = chain(cross_allowed=None)
    mistakes["tgt_mask not passed on: the layers were given a causal mask built here, which hides later "
             "tokens but not the target's padding; pass tgt_mask "
             "itself"] = chain(self_allowed=causal(x.size(1)))
    mistakes["tgt_mask inverted before it reaches the layers (~tgt_mask or tgt_mask == 0): True means 'may "
             "attend'; pass tgt_mask on as it is"] = chain(self_allowed=inverted(tgt_mask_of(tgt)))
    mistakes["src_mask inverted before it reaches the layers (~src_mask or src_mask == 0): True means 'may "
             "attend'; pass src_mask on as it is"] = chain(cross_allowed=inverted(key_mask(src)))
    return mistakes


def _decoder_vs_torch(Decoder, norm_first, seed, tgt_lengths, src_lengths, n_layers=2, hole=None,
                      grads=False):
    dec, what = _make_decoder(Decoder, n_layers, norm_first)
    ref = ref_decoder(n_layers, norm_first, seed)
    layers = stack_layers(dec, what, n_layers)
    for i in range(n_layers):
        copy_layer(layers[i], ref.layers[i], f"{what}.layers[{i}]")
    if norm_first:
        copy_final_norm(dec, ref.norm, what, "decoder")
    dec.eval()
    x, memory, src, tgt = _inputs(seed, tgt_lengths, src_lengths)
    if hole is not None:
        tgt[0, hole] = PAD  # tgt_mask hides a key that a causal mask alone would not
    got = run(dec, x, memory, key_mask(src), tgt_mask_of(tgt), f"{what}(x, memory, src_mask, tgt_mask)")
    expected = run_ref_decoder(ref, x, memory, src, tgt)
    with torch.no_grad():
        mistakes = _decoder_mistakes_named(ref, x, memory, src, tgt, norm_first)
    try:
        close_at(got, expected, tgt != PAD,
                 f"{what}(x, memory, src_mask, tgt_mask) vs nn.TransformerDecoder"
                 f"({'with' if norm_first else 'without'} a final LayerNorm)",
                 hint="x = layer(x, memory, src_mask, tgt_mask) for each layer in turn (the same memory for "
                      "all), then self.norm(x) (a LayerNorm in pre-norm, the identity in post-norm)",
                 mistakes=mistakes)
    except CheckFailure:
        _blame_layers(dec, layers, ref, x, memory, src, tgt, norm_first, got)
        raise
    if grads:  # in train mode (dropout=0.0: the same numbers), where a model is trained
        dec.train()
        same_gradients(lambda a, b: dec(a, b, key_mask(src), tgt_mask_of(tgt)),
                       lambda a, b: run_ref_grad(ref, a, b, src, tgt), [("x", x), ("memory", memory)],
                       tgt != PAD,
                       f"{what}(x, memory, src_mask, tgt_mask)", seed=seed, module=dec)
    return dec, ref, x, memory, src, tgt


def _unless_the_layer_fails(check):
    """A mistake paid once: when a Decoder check fails and the Decoder's own layer (a DecoderLayer) fails
    alone on right inputs, the stack cannot be judged and the failure is DecoderLayer's, which pays for it in
    its own checks: the Decoder keeps the point, told to fix DecoderLayer first (it is checked again once that
    works)."""
    @functools.wraps(check)
    def wrapped(Decoder):
        try:
            return check(Decoder)
        except CheckFailure:
            _layer_fails_alone(Decoder)
            raise
    return wrapped


def _layer_fails_alone(Decoder):
    try:
        with seeded(0):
            dec = build(Decoder, D, H, FF, 2, dropout=0.0, what="Decoder(...)")
        layer = dec.layers[0]
    except Exception:  # noqa: BLE001 (no layer to run alone: the stack's own checks say why)
        return
    if _learners_layer(layer) is None:
        return
    layer.eval()
    x, memory, src, tgt = _inputs(0, [5, 3], [6, 4])
    try:
        with torch.no_grad():
            layer(x, memory, key_mask(src), tgt_mask_of(tgt))
    except Exception as e:  # noqa: BLE001 (the learner's layer fails on its own)
        raise CheckPassed(f"your DecoderLayer fails on its own (layer(x, memory, src_mask, tgt_mask) raised "
                          f"{type(e).__name__}: {str(e)[:70]}), so the stack cannot be judged: fix "
                          "DecoderLayer first (its checks say how); Decoder is checked again once it "
                          "works") from None


def _learners_layer(layer, any_class=False):
    """The learner's DecoderLayer class when `layer` (a layer of their Decoder) is one of its instances, else
    None. In a lesson's check(), the layer's own class (named DecoderLayer unless `any_class`); in the grade
    command's checker (where the layer is a proxy), the class bound to the graded name DecoderLayer in the
    notebook, asked of the kernel (_util.learners_own), and the layer an instance of it (asked there too)."""
    if _util.LOOKUP_ELSEWHERE is None:
        return type(layer) if any_class or type(layer).__name__ == "DecoderLayer" else None
    found = learners_own("DecoderLayer", None)
    try:
        return found if found is not None and callable(found) and isinstance(layer, found) else None
    except CheckTimeout:
        raise
    except Exception:  # noqa: BLE001 (not a class: nothing to run alone)
        return None


def _blame_layers(dec, layers, ref, x, memory, src, tgt, norm_first, got):
    """A mistake paid once: the Decoder is right when its output is its own layers applied in turn (then its
    norm), and the layer itself (the learner's DecoderLayer) differs from PyTorch's: the check passes and says
    so."""
    rows, sm, tm = tgt != PAD, key_mask(src), tgt_mask_of(tgt)
    try:
        with torch.no_grad():
            h = x
            for layer in layers:
                h = layer(h, memory, sm, tm)
            h = dec.norm(h) if norm_first else h
            if not (isinstance(h, torch.Tensor) and h.shape == got.shape and close(got[rows], h[rows])
                    and len({id(layer) for layer in layers}) == len(layers)):
                return
            # the learner's DecoderLayer class itself, built as the contract says and given PyTorch's weights
            cls = _learners_layer(layers[0], any_class=True)
            if cls is None:
                return
            fresh = cls(D, H, FF, 0.0, norm_first)
            copy_layer(fresh, ref.layers[0], "DecoderLayer")
            fresh.eval()
            one = fresh(x, memory, sm, tm)
            ref_one = dec_layer_ref(ref.layers[0], x, memory, tm, sm, "pre" if norm_first else "post")
    except Exception:  # noqa: BLE001 (layers that fail alone: the stack's own checks say what fails)
        return
    if isinstance(one, torch.Tensor) and one.shape == ref_one.shape and close(one[rows], ref_one[rows]):
        return  # the layers are right: what differs is the stack's
    raise CheckPassed("the stack applies its own layers in turn (then its norm), as it should; the output "
                      "differs from PyTorch's because your DecoderLayer does (one layer alone differs from "
                      "nn.TransformerDecoderLayer): fix DecoderLayer (its checks say how)")


@register("Decoder",
          "has n_layers layers in an nn.ModuleList, `norm` only in pre-norm, and passes dropout on")
@_unless_the_layer_fails
def _dec_parts(Decoder):
    check_stack_parts(lambda n, norm_first=False: _make_decoder(Decoder, n, norm_first), "decoder")
    with seeded(13):
        x, memory = torch.randn(2, 5, D), torch.randn(2, 6, D)
    what = f"Decoder({D}, {H}, {FF}, 2)"
    check_dropout(lambda p: _make_decoder(Decoder, 2, dropout=p)[0],
                  lambda m: expect_shape(run(m, x, memory, everything(2, 6), causal(5), what), (2, 5, D),
                                         f"{what}(x (2, 5, {D}), memory (2, 6, {D}), src_mask, tgt_mask)"),
                  what)
    dec = _make_decoder(Decoder, 2, dropout=0.5)[0]
    check_memory_untouched(dec, list(stack_layers(dec, what, 2)),
                           lambda m: m(x, memory, everything(2, 6), causal(5)),
                           memory, f"{what[:-1]}, dropout=0.5)")
    # no padding: masks everything(2, 6) and causal(5)
    src, tgt = torch.full((2, 6), 5), torch.full((2, 5), 5)
    for norm_first in (False, True):
        dec, what = _make_decoder(Decoder, 2, norm_first, dropout=1.0)
        ref = ref_decoder(2, norm_first, seed=14)
        call = f"{what}.train()(x, memory, src_mask, tgt_mask)"
        if not copies_into(dec, ref, what, 2, norm_first, "decoder") or not computes_like(
                dec, lambda: run(dec, x, memory, everything(2, 6), causal(5), call),  # noqa: B023 (called at once)
                lambda: run_ref_decoder(ref, x, memory, src, tgt)):  # noqa: B023
            continue  # a wrong stack: the post-norm and pre-norm checks say what is wrong with it
        dec.train()
        with torch.no_grad():
            got = run(dec, x, memory, everything(2, 6), causal(5), call)
            check_residual_path(got, x, list(ref.layers), ("norm1", "norm2", "norm3"), ref.norm, norm_first,
                                call,
                                "decoder")


@register("Decoder", "its layers are distinct, each with its own parameters")
def _dec_distinct(Decoder):
    check_stack_distinct(lambda n: _make_decoder(Decoder, n), "decoder")


@register("Decoder", "post-norm stack equals nn.TransformerDecoder without a final norm")
@_unless_the_layer_fails
def _dec_post(Decoder):
    _decoder_vs_torch(Decoder, False, seed=8, tgt_lengths=[5, 3], src_lengths=[6, 4], hole=2, grads=True)


@register("Decoder", "pre-norm stack equals nn.TransformerDecoder(norm_first=True) with its final LayerNorm")
@_unless_the_layer_fails
def _dec_pre(Decoder):
    _decoder_vs_torch(Decoder, True, seed=9, tgt_lengths=[4, 4], src_lengths=[5, 3])


@register("Decoder", "masks reach every layer: no future target token, no source padding changes an output")
@_unless_the_layer_fails
def _dec_masks(Decoder):
    dec, ref, x, memory, src, tgt = _decoder_vs_torch(Decoder, False, seed=10, tgt_lengths=[5, 5],
                                                      src_lengths=[6, 2])
    sm, tm, what = key_mask(src), tgt_mask_of(tgt), f"Decoder({D}, {H}, {FF}, 2, dropout=0.0)"
    a = run(dec, x, memory, sm, tm, what)
    x2 = x.clone()
    x2[:, -1] = x2[:, -1] * -2 + 1
    if not close(expect_shape(run(dec, x2, memory, sm, tm, what), a.shape, what)[:, :-1], a[:, :-1]):
        raise CheckFailure(f"{what}: outputs at positions 0..3 after changing only the target at position 4",
                           "unchanged", "changed", "tgt_mask not passed to every layer: a position saw a "
                                                   "later token")
    m2 = memory.clone()
    with seeded(1010):
        m2[src == PAD] = torch.randn(int((src == PAD).sum()), D) * 3
    close_at(run(dec, x, m2, sm, tm, what), a, tgt != PAD, "output after changing only the memory at source "
                                                           "padding positions",
             hint="src_mask not passed to every layer's cross-attention")
    # a second batch with other lengths through the same stack: nothing of the earlier calls may be kept
    x2, memory2, src2, tgt2 = _inputs(101, [5, 3], [4, 6])
    tgt2[0, 2] = PAD  # a hole: tgt_mask hides a key the causal mask alone would not
    _kept_or_its_own(lambda: close_at(run(dec, x2, memory2, key_mask(src2), tgt_mask_of(tgt2), what),
                                      run_ref_decoder(ref, x2, memory2, src2, tgt2), tgt2 != PAD,
                                      "a second batch (other lengths, other masks) through the same decoder",
                                      hint=STATE),
                     lambda: _decoder_vs_torch(Decoder, False, seed=101, tgt_lengths=[5, 3],
                                               src_lengths=[4, 6],
                                               hole=2))
