"""Stage 01: byte-pair encoding, the tokenizer, padding and the scaled token embedding.

BPE is checked against merges and segmentations made by subword-nmt, the reference implementation of
Sennrich et al. (2016), stored in autograder/fixtures/stage01_bpe.json (autograder/fixtures/stage01_bpe.py
makes them; tests/test_checks_stage01.py verifies them). The small variants below (`_learn_variant`, ...) are written
from the contract only to NAME a mistake once the learner's answer already differs from the fixture:
they are never the measure of right and wrong.
"""
from __future__ import annotations

import functools
import json
import math
import numbers
import operator
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from ..explain import _describe_exception
from ..registry import CheckFailure, register
from ._util import build, close, diagnose, expect_attr, expect_close, expect_shape, fmt, learner_folder, seeded

END = "</w>"
PAD, BOS, EOS, UNK = 0, 1, 2, 3
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "stage01_bpe.json"


@functools.lru_cache(maxsize=1)
def _fixture() -> dict:
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def _case(name: str) -> tuple[list[str], int, int, list[tuple[str, str]]]:
    """(corpus lines, num_merges, min_frequency, subword-nmt's merges) of a stored case."""
    c = _fixture()["learn"][name]
    return list(c["corpus"]), c["num_merges"], c["min_frequency"], [tuple(m) for m in c["merges"]]


def _segmentation(name: str) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """(merges, {word: subword-nmt's segmentation in our notation}) of a stored case."""
    s = _fixture()["segment"][name]
    return _case(s["merges_of"])[3], dict(s["words"])


def _expect(got, expected, what: str, hint: str | None = None, mistakes: dict | None = None) -> None:
    """Fail unless got == expected; `mistakes` maps a mistake's description to the answer it gives
    (or to a function computing it, called only when needed): each one got equals is named."""
    if got == expected:
        return
    hint = diagnose(got, mistakes, operator.eq, every=True) or hint
    raise CheckFailure(what, fmt(expected), fmt(got), hint)


# ------------------------------------------------------------------------------ answers' shapes
def _as_symbols(got, what: str, kind=(list, tuple)) -> list:
    """The learner's sequence of symbols as a list of str (a clear failure for anything else)."""
    if not isinstance(got, kind) or not all(isinstance(s, str) for s in got):
        raise CheckFailure(what, "a " + " or ".join(k.__name__ for k in kind) + " of strings",
                           f"{type(got).__name__} {fmt(got)}", "return the symbols, e.g. ['low', 'er</w>']")
    return list(got)


def _as_merges(got, what: str) -> list[tuple[str, str]]:
    """The learner's merges as a list of (left, right) tuples."""
    ok = isinstance(got, (list, tuple)) and all(
        isinstance(m, (list, tuple)) and len(m) == 2 and all(isinstance(s, str) for s in m) for m in got)
    if not ok:
        raise CheckFailure(what, "a list of (left, right) pairs of strings, e.g. [('l', 'o'), ('lo', 'w</w>')]",
                           f"{type(got).__name__} {fmt(got)}",
                           "append each merged pair itself (a tuple of two symbols) to the list, and return it")
    return [tuple(m) for m in got]


def _as_stats(got, what: str) -> dict:
    """The learner's pair counts as a plain dict, pairs counted 0 times left out."""
    if not isinstance(got, Mapping):
        raise CheckFailure(what, "a dict (or Counter) {(left, right): count}", f"{type(got).__name__} {fmt(got)}",
                           "return the Counter (or dict) of pair counts")
    out = {}
    for pair, count in got.items():
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise CheckFailure(what + ": keys", "pairs of adjacent symbols as tuples, e.g. ('l', 'o')",
                               fmt(pair), "count zip(symbols, symbols[1:]): each key is a tuple (left, right)")
        if count:
            out[pair] = count
    return out


# ------------------------------------------------------------------- variants (to name mistakes)
def _start(word: str, end: str = "joined") -> tuple[str, ...]:
    if end == "missing":
        return tuple(word)
    if end == "separate":
        return tuple(word) + (END,)
    if end == "chars":  # tuple(word + '</w>'): the marker split into its characters
        return tuple(word + END)
    return tuple(word[:-1]) + (word[-1] + END,)


def _merge_variant(symbols, pair, how: str = "left") -> tuple[str, ...]:
    """Merge `pair` in `symbols`: correctly ('left'), or as the classic mistakes do."""
    symbols = tuple(symbols)
    if how == "substring":  # str.replace on the joined text: matches inside symbols
        return tuple(" ".join(symbols).replace(" ".join(pair), "".join(pair)).split(" "))
    if how == "concat":  # symbols[i] + symbols[i + 1] == pair[0] + pair[1]: ('ab', 'c') taken for ('a', 'bc')
        out, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and symbols[i] + symbols[i + 1] == "".join(pair):
                out.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        return tuple(out)
    if how == "left_only":  # only the left symbol compared: merges with whatever follows
        out, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and symbols[i] == pair[0]:
                out.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        return tuple(out)
    if how == "drop_last":  # the loop stops one short (while i < len - 1) and the last symbol is lost when unmerged
        out, i = [], 0
        while i < len(symbols) - 1:
            if (symbols[i], symbols[i + 1]) == pair:
                out.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        return tuple(out)
    if how == "right":  # right to left: 'a a a' -> 'a aa'
        out, i = [], len(symbols) - 1
        while i >= 0:
            if i >= 1 and (symbols[i - 1], symbols[i]) == pair:
                out.append(symbols[i - 1] + symbols[i])
                i -= 2
            else:
                out.append(symbols[i])
                i -= 1
        return tuple(reversed(out))
    out, i, done = [], 0, False
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair and not (how == "first" and done):
            out.append(symbols[i] + symbols[i + 1])
            i += 1 if how == "overlap" else 2  # overlap: the right symbol is used again
            done = True
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


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


LINES_AS_WORDS = ("each line counted as one word (its spaces ordinary characters): corpus is a list of LINES; split "
                  "each line into words (line.split()) and start every word as its characters")
