"""Stage 12's checks: full marks for correct training utilities however written; for each classic mistake, exactly
the points it earns and the words that name it (the reference and the stub: tests/test_registry.py)."""
import copy
import functools
import itertools
import math
import random
import sys
from collections import defaultdict, namedtuple
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

import solutions
from solutions import BOS, EOS, PAD
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes, run_silently

SHIFT, MAKE_BATCH, BBT = solutions.shift_right, solutions.make_batch, solutions.batch_by_tokens
NOAM, MAKE_OPTIMIZER = solutions.noam_lr, solutions.make_optimizer


# ================================================================ shift_right
def shift_pad(tgt, bos_id=BOS, pad_id=PAD):
    return F.pad(tgt[:, :-1], (1, 0), value=bos_id)


def shift_negative_pad(tgt, bos_id=BOS, pad_id=PAD):
    """F.pad with a negative right pad crops the last column."""
    return F.pad(tgt, (1, -1), value=bos_id)


def shift_empty_like(tgt, bos_id=BOS, pad_id=PAD):
    out = torch.empty_like(tgt)
    out[:, 0] = bos_id
    out[:, 1:] = tgt[:, :-1]
    return out


def shift_new_full(tgt, bos_id=BOS, pad_id=PAD):
    out = tgt.new_full(tgt.shape, bos_id)
    out[:, 1:] = tgt[:, :-1]
    return out


def shift_roll_then_fix(tgt, bos_id=BOS, pad_id=PAD):
    out = tgt.roll(1, dims=1)  # a new tensor: the wrapped last token is then overwritten
    out[:, 0] = bos_id
    return out


def shift_index_select(tgt, bos_id=BOS, pad_id=PAD):
    """Columns 0, 0, 1, ..., L-2 gathered into a new tensor, whose column 0 is then overwritten."""
    out = tgt.index_select(1, torch.arange(-1, tgt.size(1) - 1).clamp(min=0))
    out[:, 0] = bos_id
    return out


def shift_python_lists(tgt, bos_id=BOS, pad_id=PAD):
    """Through Python lists, back to a LongTensor of the same shape."""
    return torch.tensor([[bos_id] + row[:-1] for row in tgt.tolist()], dtype=torch.long).view(tgt.shape)


def shift_numpy(tgt, bos_id=BOS, pad_id=PAD):
    a = tgt.numpy()
    return torch.from_numpy(np.concatenate([np.full((a.shape[0], 1), bos_id, dtype=a.dtype), a[:, :-1]], axis=1))


def shift_narrow_hstack(tgt, bos_id=BOS, pad_id=PAD, *, unused=None):
    return torch.hstack((tgt.new_tensor([[bos_id]]).expand(tgt.size(0), 1), tgt.narrow(1, 0, tgt.size(1) - 1)))


def shift_loops(tgt, bos_id=BOS, pad_id=PAD):
    B, L = tgt.shape
    out = torch.zeros(B, L, dtype=torch.long)
    for b in range(B):
        out[b, 0] = bos_id
        for j in range(1, L):
            out[b, j] = tgt[b, j - 1]
    return out


@torch.no_grad()
def shift_transposed(tgt, bos_id=BOS, pad_id=PAD):
    t = tgt.t()
    return torch.cat([torch.full((1, t.size(1)), bos_id, dtype=t.dtype), t[:-1]], 0).t().contiguous()


@pytest.mark.parametrize("fn", [shift_pad, shift_negative_pad, shift_empty_like, shift_new_full, shift_roll_then_fix,
                                shift_index_select, shift_python_lists, shift_numpy, shift_narrow_hstack, shift_loops,
                                shift_transposed])
def test_other_correct_shift_right(fn):
    assert_full_marks(fn, "shift_right")


def shift_in_place(tgt, bos_id=BOS, pad_id=PAD):
    tgt[:, 1:] = tgt[:, :-1].clone()
    tgt[:, 0] = bos_id
    return tgt


def _shift(new):
    """shift_right returning `new`; bos is the (B, 1) column of bos_id."""
    return edit(SHIFT, ("return torch.cat([bos, tgt[:, :-1]], dim=1)", f"return {new}"))


