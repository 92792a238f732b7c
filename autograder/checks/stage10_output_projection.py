"""Stage 10: the whole model. Its parts and weight tying by identity; what encode and decode feed their stacks
(embedding * sqrt(d_model) + the sinusoidal table, written out here from the paper's formula); the whole model
against nn.Transformer with copied weights (post-norm and pre-norm); and forward as generator(decode(tgt_in,
encode(src))) with unscaled logits, whose gradient reaches every part (nothing detached or under
torch.no_grad), with forward leaving the train/eval mode alone. Classic mistakes are named. This module holds
what the checks share, the comparison with nn.Transformer included; the checks are in
stage10_transformer.py."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..explain import _describe_exception
from ..registry import CheckFailure, forbid
from ._util import build, seeded
from .stage08_encoder import (
    FF,
    PAD,
    STATE,
    TORCH_TRANSFORMER,
    D,
    H,
    as_module,
    close_at,
    copy_final_norm,
    copy_layer,
    default_layer_norm,
    enc_layer_ref,
    get_path,
    inverted,
    randomize,
    stack_layers,
)
from .stage09_decoder import mentions_both

# the lesson's own work, which PyTorch's Transformer modules must not do for the learner
forbid("Transformer", "PyTorch's nn.Transformer modules (nn.Transformer, nn.TransformerEncoder, ...)",
       functions=("_transformer_encoder_layer_fwd",), classes=TORCH_TRANSFORMER)

BOS = 1
V_SRC, V_TGT, N = 23, 19, 2   # different vocabulary sizes, neither equal to d_model


def _swapped_heads(stack: str, n_layers: int = N) -> dict:
    """{the wrong number of layers: its cause} for the Transformer's `stack` built with n_layers layers
    and H heads."""
    name = stack.capitalize()
    return {H: f"the {name} has n_heads ({H}) layers: n_heads and n_layers swapped where the Transformer "
               f"builds it; {name}(d_model, n_heads, d_ff, n_layers, dropout, norm_first), in the contract's "
               "order"} \
        if H != n_layers else {}
NOT_SCALED = "embeddings not scaled by sqrt(d_model): use the TokenEmbedding (embedding(ids) * sqrt(d_model))"


def sinusoid(L, d):
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)) (paper, section 3.5)."""
    pos = torch.arange(L, dtype=torch.float64)[:, None]
    angle = pos / torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float64) / d)   # (L, d/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(L, d).float()     # sin, cos interleaved


MIXED_LENGTHS = ("the source's and the target's lengths got mixed up: encode(src, src_mask) = "
                 "encoder(positional(src_embed(src)), src_mask); decode(tgt_in, memory, src_mask, "
                 "tgt_mask) = decoder(positional(tgt_embed(tgt_in)), memory, src_mask, tgt_mask); "
                 "forward(src, tgt_in, src_mask, tgt_mask) passes each mask on where it belongs")


def call(fn, *args, what):
    """fn(*args) (the model, or its encode / decode), with the tensors it was given checked unchanged
    afterwards, and a size mismatch between the source and the target explained: it comes from mixing them
    up."""
    before = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
    try:
        out = fn(*args)
    except RuntimeError as e:
        if len(args) < 4 or not mentions_both(e, args[0].size(1), args[1].size(1)):
            raise  # (the source and the target are args[0] and [1] of forward; tgt_in and memory of decode)
        raise CheckFailure(f"{what} with a source and a target of different lengths", None,
                           f"an error: {_describe_exception(e)}", MIXED_LENGTHS) from None
    names = {2: ("src", "src_mask")}.get(len(args), ("tgt_in", "memory", "src_mask", "tgt_mask")
                                         if getattr(fn, "__name__",
                                                    "") == "decode" else ("src", "tgt_in", "src_mask",
                                                                                          "tgt_mask"))
    for name, a, b in zip(names, args, before):
        if b is not None and not torch.equal(a, b):
            raise CheckFailure(f"{what}: the caller's `{name}` after the call", f"{name} unchanged",
                               "changed in place",
                               "work on new tensors (no in-place `_` methods, no `ids[...] = ...`): the "
                               "caller's token ids and masks must stay as they were")
    return out


def _make(Transformer, V_src=V_SRC, V_tgt=V_TGT, seed=0, **kw):
    args = dict(d_model=D, n_heads=H, n_layers=N, d_ff=FF, dropout=0.0)
    args.update(kw)
    what = f"Transformer({V_src}, {V_tgt}, " + ", ".join(f"{k}={v}" for k, v in args.items()) + ")"
    with seeded(seed):
        model = build(Transformer, V_src, V_tgt, what=what, **args)
    return as_module(model, what), what


