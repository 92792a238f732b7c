"""Stage 12's checks: full marks for the reference and for correct training utilities written
differently; points lost, with the mistake named, for each classic mistake."""
import math
import random
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import solutions
from autograder import REGISTRY
from solutions import BOS, EOS, PAD
from tests.grading import assert_caught, assert_full_marks, grade, grade_one, run_silently

NAMES = ["shift_right", "make_batch", "batch_by_tokens", "noam_lr", "make_optimizer"]


@pytest.mark.parametrize("name", NAMES)
def test_reference_gets_full_marks(name):
    assert_full_marks(getattr(solutions, name))


@pytest.mark.parametrize("name", NAMES)
def test_stub_gets_zero_and_says_not_implemented(name):
    def stub(*args, **kwargs):
        raise NotImplementedError()
    points, text = grade(stub, name)
    assert points == 0 and text.count("not implemented yet") == len(REGISTRY[name]), text


# ================================================================ shift_right
def shift_pad(tgt, bos_id=BOS, pad_id=PAD):
    return F.pad(tgt[:, :-1], (1, 0), value=bos_id)


def shift_empty_like(tgt, bos_id=BOS, pad_id=PAD):
    out = torch.empty_like(tgt)
    out[:, 0] = bos_id
    out[:, 1:] = tgt[:, :-1]
    return out


def shift_roll_then_fix(tgt, bos_id=BOS, pad_id=PAD):
    out = tgt.roll(1, dims=1)  # a new tensor: the wrapped last token is then overwritten
    out[:, 0] = bos_id
    return out


@pytest.mark.parametrize("fn", [shift_pad, shift_empty_like, shift_roll_then_fix])
def test_other_correct_shift_right(fn):
    assert_full_marks(fn, "shift_right")


def shift_unshifted(tgt, bos_id=BOS, pad_id=PAD):
    return tgt.clone()


def shift_rolled(tgt, bos_id=BOS, pad_id=PAD):
    return torch.roll(tgt, 1, dims=1)


def shift_drops_first(tgt, bos_id=BOS, pad_id=PAD):
    return torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, 1:]], dim=1)


def shift_keeps_last(tgt, bos_id=BOS, pad_id=PAD):
    return torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt], dim=1)


def shift_in_place(tgt, bos_id=BOS, pad_id=PAD):
    tgt[:, 1:] = tgt[:, :-1].clone()
    tgt[:, 0] = bos_id
    return tgt


def shift_fixed_bos(tgt, bos_id=BOS, pad_id=PAD):
    return solutions.shift_right(tgt)


SHIFT_MISTAKES = [
    ("decoder input not shifted", shift_unshifted, ["unshifted"]),
    ("rolled: the last token wraps to the front", shift_rolled, ["rolled"]),
    ("the first column dropped", shift_drops_first, ["first column was dropped"]),
    ("the last column kept", shift_keeps_last, ["last column was kept"]),
    ("edited in place", shift_in_place, ["in place"]),
    ("bos_id ignored", shift_fixed_bos, ["bos_id argument is ignored"]),
]


@pytest.mark.parametrize("label,fn,keywords", SHIFT_MISTAKES, ids=[m[0] for m in SHIFT_MISTAKES])
def test_shift_right_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "shift_right", *keywords)


# ================================================================ make_batch
def _pad(seqs, pad_id):
    L = max(len(s) for s in seqs)
    return torch.tensor([list(s) + [pad_id] * (L - len(s)) for s in seqs], dtype=torch.long)


