"""Stage 13: decoding and BLEU. The decoders are run on small fake models that have only the contract's
interface (model.encode, model.decode, model.generator) and whose next-token distribution is a fixed
function of the source and the prefix, so the checks know the whole search space: a reference greedy
decoder, a reference beam search written from the contract, and a brute-force search over every
sequence give the expected answers. corpus_bleu is held against sacrebleu. Classic mistakes are named
by running the same references with the mistake put in."""
from __future__ import annotations

import math
import random
import time
import weakref

import torch
from torch import nn

from ..registry import CheckFailure, CheckTimeout, register
from ._util import fmt, matching_mistakes

PAD, BOS, EOS = 0, 1, 2


# ------------------------------------------------------------------------------------ fake models
def _hidden_order(vocab: int) -> list[int]:
    """The fake decoder's output holds the logits in this order (reversed): hidden[..., j] = logits[..., order[j]],
    so that a decoder that forgets model.generator picks other tokens."""
    return list(range(vocab - 1, -1, -1))


class _Generator(nn.Linear):
    """The fake model's model.generator: an nn.Linear(vocab, vocab) (out_features, weight and bias are there for
    code that reads them) whose weight is the permutation that puts the fake decoder's output back in token
    order; forward gathers the columns, which is exact."""

    def __init__(self, vocab: int):
        order = _hidden_order(vocab)
        self._back = [order.index(k) for k in range(vocab)]  # logits[k] = hidden[back[k]]
        super().__init__(vocab, vocab)
        self.register_buffer("back", torch.tensor(self._back), persistent=False)

    def reset_parameters(self):  # (nn.Linear's random init would draw from the learner's torch RNG)
        with torch.no_grad():
            self.weight.zero_()
            self.weight[torch.arange(self.out_features), torch.tensor(self._back)] = 1.0
            self.bias.zero_()

    def forward(self, x):
        return x.index_select(-1, self.back.to(x.device))


class _FakeModel(nn.Module):
    """A 'translation model' through encode/decode/generator only. memory remembers the source ids, and
    decode puts at each position j the logits next_logits(source ids, prefix[:j + 1]) (a fixed function),
    as a causal decoder would, so that a decoder's choices can be replayed exactly (and reading another
    position than the last repeats an earlier prediction). Like a real decoder's output, decode's output is
    not the logits: model.generator (an nn.Linear) turns it into them. It records the first wrong mask it
    is given."""

    def __init__(self, vocab: int, next_logits):
        super().__init__()
        self.vocab, self.next_logits = vocab, next_logits
        self.generator = _Generator(vocab)  # decode's output (N, t, vocab) -> logits (N, t, vocab)
        self.unused = nn.Parameter(torch.zeros(1))
        self.problem: str | None = None

    def forward(self, *args, **kwargs):
        raise CheckFailure("the decoder called model(...)", "only model.encode, model.decode and model.generator",
                           "a call to model.forward", "decode step by step: memory = model.encode(src, src_mask) "
                           "once, then model.decode(ys, memory, src_mask, tgt_mask) and model.generator")

    def encode(self, src, src_mask):
        if not isinstance(src, torch.Tensor) or src.dim() != 2:
            raise CheckFailure("model.encode(src, src_mask)", "src of shape (B, Ls)",
                               f"{type(src).__name__} of shape {tuple(getattr(src, 'shape', ()))}",
                               "pass the batch of source ids as it is")
        if self.problem is None:  # a real encoder's output depends on src_mask: it must be the source's own
            self.problem = _encode_mask_problem(src, src_mask)
        return src.detach().float()[:, :, None]  # (B, Ls, 1): the 'memory' holds the source ids

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        if not isinstance(tgt_in, torch.Tensor) or tgt_in.dim() != 2:
            raise CheckFailure("model.decode(tgt_in, ...)", "tgt_in of shape (N, t): the prefixes generated so far",
                               f"shape {tuple(getattr(tgt_in, 'shape', ()))}",
                               "keep the running prefixes as a (N, t) LongTensor starting with <bos>")
        N, t = tgt_in.shape
        if tgt_in.dtype not in (torch.long, torch.int32):
            raise CheckFailure("model.decode(tgt_in, ...)", "tgt_in of token ids, a torch.long tensor",
                               f"dtype {tgt_in.dtype}",
                               "the prefixes were built as floats (torch.ones(...) * bos_id, "
                               "torch.zeros(...).fill_(...), or a float tensor concatenated to them): a real "
                               "model's nn.Embedding refuses them; "
                               "build them with torch.full((B, 1), bos_id, dtype=torch.long) and append the argmax "
                               "indices (torch.long)")
        if not isinstance(memory, torch.Tensor) or memory.dim() != 3 or memory.size(0) not in (1, N):
            raise CheckFailure("model.decode(tgt_in, memory, ...)", f"memory with 1 or {N} rows (one per prefix)",
                               f"shape {tuple(getattr(memory, 'shape', ()))}",
                               "pass memory = model.encode(src, src_mask), repeated (or indexed) so that each "
                               "prefix row has its source's row")
        memory = memory.expand(N, -1, -1)
        prefixes = [tuple(int(v) for v in p) for p in tgt_in.tolist()]
        # rows that already hold <eos> or <pad> are finished: what they attend to no longer matters
        live = [b for b, p in enumerate(prefixes) if EOS not in p[1:] and PAD not in p[1:]]
        self._check_masks(N, t, memory, src_mask, tgt_mask, live)
        sources = [tuple(int(round(v)) for v in row) for row in memory[:, :, 0].tolist()]
        rows = [[self.next_logits(s, p[:j + 1]) for j in range(t)] for s, p in zip(sources, prefixes)]
        logits = torch.tensor(rows, dtype=torch.float32).view(N, t, self.vocab)  # (N, t, V)
        return logits[..., _hidden_order(self.vocab)]  # model.generator puts them back in token order

    def _check_masks(self, N, t, memory, src_mask, tgt_mask, live):
        if self.problem is not None or not live:
            return
        i = torch.arange(t)
        causal = (i[:, None] >= i[None, :]).expand(N, 1, t, t)  # (bool .tril() is slow on a busy CPU)
        self.problem = _mask_problem(tgt_mask, causal, "tgt_mask",
                                     "causal_mask(t) of the running prefix: shape (1, 1, t, t) (or (N, 1, t, t)), "
                                     "True on and below the diagonal", live)
        if self.problem is None:
            real = (memory[:, :, 0] != PAD)[:, None, None, :].expand(N, 1, t, memory.size(1))
            self.problem = _mask_problem(src_mask, real, "src_mask",
                                         "the src_mask you were given (B, 1, 1, Ls), with one row per prefix "
                                         "(indexed or repeated like memory)", live)


def _encode_mask_problem(src, src_mask):
    """What is wrong with the mask given to model.encode(src, src_mask) (None when it is src's padding mask)."""
    real = (src != PAD)[:, None, None, :]  # (B, 1, 1, Ls)
    what = ("the src_mask you were given, (B, 1, 1, Ls) (the rows of the sources encoded): the encoder's "
            "self-attention must not see the padding")
    if src_mask is None:
        return f"model.encode got src_mask=None, expected {what}"
    if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool:
        return f"model.encode got a src_mask that is not a bool tensor ({type(src_mask).__name__}), expected {what}"
    if not _broadcasts_to(tuple(src_mask.shape), tuple(real.shape)):
        return f"model.encode got src_mask of shape {tuple(src_mask.shape)} for src of shape {tuple(src.shape)}, " \
               f"expected {what}"
    if not torch.equal(src_mask.expand(real.shape), real):
        return f"model.encode got a src_mask with other values than the padding of src, expected {what}"
    return None


def _broadcasts_to(shape, full) -> bool:
    """Whether a tensor of `shape` broadcasts to exactly `full` (torch.broadcast_shapes without its slow import)."""
    return len(shape) <= len(full) and all(s in (1, f) for s, f in zip(reversed(shape), reversed(full)))


def _mask_problem(mask, expected, name, what, rows):
    """What is wrong with a mask given to model.decode (None when it is right at the given rows)."""
    full = tuple(expected.shape)
    t = full[-2]
    if mask is None:
        return f"model.decode got {name}=None, expected {what}"
    if not isinstance(mask, torch.Tensor):
        return f"model.decode got {name} of type {type(mask).__name__}, expected {what}"
    if mask.dtype != torch.bool:
        return f"model.decode got {name} of dtype {mask.dtype}, expected a bool mask: {what}"
    if not _broadcasts_to(tuple(mask.shape), full):
        return (f"model.decode got {name} of shape {tuple(mask.shape)} with a prefix of length {t} "
                f"({full[0]} rows), expected {what}")
    if not torch.equal(mask.expand(full)[rows], expected[rows]):
        return f"model.decode got a {name} with other values for a prefix of length {t}, expected {what}"
    return None


def _log_softmax(xs):
    m = max(xs)
    s = m + math.log(sum(math.exp(x - m) for x in xs))
    return [x - s for x in xs]


def _table(vocab, seed, scale=2.0, banned=(PAD, BOS), eos=EOS, eos_bias=0.0):
    """next_logits: a fixed pseudo-random vector per (source, prefix); banned tokens get -30."""
    cache = {}

    def next_logits(src, prefix):
        key = (src, prefix)
        if key not in cache:
            rng = random.Random(f"{seed}/{src}/{prefix}")
            row = [rng.gauss(0.0, scale) for _ in range(vocab)]
            for b in banned:
                row[b] = -30.0
            row[eos] += eos_bias
            cache[key] = row
        return cache[key]
    return next_logits


def _spec(vocab, spec, bos=BOS, eos=EOS, default_eos=0.9):
    """next_logits from probabilities: spec[(source, generated tokens)] = {token: probability}; the rest of
    the mass is spread evenly over the other tokens. Unlisted prefixes end with probability default_eos."""
    def next_logits(src, prefix):
        probs = spec.get((src, tuple(prefix[1:])), {eos: default_eos})
        rest = (1.0 - sum(probs.values())) / (vocab - len(probs))
        return [math.log(probs.get(tok, rest)) for tok in range(vocab)]
    return next_logits


def _script(vocab, scripts, eos=EOS, after=4):
    """next_logits of a model that says scripts[source] then <eos> (10 nats ahead of the rest), and
    `after` forever once it has said <eos> or left the script."""
    def next_logits(src, prefix):
        said, script = list(prefix[1:]), scripts[src]
        if said == script[:len(said)]:
            tok = script[len(said)] if len(said) < len(script) else eos
        else:
            tok = after
        return [10.0 if i == tok else 0.0 for i in range(vocab)]
    return next_logits


# ------------------------------------------------------------------------- references in the checks
def _ref_greedy(next_logits, src, max_len, bos=BOS, eos=EOS):
    prefix = (bos,)
    for _ in range(max_len):
        row = next_logits(src, prefix)
        tok = max(range(len(row)), key=row.__getitem__)
        prefix += (tok,)
        if tok == eos:
            return list(prefix[1:-1])
    return list(prefix[1:])


ANY_FINISHED = ("the loop stopped as soon as ONE source produced <eos>: the other sources were cut short; go on "
                "until EVERY source has finished (e.g. finished |= next_token == eos_id, stop when finished.all()) "
                "or max_len tokens were generated")


