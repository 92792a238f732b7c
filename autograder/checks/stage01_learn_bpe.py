"""Stage 01's checks of learn_bpe: against subword-nmt's merges (the fixture), with variants that name a
mistake."""
from __future__ import annotations

import operator
import time
from collections import Counter

from ..explain import _describe_exception
from ..registry import CheckFailure, register
from ._util import diagnose, fmt
from .stage01_tokenization import END, _as_merges, _case, _merge_variant, _OnePass, _start


def _learn_variant(corpus, num_merges, min_frequency, tie="max", weighted=True, end="joined", merge="left",
                   stop="lt", extra=0, across=False, lower=False, lines=False):
    """BPE learned by recounting every pair at each step; the keywords select a classic mistake."""
    if lower:
        corpus = [line.lower() for line in corpus]
    if lines:  # each line one word, its spaces ordinary characters
        counts = Counter(line for line in corpus if line)
        words, freqs = [_start(line, end) for line in counts], list(counts.values())
    elif across:  # each line one sequence: the words' symbols in a row
        counts = Counter(tuple(s for w in line.split(" ") if w for s in _start(w)) for line in corpus)
        words, freqs = list(counts), list(counts.values())
    else:
        counts = Counter(w for line in corpus for w in line.split(" ") if w)
        words = [_start(w, end) for w in counts]
        freqs = [counts[w] if weighted else 1 for w in counts]
    merges = []
    while len(merges) < num_merges + extra:
        stats = Counter()
        for symbols, f in zip(words, freqs):
            for pair in zip(symbols, symbols[1:]):
                stats[pair] += f
        if not stats:
            break
        if tie == "min":
            best = min(stats, key=lambda p: (-stats[p], p))
        elif tie == "first":
            best = max(stats, key=stats.get)
        else:
            best = max(stats, key=lambda p: (stats[p], p))
        if (stop == "lt" and stats[best] < min_frequency) or (stop == "le" and stats[best] <= min_frequency):
            break
        merges.append(best)
        if stop == "after" and stats[best] < min_frequency:
            break
        words = [_merge_variant(s, best, merge) for s in words]
    return merges


LINES_AS_WORDS = ("each line counted as one word (its spaces ordinary characters): corpus is a list of "
                  "LINES; split each line into words (line.split()) and start every word as its characters")
LEARN_MISTAKES = {
    # first: the other variants may run out of _learn_mistakes' time budget on a busy machine, and this one is
    # seen only on the large corpora (the small ones have no capitals), where no other check names it
    "the corpus was lowercased: BPE takes the text as it is ('I' and 'i' are different "
    "symbols)": dict(lower=True),
    "ties broken toward the smallest pair: break a tie by the greatest pair, "
    "max(stats, key=lambda p: (stats[p], p))": dict(tie="min"),
    "ties go to the first pair counted (max(stats, key=stats.get) or most_common keeps the first of equal "
    "counts): break a tie by the greatest pair, max(stats, key=lambda p: (stats[p], p))": dict(tie="first"),
    "word frequencies ignored: each distinct word counted once. Weight a word's pairs by how often the "
    "word occurs (stats[pair] += freq)": dict(weighted=False),
    "`</w>` missing: a word starts as its characters with `</w>` joined to the last one "
    "(low -> l o w</w>)": dict(end="missing"),
    "`</w>` added as a separate symbol: join it to the last character (low -> l o w</w>, not l o w </w>)":
        dict(end="separate"),
    "`</w>` split into the characters < / w >: tuple(word + '</w>') splits the marker too; join it to the "
    "last character as one symbol (low -> l o w</w>)": dict(end="chars"),
    "overlapping occurrences merged: after merging the pair at i, continue at i + 2 "
    "(a a a -> aa a)": dict(merge="overlap"),
    "occurrences merged from right to left: scan the word left to right (a a a -> aa a, not a aa)":
        dict(merge="right"),
    "the pair matched inside symbols (str.replace on the space-joined word, e.g. 'a b' inside 'aa b'): merge "
    "whole symbols only, as merge_pair does, (symbols[i], symbols[i + 1]) == pair": dict(merge="substring"),
    "min_frequency ignored: stop as soon as the best pair is seen fewer than min_frequency times":
        dict(stop="ignore"),
    "stopped at count == min_frequency: a pair seen exactly min_frequency times is still merged "
    "(break only when count < min_frequency)": dict(stop="le"),
    "the pair below min_frequency kept: compare the best count with min_frequency BEFORE appending the pair":
        dict(stop="after"),
    "pairs taken across words (each line one sequence of symbols): count and merge pairs inside each word "
    "only, every word its own symbol sequence": dict(across=True),
    "one merge too few: make num_merges merges (while len(merges) < num_merges)": dict(extra=-1),
    "one merge too many: stop once len(merges) == num_merges": dict(extra=1),
    # last: on a corpus with merges across a space, _learn_shape_hint names it before any variant is computed
    LINES_AS_WORDS: dict(lines=True),
}