def batch_namespace(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """Any object with the attributes will do; masks built by hand, n_tokens left as a tensor."""
    src = _pad(src_seqs, pad_id)
    tgt_in = _pad([[bos_id, *t] for t in tgt_seqs], pad_id)
    tgt_out = _pad([[*t, eos_id] for t in tgt_seqs], pad_id)
    L = tgt_in.size(1)
    causal = torch.tril(torch.ones(L, L)).bool()
    return SimpleNamespace(src=src, tgt_in=tgt_in, tgt_out=tgt_out,
                           src_mask=src.ne(pad_id).unsqueeze(1).unsqueeze(2),
                           tgt_mask=tgt_in.ne(pad_id)[:, None, None, :] & causal,
                           n_tokens=tgt_out.ne(pad_id).sum())


def batch_from_shift(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """tgt_out first, then tgt_in by shifting it (the <eos> becomes padding where it was last)."""
    src = solutions.pad_sequences(src_seqs, pad_id)
    tgt_out = solutions.pad_sequences([t + [eos_id] for t in tgt_seqs], pad_id)
    tgt_in = solutions.shift_right(tgt_out, bos_id).masked_fill(tgt_out == pad_id, pad_id)
    tgt_mask = torch.stack([solutions.target_mask(row[None], pad_id)[0] for row in tgt_in])  # (B, 1, L, L)
    return solutions.Batch(src, tgt_in, tgt_out, solutions.padding_mask(src, pad_id), tgt_mask,
                           sum(len(t) + 1 for t in tgt_seqs))


@pytest.mark.parametrize("fn", [batch_namespace, batch_from_shift])
def test_other_correct_make_batch(fn):
    assert_full_marks(fn, "make_batch")


def with_fields(**changes):
    """A make_batch whose fields are the reference's, except those computed by changes[name](batch, args)."""
    def make_batch(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
        b = solutions.make_batch(src_seqs, tgt_seqs, pad_id, bos_id, eos_id)
        args = SimpleNamespace(src=src_seqs, tgt=tgt_seqs, pad=pad_id, bos=bos_id, eos=eos_id)
        fields = {f: getattr(b, f) for f in ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask", "n_tokens")}
        fields.update({k: f(b, args) for k, f in changes.items()})
        return SimpleNamespace(**fields)
    return make_batch


def _causal(b):
    L = b.tgt_in.size(1)
    return solutions.causal_mask(L)


MAKE_BATCH_MISTAKES = [
    ("decoder input not shifted", with_fields(tgt_in=lambda b, a: b.tgt_out), ["not shifted"]),
    ("no <eos> in tgt_out", with_fields(tgt_out=lambda b, a: _pad(a.tgt, a.pad)), ["no <eos> in tgt_out"]),
    ("<bos> in tgt_out", with_fields(tgt_out=lambda b, a: _pad([[a.bos, *t, a.eos] for t in a.tgt], a.pad)),
     ["<bos> in tgt_out"]),
    ("n_tokens counts padding", with_fields(n_tokens=lambda b, a: b.tgt_out.numel()), ["padding counted"]),
    ("n_tokens without <eos>", with_fields(n_tokens=lambda b, a: sum(len(t) for t in a.tgt)), ["<eos> not counted"]),
    ("tgt_mask only causal", with_fields(tgt_mask=lambda b, a: _causal(b)), ["only the causal part"]),
    ("tgt_mask only padding", with_fields(tgt_mask=lambda b, a: solutions.padding_mask(b.tgt_in, a.pad)),
     ["only the padding part"]),
    ("tgt_mask inverted", with_fields(tgt_mask=lambda b, a: ~b.tgt_mask), ["polarity"]),
    ("src_mask of shape (B, Ls)", with_fields(src_mask=lambda b, a: b.src != a.pad), ["wrong shape"]),
    ("src_mask inverted", with_fields(src_mask=lambda b, a: b.src[:, None, None, :] == a.pad), ["polarity"]),
    ("float masks", with_fields(src_mask=lambda b, a: b.src_mask.float()), ["torch.bool"]),
    ("ids ignored", lambda src, tgt, pad_id=PAD, bos_id=BOS, eos_id=EOS: solutions.make_batch(src, tgt),
     ["argument is ignored"]),
]


@pytest.mark.parametrize("label,fn,keywords", MAKE_BATCH_MISTAKES, ids=[m[0] for m in MAKE_BATCH_MISTAKES])
def test_make_batch_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "make_batch", *keywords)


def test_make_batch_missing_attribute_is_named():
    def make_batch(src, tgt, pad_id=PAD, bos_id=BOS, eos_id=EOS):
        b = solutions.make_batch(src, tgt, pad_id, bos_id, eos_id)
        return SimpleNamespace(src=b.src, tgt_in=b.tgt_in, tgt_out=b.tgt_out, src_mask=b.src_mask, tgt_mask=b.tgt_mask)
    points, text = assert_caught(make_batch, "make_batch", "without n_tokens")
    assert points == 0


# ================================================================ batch_by_tokens
def bbt_descending(lengths, max_tokens):
    """Longest first: the first example of a batch is its longest."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches = []
    for i in order:
        if batches and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def bbt_tensor_shuffled(lengths, max_tokens):
    """torch.argsort, tensors of indices, and the batches in a shuffled order."""
    lengths_t = torch.tensor(lengths)
    order = torch.argsort(lengths_t, stable=True)
    batches, start = [], 0
    while start < len(order):
        end = start + 1
        while end < len(order) and lengths_t[order[end]] * (end - start + 1) <= max_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    random.Random(0).shuffle(batches)
    return batches


@pytest.mark.parametrize("fn", [bbt_descending, bbt_tensor_shuffled])
def test_other_correct_batch_by_tokens(fn):
    assert_full_marks(fn, "batch_by_tokens")


def bbt_unsorted(lengths, max_tokens):
    batches, current, longest = [], [], 0
    for i, n in enumerate(lengths):
        if current and max(longest, n) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    batches.append(current)
    return batches


def bbt_random(lengths, max_tokens):
    order = list(range(len(lengths)))
    random.Random(1).shuffle(order)
    return [[order[i] for i in b] for b in bbt_unsorted([lengths[i] for i in order], max_tokens)]


def bbt_last_batch_lost(lengths, max_tokens):
    return solutions.batch_by_tokens(lengths, max_tokens)[:-1]


def bbt_duplicates(lengths, max_tokens):
    batches = solutions.batch_by_tokens(lengths, max_tokens)
    return [b + [batches[k + 1][0]] if k + 1 < len(batches) else b for k, b in enumerate(batches)]


def bbt_sum_of_lengths(lengths, max_tokens):
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current, total = [], [], 0
    for i in order:
        if current and total + lengths[i] > max_tokens:
            batches.append(current)
            current, total = [], 0
        current.append(i)
        total += lengths[i]
    batches.append(current)
    return batches


def bbt_drops_long(lengths, max_tokens):
    return [[i for i in b if lengths[i] <= max_tokens] for b in solutions.batch_by_tokens(lengths, max_tokens)
            if any(lengths[i] <= max_tokens for i in b)]


def bbt_singletons(lengths, max_tokens):
    return [[i] for i in sorted(range(len(lengths)), key=lambda i: lengths[i])]


def bbt_strict(lengths, max_tokens):
    return solutions.batch_by_tokens(lengths, max_tokens - 1)


BBT_MISTAKES = [
    ("no sorting by length", bbt_unsorted, ["sort the indices by length"]),
    ("random batches", bbt_random, ["sort the indices by length"]),
    ("the last batch lost", bbt_last_batch_lost, ["missing", "never appended"]),
    ("indices duplicated", bbt_duplicates, ["more than once"]),
    ("sum of lengths limited, not the padded size", bbt_sum_of_lengths, ["ignores the padding"]),
    ("long examples dropped", bbt_drops_long, ["missing"]),
    ("one example per batch", bbt_singletons, ["2 batches of 4", "its own batch"]),
    ("< instead of <=", bbt_strict, ["<=, not <"]),
]


@pytest.mark.parametrize("label,fn,keywords", BBT_MISTAKES, ids=[m[0] for m in BBT_MISTAKES])
def test_batch_by_tokens_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "batch_by_tokens", *keywords)


# ================================================================ noam_lr
def noam_piecewise(step, d_model, warmup_steps=4000, factor=1.0):
    step = step or 1
    rate = step / warmup_steps ** 1.5 if step < warmup_steps else 1 / math.sqrt(step)
    return factor * rate / math.sqrt(d_model)


def noam_torch(step, d_model, warmup_steps=4000, factor=1.0):
    s = torch.tensor(float(max(1, step)), dtype=torch.float64)
    return factor * d_model ** -0.5 * torch.minimum(s.rsqrt(), s * warmup_steps ** -1.5)


@pytest.mark.parametrize("fn", [noam_piecewise, noam_torch])
def test_other_correct_noam_lr(fn):
    assert_full_marks(fn, "noam_lr")


def noam(step_fn=lambda s: max(s, 1), warm_exp=-1.5, d_exp=-0.5, use_factor=True, combine=min):
    def noam_lr(step, d_model, warmup_steps=4000, factor=1.0):
        s = step_fn(step)
        return (factor if use_factor else 1.0) * d_model ** d_exp * combine(s ** -0.5, s * warmup_steps ** warm_exp)
    return noam_lr


def noam_zero_gives_zero(step, d_model, warmup_steps=4000, factor=1.0):
    return 0.0 if step == 0 else solutions.noam_lr(step, d_model, warmup_steps, factor)


NOAM_MISTAKES = [
    ("warmup exponent -0.5", noam(warm_exp=-0.5), ["warmup exponent"]),
    ("step 0 divides by zero", noam(step_fn=lambda s: s), ["ZeroDivisionError", "max(step, 1)"]),
    ("step 0 gives 0", noam_zero_gives_zero, ["step 0 gave 0"]),
    ("factor ignored", noam(use_factor=False), ["factor argument is ignored"]),
    ("d_model exponent +0.5", noam(d_exp=0.5), ["d_model exponent"]),
    ("d_model exponent -1", noam(d_exp=-1.0), ["d_model exponent"]),
    ("max instead of min", noam(combine=max), ["max instead of min"]),
]


@pytest.mark.parametrize("label,fn,keywords", NOAM_MISTAKES, ids=[m[0] for m in NOAM_MISTAKES])
def test_noam_lr_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "noam_lr", *keywords)


# ================================================================ make_optimizer
def _noam(step, d, w, f):
    return solutions.noam_lr(step, d, w, f)


def opt_scaled_lambda(model, d_model, warmup_steps=4000, factor=1.0):
    """Adam starts at the first step's rate; the lambda is a ratio to it."""
    first = _noam(1, d_model, warmup_steps, factor)
    opt = torch.optim.Adam(model.parameters(), lr=first, betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _noam(s + 1, d_model, warmup_steps, factor) / first)


class NoamScheduler:
    """A hand-written scheduler: sets the rate of the next step each time it is stepped."""

    def __init__(self, optimizer, d_model, warmup_steps, factor):
        self.optimizer, self.args, self.k = optimizer, (d_model, warmup_steps, factor), 1
        self._apply()

    def _apply(self):
        for g in self.optimizer.param_groups:
            g["lr"] = _noam(self.k, *self.args)

    def step(self):
        self.k += 1
        self._apply()


def opt_own_scheduler(model, d_model, warmup_steps=4000, factor=1.0):
    opt = torch.optim.Adam(list(model.parameters()), betas=(0.9, 0.98), eps=1e-9)
    return opt, NoamScheduler(opt, d_model, warmup_steps, factor)


@pytest.mark.parametrize("fn", [opt_scaled_lambda, opt_own_scheduler])
def test_other_correct_make_optimizer(fn):
    assert_full_marks(fn, "make_optimizer")


def make_opt(betas=(0.9, 0.98), eps=1e-9, lr=1.0, lam=None, params=None):
    def make_optimizer(model, d_model, warmup_steps=4000, factor=1.0):
        ps = model.parameters() if params is None else params(model)
        opt = torch.optim.Adam(ps, lr=lr, betas=betas, eps=eps)
        fn = lam or (lambda s: _noam(s + 1, d_model, warmup_steps, factor))
        if lam is not None:
            fn = lambda s: lam(s, d_model, warmup_steps, factor)  # noqa: E731
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, fn)
    return make_optimizer


def raw_noam(step, d_model, warmup_steps, factor):
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


OPT_MISTAKES = [
    ("Adam's default betas", make_opt(betas=(0.9, 0.999)), ["(0.9, 0.999)"]),
    ("Adam's default eps", make_opt(eps=1e-8), ["1e-8"]),
    ("off by one: lambda(s) = noam_lr(s)", make_opt(lam=lambda s, d, w, f: _noam(s, d, w, f)), ["off by one"]),
    ("ZeroDivisionError at lambda(0)", make_opt(lam=raw_noam), ["LambdaLR calls its lambda with 0"]),
    ("Adam's lr not 1.0", make_opt(lr=1e-3), ["create Adam with lr=1.0"]),
    ("factor ignored", make_opt(lam=lambda s, d, w, f: _noam(s + 1, d, w, 1.0)), ["factor argument is ignored"]),
    ("warmup ignored", make_opt(lam=lambda s, d, w, f: _noam(s + 1, d, 4000, f)), ["warmup_steps argument is ignored"]),
    ("biases left out", make_opt(params=lambda m: [p for p in m.parameters() if p.dim() > 1]), ["missing"]),
]


@pytest.mark.parametrize("label,fn,keywords", OPT_MISTAKES, ids=[m[0] for m in OPT_MISTAKES])
def test_make_optimizer_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "make_optimizer", *keywords)


# ================================================================ review: more styles and mistakes
# ---- correct, written differently
def shift_python_lists(tgt, bos_id=BOS, pad_id=PAD):
    """Through Python lists, back to a LongTensor of the same shape."""
    return torch.tensor([[bos_id] + row[:-1] for row in tgt.tolist()], dtype=torch.long).view(tgt.shape)


def shift_new_full(tgt, bos_id=BOS, pad_id=PAD):
    out = tgt.new_full(tgt.shape, bos_id)
    out[:, 1:] = tgt[:, :-1]
    return out


@pytest.mark.parametrize("fn", [shift_python_lists, shift_new_full])
def test_more_correct_shift_right(fn):
    assert_full_marks(fn, "shift_right")


def batch_pad_sequence(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS, device="cpu"):
    """<bos> y <eos> padded once, then sliced: tgt_in drops the last column (its <eos> turned into padding),
    tgt_out the first; a plain object; an extra keyword argument with a default."""
    from torch.nn.utils.rnn import pad_sequence
    src = pad_sequence([torch.tensor(s) for s in src_seqs], batch_first=True, padding_value=pad_id)
    full = pad_sequence([torch.tensor([bos_id, *t, eos_id]) for t in tgt_seqs], batch_first=True,
                        padding_value=pad_id)
    tgt_in = full[:, :-1].masked_fill(full[:, :-1] == eos_id, pad_id)
    tgt_out = full[:, 1:]
    L = tgt_in.size(1)
    future = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    return SimpleNamespace(src=src, tgt_in=tgt_in, tgt_out=tgt_out, src_mask=src.ne(pad_id)[:, None, None],
                           tgt_mask=~future[None, None] & tgt_in.ne(pad_id)[:, None, None, :],
                           n_tokens=int(tgt_out.ne(pad_id).sum()))


def batch_loops(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """Everything filled in element by element; a namedtuple; n_tokens counted from the lengths."""
    from collections import namedtuple
    B = len(src_seqs)
    Ls, Lt = max(map(len, src_seqs)), max(map(len, tgt_seqs)) + 1
    src = torch.full((B, Ls), pad_id, dtype=torch.long)
    tin, tout = torch.full((B, Lt), pad_id, dtype=torch.long), torch.full((B, Lt), pad_id, dtype=torch.long)
    for b, (s, t) in enumerate(zip(src_seqs, tgt_seqs)):
        for j, tok in enumerate(s):
            src[b, j] = tok
        for j, tok in enumerate([bos_id, *t]):
            tin[b, j] = tok
        for j, tok in enumerate([*t, eos_id]):
            tout[b, j] = tok
    tmask = torch.zeros(B, 1, Lt, Lt, dtype=torch.bool)
    for b in range(B):
        for i in range(Lt):
            for j in range(i + 1):
                tmask[b, 0, i, j] = bool(tin[b, j] != pad_id)
    Fields = namedtuple("Fields", "src tgt_in tgt_out src_mask tgt_mask n_tokens")
    return Fields(src, tin, tout, (src != pad_id).reshape(B, 1, 1, Ls), tmask, sum(len(t) + 1 for t in tgt_seqs))


@pytest.mark.parametrize("fn", [batch_pad_sequence, batch_loops])
def test_more_correct_make_batch(fn):
    assert_full_marks(fn, "make_batch")


def bbt_buckets(lengths, max_tokens):
    """Indices grouped by length in a dict, the lengths walked in order."""
    from collections import defaultdict
    by_length = defaultdict(list)
    for i, n in enumerate(lengths):
        by_length[n].append(i)
    batches, current = [], []
    for n in sorted(by_length):
        for i in by_length[n]:
            if current and n * (len(current) + 1) > max_tokens:
                batches.append(current)
                current = []
            current.append(i)
    return batches + ([current] if current else [])


def bbt_capacity(lengths, max_tokens):
    """Longest first; each batch takes max_tokens // (its longest) examples at once."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches, k = [], 0
    while k < len(order):
        size = max(1, max_tokens // lengths[order[k]])
        batches.append(order[k:k + size])
        k += size
    return batches


def bbt_generator_of_tuples(lengths, max_tokens):
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    current = []
    for i in order:
        if current and lengths[i] * (len(current) + 1) > max_tokens:
            yield tuple(current)
            current = []
        current.append(i)
    if current:
        yield tuple(current)


@pytest.mark.parametrize("fn", [bbt_buckets, bbt_capacity, bbt_generator_of_tuples])
def test_more_correct_batch_by_tokens(fn):
    assert_full_marks(fn, "batch_by_tokens")


def noam_if_else(step, d_model, warmup_steps=4000, factor=1.0):
    if step < 1:
        step = 1
    rate = step * warmup_steps ** -1.5 if step <= warmup_steps else step ** -0.5
    return factor * rate * d_model ** -0.5


def noam_float32_tensor(step, d_model, warmup_steps=4000, factor=1.0):
    s = torch.tensor(max(step, 1), dtype=torch.float32)
    return factor * d_model ** -0.5 * torch.min(s.rsqrt(), s * warmup_steps ** -1.5)


def noam_peak_form(step, d_model, warmup_steps=4000, factor=1.0):
    """The peak (d_model * warmup)^-0.5 times min(step / warmup, sqrt(warmup / step))."""
    step = step or 1
    return factor * (d_model * warmup_steps) ** -0.5 * min(step / warmup_steps, (warmup_steps / step) ** 0.5)


@pytest.mark.parametrize("fn", [noam_if_else, noam_float32_tensor, noam_peak_form])
def test_more_correct_noam_lr(fn):
    assert_full_marks(fn, "noam_lr")


def opt_stepped_at_creation(model, d_model, warmup_steps=4000, factor=1.0):
    """lambda s: noam_lr(s) and one scheduler step at creation (noam_lr(0) = noam_lr(1)): the k-th optimizer
    step still runs at noam_lr(k). (PyTorch warns about the order; the check stays silent.)"""
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: solutions.noam_lr(s, d_model, warmup_steps, factor))
    sched.step()
    return opt, sched


def opt_two_groups(model, d_model, warmup_steps=4000, factor=1.0):
    """Two parameter groups, a list of lambdas, lr=1 as an int, the formula inline."""
    matrices = [p for p in model.parameters() if p.dim() > 1]
    vectors = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.Adam([{"params": matrices}, {"params": vectors}], lr=1, betas=(0.9, 0.98), eps=1e-9)
    f = lambda s: factor * d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup_steps ** -1.5)  # noqa: E731
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, [f, f])


class _NoamLR(torch.optim.lr_scheduler.LRScheduler):
    def __init__(self, optimizer, d_model, warmup_steps, factor):
        self.args = (d_model, warmup_steps, factor)
        super().__init__(optimizer)

    def get_lr(self):
        return [solutions.noam_lr(self.last_epoch + 1, *self.args) for _ in self.base_lrs]


def opt_lr_scheduler_subclass(model, d_model, warmup_steps=4000, factor=1.0):
    opt = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    return opt, _NoamLR(opt, d_model, warmup_steps, factor)


@pytest.mark.parametrize("fn", [opt_stepped_at_creation, opt_two_groups, opt_lr_scheduler_subclass])
def test_more_correct_make_optimizer(fn):
    assert_full_marks(fn, "make_optimizer")


# ---- mistakes
def shift_eos_to_pad(tgt, bos_id=BOS, pad_id=PAD):
    out = solutions.shift_right(tgt, bos_id)
    return out.masked_fill(out == EOS, pad_id)


def batch_appends_eos_in_place(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """Right fields, but the caller's target lists get an <eos> appended (each epoch one more)."""
    for t in tgt_seqs:
        t.append(eos_id)
    return solutions.make_batch(src_seqs, [t[:-1] for t in tgt_seqs], pad_id, bos_id, eos_id)


def batch_tgt_in_from_shift(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """tgt_in = shift_right(tgt_out): the <eos> of the shorter targets stays in tgt_in."""
    b = solutions.make_batch(src_seqs, tgt_seqs, pad_id, bos_id, eos_id)
    b.tgt_in = solutions.shift_right(b.tgt_out, bos_id)
    b.tgt_mask = solutions.target_mask(b.tgt_in, pad_id)
    return b


def bbt_first_as_longest(lengths, max_tokens):
    """Sorted ascending, but the size is computed with the batch's first (shortest) length."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for i in order:
        if current and lengths[current[0]] * (len(current) + 1) > max_tokens:
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current]


def bbt_closes_after_overflow(lengths, max_tokens):
    """Adds first, checks afterwards: every batch ends one example too large."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for i in order:
        current.append(i)
        if max(lengths[j] for j in current) * len(current) > max_tokens:
            batches.append(current)
            current = []
    return batches + ([current] if current else [])


def noam_step_plus_one(step, d_model, warmup_steps=4000, factor=1.0):
    return solutions.noam_lr(step + 1, d_model, warmup_steps, factor)


def noam_step_minus_one(step, d_model, warmup_steps=4000, factor=1.0):
    return solutions.noam_lr(max(step - 1, 1), d_model, warmup_steps, factor)


def noam_d_model_on_decay_only(step, d_model, warmup_steps=4000, factor=1.0):
    s = max(step, 1)
    return factor * min(d_model ** -0.5 * s ** -0.5, s * warmup_steps ** -1.5)


def noam_returns_text(step, d_model, warmup_steps=4000, factor=1.0):
    return f"{solutions.noam_lr(step, d_model, warmup_steps, factor)!r}"


def opt_scheduler_stepped_early(model, d_model, warmup_steps=4000, factor=1.0):
    opt, sched = solutions.make_optimizer(model, d_model, warmup_steps, factor)
    sched.step()  # before the first optimizer step: every step one ahead
    return opt, sched


def opt_amsgrad(model, d_model, warmup_steps=4000, factor=1.0):
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, amsgrad=True)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: solutions.noam_lr(s + 1, d_model, warmup_steps,
                                                                                    factor))


REVIEW_MISTAKES = [
    ("shift_right", "<eos> turned into <pad>", shift_eos_to_pad, ["replaced by <pad>"]),
    ("make_batch", "the caller's lists edited in place", batch_appends_eos_in_place, ["edited in place"]),
    ("make_batch", "tgt_in = shift_right(tgt_out)", batch_tgt_in_from_shift, ["keeps the <eos> of the shorter"]),
    ("batch_by_tokens", "the first length taken as the longest", bbt_first_as_longest, ["max_tokens"]),
    ("batch_by_tokens", "checked after adding", bbt_closes_after_overflow, ["<= 400", "check the size before adding"]),
    ("noam_lr", "step + 1", noam_step_plus_one, ["off by one", "step + 1"]),
    ("noam_lr", "step - 1", noam_step_minus_one, ["off by one", "step - 1"]),
    ("noam_lr", "d_model on the decay term only", noam_d_model_on_decay_only, ["only the decay term"]),
    ("noam_lr", "a string", noam_returns_text, ["expected a number"]),
    ("make_optimizer", "scheduler stepped at creation", opt_scheduler_stepped_early,
     ["off by one", "do not step the scheduler before"]),
    ("make_optimizer", "amsgrad", opt_amsgrad, ["amsgrad"]),
]


@pytest.mark.parametrize("name,label,fn,keywords", REVIEW_MISTAKES, ids=[f"{m[0]}: {m[1]}" for m in REVIEW_MISTAKES])
def test_more_mistakes_are_caught(name, label, fn, keywords):
    assert_caught(fn, name, *keywords)


def test_equivalent_n_tokens_and_tgt_mask_from_other_fields_get_full_marks():
    """n_tokens counted on tgt_in, and tgt_mask built from tgt_out: both equal the contract's values
    (<bos> y and y <eos> have their real tokens at the same places), so they are correct."""
    def make_batch(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
        b = solutions.make_batch(src_seqs, tgt_seqs, pad_id, bos_id, eos_id)
        b.n_tokens = int((b.tgt_in != pad_id).sum())
        b.tgt_mask = solutions.target_mask(b.tgt_out, pad_id)
        return b
    assert_full_marks(make_batch, "make_batch")


# ================================================================ review round 2: more styles and mistakes
# ---- correct, written differently
def shift_numpy(tgt, bos_id=BOS, pad_id=PAD):
    import numpy as np
    a = tgt.numpy()
    return torch.from_numpy(np.concatenate([np.full((a.shape[0], 1), bos_id, dtype=a.dtype), a[:, :-1]], axis=1))


def shift_narrow_hstack(tgt, bos_id=BOS, pad_id=PAD, *, unused=None):
    return torch.hstack((tgt.new_tensor([[bos_id]]).expand(tgt.size(0), 1), tgt.narrow(1, 0, tgt.size(1) - 1)))


def shift_index_select(tgt, bos_id=BOS, pad_id=PAD):
    """Columns 0, 0, 1, ..., L-2 gathered into a new tensor, whose column 0 is then overwritten."""
    out = tgt.index_select(1, torch.arange(-1, tgt.size(1) - 1).clamp(min=0))
    out[:, 0] = bos_id
    return out


def shift_loops(tgt, bos_id=BOS, pad_id=PAD):
    B, L = tgt.shape
    out = torch.zeros(B, L, dtype=torch.long)
    for b in range(B):
        out[b, 0] = bos_id
        for j in range(1, L):
            out[b, j] = tgt[b, j - 1]
    return out


def shift_negative_pad(tgt, bos_id=BOS, pad_id=PAD):
    """F.pad with a negative right pad crops the last column."""
    return F.pad(tgt, (1, -1), value=bos_id)


@torch.no_grad()
def shift_transposed(tgt, bos_id=BOS, pad_id=PAD):
    t = tgt.t()
    return torch.cat([torch.full((1, t.size(1)), bos_id, dtype=t.dtype), t[:-1]], 0).t().contiguous()


@pytest.mark.parametrize("fn", [shift_numpy, shift_narrow_hstack, shift_index_select, shift_loops, shift_negative_pad,
                                shift_transposed])
def test_round2_correct_shift_right(fn):
    assert_full_marks(fn, "shift_right")


def batch_numpy(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """numpy arrays filled row by row, a dataclass, n_tokens a numpy integer."""
    import numpy as np
    from dataclasses import dataclass

    @dataclass
    class B:
        src: torch.Tensor
        tgt_in: torch.Tensor
        tgt_out: torch.Tensor
        src_mask: torch.Tensor
        tgt_mask: torch.Tensor
        n_tokens: int
    n, Ls, Lt = len(src_seqs), max(map(len, src_seqs)), max(map(len, tgt_seqs)) + 1
    src, tin, tout = (np.full((n, L), pad_id, dtype=np.int64) for L in (Ls, Lt, Lt))
    for b, (s, t) in enumerate(zip(src_seqs, tgt_seqs)):
        src[b, :len(s)], tin[b, :len(t) + 1], tout[b, :len(t) + 1] = s, [bos_id] + t, t + [eos_id]
    tmask = np.tril(np.ones((Lt, Lt), dtype=bool))[None, None] & (tin != pad_id)[:, None, None, :]
    return B(torch.from_numpy(src), torch.from_numpy(tin), torch.from_numpy(tout),
             torch.from_numpy(src != pad_id)[:, None, None, :], torch.from_numpy(tmask),
             np.int64((tout != pad_id).sum()))


def batch_logical_and_float_count(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS, *, device="cpu"):
    """pad_sequence, logical_and of a triu-made causal mask and the padding, a contiguous copy of the
    source mask, n_tokens a float, a keyword-only extra."""
    from torch.nn.utils.rnn import pad_sequence
    src = pad_sequence([torch.tensor(s) for s in src_seqs], batch_first=True, padding_value=pad_id).to(device)
    tgt = [torch.tensor(t, dtype=torch.long) for t in tgt_seqs]
    tgt_in = pad_sequence([torch.cat([torch.tensor([bos_id]), t]) for t in tgt], True, pad_id)
    tgt_out = pad_sequence([torch.cat([t, torch.tensor([eos_id])]) for t in tgt], True, pad_id)
    L = tgt_in.size(1)
    causal = torch.triu(torch.ones(L, L), diagonal=1) == 0
    return SimpleNamespace(src=src, tgt_in=tgt_in, tgt_out=tgt_out,
                           src_mask=(src != pad_id).view(src.size(0), 1, 1, -1).clone(),
                           tgt_mask=torch.logical_and(causal.view(1, 1, L, L), (tgt_in != pad_id).view(-1, 1, 1, L)),
                           n_tokens=float(sum(len(t) + 1 for t in tgt_seqs)))


class _LazyBatch:
    """Masks and n_tokens as properties computed from the stored tensors."""

    def __init__(self, src, tgt_in, tgt_out, pad_id):
        self.src, self.tgt_in, self.tgt_out, self._pad = src, tgt_in, tgt_out, pad_id

    @property
    def src_mask(self):
        return (self.src != self._pad).unsqueeze(-2).unsqueeze(-2)

    @property
    def tgt_mask(self):
        L = self.tgt_in.size(-1)
        return (self.tgt_in != self._pad).unsqueeze(1).unsqueeze(1) & torch.ones(L, L, dtype=torch.bool).tril()

    @property
    def n_tokens(self):
        return (self.tgt_out != self._pad).sum()


def batch_lazy_properties(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    def pad(rows):
        L = max(map(len, rows))
        return torch.LongTensor([r + [pad_id] * (L - len(r)) for r in rows])
    return _LazyBatch(pad([list(s) for s in src_seqs]), pad([[bos_id, *t] for t in tgt_seqs]),
                      pad([[*t, eos_id] for t in tgt_seqs]), pad_id)


def batch_deepcopy_then_edit(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """Deep copies edited in place (insert, append, extend): the caller's lists stay as they are."""
    import copy
    src, tin, tout = copy.deepcopy(src_seqs), copy.deepcopy(tgt_seqs), copy.deepcopy(tgt_seqs)
    for t in tin:
        t.insert(0, bos_id)
    for t in tout:
        t.append(eos_id)
    L = max(map(len, tin))
    for rows, width in ((src, max(map(len, src))), (tin, L), (tout, L)):
        for r in rows:
            r.extend([pad_id] * (width - len(r)))
    s, i, o = (torch.tensor(x) for x in (src, tin, tout))
    return SimpleNamespace(src=s, tgt_in=i, tgt_out=o, src_mask=(s != pad_id)[:, None, None],
                           tgt_mask=torch.tril(torch.ones(1, 1, L, L)).to(torch.bool) & (i != pad_id)[:, None, None, :],
                           n_tokens=(o != pad_id).sum())


def batch_eos_by_scatter(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """y padded once; tgt_out gets <eos> written at each length, tgt_in is <bos> then y without its last column."""
    from collections import namedtuple
    n = len(tgt_seqs)
    y = torch.full((n, max(map(len, tgt_seqs)) + 1), pad_id, dtype=torch.long)
    for k, t in enumerate(tgt_seqs):
        y[k, :len(t)] = torch.tensor(t, dtype=torch.long)
    tgt_out = y.clone()
    tgt_out[torch.arange(n), torch.tensor([len(t) for t in tgt_seqs])] = eos_id
    tgt_in = torch.cat([torch.full((n, 1), bos_id), y[:, :-1]], 1)
    src = torch.full((len(src_seqs), max(map(len, src_seqs))), pad_id, dtype=torch.long)
    for k, s in enumerate(src_seqs):
        src[k, :len(s)] = torch.tensor(s)
    L, i = tgt_in.size(1), torch.arange(tgt_in.size(1))
    tm = (i.view(1, 1, L, 1) >= i.view(1, 1, 1, L)) & tgt_in.ne(pad_id).view(-1, 1, 1, L)
    Fields = namedtuple("Fields", ["src", "tgt_in", "tgt_out", "src_mask", "tgt_mask", "n_tokens"])
    return Fields(src, tgt_in, tgt_out, src.ne(pad_id).view(len(src_seqs), 1, 1, -1), tm, int(tgt_out.ne(pad_id).sum()))


def batch_tuples(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """Tuples throughout (t + (eos,)), int32 turned into long, a class made with type()."""
    src_seqs, tgt_seqs = [tuple(s) for s in src_seqs], [tuple(t) for t in tgt_seqs]

    def pad(rows):
        L = max(len(r) for r in rows)
        return torch.tensor([r + (pad_id,) * (L - len(r)) for r in rows], dtype=torch.int32).long()
    d = {"src": pad(src_seqs), "tgt_in": pad([(bos_id,) + t for t in tgt_seqs]),
         "tgt_out": pad([t + (eos_id,) for t in tgt_seqs])}
    L = d["tgt_in"].shape[1]
    d["src_mask"] = d["src"].ne(pad_id)[:, None, None, :]
    d["tgt_mask"] = d["tgt_in"].ne(pad_id)[:, None, None, :] & ~torch.ones(L, L, dtype=torch.bool).triu(1)
    d["n_tokens"] = sum(len(t) for t in tgt_seqs) + len(tgt_seqs)
    return type("Batch", (), d)()


@pytest.mark.parametrize("fn", [batch_numpy, batch_logical_and_float_count, batch_lazy_properties,
                                batch_deepcopy_then_edit, batch_eos_by_scatter, batch_tuples])
def test_round2_correct_make_batch(fn):
    assert_full_marks(fn, "make_batch")


def bbt_numpy_arrays(lengths, max_tokens):
    import numpy as np
    lengths = np.asarray(lengths)
    out, cur = [], []
    for i in np.argsort(lengths, kind="stable"):
        if cur and lengths[i] * (len(cur) + 1) > max_tokens:
            out.append(np.array(cur))
            cur = []
        cur.append(i)
    return out + [np.array(cur)] * bool(cur)


def bbt_append_then_pop(lengths, max_tokens):
    """Adds the example, and takes it back out for the next batch when the batch is now over the limit."""
    batches, cur = [], []
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        cur.append(i)
        if len(cur) > 1 and max(lengths[j] for j in cur) * len(cur) > max_tokens:
            cur.pop()
            batches.append(cur)
            cur = [i]
    return batches + [cur]


def bbt_groupby(lengths, max_tokens):
    import itertools
    batches, cur, longest = [], [], 0
    for n, group in itertools.groupby(sorted(range(len(lengths)), key=lengths.__getitem__), key=lengths.__getitem__):
        for i in group:
            if cur and max(longest, n) * (len(cur) + 1) > max_tokens:
                batches.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, n)
    return batches + [cur] * bool(cur)


def bbt_torch_descending_slices(lengths, max_tokens):
    """Longest first (torch.sort, stable), a pointer and slices of the sorted index tensor."""
    vals, order = torch.sort(torch.tensor(lengths), descending=True, stable=True)
    batches, k = [], 0
    while k < len(lengths):
        size = 1
        while k + size < len(lengths) and int(vals[k]) * (size + 1) <= max_tokens:
            size += 1
        batches.append(order[k:k + size])
        k += size
    return batches


def bbt_recursive(lengths, max_tokens):
    import sys
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * len(lengths)))

    def split(rest):
        if not rest:
            return []
        k = 1
        while k < len(rest) and lengths[rest[k]] * (k + 1) <= max_tokens:
            k += 1
        return [rest[:k]] + split(rest[k:])
    return split(sorted(range(len(lengths)), key=lambda i: lengths[i]))


def bbt_sets(lengths, max_tokens, *, shuffle=False):
    """Batches as sets in a dict, returned as its values; a keyword-only extra."""
    groups, b, count, longest = {}, 0, 0, 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if count and max(longest, lengths[i]) * (count + 1) > max_tokens:
            b, count, longest = b + 1, 0, 0
        groups.setdefault(b, set()).add(i)
        count, longest = count + 1, max(longest, lengths[i])
    return list(groups.values())


@pytest.mark.parametrize("fn", [bbt_numpy_arrays, bbt_append_then_pop, bbt_groupby, bbt_torch_descending_slices,
                                bbt_recursive, bbt_sets])
def test_round2_correct_batch_by_tokens(fn):
    assert_full_marks(fn, "batch_by_tokens")


def noam_one_element_array(step, d_model, warmup_steps=4000, factor=1.0):
    """A one-element numpy array (it used to get 0/4: 'expected a number')."""
    import numpy as np
    return np.array([solutions.noam_lr(step, d_model, warmup_steps, factor)])


def noam_numpy(step, d_model, warmup_steps=4000, factor=1.0):
    import numpy as np
    s = np.maximum(step, 1).astype(np.float64)
    return factor * np.power(d_model, -0.5) * np.minimum(np.power(s, -0.5), s * np.power(warmup_steps, -1.5))


def noam_sqrt(step, d_model, warmup_steps=4000, factor=1.0):
    step = max(1, step)
    return factor / math.sqrt(d_model) * min(1 / math.sqrt(step), step / (warmup_steps * math.sqrt(warmup_steps)))


def noam_log_space(step, d_model, warmup_steps=4000, factor=1.0):
    s = max(step, 1)
    return factor * math.exp(-0.5 * math.log(d_model)
                             + min(-0.5 * math.log(s), math.log(s) - 1.5 * math.log(warmup_steps)))


def noam_float32_numpy(step, d_model, warmup_steps=4000, factor=1.0):
    import numpy as np
    s, f32 = np.float32(max(step, 1)), np.float32
    return f32(factor) * f32(d_model) ** f32(-0.5) * min(s ** f32(-0.5), s * f32(warmup_steps) ** f32(-1.5))


def _noam_cached():
    import functools

    @functools.lru_cache(maxsize=None)
    def noam_lr(step, d_model, warmup_steps=4000, factor=1.0, *, min_step=1):
        step = max(step, min_step)
        return factor * (d_model ** -0.5) * min(step ** -0.5, step * warmup_steps ** -1.5)
    return noam_lr


@pytest.mark.parametrize("fn", [noam_one_element_array, noam_numpy, noam_sqrt, noam_log_space, noam_float32_numpy,
                                _noam_cached()])
def test_round2_correct_noam_lr(fn):
    assert_full_marks(fn, "noam_lr")


def opt_tensor_lr(model, d_model, warmup_steps=4000, factor=1.0):
    """lr given as a tensor (LambdaLR then changes it in place; it used to get 3/5)."""
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(1.0), betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: solutions.noam_lr(s + 1, d_model, warmup_steps,
                                                                                    factor))


def opt_multiplicative(model, d_model, warmup_steps=4000, factor=1.0):
    """MultiplicativeLR: each step multiplies by noam(k + 1) / noam(k); Adam starts at noam(1)."""
    nl = solutions.noam_lr
    opt = torch.optim.Adam(model.parameters(), lr=nl(1, d_model, warmup_steps, factor), betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.MultiplicativeLR(
        opt, lambda e: nl(e + 1, d_model, warmup_steps, factor) / nl(e, d_model, warmup_steps, factor))


def opt_adamw_without_decay(model, d_model, warmup_steps=4000, factor=1.0):
    """AdamW with weight_decay=0 is Adam; functools.partial for the lambda."""
    import functools
    opt = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    f = functools.partial(lambda s, d, w, c: c * d ** -0.5 * min((s + 1) ** -0.5, (s + 1) * w ** -1.5),
                          d=d_model, w=warmup_steps, c=factor)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, f)


class _NoamOpt:
    """The Annotated Transformer's style: step() sets the rate of the NEXT optimizer step."""

    def __init__(self, optimizer, d_model, warmup, factor):
        self.optimizer, self.d, self.w, self.f, self._step = optimizer, d_model, warmup, factor, 0
        self.step()

    def step(self):
        self._step += 1
        for p in self.optimizer.param_groups:
            p["lr"] = self.f * (self.d ** (-0.5) * min(self._step ** (-0.5), self._step * self.w ** (-1.5)))


def opt_annotated_style(model, d_model, warmup_steps=4000, factor=1.0):
    opt = torch.optim.Adam(model.parameters(), lr=0, betas=(0.9, 0.98), eps=1e-9)
    return opt, _NoamOpt(opt, d_model, warmup_steps, factor)


def opt_sequential_lr(model, d_model, warmup_steps=4000, factor=1.0):
    """LinearLR for the warmup, then a LambdaLR decay, chained by SequentialLR (PyTorch warns; the check stays
    silent)."""
    w = warmup_steps
    opt = torch.optim.Adam(model.parameters(), lr=solutions.noam_lr(w, d_model, w, factor), betas=(0.9, 0.98),
                           eps=1e-9, foreach=False)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / w, end_factor=1.0, total_iters=w - 1)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (w / (s + w)) ** 0.5)
    return opt, torch.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[w - 1])


