"""Stage 09's checks: full marks for correct code however written; for each classic mistake of the decoder
layer and stack, exactly the points it earns and the words that name it (the reference and the stub:
tests/test_registry.py). Stage 10 builds its correct styles on the decoders defined here."""
import copy  # noqa: F401 (the styles' code uses these names)
import functools
import inspect
import math  # noqa: F401 (the styles' code uses it, and nn below)

import pytest
import torch
import torch.utils.checkpoint  # noqa: F401
from torch import nn  # noqa: F401

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade_one, mistakes
from tests.test_checks_stage08 import (  # noqa: F401
    AdditiveAttention,
    EinsumAttention,
    FeedForward,
    Float64Attention,
    InPlaceConnection,
    Residual,
    SDPAAttention,
    SequentialFeedForward,
    VarMeanLayerNorm,
    forward_first,
    forward_under,
    init_also,
    new_forward,
)

LAYER, DECODER = solutions.DecoderLayer, solutions.Decoder
_SELF, _CROSS = "self.self_attn(y, y, y, tgt_mask)", "self.cross_attn(y, memory, memory, src_mask)"
_S, _C, _FF = f"lambda y: {_SELF}", f"lambda y: {_CROSS}", "self.feed_forward"
_CROSS_INIT = "self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)"
_CONNECTIONS = "nn.ModuleList([SublayerConnection(d_model, dropout, norm_first) for _ in range(3)])"
_EACH, _NORM, _FINAL = ("x = layer(x, memory, src_mask, tgt_mask)", "return self.norm(x)",
                        "LayerNorm(d_model) if")
_LAYER_ARGS = "(d_model, n_heads, d_ff, dropout, norm_first)"
_LAYER, _SEQUENTIAL = f"DecoderLayer{_LAYER_ARGS}", "nn.Sequential(*[{}" + _LAYER_ARGS + (" for _ in "
                                                                                          "range(n_layers)])")
_LAYERS = f"nn.ModuleList([{_LAYER}\n                                     for _ in range(n_layers)])"
# how __init__'s and forward's signatures end
_ARGS, _MASKS = "norm_first: bool = False)", "src_mask, tgt_mask):"


def styled(reference, *changes, init=(), forward=()):
    """A correct style as the reference changed: __init__'s and forward's solution lines written anew where
    `init` / `forward` give them, then edit(reference, *changes); its code may use this file's names (parts,
    layers above)."""
    regions = inspect.getsource(reference).split("### BEGIN SOLUTION\n")[1:]
    anew = [(region.split("        ### END")[0], "".join(f"        {line}\n" for line in lines))
            for region, lines in zip(regions, (init, forward)) if lines]
    made = edit(reference, *anew, *changes)
    made.forward.__globals__.update({k: v for k, v in globals().items() if k not in made.forward.__globals__})
    return made


def parts(attention, feed_forward="PositionwiseFeedForward", connection="SublayerConnection"):
    """The changes that build the reference layer of other modules (same arguments)."""
    return [("self.self_attn = MultiHeadAttention", f"self.self_attn = {attention}"),
            ("self.cross_attn = MultiHeadAttention", f"self.cross_attn = {attention}"),
            ("PositionwiseFeedForward(", f"{feed_forward}("), ("[SublayerConnection(", f"[{connection}(")]


# ---------------------------------------------------------------- correct, written differently
# the contract's w_q, w_k, w_v, w_o; one head at a time in a Python loop, the mask added as -1e9 scores
PerHeadAttention = styled(solutions.MultiHeadAttention, forward=(
    "q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)", "heads = []", "for i in range(self.h):",
    "    part = slice(i * self.d_k, (i + 1) * self.d_k)",
    "    scores = q[..., part] @ k[..., part].transpose(-1, -2) / math.sqrt(self.d_k)",
                                                                 "    if mask is not None:",
    "        scores = scores + torch.zeros_like(scores).masked_fill(~mask[:, 0].bool(), -1e9)",
    "    heads.append(self.dropout(scores.softmax(-1)) @ v[..., part])", "return self.w_o(torch.cat(heads, "
                                                                         "-1))"))
# the reference's forward in float64 on non-contiguous views, returns float32
DecoderLayerFloat64Views = styled(LAYER, forward=(
    "self.double()", "try:", "    out = LAYER.forward(self, x.double().transpose(0, 1).transpose(0, 1),",
    "                        memory.double().permute(1, 0, 2).permute(1, 0, 2), src_mask, tgt_mask)",
    "finally:", "    self.float()", "return out.to(x.dtype)"))
