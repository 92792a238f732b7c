"""Stage 01's checks of merge_pair: whole symbols, every occurrence, never overlapping."""
from __future__ import annotations

from ..registry import CheckFailure, register
from ._util import fmt
from .stage01_tokenization import _as_symbols, _expect, _merge_variant


def _merge_check(merge_pair, symbols, pair, what, hint,
                 hows=("overlap", "right", "first", "substring", "left_only", "drop_last", "concat")):
    got = _as_symbols(merge_pair(symbols, pair), what)
    names = {"overlap": "overlapping occurrences merged: after merging the pair at i, continue at i + 2, "
                        "so (a, a, a) -> (aa, a)",
             "right": "occurrences merged from right to left: scan left to right, so (a, a, a) -> (aa, a)",
             "first": "only the first occurrence merged: replace every occurrence of the pair",
             "substring": "the pair matched inside a symbol (str.replace on the joined text): compare whole "
                          "symbols, (symbols[i], symbols[i + 1]) == pair",
             "left_only": "only the left symbol compared (symbols[i] == pair[0]): the right one must match "
                          "too, (symbols[i], symbols[i + 1]) == pair",
             "drop_last": "the last symbol was lost: the loop stopped at len(symbols) - 1; loop while i < "
                          "len(symbols) and append the last symbol when it is not merged",
             "concat": "the joined text of two symbols compared with the joined pair (symbols[i] + symbols[i "
                       "+ 1] == 'a' + 'bc'): ('ab', 'c') is not the pair ('a', 'bc'); compare the symbols "
                       "themselves, (symbols[i], symbols[i + 1]) == pair"}
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
    _merge_check(merge_pair, ("l", "o", "w</w>"), ("o", "w</w>"), "merge_pair(('l', 'o', 'w</w>'), ('o', "
                                                                  "'w</w>'))",
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
                     "merge only where (symbols[i], symbols[i + 1]) == pair exactly; otherwise keep the "
                     "symbols")