def _embedding_weight(model, side, what):
    w = get_path(model, f"{side}_embed.embedding.weight", what)
    if not isinstance(w, torch.Tensor):
        raise CheckFailure(f"{what}: {side}_embed.embedding.weight", "a tensor", type(w).__name__,
                           f"{side}_embed is a TokenEmbedding whose `embedding` is an nn.Embedding")
    return w


def _batch(seed=0, src_lengths=(6, 4), tgt_lengths=(5, 3)):
    """src ids valid in both vocabularies (so using the wrong embedding gives numbers, not an error)."""
    with seeded(seed):
        src = torch.randint(4, min(V_SRC, V_TGT), (len(src_lengths), max(src_lengths)))
        tgt = torch.randint(4, V_TGT, (len(tgt_lengths), max(tgt_lengths)))
    tgt[:, 0] = BOS
    for ids, lengths in ((src, src_lengths), (tgt, tgt_lengths)):
        for b, n in enumerate(lengths):
            ids[b, n:] = PAD
    sm = (src != PAD)[:, None, None, :]                                                     # (B, 1, 1, Ls)
    # (B,1,Lt,Lt)
    tm = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).tril() & (tgt != PAD)[:, None, None, :]
    return src, tgt, sm, tm


def _inputs(model, ids, side, what):
    """What the stack should get, and the classic wrong variants."""
    w = _embedding_weight(model, side, what).detach()
    other = _embedding_weight(model, "tgt" if side == "src" else "src", what).detach()
    e = w[ids]
    pe = sinusoid(ids.size(1), D)
    right = e * math.sqrt(D) + pe
    stack = "encoder" if side == "src" else "decoder"
    wrong = {
        NOT_SCALED: e + pe,
        "embeddings scaled twice: TokenEmbedding already multiplies by sqrt(d_model)": e * D + pe,
        "embeddings divided by sqrt(d_model) instead of multiplied": e / math.sqrt(D) + pe,
        "embeddings scaled by sqrt(512), a hard-coded d_model: scale by the square root of the d_model "
        "argument":
            e * math.sqrt(512) + pe,
        f"positional encoding not applied to the {stack} input: positional(embed(ids))": e * math.sqrt(D),
        "positional encoding scaled with the embeddings: add it after the sqrt(d_model) scale":
            (e + pe) * math.sqrt(D),
        f"positional encoding added twice to the {stack} input: positional(embed(ids)) once":
            e * math.sqrt(D) + 2 * pe,
    }
    if other is not w and int(ids.max()) < other.size(0):
        name = "target" if side == "src" else "source"
        wrong[f"the {name} embedding used for the {'source' if side == 'src' else 'target'}"] = \
            other[ids] * math.sqrt(D) + pe
    return right, wrong


def _same(got, value, label):
    """Whether the stack got `value`: the memory itself, or a mask that says the same for every query and key
    (an expanded or reshaped-by-broadcasting copy of the bool mask is as good as the mask)."""
    if not isinstance(got, torch.Tensor):
        return False
    if got.shape == value.shape:
        return torch.equal(got, value)
    if label == "memory" or got.dtype != torch.bool or got.dim() != value.dim():
        return False
    try:
        shape = torch.broadcast_shapes(got.shape, value.shape)
    except RuntimeError:
        return False
    return torch.equal(got.expand(shape), value.expand(shape))


def _not_passed(got, value, label, stack):
    """The likely mistake when the stack got something other than `value` (a mask, or the memory) as
    `label`."""
    if got is None:
        return f"{label} not passed on to the {stack}"
    if value.dtype == torch.bool and label != "memory" and _same(got, ~value, label):
        return (f"{label} inverted (~{label} or {label} == 0) on its way to the {stack}: True means 'may "
                f"attend'; pass {label} on as it is")
    if label == "memory":
        return ("memory changed on its way to the decoder (through the positional encoding, a norm, "
                "dropout?): the decoder gets the encoder's output as it is")
    return f"{label} not passed on to the {stack} as it is (the {stack} gets the very mask given to it)"


class _Recorder(nn.Module):
    """Stands in for the encoder or decoder: returns its input and remembers the arguments."""

    def __init__(self):
        super().__init__()
        self.layers, self.norm, self.calls = nn.ModuleList(), nn.Identity(), []

    def forward(self, x, *args, **kwargs):
        self.calls.append((x, args, kwargs))
        return x


def _argument(call, index, names):
    _, args, kwargs = call
    for n in names:
        if n in kwargs:
            return kwargs[n]
    return args[index] if len(args) > index else None


