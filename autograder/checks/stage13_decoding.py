"""Stage 13: decoding and BLEU. The decoders are run on small fake models that have only the contract's
interface (model.encode, model.decode, model.generator) and whose next-token distribution is a fixed
function of the source and the prefix, so the checks know the whole search space: a reference greedy
decoder, a reference beam search written from the contract, and a brute-force search over every
sequence give the expected answers. corpus_bleu is held against sacrebleu. Classic mistakes are named
by running the same references with the mistake put in. This module holds the fake models, the references and
the comparisons; each graded name's checks are in a module of its own (stage13_greedy_decode.py, ...)."""
from __future__ import annotations

import math
import random

import torch
from torch import nn

from ..registry import CheckFailure, CheckTimeout
from ._util import fmt, matching_mistakes

PAD, BOS, EOS = 0, 1, 2


# ------------------------------------------------------------------------------------ fake models
def _hidden_order(vocab: int) -> list[int]:
    """The fake decoder's output holds the logits in this order (reversed): hidden[..., j] = logits[...,
    order[j]], so that a decoder that forgets model.generator picks other tokens."""
    return list(range(vocab - 1, -1, -1))


class _Generator(nn.Linear):
    """The fake model's model.generator: an nn.Linear(vocab, vocab) (out_features, weight and bias are there
    for code that reads them) whose weight is the permutation that puts the fake decoder's output back in
    token order; forward gathers the columns, which is exact."""

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
        raise CheckFailure("the decoder called model(...)", "only model.encode, model.decode and "
                                                            "model.generator",
                           "a call to model.forward", "decode step by step: memory = model.encode(src, "
                                                      "src_mask) once, then model.decode(ys, memory, "
                                                      "src_mask, tgt_mask) and model.generator")

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
            raise CheckFailure("model.decode(tgt_in, ...)", "tgt_in of shape (N, t): the prefixes generated "
                                                            "so far",
                               f"shape {tuple(getattr(tgt_in, 'shape', ()))}",
                               "keep the running prefixes as a (N, t) LongTensor starting with <bos>")
        N, t = tgt_in.shape
        if tgt_in.dtype not in (torch.long, torch.int32):
            raise CheckFailure("model.decode(tgt_in, ...)", "tgt_in of token ids, a torch.long tensor",
                               f"dtype {tgt_in.dtype}",
                               "the prefixes were built as floats (torch.ones(...) * bos_id, "
                               "torch.zeros(...).fill_(...), or a float tensor concatenated to them): a real "
                               "model's nn.Embedding refuses them; "
                               "build them with torch.full((B, 1), bos_id, dtype=torch.long) and append the "
                               "argmax indices (torch.long)")
        if not isinstance(memory, torch.Tensor) or memory.dim() != 3 or memory.size(0) not in (1, N):
            raise CheckFailure("model.decode(tgt_in, memory, ...)", f"memory with 1 or {N} rows (one per "
                                                                    "prefix)",
                               f"shape {tuple(getattr(memory, 'shape', ()))}",
                               "pass memory = model.encode(src, src_mask), repeated (or indexed) so that "
                               "each prefix row has its source's row")
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
                                     "causal_mask(t) of the running prefix: shape (1, 1, t, t) (or (N, 1, t, "
                                     "t)), True on and below the diagonal", live)
        if self.problem is None:
            real = (memory[:, :, 0] != PAD)[:, None, None, :].expand(N, 1, t, memory.size(1))
            self.problem = _mask_problem(src_mask, real, "src_mask",
                                         "the src_mask you were given (B, 1, 1, Ls), with one row per prefix "
                                         "(indexed or repeated like memory)", live)


def _encode_mask_problem(src, src_mask):
    """What is wrong with the mask given to model.encode(src, src_mask) (None when it is src's padding
    mask)."""
    real = (src != PAD)[:, None, None, :]  # (B, 1, 1, Ls)
    what = ("the src_mask you were given, (B, 1, 1, Ls) (the rows of the sources encoded): the encoder's "
            "self-attention must not see the padding")
    if src_mask is None:
        return f"model.encode got src_mask=None, expected {what}"
    if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool:
        return (f"model.encode got a src_mask that is not a bool tensor ({type(src_mask).__name__}), "
                f"expected {what}")
    if not _broadcasts_to(tuple(src_mask.shape), tuple(real.shape)):
        return (f"model.encode got src_mask of shape {tuple(src_mask.shape)} for src of shape "
                f"{tuple(src.shape)}, expected {what}")
    if not torch.equal(src_mask.expand(real.shape), real):
        return f"model.encode got a src_mask with other values than the padding of src, expected {what}"
    return None