def opt_named_groups_list(model, d_model, warmup_steps=4000, factor=1.0):
    """Groups by parameter name, one lambda each, returned as a list."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    opt = torch.optim.Adam([dict(params=weights), dict(params=rest)], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    lam = [lambda s: solutions.noam_lr(s + 1, d_model, warmup_steps, factor) for _ in range(2)]
    return [opt, torch.optim.lr_scheduler.LambdaLR(opt, lam)]


@pytest.mark.parametrize("fn", [opt_tensor_lr, opt_multiplicative, opt_adamw_without_decay, opt_annotated_style,
                                opt_sequential_lr, opt_named_groups_list])
def test_round2_correct_make_optimizer(fn):
    assert_full_marks(fn, "make_optimizer")


# ---- mistakes
def bbt_sorted_positions(lengths, max_tokens):
    """Sorts the lengths themselves and returns positions in the SORTED list."""
    out, cur = [], []
    for i, n in enumerate(sorted(lengths)):
        if cur and n * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    return out + [cur]


def bbt_sorts_caller_list(lengths, max_tokens):
    """lengths.sort(): the caller's list is reordered (and the positions are those of the sorted list)."""
    lengths.sort()
    return bbt_sorted_positions(lengths, max_tokens)


def bbt_empty_batch(lengths, max_tokens):
    """Closes the current batch without checking that it holds anything: an empty batch when the first
    (shortest) example is already too long (it used to get full marks)."""
    out, cur = [], []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if max([lengths[j] for j in cur] + [lengths[i]]) * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    return out + [cur]


