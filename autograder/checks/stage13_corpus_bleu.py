"""Stage 13's checks of corpus_bleu: against sacrebleu's corpus BLEU, with the classic mistakes named."""
from __future__ import annotations

import math
import random

from ..registry import CheckFailure, CheckTimeout, register
from ._util import fmt, matching_mistakes
from .stage13_decoding import _as_number


def _sacrebleu(hyps, refs, max_n=4, smooth="none"):
    from sacrebleu.metrics import BLEU
    bleu = BLEU(tokenize="none", smooth_method=smooth, max_ngram_order=max_n)
    return bleu.corpus_score([" ".join(h) for h in hyps], [[" ".join(r) for r in refs]]).score


def _ngrams(tokens, n, drop_last=False):
    out = {}
    for i in range(len(tokens) - n + (0 if drop_last else 1)):
        g = tuple(tokens[i:i + n])
        out[g] = out.get(g, 0) + 1
    return out


def _bleu_formula(hyps, refs, max_n, clip=True, brevity=True, geometric=True, flipped_bp=False, orders=None,
                  skip_empty=False, recall=False, corpus_clip=False, zero_based=False, no_exp=False,
                  sentence_bp=False, weight=None, unique=False, bp_ratio=False, bp_uncapped=False,
                  long_bp=False, drop_last=False,
                  skip=None):
    """BLEU written out, with switches for the classic mistakes (`orders`: only n = 1..orders summed, still
    divided by max_n; `skip_empty`: orders without any n-gram left out of the mean; `recall`: divided by the
    reference n-grams; `corpus_clip`: counts clipped over the whole corpus; `zero_based`: orders 0..max_n - 1;
    `no_exp`: the mean of the logs not exponentiated; `sentence_bp`: the mean of the sentence brevity
    penalties; `weight`: a fixed weight per order instead of 1 / max_n; `unique`: each distinct n-gram counted
    once (a set); `bp_ratio`: BP = hyp_len / ref_len; `bp_uncapped`: BP = exp(1 - ref_len / hyp_len) also
    above 1; `long_bp`: BP = min(1, exp(1 - hyp_len / ref_len)), a penalty for hypotheses LONGER than the
    references; `drop_last`: each sentence's last n-gram left out, range(len - n); `skip`: the sentences
    whose hypothesis (0) or reference (1) is empty left out)."""
    matches, totals, hyp_len, ref_len = [0] * max_n, [0] * max_n, 0, 0
    all_h, all_r = [{} for _ in range(max_n)], [{} for _ in range(max_n)]
    for h, r in zip(hyps, refs):
        if skip is not None and not (h, r)[skip]:
            continue
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, max_n + 1):
            k = n - 1 if zero_based else n
            hc, rc = _ngrams(h, k, drop_last), _ngrams(r, k, drop_last)
            if unique:
                hc, rc = dict.fromkeys(hc, 1), dict.fromkeys(rc, 1)
            matches[n - 1] += sum(min(c, rc.get(g, 0)) if clip else (c if g in rc else 0) for g,
                                  c in hc.items())
            totals[n - 1] += len(hc) if unique else max(len(r if recall else h) - k + (0 if drop_last else 1),
                                                          0)
            for mine, theirs in ((all_h[n - 1], hc), (all_r[n - 1], rc)):
                for g, c in theirs.items():
                    mine[g] = mine.get(g, 0) + c
    if corpus_clip:
        matches = [sum(min(c, all_r[n].get(g, 0)) for g, c in all_h[n].items()) for n in range(max_n)]
    if orders is not None:  # the mean below still divides by max_n
        matches, totals = matches[:orders], totals[:orders]
    if skip_empty:
        kept = [(m, t) for m, t in zip(matches, totals) if t > 0]
        matches, totals, max_n = [m for m, _ in kept], [t for _, t in kept], len(kept)
    if hyp_len == 0 or not totals or min(totals) == 0:
        return 0.0
    if geometric:
        if min(matches) == 0:
            return 0.0
        mean_log = sum(math.log(m / t) * (weight or 1 / max_n) for m, t in zip(matches, totals))
        precision = mean_log if no_exp else math.exp(mean_log)
    else:
        precision = sum(m / t for m, t in zip(matches, totals)) / max_n
    bp = 1.0
    if sentence_bp:
        bp = sum(min(1.0, math.exp(1 - len(r) / len(h))) if h else 0.0 for h,
                 r in zip(hyps, refs)) / len(hyps)
    elif bp_uncapped:
        bp = math.exp(1 - ref_len / hyp_len)
    elif long_bp:
        bp = min(1.0, math.exp(1 - hyp_len / ref_len))
    elif brevity and hyp_len < ref_len:
        bp = math.exp(1 - hyp_len / ref_len) if flipped_bp else hyp_len / ref_len if bp_ratio else \
            math.exp(1 - ref_len / hyp_len)
    return 100 * bp * precision


