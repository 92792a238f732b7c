"""Stage 10's checks of Transformer: its parts, dropout where the paper puts it, the tied weights, what
reaches the stacks, post-norm and pre-norm against nn.Transformer, and the gradients."""
from __future__ import annotations

import torch
from torch import nn

from ..registry import CheckFailure, register
from ._util import close, expect_close, expect_shape, expect_still_training, seeded
from .stage08_encoder import FF, NO_GRAD, PAD, D, as_module, get_path, stack_layers
from .stage10_output_projection import (
    GENERATOR_LINEAR,
    V_SRC,
    V_TGT,
    N,
    _argument,
    _batch,
    _embedding_weight,
    _generator,
    _inputs,
    _logit_mistakes,
    _make,
    _not_passed,
    _Recorder,
    _same,
    _states_mistakes,
    _swapped_heads,
    _vs_torch,
    call,
)


@register("Transformer", "has src_embed, tgt_embed, positional, encoder, decoder, generator, built from its "
                         "arguments")
def _parts(Transformer):
    model, what = _make(Transformer, max_len=12)
    for side, V in (("src", V_SRC), ("tgt", V_TGT)):
        emb = get_path(model, f"{side}_embed.embedding", what)
        if not isinstance(emb, nn.Embedding):
            raise CheckFailure(f"{what}: {side}_embed.embedding", "an nn.Embedding", type(emb).__name__,
                               f"{side}_embed = TokenEmbedding({side}_vocab_size, d_model)")
        expect_shape(emb.weight, (V, D), f"{what}: {side}_embed.embedding.weight",
                     f"{side}_embed = TokenEmbedding({side}_vocab_size, d_model): one row per {side} token")
    as_module(get_path(model, "positional", what), f"{what}: positional")
    for stack in ("encoder", "decoder"):
        layers = stack_layers(get_path(model, stack, what), f"{what}.{stack}", N, _swapped_heads(stack))
        expect_shape(get_path(layers[0], "feed_forward.w_1.weight", f"{what}.{stack}.layers[0]"), (FF, D),
                     f"{what}: {stack}.layers[0].feed_forward.w_1.weight", "pass d_ff on to the stacks")
    gen = get_path(model, "generator", what)
    if not isinstance(gen, nn.Linear) or gen.in_features != D or gen.out_features != V_TGT:
        raise CheckFailure(f"{what}: `generator`", f"nn.Linear({D}, {V_TGT}) (d_model -> tgt_vocab_size)",
                           f"nn.Linear({gen.in_features}, {gen.out_features})" if isinstance(gen, nn.Linear)
                           else type(gen).__name__,
                           "the projection maps each decoder state to one score per TARGET token"
                           if isinstance(gen, nn.Linear) else GENERATOR_LINEAR)
    if gen.bias is None:
        raise CheckFailure(f"{what}: generator.bias", f"a bias of shape ({V_TGT},): logits = h W^T + b",
                           "None",
                           "nn.Linear(d_model, tgt_vocab_size, bias=False) drops b: keep nn.Linear's bias "
                           "(the default), the lesson's generator.bias; with tied weights it stays the "
                           "generator's own")
    deeper, what3 = _make(Transformer, n_layers=3)
    for stack in ("encoder", "decoder"):
        stack_layers(get_path(deeper, stack, what3), f"{what3}.{stack}", 3, _swapped_heads(stack, 3))
    src, tgt, sm, tm = _batch(1)
    model.eval()
    shape = (tgt.size(0), tgt.size(1), V_TGT)
    run = f"{what}(src, tgt_in, src_mask, tgt_mask)"
    expected = expect_shape(call(model, src, tgt, sm, tm, what=run), shape, run)
    model.train()
    with seeded(2):
        trained = expect_shape(call(model, src, tgt, sm, tm, what=run), shape, run)
    if not torch.allclose(trained, expected, atol=1e-5):
        raise CheckFailure(f"{what} in train mode", "the same logits as in eval mode (dropout=0.0)",
                           "different logits", "the dropout argument is not passed on to every part "
                                               "(the positional encoding, the encoder, the decoder)")
    _check_dropout_used(Transformer, src, tgt, sm, tm)
    long = torch.full((1, 13), 5)
    try:
        model.encode(long, long[:, None, None, :] != PAD)
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001  (its positional encoding refused the length: max_len was passed on)
        pass
    else:
        raise CheckFailure(f"{what}.encode of a source of length 13", "an error (a sequence longer than "
                                                                      "max_len)",
                           "no error", "max_len not passed on: PositionalEncoding(d_model, max_len, dropout) "
                                       "refuses longer sequences")