def noam_expr(expr):
    def noam_lr(step, d_model, warmup_steps=4000, factor=1.0):
        return expr(max(step, 1), d_model, warmup_steps, factor)
    return noam_lr


def opt_two_optimizers(model, d_model, warmup_steps=4000, factor=1.0):
    """The scheduler is built on a second Adam; the first one is returned."""
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    other = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.LambdaLR(other, lambda s: solutions.noam_lr(s + 1, d_model, warmup_steps,
                                                                                      factor))


def opt_lambda(fn):
    def make_optimizer(model, d_model, warmup_steps=4000, factor=1.0):
        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: fn(s + 1, d_model, warmup_steps, factor))
    return make_optimizer


ROUND2_MISTAKES = [
    ("shift_right", "<pad> in front", lambda tgt, bos_id=BOS, pad_id=PAD: F.pad(tgt[:, :-1], (1, 0), value=pad_id),
     ["<pad> was put in front"]),
    ("shift_right", "shifted along the batch axis",
     lambda tgt, bos_id=BOS, pad_id=PAD: torch.cat([torch.full_like(tgt[:1], bos_id), tgt[:-1]], 0), ["dim 0"]),
    ("shift_right", "<bos> at the end",
     lambda tgt, bos_id=BOS, pad_id=PAD: torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], bos_id)], 1),
     ["<bos> was put at the end"]),
    ("shift_right", "a view of the input written into",
     lambda tgt, bos_id=BOS, pad_id=PAD: shift_in_place(tgt[:, :], bos_id), ["in place"]),
    ("make_batch", "padded query rows masked too",
     with_fields(tgt_mask=lambda b, a: b.tgt_mask & (b.tgt_in != a.pad)[:, None, :, None]), ["padded query rows"]),
    ("make_batch", "tgt_out padded with <eos>",
     with_fields(tgt_out=lambda b, a: _pad([t + [a.eos] for t in a.tgt], a.eos)), ["padded with <eos>"]),
    ("make_batch", "src_mask made from tgt_in", with_fields(src_mask=lambda b, a: (b.tgt_in != a.pad)[:, None, None, :]),
     ["sizes do not fit", "padding mask of src"]),
    ("make_batch", "src left-padded", with_fields(src=lambda b, a: torch.tensor(
        [[a.pad] * (3 - len(s)) + s for s in a.src])), ["pad every source on the right"]),
    ("batch_by_tokens", "positions in the sorted list", bbt_sorted_positions, ["positions in the SORTED lengths"]),
    ("batch_by_tokens", "the caller's lengths sorted in place", bbt_sorts_caller_list, ["edited in place"]),
    ("batch_by_tokens", "an empty batch", bbt_empty_batch, ["an empty batch"]),
    ("noam_lr", "d_model ** -1/2", noam_expr(lambda s, d, w, f: f * d ** -1 / 2 * min(s ** -0.5, s * w ** -1.5)),
     ["operator precedence", "d_model ** -0.5"]),
    ("noam_lr", "step ** -1/2", noam_expr(lambda s, d, w, f: f * d ** -0.5 * min(s ** -1 / 2, s * w ** -1.5)),
     ["operator precedence", "step ** -0.5"]),
    ("noam_lr", "warmup_steps ** -3/2", noam_expr(lambda s, d, w, f: f * d ** -0.5 * min(s ** -0.5, s * w ** -3 / 2)),
     ["operator precedence", "warmup_steps ** -1.5"]),
    ("noam_lr", "warmup_steps ** 1.5", noam_expr(lambda s, d, w, f: f * d ** -0.5 * min(s ** -0.5, s * w ** 1.5)),
     ["no warmup"]),
    ("noam_lr", "step ** 0.5", noam_expr(lambda s, d, w, f: f * d ** -0.5 * min(s ** 0.5, s * w ** -1.5)),
     ["never decays"]),
    ("noam_lr", "divided by factor", noam_expr(lambda s, d, w, f: d ** -0.5 * min(s ** -0.5, s * w ** -1.5) / f),
     ["divided by factor"]),
    ("noam_lr", "d_model and warmup_steps swapped",
     lambda step, d_model, warmup_steps=4000, factor=1.0: solutions.noam_lr(step, warmup_steps, d_model, factor),
     ["swapped"]),
    ("make_optimizer", "the scheduler on another optimizer", opt_two_optimizers, ["another optimizer"]),
    ("make_optimizer", "d_model and warmup_steps swapped in the lambda",
     opt_lambda(lambda s, d, w, f: solutions.noam_lr(s, w, d, f)), ["the schedule: d_model and warmup_steps swapped"]),
    ("make_optimizer", "the warmup exponent -0.5 in the lambda",
     opt_lambda(lambda s, d, w, f: f * d ** -0.5 * min(s ** -0.5, s * w ** -0.5)), ["the schedule", "warmup exponent"]),
]