def _bleu_mistakes(hyps, refs, max_n):
    """(corpus BLEU as sacreBLEU computes it, {a classic mistake: the score it gives}) for these sentences."""
    expected = _sacrebleu(hyps, refs, max_n)
    out = _bleu_formula_mistakes(hyps, refs, max_n, expected)
    out.update(_bleu_corpus_mistakes(hyps, refs, max_n))
    out.update(_bleu_part_mistakes(hyps, refs, max_n, expected))
    return expected, out


def _bleu_formula_mistakes(hyps, refs, max_n, expected):
    """The formula's classic mistakes: clipping, the brevity penalty, the means, the scale, skipped
    sentences."""
    out = {
        "n-gram counts not clipped: a hypothesis n-gram matches at most as often as it occurs in the "
        "reference (min(count in hypothesis, count in "
        "reference))": _bleu_formula(hyps, refs, max_n, clip=False),
        "no brevity penalty: multiply by exp(1 - ref_len / hyp_len) when the hypotheses are shorter":
            _bleu_formula(hyps, refs, max_n, brevity=False),
        "the brevity penalty is upside down: exp(1 - ref_len / hyp_len), with the lengths summed over the "
        "corpus":
            _bleu_formula(hyps, refs, max_n, flipped_bp=True),
        "the brevity penalty is upside down: min(1, exp(1 - hyp_len / ref_len)) punishes LONG output; BP = "
        "min(1, exp(1 - ref_len / hyp_len)) punishes hypotheses shorter than the references":
            _bleu_formula(hyps, refs, max_n, long_bp=True),
        "an average of sentence scores: corpus BLEU sums the n-gram matches, n-gram counts and lengths over "
        "all sentences first, then computes one score":
            sum(_bleu_formula([h], [r], max_n) for h, r in zip(hyps, refs)) / len(hyps),
        "an arithmetic mean of the n-gram precisions: BLEU takes their geometric mean, exp(mean of log p_n)":
            _bleu_formula(hyps, refs, max_n, geometric=False),
        "on a 0..1 scale: the contract's BLEU is in 0..100 (multiply by 100)": expected / 100,
        "the max_n argument is ignored (4 used)": _sacrebleu(hyps, refs, 4),
    }
    out["an order without any n-gram (p_n = 0/0) was left out of the mean: it counts as a zero precision, "
        "so BLEU = 0"] = _bleu_formula(hyps, refs, max_n, skip_empty=True)
    out["an empty hypothesis was skipped: it still counts its reference's length in ref_len (the brevity "
        "penalty); do not skip sentences"] = _bleu_formula(hyps, refs, max_n, skip=0)
    out["an empty reference was skipped: its hypothesis's n-grams still count in the precisions (and its "
        "length in hyp_len); do not skip sentences"] = _bleu_formula(hyps, refs, max_n, skip=1)
    out["the precision was divided by the REFERENCE n-grams (a recall): p_n = clipped matches / the n-grams "
        "of the hypotheses"] = _bleu_formula(hyps, refs, max_n, recall=True)
    out["the counts were clipped over the whole corpus: clip each sentence's n-gram counts by its own "
        "reference, then sum the clipped matches"] = _bleu_formula(hyps, refs, max_n, corpus_clip=True)
    out["orders 0..max_n - 1 (range(max_n)): the orders are n = 1..max_n, range(1, max_n + 1)"] = \
        _bleu_formula(hyps, refs, max_n, zero_based=True)
    out["exp is missing: BLEU = BP * exp(mean over n of log p_n), not the mean of the logs itself"] = \
        _bleu_formula(hyps, refs, max_n, no_exp=True)
    out["the brevity penalty was computed per sentence and averaged: BP = min(1, exp(1 - ref_len / hyp_len)) "
        "with the lengths summed over the corpus"] = _bleu_formula(hyps, refs, max_n, sentence_bp=True)
    out["each distinct n-gram was counted once (a set): count every occurrence (a Counter), and clip each "
        "count by the reference's"] = _bleu_formula(hyps, refs, max_n, unique=True)
    out["the brevity penalty is hyp_len / ref_len: it is exp(1 - ref_len / hyp_len) when the hypotheses are "
        "shorter"] = _bleu_formula(hyps, refs, max_n, bp_ratio=True)
    out["each sentence's last n-gram is missing (range(len(tokens) - n)): a sentence of L tokens has "
        "L - n + 1 n-grams, range(len(tokens) - n + 1)"] = _bleu_formula(hyps, refs, max_n, drop_last=True)
    out["the brevity penalty is not capped at 1: BP = min(1, exp(1 - ref_len / hyp_len)); hypotheses longer "
        "than their references get BP = 1, not more"] = _bleu_formula(hyps, refs, max_n, bp_uncapped=True)
    if max_n != 4:
        out["the weights are fixed at 1/4: the mean of the log precisions is over the max_n orders (weight "
            "1 / max_n)"] = _bleu_formula(hyps, refs, max_n, weight=0.25)
    return out


