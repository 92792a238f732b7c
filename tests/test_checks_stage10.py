"""Stage 10's checks (Transformer: embeddings, positional encoding, the stacks, the output projection): full marks
for correct code however written; for each classic mistake, exactly the points it earns and the words that name it
(the reference and the stub: tests/test_registry.py)."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from solutions import PAD, Decoder, Encoder, PositionalEncoding, TokenEmbedding
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes
from tests.test_checks_stage08 import EncoderCheckpointed, EncoderChildren, EncoderClones
from tests.test_checks_stage09 import DecoderChildren, DecoderMasksOnce, DecoderWhile

T = solutions.Transformer


def t_edit(*changes, **names):
    """edit(solutions.Transformer, ...), its new code free to use math, F, LayerNorm and the `names` given."""
    cls = edit(T, *changes)
    cls.forward.__globals__.update(math=math, F=F, LayerNorm=solutions.LayerNorm, **names)
    return cls


# pieces of the reference's source that the edits change
SRC_EMB, TGT_EMB = "self.src_embed(src)", "self.tgt_embed(tgt_in)"
ENC_IN, DEC_IN = f"self.positional({SRC_EMB})", f"self.positional({TGT_EMB})"  # what goes into the stacks
SRC_MASK = "src_embed(src)), src_mask)"  # the mask encode passes on
DEC_MASKS = "memory, src_mask, tgt_mask)\n"  # what decode passes on with the decoder's input
PE = "PositionalEncoding(d_model, max_len, dropout)"
MEMORY = "memory = self.encode(src, src_mask)"  # forward's first line
DECODE = "self.decode(tgt_in, memory, src_mask, tgt_mask)"
LOGITS = f"self.generator({DECODE})"
TIE = "self.src_embed.embedding.weight = self.tgt_embed.embedding.weight\n"  # the last line of __init__
NO_INIT = ("        self._reset_parameters(d_model)\n", "")  # PyTorch's default initialization


def after_init(*lines):
    """The reference with lines run at the end of __init__ (after the initialization and the tying)."""
    return t_edit((TIE, TIE + "".join(f"        {line}\n" for line in lines)))


def fixed(line):
    """An argument overwritten at the start of __init__ (hard-coded or ignored)."""
    return t_edit(("super().__init__()", f"super().__init__()\n        {line}"))


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

    encode, decode = T.encode, T.decode

    def forward(self, src, tgt_in, src_mask, tgt_mask, *, return_memory=False):
        memory = self.encode(src, src_mask)
        out = F.linear(self.decode(tgt_in, memory, src_mask, tgt_mask), self.generator.weight, self.generator.bias)
        return (out, memory) if return_memory else out


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


class TransformerTiedLater(nn.Module):
    """Tied in a method at the end of __init__; the raw nn.Embedding scaled in encode / decode; checkpointed encoder."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False, tie_weights=True):
        super().__init__()
        self.d_model = d_model
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
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

    forward = T.forward


class UncheckedPositional(nn.Module):
    """A positional encoding that does not check the length itself: a longer input fails on the sum."""

    def __init__(self, d_model, max_len, dropout):
        super().__init__()
        self.register_buffer("table", solutions.sinusoidal_encoding(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.table[: x.size(1)])


class TransformerFloat64Projection(T):
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


class TransformerCopiesAndLogs(T):
    """Works on its own copies of the inputs (changed in place), keeps the last logits detached for logging."""

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        t = tgt_in.clone()
        t[t < 0] = PAD
        h = self.decode(t, self.encode(src.clone(), src_mask.clone()), src_mask, tgt_mask)
        out = torch.matmul(h, self.generator.weight.T) + self.generator.bias
        self.last_logits = out.detach()
        return out


class TransformerNoGradInEval(T):
    """Skips autograd in eval mode (an inference shortcut); gradients flow in train mode, where it is trained."""

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):
            return super().forward(src, tgt_in, src_mask, tgt_mask)