def _broadcasts_to(shape, full) -> bool:
    """Whether a tensor of `shape` broadcasts to exactly `full` (torch.broadcast_shapes without its slow
    import)."""
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


ANY_FINISHED = ("the loop stopped as soon as ONE source produced <eos>: the other sources were cut short; go "
                "on until EVERY source has finished (e.g. finished |= next_token == eos_id, stop when "
                "finished.all()) or max_len tokens were generated")


NO_GENERATOR = ("model.generator was not applied: model.decode returns the decoder's output (N, t, d_model), "
                "not logits; the next-token scores are model.generator(out[:, -1]) (then log_softmax for "
                "beam search)")


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
        "<bos> is in the output: return the generated tokens only (ys[1:])": [bos] + right +
            ([eos] if ended else []),
        "<bos> is in the output: return the generated tokens only, without <bos> and the final "
        "<eos>": [bos] + right,
        "the final <eos> is in the output: cut each answer before its <eos>": right +
            ([eos] if ended else []),
        "did not stop at <eos>: a source is finished once it produces <eos>; return the tokens before it":
            run[:max_len] if ended else right,
        EOS_DROPPED: [tok for tok in run[:max_len] if tok != eos] if ended else right,
        "generated max_len + 1 tokens: at most max_len tokens, <eos> included":
            run[:run.index(eos)] if eos in run else run,
        "generated only max_len - 1 tokens: the loop must allow max_len tokens, <eos> included":
            right if ended and cut < max_len - 1 else run[:max_len - 1],
        "the logits of the first position were used: the next token is predicted at the LAST position, "
        "model.generator(out[:, -1])": [] if first == eos else [first] * max_len,
        NO_GENERATOR: _ref_greedy(_without_generator(next_logits), src, max_len, bos, eos),
    }