def _bleu_corpus_mistakes(hyps, refs, max_n):
    """The corpus joined, the arguments swapped, the orders cut short, smoothing."""
    out = {}
    out["the corpus was joined into one long sentence: n-grams across sentence boundaries were counted; "
        "count the n-grams of each sentence, then sum the "
        "counts"] = _sacrebleu([[w for h in hyps for w in h]],
                                                                          [[w for r in refs for w in r]],
                                                                                max_n)
    out["hypotheses and references swapped: corpus_bleu(hypotheses, "
        "references)"] = _sacrebleu(refs, hyps, max_n)
    if max_n > 1:
        out["orders 1..max_n - 1 only: BLEU averages log p_n over n = 1..max_n (range(1, max_n + 1))"] = \
            _sacrebleu(hyps, refs, max_n - 1)
        out["the order n = max_n is missing from the sum: BLEU averages log p_n over n = 1..max_n "
            "(range(1, max_n + 1))"] = _bleu_formula(hyps, refs, max_n, orders=max_n - 1)
    for smooth in ("exp", "floor", "add-k"):
        out[f"smoothed ({smooth}): the contract's BLEU has no smoothing, a zero precision gives 0"] = \
            _sacrebleu(hyps, refs, max_n, smooth)
    return out


def _bleu_part_mistakes(hyps, refs, max_n, expected):
    """The parts of BLEU one at a time (issue 40): orders, counts, the denominators, rounding."""
    out = {}
    if max_n > 1:
        out["the order n = max_n was dropped from the sum but the mean still divides by max_n: sum log p_n "
            "over n = 1..max_n, range(1, max_n + 1)"] = _bleu_parts(hyps, refs, max_n, last_order=False)
    out["each distinct n-gram of a hypothesis was counted once in the denominator (len(set(...))): p_n's "
        "denominator counts every n-gram occurrence, the clipped matches over all of them"] = \
        _bleu_parts(hyps, refs, max_n, distinct_total=True)
    for shift, how in ((-1, "len(h) - n, one short"), (1, "len(h) - n + 2, one too many")):
        out[f"off by one in p_n's denominator ({how}): a hypothesis of length L has L - n + 1 n-grams of "
            "order n"] = _bleu_parts(hyps, refs, max_n, total_shift=shift)
    out["smoothed (add-one on every order, unigrams included: (m + 1) / (t + 1)): the contract's BLEU has no "
        "smoothing, p_n = m / t, and a zero precision gives 0"] = _bleu_parts(hyps, refs, max_n, add=1)
    for digits in (0, 1, 2, 3, 4):
        out[f"the score was rounded (round(bleu, {digits})): return it unrounded; round only when "
            "printing"] = \
            round(expected, digits)
    out["the score was truncated to a whole number (int(bleu) or math.floor): return it as it is, a "
        "float"] = \
        float(math.floor(expected))
    return out