LEARN_MISTAKES = {
    # first: the other variants may run out of _learn_mistakes' time budget on a busy machine, and this one is
    # seen only on the large corpora (the small ones have no capitals), where no other check names it
    "the corpus was lowercased: BPE takes the text as it is ('I' and 'i' are different symbols)": dict(lower=True),
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
    "`</w>` split into the characters < / w >: tuple(word + '</w>') splits the marker too; join it to the last "
    "character as one symbol (low -> l o w</w>)": dict(end="chars"),
    "overlapping occurrences merged: after merging the pair at i, continue at i + 2 "
    "(a a a -> aa a)": dict(merge="overlap"),
    "occurrences merged from right to left: scan the word left to right (a a a -> aa a, not a aa)":
        dict(merge="right"),
    "the pair matched inside symbols (str.replace on the space-joined word, e.g. 'a b' inside 'aa b'): merge whole "
    "symbols only, as merge_pair does, (symbols[i], symbols[i + 1]) == pair": dict(merge="substring"),
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
            return (f"the merge {foreign} holds pieces of the marker: `</w>` was split into the characters < / w > "
                    "(tuple(word + '</w>')); a word starts as tuple(word[:-1]) + (word[-1] + '</w>',)")
        if foreign is not None:
            return (f"the merge {foreign} holds characters that are not in this corpus: words from an earlier call "
                    "were counted too. Build the word counts inside the function at every call (no mutable default "
                    "argument such as counts=Counter(), no global)")
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


def _apply_variant(word, merges, how="priority"):
    """A word's segmentation by the contract ('priority'), or as the classic mistakes make it."""
    ranks = {}
    for i, pair in enumerate(merges):
        ranks.setdefault(tuple(pair), i)
    end = {"separate_end": "separate", "missing_end": "missing", "chars_end": "chars"}.get(how, "joined")
    symbols = _start(word.lower() if how == "lower" else word, end)
    if how == "once":
        for pair in merges:
            symbols = _merge_variant(symbols, tuple(pair))
        return list(symbols)
    if how == "end_after":
        symbols = tuple(word)
    merge = {"overlap": "overlap", "right": "right"}.get(how, "left")
    while len(symbols) > (2 if how == "two" else 1):
        pairs = [p for p in zip(symbols, symbols[1:]) if p in ranks]
        if not pairs:
            break
        pair = pairs[0] if how == "leftmost" else max(pairs, key=ranks.get) if how == "latest" else min(
            pairs, key=ranks.get)
        symbols = _merge_variant(symbols, pair, merge)
    symbols = list(symbols)
    if how == "end_after":
        symbols[-1] += END
    if how == "drop_end":
        symbols[-1] = symbols[-1][: -len(END)] if symbols[-1].endswith(END) else symbols[-1]
    return symbols


APPLY_MISTAKES = {
    "merges applied left to right in the word (the first pair found in merges) instead of by priority: "
    "at each step merge the pair that comes EARLIEST in the merges list": "leftmost",
    "each merge applied once in list order: after a merge, look again for the earliest merge present "
    "(a new symbol can enable an earlier merge), until none applies": "once",
    "`</w>` dropped from the last symbol: keep it (lower -> ['low', 'er</w>'])": "drop_end",
    "`</w>` kept as a separate symbol: join it to the last character (low -> l o w</w>)": "separate_end",
    "`</w>` never added: a word starts as l o w</w>, the last character carrying `</w>`": "missing_end",
    "`</w>` split into the characters < / w >: tuple(word + '</w>') splits the marker too; start from "
    "tuple(word[:-1]) + (word[-1] + '</w>',)": "chars_end",
    "overlapping occurrences merged: after merging the pair at i, continue at i + 2 (a a a -> aa a)": "overlap",
    "occurrences merged from right to left: scan left to right (a a a -> aa a, not a aa)": "right",
    "the LATEST merge applied first: at each step merge the pair that comes EARLIEST in the merges list "
    "(min of the ranks, not max)": "latest",
    "`</w>` joined only after merging: start from l o w</w>, so that merges ending in `</w>` can apply": "end_after",
    "stopped with two symbols left (while len(symbols) > 2): keep merging while len(symbols) > 1, a word can end "
    "as one symbol": "two",
    "the word was lowercased: BPE takes the text as it is ('Z' and 'z' are different symbols)": "lower",
}


def _apply_mistakes(word, merges) -> dict:
    return {d: (lambda how=how: _apply_variant(word, merges, how)) for d, how in APPLY_MISTAKES.items()}


# -------------------------------------------------------------------------------- get_pair_stats
def _stats_variant(vocab, how="right"):
    stats = Counter()
    if how == "across":  # all words' symbols in one row
        flat = [s for symbols in vocab for s in symbols]
        for pair in zip(flat, flat[1:]):
            stats[pair] += 1
        return dict(stats)
    for symbols, count in vocab.items():
        if how == "chars":  # characters of the joined word, not symbols
            symbols = "".join(symbols)
        pairs = list(zip(symbols, symbols[1:]))
        if how == "last_missed":  # range(len(symbols) - 2)
            pairs = pairs[:-1]
        for pair in (dict.fromkeys(pairs) if how == "once_per_word" else pairs):
            if how == "assign":
                stats[pair] = count
            else:
                stats[pair] += 1 if how == "unweighted" else count
    return {p: c for p, c in stats.items() if c}


STATS_MISTAKES = {
    "word counts ignored: add the word's count for each pair (stats[pair] += count), not 1": "unweighted",
    "a pair repeated inside a word counted once: count every adjacent position (a a a a</w> holds (a, a) "
    "twice)": "once_per_word",
    "pairs taken across words: pair only neighbours inside one word, zip(symbols, symbols[1:])": "across",
    "a count overwritten (stats[pair] = count): add to it, stats[pair] += count": "assign",
    "the last pair of each word missed (range(len(symbols) - 2)): a word of n symbols has n - 1 pairs, "
    "range(len(symbols) - 1) or zip(symbols, symbols[1:])": "last_missed",
    "pairs of characters of the joined word: pair whole symbols, zip(symbols, symbols[1:]) ('w</w>' is one "
    "symbol)": "chars",
}


def _call_stats(get_pair_stats, vocab, what):
    frozen = {k: v for k, v in vocab.items()}
    got = _as_stats(get_pair_stats(vocab), what)
    if vocab != frozen:
        raise CheckFailure(f"{what}: the vocabulary passed in", "unchanged", fmt(vocab),
                           "count the pairs without modifying the words or their counts")
    again = _as_stats(get_pair_stats(dict(frozen)), what + ", called a second time")
    if again != got:
        raise CheckFailure(f"{what}, called twice", f"the same counts both times, {fmt(got)}", f"{fmt(again)} "
                           "the second time", "counts kept between calls: create a new Counter inside the function at "
                           "every call (a mutable default argument such as stats=Counter(), or a global, keeps "
                           "growing)")
    return got


def _stats_check(get_pair_stats, vocab, what, hint):
    got = _call_stats(get_pair_stats, vocab, what)
    _expect(got, _stats_variant(vocab), what, hint,
            {d: (lambda how=how: _stats_variant(vocab, how)) for d, how in STATS_MISTAKES.items()})


@register("get_pair_stats", "counts adjacent pairs weighted by word counts (the docstring example)")
def _stats_example(get_pair_stats):
    vocab = {("l", "o", "w</w>"): 5, ("l", "o", "t</w>"): 2}
    _stats_check(get_pair_stats, vocab, "get_pair_stats({('l','o','w</w>'): 5, ('l','o','t</w>'): 2})",
                 "for each word, for each pair in zip(symbols, symbols[1:]): stats[pair] += count")


@register("get_pair_stats", "counts a pair every time it occurs in a word")
def _stats_repeats(get_pair_stats):
    vocab = {("a", "a", "a", "a</w>"): 3, ("a", "b", "a", "b", "c</w>"): 2, ("b", "a</w>"): 1}
    _stats_check(get_pair_stats, vocab, "get_pair_stats({('a','a','a','a</w>'): 3, ('a','b','a','b','c</w>'): 2, "
                 "('b','a</w>'): 1})", "count every adjacent position of every word")


@register("get_pair_stats", "pairs stay inside a word; one-symbol words add nothing")
def _stats_words(get_pair_stats):
    vocab = {("a</w>",): 4, ("b", "c</w>"): 1, ("x</w>",): 2, ("c", "a</w>"): 3}
    _stats_check(get_pair_stats, vocab, "get_pair_stats({('a</w>',): 4, ('b','c</w>'): 1, ('x</w>',): 2, "
                 "('c','a</w>'): 3})", "a word of one symbol has no pair; never pair the last symbol of one "
                 "word with the first of another")
    _expect(_call_stats(get_pair_stats, {}, "get_pair_stats({})"), {}, "get_pair_stats({})",
            "an empty vocabulary has no pairs: return an empty Counter")


@register("get_pair_stats", "handles symbols of any length, unicode included (a dict without zero counts)")
def _stats_symbols(get_pair_stats):
    vocab = {("lo", "w", "er</w>"): 2, ("lo", "w</w>"): 7, ("ü", "ber</w>"): 1, ("東", "京</w>"): 4}
    _stats_check(get_pair_stats, vocab, "get_pair_stats({('lo','w','er</w>'): 2, ('lo','w</w>'): 7, "
                 "('ü','ber</w>'): 1, ('東','京</w>'): 4})",
                 "symbols are whole strings: pair symbols[i] with symbols[i + 1], never characters of a symbol")


# ------------------------------------------------------------------------------------ merge_pair
def _merge_check(merge_pair, symbols, pair, what, hint,
                 hows=("overlap", "right", "first", "substring", "left_only", "drop_last", "concat")):
    got = _as_symbols(merge_pair(symbols, pair), what)
    names = {"overlap": "overlapping occurrences merged: after merging the pair at i, continue at i + 2, "
                        "so (a, a, a) -> (aa, a)",
             "right": "occurrences merged from right to left: scan left to right, so (a, a, a) -> (aa, a)",
             "first": "only the first occurrence merged: replace every occurrence of the pair",
             "substring": "the pair matched inside a symbol (str.replace on the joined text): compare whole "
                          "symbols, (symbols[i], symbols[i + 1]) == pair",
             "left_only": "only the left symbol compared (symbols[i] == pair[0]): the right one must match too, "
                     "(symbols[i], symbols[i + 1]) == pair",
             "drop_last": "the last symbol was lost: the loop stopped at len(symbols) - 1; loop while i < len(symbols) "
                          "and append the last symbol when it is not merged",
             "concat": "the joined text of two symbols compared with the joined pair (symbols[i] + symbols[i + 1] == "
                       "'a' + 'bc'): ('ab', 'c') is not the pair ('a', 'bc'); compare the symbols themselves, "
                       "(symbols[i], symbols[i + 1]) == pair"}
    _expect(tuple(got), _merge_variant(symbols, pair), what, hint,
            {names[h]: (lambda h=h: _merge_variant(symbols, pair, h)) for h in hows})


@register("merge_pair", "merges the pair and returns a tuple (the docstring example)")
def _merge_example(merge_pair):
    what = "merge_pair(('l', 'o', 'w</w>'), ('l', 'o'))"
    got = merge_pair(("l", "o", "w</w>"), ("l", "o"))
    _merge_check(merge_pair, ("l", "o", "w</w>"), ("l", "o"), what, "join the two symbols: 'l' + 'o' -> 'lo'")
    if not isinstance(got, tuple):
        raise CheckFailure(f"{what}: type", "a tuple ('lo', 'w</w>')", f"{type(got).__name__} {fmt(got)}",
                           "return tuple(out): the words are keys of a dict, and a list cannot be one")
    _merge_check(merge_pair, ("l", "o", "w</w>"), ("o", "w</w>"), "merge_pair(('l', 'o', 'w</w>'), ('o', 'w</w>'))",
                 "the pair may end in `</w>`: 'o' + 'w</w>' -> 'ow</w>'")


@register("merge_pair", "never merges overlapping occurrences: (a, a, a) -> (aa, a)")
def _merge_overlap(merge_pair):
    for symbols in (("a", "a", "a"), ("a", "a", "a", "a</w>"), ("a", "a", "a", "a", "a</w>"),
                    ("b", "a", "a", "a", "a")):
        _merge_check(merge_pair, symbols, ("a", "a"), f"merge_pair({symbols}, ('a', 'a'))",
                     "scan left to right; after merging at i, continue at i + 2")


@register("merge_pair", "replaces every occurrence of the pair")
def _merge_every(merge_pair):
    for symbols, pair in ((("l", "o", "w", "l", "o", "t</w>"), ("l", "o")),
                          (("a", "b", "c", "a", "b", "a", "b</w>"), ("a", "b")),
                          (("n", "a", "n", "a", "n", "a</w>"), ("n", "a"))):
        _merge_check(merge_pair, symbols, pair, f"merge_pair({symbols}, {pair})",
                     "keep scanning after the first match until the end of the word")


@register("merge_pair", "matches whole symbols only, in order; leaves other words unchanged")
def _merge_whole(merge_pair):
    cases = ((("lo", "w</w>"), ("o", "w</w>")),     # 'o w</w>' is inside 'lo w</w>' as text only
             (("ab", "c"), ("b", "c")),
             (("a", "bc", "d</w>"), ("a", "b")),
             (("a", "c</w>"), ("a", "b")),            # the left symbol alone is not the pair
             (("b", "a", "c</w>"), ("a", "b")),       # the pair reversed is not the pair
             (("a</w>",), ("a", "b")),                # one symbol: nothing to merge
             (("x", "y</w>"), ("x", "y")),            # 'y' is not 'y</w>'
             (("ab", "c</w>"), ("a", "bc</w>")))      # the same text 'abc</w>', other symbols
    for symbols, pair in cases:
        _merge_check(merge_pair, symbols, pair, f"merge_pair({symbols}, {pair})",
                     "merge only where (symbols[i], symbols[i + 1]) == pair exactly; otherwise keep the symbols")


# ------------------------------------------------------------------------------------- learn_bpe
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
    if LINES_AS_WORDS in hint and hint != LINES_AS_WORDS:  # the answer fits several mistakes: a second call tells
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


@register("learn_bpe", "learns the docstring example: 2 merges of 'low low low lower' (from a list or a generator)")
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
                           "the corpus was read twice (a generator is empty the second time): read it once into a "
                           "list first, corpus = list(corpus)" if lines.read_again or not got else
                           "learn_bpe reads any iterable of lines: take corpus = list(corpus) first")


