"""Stage 13's checks of beam_search: against the reference beam search and a brute-force search, with
probes that name the classic mistakes."""
from __future__ import annotations

import math
import time
import weakref

from ..registry import CheckFailure, CheckTimeout, register
from ._util import fmt
from .stage13_decoding import (
    ALL_EOS,
    ALPHA_IGNORED,
    BEAM_SIZE_IGNORED,
    BOS,
    BOS_COUNTED,
    EOS,
    EOS_NOT_COUNTED,
    INIT_COPIES,
    NO_GENERATOR,
    NO_PENALTY,
    PAD,
    PENALTY_MUL,
    PENALTY_POWER,
    PENALTY_TWICE,
    PROBS,
    SHRANK,
    SHRANK_FOREVER,
    SLOTS,
    STOP_AT_K,
    STOP_FIRST,
    _alone,
    _as_lists,
    _beam_variants,
    _brute_force,
    _decode_with,
    _expect_lists,
    _expect_mode_kept,
    _FakeModel,
    _keys,
    _ref_beam,
    _ref_greedy,
    _spec,
    _src,
    _table,
    _without_generator,
)

BEAM_HINT = ("rank every one-token extension of the open hypotheses by log p (log_softmax of "
             "model.generator), set the ones ending in <eos> aside as finished, keep beam_size open ones; "
             "after max_len tokens the open ones count as finished; answer: the finished one with the best "
             "log p / length_penalty(length, alpha), length counting <eos>")


def _beam_case(beam_search, next_logits, vocab, rows, max_len, K, alpha, what, bos=BOS, eos=EOS, extra=None,
               prefer=()):
    model = _FakeModel(vocab, next_logits)
    src, mask = _src(rows)
    kwargs = dict(beam_size=K, alpha=alpha)
    if (bos, eos) != (BOS, EOS):
        kwargs.update(bos_id=bos, eos_id=eos)
    got = _decode_with(beam_search, model, src, mask, max_len, **kwargs)
    keys = _keys(src)
    expected = [_ref_beam(next_logits, k, max_len, K, alpha, bos, eos) for k in keys]

    def mistakes():
        out = _beam_variants(next_logits, keys, max_len, K, alpha, bos, eos)[1]
        out.update(extra(keys) if extra else {})
        return out
    _expect_lists(got, expected, what, BEAM_HINT, mistakes, rows, eos,
                  _alone(beam_search, next_logits, vocab, src, mask, max_len, **kwargs), prefer,
                  _beam_ranker(beam_search))
    return model, got


# the spec of _beam_aside: source 7, <eos> first (p 0.5), but 5 6 3 <eos> (p 0.18) wins with alpha 3; source
# 8, <eos> first (p 0.3), then 4 <eos> (p 0.65 x 0.95) is more probable (alpha 0)
ASIDE_SPEC = {((7,), ()): {EOS: 0.5, 4: 0.3, 5: 0.18}, ((7,), (4,)): {EOS: 0.99}, ((7,), (5,)): {6: 0.99},
              ((7,), (5, 6)): {3: 0.99}, ((7,), (5, 6, 3)): {EOS: 0.99},
              ((8,), ()): {EOS: 0.3, 4: 0.65}, ((8,), (4,)): {EOS: 0.95}}
# the specs of _beam_penalty: [<eos>] log p -1 against [4, 5, <eos>] log p -1.25, -1.6, -1.5 (sources 9, 10,
# 11); and for beam_size=1, [<eos>] log p -0.8 against [4, 5, <eos>] log p -0.92 (source 12)
PENALTY_SPEC = {key: probs for s, logp in ((9, -1.25), (10, -1.6), (11, -1.5))
                for key, probs in ((((s,), ()), {EOS: math.exp(-1.0), 4: math.exp(logp)}),
                                   (((s,), (4,)), {5: 0.9999}), (((s,), (4, 5)), {EOS: 0.9999}))}
