"""Stage 13's checks: full marks for correct decoders, length penalties and BLEU however written (one source
at a time, batched, other masks and memory layouts); for each classic mistake, exactly the points it earns and
the words that name it (the reference and the stub: tests/test_registry.py)."""
import math
import time
from decimal import Decimal

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import solutions
from autograder import REGISTRY
from solutions import BOS, EOS, PAD
from tests.grading import (
    Mistake,
    assert_full_marks,
    assert_mistake,
    edit,
    grade_one,
    grade_one_across,
    mistakes,
    run_silently,
)

GREEDY, LENGTH_PENALTY = solutions.greedy_decode, solutions.length_penalty
BEAM, CORPUS_BLEU = solutions.beam_search, solutions.corpus_bleu


def causal(t, n=1):
    i = torch.arange(t)  # (no .tril(): on a busy multi-core CPU its thread pool makes it take milliseconds)
    return (i[:, None] >= i[None, :]).expand(n, 1, t, t)


def lp(length, alpha):
    return ((5 + length) / 6) ** alpha


# ================================================================ greedy_decode
# ---------------------------------------------------------------- correct, written differently
def _top(*lines):
    """A change for edit(): `lines` at the top of a reference's solution (where its ### BEGIN SOLUTION is)."""
    return "    ### BEGIN SOLUTION\n", "".join(f"    {line}\n" for line in lines)


_ANSWER = "row[: row.index(eos_id)] if eos_id in row else row"  # each answer cut before its first <eos>
_APPEND = f"results.append({_ANSWER})"
_CUT = "row.index(eos_id) if eos_id in row else len(row)"  # the length of that answer
_MASK = "causal_mask(ys.size(1), src.device)"
# finished rows keep getting tokens
_NO_EOS_FILL = ("next_tok = next_tok.masked_fill(finished, eos_id)", "pass")
_NO_STOP = ("        if finished.all():\n            break\n", "")  # max_len steps for every row
_STOP_AT_ANY = ("if finished.all():", "if finished.any():")


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
        logits = model.generator(model.decode(ys, memory[alive], src_mask[alive],
                                              causal(t, len(alive)))[:, -1])
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


@torch.no_grad()
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


GREEDY_STYLES = {
    "greedy_one_at_a_time": greedy_one_at_a_time,
    "greedy_batched_own_mask": greedy_batched_own_mask,
    # finished rows padded with <pad>, the decoder given target_mask(ys): the rows still decoding see the
    # causal mask
    "greedy_target_mask_pads_finished_rows": edit(GREEDY, _top("from solutions import PAD, target_mask"),
                                                  (_MASK, "target_mask(ys)"),
                                                  ("finished, eos_id)", "finished, PAD)"),
                                                  (_ANSWER, "[t for t in row if t not in (eos_id, PAD)]")),
    # never stops early: max_len steps for every row, then each row cut at its first <eos>
    "greedy_run_then_cut": edit(GREEDY, _NO_EOS_FILL, _NO_STOP),
    # a 2-D (t, t) causal mask, tensors returned (views of ys)
    "greedy_2d_mask_tensor_answers": edit(GREEDY, (_MASK, "torch.arange(ys.size(1)) <= "
                                                          "torch.arange(ys.size(1))[:, None]"),
                                          (_APPEND, f"results.append(ys[len(results), 1:1 + ({_CUT})])")),
    # only the live rows go to the decoder (index_select on memory and src_mask); answers as tuples
    "greedy_index_live_rows": edit(greedy_batched_own_mask,
                                   ("return answers", "return [tuple(a) for a in answers]"),
                                   ("memory[alive], src_mask[alive]", "memory.index_select(0, "
                                                                      "torch.tensor(alive)), "
                                                                      "src_mask.index_select(0, "
                                                                      "torch.tensor(alive))")),
    # one source at a time, the source re-encoded at every step, LongTensor prefixes
    "greedy_reencode_each_step": edit(greedy_one_at_a_time,
                                      ("torch.tensor([ids])", "torch.LongTensor([ids])"),
                                      ("t = len(ids)", "t, memory = len(ids), model.encode(s, m)")),
    # the prefixes kept as a numpy array, numpy's argmax, answers as lists of numpy integers
    "greedy_numpy": edit(
        GREEDY, _top("import numpy as np"),
                         ("torch.cat([ys, next_tok[:, None]], dim=1)", "np.concatenate([ys, "
                                                                                        "next_tok[:, None]], "
                                                                                        "axis=1)"),
        ("torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)",
         "np.full((src.shape[0], 1), bos_id, dtype=np.int64)"),
        ("torch.zeros(src.size(0), dtype=torch.bool, device=src.device)",
         "np.zeros(src.shape[0], dtype=bool)"),
        (f"ys, memory, src_mask, {_MASK}", "torch.from_numpy(ys), memory, src_mask, torch.from_numpy(np.tril("
                                          "np.ones((ys.shape[1], ys.shape[1]), dtype=bool)))[None, None]"),
        ("model.generator(out[:, -1]).argmax(dim=-1)", "np.argmax(model.generator(out[:, -1]).numpy(), "
                                                       "axis=-1)"),
        ("next_tok.masked_fill(finished, eos_id)", "np.where(finished, eos_id, next_tok)"),
        (f"for row in ys[:, 1:].tolist():\n        {_APPEND}", "for row in ys[:, 1:]:\n        hits = "
                                                               "np.nonzero(row == eos_id)[0]\n        "
                                                               "results.append(list(row[: hits[0]] if "
                                                               "len(hits) else row))")),
    # model.eval() and the mode restored, keyword-only extras, the parameters' device, log_softmax in float64,
    # a mask from triu, takewhile
    "greedy_kwonly_float64": edit(
        GREEDY, _top("import itertools", "was = model.training", "model.eval()",
                     "device = device or next(model.parameters()).device"),
        ("    return results\n", "    model.train(was)  # the caller's mode back\n    return results\n"),
        ("eos_id: int = EOS)", "eos_id: int = EOS, *, device=None, scores=False)"),
        (_MASK, "~torch.triu(torch.ones(ys.size(1), ys.size(1), dtype=torch.bool), diagonal=1)"),
        ("out[:, -1]).argmax(dim=-1)", "out[:, -1]).double().log_softmax(-1).max(-1)[1]"),
        (_APPEND, "results.append(list(itertools.takewhile(lambda x: x != eos_id, row)))"),
        ("return results\n", "return (results, None) if scores else results\n")),
    # IntTensor prefixes (nn.Embedding takes int32 too), finished rows dropped
    "greedy_int32_live_rows": edit(greedy_batched_own_mask, ("nxt[:, None]", "nxt.int()[:, None]"),
                                   ("torch.full((B, 1), bos_id)", "torch.full((B, 1), bos_id, "
                                                                  "dtype=torch.int32)")),
    "greedy_recursive": greedy_recursive,
    # max_len steps for every row (finished rows keep receiving <eos>), src_mask expanded to (B, 1, t, Ls),
    # LongTensors
    "greedy_list_of_tensors": edit(GREEDY, _NO_STOP,
                                   (f"src_mask, {_MASK}", f"src_mask.expand(-1, 1, ys.size(1), -1), "
                                                                          f"{_MASK}"),
                                   (_APPEND, f"results.append(ys[len(results), 1:1 + ({_CUT})].clone())")),
    # reads the vocabulary size from model.generator (an nn.Linear in a real model; it used to get 0/5: the
    # checks' model had an nn.Identity there)
    "greedy_reads_out_features": edit(GREEDY, _top("V = model.generator.out_features",
                                                   "assert model.generator.weight.shape[0] == V")),
}