def _check_dropout_used(Transformer, src, tgt, sm, tm):
    """With dropout=0.5, train mode changes what the stacks are given (dropout after the positional encoding)
    and what each stack computes; a dropout argument replaced by 0 somewhere shows."""
    model, what = _make(Transformer, dropout=0.5, seed=8)
    model.train()
    with seeded(8):
        call(model, src, tgt, sm, tm, what=f"{what}.train()(src, tgt_in, src_mask, tgt_mask)")
    expect_still_training(model, what, "model")
    encoder, decoder = get_path(model, "encoder", what), get_path(model, "decoder", what)
    with seeded(8):
        memory = torch.randn(src.size(0), src.size(1), D)
        x = torch.randn(tgt.size(0), tgt.size(1), D)
    for name, stack, args in (("encoder", encoder, (memory, sm)), ("decoder", decoder, (x, memory, sm, tm))):
        outs = []
        for train in (False, True):
            stack.train(train)
            with seeded(9):
                outs.append(expect_shape(stack(*args), args[0].shape, f"{what}.{name}(...)"))
        if torch.allclose(outs[0], outs[1]):
            raise CheckFailure(f"{what}.{name} in train mode", "an output changed by dropout",
                               "the same output as in eval mode",
                               f"the dropout argument is not passed on to the {name} (a fixed 0 is used)")
    for name, fn, args in (("encode", "encode", (src, sm)), ("decode", "decode", (tgt, memory, sm, tm))):
        side = "encoder" if name == "encode" else "decoder"
        rec = _Recorder()
        setattr(model, side, rec)
        for train in (False, True):
            model.train(train)
            with seeded(10):
                getattr(model, fn)(*args)
        if len(rec.calls) < 2:
            raise CheckFailure(f"{what}.{name}", f"a call of self.{side}", "no call",
                               f"{name} runs the embeddings and the positional encoding through self.{side}")
        given = [c[0] for c in rec.calls[:2]]
        if all(isinstance(g, torch.Tensor) and g.shape == given[0].shape for g in given) and \
                torch.allclose(given[0], given[1]):
            raise CheckFailure(f"{what}.{name} in train mode: what the {side} was given",
                               "embedding * sqrt(d_model) + PE changed by dropout",
                               "the same as in eval mode",
                               "no dropout after the positional encoding: pass the dropout argument on to "
                               "PositionalEncoding(d_model, max_len, dropout) (paper, section 5.4)")
        _dropped_once(given[0], given[1], 0.5, f"{what}.{name} in train mode: what the {side} was given")


def _dropped_once(kept, dropped, p, what):
    """One dropout of rate p between `kept` (eval mode) and `dropped` (train mode): each value is either 0 or
    kept / (1 - p). A second dropout on the same tensor shows as values kept / (1 - p)^2."""
    if not (isinstance(dropped, torch.Tensor) and isinstance(kept, torch.Tensor) and
            dropped.shape == kept.shape):
        return
    kept, dropped = kept.detach().double(), dropped.detach().double()
    zero = dropped.abs() <= 1e-6
    once = (dropped - kept / (1 - p)).abs() <= 1e-4 * (1 + kept.abs())
    if bool((zero | once).all()):
        return
    twice = (dropped - kept / (1 - p) ** 2).abs() <= 1e-4 * (1 + kept.abs())
    if bool((zero | once | twice).all()):
        raise CheckFailure(what, f"each value 0 or {1 / (1 - p):g} x its eval-mode value (one dropout of "
                                 f"rate {p:g})",
                           f"values {1 / (1 - p) ** 2:g} x their eval-mode value",
                           "dropout applied twice after the positional encoding: PositionalEncoding already "
                           "ends with dropout(x + PE); add no dropout of your own on top of it")
    raise CheckFailure(what, f"each value 0 or {1 / (1 - p):g} x its eval-mode value: dropout(embedding * "
                             "sqrt(d_model) + PE), one dropout on the sum", "other values",
                       "dropout applied before the positional encoding is added (dropout(embedding) + PE) or "
                       "to part of the sum only: PositionalEncoding returns dropout(x + PE[:L])")


