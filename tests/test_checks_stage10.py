"""Stage 10's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake of the whole model."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from solutions import PAD, Decoder, Encoder, PositionalEncoding, TokenEmbedding
from autograder import max_points
from tests.grading import assert_caught, assert_full_marks, grade, grade_one
from tests.test_checks_stage08 import EncoderCheckpointed, EncoderChildren, EncoderClones
from tests.test_checks_stage09 import DecoderChildren, DecoderMasksOnce, DecoderWhile


def test_reference_gets_full_marks():
    assert_full_marks(solutions.Transformer)


# ---------------------------------------------------------------- correct, written differently
class Embed(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = d_model ** 0.5

    def forward(self, ids):
        return self.embedding(ids) * self.scale


class LoopPositional(nn.Module):
    """The table filled by two loops with math.sin / math.cos; no dropout module, F.dropout instead."""

    def __init__(self, d_model, max_len, dropout):
        super().__init__()
        table = torch.zeros(max_len, d_model)
        for pos in range(max_len):
            for i in range(0, d_model, 2):
                table[pos, i] = math.sin(pos / 10000 ** (i / d_model))
                table[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
        self.register_buffer("table", table)
        self.p = dropout

    def forward(self, x):
        if x.size(1) > self.table.size(0):
            raise ValueError(f"length {x.size(1)} > max_len {self.table.size(0)}")
        return F.dropout(x + self.table[: x.size(1)], self.p, self.training)


class TransformerOwnParts(nn.Module):
    """Its own embedding and positional modules, the logits written out with the generator's weight and bias, tied
    the other way round (the embedding takes the generator's Parameter), keyword calls."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
        super().__init__()
        self.src_embed, self.tgt_embed = Embed(src_vocab_size, d_model), Embed(tgt_vocab_size, d_model)
        self.positional = LoopPositional(d_model, max_len, dropout)
        self.encoder = Encoder(d_model, n_heads, d_ff, n_layers, dropout=dropout, norm_first=norm_first)
        self.decoder = Decoder(d_model, n_heads, d_ff, n_layers, dropout=dropout, norm_first=norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_weights:
            self.tgt_embed.embedding.weight = self.generator.weight
            if src_vocab_size == tgt_vocab_size:
                self.src_embed.embedding.weight = self.generator.weight

    def encode(self, src, src_mask):
        return self.encoder(x=self.positional(self.src_embed(src)), src_mask=src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        return self.decoder(x=self.positional(self.tgt_embed(tgt_in)), memory=memory, src_mask=src_mask,
                            tgt_mask=tgt_mask)

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        states = self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)
        return states @ self.generator.weight.t() + self.generator.bias


class TransformerOtherStacks(nn.Module):
    """The course's embeddings, other (correct) stacks, the logits through einsum."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
        super().__init__()
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, padding_idx=PAD)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, padding_idx=PAD)
        self.positional = PositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        self.encoder = EncoderClones(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.decoder = DecoderWhile(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_weights:
            shared = self.tgt_embed.embedding.weight
            self.generator.weight = shared
            if src_vocab_size == tgt_vocab_size:
                self.src_embed.embedding.weight = shared

    def encode(self, src, src_mask):
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        x = self.positional(self.tgt_embed(tgt_in))
        return self.decoder(x, memory, src_mask, tgt_mask)

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        memory = self.encode(src, src_mask)
        h = self.decode(tgt_in, memory, src_mask, tgt_mask)
        return torch.einsum("bld,vd->blv", h, self.generator.weight) + self.generator.bias


class OnTheFlyPositional(nn.Module):
    """No table kept: computed at each call with exp/log in float64; its own ValueError past max_len."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.d, self.max_len, self.drop = d_model, max_len, nn.Dropout(dropout)

    def forward(self, x):
        L = x.shape[1]
        if L > self.max_len:
            raise ValueError(f"length {L} > max_len {self.max_len}")
        pos = torch.arange(L, dtype=torch.float64).unsqueeze(1)
        freq = torch.exp(torch.arange(0, self.d, 2, dtype=torch.float64) * (-math.log(10000.0) / self.d))
        table = torch.stack([torch.sin(pos * freq), torch.cos(pos * freq)], -1).flatten(1)
        return self.drop(x + table.to(x.dtype))


class TransformerSharedParameter(nn.Module):
    """One fresh nn.Parameter given to the generator and the embeddings; the positional encoding computed on
    the fly; an extra constructor argument; masks optional."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True, activation="relu"):
        super().__init__()
        self.src_embed, self.tgt_embed = Embed(src_vocab_size, d_model), Embed(tgt_vocab_size, d_model)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_weights:
            shared = nn.Parameter(torch.randn(tgt_vocab_size, d_model) * d_model ** -0.5)
            self.generator.weight = self.tgt_embed.embedding.weight = shared
            if src_vocab_size == tgt_vocab_size:
                self.src_embed.embedding.weight = shared
        self.positional = OnTheFlyPositional(d_model, max_len, dropout)
        self.encoder = Encoder(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.decoder = Decoder(d_model, n_heads, d_ff, n_layers, dropout, norm_first)

    def encode(self, src, src_mask=None):
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(self, tgt_in, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt_in, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask))


class TransformerOwnDropout(solutions.Transformer):
    """The positional encoding built without dropout, a dropout module applied after it instead."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, n_heads, n_layers, d_ff, dropout, max_len,
                         norm_first, tie_weights)
        self.positional = PositionalEncoding(d_model, max_len, 0.0)
        self.drop = nn.Dropout(dropout)

    def encode(self, src, src_mask):
        return self.encoder(self.drop(self.positional(self.src_embed(src))), src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        return self.decoder(self.drop(self.positional(self.tgt_embed(tgt_in))), memory, src_mask, tgt_mask)


class UncheckedPositional(nn.Module):
    """A positional encoding that does not check the length itself: a longer input fails on the sum."""

    def __init__(self, d_model, max_len, dropout):
        super().__init__()
        self.register_buffer("table", solutions.sinusoidal_encoding(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.table[: x.size(1)])


class TransformerUncheckedPositional(solutions.Transformer):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, n_heads, n_layers, d_ff, dropout, max_len,
                         norm_first, tie_weights)
        self.positional = UncheckedPositional(d_model, max_len, dropout)


@pytest.mark.parametrize("cls", [TransformerOwnParts, TransformerOtherStacks, TransformerSharedParameter,
                                 TransformerOwnDropout, TransformerUncheckedPositional])
def test_other_correct_transformers(cls):
    assert_full_marks(cls, "Transformer")


# ---------------------------------------------------------------- classic mistakes
def variant(after_init=None, encode=None, decode=None, forward=None, **fixed):
    """A solutions.Transformer with one thing changed: fixed constructor arguments, a hook after
    __init__, or another encode / decode / forward."""
    class Variant(solutions.Transformer):
        def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                     dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
            args = dict(d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=d_ff, dropout=dropout,
                        max_len=max_len, norm_first=norm_first, tie_weights=tie_weights)
            args.update(fixed)
            super().__init__(src_vocab_size, tgt_vocab_size, **args)
            if after_init is not None:
                after_init(self, src_vocab_size, tgt_vocab_size, d_model, args)

    for name, fn in (("encode", encode), ("decode", decode), ("forward", forward)):
        if fn is not None:
            setattr(Variant, name, fn)
    return Variant


def enc_unscaled(self, src, src_mask):
    return self.encoder(self.positional(self.src_embed.embedding(src)), src_mask)


def enc_scaled_twice(self, src, src_mask):
    return self.encoder(self.positional(self.src_embed(src) * math.sqrt(self.src_embed.d_model)), src_mask)


def enc_with_tgt_embedding(self, src, src_mask):
    return self.encoder(self.positional(self.tgt_embed(src)), src_mask)


def enc_without_mask(self, src, src_mask):
    return self.encoder(self.positional(self.src_embed(src)), None)


def enc_pe_before_scale(self, src, src_mask):
    e = self.positional(self.src_embed.embedding(src))
    return self.encoder(e * math.sqrt(self.src_embed.d_model), src_mask)


def dec_without_positional(self, tgt_in, memory, src_mask, tgt_mask):
    return self.decoder(self.tgt_embed(tgt_in), memory, src_mask, tgt_mask)


def dec_unscaled(self, tgt_in, memory, src_mask, tgt_mask):
    return self.decoder(self.positional(self.tgt_embed.embedding(tgt_in)), memory, src_mask, tgt_mask)


def dec_masks_swapped(self, tgt_in, memory, src_mask, tgt_mask):
    return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, tgt_mask, src_mask)


def dec_with_generator(self, tgt_in, memory, src_mask, tgt_mask):
    return self.generator(self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask, tgt_mask))