@register("learn_bpe", "weights pairs by word frequency")
def _learn_weighted(learn_bpe):
    for name in ("weighted", "weighted_2"):
        _learn_small(learn_bpe, name, "count the words first (Counter), then add each word's count to its pairs")


@register("learn_bpe", "breaks ties toward the greatest pair: max(stats, key=lambda p: (stats[p], p))")
def _learn_ties(learn_bpe):
    for name in ("ties", "ties_2"):
        _learn_small(learn_bpe, name, "among pairs of equal count take the lexicographically greatest: "
                     "max(stats, key=lambda p: (stats[p], p))")


EMPTY_WORDS = ("line.split(' ') gives '' between two spaces (and before a leading or after a trailing one): skip "
               "the empty strings, `if word`, as subword-nmt does (an empty word has no last character for `</w>`)")


@register("learn_bpe", "joins </w> to each word's last character; one-letter words have no pair; "
          "words between runs of spaces")
def _learn_end(learn_bpe):
    _learn_small(learn_bpe, "end_of_word", "a word starts as tuple(word[:-1]) + (word[-1] + '</w>',)")
    corpus, n, m, expected = _case("spaces")
    try:
        _learn_small(learn_bpe, "spaces", EMPTY_WORDS)
    except IndexError as e:  # ''[-1]: the empty strings of line.split(' ') taken for words
        raise CheckFailure(f"learn_bpe({corpus!r}, {n}, min_frequency={m}) (runs of spaces, spaces at the ends)",
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
    hint = _learn_shape_hint(got, corpus) or diagnose(got, _learn_mistakes(corpus, n, m), operator.eq, every=True)
    if k < len(got) and k < len(expected):
        c_exp, c_got = _count_at(corpus, expected, k, [expected[k], got[k]])
        if hint is None:
            hint = ("equal counts: ties go to the greatest pair, max(stats, key=lambda p: (stats[p], p))"
                    if c_exp == c_got else "the pair counts are off at this point: check that every word's pairs "
                    "are counted with its frequency after each merge")
        raise CheckFailure(f"{call}: merge {k} (0-based) differs", f"{expected[k]} (seen {c_exp} times then)",
                           f"{got[k]} (seen {c_exp if c_exp == c_got else c_got} times then)", hint)
    if len(got) > len(expected):
        c_next = _count_at(corpus, expected, len(expected), [got[len(expected)]])[0]
        raise CheckFailure(f"{call}: number of merges", f"{len(expected)} merges (the next best pair is seen "
                           f"{c_next} times, fewer than min_frequency={m})" if len(expected) < n else
                           f"{n} merges (num_merges)", f"{len(got)}",
                           hint or "stop after num_merges merges, or when the best count < min_frequency")
    c_next = _count_at(corpus, expected, k, [expected[k]])[0]
    raise CheckFailure(f"{call}: number of merges", f"{len(expected)} merges (merge {k} is {expected[k]}, seen "
                       f"{c_next} times)", f"{len(got)}",
                       hint or "keep merging while the best count >= min_frequency and merges < num_merges")


@register("learn_bpe", "equals subword-nmt on a corpus of 232 words (100 merges, min_frequency=2)")
def _learn_fixture_a(learn_bpe):
    _learn_fixture(learn_bpe, "corpus_a")


@register("learn_bpe", "equals subword-nmt until no pair is left (min_frequency=1), and with min_frequency=3")
def _learn_fixture_bc(learn_bpe):
    _learn_fixture(learn_bpe, "corpus_b")
    _learn_fixture(learn_bpe, "corpus_c")


# ------------------------------------------------------------------------------------- apply_bpe
def _apply_one(apply_bpe, word, merges, expected, what=None, hint=None):
    what = what or f"apply_bpe({word!r}, {merges})"
    given = list(merges)
    got = apply_bpe(word, given)
    if given != list(merges):
        raise CheckFailure(f"{what}: the merges list passed in", "unchanged after the call",
                           f"{len(given)} merges, {fmt(given)}", "read the merges without modifying the list "
                           "(no pop, sort, append or assignment to merges[i]); build a new dict or list instead")
    got = _as_symbols(got, what)
    key = tuple(tuple(m) for m in merges)
    earlier = [v for k, v in _ANSWERS.get(word, {}).items() if k != key and v != list(expected)]
    mistakes = dict(_apply_mistakes(word, merges))
    # the word's right segmentation under the merges of an earlier call: a cache that ignores the merges
    mistakes["the segmentation of this word under the merges of an EARLIER call came back: a cache keyed by the word "
             "alone (or a global) keeps answers for other merges; key it by (word, merges), or drop it"] = (
        got if got in earlier else None)
    _expect(got, list(expected), what, hint, mistakes)
    if len(_ANSWERS) > 2000:
        _ANSWERS.clear()
    _ANSWERS.setdefault(word, {})[key] = list(expected)


_ANSWERS: dict[str, dict] = {}  # word -> {merges: the right segmentation}, from the calls made so far


def _apply_stored(apply_bpe, case, hint):
    c = _fixture()["apply"][case]
    _apply_one(apply_bpe, c["word"], [tuple(m) for m in c["merges"]], c["subwords"], hint=hint)


@register("apply_bpe", "splits the docstring example: lowest -> low es t</w>")
def _apply_example(apply_bpe):
    _apply_stored(apply_bpe, "docstring", "start from l o w e s t</w>, apply the earliest merge present, repeat")


@register("apply_bpe", "applies the earliest-learned merge first, wherever it is in the word")
def _apply_priority(apply_bpe):
    for case in ("priority", "priority_2"):
        _apply_stored(apply_bpe, case, "at each step merge the pair present whose position in merges is smallest: "
                      "min(pairs, key=rank)")


@register("apply_bpe", "repeats until no merge applies (a new symbol can enable an earlier merge)")
def _apply_repeat(apply_bpe):
    for case in ("repeat", "repeat_2"):
        _apply_stored(apply_bpe, case, "loop: find the earliest merge among the current pairs, merge it, "
                      "and look again, until no pair is in merges")


@register("apply_bpe", "keeps </w> on the last symbol; one-letter words and words with no merge")
def _apply_end(apply_bpe):
    for case in ("end", "no_merge", "one_letter", "unseen_character"):
        _apply_stored(apply_bpe, case, "the last symbol carries `</w>`, even when nothing was merged")
    _apply_one(apply_bpe, "low", [], ["l", "o", "w</w>"], hint="with no merges a word is its characters, "
               "`</w>` joined to the last one")
    # after (q, r</w>) no merge applies: (p, qr</w>) joins to 'pqr</w>' too, but it is not the merge (pq, r</w>)
    _apply_one(apply_bpe, "pqr", [("q", "r</w>"), ("pq", "r</w>")], ["p", "qr</w>"],
               hint="a merge is a PAIR of symbols: ('p', 'qr</w>') is not the merge ('pq', 'r</w>'), though both join "
                    "to 'pqr</w>'; look the ranks up by the pair, ranks.get((left, right)), not by the joined text")


@register("apply_bpe", "merges non-overlapping occurrences, left to right (aaaa with (a, a) -> aa a a</w>)")
def _apply_overlap(apply_bpe):
    for case in ("overlap", "overlap_2"):
        _apply_stored(apply_bpe, case, "merge like merge_pair: left to right, continuing after a merged pair")


@register("apply_bpe", "segments 366 words like subword-nmt, with 100 and 249 learned merges")
def _apply_fixture(apply_bpe):
    for name in ("corpus_a", "corpus_b"):
        merges, words = _segmentation(name)
        for word, expected in words.items():
            _apply_one(apply_bpe, word, merges, expected,
                       what=f"apply_bpe({word!r}, the {len(merges)} merges subword-nmt learned on corpus {name[-1]})",
                       hint="apply the earliest merge present, repeatedly; keep `</w>` on the last symbol")


# --------------------------------------------------------------------------------- BPETokenizer
def _train(cls, name="tokenizer"):
    corpus, n, _, _ = _case(name)
    tok = build(cls, what="BPETokenizer()")
    tok.train(list(corpus), n)
    return tok


def _encode(tok, text, what=None):
    what = what or f"encode({text!r})"
    try:
        ids = tok.encode(text)
    except KeyError as e:
        raise CheckFailure(what, "ids, with <unk> (3) for a symbol not in the vocabulary",
                           f"KeyError: {str(e)[:80]}", "unknown symbols map to <unk>: stoi.get(symbol, UNK)") from None
    if isinstance(ids, torch.Tensor) or type(ids).__module__ == "numpy":
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)) or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in ids):
        raise CheckFailure(what, "a list of int ids", f"{type(ids).__name__} {fmt(ids)}",
                           "return [self.stoi.get(s, UNK) for s in subwords]")
    return [int(i) for i in ids]