K1_SPEC = {((12,), ()): {EOS: 0.45, 4: 0.4}, ((12,), (4,)): {5: 0.9999}, ((12,), (4, 5)): {EOS: 0.9999}}
K1_GREEDY = ("beam_size=1 was run as greedy decoding: with alpha > 0 the search must set [<eos>] aside and "
             "go on with the best open hypothesis, which can win after the penalty")


def _beam_probes():
    """(next_logits, vocab, sources, max_len, beam_size, alpha) of small searches that tell the classic beam
    mistakes apart (each mistake of BEAM_MISTAKES gives other answers than the others on them, but for a few
    that always give the same)."""
    return [(_spec(7, ASIDE_SPEC), 7, [[7]], 4, 2, 3.0), (_spec(7, ASIDE_SPEC), 7, [[8]], 4, 2, 0.0),
            (_spec(9, PENALTY_SPEC), 9, [[9], [10], [11]], 4, 4, 1.5),
            (_spec(9, K1_SPEC), 9, [[12]], 4, 1, 1.5),
            (_table(7, seed=35), 7, [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17], [18, 19]], 6, 3, 0.6),
            (_table(7, seed=71, eos_bias=0.5), 7, [[7, 8], [9], [10, 11], [12, 13]], 5, 3, 1.2),
            (_table(7, seed=85), 7, [[7, 8], [9], [10, 11], [12, 13]], 5, 2, 2.0),
            (_table(7, seed=5, eos_bias=1.0), 7, [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17]], 6, 1,
             0.0)]


PROBE_SECONDS = 3.0  # the most time the probes of one wrong answer may take
_PROBE_CACHE: list = []  # [(probe, the expected answers, {mistake: its answers})], made once
# beam_search -> {probe index: its answers, or None if it failed}
_LEARNER_ANSWERS = weakref.WeakKeyDictionary()


def _probe_variants():
    if not _PROBE_CACHE:
        for probe in _beam_probes():
            fn, _, rows, max_len, K, alpha = probe
            keys = _keys(_src(rows)[0])
            expected, out = _beam_variants(fn, keys, max_len, K, alpha)
            out.setdefault(INIT_COPIES, expected)  # (beam_size 1: copies change nothing)
            out.setdefault(ALPHA_IGNORED, expected)  # (alpha 0.6)
            if K == 1:
                out[K1_GREEDY] = [_ref_greedy(fn, k, max_len) for k in keys]
            _PROBE_CACHE.append((probe, expected, out))
    return _PROBE_CACHE


def _learner_answers(beam_search) -> dict:
    """The learner's answers to the probes run so far, kept for the other checks of the same check() run
    (_beam_format, the first check of beam_search, forgets them)."""
    try:
        return _LEARNER_ANSWERS.setdefault(beam_search, {})
    except TypeError:  # (an object that takes no weak reference: nothing kept)
        return {}


def _beam_ranker(beam_search):
    """rank(names) for _expect_lists: several mistakes often give the same wrong answer on one search. The
    learner's beam_search is run on the probes, and the mistakes are ordered by how many probe answers they
    contradict (fewest first), then by how many wrong answers they explain; those contradicted are left out
    when some mistake contradicts none. A description that a probe cannot replay (an extra of one check) is
    neither contradicted nor confirmed there."""
    def rank(names):
        contradicted, confirmed = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
        answers = _learner_answers(beam_search)
        start = time.monotonic()
        for index, ((fn, vocab, rows, max_len, K, alpha), expected, out) in enumerate(_probe_variants()):
            if index not in answers:
                if time.monotonic() - start > PROBE_SECONDS:
                    break
                src, mask = _src(rows)
                try:
                    answers[index] = _as_lists(beam_search(_FakeModel(vocab, fn), src, mask, max_len,
                                                           beam_size=K,
                                                           alpha=alpha), len(rows), "")
                except CheckTimeout:  # out of time: rank by the probes run so far
                    break
                except Exception:  # noqa: BLE001  (a probe the learner's code fails on tells nothing)
                    answers[index] = None
            got = answers[index]
            if got is None:
                continue
            for n in names:
                if n in out:
                    if out[n] != got:
                        contradicted[n] += 1
                    elif got != expected:
                        confirmed[n] += 1
        ranked = sorted(names, key=lambda n: (contradicted[n], -confirmed[n]))  # (stable: `prefer` on ties)
        return [n for n in ranked if contradicted[n] == 0] or ranked
    return rank