# einsum attention, nn.LayerNorm, the residual sums written out; a mask of None is no mask
DecoderLayerExplicit = styled(
    LAYER, *parts("EinsumAttention", "FeedForward", "Residual"), ("dropout, norm_first) for", "dropout) for"),
    init_also("self.norm_first = norm_first"), forward=("def res(i, x, f):", "    sub = self.sublayers[i]",
        "    return x + sub.dropout(f(sub.norm(x))) if self.norm_first else sub.norm(x + sub.dropout(f(x)))",
        f"x = res(0, x, {_S})", f"x = res(1, x, {_C})", "return res(2, x, self.feed_forward)"))
# the course's parts, keyword arguments, the memory's mask made boolean again (harmless)
DecoderLayerSolutionsParts = styled(LAYER, (_MASKS, "src_mask=None, tgt_mask=None):"), forward=(
    "m = None if src_mask is None else src_mask.bool()",
    "steps = [lambda q: self.self_attn(query=q, key=q, value=q, mask=tgt_mask),",
    "         lambda q: self.cross_attn(query=q, key=memory, value=memory, mask=m), self.feed_forward]",
    "for sub, step in zip(self.sublayers, steps):", "    x = sub(x, step)", "return x"))
# per-head attention, sublayers in an nn.Sequential holding only norms, separate dropout modules, an extra
# constructor argument and **kwargs in forward
DecoderLayerPerHead = styled(
    LAYER, *parts("PerHeadAttention", "FeedForward"), (_ARGS, "norm_first=False, activation='relu')"),
    (_MASKS, "src_mask=None, tgt_mask=None, **unused):"),
    (_CONNECTIONS, "nn.Sequential(*[nn.ModuleDict({'norm': nn.LayerNorm(d_model)}) for _ in range(3)])\n"
                   "        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(3))\n"
                   "        self.norm_first = norm_first"), forward=(
        f"steps = ({_S}, {_C}, self.feed_forward)", "for sub, drop, f in zip(self.sublayers, self.drops, "
                                                    "steps):",
        "    x = x + drop(f(sub.norm(x))) if self.norm_first else sub.norm(x + drop(f(x)))", "return x"))
# F.scaled_dot_product_attention, its own in-place connections, keyword-only extras
DecoderLayerSDPA = styled(
    LAYER, *parts("SDPAAttention", "SequentialFeedForward", "InPlaceConnection"),
    (_ARGS, "norm_first=False, *, eps=1e-5)"), (_MASKS, "src_mask=None, tgt_mask=None, *, cache=None):"))
DecoderLayerFloat64 = styled(LAYER, *parts("Float64Attention"))
# ANDs tgt_mask with a causal mask of its own (redundant, correct); additive masks built under no_grad
DecoderLayerOwnCausalToo = styled(LAYER, *parts("AdditiveAttention"), forward=(
    "def additive(m):", "    with torch.no_grad():",
    "        return None if m is None else torch.zeros(m.shape).masked_fill(~m, -1e9)", "L = x.size(1)",
    "causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device))",
    "tm = causal if tgt_mask is None else tgt_mask & causal",
    "x = self.sublayers[0](x, lambda t: self.self_attn(t, t, t, additive(tm)))",
    "x = self.sublayers[1](x, lambda t: self.cross_attn(t, memory, memory, additive(src_mask)))",
    "return self.sublayers[2](x, self.feed_forward)"))
# one sentence at a time; the memory cut to its real tokens (then no source mask is needed)
DecoderLayerPerSentence = styled(LAYER, forward=(
    "outs = []", "for b in range(x.size(0)):", "    xb, mb = x[b:b + 1], memory[b:b + 1]",
    "    sm = None if src_mask is None else src_mask[b if src_mask.size(0) > 1 else 0][None]",
    "    tm = None if tgt_mask is None else tgt_mask[b if tgt_mask.size(0) > 1 else 0][None]",
    "    if sm is not None:", "        mb, sm = mb[:, sm.reshape(-1).nonzero().flatten()], None",
    "    h = self.sublayers[0](xb, lambda t: self.self_attn(t, t, t, tm))",
    "    h = self.sublayers[1](h, lambda t: self.cross_attn(t, mb, mb, sm))",
    "    outs.append(self.sublayers[2](h, self.feed_forward))", "return torch.cat(outs, 0)"))