def _learn_shape_hint(got, corpus=None) -> str | None:
    """A mistake that shows in the merges themselves, whatever the corpus."""
    if corpus is not None:
        text = "".join(corpus)
        chars = set(text) | set(text.lower()) | set(text.upper())  # a change of case has its own hint
        foreign = next((m for m in got if any(set(s.replace(END, "")) - chars for s in m)), None)
        if foreign is not None and all(set(s.replace(END, "")) - chars <= set(END) for m in got for s in m):
            return (f"the merge {foreign} holds pieces of the marker: `</w>` was split into the characters < "
                    "/ w > (tuple(word + '</w>')); a word starts as tuple(word[:-1]) + (word[-1] + '</w>',)")
        if foreign is not None:
            return (f"the merge {foreign} holds characters that are not in this corpus: words from an "
                    "earlier call were counted too. Build the word counts inside the function at every call "
                    "(no mutable default argument such as counts=Counter(), no global)")
    if len(set(got)) < len(got):
        twice = next(m for i, m in enumerate(got) if m in got[:i])
        return (f"the same pair {twice} merged twice: after choosing a pair, merge it in every word "
                "(merge_pair) before counting the pairs again")
    if any(any(c.isspace() for c in s) for m in got for s in m):
        return ("a merged symbol holds whitespace: corpus is a list of LINES; split each line into words "
                "(line.split()) and start every word as its characters")
    return None


def _learn_mistakes(corpus, num_merges, min_frequency, budget: float = 3.0) -> dict:
    """{description: the merges that mistake gives}, lazily computed, given up after `budget` seconds."""
    start = time.perf_counter()

    def lazy(kw):
        def run():
            if time.perf_counter() - start > budget:
                return None
            if kw.get("lower") and all(line == line.lower() for line in corpus):
                return None  # nothing to lowercase: the variant is the right answer
            return _learn_variant(corpus, num_merges, min_frequency, **kw)
        return run
    return {d: lazy(kw) for d, kw in LEARN_MISTAKES.items()}


def _learn_small(learn_bpe, name, hint, defaults=False):
    """The learner's merges on a small stored case equal subword-nmt's; a differing answer is named."""
    corpus, n, m, expected = _case(name)
    call = f"learn_bpe({corpus!r}, {n}" + ("" if defaults else f", min_frequency={m}") + ")"
    lines = list(corpus)
    got = learn_bpe(lines, n) if defaults else learn_bpe(lines, n, min_frequency=m)
    _corpus_unchanged(lines, corpus, call)
    got = _as_merges(got, call)
    if got == expected:
        return
    mistakes = _learn_mistakes(corpus, n, m)
    hint = _learn_shape_hint(got, corpus) or diagnose(got, mistakes, operator.eq, every=True) or hint
    # the answer fits several mistakes: a second call tells
    if LINES_AS_WORDS in hint and hint != LINES_AS_WORDS:
        if _lines_as_words(learn_bpe):
            hint = LINES_AS_WORDS
        else:
            del mistakes[LINES_AS_WORDS]
            hint = diagnose(got, mistakes, operator.eq, every=True) or hint
    raise CheckFailure(call + " (merges made by subword-nmt)", fmt(expected), fmt(got), hint)