def _decode(tok, ids, what=None):
    what = what or f"decode({ids})"
    text = tok.decode(list(ids))
    if not isinstance(text, str):
        raise CheckFailure(what, "a str", f"{type(text).__name__} {fmt(text)}", "join the symbols into one string")
    return text


def _stale_stoi(tok) -> str | None:
    """A hint when stoi does not match itos after train (stoi built once in __init__, or before itos was
    complete): encode, which reads stoi, then gives <unk> for symbols of the vocabulary; load rebuilds stoi."""
    itos, stoi = getattr(tok, "itos", None), getattr(tok, "stoi", None)
    if not isinstance(itos, (list, tuple)) or not isinstance(stoi, Mapping) or len(itos) <= 4:
        return None
    missing = [s for s in itos[4:] if s not in stoi]
    wrong = [s for s, i in stoi.items() if not isinstance(i, numbers.Integral) or not 0 <= i < len(itos)
             or itos[i] != s]
    if not missing and not wrong:
        return None
    found = (f"{len(missing)} of the {len(itos)} symbols of itos are missing from stoi" if missing else
             f"stoi[{wrong[0]!r}] is not the index of {wrong[0]!r} in itos")
    return (f"train did not rebuild stoi from the new itos ({found}): encode looks symbols up in stoi, so they "
            "become <unk>; at the end of train, self.stoi = {s: i for i, s in enumerate(self.itos)}")


def _vocab_size(tok):
    size = getattr(tok, "vocab_size", None)
    if callable(size) or not isinstance(size, numbers.Integral) or isinstance(size, bool):
        raise CheckFailure("tok.vocab_size", "an int (an attribute or a @property)",
                           f"{type(size).__name__} {fmt(size)}",
                           "make it a property: @property def vocab_size(self): return len(self.itos)")
    return int(size)


class _OnePass:
    """The lines as a generator gives them (an iterator, empty once read), noting a read after the end: a second
    pass."""

    def __init__(self, lines):
        self._lines, self.ended, self.read_again = iter(list(lines)), False, False

    def __iter__(self):
        return self

    def __next__(self):
        if self.ended:
            self.read_again = True
            raise StopIteration
        try:
            return next(self._lines)
        except StopIteration:
            self.ended = True
            raise


ONE_PASS = ("the corpus was read twice (once to learn the merges, once for the characters): a generator or an open "
            "file is empty the second time, so the vocabulary misses what the second pass should have seen; read it "
            "once into a list first, corpus = list(corpus) (the given first line of train does)")


@register("BPETokenizer", "train(corpus, num_merges) returns the tokenizer itself; a generator or an open file of "
          "lines trains as a list does")