@pytest.mark.parametrize("name,label,fn,keywords", ROUND2_MISTAKES, ids=[f"{m[0]}: {m[1]}" for m in ROUND2_MISTAKES])
def test_round2_mistakes_are_caught(name, label, fn, keywords):
    assert_caught(fn, name, *keywords)


# ================================================================ review round 3
ROUND3_MISTAKES = [
    ("rate held at its peak after warmup (was named 'off by one')",
     noam_expr(lambda s, d, w, f: f * d ** -0.5 * min(s, w) * w ** -1.5), ["stays at its peak"], ["off by one"]),
    ("factor on the decay term only (was named 'factor ignored')",
     noam_expr(lambda s, d, w, f: d ** -0.5 * min(f * s ** -0.5, s * w ** -1.5)), ["only the decay term"],
     ["factor argument is ignored"]),
]


@pytest.mark.parametrize("label,fn,keywords,absent", ROUND3_MISTAKES, ids=[m[0] for m in ROUND3_MISTAKES])
def test_round3_noam_mistakes_named_consistently(label, fn, keywords, absent):
    """A mistake is named only when it matches the learner's values at every step where they are wrong."""
    _, text = assert_caught(fn, "noam_lr", *keywords)
    assert not any(a in text for a in absent), text


def test_check_runs_write_nothing_to_stderr():
    """check() on correct and wrong training utilities, in a fresh interpreter, leaves stderr empty (SequentialLR
    and a scheduler stepped before the optimizer make PyTorch warn)."""
    code = ("from autograder import check\nfrom tests import test_checks_stage12 as t\n"
            "for fn, name in [(t.opt_sequential_lr, 'make_optimizer'), (t.opt_scheduler_stepped_early, "
            "'make_optimizer'), (t.opt_tensor_lr, 'make_optimizer'), (t.bbt_empty_batch, 'batch_by_tokens'), "
            "(t.noam_one_element_array, 'noam_lr'), (t.shift_numpy, 'shift_right'), (t.batch_numpy, 'make_batch')]:\n"
            "    fn.__name__ = name\n    check(fn)\n")
    run_silently(code)