SHIFT_MISTAKES = [
    Mistake("decoder input not shifted", _shift("tgt.clone()"), 1, "unshifted"),
    Mistake("rolled: the last token wraps to the front", _shift("torch.roll(tgt, 1, dims=1)"), 1, "rolled"),
    Mistake("the first column dropped", _shift("torch.cat([bos, tgt[:, 1:]], dim=1)"), 1, "first column was dropped"),
    Mistake("the last column kept", _shift("torch.cat([bos, tgt], dim=1)"), 1, "last column was kept"),
    Mistake("<bos> at the end", _shift("torch.cat([tgt[:, 1:], bos], dim=1)"), 1, "<bos> was put at the end"),
    Mistake("shifted along the batch axis", _shift("torch.cat([torch.full_like(tgt[:1], bos_id), tgt[:-1]], dim=0)"), 1,
            "dim 0"),
    Mistake("<pad> in front", edit(SHIFT, ("bos_id)  #", "pad_id)  #")), 1, "<pad> was put in front"),
    Mistake("bos_id ignored", edit(SHIFT, ("bos_id)  #", "BOS)  #")), 3, "bos_id argument is ignored"),
    Mistake("<eos> turned into <pad>", edit(SHIFT, ("return torch.cat([bos, tgt[:, :-1]], dim=1)",
            "out = torch.cat([bos, tgt[:, :-1]], dim=1)\n    return out.masked_fill(out == EOS, pad_id)")), 3,
            "replaced by <pad>"),
    Mistake("edited in place", shift_in_place, 3, "in place"),
    Mistake("a view of the input written into", lambda tgt, bos_id=BOS, pad_id=PAD: shift_in_place(tgt[:, :], bos_id),
            3, "in place"),
]


@pytest.mark.parametrize("m", mistakes("shift_right", SHIFT_MISTAKES))
def test_shift_right_mistakes(m):
    assert_mistake(m)


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


def batch_pad_sequence(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS, device="cpu"):
    """<bos> y <eos> padded once, then sliced: tgt_in drops the last column (its <eos> turned into padding),
    tgt_out the first; a plain object; an extra keyword argument with a default."""
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


