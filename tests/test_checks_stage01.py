"""Stage 01's checks: full marks for correct code however written; for each classic mistake, exactly the
points it earns and the words that name it (the reference and the stub: tests/test_registry.py). The points
are pinned, so one mistake is seen to cost the checks about it, not the whole stage.

The BPE checks compare with autograder/fixtures/stage01_bpe.json, subword-nmt's output (the reference
implementation of Sennrich et al. 2016) on the cases that autograder/fixtures/stage01_bpe.py builds;
`test_fixture_is_subword_nmt_output` checks that the stored file is still exactly that output.
"""
import collections
import functools
import inspect
import itertools
import json
import math
import pathlib
import pickle
import re
import time

import numpy as np
import pytest
import torch
from torch import nn

import solutions
from autograder.fixtures.stage01_bpe import build_fixture, stored_fixture
from solutions import BPETokenizer, TokenEmbedding
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes

GET_PAIR_STATS, MERGE_PAIR, LEARN_BPE = solutions.get_pair_stats, solutions.merge_pair, solutions.learn_bpe
APPLY_BPE, PAD_SEQUENCES = solutions.apply_bpe, solutions.pad_sequences


# ========================================================================= the fixture
def test_fixture_is_subword_nmt_output():
    pytest.importorskip("subword_nmt")
    assert build_fixture() == stored_fixture(), "regenerate with `python -m autograder.fixtures.stage01_bpe`"


def test_fixture_sizes():
    fx = stored_fixture()
    assert len(fx["learn"]["corpus_a"]["merges"]) == 100
    assert len(fx["learn"]["corpus_b"]["merges"]) == 249  # until no pair is left
    assert len(fx["learn"]["corpus_c"]["merges"]) == 143  # stopped by min_frequency=3
    assert len(fx["unseen_words"]["tokenizer"]) == 8


def test_checks_do_not_use_solutions():
    import autograder.checks.stage01_tokenization as module
    source = open(module.__file__, encoding="utf-8").read()
    assert not re.search(r"^\s*(from|import)\s+\.*solutions", source, re.M)


# ========================================================================= helpers for the tables
def _word(w):
    return tuple(w[:-1]) + (w[-1] + "</w>",)


def using(reference, *changes, name=None, **names):
    """`reference` changed by edit() (or not at all) with some of the names it calls replaced or added: a
    mistake made in a helper, e.g. using(LEARN_BPE, merge_pair=merge_overlapping), or a style that calls
    numpy."""
    made = edit(reference, *changes, name=name)
    fn = made if inspect.isfunction(made) else next(f for f in vars(made).values() if inspect.isfunction(f))
    fn.__globals__.update(names)
    return made


CORRECT = []  # (contract name, correct code written differently), every one graded to full marks at the end


def correct(name, *objs):
    CORRECT.extend(pytest.param(name, obj, id=f"{name}-{obj.__name__}") for obj in objs)


# ========================================================================= get_pair_stats
_stats = functools.partial(using, GET_PAIR_STATS)  # _stats((old, new), ...): the reference so changed
PAIRS, ADD, NEW = "zip(symbols, symbols[1:])", "stats[pair] += count", "stats = Counter()"
LOOP, GET = f"for pair in {PAIRS}:\n            {ADD}", "stats[pair] = stats.get(pair, 0) + count"
get_pair_stats_defaultdict = _stats(  # a defaultdict(int), pairs by index
    (NEW, "stats = defaultdict(int)"),
    (LOOP, "for i in range(len(symbols) - 1):\n            stats[symbols[i], symbols[i + 1]] += count"),
    name="get_pair_stats_defaultdict")


def get_pair_stats_repeat(vocab):
    return collections.Counter(itertools.chain.from_iterable(
        itertools.repeat(p, n) for s, n in vocab.items() for p in zip(s, s[1:])))


def get_pair_stats_rows(vocab):
    """(pair, count) rows first, then a dict by setdefault, returned as a Counter."""
    rows = [(p, n) for s, n in vocab.items() for p in zip(s, s[1:])]
    d = {}
    for p, n in rows:
        d.setdefault(p, 0)
        d[p] += n
    return collections.Counter(d)


correct("get_pair_stats", get_pair_stats_defaultdict, get_pair_stats_repeat, get_pair_stats_rows,
        # itertools.pairwise and dict.get: a plain dict
        _stats((NEW, "stats = {}"), (PAIRS, "itertools.pairwise(symbols)"), (ADD, GET),
               name="get_pair_stats_pairwise_get", itertools=itertools),
        # Counter.update with each word's pair list repeated count times
        _stats((LOOP, "stats.update(list(zip(symbols[:-1], symbols[1:])) * count)"),
               name="get_pair_stats_repeat_update"),
        # Counter arithmetic: each word's pairs scaled by its count, added up
        _stats((LOOP, "stats += Counter({p: k * count for p, k in Counter(zip(symbols, "
                      "symbols[1:])).items()})"),
               name="get_pair_stats_counter_sum"),
        # numpy int64 counts in a plain dict, pairs found from the end of each word
        _stats((NEW, "stats = {}"), (PAIRS, "((symbols[i - 1], symbols[i]) for i in range(len(symbols) - 1, "
                                            "0, -1))"),
               (ADD, "stats[pair] = stats.get(pair, np.int64(0)) + np.int64(count)"),
               name="get_pair_stats_numpy_ints",
               np=np),
        # the most frequent words first; an OrderedDict
        _stats((NEW, "stats = collections.OrderedDict()"), (ADD, GET),
               ("vocab.items()", "sorted(vocab.items(), key=lambda kv: -kv[1])"),
               name="get_pair_stats_ordered",
               collections=collections),
        # float counts (3.0 == 3) and a keyword-only extra argument; a plain dict returned
        _stats(("vocab: dict[tuple[str, ...], int])", "vocab, *, weight=1.0)"),
               (NEW, "stats = defaultdict(float)"),
               (PAIRS, "itertools.pairwise(symbols)"), (ADD, "stats[pair] += count * weight"),
               ("return stats", "return dict(stats)"), name="get_pair_stats_float", itertools=itertools))


def stats_across_words(vocab):
    """Every word's symbols in one row, each word once: pairs across words, counts ignored."""
    flat = [s for w in vocab for s in w]
    return collections.Counter(zip(flat, flat[1:]))


ROWS = mistakes("get_pair_stats", [
    Mistake("word counts ignored", _stats((ADD, "stats[pair] += 1")), 0, "word counts ignored"),
    Mistake("repeated pair once per word", _stats((PAIRS, f"set({PAIRS})")), 3, "counted once"),
    Mistake("pairs across words", stats_across_words, 0, "across words"),
    Mistake("returns a list", _stats(("return stats", "return list(stats.items())")), 0, "dict"),
    Mistake("count assigned, not added", _stats((ADD, "stats[pair] = count")), 2, "stats[pair] += count"),
    Mistake("the last pair of each word missed", _stats((PAIRS, "zip(symbols, symbols[1:-1])")), 0,
            "last pair of each word"),
    Mistake("a mutable default Counter", _stats(("int]) -> Counter:", "int], stats=Counter()) -> Counter:"),
                                                (f"    {NEW}\n", "")), 0,
            ("called twice", "mutable default")),
    Mistake("keys 'a b' strings", _stats((ADD, "stats[' '.join(pair)] += count")), 0, "tuple (left, right)"),
    Mistake("character pairs", _stats((PAIRS, "zip(''.join(symbols), ''.join(symbols)[1:])")), 0,
            "pairs of characters"),
])


# ========================================================================= merge_pair
_merge = functools.partial(using, MERGE_PAIR)  # _merge((old, new), ...): the reference so changed
MATCH = "(symbols[i], symbols[i + 1]) == pair"


def merge_pair_regex(symbols, pair):
    """The paper's (Sennrich et al. 2016, Algorithm 1) regex on the space-joined symbols."""
    bigram = re.escape(" ".join(pair))
    p = re.compile(r"(?<!\S)" + bigram + r"(?!\S)")
    return tuple(p.sub("".join(pair), " ".join(symbols)).split(" "))


def merge_pair_recursive(symbols, pair):
    if len(symbols) < 2:
        return tuple(symbols)
    if (symbols[0], symbols[1]) == tuple(pair):
        return (symbols[0] + symbols[1],) + merge_pair_recursive(symbols[2:], pair)
    return (symbols[0],) + merge_pair_recursive(symbols[1:], pair)