# ================================================================ review round 4: messages that named the wrong mistake
def bbt_longest_before_adding(lengths, max_tokens):
    """Limits longest x count, but with the longest length from before the new example joins."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current, longest = [], [], 0
    for i in order:
        if current and longest * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, lengths[i])
    return batches + [current]


def test_bbt_longest_before_adding_is_named():
    """It was told that the sum of the lengths ignores the padding."""
    points, line = grade_one(bbt_longest_before_adding, "batch_by_tokens", "each batch's padded size")
    assert points == 0 and "BEFORE the new example" in line and "ignores the padding" not in line, line


def noam_integer_division(step, d_model, warmup_steps=4000, factor=1.0):
    step = max(1, step)
    return factor * d_model ** -0.5 * min(step ** -0.5, (step // warmup_steps) * warmup_steps ** -0.5)


def test_noam_integer_division_step_zero_is_not_told_to_count_step_one():
    """step 0 is counted as step 1 here; the formula itself gives 0 (it was told 'count it as step 1')."""
    points, line = grade_one(noam_integer_division, "noam_lr", "step 0 counts as step 1")
    assert points == 0 and "formula itself gives 0" in line and "integer division" in line, line
    assert "step 0 gave 0" not in line, line


def batch_in_out_swapped(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    b = solutions.make_batch(src_seqs, tgt_seqs, pad_id, bos_id, eos_id)
    return solutions.Batch(b.src, b.tgt_out, b.tgt_in, b.src_mask, b.tgt_mask, b.n_tokens)


def batch_tgt_in_shifted_from_tgt_out(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """tgt_in = shift_right(tgt_out): the <eos> of the shorter targets stays in tgt_in; the mask is built from it."""
    b = solutions.make_batch(src_seqs, tgt_seqs, pad_id, bos_id, eos_id)
    tgt_in = solutions.shift_right(b.tgt_out, bos_id)
    return solutions.Batch(b.src, tgt_in, b.tgt_out, b.src_mask, solutions.target_mask(tgt_in, pad_id), b.n_tokens)


@pytest.mark.parametrize("title", ["tgt_in:", "tgt_out:", "uses pad_id"])
def test_make_batch_swapped_fields_are_named_swapped(title):
    """They were told 'tgt_in equals tgt_out' and '<bos> in tgt_out instead of <eos>'."""
    points, line = grade_one(batch_in_out_swapped, "make_batch", title)
    assert points == 0 and "tgt_in and tgt_out are swapped" in line, line


def test_make_batch_mask_from_a_wrong_tgt_in_points_at_tgt_in():
    """The mask is target_mask(tgt_in) of a wrong tgt_in: it was told to use target_mask(tgt_in)."""
    points, line = grade_one(batch_tgt_in_shifted_from_tgt_out, "make_batch", "tgt_mask:")
    assert points == 0 and "fix tgt_in" in line, line


def _src_with_eos(b, a):
    return solutions.pad_sequences([[*s, a.eos] for s in a.src], a.pad)


batch_src_with_eos = with_fields(src=_src_with_eos,
                                 src_mask=lambda b, a: solutions.padding_mask(_src_with_eos(b, a), a.pad))


def test_make_batch_mask_from_a_wrong_src_points_at_src():
    """An <eos> added to the sources, the mask built right from them: it was told only that the sizes do not fit."""
    points, line = grade_one(batch_src_with_eos, "make_batch", "src_mask:")
    assert points == 0 and "fix src" in line, line