def fwd_decode_only(self, src, tgt_in, src_mask, tgt_mask):
    return self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)


def scaled_forward(factor):
    def forward(self, src, tgt_in, src_mask, tgt_mask):
        logits = self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask))
        return logits * factor(self.src_embed.d_model)
    return forward


def fwd_decode_without_src_mask(self, src, tgt_in, src_mask, tgt_mask):
    return self.generator(self.decode(tgt_in, self.encode(src, src_mask), None, tgt_mask))


def fwd_log_softmax(self, src, tgt_in, src_mask, tgt_mask):
    return torch.log_softmax(self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)), -1)


def untie(self, V_src, V_tgt, d, args):
    self.generator = nn.Linear(d, V_tgt)
    self.src_embed.embedding = nn.Embedding(V_src, d)
    self.tgt_embed.embedding = nn.Embedding(V_tgt, d)


def tie_by_data(self, V_src, V_tgt, d, args):
    self.generator.weight = nn.Parameter(torch.empty(V_tgt, d))
    self.generator.weight.data = self.tgt_embed.embedding.weight.data


def untie_source(self, V_src, V_tgt, d, args):
    self.src_embed.embedding = nn.Embedding(V_src, d)


def tie_generator_to_source(self, V_src, V_tgt, d, args):
    self.src_embed.embedding = nn.Embedding(V_src, d)
    self.generator.weight = self.src_embed.embedding.weight