def merge_pair_stack(symbols, pair):
    """Glue onto the last output symbol, unless that one was just made by a merge."""
    out, just_merged = [], False
    for s in symbols:
        if out and not just_merged and (out[-1], s) == tuple(pair):
            out[-1] += s
            just_merged = True
        else:
            out.append(s)
            just_merged = False
    return tuple(out)


def merge_pair_gpt2(symbols, pair):
    """GPT-2's bpe() inner loop: jump with tuple.index to the next left symbol."""
    first, second = pair
    new_word, i = [], 0
    while i < len(symbols):
        try:
            j = symbols.index(first, i)
        except ValueError:
            new_word.extend(symbols[i:])
            break
        new_word.extend(symbols[i:j])
        i = j
        if i < len(symbols) - 1 and symbols[i + 1] == second:
            new_word.append(first + second)
            i += 2
        else:
            new_word.append(symbols[i])
            i += 1
    return tuple(new_word)


def merge_pair_skip_flag(symbols, pair):
    """enumerate with a skip flag; list comparison of the pair."""
    syms = list(symbols)
    out, skip = [], False
    for i, s in enumerate(syms):
        if skip:
            skip = False
            continue
        if i < len(syms) - 1 and [s, syms[i + 1]] == list(pair):
            out.append(s + syms[i + 1])
            skip = True
        else:
            out.append(s)
    return tuple(out)


def merge_pair_slice_assign(symbols, pair):
    """Slice assignment on its own list copy."""
    s = list(symbols)
    i = 0
    while i < len(s) - 1:
        if s[i] == pair[0] and s[i + 1] == pair[1]:
            s[i:i + 2] = ["".join(pair)]
        i += 1
    return tuple(s)


def merge_pair_reduce(symbols, pair):
    """functools.reduce with (output, last-was-merged) state."""
    def step(acc, s):
        out, locked = acc
        if out and not locked and out[-1] == pair[0] and s == pair[1]:
            return out[:-1] + (out[-1] + s,), True
        return out + (s,), False
    return functools.reduce(step, symbols, ((), False))[0]


def merge_pair_tab_regex(symbols, pair, sep="\t"):
    """A regex over the tab-joined symbols with tab boundaries; an extra keyword."""
    pattern = re.compile(r"(?<![^\t])" + re.escape(pair[0] + sep + pair[1]) + r"(?![^\t])")
    return tuple(pattern.sub(lambda m: pair[0] + pair[1], sep.join(symbols)).split(sep))


correct("merge_pair", merge_pair_regex, merge_pair_recursive, merge_pair_stack, merge_pair_gpt2,
        merge_pair_skip_flag,
        merge_pair_slice_assign, merge_pair_reduce, merge_pair_tab_regex,
        # joined with a separator that cannot occur (NUL), split again, then the left-to-right scan
        _merge(("    out, i = [], 0\n", '    symbols = "\\x00".join(symbols).split("\\x00")\n    out, i = '
                                        '[], 0\n'),
               (MATCH, "symbols[i] == pair[0] and symbols[i + 1] == pair[1]"), name="merge_pair_split_parts"))


def merge_right_to_left(symbols, pair):
    out, i = [], len(symbols) - 1
    while i >= 0:
        if i > 0 and (symbols[i - 1], symbols[i]) == pair:
            out.insert(0, symbols[i - 1] + symbols[i])
            i -= 2
        else:
            out.insert(0, symbols[i])
            i -= 1
    return tuple(out)


merge_replace = edit(merge_pair_regex, (  # str.replace on the space-joined symbols
    'p.sub("".join(pair), " ".join(symbols))', '" ".join(symbols).replace(" ".join(pair), "".join(pair))'))
merge_overlapping = _merge(("i += 2", "i += 1"))  # the right symbol is used again: a a a -> aa aa a
ROWS += mistakes("merge_pair", [
    Mistake("overlapping occurrences", merge_overlapping, 1, ("overlapping", "i + 2")),
    Mistake("right to left", merge_right_to_left, 3, "right to left"),
    Mistake("first occurrence only", _merge(("i += 2", "return tuple(out) + tuple(symbols[i + 2:])")), 2,
            "only the first occurrence"),
    Mistake("str.replace on the joined text", merge_replace, 1, "inside a symbol"),
    Mistake("returns a list", _merge(("return tuple(out)", "return out")), 3, "tuple"),
    Mistake("the pair reversed merged too", _merge(("== pair:", "in (tuple(pair), tuple(pair)[::-1]):")), 3,
            "== pair exactly"),
    Mistake("only the left symbol compared", _merge((MATCH, "symbols[i] == pair[0]")), 1,
            "only the left symbol compared"),
    Mistake("the last symbol dropped", _merge(("while i < len(symbols):", "while i < len(symbols) - 1:")), 0,
            "last symbol was lost"),
    Mistake("merged with a space", _merge(("symbols[i] + symbols[i + 1])", "symbols[i] + ' ' + symbols[i + "
                                                                           "1])")), 1,
            "'l' + 'o' -> 'lo'"),
    Mistake("a regex without boundaries",
            edit(merge_pair_regex, ('r"(?<!\\S)" + bigram + r"(?!\\S)"', "bigram")), 1,
            "inside a symbol"),
    Mistake("the joined text compared", _merge((MATCH, "symbols[i] + symbols[i + 1] == pair[0] + pair[1]")),
            3,
            ("joined text", "== pair")),
])


# ========================================================================= learn_bpe
def learn_bpe_recount(corpus, num_merges, min_frequency=2):
    """Slow but correct: recount every pair after each merge, over the words of every line."""
    vocab = collections.Counter(_word(w) for line in corpus for w in line.split())
    merges = []
    for _ in range(num_merges):
        stats = get_pair_stats_defaultdict(vocab)
        if not stats:
            break
        best = max(stats, key=lambda p: (stats[p], p))
        if stats[best] < min_frequency:
            break
        merges.append(best)
        vocab = {merge_pair_regex(w, best): f for w, f in vocab.items()}
    return merges