@register("Transformer", "tie_weights: generator, target and (same vocabulary size) source embeddings share "
                         "ONE weight")
def _tied_same(Transformer):
    model, what = _make(Transformer, V_src=20, V_tgt=20)
    _generator(model, what)
    gen = get_path(model, "generator.weight", what)
    tgt = _embedding_weight(model, "tgt", what)
    src = _embedding_weight(model, "src", what)
    if gen is not tgt:
        if isinstance(gen, torch.Tensor) and gen.data_ptr() == tgt.data_ptr():
            hint = ("the weights share their numbers but are separate Parameters (.data assigned?), so their "
                    "gradients are not shared: assign the Parameter itself, "
                    "self.generator.weight = self.tgt_embed.embedding.weight")
        elif gen is src:
            hint = "the generator is tied to the source embedding: it predicts TARGET tokens (tgt_embed)"
        else:
            hint = ("weights not tied: self.generator.weight = self.tgt_embed.embedding.weight (paper, "
                    "section 3.4)")
        raise CheckFailure(f"{what}: generator.weight is tgt_embed.embedding.weight",
                           "the same Parameter object",
                           "a different tensor", hint)
    if src is not tgt:
        raise CheckFailure(f"{what}: src_embed.embedding.weight is tgt_embed.embedding.weight",
                           "the same Parameter object (both vocabularies have 20 tokens)",
                           "a different tensor",
                           "source embedding not tied: with equal vocabulary sizes the source embedding "
                           "shares the weight too (self.src_embed.embedding.weight = "
                           "self.tgt_embed.embedding.weight)")
    n_params = sum(p.numel() for p in model.parameters())
    untied_model, _ = _make(Transformer, V_src=20, V_tgt=20, tie_weights=False)
    n_untied = sum(p.numel() for p in untied_model.parameters())
    if n_untied - n_params != 2 * 20 * D:
        raise CheckFailure(f"{what}: parameters tied vs untied", f"{2 * 20 * D} fewer with tying (two 20 x "
                                                                 f"{D} "
                           "matrices shared)", f"{n_untied - n_params} fewer",
                           "tie_weights ignored: tie only when tie_weights=True, and then share the "
                           "Parameter objects")


@register("Transformer", "different vocabulary sizes: only the generator is tied; tie_weights=False ties "
                         "nothing")
def _tied_different(Transformer):
    model, what = _make(Transformer)
    _generator(model, what)
    gen = get_path(model, "generator.weight", what)
    tgt, src = _embedding_weight(model, "tgt", what), _embedding_weight(model, "src", what)
    if gen is not tgt:
        hint = ("the generator is tied to the source embedding: it predicts TARGET tokens "
                "(tgt_embed)" if gen is src
                else "weights not tied: self.generator.weight = self.tgt_embed.embedding.weight")
        raise CheckFailure(f"{what}: generator.weight is tgt_embed.embedding.weight",
                           "the same Parameter object",
                           "a different tensor", hint)
    if src is tgt or tuple(src.shape) != (V_SRC, D):
        raise CheckFailure(f"{what}: src_embed.embedding.weight", f"its own ({V_SRC}, {D}) weight",
                           f"shape {tuple(src.shape)}" + (", the target's weight" if src is tgt else ""),
                           "the source embedding is tied only when both vocabularies have the same size")
    untied, what = _make(Transformer, V_src=20, V_tgt=20, tie_weights=False)
    gen, tgt, src = (get_path(untied, "generator.weight", what), _embedding_weight(untied, "tgt", what),
                     _embedding_weight(untied, "src", what))
    ptrs = [gen.data_ptr(), tgt.data_ptr(), src.data_ptr()]
    if len(set(ptrs)) < 3:
        raise CheckFailure(f"{what}: generator, tgt_embed and src_embed weights", "three separate weights",
                           "shared weights", "tie_weights ignored: share them only when tie_weights=True")