NO_GENERATOR = ("model.generator was not applied: model.decode returns the decoder's output (N, t, d_model), not "
                "logits; the next-token scores are model.generator(out[:, -1]) (then log_softmax for beam search)")


def _without_generator(next_logits):
    """What a decoder that skips model.generator reads as logits: the fake decoder's raw output."""
    def hidden(src, prefix):
        row = next_logits(src, prefix)
        return [row[j] for j in _hidden_order(len(row))]
    return hidden


def _greedy_variants(next_logits, src, max_len, bos=BOS, eos=EOS):
    """What classic greedy mistakes return for one source."""
    prefix = (bos,)
    for _ in range(max_len + 1):
        row = next_logits(src, prefix)
        prefix += (max(range(len(row)), key=row.__getitem__),)
    run = list(prefix[1:])  # max_len + 1 tokens, never stopping
    first_row = next_logits(src, (bos,))
    first = max(range(len(first_row)), key=first_row.__getitem__)
    cut = run.index(eos) if eos in run[:max_len] else None
    right = run[:cut] if cut is not None else run[:max_len]
    ended = cut is not None
    return {
        "<bos> is in the output: return the generated tokens only (ys[1:])": [bos] + right + ([eos] if ended else []),
        "<bos> is in the output: return the generated tokens only, without <bos> and the final <eos>": [bos] + right,
        "the final <eos> is in the output: cut each answer before its <eos>": right + ([eos] if ended else []),
        "did not stop at <eos>: a source is finished once it produces <eos>; return the tokens before it":
            run[:max_len] if ended else right,
        "did not stop at <eos> (the <eos> tokens were dropped from the output instead): cut each answer at its "
        "first <eos>": [tok for tok in run[:max_len] if tok != eos] if ended else right,
        "generated max_len + 1 tokens: at most max_len tokens, <eos> included":
            run[:run.index(eos)] if eos in run else run,
        "generated only max_len - 1 tokens: the loop must allow max_len tokens, <eos> included":
            right if ended and cut < max_len - 1 else run[:max_len - 1],
        "the logits of the first position were used: the next token is predicted at the LAST position, "
        "model.generator(out[:, -1])": [] if first == eos else [first] * max_len,
        NO_GENERATOR: _ref_greedy(_without_generator(next_logits), src, max_len, bos, eos),
    }


def _ref_penalties(alpha, penalty, bos_counts, probs):
    """(lp, norm) of _ref_beam: the length penalty of a length, and a log p normalized by it (or a mistake's way)."""
    def lp(length):
        return ((5 + length + (1 if bos_counts is True else 0)) / 6) ** alpha if penalty else 1.0

    def norm(s, length):
        if probs:  # a product of probabilities, divided by the penalty
            s = math.exp(s)
        if penalty == "mul":
            return s * lp(length)
        if penalty == "power":
            return s / length ** alpha
        return s / lp(length)
    return lp, norm


def _ref_beam_keeping_finished(scores, norm, max_len, K, bos, eos, eos_counts, finished_in_beam):
    """_ref_beam's mistake of beams that do not set finished hypotheses aside: they stay in the beam, extended
    further, or ("slots") kept there as they are, taking a slot."""
    beams = [((bos,), 0.0)]
    for _ in range(max_len):
        cands = []
        for p, s in beams:
            if eos in p[1:] and finished_in_beam == "slots":
                cands.append((s, p))
                continue
            cands += [(s + v, p + (tok,)) for tok, v in enumerate(scores(p))]
        cands.sort(key=lambda c: -c[0])
        beams = [(p, s) for s, p in cands[:K]]
        if all(eos in p[1:] for p, _ in beams):
            break

    def final(p, s):
        ids = list(p[1:])
        if eos in ids:
            ids = ids[:ids.index(eos)]
            return norm(s, len(ids) + (1 if eos_counts else 0)), ids
        return norm(s, len(ids)), ids
    return max((final(p, s) for p, s in beams), key=lambda f: f[0])[1]


def _ref_stops(t, open_, finished, width, lp, max_len, K, stop_first, stop_at_k, twice, stop, bound) -> bool:
    """Whether _ref_beam stops after step t: the contract's early stop (`stop`) or one of the mistakes' ones."""
    if stop_first and finished:
        return True
    if (stop_at_k and len(finished) >= K) or not open_ or width == 0:
        return True
    if twice and finished and t < max_len and max(s for _, s in open_) / lp(max_len) <= max(f[0] for f in finished):
        return True  # (the early stop of the normalized scores, then divided again: see the end)
    if stop and finished and t < max_len and \
            max(s for _, s in open_) / max(lp(t + 1), lp(max_len)) <= max(f[0] for f in finished):
        return True
    return bool(bound and finished and t < max_len and
                max(s for _, s in open_) / {"current": lp(t), "next": lp(t + 1)}.get(bound, 1.0) <=
                max(f[0] for f in finished))


def _ref_beam(next_logits, src, max_len, K, alpha, bos=BOS, eos=EOS, penalty=True, eos_counts=True,
              stop_first=False, finished_in_beam=None, raw=False, opens_count=True, bos_counts=False,
              accumulate=True, bound=None, shrink=None, all_eos=False, probs=False, open_raw=False,
              first_position=False, stop_at_k=False, twice=False, open_extra=0, every_step=None, stop=False):
    """Beam search as the contract says it (defaults), or with one classic mistake put in. `bound`: a wrong
    early stop, the best open log p divided by the penalty of its current length ("current"), of the next one
    ("next") or by nothing ("raw"), against the best finished score. `penalty`: True, False (none), "mul" (log p
    multiplied by it) or "power" (length ** alpha). `twice`: the normalized scores divided again at the end (by the
    penalty of len(ids) + 1), the early stop made with them as they were (about alpha doubled). `shrink`: "step"
    (only the top K extensions are walked, <eos> ones included) or "forever" (the same, and the width drops by one
    for each finished hypothesis). `open_extra`: the hypotheses still open at max_len divided by the penalty of
    max_len + open_extra. `bos_counts`: True (every length counts <bos>) or "finished" (the finished hypotheses' only).
    `every_step`: the open hypotheses carry log p / length_penalty(t, alpha) from step to step (extended as if it were
    log p), a finished one keeps it; "again": those still open at max_len are divided once more. `stop`: the
    contract's early stop (the best open score / the penalty of max(t + 1, max_len) <= the best finished score),
    which changes nothing for a right search but does for a wrong one."""
    lp, norm = _ref_penalties(alpha, penalty, bos_counts, probs)
    memo = {}

    def scores(prefix):
        if first_position:  # the logits read at position 0: always the prediction after <bos>
            prefix = prefix[:1]
        if prefix not in memo:
            row = next_logits(src, prefix)
            memo[prefix] = row if raw else _log_softmax(row)
        return memo[prefix]

    if finished_in_beam is not None:  # beams that do not set finished hypotheses aside
        return _ref_beam_keeping_finished(scores, norm, max_len, K, bos, eos, eos_counts, finished_in_beam)

    open_, finished, width = [((bos,), 0.0)], [], K  # finished: (normalized score, ids)
    for t in range(1, max_len + 1):
        cands = sorted((((s if accumulate else 0.0) + v, p + (tok,)) for p, s in open_
                        for tok, v in enumerate(scores(p))), key=lambda c: -c[0])
        if shrink:
            cands = cands[:width]
        new_open = []
        for s, p in cands:
            if p[-1] == eos:
                length = (t if eos_counts else t - 1) + (1 if bos_counts == "finished" else 0)
                finished.append((s / lp(t) if every_step else norm(s, length), list(p[1:-1])))
                if shrink == "forever":
                    width -= 1
            elif not all_eos or len(new_open) < K:
                new_open.append((p, s / lp(t) if every_step else s))
                if len(new_open) == K and not all_eos:
                    break
        open_ = new_open
        if _ref_stops(t, open_, finished, width, lp, max_len, K, stop_first, stop_at_k, twice, stop, bound):
            break
    else:
        if opens_count or not finished:
            finished += [(s if open_raw or every_step == "once" else norm(s, max_len + open_extra), list(p[1:]))
                         for p, s in open_]
    if twice:  # the normalized scores divided again, by the penalty of the answer's length + 1 (as if it held <eos>)
        return max(finished, key=lambda f: f[0] / lp(len(f[1]) + 1))[1]
    return max(finished, key=lambda f: f[0])[1]


NO_PENALTY = "no length penalty: the answer must maximize log p / length_penalty(length, alpha), not log p"
EOS_NOT_COUNTED = "the length in the penalty left out <eos>: length counts the generated tokens, <eos> included"
SHRANK = ("the beam shrank: <eos> extensions took places among the top beam_size, so fewer than beam_size hypotheses "
          "stayed open (topk(beam_size) of the extensions, over all or per hypothesis, then the <eos> ones removed); "
          "keep walking down the ranking until beam_size OPEN hypotheses are kept (topk(2 * beam_size) holds enough: "
          "at most beam_size of them end in <eos>)")
SHRANK_FOREVER = ("the beam width dropped by one for each finished hypothesis: beam_size stays the same all along; "
                  "keep walking down the ranking until beam_size OPEN hypotheses are kept")
ALL_EOS = ("every <eos> extension was set aside as finished, also those ranked below the beam_size-th open one: walk "
           "down the ranking and stop once beam_size are open; an <eos> extension counts only when it comes before")
STOP_FIRST = ("the search stopped at the first finished hypothesis: set it aside and go on while an open hypothesis "
              "can still beat it")
SLOTS = ("finished hypotheses kept their beam slots: set a hypothesis ending in <eos> aside, and keep walking down the "
         "ranking until beam_size OPEN hypotheses are kept")
STOP_AT_K = ("the search stopped once beam_size hypotheses had finished: go on while an open hypothesis can still "
             "beat the best finished one (its log p / length_penalty(max_len, alpha) > the best finished score)")
INIT_COPIES = ("the search started with beam_size copies of <bos>, all with log p 0: each step then keeps beam_size "
               "copies of one hypothesis (a beam of one); start with a single hypothesis, or give the copies log p "
               "-inf")
ALPHA_IGNORED = "the alpha argument is ignored (0.6 used)"
PENALTY_TWICE = ("divided by the length penalty twice (as if alpha were doubled): a finished hypothesis's score is "
                 "log p / length_penalty(length, alpha), compared as it is, not divided again")
BEAM_SIZE_IGNORED = ("the beam_size argument is ignored: the search keeps 4 hypotheses (the default) whatever "
                     "beam_size says; use the argument wherever the width is set (topk, the number kept)")
PENALTY_MUL = ("log p multiplied by length_penalty instead of divided by it: the score is log p / "
               "length_penalty(length, alpha)")
PENALTY_POWER = "the penalty is length ** alpha: divide by length_penalty(length, alpha) = ((5 + length) / 6) ** alpha"
PROBS = ("probabilities multiplied instead of log-probabilities added: the score is the SUM of the tokens' log p, and "
         "the length penalty divides that sum")