def positional_default_dropout(self, V_src, V_tgt, d, args):
    self.positional = PositionalEncoding(d, args["max_len"])


def positional_default_max_len(self, V_src, V_tgt, d, args):
    self.positional = PositionalEncoding(d, dropout=args["dropout"])


def final_norm_in_post_norm(self, V_src, V_tgt, d, args):
    self.encoder.norm = solutions.LayerNorm(d)


def enc_scaled_by_512(self, src, src_mask):
    return self.encoder(self.positional(self.src_embed.embedding(src) * math.sqrt(512)), src_mask)


def fwd_masks_swapped(self, src, tgt_in, src_mask, tgt_mask):
    return self.generator(self.decode(tgt_in, self.encode(src, src_mask), tgt_mask, src_mask))


def fwd_states_scaled(self, src, tgt_in, src_mask, tgt_mask):
    states = self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)
    return self.generator(states * math.sqrt(self.tgt_embed.d_model))


def fwd_pads_replaced_in_place(self, src, tgt_in, src_mask, tgt_mask):
    tgt_in[tgt_in == PAD] = 3  # the caller's tgt_in changes
    return solutions.Transformer.forward(self, src, tgt_in, src_mask, tgt_mask)


def tie_by_new_parameter(self, V_src, V_tgt, d, args):
    self.generator.weight = nn.Parameter(self.tgt_embed.embedding.weight)  # a second Parameter on the same storage


def generator_with_log_softmax(self, V_src, V_tgt, d, args):
    self.generator = nn.Sequential(self.generator, nn.LogSoftmax(dim=-1))


def positional_without_dropout(self, V_src, V_tgt, d, args):
    self.positional = PositionalEncoding(d, args["max_len"], 0.0)


