"""Stage 13's checks: full marks for correct decoders, length penalties and BLEU however written (one source at a
time, batched, other masks and memory layouts); for each classic mistake, exactly the points it earns and the words
that name it (the reference and the stub: tests/test_registry.py)."""
import math
import time
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import solutions
from autograder import REGISTRY
from solutions import BOS, EOS, PAD
from tests.grading import (Mistake, assert_full_marks, assert_mistake, edit, grade_one, grade_one_across, mistakes,
                           run_silently)

GREEDY, LENGTH_PENALTY = solutions.greedy_decode, solutions.length_penalty
BEAM, CORPUS_BLEU = solutions.beam_search, solutions.corpus_bleu


def causal(t, n=1):
    i = torch.arange(t)  # (no .tril(): on a busy multi-core CPU its thread pool makes it take milliseconds)
    return (i[:, None] >= i[None, :]).expand(n, 1, t, t)


def lp(length, alpha):
    return ((5 + length) / 6) ** alpha


# ================================================================ greedy_decode
# ---------------------------------------------------------------- correct, written differently
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


def greedy_target_mask_pads_finished_rows(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Finished rows padded with <pad>, and the decoder given target_mask(ys): the rows still decoding
    see the causal mask, so this is correct too."""
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


def greedy_reads_out_features(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """Reads the vocabulary size from model.generator (an nn.Linear in a real model; it used to get 0/5: the
    checks' model had an nn.Identity there)."""
    V = model.generator.out_features
    assert model.generator.weight.shape[0] == V
    return solutions.greedy_decode(model, src, src_mask, max_len, bos_id, eos_id)


@pytest.mark.parametrize("fn", [greedy_one_at_a_time, greedy_batched_own_mask, greedy_target_mask_pads_finished_rows,
                                greedy_run_then_cut, greedy_2d_mask_tensor_answers, greedy_index_live_rows,
                                greedy_reencode_each_step, greedy_numpy, greedy_kwonly_float64, greedy_int32_live_rows,
                                greedy_recursive, greedy_list_of_tensors, greedy_reads_out_features])
def test_other_correct_greedy(fn):
    assert_full_marks(fn, "greedy_decode")


# ---------------------------------------------------------------- classic mistakes, one row each
_ANSWER = "row[: row.index(eos_id)] if eos_id in row else row"  # each answer cut before its first <eos>
_NO_EOS_FILL = ("next_tok = next_tok.masked_fill(finished, eos_id)", "pass")  # finished rows keep getting tokens
_STOP_AT_ANY = ("if finished.all():", "if finished.any():")


def _greedy_first(line):
    """The reference greedy decoder with `line` at the top of its body."""
    return edit(GREEDY, ("    _check_batch(src)\n", f"    _check_batch(src)\n    {line}\n"))


def _greedy_mask(new):
    return edit(GREEDY, ("causal_mask(ys.size(1), src.device)", new))


def greedy_calls_forward(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    model(src, src[:, :1], src_mask, None)


def greedy_takes_the_last_sentence(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """out[-1] (the last sentence of the batch) where out[:, -1] (the last position) was meant: an error in torch.cat."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        out = model.decode(ys, memory, src_mask, solutions.causal_mask(ys.size(1)))
        next_token = model.generator(out[-1]).argmax(-1)
        ys = torch.cat([ys, next_token[:, None]], dim=1)
    return [row[:row.index(eos_id)] if eos_id in row else row for row in ys[:, 1:].tolist()]


GREEDY_MISTAKES = [
    # the answers
    Mistake("does not stop at <eos>", edit(GREEDY, _NO_EOS_FILL, ("if finished.all():", "if False:"), (_ANSWER, "row")),
            0, "did not stop at <eos>"),
    Mistake("returns <bos>", edit(GREEDY, ("ys[:, 1:].tolist()", "ys.tolist()")), 0, "<bos> is in the output"),
    Mistake("returns the final <eos>", edit(GREEDY, ("row[: row.index(eos_id)]", "row[: row.index(eos_id) + 1]")), 0,
            "final <eos> is in the output"),
    Mistake("cut at its last <eos>, not its first",
            edit(GREEDY, _NO_EOS_FILL, (_ANSWER, "row[:-1] if row[-1] == eos_id else row")),
            1, "Likely: the answer goes on after its first <eos> (2), which is where it ends: in a batch a source that "
            "has finished keeps getting tokens while the others go on", not_says="disturb each other"),
    Mistake("<pad> returned after <eos>", edit(GREEDY, ("masked_fill(finished, eos_id)", "masked_fill(finished, 0)"),
                                               (_ANSWER, "[t for t in row if t != eos_id]")), 1, ("<pad>", "padding")),
    Mistake("a flat list for one source (used to get full marks)",
            edit(GREEDY, ("    return results\n", "    return results[0] if len(results) == 1 else results\n")), 4,
            ("flat list", "batch of one")),
    Mistake("max_len + 1 tokens", edit(GREEDY, ("range(max_len)", "range(max_len + 1)")), 3, "max_len + 1 tokens"),
    Mistake("max_len - 1 tokens", edit(GREEDY, ("range(max_len)", "range(max_len - 1)")), 3, "max_len - 1 tokens"),
    Mistake("stops when one source ends", edit(GREEDY, _STOP_AT_ANY), 1,
            ("as soon as ONE source produced <eos>", "until EVERY source has finished")),
    Mistake("stops when one source ends: named alone", edit(GREEDY, _STOP_AT_ANY), 0,  # not beam search's causes
            "Likely: the loop stopped as soon as ONE source", not_says="repeat_interleave", title="stops each source"),
    # the model
    Mistake("the first position's logits", edit(GREEDY, ("out[:, -1]", "out[:, 0]")), 0, "first position"),
    Mistake("model.generator not applied (used to get full marks)",
            edit(GREEDY, ("model.generator(out[:, -1])", "out[:, -1]")), 0, "model.generator was not applied"),
    Mistake("model.forward called", greedy_calls_forward, 0, "model.forward"),
    Mistake("float prefixes (used to get full marks)", edit(GREEDY, ("dtype=torch.long", "dtype=torch.float")), 0,
            ("torch.long", "float")),
    Mistake("out[-1] for out[:, -1]: where, with what and why", greedy_takes_the_last_sentence, 0, (
        "your code raised RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 6 but got "
        "size 1 for tensor number 1 in the list. (in greedy_takes_the_last_sentence, line ",
        ": `ys = torch.cat([ys, next_token[:, None]], dim=1)`), with ys (6, 1), next_token (1,); the call was "
        "greedy_takes_the_last_sentence(src (6, 3), src_mask (6, 1, 1, 3), max_len=6, bos_id=1, eos_id=2). "
        "Likely: out[-1] takes the last item of the batch (out is (6, 1, 7), dim 0 the batch of 6), where the last "
        "position was meant: out[:, -1] keeps one row per sentence"), title="equals a reference greedy decoder"),
    # the masks
    Mistake("no tgt_mask", _greedy_mask("None"), 4, "tgt_mask=None"),
    Mistake("an all-True tgt_mask", _greedy_mask("torch.ones(1, 1, ys.size(1), ys.size(1), dtype=torch.bool)"), 4,
            "tgt_mask with other values"),
    Mistake("an upper-triangular tgt_mask", _greedy_mask("causal_mask(ys.size(1), src.device).transpose(-1, -2)"), 4,
            "tgt_mask with other values"),
    Mistake("masks swapped in model.decode", edit(GREEDY, ("src_mask, causal_mask(ys.size(1), src.device)",
                                                           "causal_mask(ys.size(1), src.device), src_mask")), 4,
            "tgt_mask of shape"),
    Mistake("no src_mask", _greedy_first("src_mask = None"), 4, "src_mask=None"),
    Mistake("src_mask edited in place", _greedy_first("src_mask.fill_(True)  # 'the fake padding does not matter'"), 0,
            ("src_mask", "edited in place")),
    # the ids
    Mistake("bos_id ignored", _greedy_first("bos_id = BOS"), 4, "bos_id argument is ignored"),
]


@pytest.mark.parametrize("m", mistakes("greedy_decode", GREEDY_MISTAKES))
def test_greedy_mistakes(m):
    assert_mistake(m)


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


# ================================================================ length_penalty
def lp_exp_log(length, alpha):
    return math.exp(alpha * math.log((5 + length) / 6))


def lp_torch(length, alpha):
    return torch.tensor((5.0 + length) / 6.0, dtype=torch.float64).pow(alpha)


def lp_float32_tensor(length, alpha):
    return torch.tensor([(5 + length) / 6]).pow(alpha)[0]  # float32: about 1e-7 relative error


def lp_log1p(length, alpha):
    return math.exp(alpha * math.log1p((length - 1) / 6))


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


@pytest.mark.parametrize("fn", [lp_exp_log, lp_torch, lp_float32_tensor, lp_log1p, lp_numpy_one_element,
                                lp_numpy_power, lp_split_powers, lp_logs, lp_decimal, lp_tensor_arith])
def test_other_correct_length_penalty(fn):
    assert_full_marks(fn, "length_penalty")


def _lp_is(expr):
    return edit(LENGTH_PENALTY, ("return ((5 + length) / 6) ** alpha", f"return {expr}"))


LENGTH_PENALTY_MISTAKES = [
    Mistake("no exponent", _lp_is("(5 + length) / 6"), 0, "exponent is missing"),
    Mistake("(5 + length) ** alpha / 6", _lp_is("(5 + length) ** alpha / 6"), 1, "only the numerator"),
    Mistake("(5 + length) / 6 ** alpha", _lp_is("(5 + length) / 6 ** alpha"), 0, "only 6 is raised"),
    Mistake("5 + length / 6", _lp_is("(5 + length / 6) ** alpha"), 1, "precedence"),
    Mistake("length ** alpha", _lp_is("length ** alpha"), 2, "length ** alpha"),
    Mistake("divided by 5", _lp_is("((5 + length) / 5) ** alpha"), 1, "divided by 5"),
    Mistake("times alpha", _lp_is("(5 + length) / 6 * alpha"), 1, "multiplied by alpha"),
    Mistake("integer division", _lp_is("((5 + length) // 6) ** alpha"), 1, "integer division"),
    Mistake("length and alpha swapped", _lp_is("((5 + alpha) / 6) ** length"), 0, "swapped"),
    Mistake("alpha ignored", _lp_is("((5 + length) / 6) ** 0.6"), 0, "alpha argument"),
    Mistake("the log of the penalty", _lp_is("alpha * math.log((5 + length) / 6)"), 1, "logarithm"),
    Mistake("a string", _lp_is("str(((5 + length) / 6) ** alpha)"), 0, "expected a number"),
]


@pytest.mark.parametrize("m", mistakes("length_penalty", LENGTH_PENALTY_MISTAKES))
def test_length_penalty_mistakes(m):
    assert_mistake(m)


# ================================================================ beam_search
# ---------------------------------------------------------------- correct, written differently
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


# ---------------------------------------------------------------- beams with one classic mistake switched on
def beam_variant(stop_first=False, finished="aside", raw=False):
    """A one-source-at-a-time beam with one classic mistake switched on: stop_first (at the first finished
    hypothesis), finished="slots" (finished ones keep their beam slots) or "extend" (extended past <eos>), raw (raw
    logits as scores)."""
    def beam_search(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
        answers = []
        for i in range(src.size(0)):
            s, m = src[i:i + 1], src_mask[i:i + 1]
            memory = model.encode(s, m)
            beams, done = [([bos_id], 0.0)], []
            for t in range(1, max_len + 1):
                cands = []
                for ids, score in beams:
                    if finished == "slots" and ids[-1] == eos_id:
                        cands.append((score, ids))
                        continue
                    z = model.generator(model.decode(torch.tensor([ids]), memory, m, causal(t))[0, -1])
                    logp = z if raw else z.log_softmax(-1)
                    cands += [(score + v, ids + [tok]) for tok, v in enumerate(logp.tolist())]
                cands.sort(key=lambda c: -c[0])
                if finished in ("slots", "extend"):
                    beams = [(ids, score) for score, ids in cands[:beam_size]]
                    continue
                beams = []
                for score, ids in cands:
                    if ids[-1] == eos_id:
                        done.append((score / lp(t, alpha), ids[1:-1]))
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
                        done.append((score / lp(len(body) + 1, alpha), body))
                    else:
                        done.append((score / lp(len(body), alpha), body))
            elif not (stop_first and done):
                done += [(score / lp(len(ids) - 1, alpha), ids[1:]) for ids, score in beams]
            answers.append(max(done, key=lambda d: d[0])[1])
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
                    cands = cands[:K]
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


@pytest.mark.parametrize("fn", [beam_one_at_a_time, beam_per_source_batched, beam_topk_live, beam_flat_padded,
                                beam_dicts_early_stop, beam_per_hypothesis_topk_heap, beam_normalized_each_step,
                                beam_numpy_scores, beam_batched_variable_rows, beam_objects_nlargest,
                                beam_banned_specials_tensor_answers, beam_lists(), beam_mistake()],
                         ids=lambda fn: fn.__qualname__.replace(".<locals>.beam_search", "()"))
def test_other_correct_beam(fn):
    """(beam_lists() and beam_mistake(): the beams the mistakes below are made from, with no mistake switched on.)"""
    assert_full_marks(fn, "beam_search")


def test_one_at_a_time_beam_is_fast_enough():
    """Every check stays well inside its time limit even for the slowest kind of correct beam search."""
    from autograder.core import run_check
    for c in REGISTRY["beam_search"]:
        start = time.perf_counter()
        points, line = run_check(c, beam_one_at_a_time)
        assert points == c.points, line
        assert time.perf_counter() - start < c.timeout / 2, f"{c.title}: {time.perf_counter() - start:.1f} s"


# ---------------------------------------------------------------- classic mistakes, one row each
def _beam_first(line):
    """The reference beam search with `line` at the top of its body."""
    return edit(BEAM, ("    _check_batch(src)\n", f"    _check_batch(src)\n    {line}\n"))


BEAM_MISTAKES = [
    # the scores and the length penalty
    Mistake("raw logits as scores", beam_variant(raw=True), 3, "raw logits"),
    Mistake("probabilities multiplied", beam_mistake(probs=True), 4, "probabilities multiplied"),
    Mistake("log p not accumulated", beam_lists(accumulate=False), 3, "not accumulated"),
    Mistake("no length penalty", _beam_first("length_penalty = lambda length, alpha: 1.0"), 4, "no length penalty"),
    Mistake("log p times the penalty", beam_mistake(penalty="mul"), 4, "multiplied by length_penalty"),
    Mistake("length ** alpha as the penalty", beam_mistake(penalty="power"), 4, "length ** alpha"),
    Mistake("alpha ignored", beam_mistake(fixed_alpha=0.6), 5, "alpha argument is ignored"),
    Mistake("beam_size ignored (4 kept)", edit(BEAM, ("device, K = src.device, beam_size", "device, K = src.device, 4")),
            7, "Likely: the beam_size argument is ignored"),
    Mistake("<eos> left out of the length", edit(BEAM, ("top_val[s, j].item() / length_penalty(t, alpha)",
                                                      "top_val[s, j].item() / length_penalty(t - 1, alpha)")),
            5, "left out <eos>"),
    Mistake("<bos> counted in the length", beam_lists(bos_in_length=True), 7, "counted <bos>"),
    Mistake("open ones at max_len not normalized", beam_mistake(open_norm=False), 6, "raw log p"),
    # the beam: finished hypotheses set aside, beam_size open ones go on
    Mistake("beam_size ignored", edit(BEAM, ("device, K = src.device, beam_size", "device, K = src.device, 4")), 7),
    Mistake("beam_size=1 run as greedy (used to get full marks: beam 1 was run with alpha 0 only)",
            _beam_first("if beam_size == 1:\n"
                        "        return greedy_decode(model, src, src_mask, max_len, bos_id, eos_id)"),
            7, "beam_size=1 was run as greedy decoding"),
    Mistake("beam_size copies of <bos> at log p 0", beam_mistake(copies=True), 4, "copies of <bos>"),
    Mistake("copies of <bos>: named first (was 'the penalty is length ** alpha')", beam_mistake(copies=True), 0,
            "Likely: the search started with beam_size copies", title="equals a reference beam search"),
    Mistake("finished hypotheses keep beam slots", beam_variant(finished="slots"), 5, "kept their beam slots"),
    Mistake("finished hypotheses extended past <eos>", beam_variant(finished="extend"), 3, "extended past <eos>"),
    Mistake("naive beam returning tokens after <eos>", beam_extend_keep_eos, 0, "tokens after <eos>",
            not_says="in a batch"),  # each source alone ends wrong too: not the batch's fault
    Mistake("topk(K) per hypothesis", beam_mistake(per_hyp_k=True), 6, "the beam shrank"),
    Mistake("topk(K), <eos> ones then removed", beam_mistake(walk="step"), 6, "the beam shrank"),
    Mistake("topk(K), <eos> ones then removed: named first", beam_mistake(walk="step"), 0,  # before no penalty, ...
            "Likely: the beam shrank", title="sets finished hypotheses aside"),
    Mistake("the width drops per finished hypothesis", beam_mistake(walk="forever"), 5, "dropped by one"),
    Mistake("every <eos> extension finished", beam_mistake(all_eos=True), 7, "every <eos> extension"),
    # the stop
    Mistake("stops at the first finished hypothesis", beam_variant(stop_first=True), 2,
            "stopped at the first finished"),
    Mistake("stops once beam_size have finished", beam_mistake(stop_at_k=True), 4,
            "once beam_size hypotheses had finished"),
    Mistake("bound with the current length", beam_lists(bound="current"), 4, "stopped too early"),
    Mistake("bound with the current length: named first (was 'no length penalty')", beam_lists(bound="current"), 0,
            "Likely: the search stopped too early", title="divides by length_penalty"),
    Mistake("bound with the penalty of length t + 1", beam_lists(bound="next"), 6, ("stopped too early", "t + 1")),
    Mistake("bound without the penalty", beam_lists(bound="raw"), 4, "stopped too early"),
    # lengths and ids
    Mistake("max_len + 1 tokens", _beam_first("max_len += 1"), 5, "searched max_len + 1 tokens"),
    Mistake("max_len - 1 tokens", beam_lists(steps=-1), 4, "max_len - 1 tokens"),
    Mistake("returns <bos>", edit(BEAM, ("return best_ids", "return [[bos_id] + ids for ids in best_ids]")), 0,
            "<bos>"),
    Mistake("eos_id ignored", _beam_first("eos_id = EOS"), 7, "eos_id argument is ignored"),
    # the model and the masks
    Mistake("the first position's logits", beam_mistake(position=0), 1, "first position"),
    Mistake("model.generator not applied (used to get full marks)",
            edit(BEAM, ("model.generator(out[:, -1]).float()", "out[:, -1].float()")), 0,
            "model.generator was not applied"),
    Mistake("no tgt_mask", edit(BEAM, ("causal_mask(t, device)", "None")), 7, "tgt_mask=None"),
    Mistake("memory tiled, rows grouped by source", beam_lists(memory_tiled=True), 4,
            ("decoded alone", "repeat_interleave")),
]


@pytest.mark.parametrize("m", mistakes("beam_search", BEAM_MISTAKES))
def test_beam_mistakes(m):
    assert_mistake(m)


def test_beam_names_at_most_three_causes():
    """One wrong answer used to come with about 15 'or ...' alternatives."""
    points, line = grade_one(beam_lists(bound="current"), "beam_search", "sets finished hypotheses aside")
    hint = line.split("Likely: ", 1)[1]
    assert points == 0 and hint.startswith("the search stopped too early") and hint.count("; or ") <= 2, line


@pytest.mark.parametrize("name,fn,title,ending", [
    ("greedy_decode", edit(GREEDY, ("model.encode(src, src_mask)", "model.encode(src, None)")), "passes model.decode",
     "the masks given to the model. Likely: model.encode got src_mask=None, expected the src_mask you were given, "
     "(B, 1, 1, Ls) (the rows of the sources encoded): the encoder's self-attention must not see the padding"),
    ("beam_search", edit(BEAM, ("model.encode(src, src_mask)", "model.encode(src, torch.ones_like(src_mask))")),
     "passes model.decode", "the masks given to the model. Likely: model.encode got a src_mask with other values than "
     "the padding of src, expected the src_mask you were given, (B, 1, 1, Ls) (the rows of the sources encoded): the "
     "encoder's self-attention must not see the padding"),
    ("beam_search", beam_extend_keep_eos, "beam_size=1 with alpha=0 equals greedy", "Likely: the answer goes on after "
     "its first <eos> (2), which is where it ends: each source decoded on its own does not end right either, so a "
     "finished sequence was extended past its <eos> (or the answer cut at its last <eos>, not its first); cut each "
     "answer before its first <eos>, row[:row.index(eos_id)]"),
], ids=["greedy: encoded without src_mask", "beam: encoded with an all-True mask",
        "naive beam: its answers go past <eos> on their own (not told about batches)"])
def test_the_likely_cause_ends_the_line(name, fn, title, ending):
    """The line says what is wrong and the likeliest cause, and nothing after it."""
    points, line = grade_one(fn, name, title)
    assert points == 0 and line.endswith(ending), line


# ================================================================ corpus_bleu
# ---------------------------------------------------------------- correct, written differently
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


@pytest.mark.parametrize("fn", [bleu_counter, bleu_sacrebleu, bleu_string_dicts, bleu_fractions_tensor, bleu_numpy,
                                bleu_log10_weights, bleu_torch_stats, bleu_fraction_product, bleu_sentence_stats_first,
                                bleu_sacrebleu_effective_order_off])
def test_other_correct_bleu(fn):
    assert_full_marks(fn, "corpus_bleu")


# ---------------------------------------------------------------- classic mistakes, one row each
_COUNTS = "h, r = _ngrams(hyp, n), _ngrams(ref, n)"
_CLIPPED = "min(c, r[g]) for g, c in h.items()"
_TOTALS = "totals[n - 1] += max(len(hyp) - n + 1, 0)"
_MEAN = "log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n"
_BREVITY = "brevity = min(0.0, 1 - ref_len / hyp_len)"
_SCORE = "return 100 * math.exp(brevity + log_precision)"
_ZERO = "    if hyp_len == 0 or min(matches) == 0:\n"


def _bleu(*changes):
    return edit(CORPUS_BLEU, *changes)


def _bleu_first(line):
    """The reference corpus BLEU with `line` at the top of its body (after the check of the lengths)."""
    return _bleu(("    ### BEGIN SOLUTION\n", f"    {line}\n"))


def bleu_sentence_average(hypotheses, references, max_n=4):
    return sum(solutions.corpus_bleu([h], [r], max_n) for h, r in zip(hypotheses, references)) / len(hypotheses)


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


BLEU_MISTAKES = [
    # the n-gram counts
    Mistake("no clipping", _bleu((_CLIPPED, "(c if g in r else 0) for g, c in h.items()")), 3, "not clipped"),
    Mistake("distinct n-grams counted once", _bleu((_COUNTS, "h, r = Counter(set(_ngrams(hyp, n))), "
                                                             "Counter(set(_ngrams(ref, n)))"),
                                                   (_TOTALS, "totals[n - 1] += len(h)")), 3, "counted once (a set)"),
    Mistake("a recall", _bleu((_TOTALS, "totals[n - 1] += max(len(ref) - n + 1, 0)")), 2, "REFERENCE n-grams"),
    Mistake("hypotheses and references swapped", _bleu_first("hypotheses, references = references, hypotheses"), 2,
            "swapped"),
    Mistake("matches counted from the reference: no cause guessed (not 'orders 1..max_n')",
            _bleu((_CLIPPED, "c for g, c in r.items() if g in h")), 5,
            "corpus_bleu(12 sentences, max_n=2); expected 55.8300 (sacrebleu: n-grams of orders 1..max_n, and the "
            "mean of their log precisions over max_n orders); got ", not_says="Likely:"),
    # the orders
    Mistake("max_n ignored", _bleu_first("max_n = 4"), 5, "max_n argument is ignored"),
    Mistake("range(1, max_n)", bleu_orders_below_max_n, 1, "n = max_n is missing"),
    Mistake("orders 0..max_n - 1", _bleu((_COUNTS, "h, r = _ngrams(hyp, n - 1), _ngrams(ref, n - 1)"),
                                         (_TOTALS, "totals[n - 1] += sum(h.values())")), 1, "range(max_n)"),
    Mistake("orders without n-grams skipped", bleu_skips_orders_without_ngrams, 6, "left out of the mean"),
    Mistake("weights fixed at 1/4", _bleu((_MEAN, _MEAN.replace("/ max_n", "/ 4"))), 5, "fixed at 1/4"),
    # the mean of the log precisions
    Mistake("arithmetic mean", _bleu((_MEAN, "log_precision = math.log(sum(m / t for m, t in zip(matches, totals)) "
                                             "/ max_n)")), 2, "arithmetic mean"),
    Mistake("exp missing", _bleu((_SCORE, "return 100 * math.exp(brevity) * log_precision")), 1, "exp is missing"),
    Mistake("add-one smoothing", _bleu((_ZERO, "    matches = [m + (n > 0) for n, m in enumerate(matches)]\n"
                                               "    totals = [t + (n > 0) for n, t in enumerate(totals)]\n" + _ZERO)),
            1, "smoothed"),
    Mistake("log(0) reached", _bleu((_ZERO + "        return 0.0\n", "")), 6, ("math.log(0)", "return 0.0")),
    # the brevity penalty
    Mistake("no brevity penalty", _bleu((_BREVITY, "brevity = 0.0")), 3, "no brevity penalty"),
    Mistake("BP = hyp_len / ref_len", _bleu((_BREVITY, "brevity = math.log(min(1.0, hyp_len / ref_len))")), 3,
            "hyp_len / ref_len"),
    Mistake("BP not capped at 1", _bleu((_BREVITY, "brevity = 1 - ref_len / hyp_len")), 5, "not capped at 1"),
    Mistake("brevity penalty per sentence", _bleu((_BREVITY, "brevity = math.log(sum(min(1.0, math.exp(1 - len(r) / "
                                                             "len(h))) for h, r in zip(hypotheses, references)) "
                                                             "/ len(hypotheses))")), 3, "per sentence"),
    # the corpus
    Mistake("average of sentence scores", bleu_sentence_average, 2, "average of sentence scores"),
    Mistake("the corpus joined into one sentence", _bleu_first("hypotheses, references = [[w for h in hypotheses for w "
                                                               "in h]], [[w for r in references for w in r]]"), 2,
            "one long sentence"),
    Mistake("the token lists edited in place",
            _bleu_first("for h in hypotheses + references:\n        h.append('</s>')"), 0, "edited in place"),
    # the result
    Mistake("0..1 scale", _bleu((_SCORE, "return math.exp(brevity + log_precision)")), 1, "0..1 scale"),
    Mistake("a string", lambda h, r, max_n=4: str(CORPUS_BLEU(h, r, max_n)), 0, "expected a number"),
]


@pytest.mark.parametrize("m", mistakes("corpus_bleu", BLEU_MISTAKES))
def test_bleu_mistakes(m):
    assert_mistake(m)


# ================================================================ the checks themselves
def test_check_runs_write_nothing_to_stderr():
    """check() on correct and wrong decoders, in a fresh interpreter, leaves stderr empty."""
    code = ("import torch, solutions\nfrom autograder import check\nfrom tests import test_checks_stage13 as t\n"
            "wrong = {m.name: m.impl for m in t.GREEDY_MISTAKES + t.BLEU_MISTAKES}\n"
            "for fn, name in [(wrong['float prefixes (used to get full marks)'], 'greedy_decode'), "
            "(t.beam_mistake(copies=True), 'beam_search'), (t.beam_normalized_each_step, 'beam_search'), "
            "(t.lp_numpy_one_element, 'length_penalty'), (wrong['exp missing'], 'corpus_bleu')]:\n"
            "    fn.__name__ = name\n    check(fn)\n")
    run_silently(code)
