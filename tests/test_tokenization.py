"""Stage 01 against subword-nmt, the reference implementation of Sennrich et al. (2016)."""
import gzip
import random

import pytest
import torch

from autograder.fixtures.stage01_bpe import subword_nmt_merges, subword_nmt_segmenter
from solutions import BOS, EOS, PAD, UNK, BPETokenizer, TokenEmbedding, apply_bpe, learn_bpe, pad_sequences
from solutions.tokenization import get_pair_stats, merge_pair

from .conftest import MULTI30K


def built_corpus():
    """Repeated words, exact ties, one-character words, unicode, repeated letters (a a a)."""
    rng = random.Random(1)
    words = ["low", "lower", "newest", "widest", "a", "I", "x", "aaaa", "aaa", "abab", "Straße", "über",
             "naïve", "café", "日本語", "東京", "zz", "zzz", "banana", "bandana", "anna", "na", "nan"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(300)]
    lines += ["ab ba", "ba ab", "cd dc"]  # pairs with equal counts: the tie goes to the greatest pair
    # subword-nmt splits on spaces only: a no-break space or a tab stays inside its word
    lines += ["5\xa0km 5\xa0km  10\xa0km", "a\tb a\tb", "  low  lower "]
    return lines


def test_merges_equal_subword_nmt_on_built_corpus():
    lines = built_corpus()
    for min_frequency in (1, 2, 5):
        ours = learn_bpe(lines, 200, min_frequency=min_frequency)
        theirs = subword_nmt_merges(lines, 200, min_frequency)
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        assert ours == theirs, (f"min_frequency={min_frequency}: {len(ours)} merges against subword-nmt's "
                                f"{len(theirs)}; first difference at merge {first}: "
                                f"{ours[first] if first is not None else None} vs "
                                f"{theirs[first] if first is not None else None}")


def test_ties_go_to_the_greatest_pair_and_counts_are_weighted():
    # (b,a) and (a,b) are both seen twice: max((2, ('a','b')), (2, ('b','a'))) picks ('b', 'a')
    assert learn_bpe(["ab ba", "ba ab"], 1)[0] == subword_nmt_merges(["ab ba", "ba ab"], 1)[0] == ("b",
                                                                                                   "a</w>")
    # "xy" once in the vocabulary but 3 times in the text beats "zw" twice: counts are weighted
    assert learn_bpe(["xy xy xy zw zw"], 1) == [("x", "y</w>")]


def test_apply_bpe_equals_subword_nmt_segmentation():
    lines = built_corpus()
    merges = learn_bpe(lines, 60)
    words = sorted({w for line in lines for w in line.split()}) + ["lowest", "unseen", "q", "aaaaaaa",
                                                                   "Ωμέγα"]
    theirs = subword_nmt_segmenter(merges)
    wrong = [(w, apply_bpe(w, merges), theirs(w)) for w in words if apply_bpe(w, merges) != theirs(w)]
    assert not wrong, f"{len(wrong)} of {len(words)} words segmented differently, e.g. {wrong[:3]}"


def test_apply_bpe_uses_the_earliest_merge_first():
    merges = [("l", "o"), ("lo", "w"), ("e", "s")]
    assert apply_bpe("lowest", merges) == ["low", "es", "t</w>"]
    # ("o", "w") learned first wins over ("l", "o") even though "l o" comes first in the word
    assert apply_bpe("low", [("o", "w</w>"), ("l", "o")]) == ["l", "ow</w>"]


def test_helpers():
    assert get_pair_stats({("l", "o", "w</w>"): 5, ("l", "o", "t</w>"): 2}) == {
        ("l", "o"): 7, ("o", "w</w>"): 5, ("o", "t</w>"): 2}
    assert merge_pair(("a", "a", "a</w>"), ("a", "a")) == ("aa", "a</w>")


def multi30k_english(n):
    path = MULTI30K / "train.en.gz"
    if not path.exists():
        pytest.skip(f"no local Multi30k mirror at {MULTI30K}")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def test_merges_and_segmentation_equal_subword_nmt_on_multi30k():
    lines = multi30k_english(3000)
    ours, theirs = learn_bpe(lines, 1500), subword_nmt_merges(lines, 1500)
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    assert ours == theirs, f"{len(ours)} vs {len(theirs)} merges, first difference at {first}"
    words = sorted({w for line in lines for w in line.split()})
    segment = subword_nmt_segmenter(ours)
    wrong = [w for w in words if apply_bpe(w, ours) != segment(w)]
    assert not wrong, f"{len(wrong)} of {len(words)} words segmented differently, e.g. {wrong[:5]}"


def test_tokenizer_round_trip_specials_and_unknowns(tmp_path):
    corpus = built_corpus()
    tok = BPETokenizer().train(corpus, 80)
    assert tok.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    text = "lower  naïve\tbanana Straße\xa0anna a"
    ids = tok.encode(text)
    assert all(i > UNK for i in ids), ids
    assert tok.decode(ids) == "lower naïve banana Straße anna a"
    # a word never seen but made of seen characters still round-trips (each character is in the vocabulary)
    assert tok.decode(tok.encode("wold nab")) == "wold nab"
    assert tok.decode([BOS] + tok.encode("low") + [EOS, PAD, PAD]) == "low"
    assert UNK in tok.encode("low Ж")
    path = tmp_path / "tok.json"
    tok.save(path)
    again = BPETokenizer.load(path)
    assert again.encode(text) == ids and again.vocab_size == tok.vocab_size


def test_the_word_cache_holds_any_word():
    """Regression: the cache once kept its merges under the key "merges", so the word "merges" (in
    Multi30k's val set) encoded as the whole merge list, 8,010 ids."""
    tok = BPETokenizer().train(built_corpus() + ["merges _cache merges"], 80)
    for word in ("merges", "_cache", "_cached_merges", "__dict__"):
        ids = tok.encode(f"low {word} low")
        assert len(ids) <= len(word) + 3 and tok.decode(ids) == f"low {word} low", (word, len(ids))
    tok.merges = tok.merges[:10]  # retrained (or edited): the cache starts again
    assert tok.tokenize("lower") == [apply_bpe("lower", tok.merges)][0]


def test_pad_sequences_and_embedding():
    assert pad_sequences([[5, 6, 7], [8]]).tolist() == [[5, 6, 7], [8, 0, 0]]
    assert pad_sequences([[5], [8]], pad_id=9).dtype == torch.long
    with pytest.raises(ValueError, match="empty"):
        pad_sequences([])
    emb = TokenEmbedding(10, 16)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.allclose(emb(ids), emb.embedding(ids) * 4.0)