@register("Transformer", "encode feeds the encoder embedding * sqrt(d_model) + PE, and passes src_mask")
def _encode_input(Transformer):
    model, what = _make(Transformer, seed=3)
    model.eval()
    src, tgt, sm, tm = _batch(3)
    right, wrong = _inputs(model, src, "src", what)
    rec = _Recorder()
    model.encoder = rec
    out = call(model.encode, src, sm, what=f"{what}.encode(src, src_mask)")
    if not rec.calls:
        raise CheckFailure(f"{what}.encode", "a call of self.encoder", "no call", "encode(src) = "
                           "self.encoder(self.positional(self.src_embed(src)), src_mask)")
    x = rec.calls[0][0]
    expect_close(x, right, f"{what}.encode(src, src_mask): what the encoder was given",
                 hint="positional(src_embed(src)): embedding(src) * sqrt(d_model) + PE[:Ls]", mistakes=wrong)
    mask = _argument(rec.calls[0], 0, ("src_mask", "mask"))
    if not _same(mask, sm, "src_mask"):
        raise CheckFailure(f"{what}.encode(src, src_mask): the mask the encoder was given", "src_mask itself",
                           "None" if mask is None else "something else",
                           _not_passed(mask, sm, "src_mask", "encoder"))
    expect_close(out, right, f"{what}.encode(src, src_mask) with an encoder that returns its input",
                 hint="return the encoder's output")
    _no_dropout_elsewhere(Transformer, 3, "encode")


@register("Transformer", "decode feeds the decoder embedding * sqrt(d_model) + PE and returns d_model states")
def _decode_input(Transformer):
    model, what = _make(Transformer, seed=4)
    model.eval()
    src, tgt, sm, tm = _batch(4)
    right, wrong = _inputs(model, tgt, "tgt", what)
    with seeded(4):
        memory = torch.randn(src.size(0), src.size(1), D)
    rec = _Recorder()
    model.decoder = rec
    out = call(model.decode, tgt, memory, sm, tm, what=f"{what}.decode(tgt_in, memory, src_mask, tgt_mask)")
    expect_shape(out, (tgt.size(0), tgt.size(1), D), f"{what}.decode(tgt_in, memory, src_mask, tgt_mask)",
                 "decode returns the decoder's states (B, Lt, d_model): the generator is applied in forward, "
                 "not inside decode")
    if not rec.calls:
        raise CheckFailure(f"{what}.decode", "a call of self.decoder", "no call",
                           "decode = self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask, "
                           "tgt_mask)")
    x = rec.calls[0][0]
    expect_close(x, right, f"{what}.decode(...): what the decoder was given as x",
                 hint="positional(tgt_embed(tgt_in)): embedding(tgt_in) * sqrt(d_model) + PE[:Lt]",
                 mistakes=wrong)
    for index, names, value, label in ((0, ("memory",), memory, "memory"), (1, ("src_mask",), sm, "src_mask"),
                                       (2, ("tgt_mask",), tm, "tgt_mask")):
        got = _argument(rec.calls[0], index, names)
        if not _same(got, value, label):
            swapped = isinstance(got, torch.Tensor) and any(
                got.shape == v.shape and torch.equal(got, v) for v in (memory, sm, tm) if v is not value)
            raise CheckFailure(f"{what}.decode(tgt_in, memory, src_mask, tgt_mask): the decoder's argument "
                               f"{label}",
                               f"the {label} given to decode", "None" if got is None else "something else",
                               "arguments in the wrong order: decoder(x, memory, src_mask, "
                               "tgt_mask)" if swapped
                               else _not_passed(got, value, label, "decoder"))
    expect_close(out, right, f"{what}.decode(...) with a decoder that returns its input",
                 hint="return the decoder's output, without the generator")
    _no_dropout_elsewhere(Transformer, 4, "decode")