def learn_bpe_paper(corpus, num_merges, min_frequency=2):
    """The paper's Algorithm 1 style: words as space-joined strings, tie broken by sorting."""
    vocab = collections.Counter()
    for line in corpus:
        for word in line.split(" "):
            if word:
                vocab[" ".join(word[:-1]) + (" " if len(word) > 1 else "") + word[-1] + "</w>"] += 1
    merges = []
    while len(merges) < num_merges:
        pairs = collections.Counter()
        for word, freq in vocab.items():
            symbols = word.split()
            for a, b in zip(symbols, symbols[1:]):
                pairs[a, b] += freq
        ranked = sorted(pairs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        if not ranked or ranked[0][1] < min_frequency:
            break
        best = ranked[0][0]
        merges.append(best)
        p = re.compile(r"(?<!\S)" + re.escape(" ".join(best)) + r"(?!\S)")
        vocab = {p.sub("".join(best), w): f for w, f in vocab.items()}
    return [list(m) for m in merges]  # lists of two: fine too


def learn_bpe_indexed(corpus, num_merges, min_frequency=2):
    """Incremental pair counts with an index pair -> words; the best pair by max over the current counts."""
    freq = collections.Counter(w for line in corpus for w in line.split())
    seg = {w: _word(w) for w in freq}
    stats, holders = collections.Counter(), collections.defaultdict(set)
    for w, s in seg.items():
        for p in zip(s, s[1:]):
            stats[p] += freq[w]
            holders[p].add(w)
    merges = []
    while len(merges) < num_merges and stats:
        best = max(stats, key=lambda p: (stats[p], p))
        if stats[best] < min_frequency:
            break
        merges.append(best)
        for w in holders.pop(best):
            old, new = seg[w], merge_pair_stack(seg[w], best)
            for p in zip(old, old[1:]):
                stats[p] -= freq[w]
                if not stats[p]:
                    del stats[p]
            for p in zip(new, new[1:]):
                stats[p] += freq[w]
                holders[p].add(w)
            seg[w] = new
    return merges


# the slow, recounting learn_bpe (correct, above) so changed
_recount = functools.partial(using, learn_bpe_recount)
BEST_PAIR, MERGED = "best = max(stats, key=lambda p: (stats[p], p))", "merge_pair_regex(w, best)"
STOP_AT = "stats[best] <"
learn_bpe_items_max = _recount(  # max over items by kv[::-1] = (count, pair)
    (BEST_PAIR, "best, count = max(stats.items(), key=lambda kv: kv[::-1])"), (STOP_AT, "count <"),
    (MERGED, "merge_pair_gpt2(w, best)"), name="learn_bpe_items_max")
# incremental counts kept with zeros (filtered when choosing); merges returned as lists
learn_bpe_live_counts = edit(
    learn_bpe_indexed,
    ("                if not stats[p]:\n                    del stats[p]\n", ""),
    ("and stats:\n        best = max(stats, key=lambda p: (stats[p], p))\n        if stats[best]",
     "and any(stats.values()):\n        live = {p: c for p, c in stats.items() if c > 0}\n"
     "        best = max(live, key=lambda p: (live[p], p))\n        if live[best]"),
    ("merges.append(best)", "merges.append(list(best))"), name="learn_bpe_live_counts")
correct("learn_bpe", learn_bpe_recount, learn_bpe_paper, learn_bpe_indexed, learn_bpe_items_max,
        learn_bpe_live_counts,
        # the reference's heap keyed by (-count, the pair's code points negated), not by its key class
        using(LEARN_BPE,
              ("    counts = Counter(", "    def key(p):\n        return tuple(tuple(-ord(c) for c in s) + "
                                        "(1,) for s in p)\n\n    counts = Counter("),
              ("(-c, Descending(p))", "(-c, key(p), p)"),
              ("neg, key = heapq.heappop(heap)\n        best = key.pair",
               "neg, _, best = heapq.heappop(heap)"),
              ("(-stats[pair], Descending(pair))", "(-stats[pair], key(pair), pair)"),
              name="learn_bpe_heap_codepoints"),
        # words kept as space-joined strings; the winner is the last of sorted(stats, key=(count, pair)); a
        # tuple
        _recount(("_word(w) for line", '" ".join(_word(w)) for line'),
                 ("(vocab)", "({tuple(w.split(' ')): f for w, f in vocab.items()})"),
                 (BEST_PAIR, "best = sorted(stats, key=lambda p: (stats[p], p))[-1]"),
                 (MERGED, "' '.join(merge_pair_stack(tuple(w.split(' ')), best))"),
                 ("return merges", "return tuple(merges)"), name="learn_bpe_sorted_strings"),
        # pair counts in a numpy array; the greatest pair among the maxima
        _recount((BEST_PAIR, "counts = np.array(list(stats.values()), dtype=np.int64)\n"
                             "        best = max(p for p, k in zip(stats, counts) if k == counts.max())"),
                 (STOP_AT, "counts.max() <"), (MERGED, "merge_pair_skip_flag(w, best)"),
                 name="learn_bpe_numpy_counts"),
        # the best pair the last of the sorted maxima; a keyword-only extra
        _recount(("min_frequency=2):", "min_frequency=2, *, verbose=False):"),
                 (BEST_PAIR, "top = max(stats.values())\n"
                             "        best = sorted(p for p, c in stats.items() if c == top)[-1]\n"
                             "        if verbose:\n            print(best)"),
                 (MERGED, "merge_pair_reduce(w, best)"), name="learn_bpe_verbose_keyword"),
        # pairs sorted descending, counts in a float64 tensor: argmax's first maximum is the greatest pair
        _recount((BEST_PAIR, "pairs = sorted(stats, reverse=True)\n"
                             "        counts = torch.tensor([stats[p] for p in pairs], dtype=torch.float64)\n"
                             "        best = pairs[int(torch.argmax(counts))]"),
                 (STOP_AT, "counts.max() <"), name="learn_bpe_argmax"))


def test_slow_learn_bpe_is_fast_enough():
    """A learn_bpe that recounts every pair at each merge stays far from the checks' time limit on the
    fixtures (corpus_b and corpus_c share one check). About 1 s on a busy 2-core machine."""
    from autograder.core import DEFAULT_TIMEOUT
    fx = stored_fixture()["learn"]
    for names in (("corpus_a",), ("corpus_b", "corpus_c")):
        start = time.perf_counter()
        for name in names:
            got = learn_bpe_recount(fx[name]["corpus"], fx[name]["num_merges"], fx[name]["min_frequency"])
            assert [list(m) for m in got] == fx[name]["merges"]
        took = time.perf_counter() - start
        assert took < DEFAULT_TIMEOUT / 2, f"{names}: {took:.2f} s"


_learn = functools.partial(edit, LEARN_BPE)  # _learn((old, new), ...): the reference so changed


def learn_bpe_mutable_default(corpus, num_merges, min_frequency=2, _words=collections.Counter()):  # noqa: B006 (the mistake)
    """The word counts of every call so far, kept in a mutable default."""
    _words.update(w for line in corpus for w in line.split())
    return learn_bpe_recount([" ".join(_words.elements())], num_merges, min_frequency)


DEFAULT_2 = "min_frequency: int = 2"
WORDS, SEGMENTED = 'line.strip("\\r\\n ").split(" ")', "[word_to_symbols(w) for w in counts]"
TIE, STOP = "return self.pair > other.pair", "        if -neg < min_frequency:\n            break\n"
LEARN_NO_END = _learn((SEGMENTED, "[tuple(w) for w in counts]"))
LINES_AS_WORDS = _learn((f"for word in {WORDS} if word", "for word in [line] if word"))
DOCSTRING_EXAMPLE = "learns the docstring example"
ROWS += mistakes("learn_bpe", [
    # ties
    Mistake("ties to the smallest pair (min)", _learn((TIE, "return self.pair < other.pair")), 5,
            "smallest pair"),
    Mistake("sorted by (-count, pair)",
            _recount((BEST_PAIR, "best = sorted(stats.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]")), 5,
            "smallest pair"),
    Mistake("ties to the first seen (most_common)",
            _recount((BEST_PAIR, "best = collections.Counter(stats).most_common(1)[0][0]")), 5,
            "first pair counted"),
    Mistake("ties by the joined string", _learn((TIE, "return ''.join(self.pair) > ''.join(other.pair)")), 6,
            "ties go to the greatest pair"),
    # the words counted
    Mistake("word frequencies ignored",
            _learn(("freqs = list(counts.values())", "freqs = [1] * len(counts)")), 3,
            "frequencies ignored"),
    Mistake("words counted once per line", _learn((f"for word in {WORDS}", f"for word in set({WORDS})")), 3,
            "frequencies ignored"),
    Mistake("the corpus lowercased", _learn((WORDS, 'line.lower().strip("\\r\\n ").split(" ")')), 7,
            "lowercased"),
    Mistake("lines taken as words", LINES_AS_WORDS, 0, "list of LINES"),
    Mistake("lines taken as words: named by the first check", LINES_AS_WORDS, 0,
            "each line counted as one word",
            title=DOCSTRING_EXAMPLE, not_says="one of these"),
    Mistake("pairs across words (line as one row)", _recount((
        "_word(w) for line in corpus for w in line.split()", "tuple(s for w in line.split() for s in "
                                                             "_word(w))"
        " for line in corpus")), 2, "across words"),
    Mistake("word counts in a mutable default", learn_bpe_mutable_default, 1,
            ("not in this corpus", "mutable default")),
    Mistake("corpus emptied", _learn((f"    words = {SEGMENTED}", "    corpus.clear()\n    words = "
                                                                  f"{SEGMENTED}")), 0,
            ("corpus list passed in", "unchanged")),
    Mistake("empty strings of split(' ') taken for words",  # ''[-1]: the case with runs of spaces crashes
            _learn((f"{WORDS} if word", 'line.strip("\\r\\n").split(" ")')), 7,
            ("IndexError", "skip the empty strings")),
    # the contract's iterables: an emptiness test that reads a generator's first lines
    Mistake("the corpus read twice", _learn(("    counts = Counter(", "    if not any(line.strip() for line "
                                                                      "in corpus):\n        return []\n    "
                                                                      "counts = Counter(")), 7,
            ("a generator of", "read twice", "corpus = list(corpus)")),
    Mistake("corpus lines stripped in place",  # seen on the case with spaces at the ends of its lines
            _learn(("    counts = Counter(", "    for i, line in enumerate(corpus):\n        corpus[i] = "
                                             "line.strip()\n    counts = Counter(")), 7,
            ("corpus list passed in", "unchanged")),
    # </w>
    Mistake("</w> missing", LEARN_NO_END, 0, "`</w>` missing"),
    Mistake("</w> missing: named as such by the first check", LEARN_NO_END, 0, "`</w>` missing",
            title=DOCSTRING_EXAMPLE, not_says="each line counted"),
    Mistake("</w> a separate symbol", _learn((SEGMENTED, "[tuple(w) + (END,) for w in counts]")), 0,
            "separate symbol"),
    Mistake("</w> split into characters", _learn((SEGMENTED, "[tuple(w + END) for w in counts]")), 0,
            ("pieces of the marker", "< / w >")),
    # the merge
    Mistake("overlapping occurrences merged", using(LEARN_BPE, merge_pair=merge_overlapping), 0,
            "overlapping"),
    Mistake("merged right to left", using(LEARN_BPE, merge_pair=merge_right_to_left), 6, "right to left"),
    Mistake("str.replace on the joined word", _recount((MERGED, "merge_replace(w, best)")), 6,
            ("matched inside symbols", "str.replace")),
    Mistake("words not merged after a merge", _recount((MERGED, "w")), 0, "merged twice"),
    # when to stop
    Mistake("min_frequency ignored", _learn((STOP, "")), 6, "min_frequency ignored"),
    Mistake("stops at count == min_frequency", _learn(("-neg < min_frequency", "-neg <= min_frequency")), 6,
            "exactly min_frequency"),
    Mistake("min_frequency tested after appending",
            _learn((STOP + "        merges.append(best)\n", "        merges.append(best)\n" + STOP)), 6,
            "BEFORE appending"),
    Mistake("default min_frequency 1", _learn((DEFAULT_2, "min_frequency: int = 1")), 7, "min_frequency"),
    Mistake("one merge too few", _learn(("len(merges) < num_merges", "len(merges) < num_merges - 1")), 3,
            "one merge too few"),
    Mistake("num_merges taken as the vocabulary size", _recount((
        "for _ in range(num_merges):", "while len({s for w in vocab for s in w}) < num_merges:")), 1,
            "num_merges"),
    Mistake("crashes once no pair is left", _recount(("        if not stats:\n            break\n", "")), 5,
            ("ValueError", "no pair is left")),
    # what is returned
    Mistake("merged strings returned", _learn(("merges.append(best)", "merges.append(best[0] + best[1])")), 0,
            "(left, right) pairs"),
])


# ========================================================================= apply_bpe
def apply_bpe_ranks(word, merges):
    rank = {tuple(m): i for i, m in reversed(list(enumerate(merges)))}
    symbols = list(word[:-1]) + [word[-1] + "</w>"]
    while True:
        candidates = [(rank[p], i) for i, p in enumerate(zip(symbols, symbols[1:])) if p in rank]
        if not candidates:
            return symbols
        r, _ = min(candidates)
        symbols = list(solutions.merge_pair(tuple(symbols), merges[r]))


def apply_bpe_first_occurrence(word, merges):
    """Merges only the first occurrence of the best pair, then looks again: same result."""
    rank = {}
    for i, m in enumerate(merges):
        rank.setdefault(tuple(m), i)
    s = list(word[:-1]) + [word[-1] + "</w>"]
    while True:
        found = [(rank[(a, b)], i) for i, (a, b) in enumerate(zip(s, s[1:])) if (a, b) in rank]
        if not found:
            return s
        _, i = min(found)
        s[i:i + 2] = [s[i] + s[i + 1]]


def apply_bpe_gpt2(word, merges):
    """GPT-2's bpe(): a set of pairs, min by rank (first occurrence), until the best pair is unknown."""
    ranks = dict(zip(map(tuple, reversed(merges)), reversed(range(len(merges)))))
    w = _word(word)
    pairs = set(zip(w, w[1:]))
    if not pairs:
        return list(w)
    while True:
        bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if bigram not in ranks:
            break
        w = merge_pair_gpt2(w, bigram)
        if len(w) == 1:
            break
        pairs = set(zip(w, w[1:]))
    return list(w)


def apply_bpe_cached(word, merges, _cache={}):  # noqa: B006 (a cache, on purpose)
    """A cache keyed by (word, merges): correct."""
    key = (word, tuple(map(tuple, merges)))
    if key not in _cache:
        _cache[key] = solutions.apply_bpe(word, list(merges))
    return list(_cache[key])


def apply_bpe_replay(word, merges, *, dropout=0.0):
    """Replays the merges in order, back to the first one after every merge that changed the word."""
    s, i = _word(word), 0
    while i < len(merges):
        new = solutions.merge_pair(s, tuple(merges[i]))
        s, i = (new, 0) if new != s else (s, i + 1)
    return list(s)


def apply_bpe_recursive(word, merges):
    rank = {}
    for i, m in enumerate(merges):
        rank.setdefault(tuple(m), i)

    def go(s):
        present = [p for p in zip(s, s[1:]) if p in rank]
        return list(s) if not present else go(merge_pair_reduce(s, min(present, key=rank.__getitem__)))
    return go(_word(word))


_apply = functools.partial(using, APPLY_BPE)  # _apply((old, new), ...): the reference so changed
START, BEST, END_OF = "symbols = word_to_symbols(word)", "pair = min(", "return list(symbols)"
BEST_MIN = "pair = min(zip(symbols, symbols[1:]), key=lambda p: ranks.get(p, math.inf))"
MERGE = "merge_pair(symbols, pair)"
RANKS = "ranks = merge_ranks(merges)  # given: {pair: rank}, computed once per list of merges"
apply_bpe_sorted_candidates = _apply(  # the candidates (rank, pair) sorted
    (BEST_MIN, "candidates = sorted((ranks[p], p) for p in zip(symbols, symbols[1:]) if p in ranks)\n"
               "        pair = candidates[0][1] if candidates else None"),
    (MERGE, "merge_pair_skip_flag(symbols, pair)"), name="apply_bpe_sorted_candidates",
    merge_pair_skip_flag=merge_pair_skip_flag)
correct("apply_bpe", apply_bpe_ranks, apply_bpe_first_occurrence, apply_bpe_gpt2, apply_bpe_cached,
        apply_bpe_sorted_candidates, apply_bpe_replay, apply_bpe_recursive,
        # scans the merge list from the start after every merge (slow, correct); a tuple: fine too
        _apply((BEST_MIN, "present = set(zip(symbols, symbols[1:]))\n"
                          "        pair = next((m for m in merges if m in present), None)"),
               (MERGE, "merge_pair_regex(symbols, pair)"), (END_OF, "return tuple(symbols)"),
               name="apply_bpe_scan",
               merge_pair_regex=merge_pair_regex),
        # merges.index as the rank (slow, correct), an extra keyword with a default
        _apply(("merges: list[tuple[str, str]])", "merges, dropout=0.0)"),
               (RANKS, "merges = [tuple(m) for m in merges]"),
               ("ranks.get(p, math.inf)", "merges.index(p) if p in merges else math.inf"),
               ("if pair not in ranks", "if pair not in merges"), (MERGE, "merge_pair_recursive(symbols, "
                                                                          "pair)"),
               name="apply_bpe_list_index", merge_pair_recursive=merge_pair_recursive),
        # the ranks in a numpy int64 array, int64's maximum for no rank; argmin
        _apply((BEST_MIN, "r = np.array([ranks.get(p, NEVER) for p in zip(symbols, symbols[1:])], "
                          "dtype=np.int64)\n        pair = symbols[int(r.argmin())], symbols[int(r.argmin()) "
                          "+ 1]"),
               (MERGE, "merge_pair_slice_assign(symbols, pair)"), name="apply_bpe_numpy_argmin", np=np,
               NEVER=np.iinfo(np.int64).max, merge_pair_slice_assign=merge_pair_slice_assign))


def apply_bpe_cache_by_word(word, merges, _cache={}):  # noqa: B006  (the mistake itself)
    if word not in _cache:
        _cache[word] = solutions.apply_bpe(word, merges)
    return list(_cache[word])


ROWS += mistakes("apply_bpe", [
    # the order of the merges
    Mistake("left to right in the word",
            _apply((BEST_MIN, "pair = next((p for p in zip(symbols, symbols[1:]) if p in ranks), None)")), 3,
            "left to right in the word"),
    Mistake("latest merge first",
            _apply((BEST, "pair = max("), ("ranks.get(p, math.inf)", "ranks.get(p, -1)")), 3,
            "LATEST merge"),
    Mistake("each merge once in list order", edit(apply_bpe_replay, ("(new, 0) if new != s else (s, i + 1)",
                                                                     "new, i + 1")), 5,
            "applied once in list order"),
    Mistake("stops with two symbols", _apply(("while len(symbols) > 1:", "while len(symbols) > 2:")), 4,
            "two symbols left"),
    Mistake("ranks keyed by the joined text (tiktoken-style)", edit(apply_bpe_first_occurrence, (
        "rank.setdefault(tuple(m), i)", "rank.setdefault(m[0] + m[1], i)"), ("(rank[(a, b)], i)",
                                                                             "(rank[a + b], i)"),
        ("if (a, b) in rank]", "if a + b in rank]")), 5, "PAIR of symbols"),
    # </w>
    Mistake("</w> dropped", _apply((END_OF, "return list(symbols[:-1]) + [symbols[-1].replace(END, '')]")), 0,
            "`</w>` dropped"),
    Mistake("</w> a separate symbol", _apply((START, "symbols = tuple(word) + (END,)")), 0,
            "separate symbol"),
    Mistake("</w> split into characters", _apply((START, "symbols = tuple(word + END)")), 0, "< / w >"),
    Mistake("</w> joined after merging", _apply((START, "symbols = tuple(word)"),
                                                (END_OF, "return list(symbols[:-1]) + [symbols[-1] + END]")),
            1, "joined only after merging"),
    # the merge
    Mistake("overlapping occurrences merged", using(APPLY_BPE, merge_pair=merge_overlapping), 0,
            "overlapping"),
    Mistake("merged right to left", using(APPLY_BPE, merge_pair=merge_right_to_left), 4, "right to left"),
    # what it returns, what it changes
    Mistake("a joined string returned", _apply((END_OF, "return ' '.join(symbols)")), 0,
            "list or tuple of strings"),
    Mistake("the word lowercased", _apply(("word_to_symbols(word)", "word_to_symbols(word.lower())")), 4,
            "lowercased"),
    Mistake("merges list emptied", _apply(("    return list(symbols)\n", "    merges.clear()  # the caller's "
                                                                         "list\n"
                                           "    return list(symbols)\n")), 0,
            ("merges list passed in", "unchanged")),
    Mistake("a cache keyed by the word", apply_bpe_cache_by_word, 4, ("EARLIER call", "cache")),
])


# ========================================================================= BPETokenizer
class TokenizerOwnVocab:
    """Its own vocabulary order (merges first, characters after), a dict vocabulary, vocab_size as an
    attribute, JSON of its own."""

    def __init__(self):
        self.merges, self.vocab, self.vocab_size = [], {}, 4

    def train(self, corpus, num_merges, min_frequency=2):
        corpus = list(corpus)
        self.merges = learn_bpe_recount(corpus, num_merges, min_frequency)
        symbols = ["".join(m) for m in self.merges]
        for c in sorted({c for line in corpus for c in "".join(line.split())}, reverse=True):
            symbols += [c + "</w>", c]
        self.vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
        for s in symbols:
            self.vocab.setdefault(s, len(self.vocab))
        self.vocab_size = len(self.vocab)
        return self

    def encode(self, text):
        return [self.vocab.get(s, 3) for w in text.split() for s in apply_bpe_ranks(w, self.merges)]

    def decode(self, ids):
        inverse = {i: s for s, i in self.vocab.items()}
        return " ".join("".join(inverse.get(i, "<unk>") for i in ids if i > 2)
                        .split("</w>")).strip().replace("  ", " ")

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"m": self.merges, "v": self.vocab}, f)

    @classmethod
    def load(cls, path):
        tok = cls()
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        tok.merges, tok.vocab = [tuple(m) for m in data["m"]], data["v"]
        tok.vocab_size = len(tok.vocab)
        return tok


