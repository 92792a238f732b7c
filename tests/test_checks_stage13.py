"""Stage 13's checks: full marks for the reference and for correct decoders and BLEU written differently
(one source at a time, batched, other masks and memory layouts); points lost, with the mistake named,
for each classic mistake."""
import math
import time
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import solutions
from autograder import REGISTRY, max_points
from solutions import BOS, EOS, PAD
from tests.grading import (assert_caught, assert_full_marks, grade, grade_one, grade_one_across,
                           run_silently)

NAMES = ["greedy_decode", "length_penalty", "beam_search", "corpus_bleu"]


@pytest.mark.parametrize("name", NAMES)
def test_reference_gets_full_marks(name):
    assert_full_marks(getattr(solutions, name))


@pytest.mark.parametrize("name", NAMES)
def test_stub_gets_zero_and_says_not_implemented(name):
    def stub(*args, **kwargs):
        raise NotImplementedError()
    points, text = grade(stub, name)
    assert points == 0 and text.count("not implemented yet") == len(REGISTRY[name]), text


def causal(t, n=1):
    i = torch.arange(t)  # (no .tril(): on a busy multi-core CPU its thread pool makes it take milliseconds)
    return (i[:, None] >= i[None, :]).expand(n, 1, t, t)


def lp(length, alpha):
    return ((5 + length) / 6) ** alpha