def _bleu_parts(hyps, refs, max_n, last_order=True, distinct_total=False, total_shift=0, add=0):
    """Corpus BLEU (0..100) written out, with one part changed: `last_order` False leaves out the order max_n
    from the sum (the mean still over max_n), `distinct_total` counts each distinct n-gram once in the
    denominators, `total_shift` moves each sentence's number of n-grams by that much, `add` is added to every
    order's matches and n-gram count (add-k smoothing, unigrams too). None where it is undefined."""
    matches, totals = [0] * max_n, [0] * max_n
    for h, r in zip(hyps, refs):
        for n in range(1, max_n + 1):
            hc, rc = _ngrams(h, n), _ngrams(r, n)
            matches[n - 1] += sum(min(c, rc.get(g, 0)) for g, c in hc.items())
            totals[n - 1] += (len(hc) if distinct_total else max(0, len(h) - n + 1 + total_shift))
    matches, totals = [m + add for m in matches], [t + add for t in totals]
    orders = range(max_n if last_order else max_n - 1)
    if any(totals[i] <= 0 or matches[i] <= 0 for i in orders):
        return None
    hyp_len, ref_len = sum(map(len, hyps)), sum(map(len, refs))
    if hyp_len == 0:
        return None
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(sum(math.log(matches[i] / totals[i]) for i in orders) / max_n)


def _expect_bleu(corpus_bleu, hyps, refs, max_n, what, hint):
    given_h, given_r = [list(h) for h in hyps], [list(r) for r in refs]
    try:
        got = corpus_bleu(given_h, given_r, max_n=max_n) if max_n != 4 else corpus_bleu(given_h, given_r)
    except (ValueError, ZeroDivisionError) as e:
        if _sacrebleu(hyps, refs, max_n) != 0.0:
            raise
        if not any(hyps):
            raise CheckFailure(what, "0.0: no hypothesis has a token, so nothing matches",
                               f"{type(e).__name__}: {e}",
                               "no output at all scores 0: test for empty hypotheses (hyp_len == 0) or zero "
                               "matches before dividing by the hypothesis length (ref_len / hyp_len in the "
                               "brevity penalty)") from None
        raise CheckFailure(what, "0.0: some order has no matching n-gram (p_n = 0), and without smoothing "
                                 "BLEU is 0",
                           f"{type(e).__name__}: {e}",
                           "math.log(0) (or a division by a zero count) was reached: when some order's "
                           "clipped matches are 0, return 0.0 before taking the logarithms") from None
    if given_h != hyps or given_r != refs:
        raise CheckFailure(f"{what}: the lists passed in", "unchanged after the call",
                           f"hypotheses {fmt(given_h)}, references {fmt(given_r)}",
                           "the caller's hypotheses or references were edited in place (append, sort, pop, "
                           "...): read them without modifying them")
    try:
        got = _as_number(got)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailure(what, "a number in 0..100", fmt(got), "return the score as a float") from None
    expected, mistakes = _bleu_mistakes(hyps, refs, max_n)
    if math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6):
        return
    names = matching_mistakes(got, mistakes, lambda g, v: math.isclose(g, v, rel_tol=1e-6, abs_tol=1e-6),
                              every=True)
    names = _confirmed(corpus_bleu, names, max_n)
    # a small difference is shown, not printed as equal
    digits = 4 if f"{got:.4f}" != f"{expected:.4f}" else 8
    shown = f"{got:.{digits}f}" if math.isfinite(got) else str(got)
    expected_shown = f"{expected:.{digits}f}"
    if names:
        raise CheckFailure(what, f"{expected_shown} (sacrebleu)", shown, "; or ".join(names))
    if expected == 0.0 and any(hyps) and got > 0 and _right_without_zero_precisions(corpus_bleu, max_n):
        raise CheckFailure(what, f"{expected_shown} (sacrebleu: {hint})", shown, SMOOTHED)
    # no known mistake gives this number: say what the right one is made of, and guess no cause
    raise CheckFailure(what, f"{expected_shown} (sacrebleu: {hint})", shown)


SMOOTHED = ("the zero precision was smoothed (an epsilon for a zero count, max(m, ...), + 1 or a floor): "
            "your BLEU is right on a corpus where every order has matches and not 0 where an order has none; "
            "the contract's BLEU has no smoothing: return 0.0 when some order's clipped matches are 0")