class TokenizerRebuildsVocab:
    """Saves only the characters and merges; load rebuilds the (sorted) vocabulary the same way."""

    def __init__(self):
        self.merges, self.chars = [], []
        self._index()

    def _index(self):
        symbols = set(self.chars) | {c + "</w>" for c in self.chars} | {a + b for a, b in self.merges}
        self.itos = ["<pad>", "<bos>", "<eos>", "<unk>"] + sorted(symbols)
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    @property
    def vocab_size(self):
        return len(self.itos)

    def train(self, corpus, num_merges, min_frequency=2):
        corpus = [" ".join(line.split()) for line in corpus]
        self.merges = [tuple(m) for m in learn_bpe_indexed(corpus, num_merges, min_frequency)]
        self.chars = sorted({c for line in corpus for c in line if c != " "})
        self._index()
        return self

    def encode(self, text):
        return [self.stoi.get(s, 3) for w in text.split() for s in apply_bpe_first_occurrence(w, self.merges)]

    def decode(self, ids):
        return re.sub(r"\s+", " ", "".join(self.itos[i] for i in ids if i > 2).replace("</w>", " ")).strip()

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"chars": self.chars, "merges": self.merges}, f)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        tok = cls()
        tok.chars, tok.merges = data["chars"], [tuple(m) for m in data["merges"]]
        tok._index()
        return tok