# keyword calls everywhere, functools.partial sublayers, connections in an nn.Sequential, **kwargs
DecoderLayerKeywords = styled(LAYER, (_ARGS, "norm_first: bool = False, **kwargs)"), init=(
    "self.self_attn = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)",
    "self.cross_attn = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)",
    "self.feed_forward = PositionwiseFeedForward(d_model=d_model, d_ff=d_ff, dropout=dropout)",
    "self.sublayers = nn.Sequential(*(SublayerConnection(d_model, dropout=dropout, norm_first=norm_first)",
    "                                 for _ in range(3)))"), forward=(
    "sa = functools.partial(lambda t, m: self.self_attn(query=t, key=t, value=t, mask=m), m=tgt_mask)",
    "ca = functools.partial(lambda t, mem, m: self.cross_attn(query=t, key=mem, value=mem, mask=m),",
    "                       mem=memory, m=src_mask)",
    "x = self.sublayers[0](x=x, sublayer=sa)", "x = self.sublayers[1](x=x, sublayer=ca)",
    "return self.sublayers[2](x=x, sublayer=self.feed_forward)"))
# works on a clone of x, pre-norm sums added in place on that clone; its own dropout module
DecoderLayerOwnClone = styled(
    LAYER, init_also("self.norm_first, self.drop = norm_first, nn.Dropout(dropout)"), forward=(
        "h = x.clone()", f"steps = [{_S}, {_C}, self.feed_forward]", "for sub, f in zip(self.sublayers, "
                                                                     "steps):",
        "    if self.norm_first:", "        h += self.drop(f(sub.norm(h)))", "    else:",
        "        h = sub.norm(h + self.drop(f(h)))", "return h"))
# a while loop, the layers appended one by one, the masks passed by keyword
DecoderWhile = styled(DECODER, init=(
    "self.layers = nn.ModuleList()", "for _ in range(n_layers):",
    f"    self.layers.append(DecoderLayerSolutionsParts{_LAYER_ARGS})",
    "self.norm = LayerNorm(d_model) if norm_first else nn.Identity()"), forward=(
    "i = 0", "while i < len(self.layers):", "    x = self.layers[i](x, memory, src_mask=src_mask, "
                                            "tgt_mask=tgt_mask)",
    "    i += 1", "return self.norm(x)"))
# children() of a list of SDPA layers, a var_mean norm, extra arguments
DecoderChildren = styled(DECODER, ("DecoderLayer(", "DecoderLayerSDPA("), (_FINAL, f"VarMean{_FINAL}"),
                         (_ARGS, "norm_first=False, *, tie=False)"),
                         ("in self.layers:", "in self.layers.children():"),
                         (_MASKS, "src_mask=None, tgt_mask=None, **kwargs):"))
# the causal mask combined with tgt_mask once, src_mask expanded to (B, 1, Lt, Ls) once
DecoderMasksOnce = styled(DECODER, ("DecoderLayer(", "DecoderLayerKeywords("), forward=(
    "L = x.size(1)", "tm = torch.ones(L, L, dtype=torch.bool).tril() & (True if tgt_mask is None else "
                     "tgt_mask)",
    "sm = None if src_mask is None else src_mask.expand(x.size(0), 1, L, memory.size(1))",
    "for layer in self.layers:", "    x = layer(x, memory, sm, tm)", "return self.norm(x)"))
CORRECT_LAYERS = {
    "explicit": DecoderLayerExplicit, "the course's parts, keywords": DecoderLayerSolutionsParts,
    "one head at a time": DecoderLayerPerHead, "float64 on non-contiguous views": DecoderLayerFloat64Views,
    "SDPA, in-place connections": DecoderLayerSDPA, "float64 attention": DecoderLayerFloat64,
    "its own causal mask too": DecoderLayerOwnCausalToo, "one sentence at a time": DecoderLayerPerSentence,
    "functools.partial, keyword calls": DecoderLayerKeywords, "on its own clone of x": DecoderLayerOwnClone}