MISTAKES = [
    ("embeddings scaled by sqrt(512)", variant(encode=enc_scaled_by_512), ["hard-coded d_model"]),
    ("masks swapped in forward", variant(forward=fwd_masks_swapped), ["lengths got mixed up"]),
    ("decoder states scaled before the generator", variant(forward=fwd_states_scaled), ["decoder states multiplied"]),
    ("tgt_in changed in place", variant(forward=fwd_pads_replaced_in_place), ["changed in place"]),
    ("tied through a new Parameter", variant(after_init=tie_by_new_parameter), ["separate Parameters"]),
    ("log_softmax inside the generator", variant(after_init=generator_with_log_softmax),
     ["no softmax or log_softmax"]),
    ("no dropout after the positional encoding", variant(after_init=positional_without_dropout),
     ["no dropout after the positional encoding"]),
    ("dropout 0 everywhere", variant(dropout=0.0), ["not passed on to the encoder"]),
    ("n_layers hard-coded to 2", variant(n_layers=2), ["3 layers"]),
    ("embeddings not scaled (encode)", variant(encode=enc_unscaled), ["not scaled by sqrt(d_model)"]),
    ("embeddings not scaled (decode)", variant(decode=dec_unscaled), ["not scaled by sqrt(d_model)"]),
    ("embeddings scaled twice", variant(encode=enc_scaled_twice), ["scaled twice"]),
    ("positional encoding scaled too", variant(encode=enc_pe_before_scale), ["positional encoding scaled"]),
    ("target embedding for the source", variant(encode=enc_with_tgt_embedding),
     ["target embedding used for the source"]),
    ("src_mask not passed to the encoder", variant(encode=enc_without_mask), ["src_mask not passed on to the encoder"]),
    ("no positional encoding on the decoder input", variant(decode=dec_without_positional),
     ["positional encoding not applied to the decoder input"]),
    ("decoder masks swapped", variant(decode=dec_masks_swapped), ["wrong order"]),
    ("generator inside decode", variant(decode=dec_with_generator, forward=fwd_decode_only), ["inside decode"]),
    ("logits multiplied by sqrt(d_model)", variant(forward=scaled_forward(math.sqrt)), ["logits multiplied"]),
    ("logits divided by sqrt(d_model)", variant(forward=scaled_forward(lambda d: d ** -0.5)), ["logits divided"]),
    ("src_mask not passed to decode", variant(forward=fwd_decode_without_src_mask),
     ["src_mask not passed on to decode"]),
    ("log_softmax in forward", variant(forward=fwd_log_softmax), ["log-probabilities"]),
    ("weights not tied", variant(after_init=untie), ["weights not tied"]),
    ("tied through .data", variant(after_init=tie_by_data), ["separate Parameters"]),
    ("source embedding not tied", variant(after_init=untie_source), ["source embedding not tied"]),
    ("generator tied to the source embedding", variant(after_init=tie_generator_to_source),
     ["tied to the source embedding"]),
    ("tie_weights ignored", variant(tie_weights=True), ["tie_weights ignored"]),
    ("dropout not passed on", variant(after_init=positional_default_dropout), ["dropout argument is not passed"]),
    ("max_len not passed on", variant(after_init=positional_default_max_len), ["max_len not passed"]),
    ("final norm in the post-norm encoder", variant(after_init=final_norm_in_post_norm), ["final norm present"]),
    ("norm_first ignored", variant(norm_first=False), ["norm_first passed on"]),
]


@pytest.mark.parametrize("label,cls,keywords", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_transformer_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "Transformer", *keywords)


def test_stub_gets_zero_and_says_not_implemented():
    from autograder import REGISTRY

    class Transformer(nn.Module):
        def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                     dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
            super().__init__()
            if d_model % n_heads:
                raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
            raise NotImplementedError()
    points, text = grade(Transformer)
    assert points == 0 and text.count("not implemented yet") == len(REGISTRY["Transformer"]), text


# ---------------------------------------------------------------- second review: more correct styles
class TransformerSharedEmbeddingModule(nn.Module):
    """Equal vocabularies: src_embed IS the tgt_embed module; F.linear with the generator's weight; an extra
    keyword-only argument in forward."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True, *, label="x"):
        super().__init__()
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, padding_idx=PAD)
        same = tie_weights and src_vocab_size == tgt_vocab_size
        self.src_embed = self.tgt_embed if same else TokenEmbedding(src_vocab_size, d_model, padding_idx=PAD)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.decoder = Decoder(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_weights:
            self.generator.weight = self.tgt_embed.embedding.weight

    def encode(self, src, src_mask):
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt_in, src_mask, tgt_mask, *, return_memory=False):
        memory = self.encode(src, src_mask)
        out = F.linear(self.decode(tgt_in, memory, src_mask, tgt_mask), self.generator.weight, self.generator.bias)
        return (out, memory) if return_memory else out


class TransformerFloat64Projection(solutions.Transformer):
    """The projection in float64, cast back; masks built when not given."""

    def forward(self, src, tgt_in, src_mask=None, tgt_mask=None):
        if src_mask is None:
            src_mask = (src != PAD)[:, None, None, :]
        if tgt_mask is None:
            L = tgt_in.size(1)
            tgt_mask = torch.ones(L, L, dtype=torch.bool).tril() & (tgt_in != PAD)[:, None, None, :]
        h = self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)
        g = self.generator
        return F.linear(h.double(), g.weight.double(), g.bias.double()).to(h.dtype)


class OneHotEmbedding(nn.Module):
    """one_hot(ids) @ weight instead of a lookup."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding, self.d = nn.Embedding(vocab_size, d_model), d_model

    def forward(self, ids):
        one_hot = F.one_hot(ids, self.embedding.num_embeddings).to(self.embedding.weight.dtype)
        return one_hot @ self.embedding.weight * self.d ** 0.5


