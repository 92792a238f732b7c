"""Stage 01's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake.

This file also says how autograder/fixtures/stage01_bpe.json was made: `build_fixture()` below runs
subword-nmt (the reference implementation of Sennrich et al. 2016) on the corpora built here, and
`test_fixture_is_subword_nmt_output` checks that the stored file is still exactly its output.
Regenerate it with `python -m tests.test_checks_stage01` (from the repository root).
"""
import collections
import contextlib
import functools
import heapq
import io
import itertools
import json
import math
import pickle
import random
import re
import time

import numpy as np

import pytest
import torch
from torch import nn

import solutions
from solutions import BPETokenizer, PositionalEncoding, TokenEmbedding  # noqa: F401
from tests.grading import assert_caught, assert_full_marks, grade, grade_one

FIXTURE_PATH = "autograder/fixtures/stage01_bpe.json"

# ========================================================================= how the fixture is made
BASE = ("low lower lowest newer newest wider widest older oldest new old wide a I x o aa aaa aaaa aaaaa "
        "abab ababab banana bandana anna nan na zz zzz mississippi bookkeeper the then there these this "
        "that than thin think thing things nothing something Straße über naïve café Ωμέγα 日本語 東京 京都 "
        "Zürich Köln señor mañana jalapeño ça garçon").split()
SYLLABLES = ["ka", "lo", "mi", "ne", "ra", "to", "su", "ve", "ba", "de", "ing", "er", "est", "an", "on", "ü", "é",
             "ß", "th", "ch", "qu", "y", "ö"]


def built_corpus(seed, n_lines, n_made_up):
    """Lines of 1-8 words joined by single spaces (so str.split() and split(' ') agree), drawn with
    Zipf-like frequencies from English words, one-letter words, repeated letters (aaaa), unicode words
    and made-up words of syllables."""
    rng = random.Random(seed)
    made_up = set()
    while len(made_up) < n_made_up:
        made_up.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
    words = BASE + sorted(made_up)
    rng.shuffle(words)
    weights = [1.0 / (r + 1) ** 0.9 for r in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(1, 8))) for _ in range(n_lines)]


def subword_nmt_merges(lines, num_merges, min_frequency):
    from subword_nmt.learn_bpe import learn_bpe
    out = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        learn_bpe(io.StringIO("\n".join(lines) + "\n"), out, num_merges, min_frequency=min_frequency)
    return [line.split(" ") for line in out.getvalue().splitlines() if not line.startswith("#version")]