CORRECT_DECODERS = {
    "deep copies of one layer": styled(DECODER, init_also(f"layer = DecoderLayerExplicit{_LAYER_ARGS}"),
                                       (_LAYERS, "nn.ModuleList(copy.deepcopy(layer) for _ in "
                                                 "range(n_layers))"),
                                       (_FINAL, f"nn.{_FINAL}")),
    "a while loop": DecoderWhile,
    "functools.reduce": styled(  # `norm` None in post-norm
        DECODER, ("DecoderLayer(",
                  "DecoderLayerPerHead("), (_FINAL, f"nn.{_FINAL}"), ("nn.Identity()", "None"),
        forward=("x = functools.reduce(lambda h, layer: layer(h, memory, src_mask, tgt_mask), self.layers, "
                 "x)",
                 "return x if self.norm is None else self.norm(x)")),
    # the layers in an nn.Sequential, applied by a recursive helper; an extra keyword argument in forward
    "recursive": styled(DECODER, (_LAYERS, _SEQUENTIAL.format("DecoderLayerSolutionsParts")),
                        (_MASKS, "src_mask=None, tgt_mask=None, keep_states=False):"), forward=(
        "def through(i, x):", "    if i == len(self.layers):", "        return x",
        "    return through(i + 1, self.layers[i](x, memory, src_mask, "
        "tgt_mask))", "return self.norm(through(0, x))")),
    "checkpointed": styled(DECODER, (_EACH, "x = torch.utils.checkpoint.checkpoint(layer, x, memory, "
                                            "src_mask, tgt_mask, use_reentrant=True)")),
    "children()": DecoderChildren,
    "one sentence at a time": styled(DECODER, ("DecoderLayer(", "DecoderLayerPerSentence("),
                                     ("nn.Identity()", "None"),
                                     (_NORM, "return x if self.norm is None else self.norm(x)")),
    "the masks combined once": DecoderMasksOnce,
    "float64 layers": styled(DECODER, (_LAYERS, _SEQUENTIAL.format("DecoderLayerFloat64")),
                             (_EACH, "x = layer(x, memory, src_mask=src_mask, tgt_mask=tgt_mask)")),
    # a harmless cache: causal masks by length, ANDed with the tgt_mask of each call
    "causal masks cached": styled(DECODER, init_also("self._causal = {}"), forward_first(
        DECODER, "L = x.size(1)", "if L not in self._causal:",
        "    self._causal[L] = torch.ones(L, L, dtype=torch.bool).tril()", "tgt_mask = tgt_mask & "
                                                                           "self._causal[L]")),
    # skips autograd in eval mode (an inference shortcut); gradients flow in train mode, where it is trained
    "no autograd in eval mode": styled(DECODER, forward_under(
        DECODER, "with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):"))}


@pytest.mark.parametrize("contract, cls", [pytest.param(c, cls, id=f"{c}: {name}") for c, styles in (
    ("DecoderLayer", CORRECT_LAYERS), ("Decoder", CORRECT_DECODERS)) for name, cls in styles.items()])
def test_other_correct_decoder_layers_and_decoders(contract, cls):
    assert_full_marks(cls, contract)


def test_dropout_not_passed_on_is_not_blamed_on_detach():
    """Cross-attention without the dropout argument (0.1 where 0.0 was asked): the dropout check alone
    names it."""
    cls = edit(LAYER, (_CROSS_INIT, "self.cross_attn = MultiHeadAttention(d_model, n_heads)"))
    points, line = grade_one(cls, "DecoderLayer", "post-norm")
    assert points == 1, line


# ---------------------------------------------------------------- classic mistakes
def _calls(reference, old, template="{}"):
    """A maker of mistakes: new -> the reference with `old` replaced by template.format(new)."""
    return lambda new: edit(reference, (old, template.format(new)))


def _maker(change, reference=LAYER):
    """A maker of mistakes: (*lines) -> the reference edited by change(reference, *lines) (new_forward,
    ...)."""
    return lambda *lines: edit(reference, change(reference, *lines))


def _sublayers(*steps):
    """The layer whose forward runs sublayers[i] on steps[i] (None: not at all), in this order."""
    calls = [f"self.sublayers[{i}](x, {step})" for i, step in enumerate(steps) if step]
    return _forward(*(f"x = {call}" for call in calls[:-1]), f"return {calls[-1]}")


_layer, _decoder = functools.partial(edit, LAYER), functools.partial(edit, DECODER)
_self, _cross = _calls(LAYER, _SELF, "self.self_attn({})"), _calls(LAYER, _CROSS, "self.cross_attn({})")
_each, _final = _calls(DECODER, _EACH, "x = layer({})"), _calls(DECODER, f"{_FINAL} norm_first else "
                                                                         "nn.Identity()")
_layers = _calls(DECODER, _LAYERS)
_forward, _first, _stack_first = _maker(new_forward), _maker(forward_first), _maker(forward_first, DECODER)
_NO_GRAD, _ENUMERATED = "with torch.no_grad():", ("for layer in self.layers",
                                                  "for i, layer in enumerate(self.layers)")
_OWN_CAUSAL = "own = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()"  # not the target's padding
_GOT_DROPPED = ".train(): the key given to {}; expected the memory itself; got the memory with"
_MEMORY_DROPPED = ("(a dropout of rate 0.5). Likely: a dropout on the memory: the encoder's output is "
                   "dropped nowhere in the decoder; dropout belongs on each sublayer's output, the attention "
                   "weights and the feed-forward's hidden units only. Pass memory to cross-attention as it "
                   "is")
