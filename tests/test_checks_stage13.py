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
from autograder import REGISTRY
from solutions import BOS, EOS, PAD
from tests.grading import assert_caught, assert_full_marks, grade

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
                limit = {"current": norm(top, t), "raw": top, None: norm(top, max_len)}[bound]
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
     ["decoded alone", "until EVERY source has finished"]),
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