# ================================================================ greedy_decode
def greedy_one_at_a_time(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """A learner's plain loop: one source at a time, Python lists, a freshly built mask each step."""
    answers = []
    for i in range(src.size(0)):
        s, m = src[i:i + 1], src_mask[i:i + 1]
        memory = model.encode(s, m)
        ids = [bos_id]
        for _ in range(max_len):
            t = len(ids)
            out = model.decode(torch.tensor([ids]), memory, m, torch.ones(t, t).tril().bool()[None, None])
            tok = int(model.generator(out)[0, -1].argmax())
            if tok == eos_id:
                break
            ids.append(tok)
        answers.append(ids[1:])
    return answers


def greedy_batched_own_mask(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Batched, with a (B, 1, t, t) mask and the sources that are done dropped from the batch."""
    memory = model.encode(src, src_mask)
    B = src.size(0)
    ys = torch.full((B, 1), bos_id)
    alive = list(range(B))
    answers = [[] for _ in range(B)]
    for _ in range(max_len):
        t = ys.size(1)
        logits = model.generator(model.decode(ys, memory[alive], src_mask[alive], causal(t, len(alive)))[:, -1])
        nxt = logits.argmax(-1)
        keep = []
        for row, b in enumerate(alive):
            if nxt[row].item() == eos_id:
                continue
            answers[b].append(nxt[row].item())
            keep.append(row)
        ys = torch.cat([ys, nxt[:, None]], 1)[keep]
        alive = [alive[r] for r in keep]
        if not alive:
            break
    return answers


@pytest.mark.parametrize("fn", [greedy_one_at_a_time, greedy_batched_own_mask])
def test_other_correct_greedy(fn):
    assert_full_marks(fn, "greedy_decode")


def greedy_variant(no_stop=False, keep_bos=False, keep_eos=False, steps=0, mask="causal", fixed_ids=False):
    def greedy_decode(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
        if fixed_ids:
            bos_id = BOS
        memory = model.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), bos_id)
        for _ in range(max_len + steps):
            t = ys.size(1)
            m = {"causal": causal(t), "none": None, "ones": torch.ones(1, 1, t, t, dtype=torch.bool),
                 "full": causal(t + 0).transpose(-1, -2)}[mask]
            nxt = model.generator(model.decode(ys, memory, src_mask, m)[:, -1]).argmax(-1)
            ys = torch.cat([ys, nxt[:, None]], 1)
            if not no_stop and (ys[:, 1:] == eos_id).any(1).all():
                break
        out = []
        for row in ys.tolist():
            ids = row if keep_bos else row[1:]
            if not no_stop and eos_id in ids:
                ids = ids[: ids.index(eos_id) + (1 if keep_eos else 0)]
            out.append(ids)
        return out
    return greedy_decode


GREEDY_MISTAKES = [
    ("does not stop at <eos>", greedy_variant(no_stop=True), ["did not stop at <eos>"]),
    ("returns <bos>", greedy_variant(keep_bos=True), ["<bos> is in the output"]),
    ("returns the final <eos>", greedy_variant(keep_eos=True), ["final <eos> is in the output"]),
    ("max_len + 1 tokens", greedy_variant(steps=1), ["max_len + 1 tokens"]),
    ("max_len - 1 tokens", greedy_variant(steps=-1), ["max_len - 1 tokens"]),
    ("no tgt_mask", greedy_variant(mask="none"), ["tgt_mask=None"]),
    ("an all-True tgt_mask", greedy_variant(mask="ones"), ["tgt_mask with other values"]),
    ("an upper-triangular tgt_mask", greedy_variant(mask="full"), ["tgt_mask with other values"]),
    ("bos_id ignored", greedy_variant(fixed_ids=True), ["bos_id argument is ignored"]),
]


@pytest.mark.parametrize("label,fn,keywords", GREEDY_MISTAKES, ids=[m[0] for m in GREEDY_MISTAKES])
def test_greedy_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "greedy_decode", *keywords)


def test_greedy_without_src_mask_is_caught():
    def greedy_decode(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
        return solutions.greedy_decode(model, src, None, max_len, bos_id, eos_id)
    assert_caught(greedy_decode, "greedy_decode", "src_mask=None")


def test_greedy_calling_model_forward_is_named():
    def greedy_decode(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
        model(src, src[:, :1], src_mask, None)
    points, text = assert_caught(greedy_decode, "greedy_decode", "model.forward")
    assert points == 0


# ================================================================ length_penalty
def lp_exp_log(length, alpha):
    return math.exp(alpha * math.log((5 + length) / 6))


def lp_torch(length, alpha):
    return torch.tensor((5.0 + length) / 6.0, dtype=torch.float64).pow(alpha)


@pytest.mark.parametrize("fn", [lp_exp_log, lp_torch])
def test_other_correct_length_penalty(fn):
    assert_full_marks(fn, "length_penalty")


LP_MISTAKES = [
    ("no exponent", lambda length, alpha: (5 + length) / 6, ["exponent is missing"]),
    ("(5 + length) ** alpha / 6", lambda length, alpha: (5 + length) ** alpha / 6, ["only the numerator"]),
    ("length ** alpha", lambda length, alpha: length ** alpha, ["length ** alpha"]),
    ("divided by 5", lambda length, alpha: ((5 + length) / 5) ** alpha, ["divided by 5"]),
]


@pytest.mark.parametrize("label,fn,keywords", LP_MISTAKES, ids=[m[0] for m in LP_MISTAKES])
def test_length_penalty_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "length_penalty", *keywords)


# ================================================================ beam_search
def beam_one_at_a_time(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """A learner's plain beam: one source and one hypothesis per decode call, lists of (ids, log p), and the
    contract's early stop."""
    answers = []
    for i in range(src.size(0)):
        s, m = src[i:i + 1], src_mask[i:i + 1]
        memory = model.encode(s, m)
        beams, finished = [([bos_id], 0.0)], []
        for t in range(1, max_len + 1):
            candidates = []
            for ids, score in beams:
                out = model.decode(torch.tensor([ids]), memory, m, causal(t))
                logp = F.log_softmax(model.generator(out[0, -1]), dim=-1)
                candidates += [(score + v, ids + [tok]) for tok, v in enumerate(logp.tolist())]
            candidates.sort(key=lambda c: c[0], reverse=True)
            beams = []
            for score, ids in candidates:
                if ids[-1] == eos_id:
                    finished.append((score / lp(t, alpha), ids[1:-1]))
                else:
                    beams.append((ids, score))
                    if len(beams) == beam_size:
                        break
            if t == max_len:
                finished += [(score / lp(max_len, alpha), ids[1:]) for ids, score in beams]
            elif finished and max(s_ for _, s_ in beams) / lp(max_len, alpha) <= max(f[0] for f in finished):
                break
        answers.append(max(finished, key=lambda f: f[0])[1])
    return answers


def beam_per_source_batched(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """The hypotheses of one source in one decode call, a memory of one row broadcast over them, a
    (N, 1, t, t) mask; candidates ranked by normalized score (the same order: all have length t); no early stop."""
    answers = []
    for i in range(src.size(0)):
        memory = model.encode(src[i:i + 1], src_mask[i:i + 1])  # (1, Ls, d): broadcast over the hypotheses
        ys, scores = torch.full((1, 1), bos_id), torch.zeros(1)
        best, best_ids = -math.inf, []
        for t in range(1, max_len + 1):
            n = ys.size(0)
            out = model.decode(ys, memory, src_mask[i:i + 1], causal(t, n))
            logp = model.generator(out[:, -1]).log_softmax(-1)  # (n, V)
            V = logp.size(-1)
            total = (scores[:, None] + logp).flatten() / lp(t, alpha)
            order = total.argsort(descending=True)
            keep = []
            for j in order.tolist():
                parent, tok = divmod(j, V)
                if tok == eos_id:
                    if total[j].item() > best:
                        best, best_ids = total[j].item(), ys[parent, 1:].tolist()
                else:
                    keep.append(j)
                    if len(keep) == beam_size:
                        break
            keep_t = torch.tensor(keep)
            ys = torch.cat([ys[keep_t // V], (keep_t % V)[:, None]], 1)
            scores = total[keep_t] * lp(t, alpha)
        j = int(scores.argmax())
        if scores[j].item() / lp(max_len, alpha) > best:
            best_ids = ys[j, 1:].tolist()
        answers.append(best_ids)
    return answers


@pytest.mark.parametrize("fn", [beam_one_at_a_time, beam_per_source_batched])
def test_other_correct_beam(fn):
    assert_full_marks(fn, "beam_search")


def test_one_at_a_time_beam_is_fast_enough():
    """Every check stays well inside its time limit even for the slowest kind of correct beam search."""
    from autograder.core import run_check
    for c in REGISTRY["beam_search"]:
        start = time.perf_counter()
        points, line = run_check(c, beam_one_at_a_time)
        assert points == c.points, line
        assert time.perf_counter() - start < c.timeout / 2, f"{c.title}: {time.perf_counter() - start:.1f} s"


def beam_variant(penalty=True, eos_in_length=True, stop_first=False, finished="aside", raw=False, steps=0,
                 keep_bos=False, fixed_eos=False, mask="causal"):
    """A one-source-at-a-time beam with one classic mistake switched on."""
    def beam_search(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
        if fixed_eos:
            eos_id = EOS

        def norm(score, length):
            return score / lp(length, alpha) if penalty else score
        answers = []
        for i in range(src.size(0)):
            s, m = src[i:i + 1], src_mask[i:i + 1]
            memory = model.encode(s, m)
            beams, done = [([bos_id], 0.0)], []
            for t in range(1, max_len + 1 + steps):
                cands = []
                for ids, score in beams:
                    if finished == "slots" and ids[-1] == eos_id:
                        cands.append((score, ids))
                        continue
                    tm = {"causal": causal(t), "none": None}[mask]
                    z = model.generator(model.decode(torch.tensor([ids]), memory, m, tm)[0, -1])
                    logp = z if raw else z.log_softmax(-1)
                    cands += [(score + v, ids + [tok]) for tok, v in enumerate(logp.tolist())]
                cands.sort(key=lambda c: -c[0])
                if finished in ("slots", "extend"):
                    beams = [(ids, score) for score, ids in cands[:beam_size]]
                    continue
                beams = []
                for score, ids in cands:
                    if ids[-1] == eos_id:
                        done.append((norm(score, t if eos_in_length else t - 1), ids[1:-1]))
                    else:
                        beams.append((ids, score))
                        if len(beams) == beam_size:
                            break
                if stop_first and done:
                    break
            if finished in ("slots", "extend"):
                for ids, score in beams:
                    body = ids[1:]
                    if eos_id in body:
                        body = body[:body.index(eos_id)]
                        done.append((norm(score, len(body) + 1), body))
                    else:
                        done.append((norm(score, len(body)), body))
            elif not (stop_first and done):
                done += [(norm(score, len(ids) - 1), ids[1:]) for ids, score in beams]
            best = max(done, key=lambda d: d[0])[1]
            answers.append(([bos_id] if keep_bos else []) + best)
        return answers
    return beam_search


def beam_extend_keep_eos(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """The naive beam: nothing is set aside, the best sequence returned as it is (eos and all after it)."""
    answers = []
    for i in range(src.size(0)):
        memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
        beams = [([bos_id], 0.0)]
        for t in range(1, max_len + 1):
            cands = []
            for ids, score in beams:
                z = model.generator(model.decode(torch.tensor([ids]), memory, src_mask[i:i + 1], causal(t))[0, -1])
                cands += [(score + v, ids + [tok]) for tok, v in enumerate(z.log_softmax(-1).tolist())]
            cands.sort(key=lambda c: -c[0])
            beams = [(ids, score) for score, ids in cands[:beam_size]]
        answers.append(max(beams, key=lambda b: b[1] / lp(max_len, alpha))[0][1:])
    return answers


BEAM_MISTAKES = [
    ("no length penalty", beam_variant(penalty=False), ["no length penalty"]),
    ("<eos> left out of the length", beam_variant(eos_in_length=False), ["left out <eos>"]),
    ("stops at the first finished hypothesis", beam_variant(stop_first=True), ["stopped at the first finished"]),
    ("finished hypotheses keep beam slots", beam_variant(finished="slots"), ["kept their beam slots"]),
    ("finished hypotheses extended past <eos>", beam_variant(finished="extend"), ["extended past <eos>"]),
    ("naive beam returning tokens after <eos>", beam_extend_keep_eos, ["tokens after <eos>"]),
    ("raw logits as scores", beam_variant(raw=True), ["raw logits"]),
    ("max_len + 1 tokens", beam_variant(steps=1), ["searched max_len + 1 tokens"]),
    ("returns <bos>", beam_variant(keep_bos=True), ["<bos>"]),
    ("eos_id ignored", beam_variant(fixed_eos=True), ["eos_id argument is ignored"]),
    ("no tgt_mask", beam_variant(mask="none"), ["tgt_mask=None"]),
]


@pytest.mark.parametrize("label,fn,keywords", BEAM_MISTAKES, ids=[m[0] for m in BEAM_MISTAKES])
def test_beam_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "beam_search", *keywords)


def test_beam_ignoring_beam_size_is_caught():
    def beam_search(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
        return solutions.beam_search(model, src, src_mask, max_len, 4, alpha, bos_id, eos_id)
    assert_caught(beam_search, "beam_search")


# ================================================================ corpus_bleu
def bleu_counter(hypotheses, references, max_n=4):
    """Counter intersection for the clipping, the brevity penalty as a branch."""
    matches, totals = [0] * max_n, [0] * max_n
    h_len = sum(len(h) for h in hypotheses)
    r_len = sum(len(r) for r in references)
    for h, r in zip(hypotheses, references):
        for n in range(1, max_n + 1):
            hc = Counter(zip(*[h[k:] for k in range(n)]))
            rc = Counter(zip(*[r[k:] for k in range(n)]))
            matches[n - 1] += sum((hc & rc).values())
            totals[n - 1] += sum(hc.values())
    if 0 in matches or 0 in totals:
        return 0.0
    geo = math.exp(sum(math.log(m) - math.log(t) for m, t in zip(matches, totals)) / max_n)
    bp = 1.0 if h_len > r_len else math.exp(1 - r_len / h_len)
    return 100.0 * bp * geo


def bleu_sacrebleu(hypotheses, references, max_n=4):
    """Calling sacrebleu itself is a correct answer too."""
    from sacrebleu.metrics import BLEU
    bleu = BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n)
    return bleu.corpus_score([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]]).score


@pytest.mark.parametrize("fn", [bleu_counter, bleu_sacrebleu])
def test_other_correct_bleu(fn):
    assert_full_marks(fn, "corpus_bleu")


def bleu_variant(clip=True, brevity=True, smooth=False, scale=100.0, geometric=True, fixed_n=False):
    def corpus_bleu(hypotheses, references, max_n=4):
        if fixed_n:
            max_n = 4
        matches, totals = [0] * max_n, [0] * max_n
        h_len = sum(len(h) for h in hypotheses)
        r_len = sum(len(r) for r in references)
        for h, r in zip(hypotheses, references):
            for n in range(1, max_n + 1):
                hc = Counter(tuple(h[k:k + n]) for k in range(len(h) - n + 1))
                rc = Counter(tuple(r[k:k + n]) for k in range(len(r) - n + 1))
                matches[n - 1] += sum(min(c, rc[g]) if clip else (c if g in rc else 0) for g, c in hc.items())
                totals[n - 1] += sum(hc.values())
        if smooth:  # add-one for n >= 2
            matches = [m + (n > 0) for n, m in enumerate(matches)]
            totals = [t + (n > 0) for n, t in enumerate(totals)]
        if 0 in matches or 0 in totals:
            return 0.0
        precisions = [m / t for m, t in zip(matches, totals)]
        mean = math.exp(sum(map(math.log, precisions)) / max_n) if geometric else sum(precisions) / max_n
        bp = math.exp(min(0.0, 1 - r_len / h_len)) if brevity else 1.0
        return scale * bp * mean
    return corpus_bleu


def bleu_sentence_average(hypotheses, references, max_n=4):
    return sum(solutions.corpus_bleu([h], [r], max_n) for h, r in zip(hypotheses, references)) / len(hypotheses)


BLEU_MISTAKES = [
    ("no clipping", bleu_variant(clip=False), ["not clipped"]),
    ("no brevity penalty", bleu_variant(brevity=False), ["no brevity penalty"]),
    ("average of sentence scores", bleu_sentence_average, ["average of sentence scores"]),
    ("add-one smoothing", bleu_variant(smooth=True), ["smoothed"]),
    ("0..1 scale", bleu_variant(scale=1.0), ["0..1 scale"]),
    ("arithmetic mean", bleu_variant(geometric=False), ["arithmetic mean"]),
    ("max_n ignored", bleu_variant(fixed_n=True), ["max_n argument is ignored"]),
]


@pytest.mark.parametrize("label,fn,keywords", BLEU_MISTAKES, ids=[m[0] for m in BLEU_MISTAKES])
def test_bleu_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "corpus_bleu", *keywords)


def test_greedy_padding_finished_rows_with_a_target_mask_gets_full_marks():
    """Finished rows padded with <pad>, and the decoder given target_mask(ys): the rows still decoding
    see the causal mask, so this is correct too."""
    def greedy_decode(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
        memory = model.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), bos_id)
        done = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            nxt = model.generator(model.decode(ys, memory, src_mask, solutions.target_mask(ys))[:, -1]).argmax(-1)
            nxt = nxt.masked_fill(done, solutions.PAD)
            ys = torch.cat([ys, nxt[:, None]], 1)
            done |= nxt == eos_id
            if done.all():
                break
        return [[t for t in row[1:] if t not in (eos_id, solutions.PAD)] for row in ys.tolist()]
    assert_full_marks(greedy_decode, "greedy_decode")


# ================================================================ review: more styles and mistakes
# ---- correct, written differently
def greedy_run_then_cut(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Never stops early: max_len steps for every row, then each row cut at its first <eos>."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        out = model.decode(ys, memory, src_mask, causal(ys.size(1)))
        ys = torch.cat([ys, model.generator(out[:, -1]).argmax(-1, keepdim=True)], dim=1)
    rows = [row.tolist() for row in ys[:, 1:]]
    return [row[:row.index(eos_id)] if eos_id in row else row for row in rows]


def greedy_2d_mask_tensor_answers(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """A 2-D (t, t) causal mask, the step of each row's <eos> recorded, tensors returned."""
    memory = model.encode(src, src_mask)
    B = src.size(0)
    ys, stop = torch.full((B, 1), bos_id), torch.full((B,), max_len)
    for step in range(max_len):
        t = ys.size(1)
        mask = torch.arange(t)[None, :] <= torch.arange(t)[:, None]
        nxt = model.generator(model.decode(ys, memory, src_mask, mask))[:, -1].max(-1).indices
        newly = (nxt == eos_id) & (stop == max_len)
        stop[newly] = step
        ys = torch.cat([ys, nxt[:, None]], 1)
        if bool((stop < max_len).all()):
            break
    return [ys[b, 1:1 + int(stop[b])] for b in range(B)]


def greedy_index_live_rows(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Only the live rows go to the decoder (index_select on memory and src_mask); answers as tuples."""
    memory = model.encode(src, src_mask)
    live, ys, answers = torch.arange(src.size(0)), torch.full((src.size(0), 1), bos_id), {}
    for _ in range(max_len):
        t = ys.size(1)
        out = model.decode(ys, memory.index_select(0, live), src_mask.index_select(0, live), causal(t, len(live)))
        nxt = model.generator(out[:, -1]).argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = nxt == eos_id
        for r in done.nonzero().flatten().tolist():
            answers[int(live[r])] = tuple(ys[r, 1:-1].tolist())
        ys, live = ys[~done], live[~done]
        if len(live) == 0:
            break
    for r, b in enumerate(live.tolist()):
        answers[b] = tuple(ys[r, 1:].tolist())
    return [answers[b] for b in range(src.size(0))]


@pytest.mark.parametrize("fn", [greedy_run_then_cut, greedy_2d_mask_tensor_answers, greedy_index_live_rows])
def test_more_correct_greedy(fn):
    assert_full_marks(fn, "greedy_decode")


def lp_float32_tensor(length, alpha):
    return torch.tensor([(5 + length) / 6]).pow(alpha)[0]  # float32: about 1e-7 relative error


def lp_log1p(length, alpha):
    return math.exp(alpha * math.log1p((length - 1) / 6))


@pytest.mark.parametrize("fn", [lp_float32_tensor, lp_log1p])
def test_more_correct_length_penalty(fn):
    assert_full_marks(fn, "length_penalty")


def beam_topk_live(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """The common learner's beam: only the live hypotheses, topk(2 * beam_size) of their n * V extensions (at
    least beam_size of those are open), no early stop."""
    answers = []
    for i in range(src.size(0)):
        memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
        ys, scores = torch.full((1, 1), bos_id), torch.zeros(1)
        best, best_ids = -math.inf, []
        for t in range(1, max_len + 1):
            n = ys.size(0)
            out = model.decode(ys, memory.expand(n, -1, -1), src_mask[i:i + 1], causal(t))
            logp = model.generator(out[:, -1]).log_softmax(-1)
            V = logp.size(1)
            values, flat = (scores[:, None] + logp).view(-1).topk(2 * beam_size)
            keep_ids, keep_scores = [], []
            for v, j in zip(values.tolist(), flat.tolist()):
                parent, tok = divmod(j, V)
                if tok == eos_id:
                    if v / lp(t, alpha) > best:
                        best, best_ids = v / lp(t, alpha), ys[parent, 1:].tolist()
                else:
                    keep_ids.append(torch.cat([ys[parent], torch.tensor([tok])]))
                    keep_scores.append(v)
                    if len(keep_ids) == beam_size:
                        break
            ys, scores = torch.stack(keep_ids), torch.tensor(keep_scores)
        j = int(scores.argmax())
        if scores[j].item() / lp(max_len, alpha) > best:
            best_ids = ys[j, 1:].tolist()
        answers.append(best_ids)
    return answers


def beam_flat_padded(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """Every source's beam_size rows in one (B * K, t) batch, empty slots at -inf, the ranking walked per source
    in float64."""
    B, K = src.size(0), beam_size
    memory = model.encode(src, src_mask).repeat_interleave(K, 0)
    mask = src_mask.repeat_interleave(K, 0)
    ys = torch.full((B * K, 1), bos_id)
    scores = torch.full((B, K), -math.inf, dtype=torch.float64)
    scores[:, 0] = 0.0
    best = [(-math.inf, [])] * B
    for t in range(1, max_len + 1):
        logp = model.generator(model.decode(ys, memory, mask, causal(t)))[:, -1].double().log_softmax(-1)
        V = logp.size(-1)
        values, order = (scores[:, :, None] + logp.view(B, K, V)).view(B, -1).sort(dim=1, descending=True)
        rows, new_scores = [], []
        for b in range(B):
            kept = []
            for v, j in zip(values[b].tolist(), order[b].tolist()):
                if v == -math.inf:
                    break
                k, tok = divmod(j, V)
                if tok == eos_id:
                    if v / lp(t, alpha) > best[b][0]:
                        best[b] = (v / lp(t, alpha), ys[b * K + k, 1:].tolist())
                else:
                    kept.append((v, k, tok))
                    if len(kept) == K:
                        break
            kept += [(-math.inf, 0, 3)] * (K - len(kept))
            rows += [torch.cat([ys[b * K + k], torch.tensor([tok])]) for _, k, tok in kept]
            new_scores += [v for v, _, _ in kept]
        ys, scores = torch.stack(rows), torch.tensor(new_scores, dtype=torch.float64).view(B, K)
    for b in range(B):
        k = int(scores[b].argmax())
        if scores[b, k].item() / lp(max_len, alpha) > best[b][0]:
            best[b] = (None, ys[b * K + k, 1:].tolist())
    return [ids for _, ids in best]


def beam_dicts_early_stop(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """Hypotheses as dict keys, finished ones in a dict, the contract's early stop (strict <)."""
    answers = []
    for i in range(len(src)):
        memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
        beams, finished = {(bos_id,): 0.0}, {}
        for t in range(1, max_len + 1):
            keys = list(beams)
            out = model.decode(torch.tensor(keys), memory.repeat(len(keys), 1, 1),
                               src_mask[i:i + 1].repeat(len(keys), 1, 1, 1), causal(t))
            logp = F.log_softmax(model.generator(out[:, -1]), dim=-1).tolist()
            cand = {key + (tok,): beams[key] + v for key, row in zip(keys, logp) for tok, v in enumerate(row)}
            beams = {}
            for seq in sorted(cand, key=cand.get, reverse=True):
                if seq[-1] == eos_id:
                    finished[seq[1:-1]] = cand[seq] / lp(t, alpha)
                else:
                    beams[seq] = cand[seq]
                    if len(beams) == beam_size:
                        break
            if t == max_len:
                finished.update({seq[1:]: s / lp(max_len, alpha) for seq, s in beams.items()})
            elif finished and max(beams.values()) / lp(max_len, alpha) < max(finished.values()):
                break
        answers.append(list(max(finished, key=finished.get)))
    return answers


@pytest.mark.parametrize("fn", [beam_topk_live, beam_flat_padded, beam_dicts_early_stop])
def test_more_correct_beam(fn):
    assert_full_marks(fn, "beam_search")


def bleu_string_dicts(hypotheses, references, max_n=4):
    """n-grams as joined strings in plain dicts, the precisions multiplied as p ** (1 / max_n)."""
    matches, totals = {n: 0 for n in range(1, max_n + 1)}, {n: 0 for n in range(1, max_n + 1)}
    c = r = 0
    for h, ref in zip(hypotheses, references):
        c, r = c + len(h), r + len(ref)
        for n in matches:
            hd, rd = {}, {}
            for i in range(len(h) - n + 1):
                hd[" ".join(h[i:i + n])] = hd.get(" ".join(h[i:i + n]), 0) + 1
            for i in range(len(ref) - n + 1):
                rd[" ".join(ref[i:i + n])] = rd.get(" ".join(ref[i:i + n]), 0) + 1
            for g, k in hd.items():
                matches[n] += min(k, rd.get(g, 0))
                totals[n] += k
    if c == 0 or 0 in matches.values():
        return 0.0
    score = 1.0
    for n in matches:
        score *= (matches[n] / totals[n]) ** (1 / max_n)
    return 100 * score * (1 if c > r else math.exp(1 - r / c))


def bleu_fractions_tensor(hypotheses, references, max_n=4):
    """Exact fractions for the precisions, a 0-d tensor returned."""
    from fractions import Fraction
    logs = []
    for n in range(1, max_n + 1):
        num = den = 0
        for h, ref in zip(hypotheses, references):
            hc, rc = Counter(zip(*(h[i:] for i in range(n)))), Counter(zip(*(ref[i:] for i in range(n))))
            num, den = num + sum((hc & rc).values()), den + sum(hc.values())
        if num == 0:
            return torch.tensor(0.0)
        logs.append(math.log(Fraction(num, den)))
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    return torch.tensor(100 * math.exp(min(0.0, 1 - r / c) + sum(logs) / max_n), dtype=torch.float64)


@pytest.mark.parametrize("fn", [bleu_string_dicts, bleu_fractions_tensor])
def test_more_correct_bleu(fn):
    assert_full_marks(fn, "corpus_bleu")


# ---- mistakes
def greedy_first_position(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id)
    for _ in range(max_len):
        nxt = model.generator(model.decode(ys, memory, src_mask, causal(ys.size(1)))[:, 0]).argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], 1)
    return [row[:row.index(eos_id)] if eos_id in row else row for row in ys[:, 1:].tolist()]


def greedy_stops_at_first_eos_of_batch(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id)
    for _ in range(max_len):
        nxt = model.generator(model.decode(ys, memory, src_mask, causal(ys.size(1)))[:, -1]).argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], 1)
        if (nxt == eos_id).any():
            break
    return [row[:row.index(eos_id)] if eos_id in row else row for row in ys[:, 1:].tolist()]


def beam_lists(accumulate=True, bos_in_length=False, bound=None, steps=0, memory_tiled=False):
    """A batched beam (one decode call per step for all sources, B * K rows), with one mistake switched on.
    bound: "current" (open log p / penalty of its current length) or "raw" (open log p) for the early stop;
    memory_tiled: memory.repeat(K, 1, 1) while the rows are grouped by source (they need repeat_interleave)."""
    def beam_search(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
        B, K = src.size(0), beam_size
        memory = model.encode(src, src_mask)
        memory = memory.repeat(K, 1, 1) if memory_tiled else memory.repeat_interleave(K, 0)
        mask = src_mask.repeat(K, 1, 1, 1) if memory_tiled else src_mask.repeat_interleave(K, 0)
        beams = [[([bos_id], 0.0)] + [([bos_id], -math.inf)] * (K - 1) for _ in range(B)]
        done = [[] for _ in range(B)]  # (normalized score, ids)
        stopped = [False] * B

        def norm(score, length):
            return score / lp(length + (1 if bos_in_length else 0), alpha)
        for t in range(1, max_len + steps + 1):
            ys = torch.tensor([ids for b in range(B) for ids, _ in beams[b]])
            logp = model.generator(model.decode(ys, memory, mask, causal(t)))[:, -1].log_softmax(-1).tolist()
            for b in range(B):
                if stopped[b]:  # its rows still go to the decoder (one batch), padded: never read again
                    beams[b] = [(ids + [PAD], s) for ids, s in beams[b]]
                    continue
                cands = sorted(((s + v if accumulate else v, ids + [tok])
                                for (ids, s), row in zip(beams[b], logp[b * K:(b + 1) * K]) if s > -math.inf
                                for tok, v in enumerate(row)), key=lambda c: -c[0])
                kept = []
                for s, ids in cands:
                    if ids[-1] == eos_id:
                        done[b].append((norm(s, t), ids[1:-1]))
                    else:
                        kept.append((ids, s))
                        if len(kept) == K:
                            break
                beams[b] = kept + [(kept[0][0], -math.inf)] * (K - len(kept))
                top = max(s for _, s in kept)
                limit = {"current": norm(top, t), "next": norm(top, t + 1), "raw": top, None: norm(top, max_len)}[bound]
                if done[b] and limit <= max(d[0] for d in done[b]):
                    stopped[b] = True
            if all(stopped):
                break
        for b in range(B):
            if not stopped[b]:
                done[b] += [(norm(s, len(ids) - 1), ids[1:]) for ids, s in beams[b] if s > -math.inf]
        return [max(d, key=lambda x: x[0])[1] for d in done]
    return beam_search


def bleu_orders_below_max_n(hypotheses, references, max_n=4):
    """range(1, max_n): the order n = max_n is never counted (the mean still divides by max_n)."""
    logs = []
    for n in range(1, max_n):
        num = den = 0
        for h, ref in zip(hypotheses, references):
            hc, rc = Counter(zip(*(h[i:] for i in range(n)))), Counter(zip(*(ref[i:] for i in range(n))))
            num, den = num + sum((hc & rc).values()), den + sum(hc.values())
        if num == 0:
            return 0.0
        logs.append(math.log(num / den))
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    return 100 * math.exp(min(0.0, 1 - r / c) + sum(logs) / max_n)


def bleu_skips_orders_without_ngrams(hypotheses, references, max_n=4):
    """An order with no n-gram at all (a corpus of 3-token sentences has no 4-gram) left out of the mean."""
    logs = []
    for n in range(1, max_n + 1):
        num = den = 0
        for h, ref in zip(hypotheses, references):
            hc, rc = Counter(zip(*(h[i:] for i in range(n)))), Counter(zip(*(ref[i:] for i in range(n))))
            num, den = num + sum((hc & rc).values()), den + sum(hc.values())
        if den == 0:
            continue
        if num == 0:
            return 0.0
        logs.append(math.log(num / den))
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    return 100 * math.exp(min(0.0, 1 - r / c) + sum(logs) / len(logs))


def greedy_fills_src_mask_in_place(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    src_mask.fill_(True)  # "the fake padding does not matter": the caller's mask is changed
    return solutions.greedy_decode(model, src, src_mask, max_len, bos_id, eos_id)


def bleu_appends_in_place(hypotheses, references, max_n=4):
    for h in hypotheses:
        h.append("</s>")
    for r in references:
        r.append("</s>")
    return solutions.corpus_bleu(hypotheses, references, max_n)


REVIEW_MISTAKES = [
    ("greedy_decode", "src_mask edited in place", greedy_fills_src_mask_in_place, ["src_mask", "edited in place"]),
    ("corpus_bleu", "the token lists edited in place", bleu_appends_in_place, ["edited in place"]),
    ("greedy_decode", "the first position's logits", greedy_first_position, ["first position"]),
    ("greedy_decode", "stops when one source ends", greedy_stops_at_first_eos_of_batch,
     ["as soon as ONE source produced <eos>", "until EVERY source has finished"]),
    ("length_penalty", "(5 + length) / 6 ** alpha", lambda length, alpha: (5 + length) / 6 ** alpha,
     ["only 6 is raised"]),
    ("length_penalty", "times alpha", lambda length, alpha: (5 + length) / 6 * alpha, ["multiplied by alpha"]),
    ("length_penalty", "integer division", lambda length, alpha: ((5 + length) // 6) ** alpha, ["integer division"]),
    ("length_penalty", "a string", lambda length, alpha: str(((5 + length) / 6) ** alpha), ["expected a number"]),
    ("beam_search", "log p not accumulated", beam_lists(accumulate=False), ["not accumulated"]),
    ("beam_search", "<bos> counted in the length", beam_lists(bos_in_length=True), ["counted <bos>"]),
    ("beam_search", "bound with the current length", beam_lists(bound="current"), ["stopped too early"]),
    ("beam_search", "bound without the penalty", beam_lists(bound="raw"), ["stopped too early"]),
    ("beam_search", "max_len - 1 tokens", beam_lists(steps=-1), ["max_len - 1 tokens"]),
    ("beam_search", "memory tiled, rows grouped by source", beam_lists(memory_tiled=True),
     ["decoded alone", "repeat_interleave"]),
    ("corpus_bleu", "range(1, max_n)", bleu_orders_below_max_n, ["n = max_n is missing"]),
    ("corpus_bleu", "orders without n-grams skipped", bleu_skips_orders_without_ngrams, ["left out of the mean"]),
    ("corpus_bleu", "a string", lambda h, r, max_n=4: str(solutions.corpus_bleu(h, r, max_n)), ["expected a number"]),
]


@pytest.mark.parametrize("name,label,fn,keywords", REVIEW_MISTAKES, ids=[f"{m[0]}: {m[1]}" for m in REVIEW_MISTAKES])
def test_more_mistakes_are_caught(name, label, fn, keywords):
    assert_caught(fn, name, *keywords)


def test_beam_lists_without_a_mistake_gets_full_marks():
    """The batched beam the mistakes above are made from is right when no mistake is switched on."""
    assert_full_marks(beam_lists(), "beam_search")


# ================================================================ review round 2: more styles and mistakes
# ---- correct, written differently
def greedy_reencode_each_step(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """One source at a time, the source re-encoded at every step, a while loop, a tril mask of ones."""
    out = []
    for b in range(src.shape[0]):
        ids = [bos_id]
        while len(ids) - 1 < max_len:
            memory = model.encode(src[b:b + 1], src_mask[b:b + 1])
            t = len(ids)
            tm = torch.ones(t, t).tril().bool().unsqueeze(0).unsqueeze(0)
            nxt = model.generator(model.decode(torch.LongTensor([ids]), memory, src_mask[b:b + 1], tm))[0, -1]
            ids.append(nxt.argmax().item())
            if ids[-1] == eos_id:
                break
        out.append(ids[1:-1] if ids[-1] == eos_id else ids[1:])
    return out


def greedy_numpy(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """The prefixes kept as a numpy array, numpy's argmax, answers as lists of numpy integers."""
    import numpy as np
    memory = model.encode(src, src_mask)
    ys = np.full((src.shape[0], 1), bos_id, dtype=np.int64)
    done = np.zeros(src.shape[0], dtype=bool)
    for _ in range(max_len):
        t = ys.shape[1]
        mask = torch.from_numpy(np.tril(np.ones((t, t), dtype=bool)))[None, None]
        logits = model.generator(model.decode(torch.from_numpy(ys), memory, src_mask, mask)[:, -1])
        nxt = np.where(done, eos_id, np.argmax(logits.detach().numpy(), axis=-1))
        ys = np.concatenate([ys, nxt[:, None]], axis=1)
        done |= nxt == eos_id
        if done.all():
            break
    answers = []
    for row in ys[:, 1:]:
        hits = np.nonzero(row == eos_id)[0]
        answers.append(list(row[: hits[0]] if len(hits) else row))
    return answers


@torch.no_grad()
def greedy_kwonly_float64(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS, *, device=None, scores=False):
    """model.eval(), keyword-only extras, log_softmax in float64, a mask from triu, itertools.takewhile."""
    import itertools
    model.eval()
    device = device or next(model.parameters()).device
    memory = model.encode(src.to(device), src_mask.to(device))
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=device)
    total = torch.zeros(src.size(0), dtype=torch.float64)
    stopped = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        L = ys.size(1)
        future = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
        best, nxt = model.generator(model.decode(ys, memory, src_mask, ~future)[:, -1]).double().log_softmax(-1).max(-1)
        total += torch.where(stopped, 0.0, best)
        nxt[stopped] = eos_id
        ys = torch.cat((ys, nxt.unsqueeze(1)), dim=-1)
        stopped = stopped | (nxt == eos_id)
        if bool(stopped.all()):
            break
    res = [list(itertools.takewhile(lambda x: x != eos_id, row)) for row in ys[:, 1:].tolist()]
    return (res, total) if scores else res


def greedy_int32_live_rows(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """IntTensor prefixes (nn.Embedding takes int32 too), finished rows dropped, answers in a dict."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.int32)
    answers, live = {}, list(range(src.size(0)))
    for step in range(max_len):
        t, idx = ys.size(1), torch.tensor(live)
        nxt = model.generator(model.decode(ys, memory[idx], src_mask[idx], causal(t, len(live)))[:, -1]).argmax(-1)
        ys = torch.cat([ys, nxt.int()[:, None]], 1)
        keep = []
        for r, b in enumerate(live):
            if nxt[r] == eos_id:
                answers[b] = ys[r, 1:-1].tolist()
            elif step == max_len - 1:
                answers[b] = ys[r, 1:].tolist()
            else:
                keep.append(r)
        ys, live = ys[keep], [live[r] for r in keep]
        if not live:
            break
    return [answers[b] for b in range(src.size(0))]


def greedy_recursive(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """A recursive helper per source; a 2-D (t, t) mask from a comparison."""
    def go(memory, m, ids, left):
        if left == 0:
            return ids[1:]
        t = len(ids)
        z = model.generator(model.decode(torch.tensor([ids]), memory, m, torch.tril(torch.ones(t, t)) > 0))
        tok = int(torch.argmax(z[0, -1]))
        return ids[1:] if tok == eos_id else go(memory, m, ids + [tok], left - 1)
    return [go(model.encode(src[i:i + 1], src_mask[i:i + 1]), src_mask[i:i + 1], [bos_id], max_len)
            for i in range(len(src))]


def greedy_list_of_tensors(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """max_len steps for every row (finished rows keep receiving <eos>), src_mask expanded to (B, 1, t, Ls),
    a list of LongTensors returned."""
    memory = model.encode(src, src_mask)
    B = src.size(0)
    ys = src.new_full((B, 1), bos_id)
    for _ in range(max_len):
        t = ys.size(1)
        done = (ys[:, 1:] == eos_id).any(1)
        nxt = model.generator(model.decode(ys, memory, src_mask.expand(B, 1, t, src_mask.size(-1)),
                                           causal(t, B)))[:, -1].argmax(-1)
        ys = torch.hstack([ys, torch.where(done, torch.full_like(nxt, eos_id), nxt).view(-1, 1)])
    ends = [int((row == eos_id).nonzero()[0]) if (row == eos_id).any() else max_len for row in ys[:, 1:]]
    return [ys[b, 1:1 + n].clone() for b, n in enumerate(ends)]


@pytest.mark.parametrize("fn", [greedy_reencode_each_step, greedy_numpy, greedy_kwonly_float64,
                                greedy_int32_live_rows, greedy_recursive, greedy_list_of_tensors])
def test_round2_correct_greedy(fn):
    assert_full_marks(fn, "greedy_decode")


def lp_numpy_one_element(length, alpha):
    """A one-element numpy array: a number, as a one-element tensor is (it used to get 0/3)."""
    import numpy as np
    return np.array([(5 + length) / 6.0]) ** alpha


def lp_numpy_power(length, alpha):
    import numpy as np
    return np.power((5 + length) / 6, alpha)


def lp_split_powers(length, alpha):
    return pow(5 + length, alpha) * pow(6, -alpha)


def lp_logs(length, alpha):
    return math.exp(alpha * (math.log(5 + length) - math.log(6)))


def lp_decimal(length, alpha):
    from decimal import Decimal
    return float((Decimal(5 + length) / Decimal(6)) ** Decimal(str(alpha)))


def lp_tensor_arith(length, alpha=0.6):
    return (torch.as_tensor(length, dtype=torch.float32) + 5).div(6).pow(alpha)


@pytest.mark.parametrize("fn", [lp_numpy_one_element, lp_numpy_power, lp_split_powers, lp_logs, lp_decimal,
                                lp_tensor_arith])
def test_round2_correct_length_penalty(fn):
    assert_full_marks(fn, "length_penalty")


def beam_per_hypothesis_topk_heap(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """topk(K + 1) per hypothesis (at most one is <eos>, so K open ones per hypothesis are enough), merged;
    finished ones in a heap; the contract's early stop (strict <)."""
    import heapq
    import itertools
    K, answers = beam_size, []
    for i in range(src.size(0)):
        memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
        beams, finished, counter = [(0.0, [bos_id])], [], itertools.count()
        for t in range(1, max_len + 1):
            n = len(beams)
            out = model.decode(torch.tensor([ids for _, ids in beams]), memory.expand(n, -1, -1),
                               src_mask[i:i + 1].expand(n, -1, -1, -1), causal(t))
            vals, toks = F.log_softmax(model.generator(out[:, -1]), dim=-1).topk(K + 1, dim=-1)
            cands = sorted(((s + v, ids + [tok]) for (s, ids), vs, ts in zip(beams, vals.tolist(), toks.tolist())
                            for v, tok in zip(vs, ts)), key=lambda c: c[0], reverse=True)
            beams = []
            for s, ids in cands:
                if ids[-1] == eos_id:
                    heapq.heappush(finished, (-s / lp(t, alpha), next(counter), ids[1:-1]))
                else:
                    beams.append((s, ids))
                    if len(beams) == K:
                        break
            if t == max_len:
                for s, ids in beams:
                    heapq.heappush(finished, (-s / lp(max_len, alpha), next(counter), ids[1:]))
            elif finished and max(s for s, _ in beams) / lp(max_len, alpha) < -finished[0][0]:
                break
        answers.append(finished[0][2])
    return answers


def beam_normalized_each_step(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """The length penalty applied at every step: hypotheses carry score / lp(t), un-normalized to extend
    (the same ranking: all candidates of a step have one length); float64; a stable argsort."""
    answers = []
    for i in range(src.size(0)):
        memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
        ys, norm = torch.full((1, 1), bos_id, dtype=torch.long), torch.zeros(1, dtype=torch.float64)
        best = (-math.inf, None)
        for t in range(1, max_len + 1):
            n = ys.size(0)
            logp = model.generator(model.decode(ys, memory.repeat(n, 1, 1), src_mask[i:i + 1], causal(t, n)))[:, -1]
            logp = logp.double().log_softmax(-1)
            flat = ((norm * (lp(t - 1, alpha) if t > 1 else 1.0))[:, None] + logp).flatten() / lp(t, alpha)
            V, rows, toks, vals = logp.size(-1), [], [], []
            for j in torch.argsort(flat, descending=True, stable=True).tolist():
                r, tok = divmod(j, V)
                if tok == eos_id:
                    if flat[j].item() > best[0]:
                        best = (flat[j].item(), ys[r, 1:].tolist())
                    continue
                rows.append(r), toks.append(tok), vals.append(flat[j].item())
                if len(rows) == beam_size:
                    break
            ys, norm = torch.cat([ys[rows], torch.tensor(toks)[:, None]], 1), torch.tensor(vals, dtype=torch.float64)
        j = int(norm.argmax())  # the open ones: already / lp(max_len)
        answers.append(ys[j, 1:].tolist() if norm[j].item() > best[0] else best[1])
    return answers


def beam_numpy_scores(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """numpy float64 scores and a hand-written log_softmax, a stable descending argsort, finished hypotheses
    in a dict per source."""
    import numpy as np
    res = []
    for b in range(len(src)):
        mem = model.encode(src[[b]], src_mask[[b]])
        hyps, scores, finished = np.full((1, 1), bos_id, dtype=np.int64), np.zeros(1), {}
        for t in range(1, max_len + 1):
            n = len(hyps)
            x = model.generator(model.decode(torch.from_numpy(hyps), mem.expand(n, -1, -1), src_mask[[b]],
                                             causal(t)))[:, -1].double().numpy()
            m = x.max(-1, keepdims=True)
            cand = (scores[:, None] + x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))).ravel()
            V, keep = x.shape[1], []
            for j in np.argsort(-cand, kind="stable"):
                r, tok = divmod(int(j), V)
                if tok == eos_id:
                    finished[tuple(hyps[r, 1:].tolist())] = cand[j] / lp(t, alpha)
                else:
                    keep.append(j)
                    if len(keep) == beam_size:
                        break
            keep = np.array(keep)
            hyps, scores = np.concatenate([hyps[keep // V], (keep % V)[:, None]], axis=1), cand[keep]
        for row, s in zip(hyps, scores):
            finished[tuple(row[1:].tolist())] = s / lp(max_len, alpha)
        res.append(list(max(finished, key=finished.get)))
    return res


def beam_batched_variable_rows(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """All sources in one decode call per step with a variable number of rows each (no -inf placeholders),
    sources that are done dropped, index_select for memory and src_mask, the contract's early stop (<=)."""
    B = src.size(0)
    memory = model.encode(src, src_mask)
    hyps = {b: [((bos_id,), 0.0)] for b in range(B)}
    best = {b: (-math.inf, []) for b in range(B)}
    for t in range(1, max_len + 1):
        order = [b for b in range(B) if hyps[b]]
        if not order:
            break
        idx = torch.tensor([b for b in order for _ in hyps[b]])
        ys = torch.tensor([ids for b in order for ids, _ in hyps[b]])
        logp = model.generator(model.decode(ys, memory.index_select(0, idx), src_mask.index_select(0, idx),
                                            causal(t)))[:, -1].log_softmax(-1)
        r = 0
        for b in order:
            n, V = len(hyps[b]), logp.size(1)
            block, r = logp[r:r + n], r + n
            vals, js = (torch.tensor([s for _, s in hyps[b]])[:, None] + block).flatten().sort(descending=True)
            new = []
            for v, j in zip(vals.tolist(), js.tolist()):
                ids = hyps[b][j // V][0] + (j % V,)
                if j % V == eos_id:
                    if v / lp(t, alpha) > best[b][0]:
                        best[b] = (v / lp(t, alpha), list(ids[1:-1]))
                else:
                    new.append((ids, v))
                    if len(new) == beam_size:
                        break
            if t == max_len:
                for ids, v in new:
                    if v / lp(max_len, alpha) > best[b][0]:
                        best[b] = (v / lp(max_len, alpha), list(ids[1:]))
                new = []
            elif max(v for _, v in new) / lp(max_len, alpha) <= best[b][0]:
                new = []
            hyps[b] = new
    return [best[b][1] for b in range(B)]


def beam_objects_nlargest(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """Hypothesis objects, heapq.nlargest(2K) of the extensions, only the best finished one kept."""
    import heapq

    class Hyp:
        def __init__(self, ids, logp):
            self.ids, self.logp = ids, logp
    out = []
    for i in range(src.size(0)):
        memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
        beam, best_score, best_ids = [Hyp((bos_id,), 0.0)], -math.inf, []
        for t in range(1, max_len + 1):
            dec = model.decode(torch.tensor([h.ids for h in beam]), memory.expand(len(beam), -1, -1),
                               src_mask[i:i + 1], causal(t))
            lps = torch.log_softmax(model.generator(dec)[:, -1, :], dim=-1)
            ext = [Hyp(h.ids + (tok,), h.logp + v) for h, row in zip(beam, lps.tolist()) for tok, v in enumerate(row)]
            beam = []
            for h in heapq.nlargest(2 * beam_size, ext, key=lambda h: h.logp):
                if h.ids[-1] == eos_id:
                    if h.logp / lp(t, alpha) > best_score:
                        best_score, best_ids = h.logp / lp(t, alpha), list(h.ids[1:-1])
                else:
                    beam.append(h)
                    if len(beam) == beam_size:
                        break
            if t == max_len:
                for h in beam:
                    if h.logp / lp(max_len, alpha) > best_score:
                        best_score, best_ids = h.logp / lp(max_len, alpha), list(h.ids[1:])
            elif max(h.logp for h in beam) / lp(max_len, alpha) <= best_score:
                break
        out.append(best_ids)
    return out


def beam_banned_specials_tensor_answers(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS,
                                        eos_id=EOS):
    """<pad> and <bos> never generated (their log p set to -inf), float64 topk(2K), tensor answers."""
    answers = []
    for b in range(src.size(0)):
        mem = model.encode(src[b:b + 1], src_mask[b:b + 1])
        ys, sc = torch.tensor([[bos_id]]), torch.zeros(1, dtype=torch.float64)
        best_s, best = -math.inf, torch.zeros(0, dtype=torch.long)
        for t in range(1, max_len + 1):
            n = len(ys)
            x = model.generator(model.decode(ys, mem.expand(n, -1, -1), src_mask[b:b + 1].expand(n, 1, 1, -1),
                                             causal(t, n))[:, -1]).double()
            logp = x - torch.logsumexp(x, -1, keepdim=True)
            logp[:, [PAD, bos_id]] = -math.inf
            V = logp.size(1)
            v, j = (sc[:, None] + logp).view(-1).topk(2 * beam_size)
            rows, toks, keep = [], [], []
            for vv, jj in zip(v.tolist(), j.tolist()):
                p, tok = divmod(jj, V)
                if tok == eos_id:
                    if vv / lp(t, alpha) > best_s:
                        best_s, best = vv / lp(t, alpha), ys[p, 1:].clone()
                else:
                    rows.append(p), toks.append(tok), keep.append(vv)
                    if len(rows) == beam_size:
                        break
            ys, sc = torch.cat([ys[rows], torch.tensor(toks).unsqueeze(1)], 1), torch.tensor(keep, dtype=torch.float64)
        k = int(sc.argmax())
        answers.append(ys[k, 1:] if sc[k].item() / lp(max_len, alpha) > best_s else best)
    return answers


@pytest.mark.parametrize("fn", [beam_per_hypothesis_topk_heap, beam_normalized_each_step, beam_numpy_scores,
                                beam_batched_variable_rows, beam_objects_nlargest,
                                beam_banned_specials_tensor_answers])
def test_round2_correct_beam(fn):
    assert_full_marks(fn, "beam_search")


def bleu_numpy(hypotheses, references, max_n=4):
    import numpy as np
    matches, totals = np.zeros(max_n), np.zeros(max_n)
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    for h, ref in zip(hypotheses, references):
        for n in range(1, max_n + 1):
            hc, rc = Counter(zip(*[h[i:] for i in range(n)])), Counter(zip(*[ref[i:] for i in range(n)]))
            matches[n - 1] += sum(min(v, rc[g]) for g, v in hc.items())
            totals[n - 1] += sum(hc.values())
    if c == 0 or (matches == 0).any():
        return np.float64(0.0)
    return 100 * (1.0 if c > r else np.exp(1 - r / c)) * np.exp(np.mean(np.log(matches / totals)))


def bleu_log10_weights(hypotheses, references, max_n=4):
    """Base-10 logs and 10 ** (another base for the same geometric mean), a weights list, math.fsum."""
    logs = []
    for n, w in zip(range(1, max_n + 1), [1.0 / max_n] * max_n):
        m = t = 0
        for h, ref in zip(hypotheses, references):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            m += sum((hc & Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))).values())
            t += max(len(h) - n + 1, 0)
        if m == 0:
            return 0.0
        logs.append(w * math.log10(m / t))
    ratio = sum(map(len, hypotheses)) / sum(map(len, references))
    return 100.0 * (1.0 if ratio > 1.0 else math.exp(1 - 1 / ratio)) * 10 ** math.fsum(logs)


def bleu_torch_stats(hypotheses, references, max_n=4):
    """Counts in a (2, max_n) float64 tensor, n-grams as joined strings, a 0-d tensor returned."""
    stats = torch.zeros(2, max_n, dtype=torch.float64)
    for h, ref in zip(hypotheses, references):
        for n in range(max_n):
            hg = Counter(" ".join(h[i:i + n + 1]) for i in range(len(h) - n))
            rg = Counter(" ".join(ref[i:i + n + 1]) for i in range(len(ref) - n))
            stats[0, n] += sum(min(k, rg.get(g, 0)) for g, k in hg.items())
            stats[1, n] += sum(hg.values())
    if (stats[0] == 0).any():
        return torch.tensor(0.0, dtype=torch.float64)
    c = torch.tensor(float(sum(map(len, hypotheses))), dtype=torch.float64)
    r = torch.tensor(float(sum(map(len, references))), dtype=torch.float64)
    return 100 * torch.exp(torch.clamp(1 - r / c, max=0.0) + torch.log(stats[0] / stats[1]).mean())


def bleu_fraction_product(hypotheses, references, max_n=4):
    """An exact product of fractions, then one root; the brevity branch with <=."""
    from collections import defaultdict
    from fractions import Fraction
    prod = Fraction(1)
    for n in range(1, max_n + 1):
        num = den = 0
        for h, ref in zip(hypotheses, references):
            hg, rg = defaultdict(int), defaultdict(int)
            for i in range(len(h) - n + 1):
                hg[tuple(h[i:i + n])] += 1
            for i in range(len(ref) - n + 1):
                rg[tuple(ref[i:i + n])] += 1
            num, den = num + sum(min(v, rg[g]) for g, v in hg.items()), den + sum(hg.values())
        if num == 0:
            return 0
        prod *= Fraction(num, den)
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    return float(prod) ** (1 / max_n) * (math.exp(1 - r / c) if c <= r else 1) * 100


def bleu_sentence_stats_first(hypotheses, references, max_n=4, *, return_stats=False):
    """Per-sentence statistics in dicts, summed, scored at the end; a keyword-only extra."""
    def stats(h, ref):
        st = {"c": len(h), "r": len(ref)}
        for n in range(1, max_n + 1):
            hg = Counter(tuple(h[i:i + n]) for i in range(max(0, len(h) - n + 1)))
            rg = Counter(tuple(ref[i:i + n]) for i in range(max(0, len(ref) - n + 1)))
            st[("m", n)], st[("t", n)] = sum((hg & rg).values()), max(0, len(h) - n + 1)
        return st
    per = [stats(h, ref) for h, ref in zip(hypotheses, references)]
    tot = {k: sum(s[k] for s in per) for k in per[0]}
    if return_stats:
        return tot
    if any(tot[("m", n)] == 0 for n in range(1, max_n + 1)):
        return 0.0
    logp = sum(math.log(tot[("m", n)]) - math.log(tot[("t", n)]) for n in range(1, max_n + 1)) / max_n
    return 100 * min(1.0, math.exp(1 - tot["r"] / tot["c"])) * math.exp(logp)


def bleu_sacrebleu_effective_order_off(hypotheses, references, max_n=4):
    import sacrebleu
    b = sacrebleu.BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n, effective_order=False)
    return b.corpus_score([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]]).score


@pytest.mark.parametrize("fn", [bleu_numpy, bleu_log10_weights, bleu_torch_stats, bleu_fraction_product,
                                bleu_sentence_stats_first, bleu_sacrebleu_effective_order_off])
def test_round2_correct_bleu(fn):
    assert_full_marks(fn, "corpus_bleu")


# ---- mistakes
def _greedy_loop(model, src, src_mask, max_len, bos_id, eos_id, ys, fill, position=-1, masks=None):
    memory = model.encode(src, src_mask)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        t = ys.size(1)
        a, b = (src_mask, causal(t)) if masks is None else masks(t)
        nxt = model.generator(model.decode(ys, memory, a, b)[:, position]).argmax(-1)
        nxt = nxt.masked_fill(done, fill)
        ys = torch.cat([ys, nxt[:, None].to(ys.dtype)], 1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


def greedy_float_prefixes(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """ys = torch.ones(B, 1) * bos_id: float prefixes, which a real model's nn.Embedding refuses."""
    ys = _greedy_loop(model, src, src_mask, max_len, bos_id, eos_id, torch.ones(src.size(0), 1) * bos_id, eos_id)
    return [[int(v) for v in row[:row.index(eos_id)]] if eos_id in row else [int(v) for v in row]
            for row in ys[:, 1:].tolist()]


def greedy_padding_returned(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Finished rows padded with <pad>, the <eos> dropped but the padding returned."""
    ys = _greedy_loop(model, src, src_mask, max_len, bos_id, eos_id, torch.full((src.size(0), 1), bos_id), PAD)
    return [[t for t in row if t != eos_id] for row in ys[:, 1:].tolist()]


def greedy_masks_swapped(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    ys = _greedy_loop(model, src, src_mask, max_len, bos_id, eos_id, torch.full((src.size(0), 1), bos_id), eos_id,
                      masks=lambda t: (causal(t), src_mask))
    return [row[:row.index(eos_id)] if eos_id in row else row for row in ys[:, 1:].tolist()]


def greedy_squeezes_one_source(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """.squeeze() on the answers: a flat list when the batch holds one source."""
    out = solutions.greedy_decode(model, src, src_mask, max_len, bos_id, eos_id)
    return out[0] if len(out) == 1 else out


def beam_mistake(walk="contract", copies=False, penalty="div", fixed_alpha=None, probs=False, open_norm=True,
                 position=-1, stop_at_k=False, all_eos=False, per_hyp_k=False):
    """A one-source-at-a-time beam with one classic mistake switched on."""
    def beam_search(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
        if fixed_alpha is not None:
            alpha = fixed_alpha

        def norm(s, n):
            if probs:
                s = math.exp(s)
            return {"div": s / lp(n, alpha), "mul": s * lp(n, alpha), "power": s / n ** alpha}[penalty]
        answers = []
        for i in range(src.size(0)):
            K = beam_size
            memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
            beams, done = [([bos_id], 0.0)] * (K if copies else 1), []
            for t in range(1, max_len + 1):
                n = len(beams)
                z = model.generator(model.decode(torch.tensor([ids for ids, _ in beams]), memory.expand(n, -1, -1),
                                                 src_mask[i:i + 1], causal(t))[:, position])
                logp = z.log_softmax(-1)
                if per_hyp_k:  # topk(K) per hypothesis: an <eos> among them leaves too few open ones
                    vals, toks = logp.topk(K, dim=-1)
                    cands = [(s + v, ids + [tok]) for (ids, s), vs, ts in zip(beams, vals.tolist(), toks.tolist())
                             for v, tok in zip(vs, ts)]
                else:
                    cands = [(s + v, ids + [tok]) for (ids, s), row in zip(beams, logp.tolist())
                             for tok, v in enumerate(row)]
                cands.sort(key=lambda c: -c[0])
                if walk in ("step", "forever"):  # the top K (K shrinking for "forever"), <eos> ones set aside
                    cands, width = cands[:K], K
                new = []
                for s, ids in cands:
                    if ids[-1] == eos_id:
                        done.append((norm(s, t), ids[1:-1]))
                        if walk == "forever":
                            K -= 1
                    elif not all_eos or len(new) < K:
                        new.append((ids, s))
                        if len(new) == K and not all_eos and walk == "contract":
                            break
                beams = new
                if not beams or (stop_at_k and len(done) >= beam_size):
                    break
            else:
                done += [(norm(s, max_len) if open_norm else s, ids[1:]) for ids, s in beams]
            answers.append(max(done, key=lambda d: d[0])[1])
        return answers
    return beam_search


def bleu_switch(**flags):
    """A corpus BLEU with one classic mistake switched on."""
    def corpus_bleu(hypotheses, references, max_n=4):
        if flags.get("swapped"):
            hypotheses, references = references, hypotheses
        if flags.get("joined"):
            hypotheses, references = [[w for h in hypotheses for w in h]], [[w for r in references for w in r]]
        matches, totals = [0] * max_n, [0] * max_n
        for h, r in zip(hypotheses, references):
            for n in range(1, max_n + 1):
                k = n - 1 if flags.get("zero_based") else n
                hc = Counter(tuple(h[i:i + k]) for i in range(len(h) - k + 1))
                rc = Counter(tuple(r[i:i + k]) for i in range(len(r) - k + 1))
                matches[n - 1] += sum((hc & rc).values())
                totals[n - 1] += sum((rc if flags.get("recall") else hc).values())
        if 0 in matches or 0 in totals:
            return 0.0
        c, r = sum(map(len, hypotheses)), sum(map(len, references))
        w = 0.25 if flags.get("quarter") else 1 / max_n
        s = sum(w * math.log(m / t) for m, t in zip(matches, totals))
        if flags.get("sentence_bp"):
            bp = sum(min(1.0, math.exp(1 - len(b) / len(a))) for a, b in zip(hypotheses, references)) / len(hypotheses)
        else:
            bp = min(1.0, math.exp(1 - r / c))
        return 100 * bp * (s if flags.get("no_exp") else math.exp(s))
    return corpus_bleu


ROUND2_MISTAKES = [
    ("greedy_decode", "float prefixes (used to get full marks)", greedy_float_prefixes, ["torch.long", "float"]),
    ("greedy_decode", "a flat list for one source (used to get full marks)", greedy_squeezes_one_source,
     ["flat list", "batch of one"]),
    ("greedy_decode", "<pad> returned after <eos>", greedy_padding_returned, ["<pad>", "padding"]),
    ("greedy_decode", "masks swapped in model.decode", greedy_masks_swapped, ["tgt_mask of shape"]),
    ("length_penalty", "length and alpha swapped", lambda length, alpha: ((5 + alpha) / 6) ** length, ["swapped"]),
    ("length_penalty", "5 + length / 6", lambda length, alpha: (5 + length / 6) ** alpha, ["precedence"]),
    ("length_penalty", "alpha ignored", lambda length, alpha: ((5 + length) / 6) ** 0.6, ["alpha argument"]),
    ("length_penalty", "the log of the penalty", lambda length, alpha: alpha * math.log((5 + length) / 6),
     ["logarithm"]),
    ("beam_search", "topk(K) per hypothesis", beam_mistake(per_hyp_k=True), ["the beam shrank"]),
    ("beam_search", "topk(K), <eos> ones then removed", beam_mistake(walk="step"), ["the beam shrank"]),
    ("beam_search", "the width drops per finished hypothesis", beam_mistake(walk="forever"), ["dropped by one"]),
    ("beam_search", "beam_size copies of <bos> at log p 0", beam_mistake(copies=True), ["copies of <bos>"]),
    ("beam_search", "log p times the penalty", beam_mistake(penalty="mul"), ["multiplied by length_penalty"]),
    ("beam_search", "length ** alpha as the penalty", beam_mistake(penalty="power"), ["length ** alpha"]),
    ("beam_search", "alpha ignored", beam_mistake(fixed_alpha=0.6), ["alpha argument is ignored"]),
    ("beam_search", "probabilities multiplied", beam_mistake(probs=True), ["probabilities multiplied"]),
    ("beam_search", "open ones at max_len not normalized", beam_mistake(open_norm=False), ["raw log p"]),
    ("beam_search", "the first position's logits", beam_mistake(position=0), ["first position"]),
    ("beam_search", "stops once beam_size have finished", beam_mistake(stop_at_k=True),
     ["once beam_size hypotheses had finished"]),
    ("beam_search", "every <eos> extension finished", beam_mistake(all_eos=True), ["every <eos> extension"]),
    ("corpus_bleu", "a recall", bleu_switch(recall=True), ["REFERENCE n-grams"]),
    ("corpus_bleu", "brevity penalty per sentence", bleu_switch(sentence_bp=True), ["per sentence"]),
    ("corpus_bleu", "the corpus joined into one sentence", bleu_switch(joined=True), ["one long sentence"]),
    ("corpus_bleu", "weights fixed at 1/4", bleu_switch(quarter=True), ["fixed at 1/4"]),
    ("corpus_bleu", "orders 0..max_n - 1", bleu_switch(zero_based=True), ["range(max_n)"]),
    ("corpus_bleu", "exp missing", bleu_switch(no_exp=True), ["exp is missing"]),
    ("corpus_bleu", "hypotheses and references swapped", bleu_switch(swapped=True), ["swapped"]),
]


@pytest.mark.parametrize("name,label,fn,keywords", ROUND2_MISTAKES, ids=[f"{m[0]}: {m[1]}" for m in ROUND2_MISTAKES])
def test_round2_mistakes_are_caught(name, label, fn, keywords):
    assert_caught(fn, name, *keywords)


def beam_size_one_as_greedy(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    """beam_size=1 handed to greedy decoding whatever alpha (it used to get full marks: the checks ran beam 1
    with alpha 0 only)."""
    if beam_size == 1:
        return solutions.greedy_decode(model, src, src_mask, max_len, bos_id, eos_id)
    return solutions.beam_search(model, src, src_mask, max_len, beam_size, alpha, bos_id, eos_id)


def test_beam_size_one_run_as_greedy_is_caught():
    assert_caught(beam_size_one_as_greedy, "beam_search", "beam_size=1 was run as greedy decoding")


def test_beam_mistake_without_a_mistake_gets_full_marks():
    """The one-source beam the mistakes above are made from is right when no mistake is switched on."""
    assert_full_marks(beam_mistake(), "beam_search")


def test_beam_shrinking_is_named_first_where_it_matters():
    """In the check about setting finished hypotheses aside, the beam that shrinks is named before the
    mistakes (no penalty, ...) that give the same answer there."""
    _, text = grade(beam_mistake(walk="step"), "beam_search")
    line = next(l for l in text.splitlines() if "sets finished hypotheses aside" in l)
    assert line.split("Likely: ", 1)[1].startswith("the beam shrank"), line


# ================================================================ review round 3
class _NoGenerator:
    """The model as a decoder that forgets model.generator sees it: decode's output taken for the logits."""

    def __init__(self, model):
        self.encode, self.decode = model.encode, model.decode

    @staticmethod
    def generator(out):
        return out


def greedy_without_generator(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    return solutions.greedy_decode(_NoGenerator(model), src, src_mask, max_len, bos_id, eos_id)


def beam_without_generator(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
    return solutions.beam_search(_NoGenerator(model), src, src_mask, max_len, beam_size, alpha, bos_id, eos_id)


def bleu_zero_unguarded(hypotheses, references, max_n=4):
    """No early return for a zero precision: math.log(0) raises (or 0/0 for an order without n-grams)."""
    m, tot = [0] * max_n, [0] * max_n
    for h, r in zip(hypotheses, references):
        for n in range(1, max_n + 1):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            m[n - 1], tot[n - 1] = m[n - 1] + sum((hc & rc).values()), tot[n - 1] + sum(hc.values())
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    return 100 * min(1.0, math.exp(1 - r / c)) * math.exp(sum(math.log(a / b) for a, b in zip(m, tot)) / max_n)


def bleu_bp(kind):
    """Corpus BLEU with the brevity penalty written wrong: "ratio" (hyp_len / ref_len) or "uncapped" (above 1 for
    long hypotheses)."""
    def corpus_bleu(hypotheses, references, max_n=4):
        score = solutions.corpus_bleu(hypotheses, references, max_n)
        c, r = sum(map(len, hypotheses)), sum(map(len, references))
        right = min(1.0, math.exp(1 - r / c))
        return score / right * (min(1.0, c / r) if kind == "ratio" else math.exp(1 - r / c))
    return corpus_bleu


def bleu_unique_ngrams(hypotheses, references, max_n=4):
    """Sets of n-grams: each distinct n-gram counted once, in the matches and in the totals."""
    m, tot = [0] * max_n, [0] * max_n
    for h, r in zip(hypotheses, references):
        for n in range(1, max_n + 1):
            hs = {tuple(h[i:i + n]) for i in range(len(h) - n + 1)}
            m[n - 1] += len(hs & {tuple(r[i:i + n]) for i in range(len(r) - n + 1)})
            tot[n - 1] += len(hs)
    if 0 in m:
        return 0.0
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    return 100 * min(1.0, math.exp(1 - r / c)) * math.exp(sum(math.log(a / b) for a, b in zip(m, tot)) / max_n)


ROUND3_MISTAKES = [
    ("greedy_decode", "model.generator not applied (used to get full marks)", greedy_without_generator,
     ["model.generator was not applied"]),
    ("beam_search", "model.generator not applied (used to get full marks)", beam_without_generator,
     ["model.generator was not applied"]),
    ("beam_search", "early stop with the penalty of length t + 1", beam_lists(bound="next"),
     ["stopped too early", "t + 1"]),
    ("corpus_bleu", "log(0) reached", bleu_zero_unguarded, ["math.log(0)", "return 0.0"]),
    ("corpus_bleu", "BP = hyp_len / ref_len", bleu_bp("ratio"), ["hyp_len / ref_len"]),
    ("corpus_bleu", "BP not capped at 1", bleu_bp("uncapped"), ["not capped at 1"]),
    ("corpus_bleu", "distinct n-grams counted once", bleu_unique_ngrams, ["counted once (a set)"]),
]


@pytest.mark.parametrize("name,label,fn,keywords", ROUND3_MISTAKES, ids=[f"{m[0]}: {m[1]}" for m in ROUND3_MISTAKES])
def test_round3_mistakes_are_caught(name, label, fn, keywords):
    assert_caught(fn, name, *keywords)


def greedy_reads_out_features(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Reads the vocabulary size from model.generator (an nn.Linear in a real model; it used to get 0/5: the
    checks' model had an nn.Identity there)."""
    V = model.generator.out_features
    assert model.generator.weight.shape[0] == V
    return solutions.greedy_decode(model, src, src_mask, max_len, bos_id, eos_id)


def test_round3_decoder_reading_the_generator_gets_full_marks():
    """(beam_search runs on the same model: one decoder is enough to test it.)"""
    assert_full_marks(greedy_reads_out_features, "greedy_decode")


def test_check_runs_write_nothing_to_stderr():
    """check() on correct and wrong decoders, in a fresh interpreter, leaves stderr empty."""
    code = ("import torch, solutions\nfrom autograder import check\nfrom tests import test_checks_stage13 as t\n"
            "for fn, name in [(t.greedy_float_prefixes, 'greedy_decode'), (t.beam_mistake(copies=True), "
            "'beam_search'), (t.beam_normalized_each_step, 'beam_search'), (t.lp_numpy_one_element, "
            "'length_penalty'), (t.bleu_switch(no_exp=True), 'corpus_bleu')]:\n"
            "    fn.__name__ = name\n    check(fn)\n")
    run_silently(code)


# ================================================================ review round 4: the likeliest causes first, at most 3
def _hint(line):
    return line.split("Likely: ", 1)[1]


def test_greedy_stopping_at_the_first_finished_source_is_named_alone():
    """It was told a long catch-all about repeat_interleave, ranking and dropped rows (beam search's concepts)."""
    points, line = grade_one(greedy_stops_at_first_eos_of_batch, "greedy_decode", "stops each source")
    assert points == 0 and _hint(line).startswith("the loop stopped as soon as ONE source"), line
    assert "repeat_interleave" not in line, line


@pytest.mark.parametrize("fn,title,first", [
    (beam_lists(bound="current"), "divides by length_penalty", "the search stopped too early"),
    (beam_mistake(copies=True), "equals a reference beam search", "the search started with beam_size copies"),
], ids=["bound by the current length's penalty (was 'no length penalty')",
        "copies of <bos> (was 'the penalty is length ** alpha')"])
def test_beam_names_the_best_supported_cause_first(fn, title, first):
    points, line = grade_one(fn, "beam_search", title)
    assert points == 0 and _hint(line).startswith(first), line


def test_beam_names_at_most_three_causes():
    """One wrong answer used to come with about 15 'or ...' alternatives."""
    points, line = grade_one(beam_lists(bound="current"), "beam_search", "sets finished hypotheses aside")
    assert points == 0 and _hint(line).count("; or ") <= 2, line
    assert _hint(line).startswith("the search stopped too early"), line


# ---------------------------------------------------------------- issue 17: every argument matters, and no wrong guess
def greedy_cut_at_the_last_token(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Batched, finished rows not fed <eos>: a source that ends early keeps getting tokens, and only a final <eos> is
    cut. Every source alone is right, so this was told 'the sources of a batch disturb each other'."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        out = model.decode(ys, memory, src_mask, solutions.causal_mask(ys.size(1)))
        ys = torch.cat([ys, model.generator(out[:, -1]).argmax(-1, keepdim=True)], dim=1)
        if (ys[:, 1:] == eos_id).any(dim=1).all():
            break
    return [row[:-1] if row[-1] == eos_id else row for row in ys[:, 1:].tolist()]


def test_an_answer_not_cut_at_its_first_eos_is_named():
    points, text = grade(greedy_cut_at_the_last_token, "greedy_decode")
    assert points == max_points("greedy_decode") - 4, text  # max_len=4 stops every source in time
    assert ("Likely: the answer goes on after its first <eos> (2), which is where it ends: in a batch a source that "
            "has finished keeps getting tokens while the others go on") in text, text
    assert "disturb each other" not in text, text


def greedy_encodes_without_the_mask(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Right in every step but the first: a real encoder then attends the source padding."""
    memory = model.encode(src, None)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        out = model.decode(ys, memory, src_mask, solutions.causal_mask(ys.size(1)))
        nxt = model.generator(out[:, -1]).argmax(-1).masked_fill(done, eos_id)
        ys, done = torch.cat([ys, nxt[:, None]], dim=1), done | (nxt == eos_id)
        if done.all():
            break
    return [row[:row.index(eos_id)] if eos_id in row else row for row in ys[:, 1:].tolist()]


def beam_encodes_with_an_all_true_mask(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS,
                                       eos_id=EOS):
    return solutions.beam_search(_EncodeWithoutPadding(model), src, src_mask, max_len, beam_size, alpha, bos_id,
                                 eos_id)


class _EncodeWithoutPadding:
    """The model with encode given a mask of all True (the source's padding forgotten)."""

    def __init__(self, model):
        self.model, self.generator = model, model.generator

    def encode(self, src, src_mask):
        return self.model.encode(src, torch.ones_like(src_mask))

    def decode(self, *args):
        return self.model.decode(*args)


@pytest.mark.parametrize("name,fn,said", [
    ("greedy_decode", greedy_encodes_without_the_mask, "model.encode got src_mask=None"),
    ("beam_search", beam_encodes_with_an_all_true_mask, "model.encode got a src_mask with other values than the "
                                                        "padding of src")])
def test_the_mask_given_to_encode_matters(name, fn, said):
    points, line = grade_one(fn, name, "passes model.decode the causal mask")
    assert points == 0, line
    assert line.endswith(f"the masks given to the model. Likely: {said}, expected the src_mask you were given, "
                         "(B, 1, 1, Ls) (the rows of the sources encoded): the encoder's self-attention must not see "
                         "the padding"), line


def greedy_takes_the_last_sentence(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """out[-1] (the last sentence of the batch) where out[:, -1] (the last position) was meant: an error in torch.cat."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        out = model.decode(ys, memory, src_mask, solutions.causal_mask(ys.size(1)))
        next_token = model.generator(out[-1]).argmax(-1)
        ys = torch.cat([ys, next_token[:, None]], dim=1)
    return [row[:row.index(eos_id)] if eos_id in row else row for row in ys[:, 1:].tolist()]


def test_an_error_in_the_learners_code_says_where_with_what_and_why():
    points, line = grade_one(greedy_takes_the_last_sentence, "greedy_decode", "equals a reference greedy decoder")
    assert points == 0, line
    assert ("your code raised RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 6 but got "
            "size 1 for tensor number 1 in the list. (in greedy_takes_the_last_sentence, line ") in line, line
    assert (": `ys = torch.cat([ys, next_token[:, None]], dim=1)`), with ys (6, 1), next_token (1,); the call was "
            "greedy_takes_the_last_sentence(src (6, 3), src_mask (6, 1, 1, 3), max_len=6, bos_id=1, eos_id=2). "
            "Likely: out[-1] takes the last item of the batch (out is (6, 1, 7), dim 0 the batch of 6), where the last "
            "position was meant: out[:, -1] keeps one row per sentence") in line, line


def test_an_error_raised_in_the_kernel_gets_the_same_likely():
    """Graded by the grade command, the same mistake raises in the notebook's kernel: the kernel sends the shapes of
    its failing line's tensors and of out (indexed out[-1]) with the error, and the message gives the same Likely."""
    def greedy_decode(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
        return greedy_takes_the_last_sentence(model, src, src_mask, max_len, bos_id, eos_id)
    points, line = grade_one_across(greedy_decode, "greedy_decode", "equals a reference greedy decoder")
    assert points == 0, line
    assert (": `ys = torch.cat([ys, next_token[:, None]], dim=1)`), with ys (6, 1), next_token (1,); the call was "
            "greedy_decode(") in line, line
    assert line.endswith("Likely: out[-1] takes the last item of the batch (out is (6, 1, 7), dim 0 the batch of 6), "
                         "where the last position was meant: out[:, -1] keeps one row per sentence"), line

def _ngrams(tokens, n):
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def bleu_counts_matches_from_the_reference(hypotheses, references, max_n=4):
    """Each reference n-gram found in the hypothesis counts as often as the reference has it: no known mistake gives
    these numbers, so no cause may be named (the 'orders 1..max_n' hint was a wrong guess)."""
    matches, totals, hyp_len, ref_len = [0] * max_n, [0] * max_n, 0, 0
    for h, r in zip(hypotheses, references):
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, max_n + 1):
            hc, rc = _ngrams(h, n), _ngrams(r, n)
            matches[n - 1] += sum(c for g, c in rc.items() if g in hc)
            totals[n - 1] += max(len(h) - n + 1, 0)
    if min(matches) == 0 or min(totals) == 0:
        return 0.0
    bp = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n)


def test_an_unrecognized_bleu_mistake_gets_no_likely():
    points, text = grade(bleu_counts_matches_from_the_reference, "corpus_bleu")
    assert points == max_points("corpus_bleu") - 2, text
    assert "Likely:" not in text, text
    assert ("corpus_bleu(12 sentences, max_n=2); expected 55.8300 (sacrebleu: n-grams of orders 1..max_n, and the mean "
            "of their log precisions over max_n orders); got ") in text, text


def test_an_answer_going_past_eos_on_its_own_is_not_told_about_batches():
    """The naive beam decodes one source at a time and extends every hypothesis past <eos>: its other lines say a
    finished hypothesis is never extended, and the 'first <eos>' line used to explain it by the sources of a batch
    (a finished source fed tokens while the others go on), which the decoder's own answers, source by source,
    refute. That explanation is kept for a decoder whose sources alone end right (test_an_answer_not_cut_at_its_first_
    eos_is_named)."""
    points, text = grade(beam_extend_keep_eos, "beam_search")
    assert points == 0, text
    [line] = [line for line in text.splitlines() if line.startswith("✗ beam_size=1 with alpha=0 equals greedy")]
    assert line.endswith("Likely: the answer goes on after its first <eos> (2), which is where it ends: each source "
                         "decoded on its own does not end right either, so a finished sequence was extended past its "
                         "<eos> (or the answer cut at its last <eos>, not its first); cut each answer before its first "
                         "<eos>, row[:row.index(eos_id)]"), line
    assert "in a batch" not in text, text