def batch_numpy(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """numpy arrays filled row by row, a dataclass, n_tokens a numpy integer."""

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


# n_tokens counted on tgt_in and tgt_mask built from tgt_out: both equal the contract's values (<bos> y and y <eos>
# have their real tokens at the same places), so they are correct
batch_equivalent_fields = edit(MAKE_BATCH, ("target_mask(tgt_in, pad_id)", "target_mask(tgt_out, pad_id)"),
                               ("int((tgt_out != pad_id).sum())", "int((tgt_in != pad_id).sum())"))


@pytest.mark.parametrize("fn", [batch_namespace, batch_from_shift, batch_pad_sequence, batch_loops, batch_numpy,
                                batch_logical_and_float_count, batch_lazy_properties, batch_deepcopy_then_edit,
                                batch_eos_by_scatter, batch_tuples, batch_equivalent_fields])
def test_other_correct_make_batch(fn):
    assert_full_marks(fn, "make_batch")


def with_fields(drop=(), **changes):
    """A make_batch whose fields are the reference's, except those computed by changes[name](batch, args) and those
    dropped."""
    def make_batch(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
        b = solutions.make_batch(src_seqs, tgt_seqs, pad_id, bos_id, eos_id)
        args = SimpleNamespace(src=src_seqs, tgt=tgt_seqs, pad=pad_id, bos=bos_id, eos=eos_id)
        fields = {f: getattr(b, f) for f in ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask", "n_tokens")}
        fields.update({k: f(b, args) for k, f in changes.items()})
        return SimpleNamespace(**{k: v for k, v in fields.items() if k not in drop})
    return make_batch


def batch_appends_eos_in_place(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    """Right fields, but the caller's target lists get an <eos> appended (each epoch one more)."""
    for t in tgt_seqs:
        t.append(eos_id)
    return solutions.make_batch(src_seqs, [t[:-1] for t in tgt_seqs], pad_id, bos_id, eos_id)


# tgt_in = shift_right(tgt_out): the <eos> of the shorter targets stays in tgt_in; the mask is built from it
batch_tgt_in_from_shift = edit(
    MAKE_BATCH, ("tgt_in = pad_sequences([[bos_id] + list(t) for t in tgt_seqs], pad_id)", ""),
    ("# (B, Lt): y <eos>", "\n    tgt_in = shift_right(tgt_out, bos_id)"))
# told 'tgt_in equals tgt_out' and '<bos> in tgt_out instead of <eos>' before
batch_in_out_swapped = edit(MAKE_BATCH, ("return Batch(src, tgt_in, tgt_out,", "return Batch(src, tgt_out, tgt_in,"))
MAKE_BATCH_MISTAKES = [
    Mistake("decoder input not shifted", with_fields(tgt_in=lambda b, a: b.tgt_out), 5, "not shifted"),
    Mistake("tgt_in = shift_right(tgt_out)", batch_tgt_in_from_shift, 4, "keeps the <eos> of the shorter"),
    Mistake("tgt_in = shift_right(tgt_out): its mask", batch_tgt_in_from_shift, 0, "fix tgt_in", title="tgt_mask:"),
    Mistake("no <eos> in tgt_out", with_fields(tgt_out=lambda b, a: _pad(a.tgt, a.pad)), 5, "no <eos> in tgt_out"),
    Mistake("<bos> in tgt_out", with_fields(tgt_out=lambda b, a: _pad([[a.bos, *t, a.eos] for t in a.tgt], a.pad)), 5,
            "<bos> in tgt_out"),
    Mistake("tgt_out padded with <eos>", with_fields(tgt_out=lambda b, a: _pad([t + [a.eos] for t in a.tgt], a.eos)), 5,
            "padded with <eos>"),
    Mistake("tgt_in and tgt_out swapped: tgt_in", batch_in_out_swapped, 0, "tgt_in and tgt_out are swapped",
            title="tgt_in:"),
    Mistake("tgt_in and tgt_out swapped: tgt_out", batch_in_out_swapped, 0, "tgt_in and tgt_out are swapped",
            title="tgt_out:"),
    Mistake("tgt_in and tgt_out swapped: the ids", batch_in_out_swapped, 0, "tgt_in and tgt_out are swapped",
            title="uses pad_id"),
    Mistake("n_tokens counts padding", with_fields(n_tokens=lambda b, a: b.tgt_out.numel()), 5, "padding counted"),
    Mistake("n_tokens without <eos>", with_fields(n_tokens=lambda b, a: sum(len(t) for t in a.tgt)), 5,
            "<eos> not counted"),
    Mistake("no n_tokens attribute", with_fields(drop=["n_tokens"]), 0, "without n_tokens"),
    Mistake("tgt_mask only causal", with_fields(tgt_mask=lambda b, a: solutions.causal_mask(b.tgt_in.size(1))), 5,
            "only the causal part"),
    Mistake("tgt_mask only padding", with_fields(tgt_mask=lambda b, a: solutions.padding_mask(b.tgt_in, a.pad)), 5,
            "only the padding part"),
    Mistake("tgt_mask inverted", with_fields(tgt_mask=lambda b, a: ~b.tgt_mask), 5, "polarity"),
    Mistake("padded query rows masked too",
            with_fields(tgt_mask=lambda b, a: b.tgt_mask & (b.tgt_in != a.pad)[:, None, :, None]), 5,
            "padded query rows"),
    Mistake("src_mask of shape (B, Ls)", with_fields(src_mask=lambda b, a: b.src != a.pad), 5, "wrong shape"),
    Mistake("src_mask inverted", with_fields(src_mask=lambda b, a: b.src[:, None, None, :] == a.pad), 5, "polarity"),
    Mistake("float masks", with_fields(src_mask=lambda b, a: b.src_mask.float()), 5, "torch.bool"),
    Mistake("src_mask made from tgt_in", with_fields(src_mask=lambda b, a: (b.tgt_in != a.pad)[:, None, None, :]), 5,
            ("sizes do not fit", "padding mask of src")),
    Mistake("src left-padded", with_fields(src=lambda b, a: torch.tensor([[a.pad] * (3 - len(s)) + s for s in a.src])),
            5, "pad every source on the right"),
    Mistake("an <eos> added to the sources, the mask built right from them",  # told only that the sizes do not fit
            edit(MAKE_BATCH, ("pad_sequences(src_seqs,", "pad_sequences([[*s, eos_id] for s in src_seqs],")),
            0, "fix src", title="src_mask:"),
    Mistake("ids ignored", edit(MAKE_BATCH, ("### BEGIN SOLUTION", "pad_id, bos_id, eos_id = PAD, BOS, EOS")), 6,
            "argument is ignored"),
    Mistake("the caller's lists edited in place", batch_appends_eos_in_place, 6, "edited in place"),
]


@pytest.mark.parametrize("m", mistakes("make_batch", MAKE_BATCH_MISTAKES))
def test_make_batch_mistakes(m):
    assert_mistake(m)


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


def bbt_buckets(lengths, max_tokens):
    """Indices grouped by length in a dict, the lengths walked in order."""
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


def bbt_numpy_arrays(lengths, max_tokens):
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


@pytest.mark.parametrize("fn", [bbt_descending, bbt_tensor_shuffled, bbt_buckets, bbt_capacity, bbt_generator_of_tuples,
                                bbt_numpy_arrays, bbt_append_then_pop, bbt_groupby, bbt_torch_descending_slices,
                                bbt_recursive, bbt_sets])
def test_other_correct_batch_by_tokens(fn):
    assert_full_marks(fn, "batch_by_tokens")


def _fits(new):
    """batch_by_tokens that closes the current batch when `new` is true (instead of: the batch with the new example
    would pad to more than max_tokens)."""
    return edit(BBT, ("current and new_longest * (len(current) + 1) > max_tokens", new))


_ORDER = "sorted(range(len(lengths)), key=lambda i: lengths[i])"
bbt_unsorted = edit(BBT, (_ORDER, "range(len(lengths))"))


def bbt_random(lengths, max_tokens):
    order = list(range(len(lengths)))
    random.Random(1).shuffle(order)
    return [[order[i] for i in b] for b in bbt_unsorted([lengths[i] for i in order], max_tokens)]


def bbt_duplicates(lengths, max_tokens):
    batches = solutions.batch_by_tokens(lengths, max_tokens)
    return [b + [batches[k + 1][0]] if k + 1 < len(batches) else b for k, b in enumerate(batches)]


def bbt_drops_long(lengths, max_tokens):
    return [[i for i in b if lengths[i] <= max_tokens] for b in solutions.batch_by_tokens(lengths, max_tokens)
            if any(lengths[i] <= max_tokens for i in b)]


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


# closes the current batch without checking that it holds anything: an empty batch when the first (shortest)
# example is already too long (it used to get full marks)
bbt_empty_batch = _fits("new_longest * (len(current) + 1) > max_tokens")
BBT_MISTAKES = [
    Mistake("no sorting by length", bbt_unsorted, 4, "sort the indices by length"),
    Mistake("random batches", bbt_random, 4, "sort the indices by length"),
    Mistake("positions in the sorted list",
            edit(BBT, ("    order = " + _ORDER, "    lengths = sorted(lengths)\n    order = range(len(lengths))")), 2,
            "positions in the SORTED lengths"),
    Mistake("the caller's lengths sorted in place",
            edit(BBT, ("    order = " + _ORDER, "    lengths.sort()\n    order = range(len(lengths))")), 0,
            "edited in place"),
    Mistake("the last batch lost", edit(BBT, ("    if current:\n        batches.append(current)\n", "")), 0,
            ("missing", "never appended")),
    Mistake("indices duplicated", bbt_duplicates, 0, "more than once"),
    Mistake("an empty batch", bbt_empty_batch, 4, "an empty batch"),
    Mistake("long examples dropped", bbt_drops_long, 2, "missing"),
    Mistake("sum of lengths limited, not the padded size",
            _fits("current and sum(lengths[j] for j in current) + lengths[i] > max_tokens"), 4, "ignores the padding"),
    Mistake("the first length taken as the longest",
            _fits("current and lengths[current[0]] * (len(current) + 1) > max_tokens"), 2, "max_tokens"),
    Mistake("the longest from before the new example joins",  # it was told that the sum of lengths ignores the padding
            _fits("current and longest * (len(current) + 1) > max_tokens"), 0, "BEFORE the new example",
            title="each batch's padded size", not_says="ignores the padding"),
    Mistake("checked after adding", bbt_closes_after_overflow, 3, ("<= 400", "check the size before adding")),
    Mistake("< instead of <=", _fits("current and new_longest * (len(current) + 1) >= max_tokens"), 4, "<=, not <"),
    Mistake("one example per batch", _fits("current"), 4, ("2 batches of 4", "its own batch")),
]


@pytest.mark.parametrize("m", mistakes("batch_by_tokens", BBT_MISTAKES))
def test_batch_by_tokens_mistakes(m):
    assert_mistake(m)


# ================================================================ noam_lr
def noam_piecewise(step, d_model, warmup_steps=4000, factor=1.0):
    step = step or 1
    rate = step / warmup_steps ** 1.5 if step < warmup_steps else 1 / math.sqrt(step)
    return factor * rate / math.sqrt(d_model)


def noam_if_else(step, d_model, warmup_steps=4000, factor=1.0):
    if step < 1:
        step = 1
    rate = step * warmup_steps ** -1.5 if step <= warmup_steps else step ** -0.5
    return factor * rate * d_model ** -0.5


def noam_peak_form(step, d_model, warmup_steps=4000, factor=1.0):
    """The peak (d_model * warmup)^-0.5 times min(step / warmup, sqrt(warmup / step))."""
    step = step or 1
    return factor * (d_model * warmup_steps) ** -0.5 * min(step / warmup_steps, (warmup_steps / step) ** 0.5)


def noam_sqrt(step, d_model, warmup_steps=4000, factor=1.0):
    step = max(1, step)
    return factor / math.sqrt(d_model) * min(1 / math.sqrt(step), step / (warmup_steps * math.sqrt(warmup_steps)))


def noam_log_space(step, d_model, warmup_steps=4000, factor=1.0):
    s = max(step, 1)
    return factor * math.exp(-0.5 * math.log(d_model)
                             + min(-0.5 * math.log(s), math.log(s) - 1.5 * math.log(warmup_steps)))


def noam_torch(step, d_model, warmup_steps=4000, factor=1.0):
    s = torch.tensor(float(max(1, step)), dtype=torch.float64)
    return factor * d_model ** -0.5 * torch.minimum(s.rsqrt(), s * warmup_steps ** -1.5)


def noam_float32_tensor(step, d_model, warmup_steps=4000, factor=1.0):
    s = torch.tensor(max(step, 1), dtype=torch.float32)
    return factor * d_model ** -0.5 * torch.min(s.rsqrt(), s * warmup_steps ** -1.5)


def noam_numpy(step, d_model, warmup_steps=4000, factor=1.0):
    s = np.maximum(step, 1).astype(np.float64)
    return factor * np.power(d_model, -0.5) * np.minimum(np.power(s, -0.5), s * np.power(warmup_steps, -1.5))


def noam_float32_numpy(step, d_model, warmup_steps=4000, factor=1.0):
    s, f32 = np.float32(max(step, 1)), np.float32
    return f32(factor) * f32(d_model) ** f32(-0.5) * min(s ** f32(-0.5), s * f32(warmup_steps) ** f32(-1.5))


def noam_one_element_array(step, d_model, warmup_steps=4000, factor=1.0):
    """A one-element numpy array (it used to get 0/4: 'expected a number')."""
    return np.array([solutions.noam_lr(step, d_model, warmup_steps, factor)])


@functools.lru_cache(maxsize=None)
def noam_cached(step, d_model, warmup_steps=4000, factor=1.0, *, min_step=1):
    step = max(step, min_step)
    return factor * (d_model ** -0.5) * min(step ** -0.5, step * warmup_steps ** -1.5)


@pytest.mark.parametrize("fn", [noam_piecewise, noam_if_else, noam_peak_form, noam_sqrt, noam_log_space, noam_torch,
                                noam_float32_tensor, noam_numpy, noam_float32_numpy, noam_one_element_array,
                                noam_cached])
def test_other_correct_noam_lr(fn):
    assert_full_marks(fn, "noam_lr")


def _noam(old, new):
    return edit(NOAM, (old, new))


_RATE = "factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)"


def _rate(new):
    """noam_lr returning `new` (step = max(step, 1) kept)."""
    return _noam(f"return {_RATE}", f"return {new}")


NOAM_MISTAKES = [
    Mistake("warmup exponent -0.5", _noam("warmup_steps ** -1.5", "warmup_steps ** -0.5"), 0, "warmup exponent"),
    Mistake("warmup_steps ** -3/2", _noam("warmup_steps ** -1.5", "warmup_steps ** -3 / 2"), 0,
            ("operator precedence", "warmup_steps ** -1.5")),
    Mistake("warmup_steps ** 1.5", _noam("warmup_steps ** -1.5", "warmup_steps ** 1.5"), 0, "no warmup"),
    Mistake("d_model exponent +0.5", _noam("d_model ** -0.5", "d_model ** 0.5"), 1, "d_model exponent"),
    Mistake("d_model exponent -1", _noam("d_model ** -0.5", "d_model ** -1.0"), 1, "d_model exponent"),
    Mistake("d_model ** -1/2", _noam("d_model ** -0.5", "d_model ** -1 / 2"), 1,
            ("operator precedence", "d_model ** -0.5")),
    Mistake("d_model on the decay term only",
            _rate("factor * min(d_model ** -0.5 * step ** -0.5, step * warmup_steps ** -1.5)"), 0,
            "only the decay term"),
    Mistake("step ** -1/2", _noam("min(step ** -0.5", "min(step ** -1 / 2"), 1,
            ("operator precedence", "step ** -0.5")),
    Mistake("step ** 0.5", _noam("min(step ** -0.5", "min(step ** 0.5"), 1, "never decays"),
    Mistake("max instead of min", _noam("* min(step **", "* max(step **"), 0, "max instead of min"),
    Mistake("rate held at its peak after warmup",  # it was named 'off by one'
            _rate("factor * d_model ** -0.5 * min(step, warmup_steps) * warmup_steps ** -1.5"), 1, "stays at its peak",
            not_says="off by one"),
    Mistake("factor ignored", _noam("return factor * ", "return "), 3, "factor argument is ignored"),
    Mistake("divided by factor", _rate("d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5) / factor"), 3,
            "divided by factor"),
    Mistake("factor on the decay term only",  # it was named 'factor ignored'
            _rate("d_model ** -0.5 * min(factor * step ** -0.5, step * warmup_steps ** -1.5)"), 3,
            "only the decay term", not_says="factor argument is ignored"),
    Mistake("d_model and warmup_steps swapped",
            lambda step, d_model, warmup_steps=4000, factor=1.0: NOAM(step, warmup_steps, d_model, factor), 0,
            "swapped"),
    Mistake("step 0 divides by zero", _noam("step = max(step, 1)", "pass"), 3, ("ZeroDivisionError", "max(step, 1)")),
    Mistake("step 0 gives 0", _noam("step = max(step, 1)", "if step == 0:\n        return 0.0"), 3, "step 0 gave 0"),
    Mistake("step 0 counted as 1 but integer division",  # it was told 'count it as step 1'
            _noam("step * warmup_steps ** -1.5", "(step // warmup_steps) * warmup_steps ** -0.5"), 0,
            ("formula itself gives 0", "integer division"), title="step 0 counts as step 1", not_says="step 0 gave 0"),
    Mistake("step + 1", _noam("max(step, 1)", "max(step + 1, 1)"), 0, ("off by one", "step + 1")),
    Mistake("step - 1", _noam("max(step, 1)", "max(step - 1, 1)"), 1, ("off by one", "step - 1")),
    Mistake("a string", _rate(f"repr({_RATE})"), 0, "expected a number"),
]


@pytest.mark.parametrize("m", mistakes("noam_lr", NOAM_MISTAKES))
def test_noam_lr_mistakes(m):
    assert_mistake(m)


# ================================================================ make_optimizer
def opt_scaled_lambda(model, d_model, warmup_steps=4000, factor=1.0):
    """Adam starts at the first step's rate; the lambda is a ratio to it."""
    first = NOAM(1, d_model, warmup_steps, factor)
    opt = torch.optim.Adam(model.parameters(), lr=first, betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: NOAM(s + 1, d_model, warmup_steps, factor) / first)


class NoamScheduler:
    """A hand-written scheduler: sets the rate of the next step each time it is stepped."""

    def __init__(self, optimizer, d_model, warmup_steps, factor):
        self.optimizer, self.args, self.k = optimizer, (d_model, warmup_steps, factor), 1
        self._apply()

    def _apply(self):
        for g in self.optimizer.param_groups:
            g["lr"] = NOAM(self.k, *self.args)

    def step(self):
        self.k += 1
        self._apply()


def opt_own_scheduler(model, d_model, warmup_steps=4000, factor=1.0):
    opt = torch.optim.Adam(list(model.parameters()), betas=(0.9, 0.98), eps=1e-9)
    return opt, NoamScheduler(opt, d_model, warmup_steps, factor)


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


class _NoamLR(torch.optim.lr_scheduler.LRScheduler):
    def __init__(self, optimizer, d_model, warmup_steps, factor):
        self.args = (d_model, warmup_steps, factor)
        super().__init__(optimizer)

    def get_lr(self):
        return [NOAM(self.last_epoch + 1, *self.args) for _ in self.base_lrs]


def opt_lr_scheduler_subclass(model, d_model, warmup_steps=4000, factor=1.0):
    opt = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    return opt, _NoamLR(opt, d_model, warmup_steps, factor)


def opt_two_groups(model, d_model, warmup_steps=4000, factor=1.0):
    """Two parameter groups, a list of lambdas, lr=1 as an int, the formula inline."""
    matrices = [p for p in model.parameters() if p.dim() > 1]
    vectors = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.Adam([{"params": matrices}, {"params": vectors}], lr=1, betas=(0.9, 0.98), eps=1e-9)
    f = lambda s: factor * d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup_steps ** -1.5)  # noqa: E731
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, [f, f])


def opt_named_groups_list(model, d_model, warmup_steps=4000, factor=1.0):
    """Groups by parameter name, one lambda each, returned as a list."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    opt = torch.optim.Adam([dict(params=weights), dict(params=rest)], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    lam = [lambda s: NOAM(s + 1, d_model, warmup_steps, factor) for _ in range(2)]
    return [opt, torch.optim.lr_scheduler.LambdaLR(opt, lam)]


def opt_multiplicative(model, d_model, warmup_steps=4000, factor=1.0):
    """MultiplicativeLR: each step multiplies by noam(k + 1) / noam(k); Adam starts at noam(1)."""
    opt = torch.optim.Adam(model.parameters(), lr=NOAM(1, d_model, warmup_steps, factor), betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.MultiplicativeLR(
        opt, lambda e: NOAM(e + 1, d_model, warmup_steps, factor) / NOAM(e, d_model, warmup_steps, factor))


def opt_adamw_without_decay(model, d_model, warmup_steps=4000, factor=1.0):
    """AdamW with weight_decay=0 is Adam; functools.partial for the lambda."""
    opt = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    f = functools.partial(lambda s, d, w, c: c * d ** -0.5 * min((s + 1) ** -0.5, (s + 1) * w ** -1.5),
                          d=d_model, w=warmup_steps, c=factor)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, f)


def opt_sequential_lr(model, d_model, warmup_steps=4000, factor=1.0):
    """LinearLR for the warmup, then a LambdaLR decay, chained by SequentialLR (PyTorch warns; the check stays
    silent)."""
    w = warmup_steps
    opt = torch.optim.Adam(model.parameters(), lr=NOAM(w, d_model, w, factor), betas=(0.9, 0.98), eps=1e-9,
                           foreach=False)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / w, end_factor=1.0, total_iters=w - 1)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (w / (s + w)) ** 0.5)
    return opt, torch.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[w - 1])


_ADAM = "Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)"
_LAMBDA = "lambda s: noam_lr(s + 1, d_model, warmup_steps, factor)"
_STEPPED = ("    return optimizer, scheduler", "    scheduler.step()\n    return optimizer, scheduler")


def _adam(old, new):
    """make_optimizer whose Adam(...) has `old` changed into `new`."""
    return edit(MAKE_OPTIMIZER, (_ADAM, _ADAM.replace(old, new)))


def _lambda(new):
    """make_optimizer whose LambdaLR gets lambda s: `new`."""
    return edit(MAKE_OPTIMIZER, (_LAMBDA, f"lambda s: {new}"))


# lr given as a tensor (LambdaLR then changes it in place; it used to get 3/5)
opt_tensor_lr = _adam("lr=1.0", "lr=torch.tensor(1.0)")
# lambda s: noam_lr(s) and one scheduler step at creation (noam_lr(0) = noam_lr(1)): the k-th optimizer step still
# runs at noam_lr(k) (PyTorch warns about the order; the check stays silent)
opt_stepped_at_creation = edit(MAKE_OPTIMIZER, ("noam_lr(s + 1,", "noam_lr(s,"), _STEPPED)


@pytest.mark.parametrize("fn", [opt_scaled_lambda, opt_own_scheduler, opt_annotated_style, opt_lr_scheduler_subclass,
                                opt_two_groups, opt_named_groups_list, opt_multiplicative, opt_adamw_without_decay,
                                opt_sequential_lr, opt_tensor_lr, opt_stepped_at_creation])
def test_other_correct_make_optimizer(fn):
    assert_full_marks(fn, "make_optimizer")


opt_scheduler_stepped_early = edit(MAKE_OPTIMIZER, _STEPPED)  # before the first optimizer step: every step one ahead
MAKE_OPTIMIZER_MISTAKES = [
    Mistake("biases left out", _adam("model.parameters()", "[p for p in model.parameters() if p.dim() > 1]"), 3,
            "missing"),
    Mistake("the scheduler on another optimizer",
            edit(MAKE_OPTIMIZER, ("LambdaLR(\n        optimizer,", f"LambdaLR(\n        torch.optim.{_ADAM},")), 2,
            "another optimizer"),
    Mistake("Adam's default betas", _adam("betas=(0.9, 0.98)", "betas=(0.9, 0.999)"), 3, "(0.9, 0.999)"),
    Mistake("Adam's default eps", _adam("eps=1e-9", "eps=1e-8"), 4, "1e-8"),
    Mistake("amsgrad", _adam("eps=1e-9", "eps=1e-9, amsgrad=True"), 3, "amsgrad"),
    Mistake("Adam's lr not 1.0", _adam("lr=1.0", "lr=1e-3"), 2, "create Adam with lr=1.0"),
    Mistake("off by one: lambda(s) = noam_lr(s)", _lambda("noam_lr(s, d_model, warmup_steps, factor)"), 2,
            "off by one"),
    Mistake("scheduler stepped at creation", opt_scheduler_stepped_early, 2,
            ("off by one", "do not step the scheduler before")),
    Mistake("ZeroDivisionError at lambda(0)",
            _lambda("factor * d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5)"), 0,
            "LambdaLR calls its lambda with 0"),
    Mistake("factor ignored", _lambda("noam_lr(s + 1, d_model, warmup_steps, 1.0)"), 3, "factor argument is ignored"),
    Mistake("warmup ignored", _lambda("noam_lr(s + 1, d_model, 4000, factor)"), 2, "warmup_steps argument is ignored"),
    Mistake("d_model and warmup_steps swapped in the lambda", _lambda("noam_lr(s + 1, warmup_steps, d_model, factor)"),
            2, "the schedule: d_model and warmup_steps swapped"),
    Mistake("the warmup exponent -0.5 in the lambda",
            _lambda("factor * d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup_steps ** -0.5)"), 2,
            ("the schedule", "warmup exponent")),
]


@pytest.mark.parametrize("m", mistakes("make_optimizer", MAKE_OPTIMIZER_MISTAKES))
def test_make_optimizer_mistakes(m):
    assert_mistake(m)


# ================================================================ the checks themselves
def test_check_runs_write_nothing_to_stderr():
    """check() on correct and wrong training utilities, in a fresh interpreter, leaves stderr empty (SequentialLR
    and a scheduler stepped before the optimizer make PyTorch warn)."""
    code = ("from autograder import check\nfrom tests import test_checks_stage12 as t\n"
            "for fn, name in [(t.opt_sequential_lr, 'make_optimizer'), (t.opt_scheduler_stepped_early, "
            "'make_optimizer'), (t.opt_tensor_lr, 'make_optimizer'), (t.bbt_empty_batch, 'batch_by_tokens'), "
            "(t.noam_one_element_array, 'noam_lr'), (t.shift_numpy, 'shift_right'), (t.batch_numpy, 'make_batch')]:\n"
            "    fn.__name__ = name\n    check(fn)\n")
    run_silently(code)