@register("beam_search", "returns one list per source: no <bos>, no <eos>, at most max_len ids")
def _beam_format(beam_search):
    _learner_answers(beam_search).clear()  # (a new check() run: the code it calls may have changed)
    rows = [[7, 8], [9], [10, 11], [12, 13]]
    fn = _table(7, seed=4)
    model = _FakeModel(7, fn)
    src, mask = _src(rows)
    what = "beam_search(model, 4 sources, max_len=5, beam_size=3, alpha=0.6)"
    got = _as_lists(_decode_with(beam_search, model, src, mask, 5, beam_size=3, alpha=0.6), 4, what)
    keys = _keys(src)
    if got == [_ref_beam(_without_generator(fn), k, 5, 3, 0.6) for k in keys] != [_ref_beam(fn, k, 5, 3, 0.6)
                                                                                   for k in keys]:
        i = next(j for j, k in enumerate(keys) if got[j] != _ref_beam(fn, k, 5, 3, 0.6))
        raise CheckFailure(f"{what}: the answer for source {i}", fmt(_ref_beam(fn, keys[i], 5, 3, 0.6)),
                           fmt(got[i]),
                           NO_GENERATOR)
    for i, ids in enumerate(got):
        if ids[:1] == [BOS]:
            raise CheckFailure(f"{what}: the answer for source {i}", "ids without <bos>", fmt(ids),
                               "drop the <bos> that every hypothesis starts with")
        if EOS in ids:
            raise CheckFailure(f"{what}: the answer for source {i}", "ids without <eos>", fmt(ids),
                               "cut the final <eos>" if ids[-1] == EOS and EOS not in ids[:-1] else
                               "tokens after <eos>: a hypothesis ending in <eos> is finished and never "
                               "extended")
        if len(ids) > 5:
            raise CheckFailure(f"{what}: the answer for source {i}", "at most max_len = 5 ids",
                               f"{len(ids)} ids",
                               "stop after max_len generated tokens (<eos> included)")
    _expect_mode_kept(model, "beam_search")


@register("beam_search", "beam_size=1 with alpha=0 equals greedy decoding")
def _beam_greedy(beam_search):
    rows = [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17]]
    fn = _table(7, seed=5, eos_bias=1.0)
    model = _FakeModel(7, fn)
    src, mask = _src(rows)
    got = _decode_with(beam_search, model, src, mask, 6, beam_size=1, alpha=0.0)
    keys = _keys(src)
    expected = [_ref_greedy(fn, k, 6) for k in keys]
    _expect_lists(got, expected, "beam_search(model, 5 sources, max_len=6, beam_size=1, alpha=0)",
                  "with one hypothesis and no length penalty, each step keeps the most probable open "
                  "extension: greedy decoding", lambda: _beam_variants(fn, keys, 6, 1, 0.0)[1], rows,
                  alone=_alone(beam_search, fn, 7, src, mask, 6, beam_size=1, alpha=0.0),
                  rank=_beam_ranker(beam_search), prefer=(BEAM_SIZE_IGNORED,))


@register("beam_search", "a beam as wide as the search space finds the brute-force best log p / penalty")
def _beam_exhaustive(beam_search):
    rows = [[7, 8], [9, 10]]
    # live tokens: <eos>, 3, 4, 5; <pad>, <bos> and 6..59 get -30. (The wide vocabulary lets a beam that takes
    # topk(2 * beam_size) of the extensions of its live hypotheses run, as it would with any real vocabulary.)
    fn = _table(60, seed=54, scale=1.5, banned=(PAD, BOS) + tuple(range(6, 60)), eos_bias=-0.5)
    for alpha in (0.6, 1.5):
        _exhaustive_case(beam_search, fn, 60, rows, 4, 27, alpha, "beam_size 27 = 3 ** 3 keeps every "
                                                                  "hypothesis that can win open (3 tokens "
                                                                  "besides <eos> can win)")
    # a vocabulary of 5 (<pad>, <bos>, <eos>, 3, 4) and beam_size 4 = 2 ** 2: at the first step the one
    # hypothesis has 5 extensions, fewer than 2 * beam_size
    _exhaustive_case(beam_search, _table(5, seed=56, scale=1.5), 5, rows, 3, 4, 1.0,
                     "beam_size 4 = 2 ** 2 keeps every hypothesis that can win open (2 tokens besides <eos> "
                     "can win)",
                     " (a vocabulary of 5 tokens)")


