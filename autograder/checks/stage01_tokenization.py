"""Stage 01: byte-pair encoding, the tokenizer, padding and the scaled token embedding.

BPE is checked against merges and segmentations made by subword-nmt, the reference implementation of Sennrich
et al. (2016), stored in autograder/fixtures/stage01_bpe.json (autograder/fixtures/stage01_bpe.py makes them;
tests/test_checks_stage01.py verifies them). The small variants (`_learn_variant` in stage01_learn_bpe.py,
...) are written from the contract only to NAME a mistake once the learner's answer already differs from the
fixture: they are never the measure of right and wrong. This module holds what the stage's checks share; each
graded name's checks are in a module of its own (stage01_get_pair_stats.py, ...).
"""
from __future__ import annotations

import functools
import json
import operator
from collections.abc import Mapping
from pathlib import Path

from ..registry import CheckFailure
from ._util import diagnose, fmt

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
        raise CheckFailure(what, "a list of (left, right) pairs of strings, e.g. [('l', 'o'), ('lo', "
                                 "'w</w>')]",
                           f"{type(got).__name__} {fmt(got)}",
                           "append each merged pair itself (a tuple of two symbols) to the list, and return "
                           "it")
    return [tuple(m) for m in got]


def _as_stats(got, what: str) -> dict:
    """The learner's pair counts as a plain dict, pairs counted 0 times left out."""
    if not isinstance(got, Mapping):
        raise CheckFailure(what, "a dict (or Counter) {(left, right): count}",
                           f"{type(got).__name__} {fmt(got)}",
                           "return the Counter (or dict) of pair counts")
    out = {}
    for pair, count in got.items():
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise CheckFailure(what + ": keys", "pairs of adjacent symbols as tuples, e.g. ('l', 'o')",
                               fmt(pair),
                               "count zip(symbols, symbols[1:]): each key is a tuple (left, right)")
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
    # the loop stops one short (while i < len - 1) and the last symbol is lost when unmerged
    if how == "drop_last":
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


class _OnePass:
    """The lines as a generator gives them (an iterator, empty once read), noting a read after the end: a
    second pass."""

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