BOS_COUNTED = "the length in the penalty counted <bos>: length counts the generated tokens (<eos> included), not <bos>"
EVERY_STEP = ("the length penalty was applied at every step: the open hypotheses carried log p / length_penalty(t, "
              "alpha) and were extended as if it were log p, so each step divided the earlier ones again; carry the "
              "plain sum of log p and divide by length_penalty(length, alpha) once, when a hypothesis is finished "
              "(or at max_len)")
BOS_FINISHED = ("the length in a finished hypothesis's penalty counted <bos> (the length of the prefix with <bos> and "
                "<eos>: t + 1 at step t): length counts the generated tokens, <eos> included, not <bos>")
BEAM_MISTAKES = {
    NO_PENALTY: dict(penalty=False),
    EOS_NOT_COUNTED: dict(eos_counts=False),
    PENALTY_MUL: dict(penalty="mul"),
    PENALTY_POWER: dict(penalty="power"),
    PENALTY_TWICE: dict(twice=True),
    PROBS: dict(probs=True),
    STOP_FIRST: dict(stop_first=True),
    STOP_AT_K: dict(stop_at_k=True),
    SLOTS: dict(finished_in_beam="slots"),
    SHRANK: dict(shrink="step"),
    SHRANK_FOREVER: dict(shrink="forever"),
    ALL_EOS: dict(all_eos=True),
    "finished hypotheses stayed in the beam and were extended past <eos>: set a hypothesis ending in <eos> aside; "
    "only open ones are extended": dict(finished_in_beam="extend"),
    "raw logits used as scores: rank by log-probabilities, log_softmax(model.generator(...))": dict(raw=True),
    "the logits of the first position were used: the next token is predicted at the LAST position, "
    "model.generator(out[:, -1])": dict(first_position=True),
    "hypotheses still open after max_len tokens were not counted: they count as finished (length max_len)":
        dict(opens_count=False),
    "hypotheses still open after max_len tokens were compared by their raw log p: divide them by "
    "length_penalty(max_len, alpha) too": dict(open_raw=True),
    "hypotheses still open after max_len tokens were divided by length_penalty(max_len + 1, alpha): their length is "
    "max_len, the tokens generated (the prefix's length also counts <bos>)": dict(open_extra=1),
    BOS_COUNTED: dict(bos_counts=True),
    BOS_FINISHED: dict(bos_counts="finished", stop=True),
    EVERY_STEP: dict(every_step="once", stop=True),
    EVERY_STEP + " (those open at max_len were divided once more)": dict(every_step="again", stop=True),
    "log-probabilities not accumulated: a hypothesis's score is the SUM of its tokens' log p (its parent's score "
    "+ the new token's log p), not the last token's log p": dict(accumulate=False),
    "the search stopped too early: an open hypothesis can still win while its log p / length_penalty(max_len, "
    "alpha) beats the best finished score (divide by the penalty of max_len, the largest it can reach, not of "
    "its current length)": dict(bound="current"),
    "the search stopped too early: an open hypothesis can still win while its log p / length_penalty(max_len, "
    "alpha) beats the best finished score (divide by the penalty of max_len, the largest it can reach, not of the "
    "next length t + 1)": dict(bound="next"),
    "the search stopped too early: compare the best finished score with the best open log p / "
    "length_penalty(max_len, alpha), not with the open log p itself": dict(bound="raw"),
}


def _beam_variants(next_logits, sources, max_len, K, alpha, bos=BOS, eos=EOS):
    out = {}
    for description, flags in BEAM_MISTAKES.items():
        out[description] = [_ref_beam(next_logits, s, max_len, K, alpha, bos, eos, **flags) for s in sources]
    expected = [_ref_beam(next_logits, s, max_len, K, alpha, bos, eos) for s in sources]
    if K > 1:
        out[INIT_COPIES] = [_ref_beam(next_logits, s, max_len, 1, alpha, bos, eos) for s in sources]
    if alpha != 0.6:
        out[ALPHA_IGNORED] = [_ref_beam(next_logits, s, max_len, K, 0.6, bos, eos) for s in sources]
    if K != 4:
        out[BEAM_SIZE_IGNORED] = [_ref_beam(next_logits, s, max_len, 4, alpha, bos, eos) for s in sources]
    out[NO_GENERATOR] = [_ref_beam(_without_generator(next_logits), s, max_len, K, alpha, bos, eos) for s in sources]
    out["<bos> is in the output: return the generated tokens only"] = [[bos] + e for e in expected]
    out["searched max_len + 1 tokens: at most max_len tokens are generated, <eos> included"] = \
        [_ref_beam(next_logits, s, max_len + 1, K, alpha, bos, eos) for s in sources]
    if max_len > 1:
        out["searched only max_len - 1 tokens: the loop must allow max_len tokens, <eos> included"] = \
            [_ref_beam(next_logits, s, max_len - 1, K, alpha, bos, eos) for s in sources]
    return expected, out


def _brute_force(next_logits, src, max_len, alpha, bos=BOS, eos=EOS, eos_counts=True):
    """The best log p / length_penalty over every sequence: ends with <eos>, or is max_len long."""
    best = (-math.inf, None)

    def walk(prefix, logp):
        nonlocal best
        t = len(prefix)  # tokens generated after the next one
        row = next_logits(src, prefix)
        for tok, v in enumerate(_log_softmax(row)):
            if row[tok] <= -30.0:  # a banned token (see _table): it cannot win
                continue
            s = logp + v
            if tok == eos:
                length = t if eos_counts else t - 1
                cand = (s / ((5 + length) / 6) ** alpha, list(prefix[1:]))
            elif t == max_len:
                cand = (s / ((5 + max_len) / 6) ** alpha, list(prefix[1:]) + [tok])
            else:
                walk(prefix + (tok,), s)
                continue
            if cand[0] > best[0]:
                best = cand
    walk((bos,), 0.0)
    return best[1]


# ---------------------------------------------------------------------------------- comparisons
def _as_lists(got, n, what):
    if isinstance(got, torch.Tensor):
        raise CheckFailure(what, f"a list of {n} lists of token ids", f"a tensor of shape {tuple(got.shape)}",
                           "return a Python list with one list of ids per source (answers differ in length)")
    try:
        rows = list(got)
        out = [[int(v) for v in (r.tolist() if isinstance(r, torch.Tensor) else r)] for r in rows]
    except (TypeError, ValueError):
        flat = isinstance(got, (list, tuple)) and all(isinstance(v, int) for v in got)
        raise CheckFailure(what, f"a list of {n} lists of token ids", fmt(got),
                           "a flat list of ids: return one list per source, [[ids of source 0]], also for a batch "
                           "of one (do not squeeze the batch axis away)" if flat else
                           "return [[ids of source 0], [ids of source 1], ...]") from None
    if len(out) != n:
        raise CheckFailure(what, f"{n} answers, one per source", f"{len(out)}",
                           "one list of ids per row of src")
    return out


def _expect_lists(got, expected, what, hint, mistakes=None, sources=None, eos=EOS, alone=None, prefer=(), rank=None):
    """`alone(i)`: the decoder's answer for source i decoded in a batch of its own (to tell a mistake in
    the search from sources of a batch that disturb each other). `prefer`: descriptions of `mistakes` named
    first when several match (the ones this check is about). `mistakes` may be a function that makes them:
    it is called only for a wrong answer (they take time to compute). `rank(names)`: the matching descriptions
    reordered, the best supported first (see _beam_ranker); at most MAX_NAMED are named."""
    got = _as_lists(got, len(expected), what)
    if got == expected:
        return
    if callable(mistakes):
        mistakes = mistakes()
    i = next(j for j, (a, b) in enumerate(zip(got, expected)) if a != b)
    src = f" for source {i}" + (f" {list(sources[i])}" if sources is not None else "")
    if all([v for v in g if v != PAD] == e for g, e in zip(got, expected)) and \
            all(PAD not in e for e in expected):
        raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                           f"the answer holds <pad> ({PAD}) tokens: the rows of a batch that finished early were "
                           "padded, and the padding was returned; each answer is the generated tokens before its "
                           "<eos>, nothing after it")
    names = matching_mistakes(got, mistakes, lambda g, wrong: wrong == g, every=True)
    batch_level = [d for d in names if d in BATCH_MISTAKES]
    if batch_level:  # a mistake that shows only in a batch: named as it is, not as 'sources disturb each other'
        names = batch_level + [d for d in names if d not in batch_level]
        raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                           "; or ".join(names[:MAX_NAMED]))
    cut = [g[:g.index(eos)] if eos in g else g for g in got]
    # only what follows a first <eos> is wrong
    if not names and cut == expected and all(eos not in e for e in expected):
        # the batch is the cause only where each source decoded alone ends right: a decoder that goes past <eos> on its
        # own (a finished hypothesis extended) is not told about batches, which its other lines would contradict
        in_batch = alone is not None and len(expected) > 1 and _right_alone(alone, expected)
        raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                           f"the answer goes on after its first <eos> ({eos}), which is where it ends: " +
                           ("in a batch a source that has finished keeps getting tokens while the others go on, and a "
                            "cut at the last token (or at the last <eos>) keeps them" if in_batch else
                            "each source decoded on its own does not end right either, so a finished sequence was "
                            "extended past its <eos> (or the answer cut at its last <eos>, not its first)") +
                           "; cut each answer before its first <eos>, row[:row.index(eos_id)]")
    if alone is not None and len(expected) > 1 and _right_alone(alone, expected):
        raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                           "every source decoded alone (a batch of one) gets the right answer, but not in a batch: "
                           "the sources of a batch disturb each other. " + BATCH_HINT)
    names.sort(key=lambda d: prefer.index(d) if d in prefer else len(prefer))
    if rank is not None and len(names) > 1:
        names = rank(names)
    if not names and eos in got[i]:
        names = [f"the answer holds <eos> ({eos}): a hypothesis is finished at its <eos>; cut the answer before it, "
                 "and never extend a finished hypothesis"]
    raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                       "; or ".join(names[:MAX_NAMED]) if names else hint)


MAX_NAMED = 3  # the causes named for one wrong answer, the likeliest first: a longer list hides the real one
BATCH_MISTAKES = {ANY_FINISHED}


BATCH_HINT = ("Keep each source's rows apart: decode until EVERY source has finished (not until the first one "
              "does), give each row (hypothesis) its own source's memory and src_mask row (repeat_interleave, not "
              "repeat), rank and keep the extensions of each source separately (not over the whole batch), and keep "
              "the bookkeeping of which row belongs to which source right when finished rows are dropped")


def _right_alone(alone, expected) -> bool:
    try:
        return all(_as_lists(alone(i), 1, "")[0] == e for i, e in enumerate(expected))
    except CheckTimeout:  # the code hangs on a batch of one: a time-out, and the next checks are skipped
        raise
    except Exception:  # noqa: BLE001  (any other failure alone: no diagnosis, the usual message)
        return False