TOPK_TOO_MANY = ("topk(2 * beam_size) asked for more extensions than there are: at the first step one "
                 "hypothesis has only V = {V} extensions (k * V in general, fewer than 2 * beam_size with a "
                 "tiny vocabulary); take topk(min(2 * K, k * V)): all the extensions")


def _exhaustive_case(beam_search, fn, vocab, rows, max_len, K, alpha, why, about=""):
    model = _FakeModel(vocab, fn)
    src, mask = _src(rows)
    keys = _keys(src)
    what = f"beam_search(model{about}, 2 sources, max_len={max_len}, beam_size={K}, alpha={alpha})"
    try:
        got = _decode_with(beam_search, model, src, mask, max_len, beam_size=K, alpha=alpha)
    except RuntimeError as e:
        if "selected index k out of range" not in str(e):
            raise
        raise CheckFailure(what, "an answer for each source", f"RuntimeError: {e}",
                           TOPK_TOO_MANY.format(V=vocab)) from None
    expected = [_brute_force(fn, k, max_len, alpha) for k in keys]

    def mistakes():
        out = _beam_variants(fn, keys, max_len, K, alpha)[1]
        out[NO_PENALTY] = [_brute_force(fn, k, max_len, 0.0) for k in keys]
        out[EOS_NOT_COUNTED] = [_brute_force(fn, k, max_len, alpha, eos_counts=False) for k in keys]
        return out
    _expect_lists(got, expected, what, why + ", so the answer is the best of all sequences: " + BEAM_HINT,
                  mistakes,
                  rows, alone=_alone(beam_search, fn, vocab, src, mask, max_len, beam_size=K, alpha=alpha),
                  rank=_beam_ranker(beam_search))


@register("beam_search", "equals a reference beam search on a batch (beam 3, alpha 0.6)")
def _beam_reference(beam_search):
    rows = [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17], [18, 19]]
    _beam_case(beam_search, _table(7, seed=35), 7, rows, 6, 3, 0.6,
               "beam_search(model, 6 sources, max_len=6, beam_size=3, alpha=0.6)")


@register("beam_search", "sets finished hypotheses aside and goes on with beam_size open ones")
def _beam_aside(beam_search):
    # source 7: <eos> first (p 0.5), but 5 6 3 <eos> (p 0.18) wins with alpha 3: it needs both beam slots
    # for the open 4 and 5 at step 1, and the search must go on after [<eos>] finished.
    # source 8: <eos> first (p 0.3), then 4 <eos> (p 0.65 x 0.95) is more probable (alpha 0).
    fn = _spec(7, ASIDE_SPEC)
    prefer = (SHRANK, SHRANK_FOREVER, SLOTS, STOP_FIRST, STOP_AT_K, ALL_EOS, INIT_COPIES)
    _beam_case(beam_search, fn, 7, [[7]], 4, 2, 3.0,
               "beam_search(model, [[7]], max_len=4, beam_size=2, alpha=3.0) where [<eos>] finishes first "
               "(log p -0.69) and [5, 6, 3, <eos>] (log p -1.75) wins after the penalty", prefer=prefer)
    _beam_case(beam_search, fn, 7, [[8]], 4, 2, 0.0,
               "beam_search(model, [[8]], max_len=4, beam_size=2, alpha=0) where [<eos>] finishes first "
               "(log p -1.2) and [4, <eos>] (log p -0.48) is better", prefer=prefer)


