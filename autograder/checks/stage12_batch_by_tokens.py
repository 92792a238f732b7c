"""Stage 12's checks of batch_by_tokens: every index once, within max_tokens, similar lengths together."""
from __future__ import annotations

import random
from collections import Counter

from ..registry import CheckFailure, register
from ._util import fmt


def _random_lengths(seed=0, n=300, extra=(450, 130)):
    rng = random.Random(seed)
    return [rng.randint(1, 60) for _ in range(n)] + list(extra)


def _batches(fn, lengths, max_tokens, what):
    given = list(lengths)
    got = fn(given, max_tokens)
    try:
        batches = [[int(i) for i in b] for b in got]
    except (TypeError, ValueError):
        raise CheckFailure(what, "a list of batches, each a list of example indices", fmt(got),
                           "return [[i, j, ...], [k, ...], ...] of indices into lengths, not the "
                           "lengths") from None
    if given != list(lengths):
        raise CheckFailure(f"{what}: the list of lengths passed in", "unchanged after the call",
                           f"reordered or changed: {fmt(given)}",
                           "the caller's lengths were edited in place (lengths.sort(), ...): sort a list of "
                           "indices, sorted(range(len(lengths)), key=lambda i: lengths[i]), and leave "
                           "lengths as it is")
    return batches


SORTED_POSITIONS = ("the indices are positions in the SORTED lengths (sorted(lengths)), not in lengths: sort "
                    "the indices, sorted(range(len(lengths)), key=lambda i: lengths[i]), and batch those")


def _sorted_positions(batches, lengths, max_tokens) -> bool:
    """Whether the batches are what a greedy cut of sorted(lengths) gives as positions in that sorted list
    (a classic mix-up): runs of consecutive positions, each within max_tokens there, each cut where the next
    example would not fit."""
    s = sorted(lengths)
    if s == list(lengths):
        return False
    runs = sorted(sorted(b) for b in batches if b)
    if any(b != list(range(b[0], b[0] + len(b))) or
           (len(b) > 1 and s[b[-1]] * len(b) > max_tokens) for b in runs):
        return False
    return all(s[nxt[0]] * (len(b) + 1) > max_tokens for b, nxt in zip(runs, runs[1:]))


LENGTHS_RETURNED = "return positions in lengths (indices), not the lengths themselves"


def _expect_partition(batches, lengths, what):
    """Every index of `lengths` in exactly one batch, said by the likely cause: the lengths returned in
    place of the indices (all of them, in any order: a multiset equal to lengths), an index twice, or one
    missing."""
    n = len(lengths)
    counts = Counter(i for b in batches for i in b)
    missing = sorted(set(range(n)) - set(counts))
    extra = sorted(i for i in counts if not 0 <= i < n)
    twice = sorted(i for i, c in counts.items() if c > 1)
    if extra:
        raise CheckFailure(what, f"indices 0..{n - 1}", f"also {extra[:5]}", LENGTHS_RETURNED)
    if (twice or missing) and counts == Counter(lengths):
        raise CheckFailure(f"{what}: the values returned", f"indices 0..{n - 1}, each once",
                           f"the lengths themselves (e.g. {fmt(batches[0][:5]) if batches else '[]'})",
                           LENGTHS_RETURNED)
    if twice:
        raise CheckFailure(f"{what}: {len(twice)} indices appear more than once", "every index exactly once",
                           f"e.g. {twice[:5]} repeated", "an example was added to two batches: after a batch "
                                                         "is full, start the next one with the example that "
                                                         "did not fit")
    if missing:
        raise CheckFailure(f"{what}: {len(missing)} indices are missing", "every index exactly once",
                           f"e.g. {missing[:5]} missing",
                           "the last batch was never appended (add it after the loop), or the example that "
                           "did not fit was dropped instead of starting the next batch")


OLD_LONGEST = ("the size test used the longest length from BEFORE the new example joined: in length order "
               "the new example is the longest, so test max(longest, lengths[i]) * (count + 1) > max_tokens "
               "before adding example i")


def _old_longest(batches, lengths, max_tokens) -> bool:
    """Whether every batch is what a size test with the longest length before the last addition lets through:
    its second-longest length x its count is within max_tokens (each batch stays within the limit until its
    longest example joins it)."""
    return all(sorted(lengths[i] for i in b)[-2] * len(b) <= max_tokens for b in batches if len(b) > 1)


LONG_SHARES = ("an example longer than max_tokens cannot share a batch: it goes alone, in a batch of its own "
               "(every batch over the limit here holds one)")


def _only_long_ones_share(batches, lengths, max_tokens) -> bool:
    """Whether every batch over the limit holds an example longer than max_tokens (the rest are within it)."""
    over = [b for b in batches if len(b) > 1 and max(lengths[i] for i in b) * len(b) > max_tokens]
    return bool(over) and all(max(lengths[i] for i in b) > max_tokens for b in over)


@register("batch_by_tokens", "returns every index exactly once")
def _bbt_partition(fn):
    lengths = _random_lengths(0)
    what = f"batch_by_tokens({len(lengths)} random lengths, max_tokens=400)"
    _expect_partition(_batches(fn, lengths, 400, what), lengths, what)
    small = [5, 1, 4, 2]
    _expect_partition(_batches(fn, small, 8, "batch_by_tokens([5, 1, 4, 2], 8)"), small,
                      "batch_by_tokens([5, 1, 4, 2], 8)")
    none = _batches(fn, [], 10, "batch_by_tokens([], 10)")
    if none:
        raise CheckFailure("batch_by_tokens([], 10): no examples", "[] (no batches)", fmt(none),
                           "an empty batch: after the loop, append the last batch only if it holds an "
                           "example (`if current:`); make_batch cannot build a batch of nothing")