def _decode_with(decoder, model, src, mask, *args, **kwargs):
    """decoder(model, src, mask, ...) on copies of src and mask, which must come back unchanged."""
    given_src, given_mask = src.clone(), mask.clone()
    got = decoder(model, given_src, given_mask, *args, **kwargs)
    for name, given, original in (("src", given_src, src), ("src_mask", given_mask, mask)):
        if given.shape != original.shape or not torch.equal(given, original):
            changed = (f"shape {tuple(given.shape)} instead of {tuple(original.shape)}" if given.shape != original.shape
                       else f"{int((given != original).sum())} of its {original.numel()} values changed")
            raise CheckFailure(f"the {name} passed to {getattr(decoder, '__name__', 'the decoder')}",
                               "unchanged after the call", changed,
                               f"the caller's {name} was edited in place (an in-place op such as masked_fill_, "
                               "unsqueeze_ or an assignment into it): work on new tensors")
    return got


def _expect_mode_kept(model, name):
    """The contract's side effects: decoding leaves the caller's model in the mode it was given (train mode here): a
    decoder that calls model.eval() and does not switch it back leaves a training loop that validates by decoding
    without dropout from then on."""
    if not all(part.training for part in model.modules()):
        raise CheckFailure(f"the model after {name}(model, ...), given in train mode", "still in train mode (the "
                           "caller's mode)", "switched to eval mode",
                           f"{name} calls model.eval() and leaves it so: the caller decides the mode (a training loop "
                           "that decodes to validate would go on without dropout); drop the call, or restore the mode "
                           "afterwards, was = model.training; model.eval(); ...; model.train(was)")


def _alone(decoder, next_logits, vocab, src, mask, *args, **kwargs):
    """alone(i) for _expect_lists: row i of the batch (with its padding) decoded on its own by a fresh model."""
    return lambda i: decoder(_FakeModel(vocab, next_logits), src[i:i + 1].clone(), mask[i:i + 1].clone(), *args,
                             **kwargs)


def _src(rows):
    """A right-padded batch of source ids and its padding mask (B, 1, 1, Ls)."""
    L = max(len(r) for r in rows)
    src = torch.tensor([list(r) + [PAD] * (L - len(r)) for r in rows])
    return src, (src != PAD)[:, None, None, :]


def _keys(src):
    return [tuple(r) for r in src.tolist()]


GREEDY_HINT = ("memory = model.encode(src, src_mask); ys = <bos> column; repeat max_len times: "
               "logits = model.generator(model.decode(ys, memory, src_mask, causal_mask(t))[:, -1]), append the "
               "argmax; a source is done at its <eos>; return each row's tokens after <bos>, cut before <eos>")


def _stopped_at_first(next_logits, keys, max_len, bos=BOS, eos=EOS):
    """What a batch greedy decoder that stops once any source has produced <eos> returns."""
    runs = [_ref_greedy(next_logits, k, max_len, bos, eos) for k in keys]
    # an answer shorter than max_len ended with <eos>, generated at step len(answer) + 1
    steps = min((len(r) + 1 for r in runs if len(r) < max_len), default=max_len)
    return [r[:steps] for r in runs]


OVER_THE_BATCH = ("(log_)softmax over the batch axis (dim=0) before the argmax: normalize over the vocabulary, "
                  "dim=-1 (or take the argmax of the logits themselves)")


def _over_the_batch(next_logits, keys, max_len, bos=BOS, eos=EOS):
    """What a batch greedy decoder returns when it takes log_softmax(logits, dim=0), over the sources, before the
    argmax (finished rows stay in the batch and are given <eos>)."""
    prefixes, done = [(bos,)] * len(keys), [False] * len(keys)
    for _ in range(max_len):
        columns = [_log_softmax(list(c)) for c in zip(*(next_logits(k, p) for k, p in zip(keys, prefixes)))]
        toks = [eos if d else max(range(len(columns)), key=lambda v: columns[v][b]) for b, d in enumerate(done)]
        prefixes = [p + (t,) for p, t in zip(prefixes, toks)]
        done = [d or t == eos for d, t in zip(done, toks)]
        if all(done):
            break
    return [list(p[1:p.index(eos)] if eos in p else p[1:]) for p in prefixes]


def _greedy_case(greedy_decode, next_logits, vocab, rows, max_len, what, bos=BOS, eos=EOS, extra=None):
    model = _FakeModel(vocab, next_logits)
    src, mask = _src(rows)
    kwargs = {} if (bos, eos) == (BOS, EOS) else dict(bos_id=bos, eos_id=eos)
    got = _decode_with(greedy_decode, model, src, mask, max_len, **kwargs)
    keys = _keys(src)
    expected = [_ref_greedy(next_logits, k, max_len, bos, eos) for k in keys]

    def mistakes():
        per_source = [_greedy_variants(next_logits, k, max_len, bos, eos) for k in keys]
        out = {d: [v[d] for v in per_source] for d in per_source[0]}
        out[ANY_FINISHED] = _stopped_at_first(next_logits, keys, max_len, bos, eos)
        out[OVER_THE_BATCH] = _over_the_batch(next_logits, keys, max_len, bos, eos)
        out.update(extra(keys) if extra else {})
        return out
    _expect_lists(got, expected, what, GREEDY_HINT, mistakes, rows, eos,
                  _alone(greedy_decode, next_logits, vocab, src, mask, max_len, **kwargs))
    return model


# ------------------------------------------------------------------------------------ greedy_decode
@register("greedy_decode", "equals a reference greedy decoder on a batch of sources")
def _greedy_table(greedy_decode):
    rows = [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17], [18]]
    fn = _table(7, seed=1, eos_bias=1.0)
    model = _greedy_case(greedy_decode, fn, 7, rows, 6, "greedy_decode(model, 6 sources, max_len=6)")
    _expect_mode_kept(model, "greedy_decode")
    # a batch of one source: code that squeezes the batch axis away, or returns a flat list, fails here
    _greedy_case(greedy_decode, fn, 7, [[16, 17]], 6, "greedy_decode(model, a batch of one source [[16, 17]], "
                                                       "max_len=6)")


@register("greedy_decode", "stops each source at its <eos>: no <bos>, no <eos> in the answer")
def _greedy_stops(greedy_decode):
    scripts = {(7, 0, 0): [], (8, 9, 0): [5, 6], (10, 11, 12): [6, 5, 4, 3]}
    rows = [[7], [8, 9], [10, 11, 12]]
    _greedy_case(greedy_decode, _script(7, scripts), 7, rows, 8,
                 "greedy_decode(a model that says [], [5, 6], [6, 5, 4, 3] then <eos>, max_len=8)")


@register("greedy_decode", "generates at most max_len tokens, <eos> included")
def _greedy_max_len(greedy_decode):
    scripts = {(7, 0): [4, 5, 6, 4, 5, 6, 4, 5, 6], (8, 9): [5, 6, 3], (10, 0): [6, 5, 4, 3]}
    rows = [[7], [8, 9], [10]]
    _greedy_case(greedy_decode, _script(7, scripts), 7, rows, 4,
                 "greedy_decode(a model that says 9, 3 and 4 tokens then <eos>, max_len=4)")
    src, mask = _src(rows)
    what = "greedy_decode(the same model, max_len=0)"
    got = _as_lists(_decode_with(greedy_decode, _FakeModel(7, _script(7, scripts)), src, mask, 0), 3, what)
    if got != [[]] * 3:
        raise CheckFailure(what, fmt([[]] * 3), fmt(got),
                           "max_len=0 allows no token at all: the loop runs max_len times (for _ in range(max_len)), "
                           "not at least once (a do-while loop, or range(max(max_len, 1)))")


@register("greedy_decode", "passes model.decode the causal mask of the prefix and the source mask")
def _greedy_masks(greedy_decode):
    rows = [[7, 8, 9], [10], [11, 12]]
    model = _greedy_case(greedy_decode, _table(6, seed=2, eos_bias=0.5), 6, rows, 5,
                         "greedy_decode(model, 3 sources, max_len=5)")
    if model.problem:
        raise CheckFailure("the masks given to the model", None, None, model.problem)


@register("greedy_decode", "uses bos_id and eos_id")
def _greedy_ids(greedy_decode):
    rows = [[7, 8], [9], [10, 11], [12, 13]]
    fn = _table(7, seed=3, banned=(PAD, 5), eos=3, eos_bias=1.0)

    def extra(keys):
        return {"the bos_id argument is ignored (<bos> = 1 was used)":
                    [_ref_greedy(fn, k, 6, BOS, 3) for k in keys],
                "the eos_id argument is ignored (<eos> = 2 was used)":
                    [_ref_greedy(fn, k, 6, 5, EOS) for k in keys]}
    _greedy_case(greedy_decode, fn, 7, rows, 6, "greedy_decode(model, src, src_mask, 6, bos_id=5, eos_id=3)",
                 bos=5, eos=3, extra=extra)


# ----------------------------------------------------------------------------------- length_penalty
def _as_number(x) -> float:
    """float(x) for a Python, numpy or torch number, a one-element tensor or array included."""
    if isinstance(x, (str, bytes)):
        raise TypeError("a string is not a number")
    item = getattr(x, "item", None)  # torch.Tensor, numpy arrays and scalars (a size-1 array is a number too)
    return float(item() if callable(item) and not isinstance(x, (int, float)) else x)


def _lp_number(length_penalty, length, alpha):
    what = f"length_penalty({length}, {alpha})"
    got = length_penalty(length, alpha)
    try:
        return _as_number(got), what
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailure(what, "a number", fmt(got), "return ((5 + length) / 6) ** alpha") from None


