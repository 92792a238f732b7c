"""Stage 10's checks (Transformer: embeddings, positional encoding, the stacks, the output projection): full
marks for correct code however written; for each classic mistake, exactly the points it earns and the words
that name it (the reference and the stub: tests/test_registry.py)."""
import functools
import inspect
import math  # noqa: F401 (these names are for the edits' code)

import pytest
import torch  # noqa: F401 (the edits' code uses it, and nn below)
import torch.nn.functional as F  # noqa: F401
from torch import nn  # noqa: F401

import solutions
from solutions import PAD, LayerNorm, PositionalEncoding, TokenEmbedding  # noqa: F401
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes
from tests.test_checks_stage08 import EncoderCheckpointed, EncoderChildren, EncoderClones, forward_under  # noqa: F401
from tests.test_checks_stage09 import DecoderChildren, DecoderMasksOnce, DecoderWhile  # noqa: F401

T = solutions.Transformer


def styled(reference, *changes, **bodies):
    """edit(reference, *changes) with the solution lines of its methods written anew where `bodies` give them
    (init= for __init__; indentation relative to the body); its code may use this file's names (math, F, the
    parts here)."""
    source = inspect.getsource(reference)
    for method, lines in bodies.items():
        region = source.split(f"def {'__init__' if method == 'init' else method}(")[1].split("### BEGIN "
                                                                                             "SOLUTION\n")[1]
        changes = (region.split("        ### END")[0],
                   "".join(f"        {line}\n" for line in lines)), *changes
    made = edit(reference, *changes)
    made.forward.__globals__.update({k: v for k, v in globals().items() if k not in made.forward.__globals__})
    return made


def _at(old, template="{}"):
    """A maker of edits of the reference: new -> the reference with `old` replaced by template.format(new)."""
    return lambda new: t_edit((old, template.format(new)))


def after_init(*lines):
    """The reference with lines run at the end of __init__ (after the initialization and the tying)."""
    return t_edit((TIE, TIE + "".join(f"        {line}\n" for line in lines)))


def embeds(new):
    """The changes that build both embeddings as `new`, a format of the side (src, tgt)."""
    return [(f"TokenEmbedding({s}_vocab_size, d_model, padding_idx=PAD)",
             new.format(s)) for s in ("src", "tgt")]


t_edit = functools.partial(styled, T)
# pieces of the reference's source that the edits change
SRC_EMB, TGT_EMB = "self.src_embed(src)", "self.tgt_embed(tgt_in)"
ENC_IN, DEC_IN = f"self.positional({SRC_EMB})", f"self.positional({TGT_EMB})"  # what goes into the stacks
SRC_MASK = "src_embed(src)), src_mask)"  # the mask encode passes on
DEC_MASKS = "memory, src_mask, tgt_mask)\n"  # what decode passes on with the decoder's input
MEMORY = "memory = self.encode(src, src_mask)"  # forward's first line
PE = "PositionalEncoding(d_model, max_len, dropout)"
DECODE = "self.decode(tgt_in, memory, src_mask, tgt_mask)"
# MASKS: how forward's signature ends
LOGITS, MASKS = f"self.generator({DECODE})", "tgt_in, src_mask, tgt_mask)"
TIE_GENERATOR = "self.generator.weight = self.tgt_embed.embedding.weight"
TIE = "self.src_embed.embedding.weight = self.tgt_embed.embedding.weight\n"  # the last line of __init__
NO_INIT = ("        self._reset_parameters(d_model)\n", "")  # PyTorch's default initialization
MODULE = ("(TransformerBase):", "(nn.Module):")  # not the course's base class
OPTIONAL_MASKS = [("src_mask: torch.Tensor)", "src_mask=None)"), (MASKS, "tgt_in, src_mask=None, "
                                                                         "tgt_mask=None)"),
                  ("memory: torch.Tensor, src_mask, tgt_mask)", "memory: torch.Tensor, src_mask=None, "
                                                                "tgt_mask=None)")]