def _dropped_like(got, given, p):
    """Whether `got` is `given` through a dropout of rate p: each entry 0, or the entry / (1 - p); some
    zeroed."""
    if not isinstance(got, torch.Tensor) or got.shape != given.shape or not torch.isfinite(got).all():
        return False
    g = got.detach().double()
    kept = torch.isclose(g, given.detach().double() / (1 - p), atol=1e-5, rtol=1e-4)
    return bool(((g == 0) | kept).all()) and bool((g == 0).any())


def _as_given(got, given, what, expected, p, place):
    """got must be `given` exactly (train mode, dropout=p: no dropout of the model's own on that path)."""
    if isinstance(got, torch.Tensor) and got.shape == given.shape and torch.equal(got, given):
        return
    if _dropped_like(got, given, p):
        zeroed = float((got.detach() == 0)[given != 0].double().mean()) * 100
        raise CheckFailure(what, expected, f"{zeroed:.0f}% of the entries zeroed and the others x "
                                           f"{1 / (1 - p):g} (a dropout of rate {p:g})",
                           f"a dropout on {place}: the model's dropout is on the embeddings + PE "
                           "(self.positional) and inside the layers (each sublayer's output, the attention "
                           "weights, the feed-forward's hidden units) only; add none of your own")
    raise CheckFailure(what, expected, "something else in train mode (and the right thing in eval mode)",
                       "something that acts only in train mode changes it: dropout belongs on the embeddings "
                       "+ PE and inside the layers only")


def _run_on_stand_ins(model, part, batch, memory, seed, train):
    """(output, encoder stand-in, decoder stand-in) of `part` (encode, decode or forward) run on the batch
    with the model's encoder and decoder replaced by stand-ins that record their calls, in train or eval
    mode."""
    src, tgt, sm, tm = batch
    enc, dec = _Recorder(), _Recorder()
    model.encoder, model.decoder = enc, dec
    model.train(train)
    with seeded(seed + 1), torch.no_grad():
        if part == "encode":
            out = model.encode(src, sm)
        elif part == "decode":
            out = model.decode(tgt, memory, sm, tm)
        else:
            out = model(src, tgt, sm, tm)
    return out, enc, dec


def _stand_in_paths(model, what, part, memory, out, enc, dec, clean):
    """(got, given, what, expected, place) for each path, or None when a stand-in was not called as expected.
    `clean(part)`: whether encode or decode adds no dropout of its own (forward's paths count only those)."""
    if part == "encode":
        if len(enc.calls) != 1:
            return None
        return [(out, enc.calls[0][0], f"{what}.train().encode(src, src_mask) with an encoder that returns "
                                       "its "
                 "input", "the encoder's output as it is", "the encoder's output")]
    if len(dec.calls) != 1:
        return None
    mem = _argument(dec.calls[0], 0, ("memory",))
    if part == "decode":
        return [(mem, memory, f"{what}.train().decode(tgt_in, memory, src_mask, tgt_mask): the memory the "
                 "decoder was given", "memory itself", "the memory"),
                (out, dec.calls[0][0], f"{what}.train().decode(...) with a decoder that returns its input",
                 "the decoder's output as it is", "the decoder's output")]
    if len(enc.calls) != 1 or not isinstance(mem, torch.Tensor):
        return None
    gen = model.generator
    with torch.no_grad():
        logits = gen(dec.calls[0][0]) if isinstance(gen, nn.Module) else None
    found = []
    decode_clean = clean("decode")
    if decode_clean and clean("encode"):
        found.append((mem, enc.calls[0][0], f"{what}.train()(src, tgt_in, src_mask, tgt_mask): the memory "
                                            "the decoder was given", "the encoder's output as it is",
                      "the memory (the encoder's output)"))
    if logits is not None and decode_clean:
        found.append((out, logits, f"{what}.train()(src, tgt_in, src_mask, tgt_mask) with a decoder that "
                                   "returns "
                      "its input", "generator(the decoder's output)", "the decoder's output or the logits"))
    return found