LP_MISTAKES = {
    "the exponent is missing: ((5 + length) / 6) ** alpha": lambda n, a: (5 + n) / 6,
    "only the numerator is raised to alpha: ((5 + length) / 6) ** alpha, parentheses around the quotient":
        lambda n, a: (5 + n) ** a / 6,
    "the exponent's sign is flipped: ((5 + length) / 6) ** alpha": lambda n, a: ((5 + n) / 6) ** -a,
    "length ** alpha: the penalty of Wu et al. 2016 is ((5 + length) / 6) ** alpha": lambda n, a: n ** a,
    "divided by 5 instead of 6: ((5 + length) / 6) ** alpha": lambda n, a: ((5 + n) / 5) ** a,
    "(1 + length) instead of (5 + length): ((5 + length) / 6) ** alpha": lambda n, a: ((1 + n) / 6) ** a,
    "only 6 is raised to alpha: (5 + length) / 6 ** alpha is (5 + length) / (6 ** alpha); put parentheses around "
    "the quotient": lambda n, a: (5 + n) / 6 ** a,
    "multiplied by alpha instead of raised to it: ((5 + length) / 6) ** alpha": lambda n, a: (5 + n) / 6 * a,
    "integer division: ((5 + length) / 6) ** alpha with /, not //": lambda n, a: ((5 + n) // 6) ** a,
    "length and alpha swapped: ((5 + length) / 6) ** alpha": lambda n, a: ((5 + a) / 6) ** n,
    "5 + length / 6 divides only length (operator precedence): put parentheses around (5 + length)":
        lambda n, a: (5 + n / 6) ** a,
    "the alpha argument is ignored (0.6 used)": lambda n, a: ((5 + n) / 6) ** 0.6,
    "the logarithm of the penalty: alpha * log((5 + length) / 6) is log(length_penalty); return "
    "((5 + length) / 6) ** alpha": lambda n, a: a * math.log((5 + n) / 6),
}


def _expect_lp(length_penalty, length, alpha):
    got, what = _lp_number(length_penalty, length, alpha)
    expected = ((5 + length) / 6) ** alpha
    if math.isclose(got, expected, rel_tol=1e-6):  # (float32 arithmetic is right too)
        return
    hint = "; or ".join(d for d, f in LP_MISTAKES.items()
                        if math.isclose(got, f(length, alpha), rel_tol=1e-6, abs_tol=1e-12)) or \
        "((5 + length) / 6) ** alpha"
    raise CheckFailure(what, f"{expected:.6g}", f"{got:.6g}", hint)


@register("length_penalty", "equals ((5 + length) / 6) ** alpha")
def _lp_formula(length_penalty):
    for length, alpha in ((7, 0.6), (10, 1.0), (3, 1.5), (20, 0.6), (2, 2.0)):
        _expect_lp(length_penalty, length, alpha)


@register("length_penalty", "is 1 for alpha = 0 (no penalty) and for length 1")
def _lp_ones(length_penalty):
    for length, alpha in ((9, 0.0), (1, 0.6), (1, 2.0)):
        _expect_lp(length_penalty, length, alpha)


@register("length_penalty", "grows with the length and with alpha")
def _lp_grows(length_penalty):
    for alpha in (0.6, 1.2):
        values = [_lp_number(length_penalty, n, alpha)[0] for n in range(1, 12)]
        if any(b <= a for a, b in zip(values, values[1:])):
            raise CheckFailure(f"length_penalty(1..11, {alpha})", "increasing with the length", fmt(values),
                               "((5 + length) / 6) ** alpha: longer hypotheses get a larger divisor")
    a, b = _lp_number(length_penalty, 10, 0.5)[0], _lp_number(length_penalty, 10, 1.0)[0]
    if not b > a:
        raise CheckFailure("length_penalty(10, 0.5) < length_penalty(10, 1.0)", "True", f"{a:.4g} and {b:.4g}",
                           "use alpha as the exponent: ((5 + length) / 6) ** alpha")


# -------------------------------------------------------------------------------------- beam_search
BEAM_HINT = ("rank every one-token extension of the open hypotheses by log p (log_softmax of model.generator), "
             "set the ones ending in <eos> aside as finished, keep beam_size open ones; after max_len tokens the "
             "open ones count as finished; answer: the finished one with the best log p / length_penalty(length, "
             "alpha), length counting <eos>")


def _beam_case(beam_search, next_logits, vocab, rows, max_len, K, alpha, what, bos=BOS, eos=EOS, extra=None,
               prefer=()):
    model = _FakeModel(vocab, next_logits)
    src, mask = _src(rows)
    kwargs = dict(beam_size=K, alpha=alpha)
    if (bos, eos) != (BOS, EOS):
        kwargs.update(bos_id=bos, eos_id=eos)
    got = _decode_with(beam_search, model, src, mask, max_len, **kwargs)
    keys = _keys(src)
    expected = [_ref_beam(next_logits, k, max_len, K, alpha, bos, eos) for k in keys]

    def mistakes():
        out = _beam_variants(next_logits, keys, max_len, K, alpha, bos, eos)[1]
        out.update(extra(keys) if extra else {})
        return out
    _expect_lists(got, expected, what, BEAM_HINT, mistakes, rows, eos,
                  _alone(beam_search, next_logits, vocab, src, mask, max_len, **kwargs), prefer,
                  _beam_ranker(beam_search))
    return model, got


# the spec of _beam_aside: source 7, <eos> first (p 0.5), but 5 6 3 <eos> (p 0.18) wins with alpha 3; source 8,
# <eos> first (p 0.3), then 4 <eos> (p 0.65 x 0.95) is more probable (alpha 0)
ASIDE_SPEC = {((7,), ()): {EOS: 0.5, 4: 0.3, 5: 0.18}, ((7,), (4,)): {EOS: 0.99}, ((7,), (5,)): {6: 0.99},
              ((7,), (5, 6)): {3: 0.99}, ((7,), (5, 6, 3)): {EOS: 0.99},
              ((8,), ()): {EOS: 0.3, 4: 0.65}, ((8,), (4,)): {EOS: 0.95}}
# the specs of _beam_penalty: [<eos>] log p -1 against [4, 5, <eos>] log p -1.25, -1.6, -1.5 (sources 9, 10, 11);
# and for beam_size=1, [<eos>] log p -0.8 against [4, 5, <eos>] log p -0.92 (source 12)
PENALTY_SPEC = {key: probs for s, logp in ((9, -1.25), (10, -1.6), (11, -1.5))
                for key, probs in ((((s,), ()), {EOS: math.exp(-1.0), 4: math.exp(logp)}),
                                   (((s,), (4,)), {5: 0.9999}), (((s,), (4, 5)), {EOS: 0.9999}))}
K1_SPEC = {((12,), ()): {EOS: 0.45, 4: 0.4}, ((12,), (4,)): {5: 0.9999}, ((12,), (4, 5)): {EOS: 0.9999}}
K1_GREEDY = ("beam_size=1 was run as greedy decoding: with alpha > 0 the search must set [<eos>] aside and go on "
             "with the best open hypothesis, which can win after the penalty")


def _beam_probes():
    """(next_logits, vocab, sources, max_len, beam_size, alpha) of small searches that tell the classic beam
    mistakes apart (each mistake of BEAM_MISTAKES gives other answers than the others on them, but for a few
    that always give the same)."""
    return [(_spec(7, ASIDE_SPEC), 7, [[7]], 4, 2, 3.0), (_spec(7, ASIDE_SPEC), 7, [[8]], 4, 2, 0.0),
            (_spec(9, PENALTY_SPEC), 9, [[9], [10], [11]], 4, 4, 1.5), (_spec(9, K1_SPEC), 9, [[12]], 4, 1, 1.5),
            (_table(7, seed=35), 7, [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17], [18, 19]], 6, 3, 0.6),
            (_table(7, seed=71, eos_bias=0.5), 7, [[7, 8], [9], [10, 11], [12, 13]], 5, 3, 1.2),
            (_table(7, seed=85), 7, [[7, 8], [9], [10, 11], [12, 13]], 5, 2, 2.0),
            (_table(7, seed=5, eos_bias=1.0), 7, [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17]], 6, 1, 0.0)]


PROBE_SECONDS = 3.0  # the most time the probes of one wrong answer may take
_PROBE_CACHE: list = []  # [(probe, the expected answers, {mistake: its answers})], made once
_LEARNER_ANSWERS = weakref.WeakKeyDictionary()  # beam_search -> {probe index: its answers, or None if it failed}


def _probe_variants():
    if not _PROBE_CACHE:
        for probe in _beam_probes():
            fn, _, rows, max_len, K, alpha = probe
            keys = _keys(_src(rows)[0])
            expected, out = _beam_variants(fn, keys, max_len, K, alpha)
            out.setdefault(INIT_COPIES, expected)  # (beam_size 1: copies change nothing)
            out.setdefault(ALPHA_IGNORED, expected)  # (alpha 0.6)
            if K == 1:
                out[K1_GREEDY] = [_ref_greedy(fn, k, max_len) for k in keys]
            _PROBE_CACHE.append((probe, expected, out))
    return _PROBE_CACHE


def _learner_answers(beam_search) -> dict:
    """The learner's answers to the probes run so far, kept for the other checks of the same check() run
    (_beam_format, the first check of beam_search, forgets them)."""
    try:
        return _LEARNER_ANSWERS.setdefault(beam_search, {})
    except TypeError:  # (an object that takes no weak reference: nothing kept)
        return {}


def _beam_ranker(beam_search):
    """rank(names) for _expect_lists: several mistakes often give the same wrong answer on one search. The
    learner's beam_search is run on the probes, and the mistakes are ordered by how many probe answers they
    contradict (fewest first), then by how many wrong answers they explain; those contradicted are left out
    when some mistake contradicts none. A description that a probe cannot replay (an extra of one check) is
    neither contradicted nor confirmed there."""
    def rank(names):
        contradicted, confirmed = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
        answers = _learner_answers(beam_search)
        start = time.monotonic()
        for index, ((fn, vocab, rows, max_len, K, alpha), expected, out) in enumerate(_probe_variants()):
            if index not in answers:
                if time.monotonic() - start > PROBE_SECONDS:
                    break
                src, mask = _src(rows)
                try:
                    answers[index] = _as_lists(beam_search(_FakeModel(vocab, fn), src, mask, max_len, beam_size=K,
                                                           alpha=alpha), len(rows), "")
                except CheckTimeout:  # out of time: rank by the probes run so far
                    break
                except Exception:  # noqa: BLE001  (a probe the learner's code fails on tells nothing)
                    answers[index] = None
            got = answers[index]
            if got is None:
                continue
            for n in names:
                if n in out:
                    if out[n] != got:
                        contradicted[n] += 1
                    elif got != expected:
                        confirmed[n] += 1
        ranked = sorted(names, key=lambda n: (contradicted[n], -confirmed[n]))  # (stable: `prefer` on ties)
        return [n for n in ranked if contradicted[n] == 0] or ranked
    return rank


@register("beam_search", "returns one list per source: no <bos>, no <eos>, at most max_len ids")
def _beam_format(beam_search):
    _learner_answers(beam_search).clear()  # (a new check() run: the code it calls may have changed)
    rows = [[7, 8], [9], [10, 11], [12, 13]]
    fn = _table(7, seed=4)
    model = _FakeModel(7, fn)
    src, mask = _src(rows)
    what = "beam_search(model, 4 sources, max_len=5, beam_size=3, alpha=0.6)"
    got = _as_lists(_decode_with(beam_search, model, src, mask, 5, beam_size=3, alpha=0.6), 4, what)
    keys = _keys(src)
    if got == [_ref_beam(_without_generator(fn), k, 5, 3, 0.6) for k in keys] != [_ref_beam(fn, k, 5, 3, 0.6)
                                                                                   for k in keys]:
        i = next(j for j, k in enumerate(keys) if got[j] != _ref_beam(fn, k, 5, 3, 0.6))
        raise CheckFailure(f"{what}: the answer for source {i}", fmt(_ref_beam(fn, keys[i], 5, 3, 0.6)), fmt(got[i]),
                           NO_GENERATOR)
    for i, ids in enumerate(got):
        if ids[:1] == [BOS]:
            raise CheckFailure(f"{what}: the answer for source {i}", "ids without <bos>", fmt(ids),
                               "drop the <bos> that every hypothesis starts with")
        if EOS in ids:
            raise CheckFailure(f"{what}: the answer for source {i}", "ids without <eos>", fmt(ids),
                               "cut the final <eos>" if ids[-1] == EOS and EOS not in ids[:-1] else
                               "tokens after <eos>: a hypothesis ending in <eos> is finished and never extended")
        if len(ids) > 5:
            raise CheckFailure(f"{what}: the answer for source {i}", "at most max_len = 5 ids", f"{len(ids)} ids",
                               "stop after max_len generated tokens (<eos> included)")
    _expect_mode_kept(model, "beam_search")