class NumpyPositional(nn.Module):
    """The table computed with numpy, kept as a (1, max_len, d) buffer; F.dropout."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        import numpy as np
        angle = np.arange(max_len)[:, None] / np.power(10000.0, np.arange(0, d_model, 2)[None, :] / d_model)
        table = np.zeros((max_len, d_model))
        table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
        self.register_buffer("pe", torch.from_numpy(table).float()[None])
        self.p = dropout

    def forward(self, x):
        if x.size(1) > self.pe.size(1):
            raise ValueError(f"length {x.size(1)} > max_len {self.pe.size(1)}")
        return F.dropout(x + self.pe[:, : x.size(1)], self.p, self.training)


class TransformerOneHot(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
        super().__init__()
        self.src_embed, self.tgt_embed = OneHotEmbedding(src_vocab_size, d_model), OneHotEmbedding(tgt_vocab_size, d_model)
        self.positional = NumpyPositional(d_model, max_len, dropout)
        self.encoder = EncoderChildren(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.decoder = DecoderChildren(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_weights:
            self.generator.weight = self.tgt_embed.embedding.weight
            if src_vocab_size == tgt_vocab_size:
                self.src_embed.embedding.weight = self.generator.weight

    def encode(self, src, src_mask):
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        return self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask))


class TransformerOwnInit(solutions.Transformer):
    """Xavier for every matrix and zero biases after tying; the stacks called by keyword."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def encode(self, src, src_mask):
        return self.encoder(self.positional(self.src_embed(src)), src_mask=src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory=memory, src_mask=src_mask,
                            tgt_mask=tgt_mask)


