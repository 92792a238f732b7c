"""Stage 01: tokenization. Byte-pair encoding (Sennrich et al. 2016), a vocabulary with special
tokens, padding, and the scaled token embedding of the paper (section 3.4).

The code between `### BEGIN SOLUTION` and `### END SOLUTION` is what the learner writes; the lesson's
stubs are generated from this file.
"""
from __future__ import annotations

import heapq
import json
import math
from collections import Counter, defaultdict
from typing import Iterable

import torch
from torch import nn

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
END = "</w>"  # marks the last symbol of a word, so that "low" the word and "low" in "lower" differ


def word_to_symbols(word: str) -> tuple[str, ...]:
    """A word as its characters, `</w>` joined to the last one.

    Example: "low" -> ("l", "o", "w</w>");  "a" -> ("a</w>",)
    """
    return tuple(word[:-1]) + (word[-1] + END,)


def get_pair_stats(vocab: dict[tuple[str, ...], int]) -> Counter:
    """Count adjacent symbol pairs over a vocabulary of segmented words, weighted by word counts.

    Example: {("l", "o", "w</w>"): 5, ("l", "o", "t</w>"): 2}
             -> Counter({("l", "o"): 7, ("o", "w</w>"): 5, ("o", "t</w>"): 2})
    """
    ### BEGIN SOLUTION
    stats = Counter()
    for symbols, count in vocab.items():
        for pair in zip(symbols, symbols[1:]):
            stats[pair] += count
    return stats
    ### END SOLUTION


def merge_pair(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """Replace every occurrence of `pair` in `symbols` by the joined symbol, scanning left to right.

    Example: ("l", "o", "w</w>"), ("l", "o") -> ("lo", "w</w>")
             ("a", "a", "a</w>"), ("a", "a") -> ("aa", "a</w>")   (occurrences never overlap)
    """
    ### BEGIN SOLUTION
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)
    ### END SOLUTION


def learn_bpe(corpus: Iterable[str], num_merges: int, min_frequency: int = 2) -> list[tuple[str, str]]:
    """Learn up to `num_merges` BPE merges from the words of `corpus` (lines of text): any iterable of
    lines (a list, a generator, an open file), read once; a list passed in is left unchanged.

    Words are what lies between single spaces, as in subword-nmt: line.split(" "), empty strings skipped.

    Each step merges the most frequent adjacent pair (weighted by word counts); ties go to the
    lexicographically greatest pair, i.e. max(stats, key=lambda p: (stats[p], p)). Stops early when
    the best pair is seen fewer than `min_frequency` times.

    Example: ["low low low lower"], 2 -> [("l", "o"), ("lo", "w</w>")]
             (("l","o") is seen 4 times; then ("lo","w</w>") 3 times beats ("lo","w") once)
    """
    if isinstance(corpus, str):
        corpus = corpus.splitlines()
    ### BEGIN SOLUTION
    class Descending:
        """Heap key: pairs from the lexicographically greatest down, so that ties go to the greatest."""
        def __init__(self, pair):
            self.pair = pair

        def __lt__(self, other):
            return self.pair > other.pair

        def __eq__(self, other):
            return self.pair == other.pair

    counts = Counter(word for line in corpus for word in line.strip("\r\n ").split(" ") if word)
    words = [word_to_symbols(w) for w in counts]  # the current segmentation of each distinct word
    freqs = list(counts.values())
    # Pair statistics are kept up to date incrementally: a merge only touches the words that hold
    # the pair (`where`), and a heap finds the best pair without scanning all of them.
    stats: Counter = Counter()
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, (symbols, f) in enumerate(zip(words, freqs)):
        for pair in zip(symbols, symbols[1:]):
            stats[pair] += f
            where[pair].add(i)
    heap = [(-c, Descending(p)) for p, c in stats.items()]
    heapq.heapify(heap)

    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges and heap:
        neg, key = heapq.heappop(heap)
        best = key.pair
        if stats.get(best, 0) != -neg or -neg <= 0:
            continue  # a stale heap entry: the pair's count has changed since it was pushed
        if -neg < min_frequency:
            break
        merges.append(best)
        changed = set()
        for i in where.pop(best):
            old = words[i]
            new = merge_pair(old, best)
            if new == old:
                continue  # the word lost this pair to an earlier merge
            f = freqs[i]
            for pair in zip(old, old[1:]):
                stats[pair] -= f
                changed.add(pair)
            for pair in zip(new, new[1:]):
                stats[pair] += f
                where[pair].add(i)
                changed.add(pair)
            words[i] = new
        del stats[best]
        changed.discard(best)
        for pair in changed:
            if stats[pair] > 0:
                heapq.heappush(heap, (-stats[pair], Descending(pair)))
            else:
                del stats[pair]
    return merges
    ### END SOLUTION