@register("beam_search", "beam_size=1 with alpha=0 equals greedy decoding")
def _beam_greedy(beam_search):
    rows = [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17]]
    fn = _table(7, seed=5, eos_bias=1.0)
    model = _FakeModel(7, fn)
    src, mask = _src(rows)
    got = _decode_with(beam_search, model, src, mask, 6, beam_size=1, alpha=0.0)
    keys = _keys(src)
    expected = [_ref_greedy(fn, k, 6) for k in keys]
    _expect_lists(got, expected, "beam_search(model, 5 sources, max_len=6, beam_size=1, alpha=0)",
                  "with one hypothesis and no length penalty, each step keeps the most probable open extension: "
                  "greedy decoding", lambda: _beam_variants(fn, keys, 6, 1, 0.0)[1], rows,
                  alone=_alone(beam_search, fn, 7, src, mask, 6, beam_size=1, alpha=0.0),
                  rank=_beam_ranker(beam_search), prefer=(BEAM_SIZE_IGNORED,))


@register("beam_search", "a beam as wide as the search space finds the brute-force best log p / penalty")
def _beam_exhaustive(beam_search):
    rows = [[7, 8], [9, 10]]
    # live tokens: <eos>, 3, 4, 5; <pad>, <bos> and 6..59 get -30. (The wide vocabulary lets a beam that takes
    # topk(2 * beam_size) of the extensions of its live hypotheses run, as it would with any real vocabulary.)
    fn = _table(60, seed=54, scale=1.5, banned=(PAD, BOS) + tuple(range(6, 60)), eos_bias=-0.5)
    for alpha in (0.6, 1.5):
        _exhaustive_case(beam_search, fn, 60, rows, 4, 27, alpha, "beam_size 27 = 3 ** 3 keeps every hypothesis "
                         "that can win open (3 tokens besides <eos> can win)")
    # a vocabulary of 5 (<pad>, <bos>, <eos>, 3, 4) and beam_size 4 = 2 ** 2: at the first step the one hypothesis
    # has 5 extensions, fewer than 2 * beam_size
    _exhaustive_case(beam_search, _table(5, seed=56, scale=1.5), 5, rows, 3, 4, 1.0,
                     "beam_size 4 = 2 ** 2 keeps every hypothesis that can win open (2 tokens besides <eos> can win)",
                     " (a vocabulary of 5 tokens)")


TOPK_TOO_MANY = ("topk(2 * beam_size) asked for more extensions than there are: at the first step one hypothesis has "
                 "only V = {V} extensions (k * V in general, fewer than 2 * beam_size with a tiny vocabulary); take "
                 "topk(min(2 * K, k * V)): all the extensions")


def _exhaustive_case(beam_search, fn, vocab, rows, max_len, K, alpha, why, about=""):
    model = _FakeModel(vocab, fn)
    src, mask = _src(rows)
    keys = _keys(src)
    what = f"beam_search(model{about}, 2 sources, max_len={max_len}, beam_size={K}, alpha={alpha})"
    try:
        got = _decode_with(beam_search, model, src, mask, max_len, beam_size=K, alpha=alpha)
    except RuntimeError as e:
        if "selected index k out of range" not in str(e):
            raise
        raise CheckFailure(what, "an answer for each source", f"RuntimeError: {e}",
                           TOPK_TOO_MANY.format(V=vocab)) from None
    expected = [_brute_force(fn, k, max_len, alpha) for k in keys]

    def mistakes():
        out = _beam_variants(fn, keys, max_len, K, alpha)[1]
        out[NO_PENALTY] = [_brute_force(fn, k, max_len, 0.0) for k in keys]
        out[EOS_NOT_COUNTED] = [_brute_force(fn, k, max_len, alpha, eos_counts=False) for k in keys]
        return out
    _expect_lists(got, expected, what, why + ", so the answer is the best of all sequences: " + BEAM_HINT, mistakes,
                  rows, alone=_alone(beam_search, fn, vocab, src, mask, max_len, beam_size=K, alpha=alpha),
                  rank=_beam_ranker(beam_search))


@register("beam_search", "equals a reference beam search on a batch (beam 3, alpha 0.6)")
def _beam_reference(beam_search):
    rows = [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16, 17], [18, 19]]
    _beam_case(beam_search, _table(7, seed=35), 7, rows, 6, 3, 0.6,
               "beam_search(model, 6 sources, max_len=6, beam_size=3, alpha=0.6)")


@register("beam_search", "sets finished hypotheses aside and goes on with beam_size open ones")
def _beam_aside(beam_search):
    # source 7: <eos> first (p 0.5), but 5 6 3 <eos> (p 0.18) wins with alpha 3: it needs both beam slots
    # for the open 4 and 5 at step 1, and the search must go on after [<eos>] finished.
    # source 8: <eos> first (p 0.3), then 4 <eos> (p 0.65 x 0.95) is more probable (alpha 0).
    fn = _spec(7, ASIDE_SPEC)
    prefer = (SHRANK, SHRANK_FOREVER, SLOTS, STOP_FIRST, STOP_AT_K, ALL_EOS, INIT_COPIES)
    _beam_case(beam_search, fn, 7, [[7]], 4, 2, 3.0,
               "beam_search(model, [[7]], max_len=4, beam_size=2, alpha=3.0) where [<eos>] finishes first "
               "(log p -0.69) and [5, 6, 3, <eos>] (log p -1.75) wins after the penalty", prefer=prefer)
    _beam_case(beam_search, fn, 7, [[8]], 4, 2, 0.0,
               "beam_search(model, [[8]], max_len=4, beam_size=2, alpha=0) where [<eos>] finishes first "
               "(log p -1.2) and [4, <eos>] (log p -0.48) is better", prefer=prefer)


@register("beam_search", "divides by length_penalty(length, alpha), length counting <eos>")
def _beam_penalty(beam_search):
    # source 9: [<eos>] log p -1 against [4, 5, <eos>] log p -1.25: with alpha 1.5 the long one wins,
    #   -1.25 / (8/6) ** 1.5 = -0.81 > -1, but loses without a penalty.
    # source 10: [<eos>] log p -1 against [4, 5, <eos>] log p -1.6: -1.6 / (8/6) ** 1.5 = -1.04 < -1, the
    #   short one wins, but a length without <eos> would give -1 / (5/6) ** 1.5 = -1.31 < -1.6 / (7/6) ** 1.5 = -1.27.
    # source 11: [<eos>] log p -1 against [4, 5, <eos>] log p -1.5: -1.5 / (8/6) ** 1.5 = -0.974 > -1, the long
    #   one wins, but a length counting <bos> gives -1 / (7/6) ** 1.5 = -0.794 > -1.5 / (9/6) ** 1.5 = -0.816.
    _beam_case(beam_search, _spec(9, PENALTY_SPEC), 9, [[9], [10], [11]], 4, 4, 1.5,
               "beam_search(model, [[9], [10], [11]], max_len=4, beam_size=4, alpha=1.5) choosing between [<eos>] "
               "(log p -1) and [4, 5, <eos>] (log p -1.25, -1.6, -1.5)",
               prefer=(NO_PENALTY, EOS_NOT_COUNTED, BOS_COUNTED, PENALTY_MUL, PENALTY_POWER, PROBS, ALPHA_IGNORED,
                       PENALTY_TWICE))
    # beam_size=1 with a penalty is not greedy decoding: [<eos>] (log p -0.8) is set aside, and [4, 5, <eos>]
    # (log p -0.92) wins, -0.92 / (8/6) ** 1.5 = -0.6 > -0.8
    fn = _spec(9, K1_SPEC)
    greedy = K1_GREEDY
    _beam_case(beam_search, fn, 9, [[12]], 4, 1, 1.5,
               "beam_search(model, [[12]], max_len=4, beam_size=1, alpha=1.5) choosing between [<eos>] (log p -0.8) "
               "and [4, 5, <eos>] (log p -0.92): with a penalty, beam_size=1 is not greedy decoding",
               extra=lambda keys: {greedy: [_ref_greedy(fn, k, 4) for k in keys]},
               prefer=(greedy, NO_PENALTY, STOP_FIRST, EOS_NOT_COUNTED, BOS_COUNTED, PENALTY_MUL, PENALTY_POWER,
                       PROBS, ALPHA_IGNORED, PENALTY_TWICE))


@register("beam_search", "passes model.decode the causal mask of the prefix and the source mask")
def _beam_masks(beam_search):
    rows = [[7, 8, 9], [10], [11, 12]]
    model, _ = _beam_case(beam_search, _table(6, seed=8, eos_bias=0.5), 6, rows, 4, 2, 0.6,
                          "beam_search(model, 3 sources, max_len=4, beam_size=2, alpha=0.6)")
    if model.problem:
        raise CheckFailure("the masks given to the model", None, None, model.problem)


@register("beam_search", "uses bos_id and eos_id")
def _beam_ids(beam_search):
    rows = [[7, 8], [9], [10, 11], [12, 13]]
    fn = _table(7, seed=9, banned=(PAD, 5), eos=3, eos_bias=1.0)

    def extra(keys):
        return {"the bos_id argument is ignored (<bos> = 1 was used)":
                    [_ref_beam(fn, k, 5, 3, 0.6, BOS, 3) for k in keys],
                "the eos_id argument is ignored (<eos> = 2 was used)":
                    [_ref_beam(fn, k, 5, 3, 0.6, 5, EOS) for k in keys]}
    _beam_case(beam_search, fn, 7, rows, 5, 3, 0.6,
               "beam_search(model, src, src_mask, 5, beam_size=3, alpha=0.6, bos_id=5, eos_id=3)",
               bos=5, eos=3, extra=extra)


# -------------------------------------------------------------------------------------- corpus_bleu
def _sacrebleu(hyps, refs, max_n=4, smooth="none"):
    from sacrebleu.metrics import BLEU
    bleu = BLEU(tokenize="none", smooth_method=smooth, max_ngram_order=max_n)
    return bleu.corpus_score([" ".join(h) for h in hyps], [[" ".join(r) for r in refs]]).score


def _ngrams(tokens, n):
    out = {}
    for i in range(len(tokens) - n + 1):
        g = tuple(tokens[i:i + n])
        out[g] = out.get(g, 0) + 1
    return out