class TransformerTiedLater(nn.Module):
    """Tied in a method at the end of __init__; the raw nn.Embedding scaled in encode / decode; checkpointed encoder."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
        super().__init__()
        self.d_model = d_model
        self.src_embed, self.tgt_embed = TokenEmbedding(src_vocab_size, d_model), TokenEmbedding(tgt_vocab_size, d_model)
        self.positional = PositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        self.encoder = EncoderCheckpointed(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.decoder = DecoderMasksOnce(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_weights:
            self._tie()

    def _tie(self):
        w = self.tgt_embed.embedding.weight
        self.generator.weight = w
        if self.src_embed.embedding.num_embeddings == w.size(0):
            self.src_embed.embedding.weight = w

    def encode(self, src, src_mask):
        return self.encoder(self.positional(self.src_embed.embedding(src) * math.sqrt(self.d_model)), src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        x = self.positional(self.tgt_embed.embedding(tgt_in) * math.sqrt(self.d_model))
        return self.decoder(x, memory, src_mask, tgt_mask)

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        return self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask))


class TransformerCopiesAndLogs(solutions.Transformer):
    """Works on its own copies of the inputs (changed in place), keeps the last logits detached for logging."""

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        t = tgt_in.clone()
        t[t < 0] = PAD
        h = self.decode(t, self.encode(src.clone(), src_mask.clone()), src_mask, tgt_mask)
        out = torch.matmul(h, self.generator.weight.T) + self.generator.bias
        self.last_logits = out.detach()
        return out


class TransformerNoGradInEval(solutions.Transformer):
    """Skips autograd in eval mode (an inference shortcut); gradients flow in train mode, where it is trained."""

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):
            return super().forward(src, tgt_in, src_mask, tgt_mask)


@pytest.mark.parametrize("cls", [TransformerSharedEmbeddingModule, TransformerFloat64Projection, TransformerOneHot,
                                 TransformerOwnInit, TransformerTiedLater, TransformerCopiesAndLogs,
                                 TransformerNoGradInEval])
def test_second_round_correct_transformers(cls):
    assert_full_marks(cls, "Transformer")


# ---------------------------------------------------------------- second review: more mistakes
def fwd_no_grad(self, src, tgt_in, src_mask, tgt_mask):
    with torch.no_grad():
        return solutions.Transformer.forward(self, src, tgt_in, src_mask, tgt_mask)


def fwd_memory_detached(self, src, tgt_in, src_mask, tgt_mask):
    memory = self.encode(src, src_mask).detach()
    return self.generator(self.decode(tgt_in, memory, src_mask, tgt_mask))


def fwd_eval(self, src, tgt_in, src_mask, tgt_mask):
    self.eval()
    return solutions.Transformer.forward(self, src, tgt_in, src_mask, tgt_mask)


def fwd_memory_cached(self, src, tgt_in, src_mask, tgt_mask):
    if getattr(self, "_memory", None) is None:
        self._memory = self.encode(src, src_mask)
    return self.generator(self.decode(tgt_in, self._memory, src_mask, tgt_mask))


def fwd_without_tgt_mask(self, src, tgt_in, src_mask, tgt_mask):
    return self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, None))


def fwd_padding_mask_as_tgt_mask(self, src, tgt_in, src_mask, tgt_mask):
    return self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, (tgt_in != PAD)[:, None, None, :]))


def enc_src_embed_no_grad(self, src, src_mask):
    with torch.no_grad():
        e = self.src_embed(src)
    return self.encoder(self.positional(e), src_mask)


def enc_mask_inverted(self, src, src_mask):
    return self.encoder(self.positional(self.src_embed(src)), ~src_mask)


def enc_positional_twice(self, src, src_mask):
    return self.encoder(self.positional(self.positional(self.src_embed(src))), src_mask)


def dec_memory_through_positional(self, tgt_in, memory, src_mask, tgt_mask):
    return self.decoder(self.positional(self.tgt_embed(tgt_in)), self.positional(memory), src_mask, tgt_mask)


SECOND_ROUND_MISTAKES = [
    ("forward under torch.no_grad()", variant(forward=fwd_no_grad), ["cut off from autograd"]),
    ("memory detached", variant(forward=fwd_memory_detached), ["no gradient reaches the encoder"]),
    ("source embedded under torch.no_grad()", variant(encode=enc_src_embed_no_grad),
     ["no gradient reaches the source embedding"]),
    ("self.eval() in forward", variant(forward=fwd_eval), ["switched to eval mode"]),
    ("memory kept from the first call", variant(forward=fwd_memory_cached), ["second batch", "earlier call"]),
    ("tgt_mask not passed to decode", variant(forward=fwd_without_tgt_mask), ["tgt_mask not passed on to decode"]),
    ("padding mask instead of tgt_mask", variant(forward=fwd_padding_mask_as_tgt_mask),
     ["without the causal part"]),
    ("src_mask inverted in encode", variant(encode=enc_mask_inverted), ["src_mask inverted"]),
    ("positional encoding twice", variant(encode=enc_positional_twice), ["positional encoding added twice"]),
    ("memory through the positional encoding", variant(decode=dec_memory_through_positional),
     ["memory changed on its way to the decoder"]),
]


@pytest.mark.parametrize("label,cls,keywords", SECOND_ROUND_MISTAKES, ids=[m[0] for m in SECOND_ROUND_MISTAKES])
def test_second_round_transformer_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "Transformer", *keywords)


# ---------------------------------------------------------------- masks passed on in an equivalent form
def enc_mask_expanded(self, src, src_mask):
    """The padding mask spelled out over the queries: (B, 1, Ls, Ls) says what (B, 1, 1, Ls) says."""
    L = src.size(1)
    return self.encoder(self.positional(self.src_embed(src)), src_mask.expand(-1, -1, L, L))


def dec_masks_expanded(self, tgt_in, memory, src_mask, tgt_mask):
    L = tgt_in.size(1)
    return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask.expand(-1, -1, L, -1),
                        tgt_mask.expand(-1, 1, L, L).contiguous())


def test_equivalent_masks_get_full_marks():
    """A mask broadcast out to its full size hides the same keys from the same queries: not a mistake."""
    assert_full_marks(variant(encode=enc_mask_expanded, decode=dec_masks_expanded), "Transformer")


def enc_mask_expanded_inverted(self, src, src_mask):
    L = src.size(1)
    return self.encoder(self.positional(self.src_embed(src)), ~src_mask.expand(-1, -1, L, L))


def test_expanded_but_inverted_mask_is_still_caught():
    assert_caught(variant(encode=enc_mask_expanded_inverted), "Transformer", "src_mask inverted")


# ---------------------------------------------------------------- third review
def fwd_tied_weight_detached(self, src, tgt_in, src_mask, tgt_mask):
    """The right logits through a detached copy of the tied weight: the gradient of the embedding path hid it."""
    h = self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)
    return F.linear(h, self.tgt_embed.embedding.weight.detach(), self.generator.bias)


def dec_embedding_detached(self, tgt_in, memory, src_mask, tgt_mask):
    """The generator's gradient on the tied weight hid that nothing flows back through the target embedding."""
    return self.decoder(self.positional(self.tgt_embed(tgt_in).detach()), memory, src_mask, tgt_mask)


