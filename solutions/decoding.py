"""Stage 13: decoding. Greedy decoding, beam search with the length penalty of Wu et al. 2016 (the
paper uses beam 4, alpha 0.6, section 6.1), and corpus BLEU (Papineni et al. 2002).

The decoders use the model only through model.encode, model.decode and model.generator, and are
batched: every source (and every beam) of a batch goes through the decoder in one call per step.
"""
from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn.functional as F

from .masks import causal_mask
from .tokenization import BOS, EOS


def _check_batch(src: torch.Tensor) -> None:
    if src.dim() != 2 or src.size(0) == 0:
        raise ValueError(f"expected a non-empty batch of source ids (B, Ls), got shape {tuple(src.shape)}")


@torch.no_grad()
def greedy_decode(model, src, src_mask, max_len: int, bos_id: int = BOS,
                  eos_id: int = EOS) -> list[list[int]]:
    """Generate the most probable next token, one step at a time, for every source at once.

    src (B, Ls), src_mask (B, 1, 1, Ls) -> B lists of ids, without <bos> and without the final <eos>;
    at most max_len tokens are generated per source (<eos> included). src and src_mask are left
    unchanged, and so is the model's mode (train or eval: the caller's choice).
    Example: a model that copies its input, src [[5, 6]] -> [[5, 6]]
    """
    _check_batch(src)
    ### BEGIN SOLUTION
    memory = model.encode(src, src_mask)                                    # (B, Ls, d_model)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        out = model.decode(ys, memory, src_mask, causal_mask(ys.size(1), src.device))  # (B, t, d_model)
        next_tok = model.generator(out[:, -1]).argmax(dim=-1)               # (B,)
        next_tok = next_tok.masked_fill(finished, eos_id)                   # finished rows just repeat <eos>
        ys = torch.cat([ys, next_tok[:, None]], dim=1)                      # (B, t + 1)
        finished |= next_tok == eos_id
        if finished.all():
            break
    results = []
    for row in ys[:, 1:].tolist():
        results.append(row[: row.index(eos_id)] if eos_id in row else row)
    return results
    ### END SOLUTION


def length_penalty(length: int, alpha: float) -> float:
    """((5 + length) / 6) ** alpha (Wu et al. 2016). Example: length_penalty(1, 0.6) = 1.0,
    length_penalty(7, 0.6) = 2 ** 0.6 = 1.516"""
    ### BEGIN SOLUTION
    return ((5 + length) / 6) ** alpha
    ### END SOLUTION