class TokenizerPickle:
    """Pickle files; the vocabulary from the segmented corpus, then the characters; encode caches words;
    decode rebuilds the words symbol by symbol."""

    def __init__(self, unk="<unk>"):
        self.merges, self.itos = [], ["<pad>", "<bos>", "<eos>", unk]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self._cache = {}

    @property
    def vocab_size(self):
        return len(self.stoi)

    def train(self, corpus, num_merges, min_frequency=2):
        lines = [" ".join(line.split()) for line in corpus]
        self.merges = learn_bpe_items_max(lines, num_merges, min_frequency)
        chars = sorted(set("".join(lines).replace(" ", "")))
        seen = set()
        for line in lines:
            for w in line.split():
                seen.update(solutions.apply_bpe(w, self.merges))
        for s in sorted(seen) + chars + [c + "</w>" for c in chars] + ["".join(m) for m in self.merges]:
            if s not in self.stoi:
                self.stoi[s] = len(self.itos)
                self.itos.append(s)
        self._cache = {}
        return self

    def encode(self, text):
        out = []
        for w in text.split():
            if w not in self._cache:
                self._cache[w] = [self.stoi.get(s, 3) for s in apply_bpe_gpt2(w, self.merges)]
            out += self._cache[w]
        return out

    def decode(self, ids):
        words, cur = [], ""
        for i in ids:
            if i in (0, 1, 2):
                continue
            s = self.itos[i]
            if s.endswith("</w>"):
                words.append(cur + s[:-4])
                cur = ""
            else:
                cur += s
        return " ".join(words + ([cur] if cur else []))

    def save(self, path):
        with open(path, "wb") as f:
            pickle.dump((self.merges, self.itos), f)

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            merges, itos = pickle.load(f)
        tok = cls()
        tok.merges, tok.itos = merges, itos
        tok.stoi = {s: i for i, s in enumerate(itos)}
        return tok


class TokenizerInitArguments:
    """__init__(merges=None, itos=None), used by load; merges first in the vocabulary; vocab_size an
    attribute."""
    SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")

    def __init__(self, merges=None, itos=None):
        self.merges = [tuple(m) for m in (merges or [])]
        self.itos = list(itos) if itos else list(self.SPECIALS)
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.vocab_size = len(self.itos)

    def train(self, corpus, num_merges, min_frequency=2):
        corpus = [" ".join(line.split()) for line in corpus]
        self.merges = [tuple(m) for m in learn_bpe_live_counts(corpus, num_merges, min_frequency)]
        itos = list(self.SPECIALS) + ["".join(m) for m in self.merges]
        for c in sorted({c for line in corpus for c in line} - {" "}):
            itos += [c, c + "</w>"]
        self.itos = list(dict.fromkeys(itos))
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.vocab_size = len(self.itos)
        return self

    def encode(self, text):
        return [self.stoi.get(s, 3) for w in text.split()
                for s in apply_bpe_sorted_candidates(w, self.merges)]

    def decode(self, ids):
        return " ".join("".join(self.itos[i] for i in ids if i not in (0, 1, 2)).replace("</w>", " ").split())

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"merges": self.merges, "itos": self.itos}, f, ensure_ascii=False)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return cls(d["merges"], d["itos"])


class TokenizerLoadNew(BPETokenizer):
    """pathlib for the file; load builds the instance with cls.__new__ and fills __dict__."""

    def save(self, path):
        pathlib.Path(path).write_text(json.dumps({"merges": self.merges, "itos": self.itos}),
                                      encoding="utf-8")

    @classmethod
    def load(cls, path):
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        tok = cls.__new__(cls)
        tok.__dict__.update(merges=[tuple(m) for m in data["merges"]], itos=data["itos"],
                            stoi={s: i for i, s in enumerate(data["itos"])})
        return tok


