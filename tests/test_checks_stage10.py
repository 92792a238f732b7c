"""Stage 10's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake of the whole model."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from solutions import PAD, Decoder, Encoder, PositionalEncoding, TokenEmbedding
from tests.grading import assert_caught, assert_full_marks, grade
from tests.test_checks_stage08 import EncoderClones
from tests.test_checks_stage09 import DecoderWhile


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
    """Its own embedding and positional modules, a generator without bias, tied the other way round
    (the embedding takes the generator's Parameter), keyword calls."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
        super().__init__()
        self.src_embed, self.tgt_embed = Embed(src_vocab_size, d_model), Embed(tgt_vocab_size, d_model)
        self.positional = LoopPositional(d_model, max_len, dropout)
        self.encoder = Encoder(d_model, n_heads, d_ff, n_layers, dropout=dropout, norm_first=norm_first)
        self.decoder = Decoder(d_model, n_heads, d_ff, n_layers, dropout=dropout, norm_first=norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)
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
        return states @ self.generator.weight.t()


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
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)
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