# a (B, 1, Lt, Lt) target mask, causal and padded, is not symmetric: its transpose shows, and is not told as
# missing
_TRANSPOSED = ("Likely: tgt_mask transposed on its way to self-attention (its query and key axes swapped): "
               "each position sees itself and the LATER tokens; a (B, 1, Lt, Lt) mask goes to the attention "
               "as it is")
_KEPT = ("Likely: the same module gave a wrong answer on a second batch: something from an earlier call is "
         "kept (a mask or a tensor saved on self and reused?); use the arguments of each call")
_own_causal = _layer(forward_first(LAYER, _OWN_CAUSAL), (_SELF, "self.self_attn(y, y, y, own)"))
_transposed = _first("tgt_mask = tgt_mask.transpose(-2, -1)")  # "(B, 1, keys, queries)"
_kept = _layer(init_also("self.tm = None"), forward_first(LAYER, "self.tm = tgt_mask if self.tm is None else "
                                                                 "self.tm"),
               (_SELF, "self.self_attn(y, y, y, self.tm)"))
_BUILT = ("Likely: tgt_mask ignored: a causal mask built inside the layer hides later tokens but not the "
          "target's padding; pass tgt_mask itself to self-attention")
DECODER_LAYER_MISTAKES = [
    # told only the formula before (issue 40)
    Mistake("self-attention through the cross-attention module",
            _layer((_SELF, "self.cross_attn(y, y, y, tgt_mask)")),
            3, ("self-attention run through the cross-attention module",
                "self.self_attn(x, x, x, tgt_mask)")),
    Mistake("the two attention modules swapped", _layer((_SELF, "self.cross_attn(y, y, y, tgt_mask)"),
                                                        (_CROSS, "self.self_attn(y, memory, memory, "
                                                                 "src_mask)")),
            3, "Likely: the two attention modules swapped", not_says="Likely: self-attention(x, x, x, "
                                                                     "tgt_mask), then"),
    # which attention, on what
    Mistake("cross-attention queries from the memory", _cross("memory, y, y, src_mask"), 0,
            "lengths got mixed up"),
    Mistake("cross-attention keys and values from the decoder", _cross("y, y, y, src_mask"), 0,
            "keys and values taken from the decoder"),
    Mistake("cross-attention on the decoder, no mask", _cross("y, y, y, None"), 2,
            "keys and values taken from the decoder"),
    Mistake("self_attn used for cross-attention", _layer((_CROSS, "self.self_attn(y, memory, memory, "
                                                                  "src_mask)")), 3,
            "computed with self_attn"),
    Mistake("one attention module for both", _layer((_CROSS_INIT, "self.cross_attn = self.self_attn")), 2,
            "self_attn and cross_attn are one module"),
    # x rebound after each step: right in post-norm, the raw sum in pre-norm
    Mistake("pre-norm lambdas read x", _layer(
        (_SELF, "self.self_attn(x, x, x, tgt_mask)"), (_CROSS, "self.cross_attn(x, memory, memory, "
                                                               "src_mask)")), 6,
            "lambdas use x instead of their argument"),
    # the sublayers: order, connections
    Mistake("cross-attention before self-attention", _sublayers(_C, _S, _FF), 3, "sublayer order wrong"),
    Mistake("feed-forward before cross-attention", _sublayers(_S, _FF, _C), 3,
            "feed-forward ran before cross-attention"),
    Mistake("cross-attention sublayer missing", _sublayers(_S, None, _FF), 3,
            "cross-attention sublayer is missing"),
    Mistake("sublayers[0] used for cross-attention",
            _layer(("x = self.sublayers[1]", "x = self.sublayers[0]")), 3,
            "sublayers[0] used for cross-attention"),
    Mistake("one sublayer object repeated", _layer(
        (_CONNECTIONS,
         "nn.ModuleList([SublayerConnection(d_model, dropout, norm_first)] * 3)")), 2, "repeated"),
    Mistake("norm_first ignored", _layer(("dropout, norm_first) for", "dropout) for")), 6,
            "norm_first ignored"),
    Mistake("always pre-norm", _layer(("dropout, norm_first) for", "dropout, True) for")), 4,
            "pre-norm computed where post-norm"),
    Mistake("residual missing", _forward(f"for sub, f in zip(self.sublayers, ({_S}, {_C}, {_FF})):",
                                         "    x = sub.norm(f(x)) if not sub.norm_first else f(sub.norm(x))",
                                         "return x"), 3, "residual connection missing"),
    Mistake("residual added in place", _forward("x += self.self_attn(x, x, x, tgt_mask)  # the caller's x "
                                                "changes",
                                                "x = self.sublayers[0].norm(x)",
                                                f"x = self.sublayers[1](x, {_C})",
                                                f"return self.sublayers[2](x, {_FF})"), 0,
            "changed in place"),
    # the masks
    Mistake("no causal mask in self-attention", _self("y, y, y, None"), 2, ("tgt_mask not passed", "causal")),
    Mistake("cross-attention without src_mask", _cross("y, memory, memory, None"), 3,
            "without the source padding mask"),
    Mistake("tgt_mask in cross-attention", _cross("y, memory, memory, tgt_mask"), 0, "lengths got mixed up"),
    Mistake("masks swapped", edit(_self("y, y, y, src_mask"), (_CROSS, "self.cross_attn(y, memory, memory, "
                                                                       "tgt_mask)")),
            0, ("lengths got mixed up", "src_mask")),
    Mistake("tgt_mask inverted", _self("y, y, y, ~tgt_mask"), 2, "tgt_mask inverted"),
    Mistake("src_mask == 0 in cross-attention", _cross("y, memory, memory, src_mask == 0"), 3,
            "src_mask inverted"),
    # a causal mask built here shows only where the target has padding in the middle: the comparison with
    # PyTorch names it, and the src_mask check's second batch (with such a hole) gives a new layer's answer,
    # the same cause
    Mistake("own causal mask, tgt_mask ignored", _own_causal, 5, ("tgt_mask ignored", _BUILT),
            not_says="earlier call"),
    Mistake("own causal mask: the src_mask check", _own_causal, 0, _BUILT,
            title="src_mask hides the source padding",
            not_says="earlier call"),
    Mistake("tgt_mask transposed: post-norm", _transposed, 0, _TRANSPOSED, title="post-norm",
            not_says="without the causal mask"),
    Mistake("tgt_mask transposed: causal", _transposed, 0, _TRANSPOSED, title="self-attention is causal",
            not_says="without the causal mask"),
    Mistake("the first call's tgt_mask kept", _kept, 6, ("second batch", "earlier call")),
    # named when a new layer gets it
    Mistake("the first call's tgt_mask kept: the src_mask check", _kept, 0, _KEPT,
            title="src_mask hides the source padding"),
    Mistake("the caller's tgt_mask flipped in place",
            _first("tgt_mask.logical_not_()", "tgt_mask = ~tgt_mask"), 0,
            "tgt_mask after the call"),
    # autograd
    Mistake("forward under torch.no_grad()", _layer(forward_under(LAYER, _NO_GRAD)), 6,
            "cut off from autograd"),
    Mistake("memory detached", _first("memory = memory.detach()"), 6,
            ("gradient with respect to memory", "memory.detach()")),
    Mistake("cross-attention under torch.no_grad()", _layer(
        forward_first(LAYER, "def cross(y):", f"    {_NO_GRAD}", f"        return {_CROSS}"), (_C, "cross")),
            6,
            "gradient with respect to x"),
    # the dropout argument
    Mistake("dropout argument ignored", _layer(init_also("dropout = 0.1")), 6, "dropout argument is ignored"),
    Mistake("n_heads hard-coded as 8", _layer(*((f"{a} = MultiHeadAttention(d_model, n_heads, dropout)",
                                                 f"{a} = MultiHeadAttention(d_model, 8, dropout)")
                                                for a in ("self.self_attn", "self.cross_attn"))), 3,
            "n_heads not passed on to MultiHeadAttention: 8 heads computed where 4 were asked"),
    # p = 1 drops the whole sublayer output in the connection, hiding a part that drops nothing itself
    Mistake("cross-attention built with dropout 0.0",
            _layer((_CROSS_INIT, _CROSS_INIT.replace("dropout)", "0.0)"))), 6,
            ("`cross_attn` ignores the dropout argument", "attention weights are never dropped")),
    Mistake("self-attention built with dropout 0.0", _layer((
        "self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)",
        "self.self_attn = MultiHeadAttention(d_model, n_heads, 0.0)")), 6, "`self_attn` ignores the dropout "
                                                                           "argument"),
    Mistake("feed-forward built with dropout 0.0",
            _layer(("(d_model, d_ff, dropout)", "(d_model, d_ff, 0.0)")), 6,
            ("`feed_forward` ignores the dropout argument", "hidden units are never dropped")),
    Mistake("a second dropout on cross_attn's output", _layer(  # which the sublayer connection drops again
        init_also("self.drop = nn.Dropout(dropout)"), (_CROSS, f"self.drop({_CROSS})")), 0,
            "second dropout on the cross_attn sublayer", title="uses the dropout argument"),
    # eval mode cannot see a dropout on the memory; in train mode with dropout=0.5, cross-attention's keys and
    # values are the memory with half its entries zeroed and the others doubled
    Mistake("a dropout on the memory", _layer(init_also("self.dropout = nn.Dropout(dropout)"), forward_first(
        LAYER, "memory = self.dropout(memory)")), 6, (_GOT_DROPPED.format("cross_attn"), _MEMORY_DROPPED)),
    Mistake("a dropout on the memory, in the lambda",
            _layer(forward_first(LAYER, "drop = self.sublayers[1].dropout"), (
        _CROSS, "self.cross_attn(y, drop(memory), drop(memory), src_mask)")), 6,
            (_GOT_DROPPED.format("cross_attn"), _MEMORY_DROPPED)),
    Mistake("forward not implemented", _forward("raise NotImplementedError()"), 0, "not implemented yet"),
]
_own_causal_stack = _decoder(forward_first(DECODER, _OWN_CAUSAL), (_EACH, "x = layer(x, memory, src_mask, "
                                                                          "own)"))