@register("batch_by_tokens", "each batch's padded size (longest x count) is within max_tokens")
def _bbt_limit(fn):
    lengths = _random_lengths(1)
    what = f"batch_by_tokens({len(lengths)} random lengths, max_tokens=400)"
    batches = _batches(fn, lengths, 400, what)
    _expect_partition(batches, lengths, what)
    for b in batches:
        if not b:
            raise CheckFailure(what, "batches of at least one example", "an empty batch",
                               "append a batch only when it holds an example")
        longest = max(lengths[i] for i in b)
        if len(b) > 1 and longest * len(b) > 400:
            real = sum(lengths[i] for i in b)
            raise CheckFailure(f"{what}: a batch of {len(b)} examples, the longest {longest} tokens",
                               "padded size = longest x count <= 400", f"{longest} x {len(b)} = "
                                                                       f"{longest * len(b)}",
                               SORTED_POSITIONS if _sorted_positions(batches, lengths, 400) else
                               LONG_SHARES if _only_long_ones_share(batches, lengths, 400) else
                               OLD_LONGEST if _old_longest(batches, lengths, 400) else
                               "the padded size was not what was limited: the sum of the lengths "
                               f"({real}) ignores the padding; limit max(length) * count" if real <= 400 else
                               "check the size before adding an example: would max(longest, new) * (count + "
                               "1) exceed max_tokens? then start a new batch")


@register("batch_by_tokens", "an example longer than max_tokens stands alone")
def _bbt_long(fn):
    lengths = [3, 50, 4, 2, 30, 5, 3]
    what = "batch_by_tokens([3, 50, 4, 2, 30, 5, 3], max_tokens=20)"
    batches = _batches(fn, lengths, 20, what)
    _expect_partition(batches, lengths, what)
    for i in (1, 4):
        home = [b for b in batches if i in b][0]
        if home != [i]:
            raise CheckFailure(f"{what}: the batch of index {i} (length {lengths[i]} > 20)", f"[{i}], alone",
                               fmt(home), SORTED_POSITIONS if _sorted_positions(batches, lengths, 20) else
                               "an example longer than max_tokens cannot share a batch: put it in its own "
                               "(and do not drop it)")
    what = "batch_by_tokens([30, 25], max_tokens=20)"
    batches = _batches(fn, [30, 25], 20, what)
    _expect_partition(batches, [30, 25], what)
    if sorted(map(sorted, batches)) != [[0], [1]]:
        raise CheckFailure(what, "[[1], [0]]: each example alone (both are longer than max_tokens)",
                           fmt(batches),
                           "an empty batch: append a batch only when it holds an example (the first example "
                           "is already too long for an empty batch)" if any(not b for b in batches) else
                           "an example longer than max_tokens cannot share a batch: put it in its own")


@register("batch_by_tokens", "groups similar lengths (little padding on random lengths)")
def _bbt_similar(fn):
    lengths = _random_lengths(2, n=400, extra=())
    what = f"batch_by_tokens({len(lengths)} random lengths 1..60, max_tokens=600)"
    batches = _batches(fn, lengths, 600, what)
    _expect_partition(batches, lengths, what)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches if b)
    real = sum(lengths)
    if padded > 1.2 * real:
        raise CheckFailure(f"{what}: total padded size", f"at most 1.2 x the {real} real tokens",
                           f"{padded} ({padded / real:.2f} x)",
                           SORTED_POSITIONS if _sorted_positions(batches, lengths, 600) else
                           "batches mix short and long examples: sort the indices by length first "
                           "(sorted(range(n), key=lambda i: lengths[i])), then cut the sorted list into "
                           "batches")


@register("batch_by_tokens", "fills batches up to max_tokens (not a few examples each)")
def _bbt_full(fn):
    what = "batch_by_tokens([3] * 8, max_tokens=12)"
    batches = _batches(fn, [3] * 8, 12, what)
    _expect_partition(batches, [3] * 8, what)
    if sorted(len(b) for b in batches) != [4, 4]:
        largest = max(len(b) for b in batches)
        raise CheckFailure(what, "2 batches of 4 (4 x 3 = 12 tokens each)",
                           f"batch sizes {[len(b) for b in batches]}",
                           "every example got its own batch: keep adding examples while longest x count "
                           "stays within max_tokens" if largest == 1 else
                           f"a batch of {largest} x 3 = {3 * largest} tokens is over max_tokens = 12: check "
                           "the size before adding an example (would max(longest, new) * (count + 1) exceed "
                           "max_tokens?)"
                           if largest > 4 else
                           "keep adding examples while longest x count stays within max_tokens (<=, not <)")
    lengths = _random_lengths(3, n=400, extra=())
    what = f"batch_by_tokens({len(lengths)} random lengths 1..60, max_tokens=600)"
    batches = _batches(fn, lengths, 600, what)
    _expect_partition(batches, lengths, what)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches if b)
    if padded < 0.7 * 600 * len(batches):
        raise CheckFailure(f"{what}: mean padded size of a batch", "close to max_tokens=600 (at least 420)",
                           f"{padded / len(batches):.0f} over {len(batches)} batches",
                           "batches are cut too early: add examples while longest x count stays within "
                           "max_tokens")