@torch.no_grad()
def beam_search(model, src, src_mask, max_len: int, beam_size: int = 4, alpha: float = 0.6,
                bos_id: int = BOS, eos_id: int = EOS) -> list[list[int]]:
    """Beam search: one answer per source, ids without <bos> and without the final <eos>.

    src (B, Ls), src_mask (B, 1, 1, Ls) -> B lists of ids; src, src_mask and the model's mode are left as
    they are. For one source with k open hypotheses:
    prefixes (k, t), their log p (k,); log_softmax(model.generator(states[:, -1])) (k, V); their sum
    scores[:, None] + log_probs (k, V), flattened to the k * V one-token extensions, ranked.
    Each step walks down that ranking: an extension ending in <eos> is finished and set aside, any other
    stays open, until beam_size are open. Open hypotheses count as finished after max_len tokens. The
    answer maximizes log p / length_penalty(length, alpha), length counting <eos>. A source stops once no
    open hypothesis can beat its best finished one (bound: log p / length_penalty(max_len, alpha)).

    Example, by hand: three tokens <eos>, a, b; beam_size=2, alpha=0 (scores are plain log p).
      p(. | <bos>) = a 0.5, b 0.4, <eos> 0.1;  p(. | a) = a 0.45, b 0.35, <eos> 0.2;  p(. | b) = <eos> 0.9
      step 1: a -0.69, b -0.92 open (<eos> -2.30 is not reached: the beam is full)
      step 2: "b <eos>" ln 0.36 = -1.02 finished; "a a" -1.49, "a b" -1.74 open
              the best open, -1.49, cannot beat -1.02: stop -> [b]   (greedy: a a a ...)
    With beam_size=1 and alpha=0 it gives greedy_decode's answer.
    """
    _check_batch(src)
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    ### BEGIN SOLUTION
    device, K = src.device, beam_size
    B = src.size(0)
    memory = model.encode(src, src_mask)                                 # (B, Ls, d_model)
    best_score = [-math.inf] * B                                         # best finished, normalized
    best_ids: list[list[int]] = [[] for _ in range(B)]
    active = torch.arange(B, device=device)                              # sources still searching
    tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)  # (a*K, t), open prefixes
    scores = torch.full((B, K), -math.inf, device=device)                # (a, K) log p of each open one
    scores[:, 0] = 0.0                                                   # one open hypothesis: <bos>
    for t in range(1, max_len + 1):
        a = active.numel()
        rows = active.repeat_interleave(K)                               # source of each open row
        out = model.decode(tokens, memory[rows], src_mask[rows], causal_mask(t, device))  # (a*K, t, d)
        logp = F.log_softmax(model.generator(out[:, -1]).float(), dim=-1)  # (a*K, V)
        V = logp.size(-1)
        cand = (scores[:, :, None] + logp.view(a, K, V)).view(a, K * V)  # (a, K*V)
        # at most K of the ranking are <eos> (one per open hypothesis): the top 2K hold K open ones
        top_val, top_idx = cand.topk(min(2 * K, K * V), dim=1)           # (a, 2K), ranked
        beam, tok = top_idx // V, top_idx % V
        valid = top_val > -math.inf
        is_open = valid & (tok != eos_id)
        opens_before = is_open.long().cumsum(1) - is_open.long()
        finish = valid & (tok == eos_id) & (opens_before < K)            # met before K open ones
        keep = is_open & (opens_before < K)                              # the new open hypotheses
        for s, j in finish.nonzero().tolist():                          # few: at most K per source
            score = top_val[s, j].item() / length_penalty(t, alpha)
            src_i = active[s].item()
            if score > best_score[src_i]:
                best_score[src_i] = score
                best_ids[src_i] = tokens[s * K + beam[s, j].item(), 1:].tolist()
        # move the kept candidates to the front, in rank order, and take K of them
        order = torch.where(keep, torch.arange(top_val.size(1), device=device), top_val.size(1))
        pos = order.sort(dim=1).values[:, :K]                            # (a, K)
        pos_ok = pos < top_val.size(1)
        pos = pos.clamp(max=top_val.size(1) - 1)
        new_scores = top_val.gather(1, pos).masked_fill(~pos_ok, -math.inf)  # (a, K)
        parent = (torch.arange(a, device=device)[:, None] * K + beam.gather(1, pos)).view(-1)  # (a*K,)
        tokens = torch.cat([tokens[parent], tok.gather(1, pos).view(-1, 1)], dim=1)  # (a*K, t+1)
        scores = new_scores
        if t == max_len:  # out of room: open hypotheses count as finished, length max_len
            for s in range(a):
                j = int(scores[s].argmax())
                score = scores[s, j].item() / length_penalty(max_len, alpha)
                src_i = active[s].item()
                if score > best_score[src_i]:
                    best_score[src_i], best_ids[src_i] = score, tokens[s * K + j, 1:].tolist()
            break
        # stop a source once its best open hypothesis, even at its best possible length, cannot win
        bound = scores.max(dim=1).values / max(length_penalty(t + 1, alpha), length_penalty(max_len, alpha))
        best = torch.tensor([best_score[i] for i in active.tolist()], device=device)
        go_on = bound > best
        if not go_on.all():
            active, scores = active[go_on], scores[go_on]
            tokens = tokens.view(a, K, -1)[go_on].view(-1, tokens.size(1))
            if active.numel() == 0:
                break
    return best_ids
    ### END SOLUTION


def _ngrams(tokens, n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu(hypotheses, references, max_n: int = 4) -> float:
    """Corpus BLEU in 0..100 over token lists, one reference per hypothesis:
    BP * exp(mean_n log p_n), p_n = clipped n-gram matches / hypothesis n-grams, summed over the corpus,
    BP = min(1, exp(1 - ref_len / hyp_len)). 0 when some p_n is 0 (no smoothing).

    Example: hyp [["the", "cat"]], ref [["the", "cat"]], max_n=2 -> 100.0
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    ### BEGIN SOLUTION
    matches, totals = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        hyp_len, ref_len = hyp_len + len(hyp), ref_len + len(ref)
        for n in range(1, max_n + 1):
            h, r = _ngrams(hyp, n), _ngrams(ref, n)
            matches[n - 1] += sum(min(c, r[g]) for g, c in h.items())  # clipped by the reference count
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    if hyp_len == 0 or min(matches) == 0:
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n
    brevity = min(0.0, 1 - ref_len / hyp_len)  # log of the brevity penalty
    return 100 * math.exp(brevity + log_precision)
    ### END SOLUTION