def _bleu_formula(hyps, refs, max_n, clip=True, brevity=True, geometric=True, flipped_bp=False, orders=None,
                  skip_empty=False, recall=False, corpus_clip=False, zero_based=False, no_exp=False,
                  sentence_bp=False, weight=None, unique=False, bp_ratio=False, bp_uncapped=False, long_bp=False,
                  skip=None):
    """BLEU written out, with switches for the classic mistakes (`orders`: only n = 1..orders summed, still
    divided by max_n; `skip_empty`: orders without any n-gram left out of the mean; `recall`: divided by the
    reference n-grams; `corpus_clip`: counts clipped over the whole corpus; `zero_based`: orders 0..max_n - 1;
    `no_exp`: the mean of the logs not exponentiated; `sentence_bp`: the mean of the sentence brevity penalties;
    `weight`: a fixed weight per order instead of 1 / max_n; `unique`: each distinct n-gram counted once (a set);
    `bp_ratio`: BP = hyp_len / ref_len; `bp_uncapped`: BP = exp(1 - ref_len / hyp_len) also above 1; `long_bp`:
    BP = min(1, exp(1 - hyp_len / ref_len)), a penalty for hypotheses LONGER than the references; `skip`: the
    sentences whose hypothesis (0) or reference (1) is empty left out)."""
    matches, totals, hyp_len, ref_len = [0] * max_n, [0] * max_n, 0, 0
    all_h, all_r = [{} for _ in range(max_n)], [{} for _ in range(max_n)]
    for h, r in zip(hyps, refs):
        if skip is not None and not (h, r)[skip]:
            continue
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, max_n + 1):
            k = n - 1 if zero_based else n
            hc, rc = _ngrams(h, k), _ngrams(r, k)
            if unique:
                hc, rc = dict.fromkeys(hc, 1), dict.fromkeys(rc, 1)
            matches[n - 1] += sum(min(c, rc.get(g, 0)) if clip else (c if g in rc else 0) for g, c in hc.items())
            totals[n - 1] += len(hc) if unique else max(len(r if recall else h) - k + 1, 0)
            for mine, theirs in ((all_h[n - 1], hc), (all_r[n - 1], rc)):
                for g, c in theirs.items():
                    mine[g] = mine.get(g, 0) + c
    if corpus_clip:
        matches = [sum(min(c, all_r[n].get(g, 0)) for g, c in all_h[n].items()) for n in range(max_n)]
    if orders is not None:  # the mean below still divides by max_n
        matches, totals = matches[:orders], totals[:orders]
    if skip_empty:
        kept = [(m, t) for m, t in zip(matches, totals) if t > 0]
        matches, totals, max_n = [m for m, _ in kept], [t for _, t in kept], len(kept)
    if hyp_len == 0 or not totals or min(totals) == 0:
        return 0.0
    if geometric:
        if min(matches) == 0:
            return 0.0
        mean_log = sum(math.log(m / t) * (weight or 1 / max_n) for m, t in zip(matches, totals))
        precision = mean_log if no_exp else math.exp(mean_log)
    else:
        precision = sum(m / t for m, t in zip(matches, totals)) / max_n
    bp = 1.0
    if sentence_bp:
        bp = sum(min(1.0, math.exp(1 - len(r) / len(h))) if h else 0.0 for h, r in zip(hyps, refs)) / len(hyps)
    elif bp_uncapped:
        bp = math.exp(1 - ref_len / hyp_len)
    elif long_bp:
        bp = min(1.0, math.exp(1 - hyp_len / ref_len))
    elif brevity and hyp_len < ref_len:
        bp = math.exp(1 - hyp_len / ref_len) if flipped_bp else hyp_len / ref_len if bp_ratio else \
            math.exp(1 - ref_len / hyp_len)
    return 100 * bp * precision


def _bleu_mistakes(hyps, refs, max_n):
    """(corpus BLEU as sacreBLEU computes it, {a classic mistake: the score it gives}) for these sentences."""
    expected = _sacrebleu(hyps, refs, max_n)
    out = _bleu_formula_mistakes(hyps, refs, max_n, expected)
    out.update(_bleu_corpus_mistakes(hyps, refs, max_n))
    out.update(_bleu_part_mistakes(hyps, refs, max_n, expected))
    return expected, out


def _bleu_formula_mistakes(hyps, refs, max_n, expected):
    """The formula's classic mistakes: clipping, the brevity penalty, the means, the scale, skipped sentences."""
    out = {
        "n-gram counts not clipped: a hypothesis n-gram matches at most as often as it occurs in the reference "
        "(min(count in hypothesis, count in reference))": _bleu_formula(hyps, refs, max_n, clip=False),
        "no brevity penalty: multiply by exp(1 - ref_len / hyp_len) when the hypotheses are shorter":
            _bleu_formula(hyps, refs, max_n, brevity=False),
        "the brevity penalty is upside down: exp(1 - ref_len / hyp_len), with the lengths summed over the corpus":
            _bleu_formula(hyps, refs, max_n, flipped_bp=True),
        "the brevity penalty is upside down: min(1, exp(1 - hyp_len / ref_len)) punishes LONG output; BP = "
        "min(1, exp(1 - ref_len / hyp_len)) punishes hypotheses shorter than the references":
            _bleu_formula(hyps, refs, max_n, long_bp=True),
        "an average of sentence scores: corpus BLEU sums the n-gram matches, n-gram counts and lengths over all "
        "sentences first, then computes one score":
            sum(_bleu_formula([h], [r], max_n) for h, r in zip(hyps, refs)) / len(hyps),
        "an arithmetic mean of the n-gram precisions: BLEU takes their geometric mean, exp(mean of log p_n)":
            _bleu_formula(hyps, refs, max_n, geometric=False),
        "on a 0..1 scale: the contract's BLEU is in 0..100 (multiply by 100)": expected / 100,
        "the max_n argument is ignored (4 used)": _sacrebleu(hyps, refs, 4),
    }
    out["an order without any n-gram (p_n = 0/0) was left out of the mean: it counts as a zero precision, "
        "so BLEU = 0"] = _bleu_formula(hyps, refs, max_n, skip_empty=True)
    out["an empty hypothesis was skipped: it still counts its reference's length in ref_len (the brevity "
        "penalty); do not skip sentences"] = _bleu_formula(hyps, refs, max_n, skip=0)
    out["an empty reference was skipped: its hypothesis's n-grams still count in the precisions (and its length in "
        "hyp_len); do not skip sentences"] = _bleu_formula(hyps, refs, max_n, skip=1)
    out["the precision was divided by the REFERENCE n-grams (a recall): p_n = clipped matches / the n-grams of "
        "the hypotheses"] = _bleu_formula(hyps, refs, max_n, recall=True)
    out["the counts were clipped over the whole corpus: clip each sentence's n-gram counts by its own reference, "
        "then sum the clipped matches"] = _bleu_formula(hyps, refs, max_n, corpus_clip=True)
    out["orders 0..max_n - 1 (range(max_n)): the orders are n = 1..max_n, range(1, max_n + 1)"] = \
        _bleu_formula(hyps, refs, max_n, zero_based=True)
    out["exp is missing: BLEU = BP * exp(mean over n of log p_n), not the mean of the logs itself"] = \
        _bleu_formula(hyps, refs, max_n, no_exp=True)
    out["the brevity penalty was computed per sentence and averaged: BP = min(1, exp(1 - ref_len / hyp_len)) "
        "with the lengths summed over the corpus"] = _bleu_formula(hyps, refs, max_n, sentence_bp=True)
    out["each distinct n-gram was counted once (a set): count every occurrence (a Counter), and clip each count by "
        "the reference's"] = _bleu_formula(hyps, refs, max_n, unique=True)
    out["the brevity penalty is hyp_len / ref_len: it is exp(1 - ref_len / hyp_len) when the hypotheses are "
        "shorter"] = _bleu_formula(hyps, refs, max_n, bp_ratio=True)
    out["the brevity penalty is not capped at 1: BP = min(1, exp(1 - ref_len / hyp_len)); hypotheses longer than "
        "their references get BP = 1, not more"] = _bleu_formula(hyps, refs, max_n, bp_uncapped=True)
    if max_n != 4:
        out["the weights are fixed at 1/4: the mean of the log precisions is over the max_n orders (weight "
            "1 / max_n)"] = _bleu_formula(hyps, refs, max_n, weight=0.25)
    return out


def _bleu_corpus_mistakes(hyps, refs, max_n):
    """The corpus joined, the arguments swapped, the orders cut short, smoothing."""
    out = {}
    out["the corpus was joined into one long sentence: n-grams across sentence boundaries were counted; count "
        "the n-grams of each sentence, then sum the counts"] = _sacrebleu([[w for h in hyps for w in h]],
                                                                          [[w for r in refs for w in r]], max_n)
    out["hypotheses and references swapped: corpus_bleu(hypotheses, references)"] = _sacrebleu(refs, hyps, max_n)
    if max_n > 1:
        out["orders 1..max_n - 1 only: BLEU averages log p_n over n = 1..max_n (range(1, max_n + 1))"] = \
            _sacrebleu(hyps, refs, max_n - 1)
        out["the order n = max_n is missing from the sum: BLEU averages log p_n over n = 1..max_n "
            "(range(1, max_n + 1))"] = _bleu_formula(hyps, refs, max_n, orders=max_n - 1)
    for smooth in ("exp", "floor", "add-k"):
        out[f"smoothed ({smooth}): the contract's BLEU has no smoothing, a zero precision gives 0"] = \
            _sacrebleu(hyps, refs, max_n, smooth)
    return out


def _bleu_part_mistakes(hyps, refs, max_n, expected):
    """The parts of BLEU one at a time (issue 40): orders, counts, the denominators, rounding."""
    out = {}
    if max_n > 1:
        out["the order n = max_n was dropped from the sum but the mean still divides by max_n: sum log p_n over "
            "n = 1..max_n, range(1, max_n + 1)"] = _bleu_parts(hyps, refs, max_n, last_order=False)
    out["each distinct n-gram of a hypothesis was counted once in the denominator (len(set(...))): p_n's "
        "denominator counts every n-gram occurrence, the clipped matches over all of them"] = \
        _bleu_parts(hyps, refs, max_n, distinct_total=True)
    for shift, how in ((-1, "len(h) - n, one short"), (1, "len(h) - n + 2, one too many")):
        out[f"off by one in p_n's denominator ({how}): a hypothesis of length L has L - n + 1 n-grams of order "
            "n"] = _bleu_parts(hyps, refs, max_n, total_shift=shift)
    out["smoothed (add-one on every order, unigrams included: (m + 1) / (t + 1)): the contract's BLEU has no "
        "smoothing, p_n = m / t, and a zero precision gives 0"] = _bleu_parts(hyps, refs, max_n, add=1)
    for digits in (0, 1, 2, 3, 4):
        out[f"the score was rounded (round(bleu, {digits})): return it unrounded; round only when printing"] = \
            round(expected, digits)
    out["the score was truncated to a whole number (int(bleu) or math.floor): return it as it is, a float"] = \
        float(math.floor(expected))
    return out


def _bleu_parts(hyps, refs, max_n, last_order=True, distinct_total=False, total_shift=0, add=0):
    """Corpus BLEU (0..100) written out, with one part changed: `last_order` False leaves out the order max_n from
    the sum (the mean still over max_n), `distinct_total` counts each distinct n-gram once in the denominators,
    `total_shift` moves each sentence's number of n-grams by that much, `add` is added to every order's matches and
    n-gram count (add-k smoothing, unigrams too). None where it is undefined."""
    matches, totals = [0] * max_n, [0] * max_n
    for h, r in zip(hyps, refs):
        for n in range(1, max_n + 1):
            hc, rc = _ngrams(h, n), _ngrams(r, n)
            matches[n - 1] += sum(min(c, rc.get(g, 0)) for g, c in hc.items())
            totals[n - 1] += (len(hc) if distinct_total else max(0, len(h) - n + 1 + total_shift))
    matches, totals = [m + add for m in matches], [t + add for t in totals]
    orders = range(max_n if last_order else max_n - 1)
    if any(totals[i] <= 0 or matches[i] <= 0 for i in orders):
        return None
    hyp_len, ref_len = sum(map(len, hyps)), sum(map(len, refs))
    if hyp_len == 0:
        return None
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(sum(math.log(matches[i] / totals[i]) for i in orders) / max_n)


