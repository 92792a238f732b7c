"""Stages 11-13: the loss against F.cross_entropy, training utilities, decoders against brute force and
each other, BLEU against sacrebleu, and a small model that learns to copy."""
import itertools
import math
import random

import pytest
import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU
from torch import nn

from solutions import (
    BOS,
    EOS,
    PAD,
    Transformer,
    batch_by_tokens,
    beam_search,
    causal_mask,
    corpus_bleu,
    greedy_decode,
    label_smoothed_loss,
    length_penalty,
    make_batch,
    make_optimizer,
    noam_lr,
    padding_mask,
    shift_right,
)


# ---------------------------------------------------------------- stage 11
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_equals_cross_entropy(eps):
    V = 11
    logits = torch.randn(3, 6, V) * 3
    target = torch.randint(4, V, (3, 6))
    target[0, 4:] = PAD
    target[2, 1:] = PAD
    ours = label_smoothed_loss(logits, target, eps)
    ref = F.cross_entropy(logits.view(-1, V), target.view(-1), label_smoothing=eps * V / (V - 1),
                          ignore_index=PAD)
    assert abs(ours.item()
               - ref.item()) < 1e-5, f"eps={eps}: {ours.item():.6f} vs F.cross_entropy {ref.item():.6f}"


def test_label_smoothed_loss_edge_cases():
    logits = torch.zeros(2, 3, 5, requires_grad=True)
    assert abs(label_smoothed_loss(logits, torch.tensor([[4, 4, 0], [4, 0, 0]])).item() - math.log(5)) < 1e-6
    zero = label_smoothed_loss(logits, torch.zeros(2, 3, dtype=torch.long))
    assert zero.item() == 0.0
    zero.backward()  # still part of the graph


# ---------------------------------------------------------------- stage 12
def test_shift_right_and_make_batch():
    assert shift_right(torch.tensor([[5, 6, 2]])).tolist() == [[1, 5, 6]]
    b = make_batch([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    assert b.src.tolist() == [[5, 6, 7], [8, PAD, PAD]]
    assert b.tgt_in.tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 13]]
    assert b.tgt_out.tolist() == [[9, 10, EOS, PAD], [11, 12, 13, EOS]]
    assert b.n_tokens == 7 and b.src_mask.shape == (2, 1, 1, 3) and b.tgt_mask.shape == (2, 1, 4, 4)
    # tgt_in is tgt_out shifted right (where tgt_out has a real token)
    assert torch.equal(shift_right(b.tgt_out)[b.tgt_out != PAD], b.tgt_in[b.tgt_out != PAD])
    with pytest.raises(ValueError, match="at least one"):
        make_batch([], [])


def test_batch_by_tokens():
    rng = random.Random(0)
    lengths = [rng.randint(1, 60) for _ in range(500)] + [300]
    batches = batch_by_tokens(lengths, 400)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 400
    assert [500] in batches  # index 500 (length 300 > max_tokens 400 / 2) stands alone
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    assert padded < 1.1 * sum(lengths), f"{padded} padded tokens for {sum(lengths)} real ones"


def test_noam_lr_and_optimizer():
    assert abs(noam_lr(4000, 512) - 512 ** -0.5 * 4000 ** -0.5) < 1e-12
    assert noam_lr(0, 512) == noam_lr(1, 512) and noam_lr(100, 512) < noam_lr(200, 512)
    assert noam_lr(8000, 512) < noam_lr(4000, 512)
    model = nn.Linear(4, 4)
    opt, sched = make_optimizer(model, 64, warmup_steps=10, factor=2.0)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    for k in range(1, 30):
        assert abs(opt.param_groups[0]["lr"] - noam_lr(k, 64, 10, 2.0)) < 1e-12, f"optimizer step {k}"
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()


# ---------------------------------------------------------------- stage 13
class TableModel(nn.Module):
    """A fixed random next-token distribution for each prefix (a hash of it): no learning, an exact search
    space."""

    def __init__(self, vocab=5, seed=0):
        super().__init__()
        self.vocab, self.seed = vocab, seed
        self.generator = nn.Identity()

    def encode(self, src, src_mask):
        return src.float()[:, :, None]

    def logits(self, prefix_src, prefix):
        g = torch.Generator().manual_seed(hash((self.seed, prefix_src, prefix)) % (2 ** 31))
        return torch.randn(self.vocab, generator=g) * 2

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        assert tgt_mask.shape[-1] == tgt_in.size(1)
        assert tgt_mask[0, 0].tolist() == causal_mask(tgt_in.size(1))[0, 0].tolist()
        out = torch.zeros(tgt_in.size(0), tgt_in.size(1), self.vocab)
        for b in range(tgt_in.size(0)):
            key = tuple(memory[b, :, 0].long().tolist())
            out[b, -1] = self.logits(key, tuple(tgt_in[b].tolist()))
        return out