EMBEDS = [f"TokenEmbedding({side}_vocab_size, d_model, padding_idx=PAD)" for side in ("src", "tgt")]
CORRECT = {
    # its own embedding and positional modules, tied the other way round (the embedding takes the generator's
    # Parameter), keyword calls, the logits written out with the generator's weight and bias
    "own parts": t_edit(
        (EMBEDS[0], "Embed(src_vocab_size, d_model)"), (EMBEDS[1], "Embed(tgt_vocab_size, d_model)"),
        (PE, "LoopPositional(d_model, max_len, dropout)"),
        *[(f"dropout, norm_first)\n        self.{nxt}", f"dropout=dropout, norm_first=norm_first)\n        self.{nxt}")
          for nxt in ("decoder", "generator")],
        NO_INIT, ("self.generator.weight = self.tgt_embed.embedding.weight",
                  "self.tgt_embed.embedding.weight = self.generator.weight"),
        (TIE, "self.src_embed.embedding.weight = self.generator.weight\n"),
        (f"self.encoder({ENC_IN}, src_mask)", f"self.encoder(x={ENC_IN}, src_mask=src_mask)"),
        (f"({DEC_IN}, {DEC_MASKS}", f"(x={DEC_IN}, memory=memory, src_mask=src_mask, tgt_mask=tgt_mask)\n"),
        (LOGITS, f"{DECODE} @ self.generator.weight.t() + self.generator.bias"),
        Embed=Embed, LoopPositional=LoopPositional),
    # the stacks of lessons 08 and 09 written otherwise, the logits through einsum
    "other stacks": t_edit(
        ("Encoder(", "EncoderClones("), ("Decoder(", "DecoderWhile("), NO_INIT,
        (LOGITS, f"torch.einsum('bld,vd->blv', {DECODE}, self.generator.weight) + self.generator.bias"),
        EncoderClones=EncoderClones, DecoderWhile=DecoderWhile),
    # one-hot embeddings, a numpy table, the stacks written with named children
    "one-hot": t_edit(
        (EMBEDS[0], "OneHotEmbedding(src_vocab_size, d_model)"),
        (EMBEDS[1], "OneHotEmbedding(tgt_vocab_size, d_model)"),
        ("PositionalEncoding(", "NumpyPositional("), ("Encoder(", "EncoderChildren("), ("Decoder(", "DecoderChildren("),
        NO_INIT, OneHotEmbedding=OneHotEmbedding, NumpyPositional=NumpyPositional, EncoderChildren=EncoderChildren,
        DecoderChildren=DecoderChildren),
    "one shared Parameter": TransformerSharedParameter, "one embedding module": TransformerSharedEmbeddingModule,
    "tied later": TransformerTiedLater, "float64 projection": TransformerFloat64Projection,
    "copies and logs": TransformerCopiesAndLogs, "no grad in eval": TransformerNoGradInEval,
    "dropout after the positional encoding, not in it": t_edit(
        (PE, "PositionalEncoding(d_model, max_len, 0.0)\n        self.drop = nn.Dropout(dropout)"),
        (ENC_IN, f"self.drop({ENC_IN})"), (DEC_IN, f"self.drop({DEC_IN})")),
    "a positional encoding that does not check the length": t_edit(
        (PE, "UncheckedPositional(d_model, max_len, dropout)"), UncheckedPositional=UncheckedPositional),
    "own init after tying, stacks called by keyword": t_edit(
        (TIE, TIE + "        for name, p in self.named_parameters():  # xavier for every matrix, zero biases\n"
         "            if p.dim() > 1:\n                nn.init.xavier_uniform_(p)\n"
         "            elif name.endswith('bias'):\n                nn.init.zeros_(p)\n"),
        (SRC_MASK, "src_embed(src)), src_mask=src_mask)"),
        (DEC_MASKS, "memory=memory, src_mask=src_mask, tgt_mask=tgt_mask)\n")),
    # a mask broadcast out to its full size hides the same keys from the same queries: not a mistake
    "masks expanded to their full size": t_edit(
        (SRC_MASK, "src_embed(src)), src_mask.expand(-1, -1, src.size(1), src.size(1)))"),
        (DEC_MASKS, "memory, src_mask.expand(-1, -1, tgt_in.size(1), -1),\n                            "
                    "tgt_mask.expand(-1, 1, tgt_in.size(1), tgt_in.size(1)).contiguous())\n")),
}


