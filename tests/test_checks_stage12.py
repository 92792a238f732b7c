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
from tests.grading import assert_caught, assert_full_marks, grade

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