# an argument overwritten: hard-coded or ignored
fixed = _at("super().__init__()", "super().__init__()\n        {}")
_PE = inspect.getsource(PositionalEncoding)
# removed from forward
LENGTH_CHECK = (_PE[_PE.index("        if x.size(1) >"):_PE.rindex("        ### BEGIN")], "")

# ---------------------------------------------------------------- correct, written differently
# an embedding without padding_idx, its scale computed once
Embed = styled(TokenEmbedding, ("self.d_model = d_model", "self.scale = d_model ** 0.5"),
               ("padding_idx=padding_idx)", ")"), ("math.sqrt(self.d_model)", "self.scale"))
# one_hot(ids) @ weight instead of a lookup
OneHotEmbedding = styled(TokenEmbedding, forward=(
    "one_hot = F.one_hot(ids, self.embedding.num_embeddings).to(self.embedding.weight.dtype)",
    "return one_hot @ self.embedding.weight * self.d_model ** 0.5"))
# the table filled by two loops with math.sin / math.cos; no dropout module, F.dropout instead
LoopPositional = styled(PositionalEncoding, init=(
    "table = torch.zeros(max_len, d_model)", "for pos in range(max_len):", "    for i in range(0, d_model, "
                                                                           "2):",
    "        table[pos, i] = math.sin(pos / 10000 ** (i / d_model))",
    "        table[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))", "self.register_buffer('pe', table)",
    "self.p = dropout"), forward=("return F.dropout(x + self.pe[: x.size(1)], self.p, self.training)",))
# no table kept: computed at each call with exp/log in float64; its own ValueError past max_len
OnTheFlyPositional = styled(PositionalEncoding, LENGTH_CHECK, init=(
    "self.d, self.max_len, self.drop = d_model, max_len, nn.Dropout(dropout)",), forward=(
    "L = x.shape[1]", "if L > self.max_len:", "    raise ValueError(f'length {L} > max_len {self.max_len}')",
    "pos = torch.arange(L, dtype=torch.float64).unsqueeze(1)",
    "freq = torch.exp(torch.arange(0, self.d, 2, dtype=torch.float64) * (-math.log(10000.0) / self.d))",
    "table = torch.stack([torch.sin(pos * freq), torch.cos(pos * freq)], -1).flatten(1)",
    "return self.drop(x + table.to(x.dtype))"))
# the table computed with numpy, kept as a (1, max_len, d) buffer; F.dropout
NumpyPositional = styled(PositionalEncoding, LENGTH_CHECK, init=(
    "import numpy as np",
    "angle = np.arange(max_len)[:, None] / np.power(10000.0, np.arange(0, d_model, 2)[None, :] / d_model)",
    "table = np.zeros((max_len, d_model))", "table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)",
    "self.register_buffer('pe', torch.from_numpy(table).float()[None])", "self.p = dropout"), forward=(
    "if x.size(1) > self.pe.size(1):", "    raise ValueError(f'length {x.size(1)} > max_len "
                                       "{self.pe.size(1)}')",
    "return F.dropout(x + self.pe[:, : x.size(1)], self.p, self.training)"))