_tok = functools.partial(using, BPETokenizer)  # _tok((old, new), ...): the reference so changed
ENCODED, SKIP = "[self.stoi.get(s, UNK) for s in self.tokenize(text)]", "skip = {PAD, BOS, EOS}"
TOKENIZE = "    def tokenize("  # where a method is added
DECODED = '"".join(symbols).replace(END, " ").strip()'
IN_RANGE = ("[self.itos[i] if 0 <= i < len(self.itos) else SPECIALS[UNK]\n"
            "                   for i in (int(i) for i in ids)")
correct("BPETokenizer", TokenizerOwnVocab, TokenizerRebuildsVocab, TokenizerPickle, TokenizerInitArguments,
        TokenizerLoadNew,
        # encode gives a tuple; decode goes through a tensor and a regex
        _tok((ENCODED, "tuple(self.stoi.get(s, UNK) for s in self.tokenize(text))"),
             (f"        {SKIP}\n", "        ids = torch.as_tensor(list(ids), dtype=torch.long)\n"),
             ("in (int(i) for i in ids) if i not in skip]", "in ids[ids > 2].tolist()]"),
             (DECODED, 're.sub(r"\\s+", " ", "".join(symbols).replace(END, " ")).strip()'),
             name="TokenizerTupleIds",
             re=re),
        # decode indexes a numpy object array and splits on </w>
        _tok((f"        {SKIP}\n", "        ids = [i for i in ids if i >= 3]\n"),
             (f"{IN_RANGE} if i not in skip]", "np.array(self.itos, dtype=object)[ids] if ids else []"),
             (DECODED, '" ".join(p for p in "".join(symbols).split(END) if p.strip()).strip()'),
             name="TokenizerNumpyTable", np=np),
        # vocab_size a numpy integer, encode a tensor, decode by splitting on </w>
        _tok((TOKENIZE, "    @property\n    def vocab_size(self):\n        return "
                        "np.int64(len(self.itos))\n\n"
                        + TOKENIZE),
             (ENCODED, f"torch.tensor({ENCODED}, dtype=torch.long)"),
             (DECODED, '" ".join(part for part in "".join(symbols).split(END) if part)'),
             name="TokenizerNumpySize",
             np=np),
        # train(corpus, num_merges, *, min_frequency=2)
        _tok(("num_merges: int, min_frequency", "num_merges: int, *, min_frequency"),
             name="TokenizerKeywordOnlyTrain"),
        # encode gives a numpy array of ids
        _tok((ENCODED, f"np.array({ENCODED}, dtype=np.int64)"), name="TokenizerNumpyIds", np=np))


def _base(*changes):
    """BPETokenizer on its given base (TokenizerBase: __init__, vocab_size, save, load) changed by edit()."""
    return type("BPETokenizer", (edit(solutions.tokenization.TokenizerBase, *changes), BPETokenizer), {})


LOADED_MERGES = 'tok.merges = [tuple(m) for m in data["merges"]]'


class TokLoadKeepsLists(_base((LOADED_MERGES, 'tok.merges = data["merges"]'))):
    """load keeps JSON's lists, and encode tests `pair in self.merges`: after loading no merge applies."""

    def encode(self, text):
        out = []
        for w in text.split():
            s = _word(w)
            while True:
                present = [p for p in zip(s, s[1:]) if p in self.merges]
                if not present:
                    break
                s = solutions.merge_pair(s, min(present, key=self.merges.index))
            out += [self.stoi.get(x, solutions.UNK) for x in s]
        return out


class TokSharedCache(BPETokenizer):
    """Encoded words cached in a class attribute: a second tokenizer gets the first one's ids."""
    ids_of = {}

    def encode(self, text):
        out = []
        for w in text.split():
            if w not in self.ids_of:
                self.ids_of[w] = [self.stoi.get(s, solutions.UNK)
                                  for s in solutions.apply_bpe(w, self.merges)]
            out += self.ids_of[w]
        return out


class TokUnknownWord(BPETokenizer):
    """A word with any unknown subword becomes one <unk>."""

    def encode(self, text):
        out = []
        for w in text.split():
            subwords = solutions.apply_bpe(w, self.merges)
            out += ([solutions.UNK] if any(s not in self.stoi for s in subwords) else
                    [self.stoi[s] for s in subwords])
        return out


SYMBOLS, RETURN_SELF = "symbols = chars + [c + END for c in chars] + ", "        return self\n"
# train rebuilds itos but leaves stoi with the specials only: encode gives <unk>; load rebuilds stoi
STALE_STOI = _tok((RETURN_SELF,
                   "        self.stoi = {s: i for i, s in enumerate(self.itos[:4])}\n" + RETURN_SELF))
ROWS += mistakes("BPETokenizer", [
    # the vocabulary
    Mistake("specials not at 0-3", _tok(
        (RETURN_SELF, "        self.itos = self.itos[4:] + self.itos[:4]  # the specials last\n"
                      "        self.stoi = {s: i for i, s in enumerate(self.itos)}\n" + RETURN_SELF),
        ("self.stoi.get(s, UNK)", 'self.stoi.get(s, self.stoi["<unk>"])'),
        (SKIP, 'skip = {self.stoi[s] for s in ("<pad>", "<bos>", "<eos>")}')), 5, "specials first"),
    Mistake("no word-final characters in the vocabulary", _tok((SYMBOLS, "symbols = chars + ")), 5,
            "alone and with </w>"),
    Mistake("a vocabulary of merges only", _tok((SYMBOLS, "symbols = ")), 5, "every character of the corpus"),
    Mistake("vocabulary in class attributes", _tok(  # every tokenizer shares and grows them
        (TOKENIZE, "    itos, stoi = list(SPECIALS), {s: i for i, s in enumerate(SPECIALS)}\n\n"
                   "    def __init__(self):\n        self.merges = []\n\n" + TOKENIZE),
        ("        self.itos = list(SPECIALS)\n        self.stoi = {s: i for i, s in enumerate(self.itos)}\n",
         "")), 7,
            "class attributes"),
    Mistake("vocab_size a method", _tok((TOKENIZE, "    def vocab_size(self):\n        return "
                                                   "len(self.itos)\n\n"
                                                   + TOKENIZE)), 7, "@property"),
    Mistake("train's min_frequency 1", _tok((DEFAULT_2, "min_frequency: int = 1")), 7, "min_frequency=2"),
    Mistake("train does not return self", _tok((RETURN_SELF, "")), 7, "return self"),
    Mistake("train keeps the corpus' whitespace",
            _tok(('corpus = [" ".join(line.split()) for line in corpus]', "corpus = list(corpus)")), 7,
            "run of whitespace into one space"),
    # the contract's iterables: the corpus is read once (the checks used to pass lists only)
    Mistake("train reads its corpus twice", _tok(
        ("else list(corpus)", "else corpus"),
        ("self.merges = learn_bpe(corpus, num_merges, min_frequency)", "self.merges = learn_bpe(lines, "
                                                                       "num_merges, min_frequency)"),
        ('corpus = [" ".join(line.split()) for line in corpus]', 'lines = (" ".join(line.split()) for line '
                                                                 'in corpus)\n'
         '        corpus = [" ".join(line.split()) for line in corpus]')), 7,
            ("a generator of the lines", "read twice", "corpus = list(corpus)")),
    # the contract's special ids: a sorted vocabulary keeps <unk> at 3 unless a symbol sorts before '<' (the
    # checks' corpus had none), and puts <bos> at 0 whatever the corpus
    Mistake("vocabulary sorted, specials included", _tok((RETURN_SELF, "        self.itos = "
                                                                       "sorted(self.itos)\n        self.stoi "
                                                                       "= {s: i for i, s in "
                                                                       "enumerate(self.itos)}\n"
                                                          + RETURN_SELF)), 7,
            ("itos[:4]", "sorted order", "keep the specials first")),
    # told 'joined with spaces' before: the opposite mistake
    Mistake("decode drops the spaces", _tok((DECODED, '"".join(symbols).replace(END, "").strip()')), 7,
            ("words ran together", "replace('</w>', ' ')"), not_says="joined with spaces"),
    Mistake("lowercases", _tok(('" ".join(line.split())', '" ".join(line.lower().split())'),
                               ("self.tokenize(text)", "self.tokenize(text.lower())")), 6, "lowercased"),
    Mistake("train did not rebuild stoi: save(path)", STALE_STOI, 0, "did not rebuild stoi",
            title="save(path)",
            not_says="save everything"),
    Mistake("train did not rebuild stoi: specials", STALE_STOI, 0, "did not rebuild stoi",
            title="specials take ids",
            not_says="save everything"),
    # encode
    Mistake("encode adds <bos>/<eos>", _tok((ENCODED, f"[BOS] + {ENCODED} + [EOS]")), 5,
            "added <bos> and <eos>"),
    Mistake("unknown symbols crash", _tok(("self.stoi.get(s, UNK)", "self.stoi[s]")), 7,
            ("KeyError", "<unk>")),
    Mistake("unknown symbols as <pad>", _tok(("self.stoi.get(s, UNK)", "self.stoi.get(s, PAD)")), 7,
            "<unk>, whose id is 3"),
    Mistake("one <unk> for a whole word", TokUnknownWord, 7, "not the whole word to one <unk>"),
    Mistake("words split on ' ' only",
            _tok(("split_cached(self, text, apply_bpe)", "[s for word in text.split(' ') "
                                             "if word for s in apply_bpe(word, self.merges)]")), 7,
            "str.split()"),
    Mistake("a cache in a class attribute", TokSharedCache, 7, ("cache", "class attribute")),
    # decode
    Mistake("decode keeps the specials", _tok((SKIP, "skip = set()")), 7, "skip the ids of <pad>"),
    Mistake("decode drops <unk>", _tok((SKIP, "skip = {PAD, BOS, EOS, UNK}")), 7, ("decode([3])", "'<unk>'")),
    Mistake("decode joins subwords with spaces", _tok(('"".join(symbols).replace(END, " ")',
                                                       '" ".join(symbols).replace(END, "")')), 7,
            "joined with spaces"),
    Mistake("decode not stripped", _tok(('.replace(END, " ").strip()', '.replace(END, " ")')), 7,
            "strip the result"),
    # save and load
    Mistake("load loses the merges", _base((LOADED_MERGES, "tok.merges = []")), 7, "after save and load"),
    Mistake("save keeps only the vocabulary", _base(('{"merges": [list(m) for m in self.merges], "itos": '
                                                     'self.itos}',
                                                     '{"itos": self.itos}'),
                                                    (f"        {LOADED_MERGES}\n", "")), 7,
            "after save and load"),
    Mistake("load not a classmethod",
            _base(("    @classmethod\n    def load(cls, path):", "    def load(self, path):"),
                                            ("tok = cls()", "tok = self")), 7, "@classmethod"),
    Mistake("load keeps JSON's lists", TokLoadKeepsLists, 7, ("lists", "tuple(m)")),
])