def _copy_stacks(model, what, norm_first, seed):
    """A randomized nn.Transformer; its stacks copied into the model. Returns it."""
    with seeded(seed):
        enc = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first), N,
            norm=nn.LayerNorm(D) if norm_first else None, enable_nested_tensor=False)
        dec = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first), N,
            norm=nn.LayerNorm(D) if norm_first else None)  # the post-norm paper model has no final norms
        ref = nn.Transformer(D, H, custom_encoder=enc, custom_decoder=dec, dropout=0.0, batch_first=True)
        randomize(ref).train()  # dropout=0.0: train mode computes what eval does, off PyTorch's fast path
    for stack, theirs in (("encoder", ref.encoder), ("decoder", ref.decoder)):
        mine = get_path(model, stack, what)
        layers = stack_layers(mine, f"{what}.{stack}", N, _swapped_heads(stack))
        for i in range(N):
            copy_layer(layers[i], theirs.layers[i], f"{what}.{stack}.layers[{i}]")
        if norm_first:
            copy_final_norm(mine, theirs.norm, f"{what}.{stack}", stack,
                            " (is norm_first passed on to the Encoder and the Decoder?)")
    return ref


GENERATOR_LINEAR = ("the output projection is a plain nn.Linear(d_model, tgt_vocab_size), with no softmax or "
                    "log_softmax after it: forward returns logits and the loss takes the log_softmax")


def _generator(model, what):
    gen = get_path(model, "generator", what)
    if not isinstance(gen, nn.Linear):
        raise CheckFailure(f"{what}: `generator`", f"nn.Linear({D}, tgt_vocab_size)", type(gen).__name__,
                           GENERATOR_LINEAR)
    def project(h):
        return F.linear(h, gen.weight, gen.bias)
    project.linear = gen
    return project


def _states_mistakes(gen, states):
    out = {"decoder states multiplied by sqrt(d_model) before the generator: only the embeddings are scaled":
           gen(states * math.sqrt(D)),
           "decoder states divided by sqrt(d_model) before the generator: only the embeddings are scaled":
           gen(states / math.sqrt(D))}
    if getattr(gen.linear, "bias", None) is not None:
        out["the generator's bias left out (h @ weight.T alone): use self.generator(h), which adds its "
            "bias"] = \
            F.linear(states, gen.linear.weight)
    return out


def _logit_mistakes(logits):
    return {"logits multiplied by sqrt(d_model): the projection is not scaled (only the embeddings are)":
            logits * math.sqrt(D),
            "logits divided by sqrt(d_model): the projection is not scaled (only the embeddings are)":
            logits / math.sqrt(D),
            "forward returns log-probabilities: return the logits, the (log-)softmax is left to the loss":
            torch.log_softmax(logits, -1),
            "forward returns probabilities: return the logits, the softmax is left to the loss":
            torch.softmax(logits, -1)}


def _vs_torch(Transformer, norm_first, seed, second_batch=False):
    model, what = _make(Transformer, norm_first=norm_first, seed=seed)
    ref = _copy_stacks(model, what, norm_first, seed)
    model.eval()
    src, tgt, sm, tm = _batch(seed)
    gen = _generator(model, what)
    with torch.no_grad():
        s_in, s_wrong = _inputs(model, src, "src", what)
        t_in, t_wrong = _inputs(model, tgt, "tgt", what)
        pad_s, pad_t = src == PAD, tgt == PAD
        # PyTorch: True = NOT allowed
        causal_not = ~torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).tril()

        def encode(s, final=True):
            return ref.encoder(s, src_key_padding_mask=pad_s) if final else _no_final(ref.encoder, s, pad_s)

        def full(s, t, final=True, extra_norm=False, cross_mask=True, tgt="full"):
            memory = encode(s, final)
            if extra_norm:
                memory = default_layer_norm(memory)
            h = t
            for layer in ref.decoder.layers:
                h = layer(h, memory, tgt_mask=causal_not if tgt == "full" else None,
                          tgt_key_padding_mask=None if tgt == "none" else pad_t,
                          memory_key_padding_mask=pad_s if cross_mask else None)
            if final and ref.decoder.norm is not None:
                h = ref.decoder.norm(h)
            return gen(default_layer_norm(h) if extra_norm else h)
        memory = encode(s_in)
        enc_mistakes = _encoder_mistakes(ref, encode, memory, s_in, s_wrong, src, norm_first)
    close_at(call(model.encode, src, sm, what=f"{what}.encode(src, src_mask)"), memory, src != PAD,
             f"{what}.encode(src, src_mask) vs nn.TransformerEncoder on embedding * sqrt(d_model) + PE",
             hint="encode(src) = encoder(positional(src_embed(src)), src_mask)", mistakes=enc_mistakes)
    with torch.no_grad():
        out = ref(s_in, t_in, tgt_mask=causal_not, src_key_padding_mask=pad_s, tgt_key_padding_mask=pad_t,
                  memory_key_padding_mask=pad_s)  # nn.Transformer itself: the reference
        expected = gen(out)
        mistakes = _forward_mistakes(full, gen, out, expected, (s_in, s_wrong), (t_in, t_wrong), norm_first)
    close_at(call(model, src, tgt, sm, tm, what=f"{what}(src, tgt_in, src_mask, tgt_mask)"), expected,
             tgt != PAD,
             f"{what}(src, tgt_in, src_mask, tgt_mask) vs generator(nn.Transformer(...)) with the same "
             "weights",
             hint="forward = generator(decode(tgt_in, encode(src, src_mask), src_mask, tgt_mask))",
             mistakes=mistakes)
    if second_batch:  # other lengths (the same shapes), other masks: nothing of the earlier calls may be kept
        _vs_torch_again(model, ref, gen, what, seed)