def _expect_bleu(corpus_bleu, hyps, refs, max_n, what, hint):
    given_h, given_r = [list(h) for h in hyps], [list(r) for r in refs]
    try:
        got = corpus_bleu(given_h, given_r, max_n=max_n) if max_n != 4 else corpus_bleu(given_h, given_r)
    except (ValueError, ZeroDivisionError) as e:
        if _sacrebleu(hyps, refs, max_n) != 0.0:
            raise
        if not any(hyps):
            raise CheckFailure(what, "0.0: no hypothesis has a token, so nothing matches", f"{type(e).__name__}: {e}",
                               "no output at all scores 0: test for empty hypotheses (hyp_len == 0) or zero matches "
                               "before dividing by the hypothesis length (ref_len / hyp_len in the brevity "
                               "penalty)") from None
        raise CheckFailure(what, "0.0: some order has no matching n-gram (p_n = 0), and without smoothing BLEU is 0",
                           f"{type(e).__name__}: {e}",
                           "math.log(0) (or a division by a zero count) was reached: when some order's clipped "
                           "matches are 0, return 0.0 before taking the logarithms") from None
    if given_h != hyps or given_r != refs:
        raise CheckFailure(f"{what}: the lists passed in", "unchanged after the call",
                           f"hypotheses {fmt(given_h)}, references {fmt(given_r)}",
                           "the caller's hypotheses or references were edited in place (append, sort, pop, ...): "
                           "read them without modifying them")
    try:
        got = _as_number(got)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailure(what, "a number in 0..100", fmt(got), "return the score as a float") from None
    expected, mistakes = _bleu_mistakes(hyps, refs, max_n)
    if math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6):
        return
    names = matching_mistakes(got, mistakes, lambda g, v: math.isclose(g, v, rel_tol=1e-6, abs_tol=1e-6), every=True)
    names = _confirmed(corpus_bleu, names, max_n)
    digits = 4 if f"{got:.4f}" != f"{expected:.4f}" else 8  # a small difference is shown, not printed as equal
    shown = f"{got:.{digits}f}" if math.isfinite(got) else str(got)
    expected_shown = f"{expected:.{digits}f}"
    if names:
        raise CheckFailure(what, f"{expected_shown} (sacrebleu)", shown, "; or ".join(names))
    if expected == 0.0 and any(hyps) and got > 0 and _right_without_zero_precisions(corpus_bleu, max_n):
        raise CheckFailure(what, f"{expected_shown} (sacrebleu: {hint})", shown, SMOOTHED)
    # no known mistake gives this number: say what the right one is made of, and guess no cause
    raise CheckFailure(what, f"{expected_shown} (sacrebleu: {hint})", shown)


SMOOTHED = ("the zero precision was smoothed (an epsilon for a zero count, max(m, ...), + 1 or a floor): your BLEU is "
            "right on a corpus where every order has matches and not 0 where an order has none; the contract's BLEU "
            "has no smoothing: return 0.0 when some order's clipped matches are 0")


def _right_without_zero_precisions(corpus_bleu, max_n) -> bool:
    """Whether corpus_bleu gives sacrebleu's BLEU on a corpus where every order 1..max_n has matches (the first check's
    corpus): then a number above 0 where some p_n is 0 comes from how the zero precision is treated, a smoothing."""
    hyps, refs = _random_corpus(0)
    try:
        got = _as_number(corpus_bleu([list(h) for h in hyps], [list(r) for r in refs], max_n=max_n)
                         if max_n != 4 else corpus_bleu([list(h) for h in hyps], [list(r) for r in refs]))
    except CheckTimeout:
        raise
    except Exception:  # noqa: BLE001  (it fails there: nothing to infer)
        return False
    expected = _sacrebleu(hyps, refs, max_n)
    return expected > 0 and math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6)


def _confirmed(corpus_bleu, names, max_n):
    """The named mistakes that also give the learner's number on two other corpora: a mistake that matches one
    small corpus by chance (a count that happens to equal another) is not named."""
    if not names:
        return names
    kept = list(names)
    for seed, n in ((101, 9), (102, 6), (104, 9)):  # (104: hypotheses longer than their references, 59 to 56)
        hyps, refs = _random_corpus(seed, n=n)
        try:
            got = _as_number(corpus_bleu([list(h) for h in hyps], [list(r) for r in refs], max_n=max_n)
                             if max_n != 4 else corpus_bleu([list(h) for h in hyps], [list(r) for r in refs]))
        except CheckTimeout:
            raise
        except Exception:  # noqa: BLE001  (it fails on that corpus: nothing to confirm with)
            return []
        values = _bleu_mistakes(hyps, refs, max_n)[1]
        kept = [d for d in kept if d in values and math.isclose(got, values[d], rel_tol=1e-6, abs_tol=1e-6)]
    return kept


BLEU_HINT = ("BP * exp(mean over n of log p_n), p_n = clipped n-gram matches / hypothesis n-grams, both summed over "
             "the corpus; BP = min(1, exp(1 - ref_len / hyp_len)) with the corpus lengths; times 100")


def _random_corpus(seed, n=30):
    rng = random.Random(seed)
    words = "a the cat dog sat on mat big red runs".split()
    refs = [[rng.choice(words) for _ in range(rng.randint(3, 12))] for _ in range(n)]
    hyps = [r[: max(1, len(r) - rng.randint(0, 3))] + [rng.choice(words)] for r in refs]
    hyps = [[w if rng.random() > 0.25 else rng.choice(words) for w in h] for h in hyps]
    hyps[3], refs[5] = ["the"], ["a", "dog"]  # a one-word hypothesis and a two-word reference
    return hyps, refs


@register("corpus_bleu", "equals sacrebleu's corpus BLEU on a small corpus")
def _bleu_corpus(corpus_bleu):
    hyps, refs = _random_corpus(0)
    _expect_bleu(corpus_bleu, hyps, refs, 4, "corpus_bleu(30 hypotheses, 30 references)", BLEU_HINT)


@register("corpus_bleu", "clips n-gram counts by the reference ('the the the the')")
def _bleu_clip(corpus_bleu):
    _expect_bleu(corpus_bleu, [["the", "the", "the", "the"]], [["the", "cat", "the", "mat"]], 1,
                 "corpus_bleu([['the', 'the', 'the', 'the']], [['the', 'cat', 'the', 'mat']], max_n=1)",
                 "'the' occurs twice in the reference, so at most 2 of the 4 count: p_1 = 2/4, BLEU 50")
    hyps = [["the", "the", "cat", "the", "cat", "sat"], ["a", "a", "dog", "a", "a", "runs"]]
    refs = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "runs", "a", "lot"]]
    _expect_bleu(corpus_bleu, hyps, refs, 2, "corpus_bleu(repeated words, max_n=2)",
                 "clip each n-gram's count by its count in the reference")


@register("corpus_bleu", "applies the brevity penalty to short hypotheses")
def _bleu_brevity(corpus_bleu):
    hyps = [["a", "b", "c", "d", "e"], ["x", "y", "z", "w"]]
    refs = [["a", "b", "c", "d", "e", "f", "g", "h"], ["x", "y", "z", "w", "v", "u"]]
    _expect_bleu(corpus_bleu, hyps, refs, 4, "corpus_bleu(two exact prefixes of their references: 9 of 14 tokens)",
                 "BP = exp(1 - 14 / 9) when the hypotheses (9 tokens) are shorter than the references (14)")
    _expect_bleu(corpus_bleu, [["a", "b", "c", "d", "e", "f"]], [["a", "b", "c", "d"]], 4,
                 "corpus_bleu(a hypothesis longer than its reference)",
                 "no brevity penalty when hyp_len >= ref_len: BP = min(1, exp(1 - ref_len / hyp_len))")
    # an empty output still counts its reference's length; an empty reference its output's n-grams and length
    _expect_bleu(corpus_bleu, [list("abcde"), []], [list("abcde"), list("vwxyz")], 4,
                 "corpus_bleu([list('abcde'), []], [list('abcde'), list('vwxyz')]) (an empty hypothesis)",
                 "the empty hypothesis adds 5 to ref_len: BP = exp(1 - 10 / 5)")
    _expect_bleu(corpus_bleu, [list("abcde"), list("xyz")], [list("abcde"), []], 4,
                 "corpus_bleu([list('abcde'), list('xyz')], [list('abcde'), []]) (an empty reference)",
                 "the hypothesis of the empty reference adds its unmatched n-grams to the precisions' denominators")


@register("corpus_bleu", "sums n-gram counts over the corpus (not an average of sentence scores)")
def _bleu_corpus_counts(corpus_bleu):
    hyps = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "runs"], ["big", "red", "dog", "sat", "down"]]
    refs = [["the", "cat", "sat", "on", "a", "mat"], ["the", "dog", "runs", "fast"], ["a", "big", "red", "dog", "sat"]]
    _expect_bleu(corpus_bleu, hyps, refs, 4, "corpus_bleu(3 sentences)",
                 "sum the matches and the n-gram counts of all sentences, then compute one score")


@register("corpus_bleu", "uses max_n")
def _bleu_max_n(corpus_bleu):
    hyps, refs = _random_corpus(1, n=12)
    for max_n in (2, 3):
        _expect_bleu(corpus_bleu, hyps, refs, max_n, f"corpus_bleu(12 sentences, max_n={max_n})",
                     "n-grams of orders 1..max_n, and the mean of their log precisions over max_n orders")


@register("corpus_bleu", "no smoothing: 0 when some n-gram order has no match")
def _bleu_zero(corpus_bleu):
    _expect_bleu(corpus_bleu, [["a", "b", "c", "d"], ["e", "f"]], [["a", "b", "c", "x"], ["e", "f"]], 4,
                 "corpus_bleu([['a', 'b', 'c', 'd'], ['e', 'f']], [['a', 'b', 'c', 'x'], ['e', 'f']])",
                 "the only 4-gram does not match: p_4 = 0, so BLEU = 0 (no smoothing)")
    _expect_bleu(corpus_bleu, [["a", "b", "c"]], [["a", "b", "c"]], 4, "corpus_bleu([['a', 'b', 'c']], same)",
                 "a 3-token corpus has no 4-gram: p_4 = 0/0 counts as 0, so BLEU = 0 (as sacrebleu)")
    # what an untrained model's translations can be
    _expect_bleu(corpus_bleu, [[], []], [["a", "b", "c", "d", "e"], ["f", "g"]], 4,
                 "corpus_bleu([[], []], [['a', 'b', 'c', 'd', 'e'], ['f', 'g']]) (empty hypotheses)",
                 "no output at all: no n-gram matches, so BLEU = 0")


@register("corpus_bleu", "a perfect match scores 100 (a 0..100 scale)")
def _bleu_perfect(corpus_bleu):
    hyps = [["the", "cat", "sat", "on", "the", "mat"], ["a", "big", "dog", "runs"]]
    _expect_bleu(corpus_bleu, hyps, [list(h) for h in hyps], 4, "corpus_bleu(hypotheses equal to their references)",
                 "every precision is 1 and BP is 1: BLEU = 100")