def brute_force(model, src, max_len, alpha):
    best, best_seq = -math.inf, None
    key = tuple(src.tolist())
    for length in range(1, max_len + 1):
        for seq in itertools.product(range(model.vocab), repeat=length):
            if EOS in seq[:-1] or (length < max_len and seq[-1] != EOS):
                continue
            prefix, logp = (BOS,), 0.0
            for tok in seq:
                logp += F.log_softmax(model.logits(key, prefix), -1)[tok].item()
                prefix += (tok,)
            score = logp / length_penalty(length, alpha)
            if score > best:
                best, best_seq = score, [t for t in seq if t != EOS]
    return best_seq


def test_beam_as_wide_as_the_search_space_finds_the_brute_force_best():
    model = TableModel(vocab=5)
    src = torch.tensor([[7, 8], [9, 10], [11, 12]])
    for alpha in (0.0, 0.6, 1.5):
        got = beam_search(model, src, padding_mask(src), max_len=4, beam_size=5 ** 4, alpha=alpha)
        expected = [brute_force(model, s, 4, alpha) for s in src]
        assert got == expected, f"alpha={alpha}: beam {got}, brute force {expected}"


def test_beam_one_equals_greedy_and_batch_equals_one_by_one():
    model = TableModel(vocab=7, seed=3)
    src = torch.tensor([[i, i + 1] for i in range(12)])
    greedy = greedy_decode(model, src, padding_mask(src), max_len=6)
    assert beam_search(model, src, padding_mask(src), 6, beam_size=1, alpha=0.0) == greedy
    batched = beam_search(model, src, padding_mask(src), 6, beam_size=3, alpha=0.6)
    single = [beam_search(model, s[None], padding_mask(s[None]), 6, beam_size=3, alpha=0.6)[0] for s in src]
    assert batched == single
    assert all(len(h) <= 6 and EOS not in h for h in batched)
    with pytest.raises(ValueError, match="non-empty"):
        greedy_decode(model, src[:0], padding_mask(src[:0]), 5)


def test_length_penalty():
    assert length_penalty(1, 0.6) == 1.0 and abs(length_penalty(7, 0.6) - 2 ** 0.6) < 1e-12


def test_corpus_bleu_equals_sacrebleu():
    rng = random.Random(0)
    words = "a the cat dog sat on mat big red runs".split()
    refs = [[rng.choice(words) for _ in range(rng.randint(3, 12))] for _ in range(40)]
    hyps = [r[: max(1, len(r) - rng.randint(0, 3))] + [rng.choice(words)] for r in refs]
    hyps = [[w if rng.random() > 0.2 else rng.choice(words) for w in h] for h in hyps]
    for max_n in (4, 2):
        ours = corpus_bleu(hyps, refs, max_n=max_n)
        bleu = BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n)
        ref = bleu.corpus_score([" ".join(h) for h in hyps], [[" ".join(r) for r in refs]]).score
        assert abs(ours - ref) < 1e-9, f"max_n={max_n}: {ours} vs sacrebleu {ref}"
    assert corpus_bleu([["a", "b", "c", "d"]], [["a", "b", "c", "d"]]) == 100.0
    assert corpus_bleu([["the", "the", "the", "the"]], [["the", "cat", "the", "mat"]]) == 0.0


# ---------------------------------------------------------------- a model that learns
def test_transformer_learns_to_copy():
    """1+1 layers, d_model 64, 1,000 steps of 64 random sequences (lengths 3-8 over 10 symbols):
    measured here at 100% greedy accuracy for seeds 0, 1 and 2 (loss < 1e-3), about 17 s on 2 cores."""
    torch.manual_seed(0)
    rng = random.Random(0)
    V, d = 14, 64
    model = Transformer(V, V, d_model=d, n_heads=4, n_layers=1, d_ff=128, dropout=0.0)
    opt, sched = make_optimizer(model, d, warmup_steps=100, factor=0.5)
    model.train()
    for _ in range(1000):
        seqs = [[rng.randint(4, V - 1) for _ in range(rng.randint(3, 8))] for _ in range(64)]
        b = make_batch(seqs, seqs)
        loss = label_smoothed_loss(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask), b.tgt_out, 0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    test = [[rng.randint(4, V - 1) for _ in range(rng.randint(3, 8))] for _ in range(200)]
    b = make_batch(test, test)
    out = greedy_decode(model, b.src, b.src_mask, max_len=10)
    wrong = [(t, o) for o, t in zip(out, test) if o != t]
    assert not wrong, (f"copy accuracy {1 - len(wrong) / len(test):.3f} after 1000 steps "
                       f"(last loss {loss.item():.4f}); e.g. {wrong[:3]}")