def subword_nmt_segment(words, merges):
    """subword-nmt's segmentations in our notation: `l@@ ow` -> ['l', 'ow</w>']."""
    from subword_nmt.apply_bpe import BPE
    bpe = BPE(io.StringIO("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)))
    return {w: [p[:-2] if p.endswith("@@") else p + "</w>" for p in bpe.segment(w).split(" ")] for w in words}


# name: (corpus, num_merges, min_frequency); what each small case is for is in its check's title
LEARN_CASES = {
    "docstring": (["low low low lower"], 2, 2),
    "weighted": (["xy xy xy zw zw"], 1, 1),
    "weighted_2": (["ab ab ab cd cd ef"], 2, 1),
    "ties": (["bb ab cb bb ab cb"], 3, 1),  # three pairs seen twice each: greatest (c, b</w>) first
    "ties_2": (["abc abc bcd bcd"], 3, 1),
    "end_of_word": (["ab ab ab a a a a c"], 2, 1),
    "overlap": (["aaaa aaaaa aaab aaab aaab"], 3, 1),
    "min_frequency_1": (["ab ab cd"], 5, 1),
    "min_frequency_2": (["ab ab cd"], 5, 2),
    "min_frequency_3": (["ab ab cd"], 5, 3),
    "min_frequency_default": (["ab ab ab cd cd ef"], 5, 2),
    "no_pair_left": (["ab"], 10, 1),
    "corpus_a": (built_corpus(1, 250, 220), 100, 2),
    "corpus_b": (built_corpus(2, 120, 90), 300, 1),  # runs until no pair is left: 249 merges
    "corpus_c": (built_corpus(2, 120, 90), 200, 3),  # stops at min_frequency: 143 merges
    "tokenizer": (built_corpus(3, 60, 40), 40, 2),
}

# name: (word, merges) for apply_bpe
APPLY_CASES = {
    "docstring": ("lowest", [("l", "o"), ("lo", "w"), ("e", "s")]),
    "priority": ("low", [("o", "w</w>"), ("l", "o")]),
    "priority_2": ("banana", [("a", "n"), ("b", "a"), ("n", "a</w>")]),
    "repeat": ("abc", [("ab", "c</w>"), ("a", "b")]),
    "repeat_2": ("hello", [("he", "llo</w>"), ("l", "o</w>"), ("l", "lo</w>"), ("h", "e")]),
    "end": ("lower", [("e", "r</w>"), ("l", "o"), ("lo", "w")]),
    "no_merge": ("xyz", [("a", "b")]),
    "one_letter": ("a", [("a", "b"), ("a", "a")]),
    "unseen_character": ("Ωlow", [("l", "o"), ("lo", "w</w>")]),
    "overlap": ("aaaa", [("a", "a")]),
    "overlap_2": ("aaaaa", [("a", "a"), ("aa", "a</w>"), ("aa", "aa")]),
}

UNSEEN_A = ["lowering", "newestest", "aaaaaaa", "Straßen", "bananas", "東京都", "Ωμέγαλο", "xyzzy", "q", "théâtre",
            "kalomine", "ababa"]


def corpus_words(lines):
    return list(dict.fromkeys(w for line in lines for w in line.split(" ")))


def build_fixture():
    learn = {}
    for name, (corpus, n, m) in LEARN_CASES.items():
        learn[name] = {"corpus": corpus, "num_merges": n, "min_frequency": m,
                       "merges": subword_nmt_merges(corpus, n, m)}
    tok_words = corpus_words(LEARN_CASES["tokenizer"][0])
    unseen_tok = [w[::-1] for w in tok_words if len(w) > 3 and w[::-1] not in tok_words][:8]
    segment = {
        "corpus_a": {"merges_of": "corpus_a", "words": subword_nmt_segment(
            corpus_words(LEARN_CASES["corpus_a"][0]) + UNSEEN_A, learn["corpus_a"]["merges"])},
        "corpus_b": {"merges_of": "corpus_b", "words": subword_nmt_segment(
            corpus_words(LEARN_CASES["corpus_b"][0]), learn["corpus_b"]["merges"])},
        "tokenizer": {"merges_of": "tokenizer",
                      "words": subword_nmt_segment(tok_words, learn["tokenizer"]["merges"])},
    }
    apply = {name: {"word": w, "merges": [list(p) for p in merges],
                    "subwords": subword_nmt_segment([w], merges)[w]} for name, (w, merges) in APPLY_CASES.items()}
    import subword_nmt
    return {
        "note": "Made by subword-nmt " + getattr(subword_nmt, "__version__", "0.3.8") + " (learn_bpe.learn_bpe on "
                "io.StringIO input, apply_bpe.BPE for segmentations, `l@@ ow` written ['l', 'ow</w>']) on the "
                "corpora of tests/test_checks_stage01.py; regenerate with `python -m tests.test_checks_stage01`.",
        "learn": learn, "segment": segment, "apply": apply, "unseen_words": {"tokenizer": unseen_tok},
    }


def stored_fixture():
    with open(FIXTURE_PATH, encoding="utf-8") as f:
        return json.load(f)


def test_fixture_is_subword_nmt_output():
    pytest.importorskip("subword_nmt")
    assert build_fixture() == stored_fixture(), "regenerate with `python -m tests.test_checks_stage01`"


def test_fixture_sizes():
    fx = stored_fixture()
    assert len(fx["learn"]["corpus_a"]["merges"]) == 100
    assert len(fx["learn"]["corpus_b"]["merges"]) == 249  # until no pair is left
    assert len(fx["learn"]["corpus_c"]["merges"]) == 143  # stopped by min_frequency=3
    assert len(fx["unseen_words"]["tokenizer"]) == 8


# ========================================================================= full marks
NAMES = ["get_pair_stats", "merge_pair", "learn_bpe", "apply_bpe", "BPETokenizer", "pad_sequences", "TokenEmbedding"]


@pytest.mark.parametrize("name", NAMES)
def test_reference_gets_full_marks(name):
    assert_full_marks(getattr(solutions, name))


# ---------------------------------------------------------------- correct, written differently
def get_pair_stats_defaultdict(vocab):
    stats = collections.defaultdict(int)
    for word, freq in vocab.items():
        for i in range(len(word) - 1):
            stats[word[i], word[i + 1]] += freq
    return stats


def merge_pair_regex(symbols, pair):
    """The paper's (Sennrich et al. 2016, Algorithm 1) regex on the space-joined symbols."""
    bigram = re.escape(" ".join(pair))
    p = re.compile(r"(?<!\S)" + bigram + r"(?!\S)")
    return tuple(p.sub("".join(pair), " ".join(symbols)).split(" "))


def learn_bpe_recount(corpus, num_merges, min_frequency=2):
    """Slow but correct: recount every pair after each merge, over the words of every line."""
    vocab = collections.Counter()
    for line in corpus:
        for word in line.split():
            vocab[tuple(word[:-1]) + (word[-1] + "</w>",)] += 1
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


def apply_bpe_ranks(word, merges):
    rank = {tuple(m): i for i, m in reversed(list(enumerate(merges)))}
    symbols = list(word[:-1]) + [word[-1] + "</w>"]
    while True:
        candidates = [(rank[p], i) for i, p in enumerate(zip(symbols, symbols[1:])) if p in rank]
        if not candidates:
            return symbols
        r, _ = min(candidates)
        symbols = list(solutions.merge_pair(tuple(symbols), merges[r]))


def apply_bpe_scan(word, merges):
    """Scans the merge list from the start after every merge (slow, correct)."""
    symbols = tuple(word[:-1]) + (word[-1] + "</w>",)
    changed = True
    while changed:
        changed = False
        present = set(zip(symbols, symbols[1:]))
        for pair in merges:
            if pair in present:
                symbols = merge_pair_regex(symbols, pair)
                changed = True
                break
    return tuple(symbols)  # a tuple: fine too


class TokenizerOwnVocab:
    """Another correct tokenizer: its own vocabulary order (merges first, characters after), a dict
    vocabulary, vocab_size as an attribute, JSON of its own."""

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
        return " ".join("".join(inverse.get(i, "<unk>") for i in ids if i > 2).split("</w>")).strip().replace("  ", " ")

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


def pad_sequences_torch(seqs, pad_id=0):
    return nn.utils.rnn.pad_sequence([torch.tensor(s, dtype=torch.long) for s in seqs], batch_first=True,
                                     padding_value=pad_id)


def pad_sequences_lists(seqs, pad_id=0):
    seqs = [list(s) for s in seqs]
    width = max(map(len, seqs))
    return torch.LongTensor([s + [pad_id] * (width - len(s)) for s in seqs])


class TokenEmbeddingFunctional(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx)
        self.scale = d_model ** 0.5

    def forward(self, ids):
        return nn.functional.embedding(ids, self.embedding.weight, self.embedding.padding_idx) * self.scale


class TokenEmbeddingBuffer(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.register_buffer("scale", torch.tensor(float(d_model)).sqrt())

    def forward(self, ids):
        return self.embedding(ids).mul(self.scale)


CORRECT = [
    ("get_pair_stats", get_pair_stats_defaultdict),
    ("merge_pair", merge_pair_regex),
    ("learn_bpe", learn_bpe_recount),
    ("learn_bpe", learn_bpe_paper),
    ("apply_bpe", apply_bpe_ranks),
    ("apply_bpe", apply_bpe_scan),
    ("BPETokenizer", TokenizerOwnVocab),
    ("pad_sequences", pad_sequences_torch),
    ("pad_sequences", pad_sequences_lists),
    ("TokenEmbedding", TokenEmbeddingFunctional),
    ("TokenEmbedding", TokenEmbeddingBuffer),
]


# ---------------------------------------------------------------- correct, written differently (review A)
def get_pair_stats_pairwise_get(vocab):
    """itertools.pairwise and dict.get: a plain dict."""
    import itertools
    counts = {}
    for symbols, n in vocab.items():
        for pair in itertools.pairwise(symbols):
            counts[pair] = counts.get(pair, 0) + n
    return counts


def get_pair_stats_repeat_update(vocab):
    """Counter.update with each word's pair list repeated count times."""
    stats = collections.Counter()
    for symbols in vocab:
        stats.update(list(zip(symbols[:-1], symbols[1:])) * vocab[symbols])
    return stats


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


def learn_bpe_indexed(corpus, num_merges, min_frequency=2):
    """Incremental pair counts with an index pair -> words; the best pair by max over the live counts."""
    freq = collections.Counter(w for line in corpus for w in line.split())
    seg = {w: tuple(w[:-1]) + (w[-1] + "</w>",) for w in freq}
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


def learn_bpe_sorted_strings(corpus, num_merges, min_frequency=2):
    """Words kept as space-joined strings; the winner is the last of sorted(stats, key=(count, pair))."""
    vocab = collections.Counter(" ".join(tuple(w[:-1]) + (w[-1] + "</w>",)) for line in corpus
                                for w in line.split(" ") if w)
    merges = []
    for _ in range(num_merges):
        stats = collections.Counter()
        for w, n in vocab.items():
            s = w.split(" ")
            for p in zip(s, s[1:]):
                stats[p] += n
        if not stats:
            break
        best = sorted(stats, key=lambda p: (stats[p], p))[-1]
        if stats[best] < min_frequency:
            break
        merges.append(best)
        vocab = collections.Counter({" ".join(merge_pair_stack(tuple(w.split(" ")), best)): n
                                     for w, n in vocab.items()})
    return tuple(merges)  # a tuple of pairs: fine too


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


def apply_bpe_list_index(word, merges, dropout=0.0):
    """merges.index as the rank (slow, correct), an extra keyword with a default."""
    merges = [tuple(m) for m in merges]
    s = tuple(word[:-1]) + (word[-1] + "</w>",)
    while True:
        present = [p for p in zip(s, s[1:]) if p in merges]
        if not present:
            return list(s)
        s = merge_pair_recursive(s, min(present, key=merges.index))


class TokenizerNumpySize(BPETokenizer):
    """vocab_size a numpy integer, encode a tensor, decode by splitting on </w>."""

    @property
    def vocab_size(self):
        import numpy as np
        return np.int64(len(self.itos))

    def encode(self, text):
        return torch.tensor([self.stoi.get(s, 3) for s in self.tokenize(text)], dtype=torch.long)

    def decode(self, ids):
        text = "".join(self.itos[int(i)] for i in ids if int(i) > 2)
        return " ".join(part for part in text.split("</w>") if part)


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


def pad_sequences_zip_longest(seqs, pad_id=0):
    """Columns with itertools.zip_longest, then transposed (a contiguous copy)."""
    import itertools
    return torch.tensor(list(itertools.zip_longest(*seqs, fillvalue=pad_id)), dtype=torch.long).T.contiguous()


def pad_sequences_fpad(seqs, pad_id=0, max_len=None):
    """F.pad each row, then stack; an extra keyword with a default."""
    width = max_len or max(len(s) for s in seqs)
    return torch.stack([nn.functional.pad(torch.tensor(list(s), dtype=torch.long), (0, width - len(s)), value=pad_id)
                        for s in seqs])


class TokenEmbeddingInPlace(nn.Module):
    """Scales the embedding's output in place (a fresh tensor: autograd is fine)."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)

    def forward(self, ids):
        out = self.embedding(ids)
        out *= math.sqrt(self.embedding.embedding_dim)
        return out


class TokenEmbeddingFloat64(nn.Module):
    """Weights in float64, the scale a float64 buffer."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx, dtype=torch.float64)
        self.register_buffer("scale", torch.full((1,), math.sqrt(d_model), dtype=torch.float64))

    def forward(self, ids):
        return self.embedding(ids) * self.scale


CORRECT += [
    ("get_pair_stats", get_pair_stats_pairwise_get),
    ("get_pair_stats", get_pair_stats_repeat_update),
    ("merge_pair", merge_pair_recursive),
    ("merge_pair", merge_pair_stack),
    ("learn_bpe", learn_bpe_indexed),
    ("learn_bpe", learn_bpe_sorted_strings),
    ("apply_bpe", apply_bpe_first_occurrence),
    ("apply_bpe", apply_bpe_list_index),
    ("BPETokenizer", TokenizerNumpySize),
    ("BPETokenizer", TokenizerRebuildsVocab),
    ("pad_sequences", pad_sequences_zip_longest),
    ("pad_sequences", pad_sequences_fpad),
    ("TokenEmbedding", TokenEmbeddingInPlace),
    ("TokenEmbedding", TokenEmbeddingFloat64),
]


@pytest.mark.parametrize("name,obj", CORRECT, ids=[f"{n}-{o.__name__}" for n, o in CORRECT])
def test_other_correct_implementations(name, obj):
    assert_full_marks(obj, name)


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


# ========================================================================= classic mistakes
# ---------------------------------------------------------------- get_pair_stats
def stats_unweighted(vocab):
    return collections.Counter(p for w in vocab for p in zip(w, w[1:]))


def stats_once_per_word(vocab):
    stats = collections.Counter()
    for w, f in vocab.items():
        for p in set(zip(w, w[1:])):
            stats[p] += f
    return stats


def stats_across_words(vocab):
    flat = [s for w, f in vocab.items() for s in w]
    return collections.Counter(zip(flat, flat[1:]))


def stats_list(vocab):
    return list(solutions.get_pair_stats(vocab).items())


# ---------------------------------------------------------------- merge_pair
def merge_overlapping(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
        else:
            out.append(symbols[i])
        i += 1  # the right symbol is used again: a a a -> aa aa a
    return tuple(out)


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


def merge_first_only(symbols, pair):
    symbols = list(symbols)
    for i in range(len(symbols) - 1):
        if (symbols[i], symbols[i + 1]) == pair:
            return tuple(symbols[:i] + [symbols[i] + symbols[i + 1]] + symbols[i + 2:])
    return tuple(symbols)


def merge_replace(symbols, pair):
    return tuple(" ".join(symbols).replace(" ".join(pair), "".join(pair)).split(" "))


def merge_list(symbols, pair):
    return list(solutions.merge_pair(symbols, pair))


# ---------------------------------------------------------------- learn_bpe
def make_learn_bpe(tie="max", weighted=True, end="joined", merge=None, stop="lt", first_seen_order=False):
    """A recounting learn_bpe with one classic mistake switched on."""
    merge = merge or solutions.merge_pair

    def learn_bpe(corpus, num_merges, min_frequency=2):
        counts = collections.Counter(w for line in corpus for w in line.split())
        def start(w):
            if end == "separate":
                return tuple(w) + ("</w>",)
            if end == "missing":
                return tuple(w)
            return tuple(w[:-1]) + (w[-1] + "</w>",)
        vocab = {start(w): (f if weighted else 1) for w, f in counts.items()}
        merges = []
        while len(merges) < num_merges:
            stats = solutions.get_pair_stats(vocab)
            if not stats:
                break
            if tie == "min":
                best = min(stats, key=lambda p: (-stats[p], p))
            elif tie == "first":
                best = stats.most_common(1)[0][0]
            else:
                best = max(stats, key=lambda p: (stats[p], p))
            count = stats[best]
            if (stop == "lt" and count < min_frequency) or (stop == "le" and count <= min_frequency):
                break
            merges.append(best)
            vocab = {merge(w, best): f for w, f in vocab.items()}
        return merges
    return learn_bpe


def learn_bpe_crashes_without_pairs(corpus, num_merges, min_frequency=2):
    vocab = collections.Counter(tuple(w[:-1]) + (w[-1] + "</w>",) for line in corpus for w in line.split())
    merges = []
    for _ in range(num_merges):
        stats = solutions.get_pair_stats(vocab)
        best = max(stats, key=lambda p: (stats[p], p))  # ValueError once no pair is left
        if stats[best] < min_frequency:
            break
        merges.append(best)
        vocab = {solutions.merge_pair(w, best): f for w, f in vocab.items()}
    return merges


def learn_bpe_default_1(corpus, num_merges, min_frequency=1):
    return solutions.learn_bpe(corpus, num_merges, min_frequency)


# ---------------------------------------------------------------- apply_bpe
def make_apply_bpe(how):
    def apply_bpe(word, merges):
        rank = {tuple(m): i for i, m in reversed(list(enumerate(merges)))}
        symbols = tuple(word) + ("</w>",) if how == "separate" else tuple(word[:-1]) + (word[-1] + "</w>",)
        if how == "once":
            for pair in merges:
                symbols = solutions.merge_pair(symbols, tuple(pair))
            return list(symbols)
        merge = {"overlap": merge_overlapping, "right": merge_right_to_left}.get(how, solutions.merge_pair)
        while len(symbols) > 1:
            pairs = [p for p in zip(symbols, symbols[1:]) if p in rank]
            if not pairs:
                break
            pair = pairs[0] if how == "leftmost" else min(pairs, key=rank.get)
            symbols = merge(symbols, pair)
        if how == "drop_end":
            symbols = symbols[:-1] + (symbols[-1].replace("</w>", ""),)
        return list(symbols)
    return apply_bpe


# ---------------------------------------------------------------- BPETokenizer
class TokBosEos(BPETokenizer):
    def encode(self, text):
        return [solutions.BOS] + super().encode(text) + [solutions.EOS]


class TokSpecialsLast(BPETokenizer):
    def train(self, corpus, num_merges, min_frequency=2):
        super().train(corpus, num_merges, min_frequency)
        self.itos = self.itos[4:] + self.itos[:4]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        return self

    def encode(self, text):
        return [self.stoi.get(s, self.stoi["<unk>"]) for s in self.tokenize(text)]

    def decode(self, ids):
        skip = {self.stoi[s] for s in ("<pad>", "<bos>", "<eos>")}
        return "".join(self.itos[i] for i in ids if i not in skip).replace("</w>", " ").strip()


class TokUnknownCrashes(BPETokenizer):
    def encode(self, text):
        return [self.stoi[s] for s in self.tokenize(text)]


class TokDecodeKeepsSpecials(BPETokenizer):
    def decode(self, ids):
        return "".join(self.itos[i] for i in ids).replace("</w>", " ").strip()


class TokNoReturn(BPETokenizer):
    def train(self, corpus, num_merges, min_frequency=2):
        super().train(corpus, num_merges, min_frequency)


class TokNoFinalChars(BPETokenizer):
    """Vocabulary of the characters and the merges only: a word-final character not merged is unknown."""

    def train(self, corpus, num_merges, min_frequency=2):
        corpus = list(corpus)
        self.merges = solutions.learn_bpe(corpus, num_merges, min_frequency)
        chars = sorted({c for line in corpus for c in line if not c.isspace()})
        self.itos = list(solutions.tokenization.SPECIALS) + chars + ["".join(m) for m in self.merges]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        return self


class TokSplitOnSpace(BPETokenizer):
    def tokenize(self, text):
        return [s for word in text.split(" ") if word for s in solutions.apply_bpe(word, self.merges)]


class TokVocabSizeMethod(BPETokenizer):
    vocab_size = None

    def vocab_size(self):  # noqa: F811  (a method, not a property)
        return len(self.itos)


class TokLoadLosesMerges(BPETokenizer):
    @classmethod
    def load(cls, path):
        tok = super().load(path)
        tok.merges = []
        return tok


# ---------------------------------------------------------------- pad_sequences
def pad_left(seqs, pad_id=0):
    return solutions.pad_sequences([list(reversed(s)) for s in seqs], pad_id).flip(1)


def pad_float(seqs, pad_id=0):
    width = max(len(s) for s in seqs)
    out = torch.zeros(len(seqs), width) + pad_id
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s)
    return out


def pad_ignores_pad_id(seqs, pad_id=0):
    return solutions.pad_sequences(seqs)


def pad_to_first(seqs, pad_id=0):
    width = len(seqs[0])
    return torch.tensor([list(s)[:width] + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.long)


def pad_list(seqs, pad_id=0):
    return solutions.pad_sequences(seqs, pad_id).tolist()


# ---------------------------------------------------------------- TokenEmbedding
def make_embedding(scale, use_padding=True):
    class Embedding(nn.Module):
        def __init__(self, vocab_size, d_model, padding_idx=None):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx if use_padding else None)
            self.factor = scale(d_model, vocab_size)

        def forward(self, ids):
            return self.embedding(ids) * self.factor
    return Embedding


class EmbeddingScaledAtInit(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        with torch.no_grad():
            self.embedding.weight.mul_(math.sqrt(d_model))

    def forward(self, ids):
        return self.embedding(ids)


class EmbeddingDetached(TokenEmbedding):
    def forward(self, ids):
        return self.embedding.weight.detach()[ids] * math.sqrt(self.d_model)


class EmbeddingIndexesWeight(TokenEmbedding):
    """Right values, but indexing the weight skips padding_idx: the padding row still gets a gradient."""

    def forward(self, ids):
        return self.embedding.weight[ids] * math.sqrt(self.d_model)


class EmbeddingOtherName(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.d_model = d_model

    def forward(self, ids):
        return self.lut(ids) * math.sqrt(self.d_model)


MISTAKES = [
    # get_pair_stats
    ("get_pair_stats", "word counts ignored", stats_unweighted, ["word counts ignored"]),
    ("get_pair_stats", "repeated pair once per word", stats_once_per_word, ["counted once"]),
    ("get_pair_stats", "pairs across words", stats_across_words, ["across words"]),
    ("get_pair_stats", "returns a list", stats_list, ["dict"]),
    # merge_pair
    ("merge_pair", "overlapping occurrences", merge_overlapping, ["overlapping", "i + 2"]),
    ("merge_pair", "right to left", merge_right_to_left, ["right to left"]),
    ("merge_pair", "first occurrence only", merge_first_only, ["only the first occurrence"]),
    ("merge_pair", "str.replace on the joined text", merge_replace, ["inside a symbol"]),
    ("merge_pair", "returns a list", merge_list, ["tuple"]),
    # learn_bpe
    ("learn_bpe", "ties to the smallest pair (min)", make_learn_bpe(tie="min"), ["smallest pair"]),
    ("learn_bpe", "ties to the first seen (most_common)", make_learn_bpe(tie="first"), ["first pair counted"]),
    ("learn_bpe", "word frequencies ignored", make_learn_bpe(weighted=False), ["frequencies ignored"]),
    ("learn_bpe", "</w> missing", make_learn_bpe(end="missing"), ["`</w>` missing"]),
    ("learn_bpe", "</w> a separate symbol", make_learn_bpe(end="separate"), ["separate symbol"]),
    ("learn_bpe", "overlapping occurrences merged", make_learn_bpe(merge=merge_overlapping), ["overlapping"]),
    ("learn_bpe", "merged right to left", make_learn_bpe(merge=merge_right_to_left), ["right to left"]),
    ("learn_bpe", "min_frequency ignored", make_learn_bpe(stop="ignore"), ["min_frequency ignored"]),
    ("learn_bpe", "stops at count == min_frequency", make_learn_bpe(stop="le"), ["exactly min_frequency"]),
    ("learn_bpe", "crashes once no pair is left", learn_bpe_crashes_without_pairs, ["ValueError", "no pair is left"]),
    ("learn_bpe", "default min_frequency 1", learn_bpe_default_1, ["min_frequency"]),
    # apply_bpe
    ("apply_bpe", "left to right in the word", make_apply_bpe("leftmost"), ["left to right in the word"]),
    ("apply_bpe", "each merge once in list order", make_apply_bpe("once"), ["applied once in list order"]),
    ("apply_bpe", "</w> dropped", make_apply_bpe("drop_end"), ["`</w>` dropped"]),
    ("apply_bpe", "</w> a separate symbol", make_apply_bpe("separate"), ["separate symbol"]),
    ("apply_bpe", "overlapping occurrences merged", make_apply_bpe("overlap"), ["overlapping"]),
    ("apply_bpe", "merged right to left", make_apply_bpe("right"), ["right to left"]),
    # BPETokenizer
    ("BPETokenizer", "encode adds <bos>/<eos>", TokBosEos, ["added <bos> and <eos>"]),
    ("BPETokenizer", "specials not at 0-3", TokSpecialsLast, ["specials first"]),
    ("BPETokenizer", "unknown symbols crash", TokUnknownCrashes, ["KeyError", "<unk>"]),
    ("BPETokenizer", "decode keeps the specials", TokDecodeKeepsSpecials, ["skip the ids of <pad>"]),
    ("BPETokenizer", "train does not return self", TokNoReturn, ["return self"]),
    ("BPETokenizer", "no word-final characters in the vocabulary", TokNoFinalChars, ["alone and with </w>"]),
    ("BPETokenizer", "words split on ' ' only", TokSplitOnSpace, ["str.split()"]),
    ("BPETokenizer", "vocab_size a method", TokVocabSizeMethod, ["@property"]),
    ("BPETokenizer", "load loses the merges", TokLoadLosesMerges, ["after save and load"]),
    # pad_sequences
    ("pad_sequences", "left padding", pad_left, ["left-padded"]),
    ("pad_sequences", "float dtype", pad_float, ["torch.long", "float32"]),
    ("pad_sequences", "pad_id ignored", pad_ignores_pad_id, ["pad_id ignored"]),
    ("pad_sequences", "width of the first sequence", pad_to_first, ["LONGEST"]),
    ("pad_sequences", "returns a list", pad_list, ["torch.LongTensor"]),
    # TokenEmbedding
    ("TokenEmbedding", "not scaled", make_embedding(lambda d, v: 1.0), ["not scaled"]),
    ("TokenEmbedding", "scaled by d_model", make_embedding(lambda d, v: d), ["by d_model instead"]),
    ("TokenEmbedding", "divided by sqrt(d_model)", make_embedding(lambda d, v: d ** -0.5), ["divided by sqrt"]),
    ("TokenEmbedding", "scaled by sqrt(vocab_size)", make_embedding(lambda d, v: math.sqrt(v)), ["sqrt(vocab_size)"]),
    ("TokenEmbedding", "sqrt rounded", make_embedding(lambda d, v: math.isqrt(d)), ["rounded"]),
    ("TokenEmbedding", "padding_idx ignored", make_embedding(lambda d, v: math.sqrt(d), use_padding=False),
     ["padding_idx"]),
    ("TokenEmbedding", "weights scaled once at init", EmbeddingScaledAtInit, ["not scaled"]),
    ("TokenEmbedding", "weights detached", EmbeddingDetached, ["no .data, .detach()"]),
    ("TokenEmbedding", "attribute named lut", EmbeddingOtherName, ["attribute `embedding`"]),
]


# ---------------------------------------------------------------- more mistakes (review A)
def stats_assigned(vocab):
    stats = {}
    for symbols, n in vocab.items():
        for pair in zip(symbols, symbols[1:]):
            stats[pair] = n  # overwrites the count of an earlier word
    return stats


def merge_either_order(symbols, pair):
    """Also merges the pair reversed."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) in (tuple(pair), tuple(pair)[::-1]):
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def merge_left_symbol_only(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0]:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def make_learn_bpe_b(kind):
    """Recounting learn_bpe with one more classic mistake."""
    start = solutions.tokenization.word_to_symbols

    def learn_bpe(corpus, num_merges, min_frequency=2):
        if kind == "across":  # each line one row of symbols
            vocab = collections.Counter(tuple(s for w in line.split() for s in start(w)) for line in corpus)
        elif kind == "lines_as_words":
            vocab = collections.Counter(start(line) for line in corpus)
        else:
            vocab = collections.Counter(start(w) for line in corpus for w in line.split())
        if kind == "mutates":
            corpus.clear()
        merges = []
        while len(merges) < num_merges - (kind == "one_fewer"):
            stats = solutions.get_pair_stats(vocab)
            if not stats:
                break
            best = max(stats, key=lambda p: (stats[p], p))
            if kind != "test_after" and stats[best] < min_frequency:
                break
            merges.append(best)
            if kind == "test_after" and stats[best] < min_frequency:
                break
            if kind != "words_not_merged":
                vocab = {solutions.merge_pair(w, best): n for w, n in vocab.items()}
        return merges
    return learn_bpe


def apply_bpe_latest_first(word, merges):
    rank = {tuple(m): i for i, m in enumerate(merges)}
    s = solutions.tokenization.word_to_symbols(word)
    while True:
        pairs = [p for p in zip(s, s[1:]) if p in rank]
        if not pairs:
            return list(s)
        s = solutions.merge_pair(s, max(pairs, key=rank.get))


def apply_bpe_end_added_last(word, merges):
    rank = {tuple(m): i for i, m in enumerate(merges)}
    s = tuple(word)
    while True:
        pairs = [p for p in zip(s, s[1:]) if p in rank]
        if not pairs:
            break
        s = solutions.merge_pair(s, min(pairs, key=rank.get))
    return list(s[:-1]) + [s[-1] + "</w>"]


def apply_bpe_consumes_merges(word, merges):
    """Right answer, but empties the caller's list: a retrained tokenizer would lose its merges."""
    out = solutions.apply_bpe(word, list(merges))
    merges.clear()
    return out


class TokSharedVocab(BPETokenizer):
    """The vocabulary lives in class attributes: every tokenizer shares and grows it."""
    itos = list(solutions.tokenization.SPECIALS)
    stoi = {s: i for i, s in enumerate(solutions.tokenization.SPECIALS)}

    def __init__(self):
        self.merges = []

    def train(self, corpus, num_merges, min_frequency=2):
        corpus = [" ".join(line.split()) for line in corpus]
        self.merges = solutions.learn_bpe(corpus, num_merges, min_frequency)
        chars = sorted({c for line in corpus for c in line if c != " "})
        for s in chars + [c + "</w>" for c in chars] + ["".join(m) for m in self.merges]:
            if s not in self.stoi:
                self.stoi[s] = len(self.itos)
                self.itos.append(s)
        return self


class TokDecodeDropsUnk(BPETokenizer):
    def decode(self, ids):
        return "".join(self.itos[i] for i in ids if i > 3).replace("</w>", " ").strip()


class TokLoadNotClassmethod(BPETokenizer):
    def load(self, path):  # noqa: D102  (an instance method: BPETokenizer.load(path) fails)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        self.merges, self.itos = [tuple(m) for m in data["merges"]], data["itos"]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        return self


def pad_not_batch_first(seqs, pad_id=0):
    return nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], padding_value=pad_id)


def pad_extends_inputs(seqs, pad_id=0):
    width = max(len(s) for s in seqs)
    for s in seqs:
        s.extend([pad_id] * (width - len(s)))
    return torch.tensor(seqs, dtype=torch.long)


def pad_default_one(seqs, pad_id=1):
    return solutions.pad_sequences(seqs, pad_id)


MISTAKES += [
    ("get_pair_stats", "count assigned, not added", stats_assigned, ["stats[pair] += count"]),
    ("merge_pair", "the pair reversed merged too", merge_either_order, ["== pair exactly"]),
    ("merge_pair", "only the left symbol compared", merge_left_symbol_only, ["only the left symbol compared"]),
    ("learn_bpe", "pairs across words (line as one row)", make_learn_bpe_b("across"), ["across words"]),
    ("learn_bpe", "lines taken as words", make_learn_bpe_b("lines_as_words"), ["list of LINES"]),
    ("learn_bpe", "words not merged after a merge", make_learn_bpe_b("words_not_merged"), ["merged twice"]),
    ("learn_bpe", "one merge too few", make_learn_bpe_b("one_fewer"), ["one merge too few"]),
    ("learn_bpe", "min_frequency tested after appending", make_learn_bpe_b("test_after"), ["BEFORE appending"]),
    ("learn_bpe", "corpus emptied", make_learn_bpe_b("mutates"), ["corpus list passed in", "unchanged"]),
    ("apply_bpe", "latest merge first", apply_bpe_latest_first, ["LATEST merge"]),
    ("apply_bpe", "</w> joined after merging", apply_bpe_end_added_last, ["joined only after merging"]),
    ("apply_bpe", "merges list emptied", apply_bpe_consumes_merges, ["merges list passed in", "unchanged"]),
    ("BPETokenizer", "vocabulary in class attributes", TokSharedVocab, ["class attributes"]),
    ("BPETokenizer", "decode drops <unk>", TokDecodeDropsUnk, ["decode([3])", "'<unk>'"]),
    ("BPETokenizer", "load not a classmethod", TokLoadNotClassmethod, ["@classmethod"]),
    ("pad_sequences", "(max_len, batch)", pad_not_batch_first, ["transposed", "batch_first=True"]),
    ("pad_sequences", "extends the caller's lists", pad_extends_inputs, ["lists passed in", "unchanged"]),
    ("pad_sequences", "default pad_id 1", pad_default_one, ["padded with 1", "PAD = 0"]),
    ("TokenEmbedding", "d_model ** 1/2", make_embedding(lambda d, v: d ** 1 / 2), ["d_model ** 1/2"]),
    ("TokenEmbedding", "sqrt(512) hard-coded", make_embedding(lambda d, v: math.sqrt(512)), ["hard-coded"]),
    ("TokenEmbedding", "embedding.weight indexed", EmbeddingIndexesWeight, ["bypasses"]),
]


@pytest.mark.parametrize("name,label,obj,keywords", MISTAKES, ids=[f"{m[0]}-{m[1]}" for m in MISTAKES])
def test_mistakes_are_caught(name, label, obj, keywords):
    assert_caught(obj, name, *keywords)


# ---------------------------------------------------------------- review B: correct, written differently
def _word(w):
    return tuple(w[:-1]) + (w[-1] + "</w>",)


def get_pair_stats_counter_sum(vocab):
    """Counter arithmetic: each word's pairs scaled by its count, added up."""
    total = collections.Counter()
    for symbols, n in vocab.items():
        total += collections.Counter({p: k * n for p, k in collections.Counter(zip(symbols, symbols[1:])).items()})
    return total


def get_pair_stats_numpy_ints(vocab):
    """numpy int64 counts in a plain dict, pairs found from the end of each word."""
    out = {}
    for symbols, n in vocab.items():
        for i in range(len(symbols) - 1, 0, -1):
            key = (symbols[i - 1], symbols[i])
            out[key] = out.get(key, np.int64(0)) + np.int64(n)
    return out


def get_pair_stats_ordered(vocab):
    """The most frequent words first; an OrderedDict."""
    stats = collections.OrderedDict()
    for symbols, n in sorted(vocab.items(), key=lambda kv: -kv[1]):
        for a, b in zip(symbols[:-1], symbols[1:]):
            stats[(a, b)] = stats.get((a, b), 0) + n
    return stats


def get_pair_stats_float(vocab, *, weight=1.0):
    """float counts (3.0 == 3) and a keyword-only extra argument."""
    stats = collections.defaultdict(float)
    for symbols, n in vocab.items():
        for pair in itertools.pairwise(symbols):
            stats[pair] += n * weight
    return dict(stats)


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


def merge_pair_split_parts(symbols, pair):
    """Joined with a separator that cannot occur (NUL), split again, then a left-to-right scan."""
    parts = "\x00".join(symbols).split("\x00")
    out, i = [], 0
    while i < len(parts):
        if i + 1 < len(parts) and parts[i] == pair[0] and parts[i + 1] == pair[1]:
            out.append(parts[i] + parts[i + 1])
            i += 2
        else:
            out.append(parts[i])
            i += 1
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


def learn_bpe_items_max(corpus, num_merges, min_frequency=2):
    """max over items by kv[::-1] = (count, pair); entries [symbols, freq] updated in place."""
    counts = collections.Counter()
    for line in corpus:
        counts.update(line.split())
    vocab = [[_word(w), f] for w, f in counts.items()]
    merges = []
    while len(merges) < num_merges:
        stats = collections.Counter()
        for s, f in vocab:
            for p in zip(s, s[1:]):
                stats[p] += f
        if not stats:
            break
        best, count = max(stats.items(), key=lambda kv: kv[::-1])
        if count < min_frequency:
            break
        merges.append(best)
        for entry in vocab:
            entry[0] = merge_pair_gpt2(entry[0], best)
    return merges


def learn_bpe_heap_codepoints(corpus, num_merges, min_frequency=2):
    """A heap keyed by (-count, the pair's code points negated), stale entries skipped."""
    def key(p):
        return tuple(tuple(-ord(c) for c in s) + (1,) for s in p)
    freq = collections.Counter(w for line in corpus for w in line.split(" ") if w)
    seg = {w: _word(w) for w in freq}
    stats = collections.Counter()
    for w, s in seg.items():
        for p in zip(s, s[1:]):
            stats[p] += freq[w]
    heap = [(-c, key(p), p) for p, c in stats.items()]
    heapq.heapify(heap)
    merges = []
    while heap and len(merges) < num_merges:
        c, _, p = heapq.heappop(heap)
        if stats.get(p, 0) != -c:
            continue
        if -c < min_frequency:
            break
        merges.append(p)
        touched = set()
        for w, s in seg.items():
            new = solutions.merge_pair(s, p)
            if new != s:
                for q in zip(s, s[1:]):
                    stats[q] -= freq[w]
                    touched.add(q)
                for q in zip(new, new[1:]):
                    stats[q] += freq[w]
                    touched.add(q)
                seg[w] = new
        for q in touched:
            if stats[q] > 0:
                heapq.heappush(heap, (-stats[q], key(q), q))
            else:
                stats.pop(q, None)
    return merges


def learn_bpe_numpy_counts(corpus, num_merges, min_frequency=2):
    """Pair counts in a numpy array indexed by pair ids; the greatest pair among the maxima."""
    words = collections.Counter(w for line in iter(corpus) for w in line.split())
    segs = [list(_word(w)) for w in words]
    freqs = np.array(list(words.values()), dtype=np.int64)
    merges = []
    for _ in range(num_merges):
        index, counts = {}, []
        for s, f in zip(segs, freqs):
            for p in zip(s, s[1:]):
                if p not in index:
                    index[p] = len(counts)
                    counts.append(0)
                counts[index[p]] += int(f)
        if not counts:
            break
        arr = np.array(counts)
        top = arr.max()
        if top < min_frequency:
            break
        best = max(p for p, k in index.items() if arr[k] == top)
        merges.append(best)
        segs = [list(merge_pair_skip_flag(tuple(s), best)) for s in segs]
    return merges


def learn_bpe_verbose_keyword(corpus, num_merges, min_frequency=2, *, verbose=False):
    """Words as space-joined strings; the best pair the last of the sorted maxima; a keyword-only extra."""
    vocab = collections.Counter(" ".join(_word(w)) for line in corpus for w in line.split())
    merges = []
    while len(merges) < num_merges:
        stats = collections.defaultdict(int)
        for w, n in vocab.items():
            s = w.split()
            for i in range(len(s) - 1):
                stats[s[i], s[i + 1]] += n
        if not stats:
            break
        top = max(stats.values())
        if top < min_frequency:
            break
        best = sorted(p for p, c in stats.items() if c == top)[-1]
        if verbose:
            print(best)
        merges.append(best)
        vocab = collections.Counter({" ".join(merge_pair_reduce(tuple(w.split()), best)): n for w, n in vocab.items()})
    return merges


def learn_bpe_live_counts(corpus, num_merges, min_frequency=2):
    """Incremental counts kept with zeros (filtered when choosing); merges returned as lists."""
    freq = collections.Counter(w for line in corpus for w in line.split())
    vocab = [[_word(w), f] for w, f in sorted(freq.items(), key=lambda x: -x[1])]
    stats = collections.defaultdict(int)
    for s, f in vocab:
        for p in zip(s, s[1:]):
            stats[p] += f
    merges = []
    while len(merges) < num_merges:
        live = {p: c for p, c in stats.items() if c > 0}
        if not live:
            break
        best = max(live, key=lambda p: (live[p], p))
        if live[best] < min_frequency:
            break
        merges.append(list(best))
        for entry in vocab:
            s, f = entry
            new = solutions.merge_pair(s, best)
            if new != s:
                for p in zip(s, s[1:]):
                    stats[p] -= f
                for p in zip(new, new[1:]):
                    stats[p] += f
                entry[0] = new
    return merges


def learn_bpe_argmax(corpus, num_merges, min_frequency=2):
    """Pairs sorted descending, counts in a float64 tensor: argmax's first maximum is the greatest pair."""
    vocab = {_word(w): f for w, f in collections.Counter(w for line in corpus for w in line.split()).items()}
    merges = []
    for _ in range(num_merges):
        stats = solutions.get_pair_stats(vocab)
        if not stats:
            break
        pairs = sorted(stats, reverse=True)
        counts = torch.tensor([stats[p] for p in pairs], dtype=torch.float64)
        k = int(torch.argmax(counts))
        if counts[k] < min_frequency:
            break
        merges.append(pairs[k])
        vocab = {solutions.merge_pair(s, pairs[k]): f for s, f in vocab.items()}
    return merges


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


def apply_bpe_cached(word, merges, _cache={}):
    """A cache keyed by (word, merges): correct."""
    key = (word, tuple(map(tuple, merges)))
    if key not in _cache:
        _cache[key] = solutions.apply_bpe(word, list(merges))
    return list(_cache[key])


def apply_bpe_sorted_candidates(word, merges):
    rank = {}
    for i, m in enumerate(merges):
        rank.setdefault(tuple(m), i)
    s = list(_word(word))
    while len(s) > 1:
        candidates = sorted((rank[p], p) for p in zip(s, s[1:]) if p in rank)
        if not candidates:
            break
        s = list(merge_pair_skip_flag(tuple(s), candidates[0][1]))
    return s


def apply_bpe_numpy_argmin(word, merges):
    rank = {}
    for i, m in enumerate(merges):
        rank.setdefault(tuple(m), i)
    never = np.iinfo(np.int64).max
    s = _word(word)
    while True:
        r = np.array([rank.get(p, never) for p in zip(s, s[1:])], dtype=np.int64)
        if r.size == 0 or r.min() == never:
            return list(s)
        k = int(r.argmin())
        s = merge_pair_slice_assign(s, (s[k], s[k + 1]))


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


class TokenizerTupleIds(BPETokenizer):
    """encode gives a tuple; decode goes through a tensor and a regex."""

    def encode(self, text):
        return tuple(self.stoi.get(s, 3) for s in self.tokenize(text))

    def decode(self, ids):
        ids = torch.as_tensor(list(ids), dtype=torch.long)
        return re.sub(r"\s+", " ", "".join(self.itos[i] for i in ids[ids > 2].tolist()).replace("</w>", " ")).strip()


class TokenizerInitArguments:
    """__init__(merges=None, itos=None), used by load; merges first in the vocabulary; vocab_size an attribute."""
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
        return [self.stoi.get(s, 3) for w in text.split() for s in apply_bpe_sorted_candidates(w, self.merges)]

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
        import pathlib
        pathlib.Path(path).write_text(json.dumps({"merges": self.merges, "itos": self.itos}), encoding="utf-8")

    @classmethod
    def load(cls, path):
        import pathlib
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        tok = cls.__new__(cls)
        tok.__dict__.update(merges=[tuple(m) for m in data["merges"]], itos=data["itos"],
                            stoi={s: i for i, s in enumerate(data["itos"])})
        return tok


class TokenizerNumpyTable(BPETokenizer):
    """decode indexes a numpy object array and splits on </w>."""

    def decode(self, ids):
        table = np.array(self.itos, dtype=object)
        ids = [i for i in ids if i >= 3]
        text = "".join(table[ids]) if ids else ""
        return " ".join(p for p in text.split("</w>") if p.strip()).strip()


class TokenizerKeywordOnlyTrain(BPETokenizer):
    """train(corpus, num_merges, *, min_frequency=2), the corpus passed on as a generator."""

    def train(self, corpus, num_merges, *, min_frequency=2):
        return super().train((line for line in corpus), num_merges, min_frequency)


class TokenizerNumpyIds(BPETokenizer):
    """encode gives a numpy array of ids."""

    def encode(self, text):
        return np.array([self.stoi.get(s, 3) for s in self.tokenize(text)], dtype=np.int64)


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
    return torch.stack([torch.cat([torch.tensor(s, dtype=dtype), torch.full((width - len(s),), pad_id, dtype=dtype)])
                        for s in seqs])


def pad_sequences_int32_then_long(seqs, pad_id=0):
    width = max(len(s) for s in seqs)
    return torch.tensor([list(s) + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.int32).long()


def pad_sequences_mask(seqs, pad_id=0):
    """A length mask filled with the concatenated ids."""
    lengths = torch.tensor([len(s) for s in seqs])
    mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]
    out = torch.full(mask.shape, pad_id, dtype=torch.long)
    out[mask] = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
    return out


def pad_sequences_tuples(seqs, pad_id=0):
    seqs = [tuple(s) for s in seqs]
    width = max(len(s) for s in seqs)
    return torch.LongTensor([s + (pad_id,) * (width - len(s)) for s in seqs])


class TokenEmbeddingScaleBuffer(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.register_buffer("scale", torch.sqrt(torch.tensor(d_model, dtype=torch.float32)), persistent=False)

    def forward(self, ids):
        return torch.mul(self.embedding(ids), self.scale)


class TokenEmbeddingKeywords(nn.Module):
    """Keyword arguments to nn.Embedding, a keyword-only extra, ids.long(), the scale from embedding_dim."""

    def __init__(self, vocab_size, d_model, padding_idx=None, *, init_std=None):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings=vocab_size, embedding_dim=d_model, padding_idx=padding_idx)
        if init_std is not None:
            nn.init.normal_(self.embedding.weight, std=init_std)

    def forward(self, ids):
        return self.embedding(ids.long()).mul(self.embedding.embedding_dim ** 0.5)


class TokenEmbeddingFairseqInit(nn.Module):
    """fairseq's init, normal(0, d^-0.5), with the padding row zeroed again."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        nn.init.normal_(self.embedding.weight, mean=0, std=d_model ** -0.5)
        if padding_idx is not None:
            nn.init.constant_(self.embedding.weight[padding_idx], 0)
        self.d_model = d_model

    def forward(self, ids):
        return math.sqrt(self.d_model) * self.embedding(ids)


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


class TokenEmbeddingFromPretrained(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        w = torch.randn(vocab_size, d_model)
        if padding_idx is not None:
            w[padding_idx] = 0
        self.embedding = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=padding_idx)
        self.factor = float(np.sqrt(d_model))

    def forward(self, ids):
        return self.embedding(ids) * self.factor


class TokenEmbeddingDoubleMath(nn.Module):
    """The product in float64, cast back to the weights' dtype."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)

    def forward(self, ids):
        e = self.embedding(ids)
        return (e.double() * torch.tensor(e.size(-1), dtype=torch.float64).sqrt()).to(e.dtype)


CORRECT_B = [("get_pair_stats", f) for f in (get_pair_stats_counter_sum, get_pair_stats_numpy_ints,
                                             get_pair_stats_ordered, get_pair_stats_float, get_pair_stats_repeat,
                                             get_pair_stats_rows)]
CORRECT_B += [("merge_pair", f) for f in (merge_pair_split_parts, merge_pair_gpt2, merge_pair_skip_flag,
                                          merge_pair_slice_assign, merge_pair_reduce, merge_pair_tab_regex)]
CORRECT_B += [("learn_bpe", f) for f in (learn_bpe_items_max, learn_bpe_heap_codepoints, learn_bpe_numpy_counts,
                                         learn_bpe_verbose_keyword, learn_bpe_live_counts, learn_bpe_argmax)]
CORRECT_B += [("apply_bpe", f) for f in (apply_bpe_gpt2, apply_bpe_cached, apply_bpe_sorted_candidates,
                                         apply_bpe_numpy_argmin, apply_bpe_replay, apply_bpe_recursive)]
CORRECT_B += [("BPETokenizer", c) for c in (TokenizerPickle, TokenizerTupleIds, TokenizerInitArguments,
                                            TokenizerLoadNew, TokenizerNumpyTable, TokenizerKeywordOnlyTrain,
                                            TokenizerNumpyIds)]
CORRECT_B += [("pad_sequences", f) for f in (pad_sequences_full_loop, pad_sequences_numpy, pad_sequences_cat,
                                             pad_sequences_int32_then_long, pad_sequences_mask, pad_sequences_tuples)]
CORRECT_B += [("TokenEmbedding", c) for c in (TokenEmbeddingScaleBuffer, TokenEmbeddingKeywords,
                                              TokenEmbeddingFairseqInit, TokenEmbeddingScaleModule,
                                              TokenEmbeddingFromPretrained, TokenEmbeddingDoubleMath)]


@pytest.mark.parametrize("name,obj", CORRECT_B, ids=[f"{n}-{o.__name__}" for n, o in CORRECT_B])
def test_more_correct_implementations(name, obj):
    assert_full_marks(obj, name)


# ---------------------------------------------------------------- review B: more mistakes
def stats_last_pair_missed(vocab):
    stats = collections.Counter()
    for s, n in vocab.items():
        for i in range(len(s) - 2):
            stats[s[i], s[i + 1]] += n
    return stats


def stats_mutable_default(vocab, stats=collections.Counter()):  # noqa: B008  (the mistake itself)
    for s, n in vocab.items():
        for p in zip(s, s[1:]):
            stats[p] += n
    return stats


def stats_string_keys(vocab):
    stats = collections.Counter()
    for s, n in vocab.items():
        for a, b in zip(s, s[1:]):
            stats[a + " " + b] += n
    return stats


def stats_characters(vocab):
    stats = collections.Counter()
    for s, n in vocab.items():
        w = "".join(s)
        for p in zip(w, w[1:]):
            stats[p] += n
    return stats


def merge_drops_last(symbols, pair):
    out, i = [], 0
    while i < len(symbols) - 1:
        if (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def merge_with_space(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + " " + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def merge_regex_without_boundaries(symbols, pair):
    return tuple(re.sub(re.escape(" ".join(pair)), "".join(pair), " ".join(symbols)).split(" "))


def _learn_with(words=None, merge=None, choose=None, start=_word):
    def learn_bpe(corpus, num_merges, min_frequency=2):
        counts = (words or (lambda c: collections.Counter(w for line in c for w in line.split())))(corpus)
        vocab = {start(w): f for w, f in counts.items()}
        merges = []
        while len(merges) < num_merges:
            stats = solutions.get_pair_stats(vocab)
            if not stats:
                break
            best = (choose or (lambda st: max(st, key=lambda p: (st[p], p))))(stats)
            if stats[best] < min_frequency:
                break
            merges.append(best)
            vocab = {(merge or solutions.merge_pair)(s, best): f for s, f in vocab.items()}
        return merges
    return learn_bpe


def learn_bpe_mutable_default(corpus, num_merges, min_frequency=2, _words=collections.Counter()):  # noqa: B008
    _words.update(w for line in corpus for w in line.split())
    return _learn_with(words=lambda c: _words)(corpus, num_merges, min_frequency)


def learn_bpe_num_merges_as_vocab_size(corpus, num_merges, min_frequency=2):
    """Stops once the symbol vocabulary reaches num_merges."""
    vocab = {_word(w): f for w, f in collections.Counter(w for line in corpus for w in line.split()).items()}
    merges = []
    while len({s for w in vocab for s in w}) < num_merges:
        stats = solutions.get_pair_stats(vocab)
        if not stats:
            break
        best = max(stats, key=lambda p: (stats[p], p))
        if stats[best] < min_frequency:
            break
        merges.append(best)
        vocab = {solutions.merge_pair(s, best): f for s, f in vocab.items()}
    return merges


def learn_bpe_merged_strings(corpus, num_merges, min_frequency=2):
    return [a + b for a, b in solutions.learn_bpe(corpus, num_merges, min_frequency)]


def apply_bpe_cache_by_word(word, merges, _cache={}):  # noqa: B006  (the mistake itself)
    if word not in _cache:
        _cache[word] = solutions.apply_bpe(word, merges)
    return list(_cache[word])


def apply_bpe_stops_at_two(word, merges):
    rank = {tuple(m): i for i, m in reversed(list(enumerate(merges)))}
    s = _word(word)
    while len(s) > 2:
        pairs = [p for p in zip(s, s[1:]) if p in rank]
        if not pairs:
            break
        s = solutions.merge_pair(s, min(pairs, key=rank.get))
    return list(s)


def apply_bpe_joined(word, merges):
    return " ".join(solutions.apply_bpe(word, merges))


def apply_bpe_marker_characters(word, merges):
    rank = {tuple(m): i for i, m in reversed(list(enumerate(merges)))}
    s = tuple(word + "</w>")
    while True:
        pairs = [p for p in zip(s, s[1:]) if p in rank]
        if not pairs:
            return list(s)
        s = solutions.merge_pair(s, min(pairs, key=rank.get))


class TokDecodeJoinsWithSpaces(BPETokenizer):
    def decode(self, ids):
        return " ".join(self.itos[i] for i in ids if i > 2).replace("</w>", "").strip()


class TokDecodeNotStripped(BPETokenizer):
    def decode(self, ids):
        return "".join(self.itos[i] for i in ids if i > 2).replace("</w>", " ")


class TokLowercases(BPETokenizer):
    def train(self, corpus, num_merges, min_frequency=2):
        return super().train([line.lower() for line in corpus], num_merges, min_frequency)

    def encode(self, text):
        return super().encode(text.lower())


class TokMergesOnlyVocabulary(BPETokenizer):
    def train(self, corpus, num_merges, min_frequency=2):
        super().train(corpus, num_merges, min_frequency)
        self.itos = list(dict.fromkeys(self.itos[:4] + ["".join(m) for m in self.merges]))
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        return self


class TokMinFrequencyOne(BPETokenizer):
    def train(self, corpus, num_merges, min_frequency=1):
        return super().train(corpus, num_merges, min_frequency)


class TokUnknownIsPad(BPETokenizer):
    def encode(self, text):
        return [self.stoi.get(s, 0) for s in self.tokenize(text)]


class TokSavesOnlyVocabulary(BPETokenizer):
    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"itos": self.itos}, f)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            tok = cls()
            tok.itos = json.load(f)["itos"]
        tok.stoi = {s: i for i, s in enumerate(tok.itos)}
        return tok


def pad_sorted_by_length(seqs, pad_id=0):
    return solutions.pad_sequences(sorted(seqs, key=len, reverse=True), pad_id)


def pad_int32(seqs, pad_id=0):
    return solutions.pad_sequences(seqs, pad_id).int()


def pad_one_column_too_many(seqs, pad_id=0):
    width = max(len(s) for s in seqs) + 1
    return torch.tensor([list(s) + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.long)


def pad_fixed_width(seqs, pad_id=0, max_len=8):
    return torch.tensor([list(s) + [pad_id] * (max_len - len(s)) for s in seqs], dtype=torch.long)


def pad_numpy_array(seqs, pad_id=0):
    return solutions.pad_sequences(seqs, pad_id).numpy()


class EmbeddingSwappedSizes(TokenEmbedding):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(d_model, vocab_size, padding_idx)
        self.d_model = d_model


class EmbeddingReinitialised(TokenEmbedding):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(vocab_size, d_model, padding_idx)
        nn.init.xavier_uniform_(self.embedding.weight)


class EmbeddingScalesWeightsInForward(TokenEmbedding):
    def forward(self, ids):
        with torch.no_grad():
            self.embedding.weight.mul_(math.sqrt(self.d_model))
        return self.embedding(ids)


class EmbeddingWithDropout(TokenEmbedding):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(vocab_size, d_model, padding_idx)
        self.dropout = nn.Dropout(0.1)

    def forward(self, ids):
        return self.dropout(super().forward(ids))


class EmbeddingPaddingAlwaysZero(TokenEmbedding):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(vocab_size, d_model, 0)


class EmbeddingFlattensIds(TokenEmbedding):
    def forward(self, ids):
        return super().forward(ids.reshape(-1))


MISTAKES_B = [
    ("get_pair_stats", "the last pair of each word missed", stats_last_pair_missed, ["last pair of each word"]),
    ("get_pair_stats", "a mutable default Counter", stats_mutable_default, ["called twice", "mutable default"]),
    ("get_pair_stats", "keys 'a b' strings", stats_string_keys, ["tuple (left, right)"]),
    ("get_pair_stats", "character pairs", stats_characters, ["pairs of characters"]),
    ("merge_pair", "the last symbol dropped", merge_drops_last, ["last symbol was lost"]),
    ("merge_pair", "merged with a space", merge_with_space, ["'l' + 'o' -> 'lo'"]),
    ("merge_pair", "a regex without boundaries", merge_regex_without_boundaries, ["inside a symbol"]),
    ("learn_bpe", "word counts in a mutable default", learn_bpe_mutable_default, ["not in this corpus",
                                                                                  "mutable default"]),
    ("learn_bpe", "str.replace on the joined word", _learn_with(
        merge=lambda s, p: tuple(" ".join(s).replace(" ".join(p), "".join(p)).split(" "))),
     ["matched inside symbols", "str.replace"]),
    ("learn_bpe", "the corpus lowercased", _learn_with(
        words=lambda c: collections.Counter(w for line in c for w in line.lower().split())), ["lowercased"]),
    ("learn_bpe", "words counted once per line", _learn_with(
        words=lambda c: collections.Counter(w for line in c for w in set(line.split()))), ["frequencies ignored"]),
    ("learn_bpe", "ties by the joined string", _learn_with(
        choose=lambda st: max(st, key=lambda p: (st[p], "".join(p)))), ["ties go to the greatest pair"]),
    ("learn_bpe", "sorted by (-count, pair)", _learn_with(
        choose=lambda st: sorted(st.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]), ["smallest pair"]),
    ("learn_bpe", "</w> split into characters", _learn_with(start=lambda w: tuple(w + "</w>")),
     ["pieces of the marker", "< / w >"]),
    ("learn_bpe", "merged strings returned", learn_bpe_merged_strings, ["(left, right) pairs"]),
    ("learn_bpe", "num_merges taken as the vocabulary size", learn_bpe_num_merges_as_vocab_size, ["num_merges"]),
    ("apply_bpe", "a cache keyed by the word", apply_bpe_cache_by_word, ["EARLIER call", "cache"]),
    ("apply_bpe", "stops with two symbols", apply_bpe_stops_at_two, ["two symbols left"]),
    ("apply_bpe", "a joined string returned", apply_bpe_joined, ["list or tuple of strings"]),
    ("apply_bpe", "</w> split into characters", apply_bpe_marker_characters, ["< / w >"]),
    ("BPETokenizer", "decode joins subwords with spaces", TokDecodeJoinsWithSpaces, ["joined with spaces"]),
    ("BPETokenizer", "decode not stripped", TokDecodeNotStripped, ["strip the result"]),
    ("BPETokenizer", "lowercases", TokLowercases, ["lowercased"]),
    ("BPETokenizer", "a vocabulary of merges only", TokMergesOnlyVocabulary, ["every character of the corpus"]),
    ("BPETokenizer", "train's min_frequency 1", TokMinFrequencyOne, ["min_frequency=2"]),
    ("BPETokenizer", "unknown symbols as <pad>", TokUnknownIsPad, ["<unk>, whose id is 3"]),
    ("BPETokenizer", "save keeps only the vocabulary", TokSavesOnlyVocabulary, ["after save and load"]),
    ("pad_sequences", "rows sorted by length", pad_sorted_by_length, ["reordered"]),
    ("pad_sequences", "int32", pad_int32, ["torch.long", "int32"]),
    ("pad_sequences", "one column too many", pad_one_column_too_many, ["LONGEST"]),
    ("pad_sequences", "a fixed width", pad_fixed_width, ["LONGEST"]),
    ("pad_sequences", "a numpy array", pad_numpy_array, ["torch.LongTensor", "ndarray"]),
    ("TokenEmbedding", "nn.Embedding(d_model, vocab_size)", EmbeddingSwappedSizes, ["arguments swapped"]),
    ("TokenEmbedding", "re-initialised after building", EmbeddingReinitialised, ["re-initialisation"]),
    ("TokenEmbedding", "weights scaled in forward", EmbeddingScalesWeightsInForward, ["weights in place"]),
    ("TokenEmbedding", "a dropout inside", EmbeddingWithDropout, ["dropout inside TokenEmbedding"]),
    ("TokenEmbedding", "padding_idx always 0", EmbeddingPaddingAlwaysZero, ["only when one is given"]),
    ("TokenEmbedding", "ids flattened", EmbeddingFlattensIds, ["(B, L) -> (B, L, d_model)"]),
]


@pytest.mark.parametrize("name,label,obj,keywords", MISTAKES_B, ids=[f"{m[0]}-{m[1]}" for m in MISTAKES_B])
def test_more_mistakes_are_caught(name, label, obj, keywords):
    assert_caught(obj, name, *keywords)


# ---------------------------------------------------------------- review C: mistakes the checks missed or misnamed
def merge_joined_text_compared(symbols, pair):
    """Compares the joined text of two symbols with the joined pair: ('ab', 'c') taken for ('a', 'bc')."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] + symbols[i + 1] == pair[0] + pair[1]:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def apply_bpe_lowercased(word, merges):
    return solutions.apply_bpe(word.lower(), merges)


def apply_bpe_ranks_by_joined_text(word, merges):
    """tiktoken-style ranks keyed by the merged text: (p, qr</w>) found as if it were the merge (pq, r</w>)."""
    rank = {}
    for i, (a, b) in enumerate(merges):
        rank.setdefault(a + b, i)
    s = list(_word(word))
    while len(s) > 1:
        found = [(rank[a + b], i) for i, (a, b) in enumerate(zip(s, s[1:])) if a + b in rank]
        if not found:
            break
        _, i = min(found)
        s[i:i + 2] = [s[i] + s[i + 1]]
    return s


class TokSharedCache(BPETokenizer):
    """Encoded words cached in a class attribute: a second tokenizer gets the first one's ids."""
    ids_of = {}

    def encode(self, text):
        out = []
        for w in text.split():
            if w not in self.ids_of:
                self.ids_of[w] = [self.stoi.get(s, solutions.UNK) for s in solutions.apply_bpe(w, self.merges)]
            out += self.ids_of[w]
        return out


class TokUnknownWord(BPETokenizer):
    """A word with any unknown subword becomes one <unk>."""

    def encode(self, text):
        out = []
        for w in text.split():
            subwords = solutions.apply_bpe(w, self.merges)
            out += [solutions.UNK] if any(s not in self.stoi for s in subwords) else [self.stoi[s] for s in subwords]
        return out


class TokLoadKeepsLists(BPETokenizer):
    """load keeps JSON's lists, and encode tests `pair in self.merges`: after loading no merge applies."""

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        tok = cls()
        tok.merges, tok.itos = data["merges"], data["itos"]
        tok.stoi = {s: i for i, s in enumerate(tok.itos)}
        return tok

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


MISTAKES_C = [
    ("merge_pair", "the joined text compared", merge_joined_text_compared, ["joined text", "== pair"]),
    ("apply_bpe", "the word lowercased", apply_bpe_lowercased, ["lowercased"]),
    ("apply_bpe", "ranks keyed by the joined text", apply_bpe_ranks_by_joined_text, ["PAIR of symbols"]),
    ("BPETokenizer", "a cache in a class attribute", TokSharedCache, ["cache", "class attribute"]),
    ("BPETokenizer", "one <unk> for a whole word", TokUnknownWord, ["not the whole word to one <unk>"]),
    ("BPETokenizer", "load keeps JSON's lists", TokLoadKeepsLists, ["lists", "tuple(m)"]),
]


@pytest.mark.parametrize("name,label,obj,keywords", MISTAKES_C, ids=[f"{m[0]}-{m[1]}" for m in MISTAKES_C])
def test_mistakes_review_c(name, label, obj, keywords):
    assert_caught(obj, name, *keywords)


def test_targeted_mistakes_lose_little():
    """One mistake costs the checks about it, not the whole stage: e.g. min instead of max for ties keeps
    the checks on weighting, `</w>` and min_frequency."""
    points, _ = grade(make_learn_bpe(tie="min"), "learn_bpe")
    assert points >= 4
    points, _ = grade(make_apply_bpe("leftmost"), "apply_bpe")
    assert points >= 3
    points, _ = grade(merge_right_to_left, "merge_pair")
    assert points >= 3


# ---------------------------------------------------------------- stubs
def test_stubs_get_zero_and_say_not_implemented():
    def stub(*args, **kwargs):
        raise NotImplementedError()

    class StubTokenizer(BPETokenizer):
        def train(self, corpus, num_merges, min_frequency=2):
            raise NotImplementedError()

        def encode(self, text):
            raise NotImplementedError()

        def decode(self, ids):
            raise NotImplementedError()

    class StubEmbedding(nn.Module):
        def __init__(self, vocab_size, d_model, padding_idx=None):
            super().__init__()
            raise NotImplementedError()

    for name in NAMES:
        obj = {"BPETokenizer": StubTokenizer, "TokenEmbedding": StubEmbedding}.get(name, stub)
        points, text = grade(obj, name)
        n = len([line for line in text.splitlines() if line.startswith(("✓", "✗"))])
        assert points == 0 and text.count("not implemented yet") == n, text


def test_checks_do_not_use_solutions():
    import autograder.checks.stage01_tokenization as module
    source = open(module.__file__, encoding="utf-8").read()
    assert not re.search(r"^\s*(from|import)\s+\.*solutions", source, re.M)


# ---------------------------------------------------------------- fourth review: messages that name the real mistake
class EmbeddingScaledInInit(nn.Module):
    """Scaled, but once in __init__: weights copied in (or trained) come out unscaled."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        with torch.no_grad():
            self.embedding.weight.mul_(math.sqrt(d_model))

    def forward(self, ids):
        return self.embedding(ids)


@pytest.mark.parametrize("title", ["forward =", "scales by the exact", "keeps ids' shape"])
def test_fourth_review_embedding_scaled_in_init_is_named(title):
    points, line = grade_one(EmbeddingScaledInInit, "TokenEmbedding", title)
    assert points == 0 and "once in __init__" in line, line


def test_fourth_review_embedding_not_scaled_keeps_its_message():
    points, line = grade_one(make_embedding(lambda d, v: 1.0), "TokenEmbedding", "forward =")
    assert points == 0 and "not scaled" in line and "__init__" not in line, line


class TokStaleStoi(BPETokenizer):
    """train rebuilds itos but leaves stoi with the specials only: encode gives <unk>; load rebuilds stoi."""

    def train(self, corpus, num_merges, min_frequency=2):
        super().train(corpus, num_merges, min_frequency)
        self.stoi = {s: i for i, s in enumerate(self.itos[:4])}
        return self


@pytest.mark.parametrize("title", ["save(path)", "specials take ids"])
def test_fourth_review_stale_stoi_is_named(title):
    points, line = grade_one(TokStaleStoi, "BPETokenizer", title)
    assert points == 0 and "did not rebuild stoi" in line, line
    assert "save everything" not in line, line


def learn_bpe_lines_as_words(corpus, num_merges, min_frequency=2):
    """Each line taken as one word, its spaces ordinary characters."""
    counts = collections.Counter(corpus)
    vocab = {tuple(w[:-1]) + (w[-1] + "</w>",): c for w, c in counts.items() if w}
    merges = []
    while len(merges) < num_merges:
        stats = solutions.get_pair_stats(vocab)
        if not stats:
            break
        best = max(stats, key=lambda p: (stats[p], p))
        if stats[best] < min_frequency:
            break
        merges.append(best)
        vocab = {solutions.merge_pair(s, best): c for s, c in vocab.items()}
    return merges


def test_fourth_review_lines_as_words_is_named_by_the_first_check():
    points, line = grade_one(learn_bpe_lines_as_words, "learn_bpe", "learns the docstring example")
    assert points == 0 and "each line counted as one word" in line and "one of these" not in line, line
    # the same answer from a missing </w> is still named as such, not as lines taken whole
    points, line = grade_one(make_learn_bpe(end="missing"), "learn_bpe", "learns the docstring example")
    assert points == 0 and "`</w>` missing" in line and "each line counted" not in line, line


if __name__ == "__main__":
    with open(FIXTURE_PATH, "w", encoding="utf-8") as f:
        json.dump(build_fixture(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", FIXTURE_PATH)