def _right_without_zero_precisions(corpus_bleu, max_n) -> bool:
    """Whether corpus_bleu gives sacrebleu's BLEU on a corpus where every order 1..max_n has matches (the
    first check's corpus): then a number above 0 where some p_n is 0 comes from how the zero precision is
    treated, a smoothing."""
    hyps, refs = _random_corpus(0)
    try:
        got = _as_number(corpus_bleu([list(h) for h in hyps], [list(r) for r in refs], max_n=max_n)
                         if max_n != 4 else corpus_bleu([list(h) for h in hyps], [list(r) for r in refs]))
    except CheckTimeout:
        raise
    except Exception:  # noqa: BLE001  (it fails there: nothing to infer)
        return False
    expected = _sacrebleu(hyps, refs, max_n)
    return expected > 0 and math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6)


def _confirmed(corpus_bleu, names, max_n):
    """The named mistakes that also give the learner's number on two other corpora: a mistake that matches one
    small corpus by chance (a count that happens to equal another) is not named."""
    if not names:
        return names
    kept = list(names)
    for seed, n in ((101, 9), (102, 6), (104, 9)):  # (104: hypotheses longer than their references, 59 to 56)
        hyps, refs = _random_corpus(seed, n=n)
        try:
            got = _as_number(corpus_bleu([list(h) for h in hyps], [list(r) for r in refs], max_n=max_n)
                             if max_n != 4 else corpus_bleu([list(h) for h in hyps], [list(r) for r in refs]))
        except CheckTimeout:
            raise
        except Exception:  # noqa: BLE001  (it fails on that corpus: nothing to confirm with)
            return []
        values = _bleu_mistakes(hyps, refs, max_n)[1]
        kept = [d for d in kept if d in values and math.isclose(got, values[d], rel_tol=1e-6, abs_tol=1e-6)]
    return kept


BLEU_HINT = ("BP * exp(mean over n of log p_n), p_n = clipped n-gram matches / hypothesis n-grams, both "
             "summed over the corpus; BP = min(1, exp(1 - ref_len / hyp_len)) with the corpus lengths; times "
             "100")


def _random_corpus(seed, n=30):
    rng = random.Random(seed)
    words = "a the cat dog sat on mat big red runs".split()
    refs = [[rng.choice(words) for _ in range(rng.randint(3, 12))] for _ in range(n)]
    hyps = [r[: max(1, len(r) - rng.randint(0, 3))] + [rng.choice(words)] for r in refs]
    hyps = [[w if rng.random() > 0.25 else rng.choice(words) for w in h] for h in hyps]
    hyps[3], refs[5] = ["the"], ["a", "dog"]  # a one-word hypothesis and a two-word reference
    return hyps, refs


@register("corpus_bleu", "equals sacrebleu's corpus BLEU on a small corpus")
def _bleu_corpus(corpus_bleu):
    hyps, refs = _random_corpus(0)
    _expect_bleu(corpus_bleu, hyps, refs, 4, "corpus_bleu(30 hypotheses, 30 references)", BLEU_HINT)


@register("corpus_bleu", "clips n-gram counts by the reference ('the the the the')")
def _bleu_clip(corpus_bleu):
    _expect_bleu(corpus_bleu, [["the", "the", "the", "the"]], [["the", "cat", "the", "mat"]], 1,
                 "corpus_bleu([['the', 'the', 'the', 'the']], [['the', 'cat', 'the', 'mat']], max_n=1)",
                 "'the' occurs twice in the reference, so at most 2 of the 4 count: p_1 = 2/4, BLEU 50")
    hyps = [["the", "the", "cat", "the", "cat", "sat"], ["a", "a", "dog", "a", "a", "runs"]]
    refs = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "runs", "a", "lot"]]
    _expect_bleu(corpus_bleu, hyps, refs, 2, "corpus_bleu(repeated words, max_n=2)",
                 "clip each n-gram's count by its count in the reference")