UncheckedPositionalEncoding = styled(PositionalEncoding, LENGTH_CHECK)  # a longer input fails on the sum
CORRECT = {
    # its own embedding and positional modules, tied the other way round (the embedding takes the generator's
    # Parameter), keyword calls, the logits written out with the generator's weight and bias
    "own parts": t_edit(
        *embeds("Embed({}_vocab_size, d_model)"), (PE, "LoopPositional(d_model, max_len, dropout)"), NO_INIT,
        *[(f"dropout, norm_first)\n        self.{nxt}", "dropout=dropout, norm_first=norm_first)\n        "
                                                        f"self.{nxt}")
          for nxt in ("decoder", "generator")],
        (TIE_GENERATOR, "self.tgt_embed.embedding.weight = self.generator.weight"),
        (TIE, "self.src_embed.embedding.weight = self.generator.weight\n"),
        (f"self.encoder({ENC_IN}, src_mask)", f"self.encoder(x={ENC_IN}, src_mask=src_mask)"),
        (f"({DEC_IN}, {DEC_MASKS}", f"(x={DEC_IN}, memory=memory, src_mask=src_mask, tgt_mask=tgt_mask)\n"),
        (LOGITS, f"{DECODE} @ self.generator.weight.t() + self.generator.bias")),
    # the stacks of lessons 08 and 09 written otherwise, the logits through einsum
    "other stacks": t_edit(("Encoder(", "EncoderClones("), ("Decoder(", "DecoderWhile("), NO_INIT, (
        LOGITS, f"torch.einsum('bld,vd->blv', {DECODE}, self.generator.weight) + self.generator.bias")),
    # one-hot embeddings, a numpy table, the stacks written with named children
    "one-hot": t_edit(*embeds("OneHotEmbedding({}_vocab_size, d_model)"),
                      ("PositionalEncoding(", "NumpyPositional("),
                      ("Encoder(", "EncoderChildren("), ("Decoder(", "DecoderChildren("), NO_INIT),
    # one fresh nn.Parameter given to the generator and the embeddings; the positional encoding computed on
    # the fly; an extra constructor argument; masks optional
    "one shared Parameter": t_edit(
        MODULE, NO_INIT, *OPTIONAL_MASKS, *embeds("Embed({}_vocab_size, d_model)"),
        (PE, "OnTheFlyPositional(d_model, max_len, dropout)"),
                                   ("bool = True)", "bool = True, activation='relu')"),
        (TIE_GENERATOR, "shared = nn.Parameter(torch.randn(tgt_vocab_size, d_model) * d_model ** -0.5)\n"
                        "            self.generator.weight = self.tgt_embed.embedding.weight = shared"),
        (TIE, "self.src_embed.embedding.weight = shared\n")),
    # equal vocabularies: src_embed IS the tgt_embed module; F.linear with the generator's weight; an extra
    # keyword-only argument in forward
    "one embedding module": t_edit(
        MODULE, NO_INIT, (TIE, "self.src_embed = self.tgt_embed\n"),
        (MASKS, "tgt_in, src_mask, tgt_mask, *, return_memory=False)"), forward=(
            MEMORY, f"out = F.linear({DECODE}, self.generator.weight, self.generator.bias)",
            "return (out, memory) if return_memory else out")),
    # tied in a method at the end of __init__; the raw nn.Embedding scaled in encode / decode; checkpointed
    # encoder
    "tied later": t_edit(
        MODULE, *embeds("TokenEmbedding({}_vocab_size, d_model)"), ("Encoder(", "EncoderCheckpointed("),
        ("Decoder(", "DecoderMasksOnce("), (NO_INIT[0], "        self.d_model = d_model\n"),
        (f"{TIE_GENERATOR}  # one tensor, (V_tgt, d_model)", "self._tie()"),
        ("            if src_vocab_size == tgt_vocab_size:\n                " + TIE, ""), (
            "    def encode(", "    def _tie(self):\n        w = self.tgt_embed.embedding.weight\n"
            "        self.generator.weight = w\n        if self.src_embed.embedding.num_embeddings == "
            "w.size(0):\n            self.src_embed.embedding.weight = w\n\n    def encode("),
        (SRC_EMB, "self.src_embed.embedding(src) * math.sqrt(self.d_model)"),
        (TGT_EMB, "self.tgt_embed.embedding(tgt_in) * math.sqrt(self.d_model)")),
    # the projection in float64, cast back; masks built when not given
    "float64 projection": t_edit(OPTIONAL_MASKS[1], forward=(
        "if src_mask is None:", "    src_mask = (src != PAD)[:, None, None, :]", "if tgt_mask is None:",
        "    L = tgt_in.size(1)",
        "    tgt_mask = torch.ones(L, L, dtype=torch.bool).tril() & (tgt_in != PAD)[:, None, None, :]",
        "h = self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)", "g = self.generator",
        "return F.linear(h.double(), g.weight.double(), g.bias.double()).to(h.dtype)")),
    # works on its own copies of the inputs (changed in place), keeps the last logits detached for logging
    "copies and logs": t_edit(forward=(
        "t = tgt_in.clone()", "t[t < 0] = PAD",
        "h = self.decode(t, self.encode(src.clone(), src_mask.clone()), src_mask, tgt_mask)",
        "out = torch.matmul(h, self.generator.weight.T) + self.generator.bias",
                                       "self.last_logits = out.detach()",
        "return out")),
    # skips autograd in eval mode (an inference shortcut); gradients flow in train mode, where it is trained
    "no grad in eval": t_edit(forward_under(
        T, "with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):")),
    "dropout after the positional encoding, not in it": t_edit(
        (PE, "PositionalEncoding(d_model, max_len, 0.0)\n        self.drop = nn.Dropout(dropout)"),
        (ENC_IN, f"self.drop({ENC_IN})"), (DEC_IN, f"self.drop({DEC_IN})")),
    "a positional encoding that does not check the length": t_edit((PE, f"Unchecked{PE}")),
    "own init after tying, stacks called by keyword": t_edit(
        (TIE, TIE + "        for name, p in self.named_parameters():  # xavier for every matrix, zero "
                    "biases\n            if p.dim() > 1:\n                nn.init.xavier_uniform_(p)\n       "
                    "     elif name.endswith('bias'):\n                nn.init.zeros_(p)\n"),
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


# ---------------------------------------------------------------- classic mistakes
def own_dropout(init, *where):
    """The reference with a dropout of its own: `init` run at the end of __init__, `where` the place it
    acts."""
    return t_edit((TIE, f"{TIE}        {init}\n"), *where)


_pe, _src_emb, _enc_in, _src_mask = _at(PE), _at(SRC_EMB), _at(ENC_IN), _at(SRC_MASK, "src_embed(src)), {})")
_dec_masks, _memory, _decode = _at(DEC_MASKS, "{})\n"), _at(MEMORY), _at(DECODE, "self.decode({})")
_logits = _at(LOGITS)
# The model's dropout lives in self.positional and inside the layers. One added elsewhere acts only in train
# mode (the checks in eval mode cannot see it); with dropout=0.5 and stand-ins for the stacks it zeroes half
# the entries.
EXTRA_DROPOUT = ("the model's dropout is on the embeddings + PE (self.positional) and inside the layers "
                 "(each sublayer's output, the attention weights, the feed-forward's hidden units) only; add "
                 "none of your own")
DROP, RATE, NEW_PARAMETER = "self.dropout = nn.Dropout(dropout)", "(a dropout of rate 0.5)", ("separate "
                                                                                              "Parameters")
DROPS_MEMORY = own_dropout(DROP, (DEC_MASKS, "self.dropout(memory), src_mask, tgt_mask)\n"))
DROPS_ENCODER_OUTPUT = own_dropout("self.p = dropout", (
    f"self.encoder({ENC_IN}, src_mask)", f"F.dropout(self.encoder({ENC_IN}, src_mask), self.p, "
                                         "self.training)"))
DROPS_MEMORY_IN_FORWARD = own_dropout(DROP, (MEMORY, "memory = self.dropout(self.encode(src, src_mask))"))
MISTAKES = [
    # issue 40: was told only "n_layers layers in an nn.ModuleList"
    Mistake("n_heads and n_layers swapped", t_edit(("Encoder(d_model, n_heads, d_ff, n_layers,",
                                                    "Encoder(d_model, n_layers, d_ff, n_heads,"),
                                                   ("Decoder(d_model, n_heads, d_ff, n_layers,",
                                                    "Decoder(d_model, n_layers, d_ff, n_heads,")), 5,
            "Likely: the Encoder has n_heads (4) layers: n_heads and n_layers swapped",
            not_says="Likely: n_layers layers in an nn.ModuleList"),
    # ---- the parts and their arguments
    Mistake("n_layers hard-coded to 2", fixed("n_layers = 2"), 7, "3 layers"),
    Mistake("norm_first ignored", fixed("norm_first = False"), 7, "norm_first passed on"),
    Mistake("dropout 0 everywhere", fixed("dropout = 0.0"), 7, "not passed on to the encoder"),
    # the tied-gradient line runs decode twice: states that differ at dropout=0.0 are not told as "nothing
    # detached"
    Mistake("dropout not passed on", _pe("PositionalEncoding(d_model, max_len)"), 6, (
        "dropout argument is not passed", "decode(tgt_in, encode(src, src_mask), ...) twice; expected the "
                                          "same states "
        "(dropout=0.0: train mode computes what eval mode does); got different states. Likely: the dropout "
        "argument is not passed on to every part (the positional encoding, the encoder, the decoder): a "
        "dropout of another rate acts in train mode"), not_says="detached"),
    Mistake("max_len not passed on", _pe("PositionalEncoding(d_model, dropout=dropout)"), 7,
            "max_len not passed"),
    Mistake("no dropout after the positional encoding", _pe("PositionalEncoding(d_model, max_len, 0.0)"), 7,
            "no dropout after the positional encoding"),
    Mistake("final norm in the post-norm encoder", after_init("self.encoder.norm = LayerNorm(d_model)"), 7,
            "final norm present"),
    Mistake("log_softmax inside the generator", after_init(
        "self.generator = nn.Sequential(self.generator, nn.LogSoftmax(dim=-1))"), 2,
            "no softmax or log_softmax"),
    # the GPT-2 / Hugging Face habit, tied as usual: lesson 10 gives the generator a bias, generator.bias
    # (V_tgt,); two learner simulations found it earned full marks
    Mistake("generator without bias", after_init(
        "weight = self.generator.weight", "self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)",
        "self.generator.weight = weight"), 7, ("generator.bias", "bias=False")),
    # ---- tying the weights
    Mistake("weights not tied", after_init(
        "self.generator = nn.Linear(d_model, tgt_vocab_size)",
        "self.src_embed.embedding = nn.Embedding(src_vocab_size, d_model)",
        "self.tgt_embed.embedding = nn.Embedding(tgt_vocab_size, d_model)"), 6, "weights not tied"),
    Mistake("tie_weights ignored", t_edit(("if tie_weights:", "if True:")), 6, "tie_weights ignored"),
    Mistake("source embedding not tied", after_init("self.src_embed.embedding = nn.Embedding(src_vocab_size, "
                                                    "d_model)"),
            7, "source embedding not tied"),
    Mistake("generator tied to the source embedding", after_init(
        "self.src_embed.embedding = nn.Embedding(src_vocab_size, d_model)",
        "self.generator.weight = self.src_embed.embedding.weight"), 2, "tied to the source embedding"),
    Mistake("tied through .data", after_init(
        "self.generator.weight = nn.Parameter(torch.empty(tgt_vocab_size, d_model))",
        "self.generator.weight.data = self.tgt_embed.embedding.weight.data"), 6, NEW_PARAMETER),
    Mistake("tied through a new Parameter (same storage)", after_init(
        "self.generator.weight = nn.Parameter(self.tgt_embed.embedding.weight)"), 6, NEW_PARAMETER),
    # ---- encode and decode
    Mistake("embeddings not scaled (encode)", _src_emb("self.src_embed.embedding(src)"), 5,
            "not scaled by sqrt(d_model)"),
    Mistake("embeddings not scaled (decode)", t_edit((TGT_EMB, "self.tgt_embed.embedding(tgt_in)")), 5,
            "not scaled by sqrt(d_model)"),
    Mistake("embeddings scaled twice", _src_emb(f"{SRC_EMB} * math.sqrt(self.src_embed.d_model)"), 5,
            "scaled twice"),
    Mistake("embeddings scaled by sqrt(512)", _src_emb("self.src_embed.embedding(src) * math.sqrt(512)"), 5,
            "hard-coded d_model"),
    Mistake("positional encoding scaled too", _enc_in(
        "self.positional(self.src_embed.embedding(src)) * math.sqrt(self.src_embed.d_model)"), 5,
            "positional encoding scaled"),
    Mistake("positional encoding twice", _enc_in(f"self.positional({ENC_IN})"), 4,
            "positional encoding added twice"),
    Mistake("no positional encoding on the decoder input", t_edit((DEC_IN, TGT_EMB)), 4,
            "positional encoding not applied to the decoder input"),
    # src_embed then never used: the gradient line says so, not that the encoder's input is detached
    Mistake("target embedding for the source", _src_emb("self.tgt_embed(src)"), 4, (
        "target embedding used for the source", "the gradient of a loss on the logits with respect to "
                                                "src_embed's parameters; expected a gradient; got none. "
                                                "Likely: self.src_embed is never used: changing its "
                                                "parameters does not change the logits (encode must embed "
                                                "src with self.src_embed)"),
            not_says="detached"),
    # a copy-paste slip found by a learner simulation: one of its four failing checks blamed a detached
    # decoder input
    Mistake("source embedding for the target", t_edit((TGT_EMB, "self.src_embed(tgt_in)")), 4,
            "source embedding used for the target", not_says="detached in decode"),
    Mistake("source embedded under torch.no_grad()", t_edit(
        (f"return self.encoder({ENC_IN}", "with torch.no_grad():\n            e = self.src_embed(src)\n"
                                          "        return self.encoder(self.positional(e)")), 7,
            "no gradient reaches the source embedding"),
    Mistake("src_mask not passed to the encoder", _src_mask("None"), 5, "src_mask not passed on to the "
                                                                        "encoder"),
    Mistake("src_mask inverted in encode", _src_mask("~src_mask"), 5, "src_mask inverted"),
    Mistake("src_mask expanded but inverted",
            _src_mask("~src_mask.expand(-1, -1, src.size(1), src.size(1))"), 5,
            "src_mask inverted"),
    Mistake("decoder masks swapped", _dec_masks("memory, tgt_mask, src_mask"), 3, "wrong order"),
    Mistake("memory through the positional encoding",
            _dec_masks("self.positional(memory), src_mask, tgt_mask"), 5,
            "memory changed on its way to the decoder"),
    Mistake("generator inside decode", t_edit(("return self.decoder(", "return self.generator(self.decoder("),
                                              (DEC_MASKS, "memory, src_mask, tgt_mask))\n"),
                                              (LOGITS, DECODE)), 6,
            "inside decode"),
    # ---- forward and its logits
    Mistake("masks swapped in forward", _decode("tgt_in, memory, tgt_mask, src_mask"), 4,
            "lengths got mixed up"),
    Mistake("src_mask not passed to decode", _decode("tgt_in, memory, None, tgt_mask"), 5,
            "src_mask not passed on to decode"),
    Mistake("tgt_mask not passed to decode", _decode("tgt_in, memory, src_mask, None"), 5,
            "tgt_mask not passed on to decode"),
    Mistake("padding mask instead of tgt_mask", _decode("tgt_in, memory, src_mask, (tgt_in != PAD)[:, None, "
                                                        "None, :]"),
            5, "without the causal part"),
    Mistake("tgt_in changed in place", _memory(f"tgt_in[tgt_in == PAD] = 3\n        {MEMORY}"), 4,
            "changed in place"),
    Mistake("decoder states scaled before the generator", t_edit(
        (DECODE, f"{DECODE} * math.sqrt(self.tgt_embed.d_model)")), 5, "decoder states multiplied"),
    Mistake("logits multiplied by sqrt(d_model)", _logits(f"{LOGITS} * math.sqrt(self.src_embed.d_model)"), 5,
            "logits multiplied"),
    Mistake("logits divided by sqrt(d_model)", _logits(f"{LOGITS} * self.src_embed.d_model ** -0.5"), 5,
            "logits divided"),
    Mistake("log_softmax in forward", _logits(f"torch.log_softmax({LOGITS}, -1)"), 5, "log-probabilities"),
    Mistake("forward under torch.no_grad()", t_edit((MEMORY, f"with torch.no_grad():\n            {MEMORY}"),
                                                    (f"        return {LOGITS}",
                                                     f"            return {LOGITS}")), 7,
            "cut off from autograd"),
    Mistake("memory detached", _memory(f"{MEMORY}.detach()"), 7, "no gradient reaches the encoder"),
    Mistake("self.eval() in forward", _memory(f"self.eval()\n        {MEMORY}"), 7, "switched to eval mode"),
    Mistake("memory kept from the first call", _memory(
        "if getattr(self, '_memory', None) is None:\n            self._memory = self.encode(src, src_mask)\n"
        "        memory = self._memory"), 7, ("second batch", "earlier call")),
    # the check of the gradients of a loss on the logits:
    # the right logits through a detached copy of the tied weight: the gradient of the embedding path hid it
    Mistake("tied weight detached in forward", _logits(
        f"F.linear({DECODE}, self.tgt_embed.embedding.weight.detach(), self.generator.bias)"), 0,
            ("weight.detach()", "rows of tokens"), title="forward returns unscaled logits"),
    # the generator's gradient on the tied weight hid that nothing flows back through the target embedding
    Mistake("target embedding detached in decode", t_edit((TGT_EMB, f"{TGT_EMB}.detach()")), 0,
            "no gradient reaches the target embedding", title="forward returns unscaled logits"),
    Mistake("generator's bias left out", _logits(f"{DECODE} @ self.generator.weight.t()"), 0, "bias left out",
            title="forward returns unscaled logits"),
    # ---- dropout: once, on the sum, none of the model's own
    Mistake("dropout twice on the embeddings", _enc_in(f"self.positional.dropout({ENC_IN})"), 0,
            "dropout applied twice", title="has src_embed, tgt_embed"),
    Mistake("dropout before the positional encoding", _enc_in(
        "self.positional.dropout(self.src_embed(src)) + self.positional.pe[: src.size(1)]"), 0,
            "before the positional encoding", title="has src_embed, tgt_embed"),
    Mistake("dropout on the memory (decode)", DROPS_MEMORY, 0, (
        "the memory the decoder was given; expected memory itself", RATE,
        f"Likely: a dropout on the memory: {EXTRA_DROPOUT}"), title="decode feeds"),
    Mistake("dropout on the memory (decode): one point only", DROPS_MEMORY, 7, "a dropout on the memory"),
    Mistake("dropout on the encoder's output", DROPS_ENCODER_OUTPUT, 0, (
        "with an encoder that returns its input; expected the encoder's output as it is", RATE,
        f"Likely: a dropout on the encoder's output: {EXTRA_DROPOUT}"), title="encode feeds"),
    Mistake("dropout on the encoder's output: one point only", DROPS_ENCODER_OUTPUT, 7,
            "a dropout on the encoder's output"),
    Mistake("dropout on the decoder's output", own_dropout(
        "self.out_dropout = nn.Dropout(dropout)", ("return self.decoder(",
                                                   "return self.out_dropout(self.decoder("),
        (DEC_MASKS, "memory, src_mask, tgt_mask))\n")), 0, (
        "with a decoder that returns its input; expected the decoder's output as it is", RATE,
        f"Likely: a dropout on the decoder's output: {EXTRA_DROPOUT}"), title="decode feeds"),
    Mistake("dropout on the memory (forward)", DROPS_MEMORY_IN_FORWARD, 0, (
        "the memory the decoder was given; expected the encoder's output as it is", RATE,
        f"Likely: a dropout on the memory (the encoder's output): {EXTRA_DROPOUT}"), title="forward returns"),
    Mistake("dropout on the memory (forward): one point only", DROPS_MEMORY_IN_FORWARD, 7,
            "a dropout on the memory"),
    Mistake("dropout on the logits", own_dropout(DROP, (LOGITS, f"self.dropout({LOGITS})")), 0, (
        "with a decoder that returns its input; expected generator(the decoder's output)", RATE,
        f"Likely: a dropout on the decoder's output or the logits: {EXTRA_DROPOUT}"),
            title="forward returns"),
]


@pytest.mark.parametrize("m", mistakes("Transformer", MISTAKES))
def test_mistakes(m):
    assert_mistake(m)
