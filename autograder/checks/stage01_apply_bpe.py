"""Stage 01's checks of apply_bpe: against subword-nmt's segmentations (the fixture), with variants that name
a mistake."""
from __future__ import annotations

from ..registry import CheckFailure, register
from ._util import fmt
from .stage01_tokenization import END, _as_symbols, _expect, _fixture, _merge_variant, _segmentation, _start


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
    "overlapping occurrences merged: after merging the pair at i, continue at i + 2 (a a a -> aa "
    "a)": "overlap",
    "occurrences merged from right to left: scan left to right (a a a -> aa a, not a aa)": "right",
    "the LATEST merge applied first: at each step merge the pair that comes EARLIEST in the merges list "
    "(min of the ranks, not max)": "latest",
    "`</w>` joined only after merging: start from l o w</w>, so that merges ending in `</w>` can "
    "apply": "end_after",
    "stopped with two symbols left (while len(symbols) > 2): keep merging while len(symbols) > 1, a word can "
    "end as one symbol": "two",
    "the word was lowercased: BPE takes the text as it is ('Z' and 'z' are different symbols)": "lower",
}


def _apply_mistakes(word, merges) -> dict:
    return {d: (lambda how=how: _apply_variant(word, merges, how)) for d, how in APPLY_MISTAKES.items()}


def _apply_one(apply_bpe, word, merges, expected, what=None, hint=None):
    what = what or f"apply_bpe({word!r}, {merges})"
    given = list(merges)
    got = apply_bpe(word, given)
    if given != list(merges):
        raise CheckFailure(f"{what}: the merges list passed in", "unchanged after the call",
                           f"{len(given)} merges, {fmt(given)}", "read the merges without modifying the list "
                           "(no pop, sort, append or assignment to merges[i]); build a new dict or list "
                           "instead")
    got = _as_symbols(got, what)
    key = tuple(tuple(m) for m in merges)
    earlier = [v for k, v in _ANSWERS.get(word, {}).items() if k != key and v != list(expected)]
    mistakes = dict(_apply_mistakes(word, merges))
    # the word's right segmentation under the merges of an earlier call: a cache that ignores the merges
    mistakes["the segmentation of this word under the merges of an EARLIER call came back: a cache keyed by "
             "the word alone (or a global) keeps answers for other merges; key it by (word, merges), or drop "
             "it"] = (
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
    _apply_stored(apply_bpe, "docstring", "start from l o w e s t</w>, apply the earliest merge present, "
                                          "repeat")


@register("apply_bpe", "applies the earliest-learned merge first, wherever it is in the word")
def _apply_priority(apply_bpe):
    for case in ("priority", "priority_2"):
        _apply_stored(apply_bpe, case, "at each step merge the pair present whose position in merges is "
                                       "smallest: min(pairs, key=rank)")


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
    # after (q, r</w>) no merge applies: (p, qr</w>) joins to 'pqr</w>' too, but it is not the merge (pq,
    # r</w>)
    _apply_one(apply_bpe, "pqr", [("q", "r</w>"), ("pq", "r</w>")], ["p", "qr</w>"],
               hint="a merge is a PAIR of symbols: ('p', 'qr</w>') is not the merge ('pq', 'r</w>'), though "
                    "both join to 'pqr</w>'; look the ranks up by the pair, ranks.get((left, right)), not by "
                    "the joined text")


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
                       what=f"apply_bpe({word!r}, the {len(merges)} merges subword-nmt learned on corpus "
                            f"{name[-1]})",
                       hint="apply the earliest merge present, repeatedly; keep `</w>` on the last symbol")