def _no_dropout_elsewhere(Transformer, seed, part):
    """With dropout=0.5 in train mode, and the encoder and decoder replaced by stand-ins that return their
    input x: encode returns the encoder's output, decode hands the decoder the memory and returns its output,
    forward hands the decoder the encoder's output and projects the decoder's, all as they are (dropout acts
    only in self.positional and inside the layers). Checked only where eval mode gets these right (the checks
    in eval mode say what is wrong otherwise)."""
    p = 0.5
    model, what = _make(Transformer, seed=seed, dropout=p)
    src, tgt, sm, tm = _batch(seed)
    with seeded(seed):
        memory = torch.randn(src.size(0), src.size(1), D)

    def run(train):
        return _run_on_stand_ins(model, part, (src, tgt, sm, tm), memory, seed, train)

    verdicts = {}  # part -> whether it adds no dropout of its own (computed once)

    def clean(inner):  # a dropout inside encode or decode is that check's: not counted twice
        if inner not in verdicts:
            try:
                _no_dropout_elsewhere(Transformer, seed, inner)
                verdicts[inner] = True
            except CheckFailure:
                verdicts[inner] = False
        return verdicts[inner]

    def paths(out, enc, dec):
        return _stand_in_paths(model, what, part, memory, out, enc, dec, clean)

    try:
        eval_paths = paths(*run(False))
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001  (wrong in eval mode too: the other checks say how)
        return
    if eval_paths is None or any(not (isinstance(got, torch.Tensor) and got.shape == given.shape
                                      and torch.equal(got, given)) for got, given, *_ in eval_paths):
        return
    train_paths = paths(*run(True))
    for got, given, where, expected, place in train_paths or ():
        _as_given(got, given, where, expected, p, place)


@register("Transformer", "post-norm model equals nn.Transformer with the same weights (encode and forward)")
def _post(Transformer):
    _vs_torch(Transformer, False, seed=5, second_batch=True)


@register("Transformer", "pre-norm model (norm_first=True) equals nn.Transformer(norm_first=True)")
def _pre(Transformer):
    _vs_torch(Transformer, True, seed=6)


@register("Transformer", "forward returns unscaled logits: generator(decode(tgt_in, encode(src)))")
def _forward(Transformer):
    model, what = _make(Transformer, seed=7)
    model.eval()
    src, tgt, sm, tm = _batch(7)
    memory = call(model.encode, src, sm, what=f"{what}.encode(src, src_mask)")
    expect_shape(memory, (src.size(0), src.size(1), D), f"{what}.encode(src, src_mask)",
                 "encode returns the encoder's output (B, Ls, d_model)")
    states = call(model.decode, tgt, memory, sm, tm,
                  what=f"{what}.decode(tgt_in, memory, src_mask, tgt_mask)")
    expect_shape(states, (tgt.size(0), tgt.size(1), D), f"{what}.decode(tgt_in, memory, src_mask, tgt_mask)",
                 "generator applied inside decode: decode returns the decoder's states (B, Lt, d_model); "
                 "forward applies the generator")
    gen = _generator(model, what)
    with torch.no_grad():
        expected = gen(states)
        mistakes = _logit_mistakes(expected)
        mistakes.update(_states_mistakes(gen, states))
    logits = call(model, src, tgt, sm, tm, what=f"{what}(src, tgt_in, src_mask, tgt_mask)")
    expect_shape(logits, (tgt.size(0), tgt.size(1), V_TGT), f"{what}(src, tgt_in, src_mask, tgt_mask)",
                 "forward returns logits (B, Lt, tgt_vocab_size): generator(decode(...))")
    expect_close(logits, expected, f"{what}(src, tgt_in, src_mask, tgt_mask) vs generator(decode(tgt_in, "
                 "encode(src, src_mask), src_mask, tgt_mask))",
                 hint="forward = generator(decode(tgt_in, encode(src, src_mask), src_mask, tgt_mask)), "
                      "nothing more",
                 mistakes=mistakes)
    model.train()  # (dropout=0.0: the same numbers) where a model is trained, and its gradients matter
    logits = call(model, src, tgt, sm, tm, what=f"{what}.train()(src, tgt_in, src_mask, tgt_mask)")
    _gradient_reaches_every_part(model, logits, tgt, what,
                                 rerun=lambda: call(model, src, tgt, sm, tm,
                                                    what=f"{what}.train()(src, tgt_in, "
                                                    "src_mask, tgt_mask)"))

    def train_states():  # the decoder states forward projects, in train mode (dropout=0.0: deterministic)
        return model.decode(tgt, model.encode(src, sm), sm, tm)
    _tied_gradient(model, logits, src, tgt, train_states, what)
    _no_dropout_elsewhere(Transformer, 7, "forward")