def fwd_without_bias(self, src, tgt_in, src_mask, tgt_mask):
    return self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask) @ self.generator.weight.t()


THIRD_ROUND_FORWARD = [
    ("tied weight detached in forward", variant(forward=fwd_tied_weight_detached), ["weight.detach()", "rows of tokens"]),
    ("target embedding detached in decode", variant(decode=dec_embedding_detached),
     ["no gradient reaches the target embedding"]),
    ("generator's bias left out", variant(forward=fwd_without_bias), ["bias left out"]),
]


@pytest.mark.parametrize("label,cls,keywords", THIRD_ROUND_FORWARD, ids=[m[0] for m in THIRD_ROUND_FORWARD])
def test_third_round_forward_mistakes_are_named(label, cls, keywords):
    points, line = grade_one(cls, "Transformer", "forward returns unscaled logits")
    assert points == 0 and all(k.lower() in line.lower() for k in keywords), line


def enc_dropout_twice(self, src, src_mask):
    """PositionalEncoding already drops; a second dropout on top of it."""
    return self.encoder(self.positional.dropout(self.positional(self.src_embed(src))), src_mask)


def enc_dropout_before_positional(self, src, src_mask):
    x = self.src_embed(src)
    return self.encoder(self.positional.dropout(x) + self.positional.pe[: x.size(1)], src_mask)


@pytest.mark.parametrize("encode,keywords", [(enc_dropout_twice, ["dropout applied twice"]),
                                             (enc_dropout_before_positional, ["before the positional encoding"])],
                         ids=["twice", "before the positional encoding"])
def test_dropout_of_the_embeddings_is_applied_once_to_the_sum(encode, keywords):
    points, line = grade_one(variant(encode=encode), "Transformer", "has src_embed, tgt_embed")
    assert points == 0 and all(k in line for k in keywords), line


def generator_without_bias(self, V_src, V_tgt, d, args):
    """nn.Linear(d_model, V, bias=False), tied as usual (the GPT-2 / Hugging Face habit): lesson 10 gives the generator
    a bias, generator.bias (V_tgt,); two learner simulations found it earned full marks."""
    weight = self.generator.weight
    self.generator = nn.Linear(d, V_tgt, bias=False)
    self.generator.weight = weight


def test_a_generator_without_bias_is_caught():
    assert_caught(variant(after_init=generator_without_bias), "Transformer", "generator.bias", "bias=False")


def dec_with_src_embedding(self, tgt_in, memory, src_mask, tgt_mask):
    """A copy-paste slip: the target embedded with the source embedding (found by a learner simulation: one of its
    four failing checks blamed a detached decoder input)."""
    return self.decoder(self.positional(self.src_embed(tgt_in)), memory, src_mask, tgt_mask)


def test_the_source_embedding_in_decode_is_not_called_detached():
    points, text = grade(variant(decode=dec_with_src_embedding), "Transformer")
    assert points < max_points("Transformer"), text
    assert "detached in decode" not in text, text
    assert "source embedding used for the target" in text, text


# ---------------------------------------------------------------- issue 17: dropout the model adds of its own
# The model's dropout lives in self.positional and inside the layers. A dropout added elsewhere acts only in train mode
# (the checks in eval mode cannot see it); with dropout=0.5 and stand-ins for the stacks it zeroes half the entries.
class ModelDropsTheMemory(solutions.Transformer):
    def __init__(self, *args, dropout=0.1, **kwargs):
        super().__init__(*args, dropout=dropout, **kwargs)
        self.dropout = nn.Dropout(dropout)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        memory = self.dropout(memory)  # "regularize the encoder's output too"
        return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)


class ModelDropsTheEncoderOutput(solutions.Transformer):
    def __init__(self, *args, dropout=0.1, **kwargs):
        super().__init__(*args, dropout=dropout, **kwargs)
        self.p = dropout

    def encode(self, src, src_mask):
        return F.dropout(self.encoder(self.positional(self.src_embed(src)), src_mask), self.p, self.training)