@register("corpus_bleu", "applies the brevity penalty to short hypotheses")
def _bleu_brevity(corpus_bleu):
    hyps = [["a", "b", "c", "d", "e"], ["x", "y", "z", "w"]]
    refs = [["a", "b", "c", "d", "e", "f", "g", "h"], ["x", "y", "z", "w", "v", "u"]]
    _expect_bleu(corpus_bleu, hyps, refs, 4, "corpus_bleu(two exact prefixes of their references: 9 of 14 "
                                             "tokens)",
                 "BP = exp(1 - 14 / 9) when the hypotheses (9 tokens) are shorter than the references (14)")
    _expect_bleu(corpus_bleu, [["a", "b", "c", "d", "e", "f"]], [["a", "b", "c", "d"]], 4,
                 "corpus_bleu(a hypothesis longer than its reference)",
                 "no brevity penalty when hyp_len >= ref_len: BP = min(1, exp(1 - ref_len / hyp_len))")
    # an empty output still counts its reference's length; an empty reference its output's n-grams and length
    _expect_bleu(corpus_bleu, [list("abcde"), []], [list("abcde"), list("vwxyz")], 4,
                 "corpus_bleu([list('abcde'), []], [list('abcde'), list('vwxyz')]) (an empty hypothesis)",
                 "the empty hypothesis adds 5 to ref_len: BP = exp(1 - 10 / 5)")
    _expect_bleu(corpus_bleu, [list("abcde"), list("xyz")], [list("abcde"), []], 4,
                 "corpus_bleu([list('abcde'), list('xyz')], [list('abcde'), []]) (an empty reference)",
                 "the hypothesis of the empty reference adds its unmatched n-grams to the precisions' "
                 "denominators")


@register("corpus_bleu", "sums n-gram counts over the corpus (not an average of sentence scores)")
def _bleu_corpus_counts(corpus_bleu):
    hyps = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "runs"],
            ["big", "red", "dog", "sat", "down"]]
    refs = [["the", "cat", "sat", "on", "a", "mat"], ["the", "dog", "runs", "fast"],
            ["a", "big", "red", "dog", "sat"]]
    _expect_bleu(corpus_bleu, hyps, refs, 4, "corpus_bleu(3 sentences)",
                 "sum the matches and the n-gram counts of all sentences, then compute one score")


@register("corpus_bleu", "uses max_n")
def _bleu_max_n(corpus_bleu):
    hyps, refs = _random_corpus(1, n=12)
    for max_n in (2, 3):
        _expect_bleu(corpus_bleu, hyps, refs, max_n, f"corpus_bleu(12 sentences, max_n={max_n})",
                     "n-grams of orders 1..max_n, and the mean of their log precisions over max_n orders")


@register("corpus_bleu", "no smoothing: 0 when some n-gram order has no match")
def _bleu_zero(corpus_bleu):
    _expect_bleu(corpus_bleu, [["a", "b", "c", "d"], ["e", "f"]], [["a", "b", "c", "x"], ["e", "f"]], 4,
                 "corpus_bleu([['a', 'b', 'c', 'd'], ['e', 'f']], [['a', 'b', 'c', 'x'], ['e', 'f']])",
                 "the only 4-gram does not match: p_4 = 0, so BLEU = 0 (no smoothing)")
    _expect_bleu(corpus_bleu, [["a", "b", "c"]], [["a", "b", "c"]], 4, "corpus_bleu([['a', 'b', 'c']], same)",
                 "a 3-token corpus has no 4-gram: p_4 = 0/0 counts as 0, so BLEU = 0 (as sacrebleu)")
    # what an untrained model's translations can be
    _expect_bleu(corpus_bleu, [[], []], [["a", "b", "c", "d", "e"], ["f", "g"]], 4,
                 "corpus_bleu([[], []], [['a', 'b', 'c', 'd', 'e'], ['f', 'g']]) (empty hypotheses)",
                 "no output at all: no n-gram matches, so BLEU = 0")


@register("corpus_bleu", "a perfect match scores 100 (a 0..100 scale)")
def _bleu_perfect(corpus_bleu):
    hyps = [["the", "cat", "sat", "on", "the", "mat"], ["a", "big", "dog", "runs"]]
    _expect_bleu(corpus_bleu, hyps, [list(h) for h in hyps], 4, "corpus_bleu(hypotheses equal to their "
                                                                "references)",
                 "every precision is 1 and BP is 1: BLEU = 100")