def _trainable(part):
    return [p for p in part.parameters() if p.requires_grad] if isinstance(part, nn.Module) else []


def _moves_the_logits(ps, rerun, logits) -> bool:
    """Whether the logits change when the parameters `ps` change (each shifted by noise, then put back): False
    for a part that forward never uses. True when that cannot be told (the part's gradient hint then
    stands)."""
    try:
        with torch.no_grad():
            saved = [p.detach().clone() for p in ps]
            try:
                with seeded(8):
                    for p, s in zip(ps, saved):
                        p.copy_(s + torch.randn(s.shape) * (s.abs().mean() + 0.1))
                moved = rerun()
            finally:
                for p, s in zip(ps, saved):
                    p.copy_(s)
        return not (isinstance(moved, torch.Tensor) and moved.shape == logits.shape and
                    close(moved, logits.detach()))
    except Exception:  # noqa: BLE001
        return True


def _gradient_reaches_every_part(model, logits, tgt, what, rerun=None):
    """The logits are connected to autograd, and the gradient of a loss on them reaches the generator, the
    decoder, the target embedding, the encoder and the source embedding (nothing detached or computed under
    no_grad). A part without a gradient is told 'detached' only when changing its parameters changes the
    logits (`rerun`: forward again); a part forward never uses is said to be unused (e.g. the target embedding
    used for the source, which a comparison before this one may have named: 'detached' would contradict
    it)."""
    run = f"{what}(src, tgt_in, src_mask, tgt_mask)"
    if not logits.requires_grad:
        raise CheckFailure(f"{run}: its gradient", "logits connected to autograd (logits.requires_grad is "
                                                   "True)",
                           "logits without a gradient", NO_GRAD)
    parts = [("generator", [get_path(model, "generator.weight", what)]),
             ("decoder", _trainable(get_path(model, "decoder", what))),
             ("tgt_embed", [_embedding_weight(model, "tgt", what)]),
             ("encoder", _trainable(get_path(model, "encoder", what))),
             ("src_embed", [_embedding_weight(model, "src", what)])]
    params = [p for _, ps in parts for p in ps]
    for p in params:
        p.grad = None
    with seeded(7):
        w = torch.randn(logits.shape) * (tgt != PAD)[..., None]
    (logits * w).sum().backward()  # (torch.autograd.grad refuses a reentrant torch.utils.checkpoint)
    grads = [p.grad for p in params]
    hints = {"generator": "the generator's weight gets no gradient: forward must use self.generator (its "
                          "weight detached or copied?)",
             "decoder": "no gradient reaches the decoder: decode's result is detached (or computed under "
                        "torch.no_grad()) before the generator",
             "tgt_embed": "no gradient reaches the target embedding: the decoder's input is detached (or "
                          "embedded under torch.no_grad())",
             "encoder": "no gradient reaches the encoder: the memory is detached (encode(...).detach(), "
                        ".data, torch.no_grad() around encode), so the encoder would never learn",
             "src_embed": "no gradient reaches the source embedding: the encoder's input is detached (or "
                          "embedded under torch.no_grad())"}
    i = 0
    for name, ps in parts:
        gs = grads[i:i + len(ps)]
        i += len(ps)
        if ps and not any(g is not None and bool(g.abs().sum() > 0) for g in gs):
            unused = rerun is not None and not _moves_the_logits(ps, rerun, logits)
            raise CheckFailure(f"{run}: the gradient of a loss on the logits with respect to {name}'s "
                               "parameters",
                               "a gradient", "none", f"self.{name} is never used: changing its parameters "
                                                     "does not change the logits "
                                                     f"({UNUSED[name]})" if unused else hints[name])


UNUSED = {"generator": "forward must project the decoder's states with self.generator",
          "decoder": "decode must run self.decoder",
          "tgt_embed": "decode must embed tgt_in with self.tgt_embed",
          "encoder": "encode must run self.encoder",
          "src_embed": "encode must embed src with self.src_embed"}