# ---------------------------------------------------------------- classic mistakes, one row each
def greedy_takes_the_last_sentence(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
    """out[-1] (the last sentence of the batch) where out[:, -1] (the last position) was meant: an error in
    torch.cat."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        out = model.decode(ys, memory, src_mask, solutions.causal_mask(ys.size(1)))
        next_token = model.generator(out[-1]).argmax(-1)
        ys = torch.cat([ys, next_token[:, None]], dim=1)
    return [row[:row.index(eos_id)] if eos_id in row else row for row in ys[:, 1:].tolist()]


GREEDY_MISTAKES = [
    # the contract's side effects: the caller's model keeps its mode (the checks never looked)
    Mistake("leaves the model in eval mode", edit(GREEDY, _top("model.eval()")), 4,
            ("given in train mode", "switched to eval mode", "model.train(was)")),
    # the answers
    Mistake("does not stop at <eos>",
            edit(GREEDY, _NO_EOS_FILL, ("if finished.all():", "if False:"), (_ANSWER, "row")),
            0, "did not stop at <eos>"),
    Mistake("returns <bos>", edit(GREEDY, ("ys[:, 1:].tolist()", "ys.tolist()")), 0,
            "<bos> is in the output"),
    Mistake("returns the final <eos>",
            edit(GREEDY, ("row[: row.index(eos_id)]", "row[: row.index(eos_id) + 1]")), 0,
            "final <eos> is in the output"),
    # (row[-1] also fails on the empty rows of max_len=0: it used to get 1)
    Mistake("cut at its last <eos>, not its first",
            edit(GREEDY, _NO_EOS_FILL, (_ANSWER, "row[:-1] if row[-1] == eos_id else row")),
            0, "Likely: the answer goes on after its first <eos> (2), which is where it ends: in a batch a "
               "source that "
            "has finished keeps getting tokens while the others go on", not_says="disturb each other"),
    Mistake("<pad> returned after <eos>",
            edit(GREEDY, ("masked_fill(finished, eos_id)", "masked_fill(finished, 0)"),
                                               (_ANSWER, "[t for t in row if t != eos_id]")), 1,
            ("<pad>", "padding")),
    Mistake("a flat list for one source (used to get full marks)",
            edit(GREEDY, ("    return results\n",
                          "    return results[0] if len(results) == 1 else results\n")), 4,
            ("flat list", "batch of one")),
    Mistake("max_len + 1 tokens", edit(GREEDY, ("range(max_len)", "range(max_len + 1)")), 3,
            "max_len + 1 tokens"),
    Mistake("max_len - 1 tokens", edit(GREEDY, ("range(max_len)", "range(max_len - 1)")), 3,
            "max_len - 1 tokens"),
    # at least one step (a do-while loop): one token for max_len=0 (it used to get full marks)
    Mistake("a token for max_len=0", edit(GREEDY, ("range(max_len)", "range(max(max_len, 1))")), 4,
            "max_len=0 allows no token at all"),
    Mistake("stops when one source ends", edit(GREEDY, _STOP_AT_ANY), 1,
            ("as soon as ONE source produced <eos>", "until EVERY source has finished")),
    # not beam search's causes
    Mistake("stops when one source ends: named alone", edit(GREEDY, _STOP_AT_ANY), 0,
            "Likely: the loop stopped as soon as ONE source", not_says="repeat_interleave",
            title="stops each source"),
    # the model
    Mistake("the first position's logits", edit(GREEDY, ("out[:, -1]", "out[:, 0]")), 0, "first position"),
    Mistake("model.generator not applied (used to get full marks)",
            edit(GREEDY, ("model.generator(out[:, -1])", "out[:, -1]")), 0,
            "model.generator was not applied"),
    Mistake("log_softmax over the batch (dim=0)", edit(GREEDY, ("model.generator(out[:, -1]).argmax(",
                                                             "model.generator(out[:, "
                                                             "-1]).log_softmax(dim=0).argmax(")),
            2, "Likely: (log_)softmax over the batch axis (dim=0)"),
    Mistake("model.forward called", lambda model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS: model(
        src, src[:, :1], src_mask, None), 0, "model.forward"),
    Mistake("float prefixes (used to get full marks)",
            edit(GREEDY, ("dtype=torch.long", "dtype=torch.float")), 0,
            ("torch.long", "float")),
    Mistake("out[-1] for out[:, -1]: where, with what and why", greedy_takes_the_last_sentence, 0, (
        "your code raised RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 6 "
        "but got size 1 for tensor number 1 in the list. (in greedy_takes_the_last_sentence, line ",
        ": `ys = torch.cat([ys, next_token[:, None]], dim=1)`), with ys (6, 1), next_token (1,); the call "
        "was greedy_takes_the_last_sentence(src (6, 3), src_mask (6, 1, 1, 3), max_len=6, bos_id=1, "
        "eos_id=2). Likely: out[-1] takes the last item of the batch (out is (6, 1, 7), dim 0 the batch of "
        "6), where the last position was meant: out[:, -1] keeps one row per sentence"),
            title="equals a reference greedy decoder"),
    # the masks
    Mistake("no tgt_mask", edit(GREEDY, (_MASK, "None")), 4, "tgt_mask=None"),
    Mistake("an all-True tgt_mask", edit(GREEDY, (_MASK, "torch.ones(1, 1, ys.size(1), ys.size(1), "
                                                         "dtype=torch.bool)")),
            4, "tgt_mask with other values"),
    Mistake("an upper-triangular tgt_mask", edit(GREEDY, (_MASK, f"{_MASK}.transpose(-1, -2)")), 4,
            "tgt_mask with other values"),
    Mistake("masks swapped in model.decode", edit(GREEDY, (f"src_mask, {_MASK}", f"{_MASK}, src_mask")), 4,
            "tgt_mask of shape"),
    Mistake("no src_mask", edit(GREEDY, _top("src_mask = None")), 4, "src_mask=None"),
    Mistake("src_mask edited in place",
            edit(GREEDY, _top("src_mask.fill_(True)  # 'the fake padding does not matter'")), 0,
            ("src_mask", "edited in place")),
    # the ids
    Mistake("bos_id ignored", edit(GREEDY, _top("bos_id = BOS")), 4, "bos_id argument is ignored"),
    Mistake("eos_id ignored", edit(GREEDY, _top("eos_id = EOS")), 4, "eos_id argument is ignored"),
    # a blind review's find: a batch's hint ('sources disturb each other') for <eos> filtered out, not cut at
    Mistake("finished rows go on, and <eos> tokens are filtered out instead of a cut",
            edit(GREEDY, ("next_tok = next_tok.masked_fill(finished, eos_id)", "pass"),
                 (_ANSWER, "[t for t in row if t != eos_id]")),
            1, "the <eos> tokens were removed (t != eos_id)", not_says="disturb each other"),
    # a blind review's find: both ignored got only the generic recipe
    Mistake("bos_id and eos_id both ignored", edit(GREEDY, _top("bos_id, eos_id = BOS, EOS")), 4,
            "bos_id and eos_id arguments are both ignored"),
]


def test_an_error_raised_in_the_kernel_gets_the_same_likely():
    """Graded by the grade command, the same mistake raises in the notebook's kernel: the kernel sends the
    shapes of its failing line's tensors and of out (indexed out[-1]) with the error, and the message gives
    the same Likely."""
    def greedy_decode(model, src, src_mask, max_len, bos_id=BOS, eos_id=EOS):
        return greedy_takes_the_last_sentence(model, src, src_mask, max_len, bos_id, eos_id)
    points, line = grade_one_across(greedy_decode, "greedy_decode", "equals a reference greedy decoder")
    assert points == 0, line
    assert (": `ys = torch.cat([ys, next_token[:, None]], dim=1)`), with ys (6, 1), next_token (1,); the "
            "call was greedy_decode(") in line, line
    assert line.endswith("Likely: out[-1] takes the last item of the batch (out is (6, 1, 7), dim 0 the "
                         "batch of 6), where the last position was meant: out[:, -1] keeps one row per "
                         "sentence"), line


# ================================================================ length_penalty
LP_STYLES = {
    "lp_exp_log": lambda length, alpha: math.exp(alpha * math.log((5 + length) / 6)),
    "lp_torch": lambda length, alpha: torch.tensor((5.0 + length) / 6.0, dtype=torch.float64).pow(alpha),
    # ~1e-7 relative error
    "lp_float32_tensor": lambda length, alpha: torch.tensor([(5 + length) / 6]).pow(alpha)[0],
    "lp_log1p": lambda length, alpha: math.exp(alpha * math.log1p((length - 1) / 6)),
    # a one-element numpy array: a number, as a one-element tensor is (it used to get 0/3)
    "lp_numpy_one_element": lambda length, alpha: np.array([(5 + length) / 6.0]) ** alpha,
    "lp_numpy_power": lambda length, alpha: np.power((5 + length) / 6, alpha),
    "lp_split_powers": lambda length, alpha: pow(5 + length, alpha) * pow(6, -alpha),
    "lp_logs": lambda length, alpha: math.exp(alpha * (math.log(5 + length) - math.log(6))),
    "lp_decimal": lambda length, alpha: float((Decimal(5 + length) / Decimal(6)) ** Decimal(str(alpha))),
    "lp_tensor_arith": lambda length,
             alpha=0.6: (torch.as_tensor(length, dtype=torch.float32) + 5).div(6).pow(alpha),
}


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


# ================================================================ beam_search
# ---------------------------------------------------------------- correct, written differently
def per_source(search):
    """A beam search that answers each source on its own: search(model, memory, mask, max_len, K, alpha,
    bos_id, eos_id) with that source's memory (1, Ls, d) and src_mask (1, 1, 1, Ls)."""
    def beam_search(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
        return [search(model, model.encode(src[i:i + 1], src_mask[i:i + 1]), src_mask[i:i + 1], max_len,
                       beam_size,
                       alpha, bos_id, eos_id) for i in range(src.size(0))]
    return beam_search


def beam_per_source_batched(model, memory, mask, max_len, K, alpha, bos_id, eos_id):
    """The hypotheses of one source in one decode call, a memory of one row broadcast over them, a (N, 1, t,
    t) mask; candidates ranked by normalized score (the same order: all have length t); no early stop."""
    ys, scores = torch.full((1, 1), bos_id), torch.zeros(1)
    best, best_ids = -math.inf, []
    for t in range(1, max_len + 1):
        logp = model.generator(model.decode(ys, memory, mask, causal(t, ys.size(0)))[:, -1]).log_softmax(-1)
        V = logp.size(-1)
        total = (scores[:, None] + logp).flatten() / lp(t, alpha)  # (n * V,)
        keep = []
        for j in total.argsort(descending=True).tolist():
            parent, tok = divmod(j, V)
            if tok == eos_id:
                if total[j].item() > best:
                    best, best_ids = total[j].item(), ys[parent, 1:].tolist()
            else:
                keep.append(j)
                if len(keep) == K:
                    break
        keep = torch.tensor(keep)
        ys, scores = torch.cat([ys[keep // V], (keep % V)[:, None]], 1), total[keep] * lp(t, alpha)
    j = int(scores.argmax())
    return ys[j, 1:].tolist() if scores[j].item() / lp(max_len, alpha) > best else best_ids


_REPEATED = "memory.repeat(len(keys), 1, 1), mask.repeat(len(keys), 1, 1, 1)"


def beam_dicts_early_stop(model, memory, mask, max_len, K, alpha, bos_id, eos_id):
    """Hypotheses as dict keys, finished ones in a dict, the contract's early stop (strict <)."""
    beams, finished = {(bos_id,): 0.0}, {}
    for t in range(1, max_len + 1):
        keys = list(beams)
        out = model.decode(torch.tensor(keys),
                           memory.repeat(len(keys), 1, 1), mask.repeat(len(keys), 1, 1, 1), causal(t))
        logp = F.log_softmax(model.generator(out[:, -1]), dim=-1).tolist()
        cand = {key + (tok,): beams[key] + v for key, row in zip(keys, logp) for tok, v in enumerate(row)}
        beams = {}
        for seq in sorted(cand, key=cand.get, reverse=True):
            if seq[-1] == eos_id:
                finished[seq[1:-1]] = cand[seq] / lp(t, alpha)
            else:
                beams[seq] = cand[seq]
                if len(beams) == K:
                    break
        if t == max_len:
            finished.update({seq[1:]: s / lp(max_len, alpha) for seq, s in beams.items()})
        elif finished and max(beams.values()) / lp(max_len, alpha) < max(finished.values()):
            break
    return list(max(finished, key=finished.get))


# ---------------------------------------------------------------- beams with one classic mistake switched on
def beam_lists(accumulate=True, bos_in_length=False, bound=None, steps=0, memory_tiled=False):
    """A batched beam (one decode call per step for all sources, B * K rows), with one mistake switched on.
    bound: "current" (open log p / penalty of its current length) or "raw" (open log p) for the early stop;
    memory_tiled: memory.repeat(K, 1, 1) while the rows are grouped by source (they need
    repeat_interleave)."""
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
                limit = {"current": norm(top, t), "next": norm(top, t + 1), "raw": top,
                         None: norm(top, max_len)}[bound]
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
                 position=-1, stop_at_k=False, all_eos=False, per_hyp_k=False, stop_first=False, raw=False,
                 one_by_one=False, bound=False, renorm=False):
    """A one-source-at-a-time beam with one classic mistake switched on. walk: "contract" (down the ranking
    until K are open), "step" (its top K, the <eos> ones then set aside), "forever" (the same, one slot fewer
    per finished one), "slots" (finished ones keep their beam slots), "extend" (the top K extended past <eos>,
    cut there at the end) or "naive" (the same, returned with <eos> and what follows). one_by_one: a decode
    call per hypothesis; bound: the contract's early stop (<=); renorm: the normalized scores divided by the
    penalty again at the end."""
    def beam_search(model, src, src_mask, max_len, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS):
        if fixed_alpha is not None:
            alpha = fixed_alpha

        def norm(s, n):
            if probs:
                s = math.exp(s)
            return {"div": s / lp(n, alpha), "mul": s * lp(n, alpha), "power": s / n ** alpha}[penalty]
        answers = []
        for i in range(src.size(0)):
            K, m = beam_size, src_mask[i:i + 1]
            memory = model.encode(src[i:i + 1], m)
            beams, done = [([bos_id], 0.0)] * (K if copies else 1), []
            for t in range(1, max_len + 1):
                # "slots": not extended
                live = [ids for ids, _ in beams if walk != "slots" or ids[-1] != eos_id]
                if one_by_one:
                    z = [model.generator(model.decode(torch.tensor([ids]), memory, m, causal(t))[0, position])
                         for ids in live]
                    logp = [z_ if raw else z_.log_softmax(-1) for z_ in z]
                else:
                    z = model.generator(model.decode(torch.tensor(live), memory.expand(len(live), -1, -1), m,
                                                     causal(t))[:, position])
                    logp = z if raw else z.log_softmax(-1)
                if per_hyp_k:  # topk(K) per hypothesis: an <eos> among them leaves too few open ones
                    vals, toks = logp.topk(K, dim=-1)
                    rows = iter([list(zip(ts, vs)) for vs, ts in zip(vals.tolist(), toks.tolist())])
                else:
                    rows = iter([list(enumerate(row.tolist())) for row in logp])
                cands = []
                for ids, s in beams:
                    if walk == "slots" and ids[-1] == eos_id:
                        cands.append((s, ids))
                    else:
                        cands += [(s + v, ids + [tok]) for tok, v in next(rows)]
                cands.sort(key=lambda c: -c[0])
                if walk in ("slots", "extend", "naive"):
                    beams = [(ids, s) for s, ids in cands[:K]]
                    continue
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
                if not beams or stop_at_k and len(done) >= beam_size or done and (
                        stop_first or bound and t < max_len and norm(max(s for _, s in beams),
                                                                     max_len) <= max(
                            d[0] for d in done)):
                    break
            else:  # out of room: the open ones count as finished
                for ids, s in beams:
                    body = ids[1:]
                    # cut there: <eos> counts in the length
                    if walk in ("slots", "extend") and eos_id in body:
                        body = body[:body.index(eos_id)]
                        done.append((norm(s, len(body) + 1), body))
                    else:
                        done.append((norm(s, len(body)) if open_norm else s, body))
            answers.append(max(done, key=lambda d: d[0] / (lp(len(d[1]) + 1, alpha) if renorm else 1.0))[1])
        return answers
    return beam_search


def beam_variant(finished="contract", **mistake):
    """beam_mistake with a decode call per hypothesis, `finished` its walk."""
    return beam_mistake(walk=finished, one_by_one=True, **mistake)


_PSB_DECODE = "model.decode(ys, memory, mask, causal(t, ys.size(0)))"
_RANKING = "total.argsort(descending=True)"
_TOPK_MIN, _TOPK_2K = "total.topk(min(2 * K, total.numel())).indices", "total.topk(2 * K).indices"


def beam_topk_live(topk):
    """Only the live hypotheses, `topk` of their extensions, memory.expand and a (1, 1, t, t) mask."""
    return per_source(edit(beam_per_source_batched, (_RANKING, topk), (
        _PSB_DECODE, "model.decode(ys, memory.expand(ys.size(0), -1, -1), mask, causal(t))")))


def beam_banned_specials(topk):
    """<pad> and <bos> never generated (their log p set to -inf), float64, `topk` of the extensions, src_mask
    expanded, tensor answers."""
    return per_source(edit(
        beam_per_source_batched, ("torch.zeros(1)", "torch.zeros(1, dtype=torch.float64)"),
        ("best_ids = -math.inf, []", "best_ids = -math.inf, torch.zeros(0, dtype=torch.long)"),
        (f"{_PSB_DECODE}[:, -1]).log_softmax(-1)", "model.decode(ys, memory.expand(ys.size(0), -1, -1), "
                                                   "mask.expand(ys.size(0), 1, 1, -1), causal(t, "
                                                   "ys.size(0)))[:, -1]).double()\n        logp = logp - "
                                                   "torch.logsumexp(logp, -1, keepdim=True)\n        logp[:, "
                                                   "[PAD, bos_id]] = -math.inf"),
        (_RANKING, topk), ("ys[parent, 1:].tolist()", "ys[parent, 1:].clone()"),
        ("ys[j, 1:].tolist() if", "ys[j, 1:] if")))
BEAM_STYLES = {
    # a learner's plain beam: one source and one hypothesis per decode call, lists of (ids, log p), the
    # contract's early stop
    "beam_one_at_a_time": beam_variant(bound=True),
    "beam_per_source_batched": per_source(beam_per_source_batched),
    # the common learner's beam: only the live hypotheses, topk(min(2 * beam_size, n * V)) of their n * V
    # extensions (at least beam_size of those are open), memory.expand and a (1, 1, t, t) mask (without the
    # min: a mistake)
    "beam_topk_live": beam_topk_live(_TOPK_MIN),
    # every source's beam_size rows in one (B * K, t) batch, empty slots at -inf, the whole ranking walked,
    # float64, no early stop
    "beam_flat_padded": edit(BEAM, ("-math.inf, device=device)", "-math.inf, device=device, "
                                                                 "dtype=torch.float64)"),
                             (".float(), dim=-1)", ".double(), dim=-1)"),
                             ("cand.topk(min(2 * K, K * V), dim=1)", "cand.sort(dim=1, descending=True)"),
                             ("if not go_on.all():", "if False:  # no early stop")),
    "beam_dicts_early_stop": per_source(beam_dicts_early_stop),
    # topk(K + 1) per hypothesis (at most one is <eos>, so K open ones per hypothesis are enough), merged;
    # memory and src_mask expanded; the contract's early stop (strict <)
    "beam_per_hypothesis_topk_heap": per_source(edit(
        beam_dicts_early_stop, (_REPEATED, "memory.expand(len(keys), -1, -1), mask.expand(len(keys), -1, -1, "
                                           "-1)"),
        ("logp = F.log_softmax(model.generator(out[:, -1]), dim=-1).tolist()",
         "vals, toks = F.log_softmax(model.generator(out[:, -1]), dim=-1).topk(K + 1, dim=-1)"),
        ("for key, row in zip(keys, logp) for tok, v in enumerate(row)}",
         "for key, vs, ts in zip(keys, vals.tolist(), toks.tolist()) for v, tok in zip(vs, ts)}"))),
    # the length penalty applied at every step: hypotheses carry score / lp(t), un-normalized to extend (the
    # same ranking: all candidates of a step have one length); memory.repeat; float64; a stable argsort
    "beam_normalized_each_step": per_source(edit(
        beam_per_source_batched, ("torch.zeros(1)", "torch.zeros(1, dtype=torch.float64)"),
        ("ys, memory,", "ys, memory.repeat(ys.size(0), 1, 1),"), (").log_softmax", ").double().log_softmax"),
        ("(scores[:, None] + logp)", "((scores * (lp(t - 1, alpha) if t > 1 else 1.0))[:, None] + logp)"),
        (_RANKING,
         "torch.argsort(total, descending=True, stable=True)"), ("total[keep] * lp(t, alpha)", "total[keep]"),
        ("scores[j].item() / lp(max_len, alpha) > best", "scores[j].item() > best"))),
    # numpy float64 scores and a hand-written log_softmax, a stable descending argsort
    "beam_numpy_scores": per_source(edit(
        beam_per_source_batched, ("torch.full((1, 1), bos_id), torch.zeros(1)",
                                  "np.full((1, 1), bos_id), np.zeros(1)"),
        (f"{_PSB_DECODE}[:, -1]).log_softmax(-1)", "model.decode(torch.from_numpy(ys), "
                                                   "memory.expand(len(ys), -1, -1), mask, causal(t))[:, "
                                                   "-1]).double().numpy()\n        logp = logp - "
                                                   "logp.max(-1, keepdims=True)\n        logp = logp - "
                                                   "np.log(np.exp(logp).sum(-1, keepdims=True))"),
        ("logp.size(-1)", "logp.shape[-1]"), (_RANKING, "np.argsort(-total, kind='stable')"),
        ("torch.tensor(keep)", "np.array(keep)"), ("torch.cat([ys[keep // V], (keep % V)[:, None]], 1)",
                                                   "np.concatenate([ys[keep // V], (keep % V)[:, None]], "
                                                   "1)"))),
    # all sources in one decode call per step with a variable number of rows each (no -inf placeholders),
    # sources that are done dropped, index_select for memory and src_mask, the contract's early stop (<=)
    "beam_batched_variable_rows": edit(
        beam_lists, ("[([bos_id], 0.0)] + [([bos_id], -math.inf)] * (K - 1)", "[([bos_id], 0.0)]"),
        ("        memory = memory.repeat(K, 1, 1) if memory_tiled else memory.repeat_interleave(K, 0)\n"
         "        mask = src_mask.repeat(K, 1, 1, 1) if memory_tiled else src_mask.repeat_interleave(K, "
         "0)\n", ""),
        ("ys = torch.tensor([ids for b in range(B) for ids, _ in beams[b]])",
         "live = [b for b in range(B) if not stopped[b] for _ in beams[b]]  # the source of each row\n"
         "            ys = torch.tensor([ids for b in range(B) if not stopped[b] for ids, _ in beams[b]])\n"
         "            rows = torch.tensor(live)"),
        ("ys, memory, mask,", "ys, memory.index_select(0, rows), src_mask.index_select(0, rows),"),
        ("  # its rows still go to the decoder (one batch), padded: never read again\n"
         "                    beams[b] = [(ids + [PAD], s) for ids, s in beams[b]]\n",
         "  # dropped from the batch\n"),
        ("logp[b * K:(b + 1) * K]", "logp[live.index(b):live.index(b) + len(beams[b])]"),
        ("kept + [(kept[0][0], -math.inf)] * (K - len(kept))", "kept"))(),
    # heapq.nlargest(2K) of the extensions, memory expanded, the contract's early stop (<=)
    "beam_objects_nlargest": per_source(edit(
        beam_dicts_early_stop, (_REPEATED, "memory.expand(len(keys), -1, -1), mask"), ("< max(", "<= max("),
        ("sorted(cand, key=cand.get, reverse=True)", "heapq.nlargest(2 * K, cand, key=cand.get)"),
        ("    beams, finished", "    import heapq\n    beams, finished"))),
    # <pad> and <bos> never generated (their log p set to -inf), float64 topk(min(2K, n * V)), src_mask
    # expanded, tensor answers (without the min: a mistake)
    "beam_banned_specials_tensor_answers": beam_banned_specials(_TOPK_MIN),
    # the beams the mistakes below are made from, with no mistake switched on
    "beam_lists()": beam_lists(),
    "beam_mistake()": beam_mistake(),
}


def test_one_at_a_time_beam_is_fast_enough():
    """Every check stays well inside its time limit even for the slowest kind of correct beam search."""
    from autograder.core import run_check
    for c in REGISTRY["beam_search"]:
        start = time.perf_counter()
        points, line = run_check(c, BEAM_STYLES["beam_one_at_a_time"])
        assert points == c.points, line
        assert time.perf_counter() - start < c.timeout / 2, f"{c.title}: {time.perf_counter() - start:.1f} s"


# ---------------------------------------------------------------- classic mistakes, one row each
_K_IS_4 = ("device, K = src.device, beam_size", "device, K = src.device, 4")  # beam_size ignored
_EVERY_STEP = ("        scores = new_scores\n", "        scores = new_scores / length_penalty(t, alpha)\n")
BEAM_MISTAKES = [
    # the contract's side effects: the caller's model keeps its mode
    Mistake("leaves the model in eval mode", edit(BEAM, _top("model.eval()")), 7,
            ("given in train mode", "switched to eval mode")),
    # the scores and the length penalty
    Mistake("raw logits as scores", beam_variant(raw=True), 3, "raw logits"),
    Mistake("probabilities multiplied", beam_mistake(probs=True), 4, "probabilities multiplied"),
    Mistake("log p not accumulated", beam_lists(accumulate=False), 3, "not accumulated"),
    Mistake("no length penalty", edit(BEAM, _top("length_penalty = lambda length, alpha: 1.0")), 4,
            "no length penalty"),
    Mistake("log p times the penalty", beam_mistake(penalty="mul"), 4, "multiplied by length_penalty"),
    Mistake("length ** alpha as the penalty", beam_mistake(penalty="power"), 4, "length ** alpha"),
    Mistake("alpha ignored", beam_mistake(fixed_alpha=0.6), 5, "alpha argument is ignored"),
    # finished scores log p / lp(t), then the best chosen by score / lp(len + 1): about alpha doubled (it used
    # to be told "the length left out <eos>" first)
    Mistake("divided by the length penalty twice", beam_mistake(bound=True, renorm=True), 5,
            "Likely: divided by the length penalty twice",
            not_says=("left out <eos>", "max_len + 1, alpha)")),
    # the open ones at max_len divided by the penalty of max_len + 1 (the prefix's length, <bos> in it): it
    # used to be told "divided by the length penalty twice"
    Mistake("open ones at max_len divided by the penalty of max_len + 1",
            edit(BEAM, ("scores[s, j].item() / length_penalty(max_len, alpha)",
                        "scores[s, j].item() / length_penalty(max_len + 1, alpha)")),
            7, "Likely: hypotheses still open after max_len tokens were divided by length_penalty(max_len + "
               "1",
            not_says="twice"),
    Mistake("beam_size ignored (4 kept)", edit(BEAM, _K_IS_4), 7,
            "Likely: the beam_size argument is ignored"),
    Mistake("<eos> left out of the length", edit(BEAM, ("top_val[s, j].item() / length_penalty(t, alpha)",
                                                      "top_val[s, j].item() / length_penalty(t - 1, alpha)")),
            5, "left out <eos>"),
    Mistake("<bos> counted in the length", beam_lists(bos_in_length=True), 7, "counted <bos>"),
    # issue 40: these two were blamed on the early stop ("the search stopped too early") or on <eos>
    Mistake("<bos> counted in a finished hypothesis's length only",
            edit(BEAM, ("top_val[s, j].item() / length_penalty(t, alpha)",
                        "top_val[s, j].item() / length_penalty(t + 1, alpha)")), 4,
            "Likely: the length in a finished hypothesis's penalty counted <bos>",
            not_says="stopped too early"),
    Mistake("the length penalty applied at every step (open ones at max_len divided again)",
            edit(BEAM, _EVERY_STEP), 4,
            "Likely: the length penalty was applied at every step",
            not_says=("stopped too early", "left out <eos>")),
    Mistake("the length penalty applied at every step",
            edit(BEAM, _EVERY_STEP,
                 ("scores[s, j].item() / length_penalty(max_len, alpha)", "scores[s, j].item()")), 5,
            "Likely: the length penalty was applied at every step",
            not_says=("stopped too early", "left out <eos>")),
    Mistake("open ones at max_len not normalized", beam_mistake(open_norm=False), 6, "raw log p"),
    # the beam: finished hypotheses set aside, beam_size open ones go on
    Mistake("beam_size ignored", edit(BEAM, _K_IS_4), 7),
    Mistake("beam_size=1 run as greedy (used to get full marks: beam 1 was run with alpha 0 only)",
            edit(BEAM, _top("if beam_size == 1:\n        return greedy_decode(model, src, src_mask, max_len, "
                            "bos_id, eos_id)")),
            7, "beam_size=1 was run as greedy decoding"),
    Mistake("beam_size copies of <bos> at log p 0", beam_mistake(copies=True), 4, "copies of <bos>"),
    Mistake("copies of <bos>: named first (was 'the penalty is length ** alpha')", beam_mistake(copies=True),
            0,
            "Likely: the search started with beam_size copies", title="equals a reference beam search"),
    Mistake("finished hypotheses keep beam slots", beam_variant(finished="slots"), 5,
            "kept their beam slots"),
    Mistake("finished hypotheses extended past <eos>", beam_variant(finished="extend"), 3,
            "extended past <eos>"),
    Mistake("naive beam returning tokens after <eos>", beam_variant(finished="naive"), 0,
            "tokens after <eos>",
            not_says="in a batch"),  # each source alone ends wrong too: not the batch's fault
    Mistake("topk(K) per hypothesis", beam_mistake(per_hyp_k=True), 6, "the beam shrank"),
    Mistake("topk(K), <eos> ones then removed", beam_mistake(walk="step"), 6, "the beam shrank"),
    # before no penalty, ...
    Mistake("topk(K), <eos> ones then removed: named first", beam_mistake(walk="step"), 0,
            "Likely: the beam shrank", title="sets finished hypotheses aside"),
    # topk(2 * beam_size) of the k * V extensions: at the first step one hypothesis has V < 2 * beam_size of
    # them when the vocabulary is tiny (both used to be correct styles)
    Mistake("topk(2K) without min(2K, k * V)", beam_topk_live(_TOPK_2K), 7,
            ("selected index k out of range", "topk(min(2 * K, k * V))")),
    Mistake("topk(2K) without min, banned specials", beam_banned_specials(_TOPK_2K), 7,
            "topk(min(2 * K, k * V))"),
    Mistake("the width drops per finished hypothesis", beam_mistake(walk="forever"), 5, "dropped by one"),
    Mistake("every <eos> extension finished", beam_mistake(all_eos=True), 7, "every <eos> extension"),
    # the stop
    Mistake("stops at the first finished hypothesis", beam_variant(stop_first=True), 2,
            "stopped at the first finished"),
    # (beam 4 over a vocabulary of 5: four hypotheses finish before the best one)
    Mistake("stops once beam_size have finished", beam_mistake(stop_at_k=True), 3,
            "once beam_size hypotheses had finished"),
    Mistake("bound with the current length", beam_lists(bound="current"), 4, "stopped too early"),
    Mistake("bound with the current length: named first (was 'no length penalty')",
            beam_lists(bound="current"), 0,
            "Likely: the search stopped too early", title="divides by length_penalty"),
    Mistake("bound with the penalty of length t + 1", beam_lists(bound="next"), 6,
            ("stopped too early", "t + 1")),
    Mistake("bound without the penalty", beam_lists(bound="raw"), 4, "stopped too early"),
    # lengths and ids
    Mistake("max_len + 1 tokens", edit(BEAM, _top("max_len += 1")), 5, "searched max_len + 1 tokens"),
    Mistake("max_len - 1 tokens", beam_lists(steps=-1), 4, "max_len - 1 tokens"),
    Mistake("returns <bos>", edit(BEAM, ("return best_ids", "return [[bos_id] + ids for ids in best_ids]")),
            0,
            "<bos>"),
    Mistake("eos_id ignored", edit(BEAM, _top("eos_id = EOS")), 7, "eos_id argument is ignored"),
    # the model and the masks
    Mistake("the first position's logits", beam_mistake(position=0), 1, "first position"),
    Mistake("model.generator not applied (used to get full marks)",
            edit(BEAM, ("model.generator(out[:, -1]).float()", "out[:, -1].float()")), 0,
            "model.generator was not applied"),
    Mistake("no tgt_mask", edit(BEAM, ("causal_mask(t, device)", "None")), 7, "tgt_mask=None"),
    Mistake("memory tiled, rows grouped by source", beam_lists(memory_tiled=True), 4,
            ("decoded alone", "repeat_interleave")),
]


def test_beam_names_at_most_three_causes():
    """One wrong answer used to come with about 15 'or ...' alternatives."""
    points, line = grade_one(beam_lists(bound="current"), "beam_search", "sets finished hypotheses aside")
    hint = line.split("Likely: ", 1)[1]
    assert points == 0 and hint.startswith("the search stopped too early") and hint.count("; or ") <= 2, line


@pytest.mark.parametrize("name,fn,title,ending", [
    ("greedy_decode", edit(GREEDY, ("model.encode(src, src_mask)", "model.encode(src, None)")),
     "passes model.decode",
     "the masks given to the model. Likely: model.encode got src_mask=None, expected the src_mask you were "
     "given, (B, 1, 1, Ls) (the rows of the sources encoded): the encoder's self-attention must not see the "
     "padding"),
    ("beam_search",
     edit(BEAM, ("model.encode(src, src_mask)", "model.encode(src, torch.ones_like(src_mask))")),
     "passes model.decode", "the masks given to the model. Likely: model.encode got a src_mask with other "
                            "values than the padding of src, expected the src_mask you were given, (B, 1, 1, "
                            "Ls) (the rows of the sources encoded): the encoder's self-attention must not "
                            "see the padding"),
    ("beam_search", beam_variant(finished="naive"), "beam_size=1 with alpha=0 equals greedy",
     "Likely: the answer goes on after its first <eos> (2), which is where it ends: each source decoded on "
     "its own does not end right either, so a finished sequence was extended past its <eos> (or the answer "
     "cut at its last <eos>, not its first); cut each answer before its first <eos>, "
     "row[:row.index(eos_id)]"),
], ids=["greedy: encoded without src_mask", "beam: encoded with an all-True mask",
        "naive beam: its answers go past <eos> on their own (not told about batches)"])
def test_the_likely_cause_ends_the_line(name, fn, title, ending):
    """The line says what is wrong and the likeliest cause, and nothing after it."""
    points, line = grade_one(fn, name, title)
    assert points == 0 and line.endswith(ending), line


# ================================================================ corpus_bleu
# ---------------------------------------------------------------- correct, written differently
_INIT = "matches, totals = [0] * max_n, [0] * max_n"
_COUNTS = "h, r = _ngrams(hyp, n), _ngrams(ref, n)"
_CLIPPED = "min(c, r[g]) for g, c in h.items()"
_TOTALS = "totals[n - 1] += max(len(hyp) - n + 1, 0)"
_ZERO = "    if hyp_len == 0 or min(matches) == 0:\n"
_MEAN = "log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n"
_BREVITY = "brevity = min(0.0, 1 - ref_len / hyp_len)"
_SCORE = "return 100 * math.exp(brevity + log_precision)"


_LOOP = "    for hyp, ref in zip(hypotheses, references):\n"


def _bleu(*changes):
    return edit(CORPUS_BLEU, *changes)


def sacrebleu_bleu(**options):
    """Calling sacrebleu itself is a correct answer too (`options`: more of BLEU's arguments)."""
    def corpus_bleu(hypotheses, references, max_n=4):
        from sacrebleu.metrics import BLEU
        bleu = BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n, **options)
        return bleu.corpus_score([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]]).score
    return corpus_bleu


BLEU_STYLES = {
    # Counter intersection for the clipping, the brevity penalty as a branch
    "bleu_counter": _bleu((f"sum({_CLIPPED})", "sum((h & r).values())"),
                          (_BREVITY, "brevity = 0.0 if hyp_len > ref_len else 1 - ref_len / hyp_len")),
    "bleu_sacrebleu": sacrebleu_bleu(),
    # n-grams as joined strings in plain dicts, the precisions multiplied as p ** (1 / max_n)
    "bleu_string_dicts": _bleu(
        (_COUNTS, "h, r = {}, {}\n            for s, d in ((hyp, h), (ref, r)):\n"
                  "                for i in range(len(s) - n + 1):\n"
                  "                    d[' '.join(s[i:i + n])] = d.get(' '.join(s[i:i + n]), 0) + 1"),
        ("r[g])", "r.get(g, 0))"), (_SCORE, "return 100 * precision * math.exp(brevity)"),
        (_MEAN, "precision = math.prod((m / t) ** (1 / max_n) for m, t in zip(matches, totals))")),
    # exact fractions for the precisions, a 0-d tensor returned
    "bleu_fractions_tensor": _bleu(_top("from fractions import Fraction"),
                                   ("return 0.0", "return torch.tensor(0.0)"),
                                   (_MEAN, _MEAN.replace("math.log(m / t)", "math.log(Fraction(m, t))")),
                                   (_SCORE, f"return torch.tensor({_SCORE[7:]}, dtype=torch.float64)")),
    "bleu_numpy": _bleu(_top("import numpy as np"), (_INIT, "matches, totals = np.zeros(max_n), "
                                                            "np.zeros(max_n)"),
                        ("return 0.0", "return np.float64(0.0)"),
                        (_MEAN, "log_precision = np.mean(np.log(matches / totals))"),
                        (_SCORE, "return 100 * np.exp(brevity) * np.exp(log_precision)")),
    # base-10 logs and 10 ** (another base for the same geometric mean), a weights list, math.fsum
    "bleu_log10_weights": _bleu((_MEAN, "log_precision = math.fsum(w * math.log10(m / t) for w, m, t in zip("
                                        "[1.0 / max_n] * max_n, matches, totals))"),
                                (_SCORE, "return 100.0 * math.exp(brevity) * 10 ** log_precision")),
    # counts in a (2, max_n) float64 tensor, torch's log and exp, a 0-d tensor returned
    "bleu_torch_stats": _bleu((_INIT, "matches, totals = torch.zeros(2, max_n, dtype=torch.float64)"),
                              ("return 0.0", "return torch.tensor(0.0, dtype=torch.float64)"),
                              (_MEAN, "log_precision = torch.log(matches / totals).mean()"),
                              (_BREVITY, "brevity = torch.tensor(1 - ref_len / hyp_len, dtype=torch.float64)"
                                         ".clamp(max=0.0)"),
                              (_SCORE, "return 100 * torch.exp(brevity + log_precision)")),
    # an exact product of fractions, then one root; the brevity branch with <=
    "bleu_fraction_product": _bleu(_top("from fractions import Fraction"), ("return 0.0", "return 0"),
                                   (_SCORE, "return float(math.prod(Fraction(m, t) for m, t in zip(matches, "
                                            "totals))) ** (1 / max_n) * (math.exp(1 - ref_len / hyp_len) if "
                                            "hyp_len <= ref_len else 1) * 100")),
    # a keyword-only extra (the statistics returned), the brevity penalty as min(1, exp(...)) times the
    # precision
    "bleu_sentence_stats_first": _bleu(
        ("max_n: int = 4)", "max_n: int = 4, *, return_stats=False)"),
        (_ZERO, "    if return_stats:\n        return matches, totals, hyp_len, ref_len\n" + _ZERO),
        (_SCORE, "return 100 * min(1.0, math.exp(1 - ref_len / hyp_len)) * math.exp(log_precision)")),
    "bleu_sacrebleu_effective_order_off": sacrebleu_bleu(effective_order=False),
}


# ---------------------------------------------------------------- classic mistakes, one row each
BLEU_MISTAKES = [
    # the n-gram counts
    Mistake("no clipping", _bleu((_CLIPPED, "(c if g in r else 0) for g, c in h.items()")), 3, "not clipped"),
    Mistake("distinct n-grams counted once", _bleu((_COUNTS, "h, r = Counter(set(_ngrams(hyp, n))), "
                                                             "Counter(set(_ngrams(ref, n)))"),
                                                   (_TOTALS, "totals[n - 1] += len(h)")), 3,
            "counted once (a set)"),
    Mistake("a recall", _bleu((_TOTALS, "totals[n - 1] += max(len(ref) - n + 1, 0)")), 2,
            "REFERENCE n-grams"),
    # a blind review's find: the brevity penalty's line blamed the brevity penalty
    Mistake("each sentence's last n-gram dropped, range(len - n)",
            _bleu((_COUNTS, "h, r = (Counter(tuple(s[i:i + n]) for i in range(len(s) - n)) "
                            "for s in (hyp, ref))"),
                  (_TOTALS, "totals[n - 1] += max(len(hyp) - n, 0)")), 2,
            ("last n-gram is missing", "range(len(tokens) - n + 1)"),
            not_says=("Likely: the brevity", "Likely: no brevity")),
    Mistake("hypotheses and references swapped",
            _bleu(_top("hypotheses, references = references, hypotheses")), 2,
            "swapped"),
    Mistake("matches counted from the reference: no cause guessed (not 'orders 1..max_n')",
            _bleu((_CLIPPED, "c for g, c in r.items() if g in h")), 5,
            "corpus_bleu(12 sentences, max_n=2); expected 55.8300 (sacrebleu: n-grams of orders 1..max_n, "
            "and the mean of their log precisions over max_n orders); got ", not_says="Likely:"),
    # the denominators and rounding (issue 40: no Likely before)
    Mistake("off by one in the denominators", _bleu(("max(len(hyp) - n + 1, 0)", "max(len(hyp) - n, 0)")), 1,
            ("off by one in p_n's denominator", "L - n + 1")),
    Mistake("rounded to 2 digits", _bleu(("return 100 * math.exp(brevity + log_precision)",
                                          "return round(100 * math.exp(brevity + log_precision), 2)")), 2,
            "the score was rounded (round(bleu, 2))"),
    # the orders
    Mistake("max_n ignored", _bleu(_top("max_n = 4")), 5, "max_n argument is ignored"),
    # range(1, max_n): the order n = max_n is never counted (the mean still divides by max_n)
    Mistake("range(1, max_n)", _bleu(("range(1, max_n + 1)", "range(1, max_n)"),
                                     ("min(matches)", "min(matches[:-1], default=1)"),
                                     (_MEAN, _MEAN.replace("zip(matches, totals)",
                                                           "zip(matches[:-1], totals[:-1])"))),
            1, "n = max_n is missing"),
    Mistake("orders 0..max_n - 1", _bleu((_COUNTS, "h, r = _ngrams(hyp, n - 1), _ngrams(ref, n - 1)"),
                                         (_TOTALS, "totals[n - 1] += sum(h.values())")), 1, "range(max_n)"),
    # an order with no n-gram at all (a corpus of 3-token sentences has no 4-gram) left out of the mean
    Mistake("orders without n-grams skipped",
            _bleu(("min(matches)", "min(m for m, t in zip(matches, totals) if t)"),
                  (_MEAN, "log_precision = sum(math.log(m / t) for m, t in zip(matches, totals) if t) / "
                          "sum(map(bool, totals))")),
            6, "left out of the mean"),
    Mistake("weights fixed at 1/4", _bleu((_MEAN, _MEAN.replace("/ max_n", "/ 4"))), 5, "fixed at 1/4"),
    # the mean of the log precisions
    Mistake("arithmetic mean", _bleu((_MEAN, "log_precision = math.log(sum(m / t for m, t in zip(matches, "
                                             "totals)) / max_n)")), 2, "arithmetic mean"),
    Mistake("exp missing", _bleu((_SCORE, "return 100 * math.exp(brevity) * log_precision")), 1,
            "exp is missing"),
    Mistake("add-one smoothing", _bleu((_ZERO, "    matches = [m + (n > 0) for n, m in enumerate(matches)]\n"
                                               "    totals = [t + (n > 0) for n, t in enumerate(totals)]\n" +
                                        _ZERO)),
            1, "smoothed"),
    # issue 40: the smoothing, truncation and 4-digit rounding got no Likely (the last one was shown as equal
    # numbers)
    Mistake("an epsilon for zero matches", _bleu((_ZERO, "    if hyp_len == 0:\n"),
                                                 (_MEAN, _MEAN.replace("math.log(m / t)",
                                                                       "math.log(max(m, 1e-9) / t)"))),
            6, ("got 0.4204. Likely: the zero precision was smoothed",
                "right on a corpus where every order has matches")),
    Mistake("add-one smoothing on every order", _bleu((_ZERO, "    if hyp_len == 0:\n"),
                                                      (_MEAN, _MEAN.replace("math.log(m / t)",
                                                                            "math.log((m + 1) / (t + 1))"))),
            1, "Likely: smoothed (add-one on every order, unigrams included"),
    Mistake("truncated to an int", _bleu((_SCORE, "return int(100 * math.exp(brevity + log_precision))")), 2,
            "Likely: the score was truncated to a whole number"),
    Mistake("rounded to 4 digits",
            _bleu((_SCORE, "return round(100 * math.exp(brevity + log_precision), 4)")), 6,
            ("expected 36.78794412 (sacrebleu); got 36.78790000", "Likely: the score was rounded "
                                                                  "(round(bleu, 4))")),
    # an untrained model's output: ZeroDivisionError (used to get full marks)
    Mistake("brevity penalty before the test for empty output",
            _bleu((_BREVITY, "brevity = brevity"), (_ZERO, f"    {_BREVITY}\n    if min(matches) == 0:\n")),
            6,
            ("ZeroDivisionError", "no output at all scores 0")),
    Mistake("log(0) reached", _bleu((_ZERO + "        return 0.0\n", "")), 6, ("math.log(0)", "return 0.0")),
    # the brevity penalty
    Mistake("no brevity penalty", _bleu((_BREVITY, "brevity = 0.0")), 3, "no brevity penalty"),
    # sentences skipped (the likely 'fix' for the crash on empty output): their other side no longer counts
    # (both used to get full marks)
    Mistake("empty hypotheses skipped",
            _bleu((_LOOP, _LOOP + "        if not hyp:\n            continue\n")), 6,
            "an empty hypothesis was skipped: it still counts its reference's length"),
    Mistake("empty references skipped",
            _bleu((_LOOP, _LOOP + "        if not ref:\n            continue\n")), 6,
            "an empty reference was skipped: its hypothesis's n-grams still count"),
    # min(1, exp(1 - c / r)): it used to be told "no brevity penalty"
    Mistake("brevity penalty for long output",
            _bleu((_BREVITY, "brevity = min(0.0, 1 - hyp_len / ref_len)")), 2,
            "punishes LONG output", not_says="no brevity penalty"),
    Mistake("BP = hyp_len / ref_len", _bleu((_BREVITY, "brevity = math.log(min(1.0, hyp_len / ref_len))")), 3,
            "hyp_len / ref_len"),
    Mistake("BP not capped at 1", _bleu((_BREVITY, "brevity = 1 - ref_len / hyp_len")), 5, "not capped at 1"),
    Mistake("brevity penalty per sentence", _bleu((_BREVITY, "brevity = math.log(sum(min(1.0, math.exp(1 - "
                                                             "len(r) / len(h))) for h, r in zip(hypotheses, "
                                                             "references)) / len(hypotheses))")), 3,
            "per sentence"),
    # the corpus
    Mistake("average of sentence scores", lambda h, r,
            max_n=4: sum(CORPUS_BLEU([a], [b], max_n) for a, b in zip(
        h, r)) / len(h), 2, "average of sentence scores"),
    Mistake("the corpus joined into one sentence", _bleu(_top("hypotheses, references = [[w for h in "
                                                              "hypotheses for w in h]], [[w for r in "
                                                              "references for w in r]]")),
            2, "one long sentence"),
    Mistake("the token lists edited in place",
            _bleu(_top("for h in hypotheses + references:\n        h.append('</s>')")), 0, "edited in place"),
    # the result
    Mistake("0..1 scale", _bleu((_SCORE, "return math.exp(brevity + log_precision)")), 1, "0..1 scale"),
    Mistake("a string", lambda h, r, max_n=4: str(CORPUS_BLEU(h, r, max_n)), 0, "expected a number"),
]


# ================================================================ every name's correct styles and mistakes
CORRECT = {"greedy_decode": GREEDY_STYLES, "length_penalty": LP_STYLES, "beam_search": BEAM_STYLES,
           "corpus_bleu": BLEU_STYLES}
TABLES = {"greedy_decode": GREEDY_MISTAKES, "length_penalty": LENGTH_PENALTY_MISTAKES,
          "beam_search": BEAM_MISTAKES,
          "corpus_bleu": BLEU_MISTAKES}


@pytest.mark.parametrize("name,fn", [pytest.param(name, fn, id=style) for name, styles in CORRECT.items()
                                     for style, fn in styles.items()])
def test_other_correct(name, fn):
    assert_full_marks(fn, name)


@pytest.mark.parametrize("m", [pytest.param(*p.values, id=f"{name}: {p.id}") for name, table in TABLES.items()
                               for p in mistakes(name, table)])
def test_mistakes(m):
    assert_mistake(m)


def test_check_runs_write_nothing_to_stderr():
    """check() on correct and wrong decoders, in a fresh interpreter, leaves stderr empty."""
    code = ("import torch, solutions\nfrom autograder import check\nfrom tests import test_checks_stage13 as "
            "t\nwrong = {m.name: m.impl for m in t.GREEDY_MISTAKES + t.BLEU_MISTAKES}\n"
            "for fn, name in [(wrong['float prefixes (used to get full marks)'], 'greedy_decode'), "
            "(t.beam_mistake(copies=True), 'beam_search'), "
            "(t.BEAM_STYLES['beam_normalized_each_step'], 'beam_search'), "
            "(t.LP_STYLES['lp_numpy_one_element'], 'length_penalty'), (wrong['exp missing'], "
            "'corpus_bleu')]:\n    fn.__name__ = name\n    check(fn)\n")
    run_silently(code)