@pytest.mark.parametrize("cls", CORRECT.values(), ids=list(CORRECT))
def test_correct_transformers_get_full_marks(cls):
    assert_full_marks(cls, "Transformer")


# ---------------------------------------------------------------- the parts and their arguments
PARTS = [
    Mistake("n_layers hard-coded to 2", fixed("n_layers = 2"), 7, "3 layers"),
    Mistake("norm_first ignored", fixed("norm_first = False"), 7, "norm_first passed on"),
    Mistake("dropout 0 everywhere", fixed("dropout = 0.0"), 7, "not passed on to the encoder"),
    # the tied-gradient line runs decode twice: states that differ at dropout=0.0 are not told as "nothing detached"
    Mistake("dropout not passed on", t_edit((PE, "PositionalEncoding(d_model, max_len)")), 6,
            ("dropout argument is not passed", "decode(tgt_in, encode(src, src_mask), ...) twice; expected the same "
             "states (dropout=0.0: train mode computes what eval mode does); got different states. Likely: the "
             "dropout argument is not passed on to every part (the positional encoding, the encoder, the decoder): a "
             "dropout of another rate acts in train mode"), not_says="detached"),
    Mistake("max_len not passed on", t_edit((PE, "PositionalEncoding(d_model, dropout=dropout)")), 7,
            "max_len not passed"),
    Mistake("no dropout after the positional encoding", t_edit((PE, "PositionalEncoding(d_model, max_len, 0.0)")), 7,
            "no dropout after the positional encoding"),
    Mistake("final norm in the post-norm encoder", after_init("self.encoder.norm = LayerNorm(d_model)"), 7,
            "final norm present"),
    Mistake("log_softmax inside the generator",
            after_init("self.generator = nn.Sequential(self.generator, nn.LogSoftmax(dim=-1))"), 2,
            "no softmax or log_softmax"),
    # the GPT-2 / Hugging Face habit, tied as usual: lesson 10 gives the generator a bias, generator.bias (V_tgt,);
    # two learner simulations found it earned full marks
    Mistake("generator without bias", after_init("weight = self.generator.weight",
                                                 "self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)",
                                                 "self.generator.weight = weight"), 7,
            ("generator.bias", "bias=False")),
]

# ---------------------------------------------------------------- tying the weights
TYING = [
    Mistake("weights not tied", after_init("self.generator = nn.Linear(d_model, tgt_vocab_size)",
                                           "self.src_embed.embedding = nn.Embedding(src_vocab_size, d_model)",
                                           "self.tgt_embed.embedding = nn.Embedding(tgt_vocab_size, d_model)"), 6,
            "weights not tied"),
    Mistake("tie_weights ignored", t_edit(("if tie_weights:", "if True:")), 6, "tie_weights ignored"),
    Mistake("source embedding not tied", after_init("self.src_embed.embedding = nn.Embedding(src_vocab_size, d_model)"),
            7, "source embedding not tied"),
    Mistake("generator tied to the source embedding",
            after_init("self.src_embed.embedding = nn.Embedding(src_vocab_size, d_model)",
                       "self.generator.weight = self.src_embed.embedding.weight"), 2, "tied to the source embedding"),
    Mistake("tied through .data",
            after_init("self.generator.weight = nn.Parameter(torch.empty(tgt_vocab_size, d_model))",
                       "self.generator.weight.data = self.tgt_embed.embedding.weight.data"), 6, "separate Parameters"),
    Mistake("tied through a new Parameter (same storage)",
            after_init("self.generator.weight = nn.Parameter(self.tgt_embed.embedding.weight)"), 6,
            "separate Parameters"),
]