def _tied_gradient(model, logits, src, tgt, states_fn, what):
    """With tying, the one weight's gradient is the generator's share (sum over positions of dloss/dlogits
    times the decoder state) plus the embeddings' share, which only reaches the rows of tokens in the input.
    So the rows of tokens absent from src and tgt_in must hold exactly the generator's share (a generator
    weight detached in forward leaves them empty), and the rows of the target's tokens something more (an
    embedding detached in decode leaves them at the generator's share: the tying hides it from the check
    above). Uses the gradients of that check."""
    weight = get_path(model, "generator.weight", what)
    tgt_w = _embedding_weight(model, "tgt", what)
    if weight is not tgt_w or weight.grad is None:
        return  # not tied: the check above sees each part's gradient on its own
    with torch.no_grad():
        states = states_fn()
        if not isinstance(states, torch.Tensor) or states.shape != (*logits.shape[:-1], D):
            return  # decode is wrong: the decode and forward checks say so
        if not close(states_fn(), states):  # the generator's share below assumes the same states every run
            raise CheckFailure(f"{what}.train(): decode(tgt_in, encode(src, src_mask), ...) twice",
                               "the same states (dropout=0.0: train mode computes what eval mode does)",
                               "different states", "the dropout argument is not passed on to every part (the "
                               "positional encoding, the encoder, the decoder): a dropout of another rate "
                               "acts in train mode")
        with seeded(7):  # the same w as _gradient_reaches_every_part
            w = torch.randn(logits.shape) * (tgt != PAD)[..., None]
        share = torch.einsum("blv,bld->vd", w.double(), states.double())     # (V_tgt, d_model)
    grad = weight.grad.double()
    used = set(tgt.flatten().tolist()) | {PAD}
    if _embedding_weight(model, "src", what) is weight:
        used |= set(src.flatten().tolist())
    run = f"{what}.train()(src, tgt_in, src_mask, tgt_mask)"
    absent = [v for v in range(weight.size(0)) if v not in used]
    if absent and not torch.allclose(grad[absent], share[absent], atol=1e-4, rtol=1e-3):
        empty = bool(grad[absent].abs().max() < 1e-8)
        raise CheckFailure(f"{run}: the gradient of the tied weight (generator.weight, which is "
                           "tgt_embed.embedding.weight) at the rows of tokens absent from the batch",
                           "the generator's share: sum over positions of dloss/dlogits x decoder state",
                           "none" if empty else "a different gradient",
                           "the generator's weight is cut off from autograd in forward (F.linear(h, "
                           "weight.detach()) or weight.data): the logits' gradient never reaches the tied "
                           "weight through the projection; use self.generator(h) (or the Parameter "
                           "itself)" if empty else
                           "forward must be generator(decode(...)) with the tied Parameter itself, nothing "
                           "detached")
    real = sorted(set(tgt.flatten().tolist()) - {PAD})
    # float32 sums: not exactly equal
    if real and torch.allclose(grad[real], share[real], atol=1e-5, rtol=1e-4):
        src_w = _embedding_weight(model, "src", what)
        only_tgt = [v for v in sorted(set(real) - set(src.flatten().tolist())) if v < src_w.size(0)]
        if src_w is not weight and src_w.grad is not None and only_tgt and \
                bool(src_w.grad[only_tgt].abs().sum() > 0):
            raise CheckFailure(f"{run}: the gradient with respect to src_embed's rows of tokens only the "
                               "target has",
                               "none: decode embeds tgt_in with tgt_embed", "a gradient",
                               "the source embedding used for the target: decode must embed tgt_in with "
                               "self.tgt_embed, not self.src_embed")
        raise CheckFailure(f"{run}: the gradient of a loss on the logits with respect to tgt_embed's rows of "
                           "the target's tokens", "the generator's share plus the embedding's",
                           "the generator's share only (nothing through the embedding)",
                           "no gradient reaches the target embedding: the decoder's input is detached in "
                           "decode (or embedded under torch.no_grad()); the tied weight hides it elsewhere, "
                           "as the generator still trains it")
