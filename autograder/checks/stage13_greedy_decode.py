"""Stage 13's checks of greedy_decode: against the reference greedy decoder, on a batch of sources."""
from __future__ import annotations

from ..registry import CheckFailure, register
from ._util import fmt
from .stage13_decoding import (
    ANY_FINISHED,
    BOS,
    EOS,
    PAD,
    _alone,
    _as_lists,
    _decode_with,
    _expect_lists,
    _expect_mode_kept,
    _FakeModel,
    _greedy_variants,
    _keys,
    _log_softmax,
    _ref_greedy,
    _script,
    _src,
    _table,
)

GREEDY_HINT = ("memory = model.encode(src, src_mask); ys = <bos> column; repeat max_len times: "
               "logits = model.generator(model.decode(ys, memory, src_mask, causal_mask(t))[:, -1]), append "
               "the argmax; a source is done at its <eos>; return each row's tokens after <bos>, cut before "
               "<eos>")


def _stopped_at_first(next_logits, keys, max_len, bos=BOS, eos=EOS):
    """What a batch greedy decoder that stops once any source has produced <eos> returns."""
    runs = [_ref_greedy(next_logits, k, max_len, bos, eos) for k in keys]
    # an answer shorter than max_len ended with <eos>, generated at step len(answer) + 1
    steps = min((len(r) + 1 for r in runs if len(r) < max_len), default=max_len)
    return [r[:steps] for r in runs]


OVER_THE_BATCH = ("(log_)softmax over the batch axis (dim=0) before the argmax: normalize over the "
                  "vocabulary, dim=-1 (or take the argmax of the logits themselves)")


def _over_the_batch(next_logits, keys, max_len, bos=BOS, eos=EOS):
    """What a batch greedy decoder returns when it takes log_softmax(logits, dim=0), over the sources, before
    the argmax (finished rows stay in the batch and are given <eos>)."""
    prefixes, done = [(bos,)] * len(keys), [False] * len(keys)
    for _ in range(max_len):
        columns = [_log_softmax(list(c)) for c in zip(*(next_logits(k, p) for k, p in zip(keys, prefixes)))]
        toks = [eos if d else max(range(len(columns)), key=lambda v: columns[v][b]) for b,
                d in enumerate(done)]
        prefixes = [p + (t,) for p, t in zip(prefixes, toks)]
        done = [d or t == eos for d, t in zip(done, toks)]
        if all(done):
            break
    return [list(p[1:p.index(eos)] if eos in p else p[1:]) for p in prefixes]


def _greedy_case(greedy_decode, next_logits, vocab, rows, max_len, what, bos=BOS, eos=EOS, extra=None):
    model = _FakeModel(vocab, next_logits)
    src, mask = _src(rows)
    kwargs = {} if (bos, eos) == (BOS, EOS) else dict(bos_id=bos, eos_id=eos)
    got = _decode_with(greedy_decode, model, src, mask, max_len, **kwargs)
    keys = _keys(src)
    expected = [_ref_greedy(next_logits, k, max_len, bos, eos) for k in keys]

    def mistakes():
        per_source = [_greedy_variants(next_logits, k, max_len, bos, eos) for k in keys]
        out = {d: [v[d] for v in per_source] for d in per_source[0]}
        out[ANY_FINISHED] = _stopped_at_first(next_logits, keys, max_len, bos, eos)
        out[OVER_THE_BATCH] = _over_the_batch(next_logits, keys, max_len, bos, eos)
        out.update(extra(keys) if extra else {})
        return out
    _expect_lists(got, expected, what, GREEDY_HINT, mistakes, rows, eos,
                  _alone(greedy_decode, next_logits, vocab, src, mask, max_len, **kwargs))
    return model


# ------------------------------------------------------------------------------------ greedy_decode
@register("greedy_decode", "equals a reference greedy decoder on a batch of sources")
def _greedy_table(greedy_decode):
    rows = [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17], [18]]
    fn = _table(7, seed=1, eos_bias=1.0)
    model = _greedy_case(greedy_decode, fn, 7, rows, 6, "greedy_decode(model, 6 sources, max_len=6)")
    _expect_mode_kept(model, "greedy_decode")
    # a batch of one source: code that squeezes the batch axis away, or returns a flat list, fails here
    _greedy_case(greedy_decode, fn, 7, [[16, 17]], 6, "greedy_decode(model, a batch of one source [[16, "
                                                      "17]], max_len=6)")


@register("greedy_decode", "stops each source at its <eos>: no <bos>, no <eos> in the answer")
def _greedy_stops(greedy_decode):
    scripts = {(7, 0, 0): [], (8, 9, 0): [5, 6], (10, 11, 12): [6, 5, 4, 3]}
    rows = [[7], [8, 9], [10, 11, 12]]
    _greedy_case(greedy_decode, _script(7, scripts), 7, rows, 8,
                 "greedy_decode(a model that says [], [5, 6], [6, 5, 4, 3] then <eos>, max_len=8)")


@register("greedy_decode", "generates at most max_len tokens, <eos> included")
def _greedy_max_len(greedy_decode):
    scripts = {(7, 0): [4, 5, 6, 4, 5, 6, 4, 5, 6], (8, 9): [5, 6, 3], (10, 0): [6, 5, 4, 3]}
    rows = [[7], [8, 9], [10]]
    _greedy_case(greedy_decode, _script(7, scripts), 7, rows, 4,
                 "greedy_decode(a model that says 9, 3 and 4 tokens then <eos>, max_len=4)")
    src, mask = _src(rows)
    what = "greedy_decode(the same model, max_len=0)"
    got = _as_lists(_decode_with(greedy_decode, _FakeModel(7, _script(7, scripts)), src, mask, 0), 3, what)
    if got != [[]] * 3:
        raise CheckFailure(what, fmt([[]] * 3), fmt(got),
                           "max_len=0 allows no token at all: the loop runs max_len times (for _ in "
                           "range(max_len)), not at least once (a do-while loop, or range(max(max_len, 1)))")


@register("greedy_decode", "passes model.decode the causal mask of the prefix and the source mask")
def _greedy_masks(greedy_decode):
    rows = [[7, 8, 9], [10], [11, 12]]
    model = _greedy_case(greedy_decode, _table(6, seed=2, eos_bias=0.5), 6, rows, 5,
                         "greedy_decode(model, 3 sources, max_len=5)")
    if model.problem:
        raise CheckFailure("the masks given to the model", None, None, model.problem)


@register("greedy_decode", "uses bos_id and eos_id")
def _greedy_ids(greedy_decode):
    rows = [[7, 8], [9], [10, 11], [12, 13]]
    fn = _table(7, seed=3, banned=(PAD, 5), eos=3, eos_bias=1.0)

    def extra(keys):
        return {"the bos_id argument is ignored (<bos> = 1 was used)":
                    [_ref_greedy(fn, k, 6, BOS, 3) for k in keys],
                "the eos_id argument is ignored (<eos> = 2 was used)":
                    [_ref_greedy(fn, k, 6, 5, EOS) for k in keys],
                "the bos_id and eos_id arguments are both ignored (<bos> = 1 and <eos> = 2 were used): start "
                "from bos_id and stop at eos_id, the arguments":
                    [_ref_greedy(fn, k, 6, BOS, EOS) for k in keys]}
    _greedy_case(greedy_decode, fn, 7, rows, 6, "greedy_decode(model, src, src_mask, 6, bos_id=5, eos_id=3)",
                 bos=5, eos=3, extra=extra)