_NOT_PASSED_ON = ("Likely: tgt_mask not passed on: the layers were given a causal mask built here, which "
                  "hides later tokens but not the target's padding; pass tgt_mask itself")
DECODER_MISTAKES = [
    # the layers
    Mistake("one layer repeated n times", _layers(f"nn.ModuleList([{_LAYER}] * n_layers)"), 1,
            ("repeated", "deepcopy")),
    Mistake("layers in a Python list", _layers(f"[{_LAYER} for _ in range(n_layers)]"), 4,
            "plain Python list"),
    Mistake("norm_first not passed to the layers", _decoder(("dropout, norm_first)\n", "dropout)\n")), 4,
            "norm_first not passed"),
    # the final norm
    Mistake("final norm in post-norm", _final("LayerNorm(d_model)"), 2,
            "final norm present in the post-norm"),
    Mistake("final norm missing in pre-norm", _final("nn.Identity()"), 3, "final norm missing"),
    Mistake("final norm without weight and bias", _final("nn.LayerNorm(d_model, elementwise_affine=False) if "
                                                         "norm_first else nn.Identity()"), 3,
            ("without its weight and bias (elementwise_affine=False)", "decoder's final norm has no weight "
                                                                       "and bias"),
            not_says="final norm missing"),
    Mistake("final norm built but not applied", _decoder((_NORM, "return x")), 4, "final norm missing"),
    # the loop
    Mistake("each layer applied to the input", _decoder(("for layer", "out = x\n        for layer"),
                                                        (_EACH, "out = layer(x, memory, src_mask, tgt_mask)"),
                                                        (_NORM, "return self.norm(out)")), 2,
            "stack's input"),
    Mistake("layers in reverse order", _decoder(("in self.layers:", "in self.layers[::-1]:")), 2,
            "reverse order"),
    Mistake("dropout on the stack's input",
            _decoder(init_also("self.drop = nn.Dropout(dropout)"), forward_first(
        DECODER, "x = self.drop(x)")), 4, "dropout applied to the decoder's input"),
    Mistake("forward under torch.no_grad()", _decoder(forward_under(DECODER, _NO_GRAD)), 4,
            "cut off from autograd"),
    Mistake("memory detached", _stack_first("memory = memory.detach()"), 4,
            "gradient with respect to memory"),
    Mistake("a dropout on the memory",
            _decoder(init_also("self.dropout = nn.Dropout(dropout)"), forward_first(
        DECODER, "memory = self.dropout(memory)")), 4,
            (_GOT_DROPPED.format("layers[0].cross_attn"), _MEMORY_DROPPED)),
    # the masks
    Mistake("tgt_mask not passed", _each("x, memory, src_mask, None"), 2, "tgt_mask not passed"),
    Mistake("src_mask not passed", _each("x, memory, None, tgt_mask"), 2, "src_mask not passed"),
    Mistake("no masks passed", _each("x, memory, None, None"), 2, "mask is not passed"),
    Mistake("masks swapped in the layer call", _each("x, memory, tgt_mask, src_mask"), 1,
            "lengths got mixed up"),
    Mistake("tgt_mask inverted before the layers", _each("x, memory, src_mask, ~tgt_mask"), 2,
            "tgt_mask inverted"),
    Mistake("tgt_mask to the first layer only", _decoder(
        _ENUMERATED, (_EACH, "x = layer(x, memory, src_mask, tgt_mask if i == 0 else None)")), 0,
            "tgt_mask passed to the first layer only", title="post-norm stack"),
    Mistake("src_mask to the first layer only", _decoder(
        _ENUMERATED, (_EACH, "x = layer(x, memory, src_mask if i == 0 else None, tgt_mask)")), 0,
            "src_mask passed to the first layer only", title="post-norm stack"),
    Mistake("own causal mask passed to the layers", _own_causal_stack, 3,
            ("tgt_mask not passed on", _NOT_PASSED_ON),
            not_says="earlier call"),
    Mistake("own causal mask: the masks check", _own_causal_stack, 0, _NOT_PASSED_ON,
            title="masks reach every layer",
            not_says="earlier call"),
    Mistake("tgt_mask transposed: post-norm", _stack_first("tgt_mask = tgt_mask.transpose(2, 3)"), 0,
            _TRANSPOSED,
            title="post-norm stack", not_says="without the causal mask"),
    Mistake("tgt_mask transposed: pre-norm", _stack_first("tgt_mask = tgt_mask.transpose(2, 3)"), 0,
            _TRANSPOSED,
            title="pre-norm stack", not_says="without the causal mask"),
    # the dropout argument
    Mistake("dropout fixed at 0.1", _decoder(init_also("dropout = 0.1")), 4, "dropout argument is ignored"),
    Mistake("dropout fixed at 0", _decoder(init_also("dropout = 0.0")), 4, "dropout argument is not used"),
]