def _encoder_mistakes(ref, encode, memory, s_in, s_wrong, src, norm_first):
    """encode's classic mistakes: the embeddings' (s_wrong), src_mask missing or inverted, the final norm."""
    enc_mistakes = {k: encode(v) for k, v in s_wrong.items()}
    enc_mistakes["src_mask not passed on to the encoder: the source padding was attended"] = ref.encoder(s_in)
    h = s_in
    for layer in ref.encoder.layers:
        h = enc_layer_ref(layer, h, inverted((src != PAD)[:, None, None, :]), "pre" if norm_first else "post")
    enc_mistakes["src_mask inverted on its way to the encoder (~src_mask or src_mask == 0): True means 'may "
                 "attend'; pass src_mask on as it is"] = ref.encoder.norm(h) if norm_first else h
    if not norm_first:
        enc_mistakes["final norm present in the post-norm encoder: norm must be the identity"] = \
            default_layer_norm(memory)
    else:
        enc_mistakes["final norm missing in the pre-norm encoder: apply its LayerNorm after the last "
                     "layer"] = \
            encode(s_in, final=False)
    return enc_mistakes


def _forward_mistakes(full, gen, out, expected, source, target, norm_first):
    """forward's classic mistakes: the logits', the states', the embeddings' (source and target: (input,
    {mistake: input})), a mask not passed on, the final norms. `full` computes the model so made."""
    (s_in, s_wrong), (t_in, t_wrong) = source, target
    mistakes = _logit_mistakes(expected)
    mistakes.update(_states_mistakes(gen, out))
    for k, v in t_wrong.items():
        mistakes[k] = full(s_in, v)
    mistakes[NOT_SCALED + " (source and target)"] = full(s_wrong[NOT_SCALED], t_wrong[NOT_SCALED])
    mistakes["src_mask not passed on to decode: cross-attention attended the source padding"] = \
        full(s_in, t_in, cross_mask=False)
    mistakes["tgt_mask not passed on to decode: the decoder's self-attention saw later target tokens"] = \
        full(s_in, t_in, tgt="none")
    mistakes["the target's padding mask given to decode instead of tgt_mask: without the causal part, the "
             "decoder's self-attention saw later target tokens"] = full(s_in, t_in, tgt="pad")
    if norm_first:
        mistakes["final norms missing in the pre-norm encoder and decoder"] = full(s_in, t_in, final=False)
    else:
        mistakes["final norms present in the post-norm encoder and decoder: norm must be the identity"] = \
            full(s_in, t_in, extra_norm=True)
    return mistakes


def _vs_torch_again(model, ref, gen, what, seed):
    """A second batch, other lengths (the same shapes) and other masks: nothing of the earlier calls may
    be kept."""
    src2, tgt2, sm2, tm2 = _batch(seed + 50, src_lengths=(3, 6), tgt_lengths=(5, 2))
    with torch.no_grad():
        s2, _ = _inputs(model, src2, "src", what)
        t2, _ = _inputs(model, tgt2, "tgt", what)
        causal2 = ~torch.ones(tgt2.size(1), tgt2.size(1), dtype=torch.bool).tril()
        expected2 = gen(ref(s2, t2, tgt_mask=causal2, src_key_padding_mask=src2 == PAD,
                            tgt_key_padding_mask=tgt2 == PAD, memory_key_padding_mask=src2 == PAD))
    close_at(call(model, src2, tgt2, sm2, tm2, what=f"{what}(src, tgt_in, src_mask, tgt_mask)"), expected2,
             tgt2 != PAD, f"{what} on a second batch (other lengths, other masks)", hint=STATE)


def _no_final(enc, s, pad):
    h = s
    for layer in enc.layers:
        h = layer(h, src_key_padding_mask=pad)
    return h