def _ref_penalties(alpha, penalty, bos_counts, probs):
    """(lp, norm) of _ref_beam: the length penalty of a length, and a log p normalized by it (or a
    mistake's way)."""
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
    """Whether _ref_beam stops after step t: the contract's early stop (`stop`) or one of the mistakes'
    ones."""
    if stop_first and finished:
        return True
    if (stop_at_k and len(finished) >= K) or not open_ or width == 0:
        return True
    if twice and finished and t < max_len and \
            max(s for _, s in open_) / lp(max_len) <= max(f[0] for f in finished):
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
    ("next") or by nothing ("raw"), against the best finished score. `penalty`: True, False (none), "mul" (log
    p multiplied by it) or "power" (length ** alpha). `twice`: the normalized scores divided again at the end
    (by the penalty of len(ids) + 1), the early stop made with them as they were (about alpha doubled).
    `shrink`: "step" (only the top K extensions are walked, <eos> ones included) or "forever" (the same, and
    the width drops by one for each finished hypothesis). `open_extra`: the hypotheses still open at max_len
    divided by the penalty of max_len + open_extra. `bos_counts`: True (every length counts <bos>) or
    "finished" (the finished hypotheses' only). `every_step`: the open hypotheses carry log p /
    length_penalty(t, alpha) from step to step (extended as if it were log p), a finished one keeps it;
    "again": those still open at max_len are divided once more. `stop`: the contract's early stop (the best
    open score / the penalty of max(t + 1, max_len) <= the best finished score), which changes nothing for a
    right search but does for a wrong one."""
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
            finished += [(s if open_raw or every_step == "once" else norm(s, max_len + open_extra),
                          list(p[1:]))
                         for p, s in open_]
    # the normalized scores divided again, by the penalty of the answer's length + 1 (as if it held <eos>)
    if twice:
        return max(finished, key=lambda f: f[0] / lp(len(f[1]) + 1))[1]
    return max(finished, key=lambda f: f[0])[1]


NO_PENALTY = "no length penalty: the answer must maximize log p / length_penalty(length, alpha), not log p"
EOS_NOT_COUNTED = ("the length in the penalty left out <eos>: length counts the generated tokens, <eos> "
                   "included")
SHRANK = ("the beam shrank: <eos> extensions took places among the top beam_size, so fewer than beam_size "
          "hypotheses stayed open (topk(beam_size) of the extensions, over all or per hypothesis, then the "
          "<eos> ones removed); keep walking down the ranking until beam_size OPEN hypotheses are kept "
          "(topk(2 * beam_size) holds enough: at most beam_size of them end in <eos>)")
SHRANK_FOREVER = ("the beam width dropped by one for each finished hypothesis: beam_size stays the same all "
                  "along; keep walking down the ranking until beam_size OPEN hypotheses are kept")
ALL_EOS = ("every <eos> extension was set aside as finished, also those ranked below the beam_size-th open "
           "one: walk down the ranking and stop once beam_size are open; an <eos> extension counts only when "
           "it comes before")
STOP_FIRST = ("the search stopped at the first finished hypothesis: set it aside and go on while an open "
              "hypothesis can still beat it")
SLOTS = ("finished hypotheses kept their beam slots: set a hypothesis ending in <eos> aside, and keep "
         "walking down the ranking until beam_size OPEN hypotheses are kept")
STOP_AT_K = ("the search stopped once beam_size hypotheses had finished: go on while an open hypothesis can "
             "still beat the best finished one (its log p / length_penalty(max_len, alpha) > the best "
             "finished score)")
INIT_COPIES = ("the search started with beam_size copies of <bos>, all with log p 0: each step then keeps "
               "beam_size copies of one hypothesis (a beam of one); start with a single hypothesis, or give "
               "the copies log p -inf")
ALPHA_IGNORED = "the alpha argument is ignored (0.6 used)"
PENALTY_TWICE = ("divided by the length penalty twice (as if alpha were doubled): a finished hypothesis's "
                 "score is log p / length_penalty(length, alpha), compared as it is, not divided again")
BEAM_SIZE_IGNORED = ("the beam_size argument is ignored: the search keeps 4 hypotheses (the default) "
                     "whatever beam_size says; use the argument wherever the width is set (topk, the number "
                     "kept)")
PENALTY_MUL = ("log p multiplied by length_penalty instead of divided by it: the score is log p / "
               "length_penalty(length, alpha)")
PENALTY_POWER = ("the penalty is length ** alpha: divide by length_penalty(length, alpha) = ((5 + length) / "
                 "6) ** alpha")
PROBS = ("probabilities multiplied instead of log-probabilities added: the score is the SUM of the tokens' "
         "log p, and the length penalty divides that sum")
BOS_COUNTED = ("the length in the penalty counted <bos>: length counts the generated tokens (<eos> "
               "included), not <bos>")
EVERY_STEP = ("the length penalty was applied at every step: the open hypotheses carried log p / "
              "length_penalty(t, alpha) and were extended as if it were log p, so each step divided the "
              "earlier ones again; carry the plain sum of log p and divide by length_penalty(length, alpha) "
              "once, when a hypothesis is finished (or at max_len)")
BOS_FINISHED = ("the length in a finished hypothesis's penalty counted <bos> (the length of the prefix with "
                "<bos> and <eos>: t + 1 at step t): length counts the generated tokens, <eos> included, not "
                "<bos>")
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
    "finished hypotheses stayed in the beam and were extended past <eos>: set a hypothesis ending in <eos> "
    "aside; only open ones are extended": dict(finished_in_beam="extend"),
    "raw logits used as scores: rank by log-probabilities, log_softmax(model.generator(...))": dict(raw=True),
    "the logits of the first position were used: the next token is predicted at the LAST position, "
    "model.generator(out[:, -1])": dict(first_position=True),
    "hypotheses still open after max_len tokens were not counted: they count as finished (length max_len)":
        dict(opens_count=False),
    "hypotheses still open after max_len tokens were compared by their raw log p: divide them by "
    "length_penalty(max_len, alpha) too": dict(open_raw=True),
    "hypotheses still open after max_len tokens were divided by length_penalty(max_len + 1, alpha): their "
    "length is max_len, the tokens generated (the prefix's length also counts <bos>)": dict(open_extra=1),
    BOS_COUNTED: dict(bos_counts=True),
    BOS_FINISHED: dict(bos_counts="finished", stop=True),
    EVERY_STEP: dict(every_step="once", stop=True),
    EVERY_STEP + " (those open at max_len were divided once more)": dict(every_step="again", stop=True),
    "log-probabilities not accumulated: a hypothesis's score is the SUM of its tokens' log p (its parent's "
    "score + the new token's log p), not the last token's log p": dict(accumulate=False),
    "the search stopped too early: an open hypothesis can still win while its log p / "
    "length_penalty(max_len, alpha) beats the best finished score (divide by the penalty of max_len, the "
    "largest it can reach, not of its current length)": dict(bound="current"),
    "the search stopped too early: an open hypothesis can still win while its log p / "
    "length_penalty(max_len, alpha) beats the best finished score (divide by the penalty of max_len, the "
    "largest it can reach, not of the next length t + 1)": dict(bound="next"),
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
    out[NO_GENERATOR] = [_ref_beam(_without_generator(next_logits), s, max_len, K, alpha, bos,
                                   eos) for s in sources]
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
                           "a flat list of ids: return one list per source, [[ids of source 0]], also for a "
                           "batch of one (do not squeeze the batch axis away)" if flat else
                           "return [[ids of source 0], [ids of source 1], ...]") from None
    if len(out) != n:
        raise CheckFailure(what, f"{n} answers, one per source", f"{len(out)}",
                           "one list of ids per row of src")
    return out


def _expect_lists(got, expected, what, hint, mistakes=None, sources=None, eos=EOS, alone=None, prefer=(),
                  rank=None):
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
                           f"the answer holds <pad> ({PAD}) tokens: the rows of a batch that finished early "
                           "were padded, and the padding was returned; each answer is the generated tokens "
                           "before its <eos>, nothing after it")
    names = matching_mistakes(got, mistakes, lambda g, wrong: wrong == g, every=True)
    batch_level = [d for d in names if d in BATCH_MISTAKES]
    # a mistake that shows only in a batch: named as it is, not as 'sources disturb each other'
    if batch_level:
        names = batch_level + [d for d in names if d not in batch_level]
        raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                           "; or ".join(names[:MAX_NAMED]))
    cut = [g[:g.index(eos)] if eos in g else g for g in got]
    # only what follows a first <eos> is wrong
    if not names and cut == expected and all(eos not in e for e in expected):
        # the batch is the cause only where each source decoded alone ends right: a decoder that goes past
        # <eos> on its own (a finished hypothesis extended) is not told about batches, which its other lines
        # would contradict
        in_batch = alone is not None and len(expected) > 1 and _right_alone(alone, expected)
        raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                           f"the answer goes on after its first <eos> ({eos}), which is where it ends: " +
                           ("in a batch a source that has finished keeps getting tokens while the others go "
                            "on, and a cut at the last token (or at the last <eos>) keeps "
                            "them" if in_batch else
                            "each source decoded on its own does not end right either, so a finished "
                            "sequence was extended past its <eos> (or the answer cut at its last <eos>, not "
                            "its first)") +
                           "; cut each answer before its first <eos>, row[:row.index(eos_id)]")
    _eos_filtered(got, expected, names, eos, f"{what}: the answer{src}", i)
    if alone is not None and len(expected) > 1 and _right_alone(alone, expected):
        raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                           "every source decoded alone (a batch of one) gets the right answer, but not in a "
                           "batch: the sources of a batch disturb each other. " + BATCH_HINT)
    names.sort(key=lambda d: prefer.index(d) if d in prefer else len(prefer))
    if rank is not None and len(names) > 1:
        names = rank(names)
    if not names and eos in got[i]:
        names = [f"the answer holds <eos> ({eos}): a hypothesis is finished at its <eos>; cut the answer "
                 "before it, and never extend a finished hypothesis"]
    raise CheckFailure(f"{what}: the answer{src}", fmt(expected[i]), fmt(got[i]),
                       "; or ".join(names[:MAX_NAMED]) if names else hint)


def _eos_filtered(got, expected, names, eos, what, i):
    """Each answer right, then more, and no <eos> anywhere: the <eos> tokens were filtered out instead of a
    cut at the first one (in a batch, where a finished row goes on, as well as alone): said."""
    if names[:1] in ([], [EOS_DROPPED]) and not any(eos in g for g in got) and \
            all(g[:len(e)] == e for g, e in zip(got, expected)):
        raise CheckFailure(what, fmt(expected[i]), fmt(got[i]),
                           f"the answer is right, then goes on, and holds no <eos> ({eos}): the <eos> "
                           "tokens were removed (t != eos_id) instead of cutting each answer before its "
                           "FIRST <eos>; in a batch a finished row keeps getting tokens while the others go "
                           "on, so cut, row[:row.index(eos_id)] if eos_id in row else row")


EOS_DROPPED = ("did not stop at <eos> (the <eos> tokens were dropped from the output instead): cut each "
               "answer at its first <eos>")
MAX_NAMED = 3  # the causes named for one wrong answer, the likeliest first: a longer list hides the real one
BATCH_MISTAKES = {ANY_FINISHED}


BATCH_HINT = ("Keep each source's rows apart: decode until EVERY source has finished (not until the first "
              "one does), give each row (hypothesis) its own source's memory and src_mask row "
              "(repeat_interleave, not repeat), rank and keep the extensions of each source separately (not "
              "over the whole batch), and keep the bookkeeping of which row belongs to which source right "
              "when finished rows are dropped")


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
            changed = (f"shape {tuple(given.shape)} instead of "
                       f"{tuple(original.shape)}" if given.shape != original.shape
                       else f"{int((given != original).sum())} of its {original.numel()} values changed")
            raise CheckFailure(f"the {name} passed to {getattr(decoder, '__name__', 'the decoder')}",
                               "unchanged after the call", changed,
                               f"the caller's {name} was edited in place (an in-place op such as "
                               "masked_fill_, unsqueeze_ or an assignment into it): work on new tensors")
    return got


def _expect_mode_kept(model, name):
    """The contract's side effects: decoding leaves the caller's model in the mode it was given (train mode
    here): a decoder that calls model.eval() and does not switch it back leaves a training loop that validates
    by decoding without dropout from then on."""
    if not all(part.training for part in model.modules()):
        raise CheckFailure(f"the model after {name}(model, ...), given in train mode",
                           "still in train mode (the "
                           "caller's mode)", "switched to eval mode",
                           f"{name} calls model.eval() and leaves it so: the caller decides the mode (a "
                           "training loop that decodes to validate would go on without dropout); drop the "
                           "call, or restore the mode afterwards, was = model.training; model.eval(); ...; "
                           "model.train(was)")


def _alone(decoder, next_logits, vocab, src, mask, *args, **kwargs):
    """alone(i) for _expect_lists: row i of the batch (with its padding) decoded on its own by a fresh
    model."""
    return lambda i: decoder(_FakeModel(vocab, next_logits), src[i:i + 1].clone(), mask[i:i + 1].clone(),
                             *args,
                             **kwargs)


def _src(rows):
    """A right-padded batch of source ids and its padding mask (B, 1, 1, Ls)."""
    L = max(len(r) for r in rows)
    src = torch.tensor([list(r) + [PAD] * (L - len(r)) for r in rows])
    return src, (src != PAD)[:, None, None, :]


def _keys(src):
    return [tuple(r) for r in src.tolist()]


# ------------------------------------------------------------------------------------------ numbers
def _as_number(x) -> float:
    """float(x) for a Python, numpy or torch number, a one-element tensor or array included."""
    if isinstance(x, (str, bytes)):
        raise TypeError("a string is not a number")
    item = getattr(x, "item", None)  # torch.Tensor, numpy arrays and scalars (a size-1 array is a number too)
    return float(item() if callable(item) and not isinstance(x, (int, float)) else x)