class ModelDropsTheDecoderOutput(solutions.Transformer):
    def __init__(self, *args, dropout=0.1, **kwargs):
        super().__init__(*args, dropout=dropout, **kwargs)
        self.out_dropout = nn.Dropout(dropout)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        return self.out_dropout(super().decode(tgt_in, memory, src_mask, tgt_mask))


class ModelDropsTheMemoryInForward(solutions.Transformer):
    def __init__(self, *args, dropout=0.1, **kwargs):
        super().__init__(*args, dropout=dropout, **kwargs)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        memory = self.dropout(self.encode(src, src_mask))
        return self.generator(self.decode(tgt_in, memory, src_mask, tgt_mask))


class ModelDropsTheLogits(solutions.Transformer):
    def __init__(self, *args, dropout=0.1, **kwargs):
        super().__init__(*args, dropout=dropout, **kwargs)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        return self.dropout(self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)))


EXTRA_DROPOUT = ("the model's dropout is on the embeddings + PE (self.positional) and inside the layers (each sublayer's "
                 "output, the attention weights, the feed-forward's hidden units) only; add none of your own")


@pytest.mark.parametrize("cls,check,got,place", [
    (ModelDropsTheMemory, "decode feeds", "the memory the decoder was given; expected memory itself", "the memory"),
    (ModelDropsTheEncoderOutput, "encode feeds", "with an encoder that returns its input; expected the encoder's "
     "output as it is", "the encoder's output"),
    (ModelDropsTheDecoderOutput, "decode feeds", "with a decoder that returns its input; expected the decoder's "
     "output as it is", "the decoder's output"),
    (ModelDropsTheMemoryInForward, "forward returns", "the memory the decoder was given; expected the encoder's output "
     "as it is", "the memory (the encoder's output)"),
    (ModelDropsTheLogits, "forward returns", "with a decoder that returns its input; expected generator(the decoder's "
     "output)", "the decoder's output or the logits")])
def test_a_dropout_of_the_models_own_loses_one_point(cls, check, got, place):
    line = grade_one(cls, "Transformer", check)[1]
    assert line.startswith("✗") and got in line and "(a dropout of rate 0.5)" in line, line
    assert f"Likely: a dropout on {place}: {EXTRA_DROPOUT}" in line, line


@pytest.mark.parametrize("cls", [ModelDropsTheMemory, ModelDropsTheEncoderOutput, ModelDropsTheMemoryInForward])
def test_a_dropout_of_the_models_own_costs_one_point_only(cls):
    points, text = grade(cls, "Transformer")
    assert points == max_points("Transformer") - 1, text


# ---------------------------------------------------------------- issue 17: a second line of one name that contradicts
def test_an_embedding_never_used_is_not_told_as_detached():
    """The target embedding used for the source: the encode and comparison lines name it, and the forward check's
    gradient line used to add 'the encoder's input is detached', which the source embedding's weight, changed and
    changing nothing, refutes. It now says the part is never used; the points stay what they were, and a part that is
    used but detached is still told so (test_second_round_transformer_mistakes_are_caught)."""
    points, text = grade(variant(encode=enc_with_tgt_embedding), "Transformer")
    assert points == 4, text
    [line] = [line for line in text.splitlines() if line.startswith("✗ forward returns unscaled logits")]
    assert line.endswith("the gradient of a loss on the logits with respect to src_embed's parameters; expected a "
                         "gradient; got none. Likely: self.src_embed is never used: changing its parameters does not "
                         "change the logits (encode must embed src with self.src_embed)"), line
    assert "detached" not in text, text


def test_a_dropout_not_passed_on_is_not_told_as_a_detached_weight():
    """A dropout rate of its own (not the argument) makes train mode random at dropout=0.0: the first line says the
    argument is not passed on, and the forward check's tied-gradient line used to add 'nothing detached', its
    decoder states recomputed under another dropout mask. It now says what differs, two runs of decode, and the same
    cause; the points stay what they were."""
    [cls] = [c for label, c, _ in MISTAKES if label == "dropout not passed on"]
    points, text = grade(cls, "Transformer")
    assert points == 6, text
    [line] = [line for line in text.splitlines() if line.startswith("✗ forward returns unscaled logits")]
    assert line.endswith("decode(tgt_in, encode(src, src_mask), ...) twice; expected the same states (dropout=0.0: "
                         "train mode computes what eval mode does); got different states. Likely: the dropout argument "
                         "is not passed on to every part (the positional encoding, the encoder, the decoder): a "
                         "dropout of another rate acts in train mode"), line
    assert "detached" not in text, text