# ========================================================================= pad_sequences
def pad_sequences_torch(seqs, pad_id=0):
    return nn.utils.rnn.pad_sequence([torch.tensor(s, dtype=torch.long) for s in seqs], batch_first=True,
                                     padding_value=pad_id)


def pad_sequences_zip_longest(seqs, pad_id=0):
    """Columns with itertools.zip_longest, then transposed (a contiguous copy); an empty batch refused with
    its own message (the contract: an error, not a tensor)."""
    if len(seqs) == 0:
        raise ValueError("no sequences to pad")
    return torch.tensor(list(itertools.zip_longest(*seqs, fillvalue=pad_id)), dtype=torch.long).T.contiguous()


def pad_sequences_fpad(seqs, pad_id=0, max_len=None):
    """F.pad each row, then stack; an extra keyword with a default."""
    width = max_len or max(len(s) for s in seqs)
    return torch.stack([nn.functional.pad(torch.tensor(list(s), dtype=torch.long), (0, width - len(s)),
                                          value=pad_id)
                        for s in seqs])


def pad_sequences_full_loop(seqs, pad_id=0):
    seqs = list(seqs)
    out = torch.full((len(seqs), max(map(len, seqs))), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(s)
    return out


def pad_sequences_numpy(seqs, pad_id=0):
    arr = np.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=np.int64)
    for r, s in enumerate(seqs):
        arr[r, : len(s)] = s
    return torch.from_numpy(arr)


def pad_sequences_cat(seqs, pad_id=0, *, dtype=torch.long):
    width = max(len(s) for s in seqs)
    return torch.stack([torch.cat([torch.tensor(s, dtype=dtype),
                                   torch.full((width - len(s),), pad_id, dtype=dtype)])
                        for s in seqs])


def pad_sequences_mask(seqs, pad_id=0):
    """A length mask filled with the concatenated ids."""
    lengths = torch.tensor([len(s) for s in seqs])
    mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]
    out = torch.full(mask.shape, pad_id, dtype=torch.long)
    out[mask] = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
    return out


_pad = functools.partial(using, PAD_SEQUENCES)  # _pad((old, new), ...): the reference so changed
ROW, LONGEST, TENSOR = ("s + [pad_id] * (longest - len(s))", "longest = max(len(s) for s in seqs)",
                        "dtype=torch.long)")
LONG_TENSOR = (("torch.tensor(", "torch.LongTensor("), (", dtype=torch.long)", ")"))  # the legacy constructor
correct("pad_sequences", pad_sequences_torch, pad_sequences_zip_longest, pad_sequences_fpad,
        pad_sequences_full_loop,
        pad_sequences_numpy, pad_sequences_cat, pad_sequences_mask,
        _pad(*LONG_TENSOR, name="pad_sequences_lists"),
        _pad((TENSOR, "dtype=torch.int32).long()"), name="pad_sequences_int32_then_long"),
        _pad((ROW, "tuple(s) + (pad_id,) * (longest - len(s))"), *LONG_TENSOR, name="pad_sequences_tuples"))


def pad_extends_inputs(seqs, pad_id=0):
    width = max(len(s) for s in seqs)
    for s in seqs:
        s.extend([pad_id] * (width - len(s)))
    return torch.tensor(seqs, dtype=torch.long)


ROWS += mistakes("pad_sequences", [
    Mistake("left padding", _pad((ROW, "[pad_id] * (longest - len(s)) + s")), 0, "left-padded"),
    Mistake("rows sorted by length",
            _pad(("for s in seqs], dtype", "for s in sorted(seqs, key=len, reverse=True)], dtype")), 2,
            "reordered"),
    Mistake("(max_len, batch)", _pad((TENSOR, f"{TENSOR}.T")), 0, ("transposed", "batch_first=True")),
    # the width
    Mistake("width of the first sequence",
            _pad((LONGEST, "longest = len(seqs[0])"), (ROW, f"s[:longest] + {ROW[4:]}")),
            3, "LONGEST"),
    Mistake("one column too many", _pad(("(longest - len(s))", "(longest + 1 - len(s))")), 0, "LONGEST"),
    Mistake("a fixed width", _pad((LONGEST, "longest = 8")), 0, "LONGEST"),
    # pad_id
    Mistake("pad_id ignored", _pad(("[pad_id]", "[PAD]")), 3, "pad_id ignored"),
    Mistake("default pad_id 1", _pad(("pad_id: int = PAD", "pad_id: int = 1")), 1,
            ("padded with 1", "PAD = 0")),
    # what it returns, what it changes
    Mistake("float dtype", _pad(("dtype=torch.long", "dtype=torch.float")), 0, ("torch.long", "float32")),
    Mistake("int32", _pad(("dtype=torch.long", "dtype=torch.int32")), 0, ("torch.long", "int32")),
    Mistake("returns a list", _pad((TENSOR, f"{TENSOR}.tolist()")), 0, "torch.LongTensor"),
    Mistake("a numpy array", _pad((TENSOR, f"{TENSOR}.numpy()")), 0, ("torch.LongTensor", "ndarray")),
    Mistake("extends the caller's lists", pad_extends_inputs, 0, ("lists passed in", "unchanged")),
    # the contract's empty input: refused (the given lines raise ValueError), not an empty tensor of shape
    # (0,)
    Mistake("an empty batch gives an empty tensor", _pad(
        ('    if not seqs:\n        raise ValueError("pad_sequences got an empty batch: pass at least one '
         'sequence")\n',
         ""), (LONGEST, "longest = max((len(s) for s in seqs), default=0)")), 3,
            ("pad_sequences([])", "expected an error (an empty batch)", "tensor(0,)")),
])


# ========================================================================= TokenEmbedding
class TokenEmbeddingScaleModule(nn.Module):
    class Scale(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.s = s

        def forward(self, x):
            return x * self.s

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx)
        self.scale = self.Scale(math.sqrt(d_model))

    def forward(self, ids):
        return self.scale(self.embedding(ids))