def _lines_as_words(learn_bpe) -> bool:
    """Whether learn_bpe merges across the space of 'a b' (two one-letter words: nothing to merge)."""
    try:
        got = learn_bpe(["a b"], 1, min_frequency=1)
        return any(isinstance(s, str) and " " in s for m in got for s in m)
    except Exception:
        return False


def _corpus_unchanged(lines, corpus, call):
    if lines != list(corpus):
        raise CheckFailure(f"{call}: the corpus list passed in", "unchanged after the call", fmt(lines),
                           "read the lines without modifying the list (build new lists and dicts instead)")


@register("learn_bpe", "learns the docstring example: 2 merges of 'low low low lower' (from a list or a "
                       "generator)")
def _learn_example(learn_bpe):
    _learn_small(learn_bpe, "docstring", "merge the most frequent pair, count the pairs again, repeat: "
                 "(l, o) is seen 4 times, then (lo, w</w>) 3 times")
    # the contract's iterables: corpus is any iterable of lines (a generator, an open file), read once
    corpus, n, m, expected = _case("docstring")
    call = f"learn_bpe(a generator of {list(corpus)!r}, {n}, min_frequency={m})"
    lines = _OnePass(corpus)
    try:
        got = _as_merges(learn_bpe(lines, n, min_frequency=m), call)
    except TypeError as e:
        if "item assignment" in str(e):
            return  # the corpus is written into (or indexed): the in-place check says so, once
        raise
    if got != expected:
        raise CheckFailure(call, fmt(expected) + " (as from a list)", fmt(got),
                           "the corpus was read twice (a generator is empty the second time): read it once "
                           "into a list first, corpus = list(corpus)" if lines.read_again or not got else
                           "learn_bpe reads any iterable of lines: take corpus = list(corpus) first")


@register("learn_bpe", "weights pairs by word frequency")
def _learn_weighted(learn_bpe):
    for name in ("weighted", "weighted_2"):
        _learn_small(learn_bpe, name, "count the words first (Counter), then add each word's count to its "
                                      "pairs")


@register("learn_bpe", "breaks ties toward the greatest pair: max(stats, key=lambda p: (stats[p], p))")
def _learn_ties(learn_bpe):
    for name in ("ties", "ties_2"):
        _learn_small(learn_bpe, name, "among pairs of equal count take the lexicographically greatest: "
                     "max(stats, key=lambda p: (stats[p], p))")


EMPTY_WORDS = ("line.split(' ') gives '' between two spaces (and before a leading or after a trailing one): "
               "skip the empty strings, `if word`, as subword-nmt does (an empty word has no last character "
               "for `</w>`)")


@register("learn_bpe", "joins </w> to each word's last character; one-letter words have no pair; "
          "words between runs of spaces")
def _learn_end(learn_bpe):
    _learn_small(learn_bpe, "end_of_word", "a word starts as tuple(word[:-1]) + (word[-1] + '</w>',)")
    corpus, n, m, expected = _case("spaces")
    try:
        _learn_small(learn_bpe, "spaces", EMPTY_WORDS)
    except IndexError as e:  # ''[-1]: the empty strings of line.split(' ') taken for words
        raise CheckFailure(f"learn_bpe({corpus!r}, {n}, min_frequency={m}) (runs of spaces, spaces at the "
                           "ends)",
                           fmt(expected), f"an error: {_describe_exception(e)}", EMPTY_WORDS) from None