# ---------------------------------------------------------------- encode and decode
ENCODE_DECODE = [
    Mistake("embeddings not scaled (encode)", t_edit((SRC_EMB, "self.src_embed.embedding(src)")), 5,
            "not scaled by sqrt(d_model)"),
    Mistake("embeddings not scaled (decode)", t_edit((TGT_EMB, "self.tgt_embed.embedding(tgt_in)")), 5,
            "not scaled by sqrt(d_model)"),
    Mistake("embeddings scaled twice", t_edit((SRC_EMB, f"{SRC_EMB} * math.sqrt(self.src_embed.d_model)")), 5,
            "scaled twice"),
    Mistake("embeddings scaled by sqrt(512)", t_edit((SRC_EMB, "self.src_embed.embedding(src) * math.sqrt(512)")), 5,
            "hard-coded d_model"),
    Mistake("positional encoding scaled too", t_edit(
        (ENC_IN, "self.positional(self.src_embed.embedding(src)) * math.sqrt(self.src_embed.d_model)")), 5,
            "positional encoding scaled"),
    Mistake("positional encoding twice", t_edit((ENC_IN, f"self.positional({ENC_IN})")), 4,
            "positional encoding added twice"),
    Mistake("no positional encoding on the decoder input", t_edit((DEC_IN, TGT_EMB)), 4,
            "positional encoding not applied to the decoder input"),
    # src_embed then never used: the gradient line says so, not that the encoder's input is detached
    Mistake("target embedding for the source", t_edit((SRC_EMB, "self.tgt_embed(src)")), 4,
            ("target embedding used for the source", "the gradient of a loss on the logits with respect to "
             "src_embed's parameters; expected a gradient; got none. Likely: self.src_embed is never used: changing "
             "its parameters does not change the logits (encode must embed src with self.src_embed)"),
            not_says="detached"),
    # a copy-paste slip found by a learner simulation: one of its four failing checks blamed a detached decoder input
    Mistake("source embedding for the target", t_edit((TGT_EMB, "self.src_embed(tgt_in)")), 4,
            "source embedding used for the target", not_says="detached in decode"),
    Mistake("source embedded under torch.no_grad()", t_edit(
        (f"return self.encoder({ENC_IN}", "with torch.no_grad():\n            e = self.src_embed(src)\n"
                                          "        return self.encoder(self.positional(e)")), 7,
            "no gradient reaches the source embedding"),
    Mistake("src_mask not passed to the encoder", t_edit((SRC_MASK, "src_embed(src)), None)")), 5,
            "src_mask not passed on to the encoder"),
    Mistake("src_mask inverted in encode", t_edit((SRC_MASK, "src_embed(src)), ~src_mask)")), 5, "src_mask inverted"),
    Mistake("src_mask expanded but inverted", t_edit(
        (SRC_MASK, "src_embed(src)), ~src_mask.expand(-1, -1, src.size(1), src.size(1)))")), 5, "src_mask inverted"),
    Mistake("decoder masks swapped", t_edit((DEC_MASKS, "memory, tgt_mask, src_mask)\n")), 3, "wrong order"),
    Mistake("memory through the positional encoding",
            t_edit((DEC_MASKS, "self.positional(memory), src_mask, tgt_mask)\n")), 5,
            "memory changed on its way to the decoder"),
    Mistake("generator inside decode", t_edit(("return self.decoder(", "return self.generator(self.decoder("),
                                              (DEC_MASKS, "memory, src_mask, tgt_mask))\n"), (LOGITS, DECODE)), 6,
            "inside decode"),
]