@pytest.mark.parametrize("m", [pytest.param(*p.values, id=f"{contract}: {p.id}") for contract, table in (
    ("DecoderLayer",
     DECODER_LAYER_MISTAKES), ("Decoder", DECODER_MISTAKES)) for p in mistakes(contract, table)])
def test_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- a mistake paid once, across names
WRONG_LAYERS = {  # a typo in DecoderLayer: one that raises in the stack, one that gives other numbers
    "cross-attention on x (an error)": (("self.cross_attn(y, memory, memory, src_mask)",
                                         "self.cross_attn(y, y, y, src_mask)"), "fails on its own"),
    "self-attention without tgt_mask (other numbers)": (("self.self_attn(y, y, y, tgt_mask)",
                                                         "self.self_attn(y, y, y, None)"),
                                                        "applies its own layers"),
}


@pytest.mark.parametrize("typo", WRONG_LAYERS)
def test_a_correct_decoder_beside_a_wrong_decoder_layer_keeps_its_points(typo):
    """A typo in DecoderLayer: DecoderLayer pays; the reference Decoder, built from that layer as a lesson
    builds it, keeps every point and is told to fix DecoderLayer."""
    from autograder import max_points
    from tests.grading import edit, grade, patient
    change, says = WRONG_LAYERS[typo]
    wrong_layer = edit(solutions.DecoderLayer, change)
    with patient():
        assert grade(wrong_layer, "DecoderLayer")[0] < max_points("DecoderLayer")
        decoder = edit(solutions.Decoder)
        decoder.forward.__globals__["DecoderLayer"] = wrong_layer
        points, text = grade(decoder, "Decoder")
    assert points == max_points("Decoder"), text
    assert "fix DecoderLayer" in text and says in text, text