def _tok_train(cls):
    corpus, n, _, _ = _case("tokenizer")
    tok = build(cls, what="BPETokenizer()")
    got = tok.train(list(corpus), n)
    if got is not tok:
        raise CheckFailure("BPETokenizer().train(corpus, 40)", "the tokenizer itself", fmt(got),
                           "end train with `return self`, so that BPETokenizer().train(...) gives the tokenizer")
    # the contract's iterables: corpus is any iterable of lines, read once
    _, words = _segmentation("tokenizer")
    text = " ".join(words)
    # The file is written by the checks, so in a folder of their own (mkdtemp: in the grade command's checker, its
    # private temporary folder), never a TemporaryDirectory, which there is made and named by the kernel.
    folder = tempfile.mkdtemp(prefix="corpus-")
    try:
        path = os.path.join(folder, "corpus.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(corpus) + "\n")
        with open(path, encoding="utf-8") as f:
            file_lines = list(f)  # each with its "\n": compared with a tokenizer trained on this same list
        for what, make, lines in (("a generator of the lines", lambda: _OnePass(corpus), corpus),
                                  ("an open file of the lines", lambda: open(path, encoding="utf-8"), file_lines)):
            expected = _encode(tok if lines is corpus else build(cls, what="BPETokenizer()").train(list(lines), n),
                               text)
            source = make()
            try:
                other = build(cls, what="BPETokenizer()")
                other.train(source, n)
            finally:
                if hasattr(source, "close"):
                    source.close()
            call = f"BPETokenizer().train({what}, {n}).encode(the corpus's words)"
            got = _encode(other, text, call)
            if got != expected:
                k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
                raise CheckFailure(f"{call}: ids from position {k}", f"{expected[k:k + 6]} (as when trained on a list "
                                   "of the same lines)",
                                   fmt(got[k:k + 6]), ONE_PASS if getattr(source, "read_again", False) or (
                                       UNK in got and UNK not in expected) else
                                   "train reads any iterable of lines: take corpus = list(corpus) first, then work "
                                   "on that list")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@register("BPETokenizer", "specials take ids 0-3; a symbol never seen becomes <unk> (3)")
def _tok_specials(cls):
    tok = _train(cls)
    _, words = _segmentation("tokenizer")
    text = " ".join(list(words)[:12])
    ids = _encode(tok, text)
    low = sorted({i for i in ids if i < 4})
    if ids[:1] == [BOS] and ids[-1:] == [EOS]:
        raise CheckFailure(f"encode({text[:40]!r}...)", "the subwords' ids only", f"{fmt(ids)}",
                           "encode added <bos> and <eos>: return only the subwords' ids")
    if low:
        raise CheckFailure(f"encode({text[:40]!r}...): ids of known subwords", "ids >= 4 (0-3 are <pad>, <bos>, "
                           "<eos>, <unk>)", f"ids {low} among {fmt(ids)}",
                           "put the four specials first in the vocabulary: itos = ['<pad>', '<bos>', '<eos>', "
                           "'<unk>'] + subwords" if UNK not in low else _stale_stoi(tok) or
                           "every character of the corpus (alone and with </w>) and every merge belongs in the "
                           "vocabulary")
    for text, expected in (("Ж", [UNK]), ("ЖЖ", None)):
        got = _encode(tok, text)
        if expected is not None:
            _expect(got, expected, f"encode({text!r}) for a character never seen in training",
                    "unknown symbols map to <unk>, whose id is 3: stoi.get(symbol, UNK)")
        elif not got or any(i != UNK for i in got):
            raise CheckFailure(f"encode({text!r})", "only <unk> ids (3)", fmt(got),
                               "unknown symbols map to <unk>, whose id is 3")
    first = list(words)[0]
    got = _encode(tok, f"{first} Ж")
    if len(got) < 2 or got[-1] != UNK or UNK in got[:-1]:
        raise CheckFailure(f"encode('{first} Ж')", f"the ids of {first!r}, then 3 (<unk>)", fmt(got),
                           "map each subword on its own: known ones to their id, unknown ones to 3")
    # 'Ж' merges with nothing, so 'Ж' + first splits as 'Ж' and then first's own subwords
    expected = [UNK] + _encode(tok, first)
    _expect(_encode(tok, f"Ж{first}"), expected, f"encode('Ж{first}'), a word with one unknown character",
            "map each subword on its own: the unknown 'Ж' to 3 (<unk>), the known subwords of the rest to their "
            "ids (not the whole word to one <unk>)")
    # another tokenizer, trained on other text, knows only its own characters and leaves the first one alone
    before = _encode(tok, first)
    corpus, n, _, _ = _case("docstring")
    other = build(cls, what="BPETokenizer()")
    other.train(list(corpus), n)
    char = next(c for c in first + "".join(words) if c not in "".join(corpus))
    shared = ("keep the vocabulary and merges on the instance (self.itos = [...] in __init__ or train), not in "
              "class attributes that every tokenizer shares")
    got = _encode(other, char)
    if got != [UNK]:
        raise CheckFailure(f"a second tokenizer trained on {corpus!r}: encode({char!r})",
                           "[3] (<unk>: that tokenizer never saw it)", fmt(got), shared)
    # a word the first tokenizer encoded above, with a character the second one never saw
    word = next((w for w in list(words)[:12] if set(w) - set("".join(corpus))), None)
    if word is not None:
        got = _encode(other, word)
        if UNK not in got:
            unseen = next(c for c in word if c not in "".join(corpus))
            raise CheckFailure(f"a second tokenizer trained on {corpus!r}: encode({word!r})",
                               f"ids with 3 (<unk>) for {unseen!r}, which that tokenizer never saw", fmt(got),
                               "the second tokenizer gave the first one's ids for a word the first one encoded: a "
                               "cache of encoded words (or the vocabulary) is shared, a class attribute such as "
                               "`cache = {}` in the class body; create it on the instance, self.cache = {} in "
                               "__init__ (and empty it in train)")
    got = _encode(tok, first)
    if got != before:
        raise CheckFailure(f"the first tokenizer's encode({first!r}) after a second one was trained",
                           f"{fmt(before)} (as before)", fmt(got), shared)
    # the contract's special ids whatever the corpus holds: symbols that sort before '<' too
    corpus, n, _, _ = _case("tokenizer")
    rich = build(cls, what="BPETokenizer()")
    rich.train(list(corpus) + BEFORE_LT, n)
    _specials_in_place(rich, f"BPETokenizer().train(corpus + {BEFORE_LT[:1]}..., {n})")


SPECIAL_SYMBOLS = ("<pad>", "<bos>", "<eos>", "<unk>")
# symbols that sort before '<' (digits and punctuation): a vocabulary put in sorted order moves the specials
BEFORE_LT = ["it costs 3.50 (or 4) dollars!", "call 911, 2 times: now!", "3 + 4 = 7; 10 - 2 = 8"]
SORTED_VOCAB = ("the vocabulary was put in sorted order (sorted(...) of the specials and the symbols): '<pad>' sorts "
                "after '<bos>' and '<eos>', and digits and punctuation sort before '<'; keep the specials first, in "
                "their order, itos = ['<pad>', '<bos>', '<eos>', '<unk>'] + symbols")


def _specials_in_place(tok, what):
    """Ids 0-3 are <pad>, <bos>, <eos>, <unk>: read from itos and stoi when they are the given list and dict, and
    from encode (an unseen character gives [3]); decode's specials are their own check's."""
    itos, stoi = getattr(tok, "itos", None), getattr(tok, "stoi", None)
    if isinstance(itos, (list, tuple)) and len(itos) >= 4 and list(itos[:4]) != list(SPECIAL_SYMBOLS):
        raise CheckFailure(f"{what}: itos[:4], the symbols of ids 0-3", fmt(list(SPECIAL_SYMBOLS)),
                           fmt(list(itos[:4])), SORTED_VOCAB if sorted(itos[:4]) == list(itos[:4]) else
                           "put the four specials first, in this order: <pad> = 0, <bos> = 1, <eos> = 2, <unk> = 3")
    if isinstance(stoi, Mapping) and all(s in stoi for s in SPECIAL_SYMBOLS):
        got = [stoi[s] for s in SPECIAL_SYMBOLS]
        if got != [PAD, BOS, EOS, UNK]:
            raise CheckFailure(f"{what}: the ids of {', '.join(SPECIAL_SYMBOLS)} in stoi", "[0, 1, 2, 3]", fmt(got),
                               SORTED_VOCAB)
    _expect(_encode(tok, "Ж", f"{what}: encode('Ж')"), [UNK], f"{what}: encode('Ж'), a character never seen",
            "unknown symbols map to <unk>, whose id is 3: keep the specials first, in their order")


@register("BPETokenizer", "encode adds no <bos>/<eos>: one id per subword")
def _tok_no_bos(cls):
    tok = _train(cls)
    for text, n in (("a", 1), ("a x", 2), ("", 0)):
        got = _encode(tok, text)
        if len(got) != n:
            with_specials = len(got) == n + 2 and got[:1] == [BOS] and got[-1:] == [EOS]
            raise CheckFailure(f"encode({text!r})", f"{n} id{'s' if n != 1 else ''}", fmt(got),
                               "encode added <bos> and <eos>: return only the subwords' ids (the training code "
                               "adds them where needed)" if with_specials else
                               "split the text into words (text.split()), each word into subwords, one id each")


@register("BPETokenizer", "segments words like subword-nmt (same subwords, one id per subword), whatever the "
          "whitespace of the training lines")
def _tok_segments(cls):
    tok = _train(cls)
    _, words = _segmentation("tokenizer")
    id_of, subword_of = {}, {}
    for word, subwords in words.items():
        ids = _encode(tok, word)
        if len(ids) != len(subwords):
            raise CheckFailure(f"encode({word!r})", f"{len(subwords)} ids, for the subwords {subwords} "
                               f"(subword-nmt, 40 merges, min_frequency 2)", f"{len(ids)} ids {fmt(ids)}",
                               "train learns the merges with learn_bpe(corpus, num_merges) (min_frequency 2) and "
                               "encode splits each word with apply_bpe")
        for s, i in zip(subwords, ids):
            if i == UNK:
                raise CheckFailure(f"encode({word!r}): the id of {s!r}", "its own id", "3 (<unk>)",
                                   _stale_stoi(tok) or
                                   "every character of the corpus (alone and with </w>) and every merged symbol "
                                   "belongs in the vocabulary")
            if id_of.setdefault(s, i) != i or subword_of.setdefault(i, s) != s:
                folded = id_of[s] == i and subword_of[i].lower() == s.lower()
                raise CheckFailure(f"encode({word!r}): the id of {s!r}",
                                   f"one id for each subword ({s!r} is {id_of[s]} elsewhere)" if id_of[s] != i else
                                   f"a different id from {subword_of[i]!r}'s", f"{i}",
                                   "the text was lowercased (or case-folded): keep it as it is, 'I' and 'i' are "
                                   "different symbols" if folded else
                                   "give each vocabulary entry one id: stoi = {s: i for i, s in enumerate(itos)}")
    # train(corpus, num_merges) learns with learn_bpe's default min_frequency=2, as subword-nmt does: on
    # 'ab ab ab cd cd ef' subword-nmt merges (a, b</w>) and (c, d</w>), and (e, f</w>), seen once, stays unmerged
    corpus, n, m, merges = _case("min_frequency_default")
    small = build(cls, what="BPETokenizer()")
    small.train(list(corpus), n)
    for word, subwords in (("ab", ["ab</w>"]), ("cd", ["cd</w>"]), ("ef", ["e", "f</w>"])):
        ids = _encode(small, word)
        if len(ids) != len(subwords):
            raise CheckFailure(f"BPETokenizer().train({corpus!r}, {n}).encode({word!r})",
                               f"{len(subwords)} id{'s' if len(subwords) > 1 else ''}, for {subwords} (subword-nmt's "
                               f"merges {merges}, min_frequency={m})", f"{len(ids)} ids {fmt(ids)}",
                               "train learns with learn_bpe's default min_frequency=2: a pair seen once is not merged"
                               if len(ids) < len(subwords) else
                               "train learns the merges with learn_bpe(corpus, num_merges) and encode splits each "
                               "word with apply_bpe")
    _tok_messy_whitespace(cls, tok, words)


def _messy(lines: list[str]) -> list[str]:
    """The lines with their spaces turned into runs of spaces and tabs, and whitespace added at both ends."""
    gaps = ("  ", "\t", " \t ", "   ", "\t\t")
    return [("\t " if k % 2 else "  ") + "".join(c if c != " " else gaps[(k + j) % len(gaps)]
                                               for j, c in enumerate(line)) + (" \t" if k % 3 else "   ")
            for k, line in enumerate(lines)]


def _tok_messy_whitespace(cls, tok, words):
    """A tokenizer trained on the same lines with messy whitespace segments every word as subword-nmt does: its
    pieces (decode of each id alone, which a harmless extra symbol such as a tab leaves alone) are the clean one's."""
    corpus, n, _, _ = _case("tokenizer")
    messy = build(cls, what="BPETokenizer()")
    messy.train(_messy(corpus), n)
    hint = ("train first turns every run of whitespace into one space, corpus = [' '.join(line.split()) for line in "
            "corpus]: tabs, runs of spaces and spaces at the ends of a line separate words like one space")
    for word, subwords in words.items():
        what = (f"BPETokenizer().train(the same {len(corpus)} lines with runs of spaces and tabs, whitespace at both "
                f"ends, {n}).encode({word!r})")
        ids = _encode(messy, word, what)
        pieces = [_decode(messy, [i]) for i in ids]
        clean = [_decode(tok, [i]) for i in _encode(tok, word)]
        if len(ids) != len(subwords) or pieces != clean:
            raise CheckFailure(what, f"the pieces {clean}, as after training on the clean lines (subword-nmt's "
                               f"{subwords})", f"{len(ids)} ids, the pieces {pieces}", hint)


@register("BPETokenizer", "decode(encode(s)) gives back s with whitespace collapsed, unseen words included")
def _tok_round_trip(cls):
    tok = _train(cls)
    _, words = _segmentation("tokenizer")
    seen = list(words)[:10]
    unseen = _fixture()["unseen_words"]["tokenizer"]
    split_hint = ("split the text with str.split(), so that any run of whitespace (spaces, tabs, newlines) "
                  "separates words, and join the decoded words with single spaces")
    for text, expected, hint_unk in (
            (" ".join(seen), " ".join(seen), "every subword of a training word belongs in the vocabulary"),
            (f"  {seen[0]}  {seen[1]}\t{seen[2]}\n{seen[3]} ", " ".join(seen[:4]), split_hint),
            (" ".join(unseen), " ".join(unseen), "an unseen word got <unk>: the vocabulary needs every character "
             "of the corpus both alone and with </w> (a word may end with any of them)")):
        ids = _encode(tok, text)
        got = _decode(tok, ids, f"decode(encode({text!r}))")
        if got != expected:
            raise CheckFailure(f"decode(encode({text!r}))", repr(expected), repr(got),
                               (_stale_stoi(tok) or hint_unk) if UNK in ids else
                               "the text came back in another case: train and encode take the text as it is, "
                               "without lowercasing" if got.lower() == expected.lower() else
                               "the subwords were joined with spaces: join them with '' and let each `</w>` become "
                               "the space between words" if len(got.split()) > len(expected.split()) and
                               "".join(got.split()) == "".join(expected.split()) else
                               "the words ran together: each `</w>` was removed (replace('</w>', '')) instead of "
                               "becoming the space between words, replace('</w>', ' '), then strip"
                               if len(got.split()) < len(expected.split()) and
                               "".join(got.split()) == "".join(expected.split()) else
                               "the space left by the last `</w>` (or around the text) stays: strip the result"
                               if got.strip() == expected else
                               "join the subwords and turn each `</w>` into a space, then strip; " + split_hint)


@register("BPETokenizer", "decode skips <pad>, <bos> and <eos>")
def _tok_decode_specials(cls):
    tok = _train(cls)
    _, words = _segmentation("tokenizer")
    text = " ".join(list(words)[:3])
    ids = _encode(tok, text)
    expected = _decode(tok, ids)
    got = _decode(tok, [BOS] + ids + [EOS, PAD, PAD])
    if got != expected:
        raise CheckFailure(f"decode([1] + encode({text!r}) + [2, 0, 0])", repr(expected), repr(got),
                           "skip the ids of <pad> (0), <bos> (1) and <eos> (2) when decoding: "
                           "`if i not in (PAD, BOS, EOS)`")
    _expect(_decode(tok, [PAD, BOS, EOS]), "", "decode([0, 1, 2])", "specials other than <unk> give no text")
    if not _decode(tok, [UNK]).strip():
        raise CheckFailure("decode([3])", "'<unk>' (an unknown symbol stays visible in the text)", "''",
                           "skip only <pad> (0), <bos> (1) and <eos> (2); <unk> (3) decodes to '<unk>'")


@register("BPETokenizer", "vocab_size counts the specials and every symbol; ids are below it")
def _tok_vocab_size(cls):
    tok = _train(cls)
    size = _vocab_size(tok)
    _, words = _segmentation("tokenizer")
    ids = _encode(tok, " ".join(words) + " " + " ".join(_fixture()["unseen_words"]["tokenizer"]))
    distinct = len({i for i in ids if i >= 4})
    if max(ids) >= size or size < 4 + distinct:
        raise CheckFailure("tok.vocab_size", f"more than every id (largest id {max(ids)}) and at least 4 specials + "
                           f"{distinct} subwords seen", f"{size}", "vocab_size = len(itos), the specials included")


@register("BPETokenizer", "save(path) then BPETokenizer.load(path) encode and decode the same, special ids included")
def _tok_save_load(cls):
    corpus, n, _, _ = _case("tokenizer")
    tok = build(cls, what="BPETokenizer()")
    tok.train(list(corpus) + BEFORE_LT, n)  # with symbols that sort before '<' (digits, punctuation)
    _, words = _segmentation("tokenizer")
    text = " ".join(words) + " " + " ".join(_fixture()["unseen_words"]["tokenizer"])
    what = f"encode(the {len(text.split())} words of the corpus and unseen ones)"
    ids = _encode(tok, text, what)
    with learner_folder() as folder:  # in the grade command, the kernel's: only named here
        path = os.path.join(folder, "tokenizer.json")
        tok.save(path)
        try:
            again = cls.load(path)
        except TypeError as e:
            if "required positional argument" not in str(e):
                raise
            raise CheckFailure("BPETokenizer.load(path), called on the class", "a new tokenizer",
                               f"TypeError: {str(e)[:120]}", "make load a @classmethod: def load(cls, path), "
                               "which builds the tokenizer with cls() and returns it") from None
    if not isinstance(again, cls):
        raise CheckFailure("BPETokenizer.load(path)", "a BPETokenizer", f"{type(again).__name__}",
                           "load is a @classmethod that builds a tokenizer and returns it")
    got = _encode(again, text, what + " after save and load")
    if got != ids:
        k = next((i for i, (a, b) in enumerate(zip(got, ids)) if a != b), min(len(got), len(ids)))
        merges = getattr(again, "merges", None)
        as_lists = (isinstance(merges, list) and any(isinstance(m, list) for m in merges)
                    and not any(isinstance(m, list) for m in getattr(tok, "merges", None) or []))
        raise CheckFailure(f"{what} after save and load: ids from position {k}", f"{ids[k:k + 6]} (as before saving)",
                           f"{got[k:k + 6]}", "load kept the merges as JSON gives them back, lists ['l', 'o'] "
                           "instead of tuples ('l', 'o'); a list never equals a tuple, so no merge applies: convert "
                           "them, [tuple(m) for m in data['merges']]" if as_lists else
                           (UNK in ids[k:k + 6] and _stale_stoi(tok)) or
                           "save everything encode uses (merges and vocabulary) and restore all of it in load")
    _expect(_decode(again, ids), _decode(tok, ids), "decode(the same ids) after save and load",
            "save and restore the vocabulary (itos) in its order")
    before, after = getattr(tok, "vocab_size", None), getattr(again, "vocab_size", None)
    if not callable(before) and not (isinstance(after, numbers.Integral) and after == before):
        raise CheckFailure("vocab_size after save and load", f"{before} (as before saving)", fmt(after),
                           "restore the whole vocabulary in load")
    # the special ids round-trip too (the absolute ids are the specials check's business: compared with before saving)
    hint = "save the whole vocabulary, specials included, and restore it in its order (itos as saved, stoi rebuilt)"
    for what, before_fn in (("encode('Ж'), a character never seen", lambda t: _encode(t, "Ж")),
                            ("decode([3])", lambda t: _decode(t, [UNK])),
                            ("decode([1] + ids + [2, 0])", lambda t: _decode(t, [BOS] + ids[:5] + [EOS, PAD])),
                            ("itos[:4]", lambda t: list(getattr(t, "itos", [])[:4]))):
        try:
            before = before_fn(tok)
        except Exception:  # noqa: BLE001 (it fails before saving too: the specials check says so, once)
            continue
        _expect(before_fn(again), before, f"{what} after save and load (as before saving)", hint)


# ----------------------------------------------------------------------------------- pad_sequences
def _pad_check(pad_sequences, seqs, pad_id, what, mistakes_extra=None):
    given = [list(s) for s in seqs]
    got = pad_sequences(given) if pad_id is None else pad_sequences(given, pad_id=pad_id)
    if given != [list(s) for s in seqs]:
        raise CheckFailure(f"{what}: the lists passed in", f"unchanged, {[list(s) for s in seqs]}", fmt(given),
                           "build new rows (s + [pad_id] * (max_len - len(s))) instead of extending the "
                           "learner's lists in place")
    p = 0 if pad_id is None else pad_id
    width = max(len(s) for s in seqs)
    expected = torch.tensor([list(s) + [p] * (width - len(s)) for s in seqs], dtype=torch.long)
    left = torch.tensor([[p] * (width - len(s)) + list(s) for s in seqs], dtype=torch.long)
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(what, "a torch.LongTensor", f"{type(got).__name__} {fmt(got)}",
                           "build the result with torch.full((batch, max_len), pad_id, dtype=torch.long)")
    if tuple(got.shape) == (width, len(seqs)) != tuple(expected.shape):
        raise CheckFailure(f"{what}: wrong shape", f"shape {tuple(expected.shape)} (batch, max_len)",
                           f"shape {tuple(got.shape)}", "transposed, (max_len, batch): one ROW per sequence "
                           "(nn.utils.rnn.pad_sequence needs batch_first=True)")
    expect_shape(got, expected.shape, what, "shape (number of sequences, length of the LONGEST one)")
    if got.dtype != torch.long:
        hint = ("token ids must be torch.long (nn.Embedding needs integer ids): torch.full(..., dtype=torch.long)"
                if got.dtype.is_floating_point else "use dtype=torch.long (int64)")
        raise CheckFailure(f"{what}: dtype", "torch.int64 (torch.long)", str(got.dtype), hint)
    if torch.equal(got, expected):
        return
    mistakes = {"left-padded: pad on the right, after each sequence's tokens": left}
    if p != 0:
        mistakes["pad_id ignored: fill with pad_id, not 0"] = torch.tensor(
            [list(s) + [0] * (width - len(s)) for s in seqs], dtype=torch.long)
    mistakes.update(mistakes_extra or {})
    if sorted(got.tolist()) == sorted(expected.tolist()) and not torch.equal(got, expected):
        mistakes["the rows were reordered (sorted by length?): row i holds seqs[i], in the order given"] = got
    real = torch.tensor([[j < len(s) for j in range(width)] for s in seqs])
    fill = got[~real].unique()
    if torch.equal(got[real], expected[real]) and fill.numel() == 1:
        mistakes[f"padded with {fill.item()} instead of pad_id" + (" (its default is PAD = 0)" if pad_id is None else
                                                                   f" = {p}")] = got
    hint = diagnose(got, mistakes, torch.equal) or "copy each sequence to the start of its row"
    raise CheckFailure(what, str(expected.tolist()), str(got.tolist()), hint)


@register("pad_sequences", "right-pads with 0 into a (batch, max_len) tensor (the docstring example)")
def _pad_example(pad_sequences):
    _pad_check(pad_sequences, [[5, 6, 7], [8]], None, "pad_sequences([[5, 6, 7], [8]])")


@register("pad_sequences", "returns torch.long ids")
def _pad_dtype(pad_sequences):
    got = pad_sequences([[1, 2], [3]])
    if isinstance(got, torch.Tensor) and got.dtype != torch.long:
        raise CheckFailure("pad_sequences([[1, 2], [3]]).dtype", "torch.int64 (torch.long)", str(got.dtype),
                           "token ids must be torch.long (nn.Embedding needs integer ids): build it with "
                           "torch.full(..., dtype=torch.long)" if got.dtype.is_floating_point else
                           "use dtype=torch.long")
    _pad_check(pad_sequences, [[1, 2], [3]], None, "pad_sequences([[1, 2], [3]])")


@register("pad_sequences", "fills with pad_id")
def _pad_id(pad_sequences):
    _pad_check(pad_sequences, [[5, 6, 7], [8], [9, 4]], 9, "pad_sequences([[5, 6, 7], [8], [9, 4]], pad_id=9)")
    _pad_check(pad_sequences, [[5, 6], [7]], 1, "pad_sequences([[5, 6], [7]], pad_id=1)")


@register("pad_sequences", "pads to the longest sequence wherever it is; equal lengths need no padding; an empty batch "
          "is refused (an error, not a tensor)")
def _pad_longest(pad_sequences):
    _pad_check(pad_sequences, [[1], [2, 3, 4], [5, 6]], None, "pad_sequences([[1], [2, 3, 4], [5, 6]])")
    _pad_check(pad_sequences, [[1, 2], [3, 4]], None, "pad_sequences([[1, 2], [3, 4]])")
    _pad_check(pad_sequences, [[7, 8, 9]], None, "pad_sequences([[7, 8, 9]])")
    # the contract's empty input: no batch has no width, so a clear ValueError (the stub's given lines raise it)
    hint = ("keep the stub's given check at the top, `if not seqs: raise ValueError(...)`: a batch of no sequences "
            "has no length to pad to, and an empty tensor would fail later, far from the cause")
    try:
        got = pad_sequences([])
    except Exception:  # noqa: BLE001 (refused: the stub's ValueError, or a library's own error for no sequences)
        return
    raise CheckFailure("pad_sequences([])", "an error (an empty batch), the stub's ValueError",
                       f"{type(got).__name__} {fmt(got)}", hint)


# -------------------------------------------------------------------------------- TokenEmbedding
def _embedding(cls, vocab_size, d_model, **kw):
    args = ", ".join([str(vocab_size), str(d_model)] + [f"{k}={v}" for k, v in kw.items()])
    module = build(cls, vocab_size, d_model, what=f"TokenEmbedding({args})", **kw)
    emb = expect_attr(module, "embedding", nn.Embedding, f"TokenEmbedding({args})")
    return module, emb


SCALED_IN_INIT = ("the weights were multiplied by sqrt(d_model) once in __init__, not the output in forward: with any "
                  "other weights (trained, or copied in as here) the output is not scaled; leave nn.Embedding's "
                  "weights as built and return self.embedding(ids) * math.sqrt(d_model)")


def _scaled_in_init(cls, vocab_size, d_model) -> bool:
    """Whether __init__ built the embedding as nn.Embedding does, then multiplied its weights by sqrt(d_model):
    a new module and an nn.Embedding built from the same seed are compared (only to name a mistake)."""
    try:
        with seeded(99):
            _, emb = _embedding(cls, vocab_size, d_model)
        with seeded(99):
            ref = nn.Embedding(vocab_size, d_model)
        got = emb.weight.detach()
        return got.shape == ref.weight.shape and close(got, ref.weight.detach() * math.sqrt(d_model))
    except Exception:
        return False


def _forward_check(cls, vocab_size, d_model, seed):
    module, emb = _embedding(cls, vocab_size, d_model)
    with seeded(seed):
        weight = torch.randn(vocab_size, d_model)
        ids = torch.randint(0, vocab_size, (2, 5))
    with torch.no_grad():
        emb.weight.copy_(weight)
    module.eval()
    base = weight[ids]
    out = module(ids)
    unscaled = (SCALED_IN_INIT if isinstance(out, torch.Tensor) and out.shape == base.shape and close(out, base)
                and _scaled_in_init(cls, vocab_size, d_model) else
                "not scaled: multiply by sqrt(d_model) (paper, section 3.4)")
    expect_close(out, base * math.sqrt(d_model), f"TokenEmbedding({vocab_size}, {d_model})(ids), ids (2, 5)",
                 hint="return self.embedding(ids) * math.sqrt(d_model)",
                 mistakes={unscaled: base,
                           "scaled by d_model instead of sqrt(d_model)": base * d_model,
                           "divided by sqrt(d_model) instead of multiplied": base / math.sqrt(d_model),
                           "scaled by sqrt(vocab_size) instead of sqrt(d_model)": base * math.sqrt(vocab_size),
                           "sqrt(d_model) rounded to an integer (math.isqrt or int()): use math.sqrt":
                               base * math.isqrt(d_model),
                           "d_model ** 1/2 is (d_model ** 1) / 2: write d_model ** 0.5 or math.sqrt(d_model)":
                               base * (d_model / 2),
                           "d_model hard-coded (sqrt(512)): scale by the d_model given to __init__":
                               base * math.sqrt(512)})
    if not torch.equal(emb.weight.detach(), weight):
        raise CheckFailure(f"embedding.weight after a call of TokenEmbedding({vocab_size}, {d_model})", "unchanged",
                           "changed by forward", "forward scaled the weights in place (embedding.weight.mul_ or "
                           "weight.data *= ...): every call scales them again; scale the output, "
                           "self.embedding(ids) * math.sqrt(d_model)")
    return out, emb


def _backward(out):
    if not out.requires_grad:
        raise CheckFailure("the output of TokenEmbedding", "connected to embedding.weight (requires_grad=True)",
                           "a tensor without gradient", "compute it from self.embedding(ids) directly (no .data, "
                           ".detach() or torch.no_grad())")
    out.sum().backward()


@register("TokenEmbedding", "has `embedding`, an nn.Embedding(vocab_size, d_model)")
def _emb_attr(cls):
    _, emb = _embedding(cls, 11, 8)
    expect_shape(emb.weight, (11, 8), "embedding.weight of TokenEmbedding(11, 8)",
                 "the arguments swapped, nn.Embedding(d_model, vocab_size): nn.Embedding(vocab_size, d_model) has one "
                 "row of d_model numbers per token" if tuple(emb.weight.shape) == (8, 11) else
                 "nn.Embedding(vocab_size, d_model): one row of d_model numbers per token")


@register("TokenEmbedding", "forward = embedding(ids) * sqrt(d_model), in the weights' dtype")
def _emb_forward(cls):
    out, emb = _forward_check(cls, 10, 16, 0)
    if out.dtype != emb.weight.dtype:  # the values are right
        raise CheckFailure("TokenEmbedding(10, 16)(ids): dtype", f"{emb.weight.dtype}, the dtype of embedding.weight",
                           str(out.dtype), f"the output was cast to {out.dtype} (.double(), .to(...), or a scale "
                           f"held in a {out.dtype} tensor): the next layers have {emb.weight.dtype} weights and "
                           "refuse it; multiply by the Python float math.sqrt(d_model), which keeps the dtype")


@register("TokenEmbedding", "scales by the exact sqrt(d_model), e.g. sqrt(6)")
def _emb_sqrt6(cls):
    _forward_check(cls, 11, 6, 1)


@register("TokenEmbedding", "passes padding_idx to nn.Embedding (a zero row that gets no gradient)")
def _emb_padding(cls):
    module, emb = _embedding(cls, 7, 4, padding_idx=0)
    if emb.padding_idx != 0:
        raise CheckFailure("TokenEmbedding(7, 4, padding_idx=0).embedding.padding_idx", "0", fmt(emb.padding_idx),
                           "pass it on: nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)")
    out = expect_shape(module(torch.tensor([[0, 3, 0]])), (1, 3, 4), "TokenEmbedding(7, 4, padding_idx=0)(ids (1, 3))")
    expect_close(out[0, 0], torch.zeros(4), "the vector of the padding id 0",
                 "nn.Embedding zeroes the padding row when it is built; a re-initialisation of the whole weight "
                 "afterwards (nn.init.normal_, xavier_uniform_, ...) overwrites it: zero the row again, "
                 "with torch.no_grad(): embedding.weight[padding_idx].zero_(), or keep nn.Embedding's own init")
    _backward(out)
    if emb.weight.grad is None or emb.weight.grad[0].abs().max() > 0:
        raise CheckFailure("embedding.weight.grad[0] (the padding row) after a backward pass", "zeros",
                           "None" if emb.weight.grad is None else fmt(emb.weight.grad[0]),
                           "nn.Embedding(..., padding_idx=padding_idx) keeps the padding row out of training, "
                           "but only through self.embedding(ids): indexing embedding.weight (or a one-hot "
                           "product) bypasses it")
    _, plain = _embedding(cls, 7, 4)
    if plain.padding_idx is not None:
        raise CheckFailure("TokenEmbedding(7, 4).embedding.padding_idx", "None (the default)", fmt(plain.padding_idx),
                           "use padding_idx only when one is given")


@register("TokenEmbedding", "keeps ids' shape: (B, L) -> (B, L, d_model); the gradient reaches the weights")
def _emb_grad(cls):
    module, emb = _embedding(cls, 6, 9)
    ids = torch.tensor([[1, 2, 2], [5, 0, 1]])
    out = module(ids)
    expect_shape(out, (2, 3, 9), "TokenEmbedding(6, 9)(ids of shape (2, 3))",
                 "embedding(ids): (B, L) -> (B, L, d_model)")
    expect_shape(module(ids[0]), (3, 9), "TokenEmbedding(6, 9)(ids of shape (3,))", "do not reshape the ids")
    if module.training:  # a new module: in training mode, where a dropout would show
        rows = emb.weight.detach()[ids] * 3.0
        if isinstance(out, torch.Tensor) and out.shape == rows.shape and not close(out, rows):
            zeros = bool(((out.detach() == 0) & (rows != 0)).any())
            unscaled = close(out, rows / 3.0)
            expect_close(out, rows, "TokenEmbedding(6, 9)(ids) in training mode",
                         hint="a dropout inside TokenEmbedding: the model applies dropout after adding the positional "
                              "encoding (PositionalEncoding does it); TokenEmbedding is embedding(ids) * sqrt(d_model) "
                              "only" if zeros else
                              SCALED_IN_INIT if unscaled and _scaled_in_init(cls, 6, 9) else
                              "not scaled: embedding(ids) * math.sqrt(d_model)" if unscaled else
                              "embedding(ids) * math.sqrt(d_model), in training mode too")
    _backward(out)
    grad = emb.weight.grad
    if grad is None:
        raise CheckFailure("embedding.weight.grad after out.sum().backward()", "a gradient", "None",
                           "compute the output from self.embedding(ids) directly (no .data, .detach() or no_grad)")
    counts = torch.bincount(ids.flatten(), minlength=6).float()
    expect_close(grad, counts[:, None].expand(6, 9) * 3.0, "embedding.weight.grad after out.sum().backward()",
                 hint="the output is embedding(ids) * sqrt(d_model): each use of a row adds sqrt(9) = 3 to its "
                      "gradient")