# ---------------------------------------------------------------- forward and its logits
FORWARD = [
    Mistake("masks swapped in forward", t_edit((DECODE, "self.decode(tgt_in, memory, tgt_mask, src_mask)")), 4,
            "lengths got mixed up"),
    Mistake("src_mask not passed to decode", t_edit((DECODE, "self.decode(tgt_in, memory, None, tgt_mask)")), 5,
            "src_mask not passed on to decode"),
    Mistake("tgt_mask not passed to decode", t_edit((DECODE, "self.decode(tgt_in, memory, src_mask, None)")), 5,
            "tgt_mask not passed on to decode"),
    Mistake("padding mask instead of tgt_mask",
            t_edit((DECODE, "self.decode(tgt_in, memory, src_mask, (tgt_in != PAD)[:, None, None, :])")), 5,
            "without the causal part"),
    Mistake("tgt_in changed in place", t_edit((MEMORY, f"tgt_in[tgt_in == PAD] = 3\n        {MEMORY}")), 4,
            "changed in place"),
    Mistake("decoder states scaled before the generator",
            t_edit((DECODE, f"{DECODE} * math.sqrt(self.tgt_embed.d_model)")), 5, "decoder states multiplied"),
    Mistake("logits multiplied by sqrt(d_model)", t_edit((LOGITS, f"{LOGITS} * math.sqrt(self.src_embed.d_model)")),
            5, "logits multiplied"),
    Mistake("logits divided by sqrt(d_model)", t_edit((LOGITS, f"{LOGITS} * self.src_embed.d_model ** -0.5")), 5,
            "logits divided"),
    Mistake("log_softmax in forward", t_edit((LOGITS, f"torch.log_softmax({LOGITS}, -1)")), 5, "log-probabilities"),
    Mistake("forward under torch.no_grad()", t_edit((MEMORY, f"with torch.no_grad():\n            {MEMORY}"),
                                                    (f"        return {LOGITS}", f"            return {LOGITS}")), 7,
            "cut off from autograd"),
    Mistake("memory detached", t_edit((MEMORY, f"{MEMORY}.detach()")), 7, "no gradient reaches the encoder"),
    Mistake("self.eval() in forward", t_edit((MEMORY, f"self.eval()\n        {MEMORY}")), 7, "switched to eval mode"),
    Mistake("memory kept from the first call", t_edit(
        (MEMORY, "if getattr(self, '_memory', None) is None:\n            self._memory = self.encode(src, src_mask)\n"
                 "        memory = self._memory")), 7, ("second batch", "earlier call")),
    # the check of the gradients of a loss on the logits:
    # the right logits through a detached copy of the tied weight: the gradient of the embedding path hid it
    Mistake("tied weight detached in forward", t_edit(
        (LOGITS, f"F.linear({DECODE}, self.tgt_embed.embedding.weight.detach(), self.generator.bias)")), 0,
            ("weight.detach()", "rows of tokens"), title="forward returns unscaled logits"),
    # the generator's gradient on the tied weight hid that nothing flows back through the target embedding
    Mistake("target embedding detached in decode", t_edit((TGT_EMB, f"{TGT_EMB}.detach()")), 0,
            "no gradient reaches the target embedding", title="forward returns unscaled logits"),
    Mistake("generator's bias left out", t_edit((LOGITS, f"{DECODE} @ self.generator.weight.t()")), 0,
            "bias left out", title="forward returns unscaled logits"),
]


# ---------------------------------------------------------------- dropout: once, on the sum, none of the model's own
def own_dropout(init, *where):
    """The reference with a dropout of its own: `init` run at the end of __init__, `where` the place it acts."""
    return t_edit((TIE, f"{TIE}        {init}\n"), *where)


# The model's dropout lives in self.positional and inside the layers. One added elsewhere acts only in train mode (the
# checks in eval mode cannot see it); with dropout=0.5 and stand-ins for the stacks it zeroes half the entries.
EXTRA_DROPOUT = ("the model's dropout is on the embeddings + PE (self.positional) and inside the layers (each "
                 "sublayer's output, the attention weights, the feed-forward's hidden units) only; add none of your "
                 "own")