_RANKS: dict = {}


def merge_ranks(merges) -> dict[tuple[str, str], int]:
    """{pair: position of its first occurrence in merges}, built once per merges list (kept by identity:
    build a new list rather than editing one in place).
    Example: [("l", "o"), ("lo", "w")] -> {("l", "o"): 0, ("lo", "w"): 1}"""
    entry = _RANKS.get(id(merges))
    if entry is None or entry[0] is not merges or entry[1] != len(merges):
        ranks: dict = {}
        for i, pair in enumerate(merges):
            ranks.setdefault(tuple(pair), i)
        if len(_RANKS) > 32:
            _RANKS.clear()
        entry = _RANKS[id(merges)] = (merges, len(merges), ranks)  # holding merges keeps its id unique
    return entry[2]


def apply_bpe(word: str, merges: list[tuple[str, str]]) -> list[str]:
    """Split one word into subwords: apply the earliest-learned merge present, repeatedly.

    Example: "lowest", [("l", "o"), ("lo", "w"), ("e", "s")] -> ["low", "es", "t</w>"]
             (l o w e s t</w> -> lo w e s t</w> -> low e s t</w> -> low es t</w>)
    """
    ### BEGIN SOLUTION
    ranks = merge_ranks(merges)  # given: {pair: rank}, computed once per list of merges
    symbols = word_to_symbols(word)
    while len(symbols) > 1:
        pair = min(zip(symbols, symbols[1:]), key=lambda p: ranks.get(p, math.inf))
        if pair not in ranks:
            break  # no learned merge applies any more
        symbols = merge_pair(symbols, pair)
    return list(symbols)
    ### END SOLUTION


def split_cached(tokenizer, text: str, split_word) -> list[str]:
    """Given, for BPETokenizer.tokenize: the subwords of every word of `text` (split at any whitespace),
    each distinct word split by split_word(word, tokenizer.merges) only once. The cache lives in the
    tokenizer's own __dict__ (never shared between tokenizers) and is emptied when its merges list is
    replaced (retrained or loaded).
    Example: split_cached(tok, "low lower", apply_bpe) -> ["low</w>", "low", "er</w>"]
    """
    cache = tokenizer.__dict__.get("_cache")
    if cache is None or tokenizer.__dict__.get("_cached_merges") is not tokenizer.merges:  # new or retrained
        cache = tokenizer.__dict__["_cache"] = {}
        tokenizer.__dict__["_cached_merges"] = tokenizer.merges
    out = []
    for word in text.split():
        if word not in cache:
            cache[word] = split_word(word, tokenizer.merges)
        out.extend(cache[word])
    return out


class TokenizerBase:
    """Given, the plumbing under BPETokenizer: an empty vocabulary, its size, and saving and loading.

    merges: the learned merges, in order; itos: id -> symbol, ids 0-3 the specials; stoi: its inverse.
    """

    def __init__(self):
        self.merges: list[tuple[str, str]] = []
        self.itos: list[str] = list(SPECIALS)
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def save(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"merges": [list(m) for m in self.merges], "itos": self.itos}, f, ensure_ascii=False)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        tok = cls()
        tok.merges = [tuple(m) for m in data["merges"]]
        tok.itos = list(data["itos"])
        tok.stoi = {s: i for i, s in enumerate(tok.itos)}
        return tok


