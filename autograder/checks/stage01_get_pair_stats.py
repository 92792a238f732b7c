"""Stage 01's checks of get_pair_stats: pair counts weighted by word counts, with the classic mistakes
named."""
from __future__ import annotations

from collections import Counter

from ..registry import CheckFailure, register
from ._util import fmt
from .stage01_tokenization import _as_stats, _expect


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
        raise CheckFailure(f"{what}, called twice", f"the same counts both times, {fmt(got)}",
                           f"{fmt(again)} "
                           "the second time", "counts kept between calls: create a new Counter inside the "
                                              "function at every call (a mutable default argument such as "
                                              "stats=Counter(), or a global, keeps growing)")
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
    _stats_check(get_pair_stats, vocab, "get_pair_stats({('a','a','a','a</w>'): 3, "
                                        "('a','b','a','b','c</w>'): 2, "
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
                 "symbols are whole strings: pair symbols[i] with symbols[i + 1], never characters of a "
                 "symbol")