DROP = "self.dropout = nn.Dropout(dropout)"
DROPS_MEMORY = own_dropout(DROP, (DEC_MASKS, "self.dropout(memory), src_mask, tgt_mask)\n"))
DROPS_ENCODER_OUTPUT = own_dropout("self.p = dropout", (
    f"self.encoder({ENC_IN}, src_mask)", f"F.dropout(self.encoder({ENC_IN}, src_mask), self.p, self.training)"))
DROPS_MEMORY_IN_FORWARD = own_dropout(DROP, (MEMORY, "memory = self.dropout(self.encode(src, src_mask))"))
DROPOUT = [
    Mistake("dropout twice on the embeddings", t_edit((ENC_IN, f"self.positional.dropout({ENC_IN})")), 0,
            "dropout applied twice", title="has src_embed, tgt_embed"),
    Mistake("dropout before the positional encoding", t_edit(
        (ENC_IN, "self.positional.dropout(self.src_embed(src)) + self.positional.pe[: src.size(1)]")), 0,
            "before the positional encoding", title="has src_embed, tgt_embed"),
    Mistake("dropout on the memory (decode)", DROPS_MEMORY, 0,
            ("the memory the decoder was given; expected memory itself", "(a dropout of rate 0.5)",
             f"Likely: a dropout on the memory: {EXTRA_DROPOUT}"), title="decode feeds"),
    Mistake("dropout on the memory (decode): one point only", DROPS_MEMORY, 7, "a dropout on the memory"),
    Mistake("dropout on the encoder's output", DROPS_ENCODER_OUTPUT, 0,
            ("with an encoder that returns its input; expected the encoder's output as it is",
             "(a dropout of rate 0.5)", f"Likely: a dropout on the encoder's output: {EXTRA_DROPOUT}"),
            title="encode feeds"),
    Mistake("dropout on the encoder's output: one point only", DROPS_ENCODER_OUTPUT, 7,
            "a dropout on the encoder's output"),
    Mistake("dropout on the decoder's output", own_dropout(
        "self.out_dropout = nn.Dropout(dropout)", ("return self.decoder(", "return self.out_dropout(self.decoder("),
        (DEC_MASKS, "memory, src_mask, tgt_mask))\n")), 0,
            ("with a decoder that returns its input; expected the decoder's output as it is", "(a dropout of rate 0.5)",
             f"Likely: a dropout on the decoder's output: {EXTRA_DROPOUT}"), title="decode feeds"),
    Mistake("dropout on the memory (forward)", DROPS_MEMORY_IN_FORWARD, 0,
            ("the memory the decoder was given; expected the encoder's output as it is", "(a dropout of rate 0.5)",
             f"Likely: a dropout on the memory (the encoder's output): {EXTRA_DROPOUT}"), title="forward returns"),
    Mistake("dropout on the memory (forward): one point only", DROPS_MEMORY_IN_FORWARD, 7, "a dropout on the memory"),
    Mistake("dropout on the logits", own_dropout(DROP, (LOGITS, f"self.dropout({LOGITS})")), 0,
            ("with a decoder that returns its input; expected generator(the decoder's output)",
             "(a dropout of rate 0.5)", f"Likely: a dropout on the decoder's output or the logits: {EXTRA_DROPOUT}"),
            title="forward returns"),
]


@pytest.mark.parametrize("m", mistakes("Transformer", PARTS))
def test_parts_mistakes(m):
    assert_mistake(m)


@pytest.mark.parametrize("m", mistakes("Transformer", TYING))
def test_tying_mistakes(m):
    assert_mistake(m)


@pytest.mark.parametrize("m", mistakes("Transformer", ENCODE_DECODE))
def test_encode_decode_mistakes(m):
    assert_mistake(m)


@pytest.mark.parametrize("m", mistakes("Transformer", FORWARD))
def test_forward_mistakes(m):
    assert_mistake(m)


@pytest.mark.parametrize("m", mistakes("Transformer", DROPOUT))
def test_dropout_mistakes(m):
    assert_mistake(m)