class BPETokenizer(TokenizerBase):
    """Subword tokenizer: BPE merges plus a vocabulary whose ids 0-3 are <pad>, <bos>, <eos>, <unk>.
    Given by TokenizerBase: self.merges ([]), self.itos (the 4 specials), self.stoi, vocab_size, save, load.

    Example: tok = BPETokenizer().train(["low low lower"], 10)
             tok.decode(tok.encode("lower low")) -> "lower low"
    """

    def train(self, corpus: Iterable[str], num_merges: int, min_frequency: int = 2) -> "BPETokenizer":
        """Learn the merges and the vocabulary from `corpus` (lines of text: a list, a generator or an
        open file, read once); returns self. Ids 0-3 stay the specials, whatever symbols the corpus holds."""
        corpus = corpus.splitlines() if isinstance(corpus, str) else list(corpus)
        ### BEGIN SOLUTION
        corpus = [" ".join(line.split()) for line in corpus]  # any whitespace run -> one space
        self.merges = learn_bpe(corpus, num_merges, min_frequency)
        chars = sorted({c for line in corpus for c in line if c != " "})
        # every character both inside and at the end of a word, then each merged symbol
        symbols = chars + [c + END for c in chars] + [a + b for a, b in self.merges]
        self.itos = list(SPECIALS)
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        for s in symbols:
            if s not in self.stoi:
                self.stoi[s] = len(self.itos)
                self.itos.append(s)
        return self
        ### END SOLUTION

    def tokenize(self, text: str) -> list[str]:
        """Subword strings of `text`: each word split by apply_bpe, once (split_cached, given, caches it).
        Example: "lower" -> ["low", "er</w>"]"""
        return split_cached(self, text, apply_bpe)

    def encode(self, text: str) -> list[int]:
        """Subword ids of `text`, no <bos>/<eos>; unknown symbols become <unk> (3)."""
        ### BEGIN SOLUTION
        return [self.stoi.get(s, UNK) for s in self.tokenize(text)]
        ### END SOLUTION

    def decode(self, ids: Iterable[int]) -> str:
        """Text from ids: symbols joined, `</w>` becomes a space; <pad>, <bos>, <eos> are skipped."""
        ### BEGIN SOLUTION
        skip = {PAD, BOS, EOS}
        symbols = [self.itos[i] if 0 <= i < len(self.itos) else SPECIALS[UNK]
                   for i in (int(i) for i in ids) if i not in skip]
        return "".join(symbols).replace(END, " ").strip()
        ### END SOLUTION


def pad_sequences(seqs: Iterable[Iterable[int]], pad_id: int = PAD) -> torch.Tensor:
    """Right-pad lists of token ids into one LongTensor (batch, max_len). The lists passed in are left
    unchanged; an empty batch is refused (ValueError, below).

    Example: [[5, 6, 7], [8]] -> tensor([[5, 6, 7], [8, 0, 0]])
    """
    seqs = [list(s) for s in seqs]
    if not seqs:
        raise ValueError("pad_sequences got an empty batch: pass at least one sequence")
    ### BEGIN SOLUTION
    longest = max(len(s) for s in seqs)
    # pad in Python, then one tensor: a copy per row would cost more than the padding itself
    return torch.tensor([s + [pad_id] * (longest - len(s)) for s in seqs], dtype=torch.long)  # (B, L)
    ### END SOLUTION


class TokenEmbedding(nn.Module):
    """Token ids -> vectors, multiplied by sqrt(d_model) (paper, section 3.4).

    Example: TokenEmbedding(10, 4)(tensor([[1, 2]])).shape -> (1, 2, 4)
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None):
        super().__init__()
        ### BEGIN SOLUTION
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        ### END SOLUTION

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        return self.embedding(ids) * math.sqrt(self.d_model)  # (B, L) -> (B, L, d_model)
        ### END SOLUTION