def test_a_wrong_decoder_beside_a_wrong_decoder_layer_still_pays():
    """The stack is compared with its own layers applied in turn: a Decoder that skips its last layer is not
    excused by a wrong DecoderLayer."""
    from autograder import max_points
    from tests.grading import edit, grade, patient
    wrong_layer = edit(solutions.DecoderLayer,
                       WRONG_LAYERS["self-attention without tgt_mask (other numbers)"][0])
    decoder = edit(solutions.Decoder, ("for layer in self.layers:", "for layer in self.layers[:-1]:"))
    decoder.forward.__globals__["DecoderLayer"] = wrong_layer
    with patient():
        points, text = grade(decoder, "Decoder")
    assert points < max_points("Decoder") and "fix DecoderLayer" not in text, text


@pytest.mark.parametrize("typo", WRONG_LAYERS)
def test_a_correct_decoder_beside_a_wrong_decoder_layer_keeps_its_points_across_the_channel(typo):
    """As the grade command's checker grades it: the Decoder and its layers are proxies (type(layer) is the
    proxy's class), so the checker asks the kernel for the learner's DecoderLayer by its graded name, and the
    layers are its instances: the Decoder keeps every point and is told to fix DecoderLayer, as in check()."""
    from autograder import max_points
    from tests.grading import edit
    from tests.test_checks_stage05 import grade_across
    change, says = WRONG_LAYERS[typo]
    wrong_layer = edit(solutions.DecoderLayer, change)
    decoder = edit(solutions.Decoder)
    decoder.forward.__globals__["DecoderLayer"] = wrong_layer
    points, text = grade_across({"DecoderLayer": wrong_layer, "Decoder": decoder}, "Decoder")
    assert points == max_points("Decoder"), text
    assert "fix DecoderLayer" in text and says in text, text