@register("beam_search", "divides by length_penalty(length, alpha), length counting <eos>")
def _beam_penalty(beam_search):
    # source 9: [<eos>] log p -1 against [4, 5, <eos>] log p -1.25: with alpha 1.5 the long one wins, -1.25 /
    # (8/6) ** 1.5 = -0.81 > -1, but loses without a penalty. source 10: [<eos>] log p -1 against [4, 5,
    # <eos>] log p -1.6: -1.6 / (8/6) ** 1.5 = -1.04 < -1, the short one wins, but a length without <eos>
    # would give -1 / (5/6) ** 1.5 = -1.31 < -1.6 / (7/6) ** 1.5 = -1.27. source 11: [<eos>] log p -1 against
    # [4, 5, <eos>] log p -1.5: -1.5 / (8/6) ** 1.5 = -0.974 > -1, the long one wins, but a length counting
    # <bos> gives -1 / (7/6) ** 1.5 = -0.794 > -1.5 / (9/6) ** 1.5 = -0.816.
    _beam_case(beam_search, _spec(9, PENALTY_SPEC), 9, [[9], [10], [11]], 4, 4, 1.5,
               "beam_search(model, [[9], [10], [11]], max_len=4, beam_size=4, alpha=1.5) choosing between "
               "[<eos>] (log p -1) and [4, 5, <eos>] (log p -1.25, -1.6, -1.5)",
               prefer=(NO_PENALTY, EOS_NOT_COUNTED, BOS_COUNTED, PENALTY_MUL, PENALTY_POWER, PROBS,
                       ALPHA_IGNORED,
                       PENALTY_TWICE))
    # beam_size=1 with a penalty is not greedy decoding: [<eos>] (log p -0.8) is set aside, and [4, 5, <eos>]
    # (log p -0.92) wins, -0.92 / (8/6) ** 1.5 = -0.6 > -0.8
    fn = _spec(9, K1_SPEC)
    greedy = K1_GREEDY
    _beam_case(beam_search, fn, 9, [[12]], 4, 1, 1.5,
               "beam_search(model, [[12]], max_len=4, beam_size=1, alpha=1.5) choosing between [<eos>] (log "
               "p -0.8) and [4, 5, <eos>] (log p -0.92): with a penalty, beam_size=1 is not greedy decoding",
               extra=lambda keys: {greedy: [_ref_greedy(fn, k, 4) for k in keys]},
               prefer=(greedy, NO_PENALTY, STOP_FIRST, EOS_NOT_COUNTED, BOS_COUNTED, PENALTY_MUL,
                       PENALTY_POWER,
                       PROBS, ALPHA_IGNORED, PENALTY_TWICE))


@register("beam_search", "passes model.decode the causal mask of the prefix and the source mask")
def _beam_masks(beam_search):
    rows = [[7, 8, 9], [10], [11, 12]]
    model, _ = _beam_case(beam_search, _table(6, seed=8, eos_bias=0.5), 6, rows, 4, 2, 0.6,
                          "beam_search(model, 3 sources, max_len=4, beam_size=2, alpha=0.6)")
    if model.problem:
        raise CheckFailure("the masks given to the model", None, None, model.problem)


@register("beam_search", "uses bos_id and eos_id")
def _beam_ids(beam_search):
    rows = [[7, 8], [9], [10, 11], [12, 13]]
    fn = _table(7, seed=9, banned=(PAD, 5), eos=3, eos_bias=1.0)

    def extra(keys):
        return {"the bos_id argument is ignored (<bos> = 1 was used)":
                    [_ref_beam(fn, k, 5, 3, 0.6, BOS, 3) for k in keys],
                "the eos_id argument is ignored (<eos> = 2 was used)":
                    [_ref_beam(fn, k, 5, 3, 0.6, 5, EOS) for k in keys]}
    _beam_case(beam_search, fn, 7, rows, 5, 3, 0.6,
               "beam_search(model, src, src_mask, 5, beam_size=3, alpha=0.6, bos_id=5, eos_id=3)",
               bos=5, eos=3, extra=extra)