_emb = functools.partial(using, TokenEmbedding)  # _emb((old, new), ...): the reference so changed
SCALED = "self.embedding(ids) * math.sqrt(self.d_model)"
D_MODEL, PADDING, INIT = "self.d_model = d_model", "padding_idx=padding_idx)", ("padding_idx: int | None = "
                                                                                "None)")
EMBEDDING = "self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)"
correct("TokenEmbedding", TokenEmbeddingScaleModule,
        # F.embedding on the module's weight, padding_idx passed by position, d_model ** 0.5
        _emb((PADDING, "padding_idx)"),
             (SCALED, "nn.functional.embedding(ids, self.embedding.weight, self.embedding.padding_idx) * "
                      "self.d_model ** 0.5"), name="TokenEmbeddingFunctional"),
        # the scale a buffer, torch's sqrt
        _emb((D_MODEL, 'self.register_buffer("scale", torch.tensor(float(d_model)).sqrt())'),
             (SCALED, "self.embedding(ids).mul(self.scale)"), name="TokenEmbeddingBuffer"),
        # scales the embedding's output in place (a fresh tensor: autograd is fine)
        _emb((f"return {SCALED}", "out = self.embedding(ids)\n"
                                  "        out *= math.sqrt(self.embedding.embedding_dim)\n"
                                  "        return out"), name="TokenEmbeddingInPlace"),
        # weights in float64, the scale a float64 buffer
        _emb((PADDING, "padding_idx=padding_idx, dtype=torch.float64)"),
             (SCALED, "self.embedding(ids) * self.scale"),
             (D_MODEL, 'self.register_buffer("scale", torch.full((1,), math.sqrt(d_model), '
                       'dtype=torch.float64))'),
             name="TokenEmbeddingFloat64"),
        # a float32 buffer not saved in the state dict, torch.mul
        _emb((D_MODEL, 'self.register_buffer("scale", torch.sqrt(torch.tensor(d_model, '
                       'dtype=torch.float32)), persistent=False)'),
             (SCALED, "torch.mul(self.embedding(ids), self.scale)"), name="TokenEmbeddingScaleBuffer"),
        # keyword arguments to nn.Embedding, a keyword-only extra, ids.long(), the scale from embedding_dim
        _emb((INIT, "padding_idx: int | None = None, *, init_std=None)"),
             ("nn.Embedding(vocab_size, d_model, ", "nn.Embedding(num_embeddings=vocab_size, "
                                                    "embedding_dim=d_model, "),
             (PADDING, PADDING + "\n        if init_std is not None:\n"
                                 "            nn.init.normal_(self.embedding.weight, std=init_std)"),
             (SCALED, "self.embedding(ids.long()).mul(self.embedding.embedding_dim ** 0.5)"),
             name="TokenEmbeddingKeywords"),
        # fairseq's init, normal(0, d^-0.5), with the padding row zeroed again
        _emb((PADDING, PADDING + "\n        nn.init.normal_(self.embedding.weight, mean=0, std=d_model ** "
                                 "-0.5)\n        if padding_idx is not None:\n"
                                 "            nn.init.constant_(self.embedding.weight[padding_idx], 0)"),
             (SCALED, "math.sqrt(self.d_model) * self.embedding(ids)"), name="TokenEmbeddingFairseqInit"),
        # nn.Embedding.from_pretrained(random weights, freeze=False), the factor from numpy
        _emb((EMBEDDING, "w = torch.randn(vocab_size, d_model)\n"
                         "        if padding_idx is not None:\n            w[padding_idx] = 0\n"
                         "        self.embedding = nn.Embedding.from_pretrained(w, freeze=False, "
                         "padding_idx=padding_idx)"),
             (SCALED, "self.embedding(ids) * float(np.sqrt(self.d_model))"),
             name="TokenEmbeddingFromPretrained",
             np=np),
        # the product in float64, cast back to the weights' dtype
        _emb((f"return {SCALED}", "e = self.embedding(ids)\n        return (e.double() * "
                                  "torch.tensor(e.size(-1), dtype=torch.float64).sqrt()).to(e.dtype)"),
             name="TokenEmbeddingDoubleMath"))


def _scaled(new):
    return _emb((SCALED, new))


SCALED_AT_INIT = _emb(  # scaled, but once in __init__: weights copied in (or trained) come out unscaled
    (PADDING, PADDING + "\n        with torch.no_grad():\n            "
                        "self.embedding.weight.mul_(math.sqrt(d_model))"),
    (SCALED, "self.embedding(ids)"))
NOT_SCALED = _scaled("self.embedding(ids)")
ROWS += mistakes("TokenEmbedding", [
    # the scale
    Mistake("not scaled", NOT_SCALED, 2, "not scaled"),
    Mistake("not scaled: not blamed on __init__", NOT_SCALED, 0, "not scaled", title="forward =",
            not_says="__init__"),
    Mistake("scaled by d_model", _scaled("self.embedding(ids) * self.d_model"), 2, "by d_model instead"),
    Mistake("divided by sqrt(d_model)", _scaled("self.embedding(ids) / math.sqrt(self.d_model)"), 2,
            "divided by sqrt"),
    Mistake("scaled by sqrt(vocab_size)", _emb((D_MODEL, "self.d_model, self.vocab = d_model, vocab_size"),
                                               (SCALED, "self.embedding(ids) * math.sqrt(self.vocab)")), 2,
            "sqrt(vocab_size)"),
    Mistake("sqrt rounded", _scaled("self.embedding(ids) * math.isqrt(self.d_model)"), 4, "rounded"),
    Mistake("d_model ** 1/2", _scaled("self.embedding(ids) * self.d_model ** 1 / 2"), 2, "d_model ** 1/2"),
    Mistake("sqrt(512) hard-coded", _scaled("self.embedding(ids) * math.sqrt(512)"), 2, "hard-coded"),
    Mistake("output cast to float64", _scaled("self.embedding(ids).double() * math.sqrt(self.d_model)"), 4,
            ("dtype", "cast to torch.float64")),
    Mistake("weights scaled once at init", SCALED_AT_INIT, 2, "not scaled"),
    *[Mistake(f"weights scaled once at init: {title}", SCALED_AT_INIT, 0, "once in __init__", title=title)
      for title in ("forward =", "scales by the exact", "keeps ids' shape")],
    Mistake("weights scaled in forward", _emb((f"return {SCALED}", (
        "with torch.no_grad():\n            self.embedding.weight.mul_(math.sqrt(self.d_model))\n"
        "        return self.embedding(ids)"))), 2, "weights in place"),
    # the nn.Embedding
    Mistake("nn.Embedding(d_model, vocab_size)", _emb(("(vocab_size, d_model,", "(d_model, vocab_size,")), 0,
            "arguments swapped"),
    Mistake("attribute named lut",
            _emb(("self.embedding = nn", "self.lut = nn"), ("self.embedding(ids)", "self.lut(ids)")), 0,
            "attribute `embedding`"),
    Mistake("re-initialised after building",
            _emb((PADDING, PADDING + "\n        nn.init.xavier_uniform_(self.embedding.weight)")),
            4, "re-initialisation"),
    Mistake("padding_idx ignored", _emb((PADDING, "padding_idx=None)")), 4, "padding_idx"),
    Mistake("padding_idx always 0", _emb((PADDING, "padding_idx=0)")), 3, "only when one is given"),
    Mistake("weights detached", _scaled("self.embedding.weight.detach()[ids] * math.sqrt(self.d_model)"), 3,
            "no .data, .detach()"),
    Mistake("embedding.weight indexed", _scaled("self.embedding.weight[ids] * math.sqrt(self.d_model)"), 4,
            "bypasses"),
    # the rest of forward
    Mistake("a dropout inside", _emb((D_MODEL, D_MODEL + "\n        self.dropout = nn.Dropout(0.1)"),
                                     (SCALED, f"self.dropout({SCALED})")), 4,
            "dropout inside TokenEmbedding"),
    Mistake("ids flattened", _emb(("self.embedding(ids)", "self.embedding(ids.reshape(-1))")), 1,
            "(B, L) -> (B, L, d_model)"),
])


# ========================================================================= the tables
@pytest.mark.parametrize("m", ROWS)
def test_mistakes(m):
    assert_mistake(m)


@pytest.mark.parametrize("name,obj", CORRECT)
def test_other_correct_implementations(name, obj):
    assert_full_marks(obj, name)