@register("learn_bpe", "merges non-overlapping occurrences, left to right (a a a -> aa a)")
def _learn_overlap(learn_bpe):
    _learn_small(learn_bpe, "overlap", "merge like merge_pair: left to right, continuing after a merged pair")


@register("learn_bpe", "stops when the best pair is seen fewer than min_frequency (default 2) times, "
          "or no pair is left")
def _learn_min_frequency(learn_bpe):
    for name in ("min_frequency_1", "min_frequency_2", "min_frequency_3", "no_pair_left"):
        _learn_small(learn_bpe, name, "stop when max count < min_frequency, or when no pair is left "
                     "(max() of an empty Counter raises)")
    _learn_small(learn_bpe, "min_frequency_default", "the default is min_frequency=2", defaults=True)


def _count_at(corpus, merges, k, pairs):
    """Weighted counts of `pairs` after the first k merges (the correct procedure)."""
    counts = Counter(w for line in corpus for w in line.split(" ") if w)
    words = {w: _start(w) for w in counts}
    for pair in merges[:k]:
        words = {w: _merge_variant(s, pair) for w, s in words.items()}
    stats = Counter()
    for w, s in words.items():
        for pair in zip(s, s[1:]):
            stats[pair] += counts[w]
    return [stats.get(p, 0) for p in pairs]


def _learn_fixture(learn_bpe, name):
    corpus, n, m, expected = _case(name)
    words = len({w for line in corpus for w in line.split(" ") if w})
    call = (f"learn_bpe(corpus of {len(corpus)} lines, {words} distinct words, {n}, min_frequency={m}) "
            f"against subword-nmt")
    lines = list(corpus)
    got = learn_bpe(lines, n, min_frequency=m)
    _corpus_unchanged(lines, corpus, call)
    got = _as_merges(got, call)
    if got == expected:
        return
    k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    hint = _learn_shape_hint(got, corpus) or diagnose(got, _learn_mistakes(corpus, n, m), operator.eq,
                                                      every=True)
    if k < len(got) and k < len(expected):
        c_exp, c_got = _count_at(corpus, expected, k, [expected[k], got[k]])
        if hint is None:
            hint = ("equal counts: ties go to the greatest pair, max(stats, key=lambda p: (stats[p], p))"
                    if c_exp == c_got else "the pair counts are off at this point: check that every word's "
                                           "pairs are counted with its frequency after each merge")
        raise CheckFailure(f"{call}: merge {k} (0-based) differs", f"{expected[k]} (seen {c_exp} times then)",
                           f"{got[k]} (seen {c_exp if c_exp == c_got else c_got} times then)", hint)
    if len(got) > len(expected):
        c_next = _count_at(corpus, expected, len(expected), [got[len(expected)]])[0]
        raise CheckFailure(f"{call}: number of merges", f"{len(expected)} merges (the next best pair is seen "
                           f"{c_next} times, fewer than min_frequency={m})" if len(expected) < n else
                           f"{n} merges (num_merges)", f"{len(got)}",
                           hint or "stop after num_merges merges, or when the best count < min_frequency")
    c_next = _count_at(corpus, expected, k, [expected[k]])[0]
    raise CheckFailure(f"{call}: number of merges", f"{len(expected)} merges (merge {k} is {expected[k]}, "
                                                    f"seen {c_next} times)", f"{len(got)}",
                       hint or "keep merging while the best count >= min_frequency and merges < num_merges")


@register("learn_bpe", "equals subword-nmt on a corpus of 232 words (100 merges, min_frequency=2)")
def _learn_fixture_a(learn_bpe):
    _learn_fixture(learn_bpe, "corpus_a")


@register("learn_bpe", "equals subword-nmt until no pair is left (min_frequency=1), and with min_frequency=3")
def _learn_fixture_bc(learn_bpe):
    _learn_fixture(learn_bpe, "corpus_b")
    _learn_fixture(learn_bpe, "corpus_c")
