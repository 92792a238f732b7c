"""Stage 12's checks: full marks for correct training utilities however written; for each classic mistake,
exactly the points it earns and the words that name it (the reference and the stub:
tests/test_registry.py)."""
import copy  # noqa: F401 (copy to pad_sequence: the rewritten functions' code uses these names, see _as)
import functools
import inspect
import itertools  # noqa: F401
import math  # noqa: F401
import random  # noqa: F401
import sys  # noqa: F401
from collections import defaultdict, namedtuple  # noqa: F401
from dataclasses import make_dataclass  # noqa: F401
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: F401
from torch.nn.utils.rnn import pad_sequence  # noqa: F401

import solutions
from solutions import BOS, EOS, PAD
from solutions import pad_sequences as _pad
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes, run_silently

SHIFT, MAKE_BATCH, BBT = solutions.shift_right, solutions.make_batch, solutions.batch_by_tokens
NOAM, MAKE_OPTIMIZER = solutions.noam_lr, solutions.make_optimizer
_ORDER, _CLOSES = "order = sorted(range(len(lengths)), key=lambda i: lengths[i])", ("new_longest * "
                                                                                    "(len(current) + 1)")
_ADAM = "Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)"
_LAMBDA, _OPT = "lambda s: noam_lr(s + 1, d_model, warmup_steps, factor)", "optimizer = torch.optim."
_AT = {  # the references' statements that _as rewrites, by name
    MAKE_BATCH: dict(src="src = pad_sequences(src_seqs, pad_id)",
                     tgt_in="tgt_in = pad_sequences([[bos_id] + list(t) for t in tgt_seqs], pad_id)",
                     tgt_out="tgt_out = pad_sequences([list(t) + [eos_id] for t in tgt_seqs], pad_id)",
                     ret="return Batch(src, tgt_in, tgt_out, padding_mask(src, pad_id), target_mask(tgt_in, "
                         "pad_id),\n                 int((tgt_out != pad_id).sum()))"),
    BBT: dict(order=_ORDER, ret="return batches"),
    MAKE_OPTIMIZER: dict(opt=_OPT, adam=_ADAM, ret="return optimizer, scheduler",
                         scheduler=f"torch.optim.lr_scheduler.LambdaLR(\n        optimizer, {_LAMBDA})")}


def _as(ref, *lines, args="", wrap=None, **parts):
    """`ref` (a function of solutions/) with `lines` as its body (if any), its statements _AT[ref][name]
    written as parts[name] (a line or lines), `args` added to its parameters, decorated with `wrap`; sees this
    module's names."""
    src = inspect.getsource(ref)
    sig = src[src.index("def "):src.index(")", src.index("def ")) + 1]
    body = src[src.index('"""\n', src.index('"""') + 3) + 4:src.index("    ### END SOLUTION")]
    made = edit(ref, *[(body, "".join(f"    {s}\n" for s in lines))] * bool(lines),
                (sig, sig[:-1] + args + ")"),
                *((_AT[ref][k], v if isinstance(v, str) else "\n    ".join(v)) for k, v in parts.items()))
    for name, value in globals().items():
        made.__globals__.setdefault(name, value)
    return wrap(made) if wrap else made


def _at(ref, old, new="{}"):
    """A function of a text that edits `ref`: `old` becomes `new` with the text in its {}."""
    return lambda text: edit(ref, (old, new.format(text)))


def _noam(old, new):
    return edit(NOAM, (old, new))


def _adam(old, new):
    """make_optimizer whose Adam(...) has `old` changed into `new`."""
    return edit(MAKE_OPTIMIZER, (_ADAM, _ADAM.replace(old, new)))


def with_fields(drop=(), **changes):
    """A make_batch with the reference's fields, but changes[name](batch, args) for those in changes, none
    in drop."""
    def make_batch(src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS, eos_id=EOS):
        b = solutions.make_batch(src_seqs, tgt_seqs, pad_id, bos_id, eos_id)
        args = SimpleNamespace(src=src_seqs, tgt=tgt_seqs, pad=pad_id, bos=bos_id, eos=eos_id)
        fields = {f: getattr(b, f) for f in ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask", "n_tokens")}
        fields.update({k: f(b, args) for k, f in changes.items()})
        return SimpleNamespace(**{k: v for k, v in fields.items() if k not in drop})
    return make_batch


# ================================================================ shift_right
SHIFT_CORRECT = {
    "F.pad": _as(SHIFT, "return F.pad(tgt[:, :-1], (1, 0), value=bos_id)"),
    "F.pad with a negative right pad (crops the last column)": _as(SHIFT, "return F.pad(tgt, (1, -1), "
                                                                          "value=bos_id)"),
    "empty_like": _as(SHIFT, "out = torch.empty_like(tgt)", "out[:, 0] = bos_id", "out[:, 1:] = tgt[:, :-1]",
        "return out"),
    "new_full": _as(SHIFT, "out = tgt.new_full(tgt.shape, bos_id)", "out[:, 1:] = tgt[:, :-1]", "return out"),
    "roll, column 0 overwritten": _as(SHIFT, "out = tgt.roll(1, dims=1)", "out[:, 0] = bos_id", "return out"),
    "index_select of columns 0, 0, 1, ..., L-2, column 0 overwritten": _as(SHIFT, "out = tgt.index_select(1, "
        "torch.arange(-1, tgt.size(1) - 1).clamp(min=0))", "out[:, 0] = bos_id", "return out"),
    "through Python lists, back to a LongTensor of the same shape": _as(SHIFT,
        "return torch.tensor([[bos_id] + row[:-1] for row in tgt.tolist()], "
        "dtype=torch.long).view(tgt.shape)"),
    "numpy": _as(SHIFT, "a = tgt.numpy()", "return torch.from_numpy(np.concatenate([np.full((a.shape[0], 1), "
                                           "bos_id, dtype=a.dtype), a[:, :-1]], axis=1))"),
    "narrow, hstack; a keyword-only "
    "extra": _as(SHIFT, "return torch.hstack((tgt.new_tensor([[bos_id]]).expand("
        "tgt.size(0), 1), tgt.narrow(1, 0, tgt.size(1) - 1)))", args=", *, unused=None"),
    "loops": _as(SHIFT, "B, L = tgt.shape", "out = torch.zeros(B, L, dtype=torch.long)", "for b in range(B):",
        "    out[b, 0] = bos_id", "    for j in range(1, L):", "        out[b, j] = tgt[b, j - 1]",
                 "return out"),
    "transposed, under torch.no_grad": _as(SHIFT, "t = tgt.t()", "return torch.cat([torch.full((1, "
                                                                 "t.size(1)), bos_id, "
        "dtype=t.dtype), t[:-1]], 0).t().contiguous()", wrap=torch.no_grad()),
}
shift_in_place = _as(SHIFT, "tgt[:, 1:] = tgt[:, :-1].clone()", "tgt[:, 0] = bos_id", "return tgt")
# bos: the (B, 1) column of bos_id
_shift = _at(SHIFT, "return torch.cat([bos, tgt[:, :-1]], dim=1)", "return {}")
SHIFT_MISTAKES = [
    Mistake("decoder input not shifted", _shift("tgt.clone()"), 1, "unshifted"),
    Mistake("rolled: the last token wraps to the front", _shift("torch.roll(tgt, 1, dims=1)"), 1, "rolled"),
    Mistake("the first column dropped", _shift("torch.cat([bos, tgt[:, 1:]], dim=1)"), 1,
            "first column was dropped"),
    Mistake("the last column kept", _shift("torch.cat([bos, tgt], dim=1)"), 1, "last column was kept"),
    Mistake("<bos> at the end", _shift("torch.cat([tgt[:, 1:], bos], dim=1)"), 1, "<bos> was put at the end"),
    Mistake("shifted along the batch axis", _shift("torch.cat([torch.full_like(tgt[:1], bos_id), tgt[:-1]], "
                                                   "dim=0)"), 1,
            "dim 0"),
    Mistake("<pad> in front", edit(SHIFT, ("bos_id)  #", "pad_id)  #")), 1, "<pad> was put in front"),
    Mistake("bos_id ignored", edit(SHIFT, ("bos_id)  #", "BOS)  #")), 3, "bos_id argument is ignored"),
    Mistake("<eos> turned into <pad>", edit(SHIFT, ("return torch.cat([bos, tgt[:, :-1]], dim=1)",
            "out = torch.cat([bos, tgt[:, :-1]], dim=1)\n    return out.masked_fill(out == EOS, pad_id)")), 3,
            "replaced by <pad>"),
    Mistake("edited in place", shift_in_place, 3, "in place"),
    Mistake("a batch of one squeezed to 1-D", _as(SHIFT, "t = tgt.squeeze()", "if t.dim() == 1:",
            "    return torch.cat([torch.tensor([bos_id]), t[:-1]])",
            "return torch.cat([torch.full_like(t[:, :1], bos_id), t[:, :-1]], 1)"), 0,
            "batch dimension was lost",
            title="uses bos_id"),
    # a blind review's find: the L = 1 line blamed an empty tgt[:, :-1]
    Mistake("a trailing .squeeze()", edit(SHIFT, ("return torch.cat([bos, tgt[:, :-1]], dim=1)",
                                                  "return torch.cat([bos, tgt[:, :-1]], dim=1).squeeze()")),
            0, "length dimension was lost", title="keeps shape (B, L)", not_says="is empty"),
    Mistake("a view of the input written into", lambda tgt, bos_id=BOS,
            pad_id=PAD: shift_in_place(tgt[:, :], bos_id),
            3, "in place"),
]

# ================================================================ make_batch
_NS = "return SimpleNamespace(src=src, tgt_in=tgt_in, tgt_out=tgt_out,"
MAKE_BATCH_CORRECT = {
    "any object with the attributes; masks built by hand, n_tokens an int() of a "
    "tensor": _as(MAKE_BATCH, ret=[
        "L = tgt_in.size(1)", _NS + " n_tokens=int(tgt_out.ne(pad_id).sum()),",
        "    src_mask=src.ne(pad_id).unsqueeze(1).unsqueeze(2),",
        "    tgt_mask=tgt_in.ne(pad_id)[:, None, None, :] & torch.tril(torch.ones(L, L)).bool())"]),
    "tgt_out first, then tgt_in by shifting it (<eos> made padding); the mask stacked; n_tokens from the "
    "lengths": _as(
        MAKE_BATCH, _AT[MAKE_BATCH]["src"], "tgt_out = pad_sequences([t + [eos_id] for t in tgt_seqs], "
                                            "pad_id)",
        "tgt_in = shift_right(tgt_out, bos_id).masked_fill(tgt_out == pad_id, pad_id)",
        "tgt_mask = torch.stack([target_mask(row[None], pad_id)[0] for row in tgt_in])  # (B, 1, L, L)",
        "return Batch(src, tgt_in, tgt_out, padding_mask(src, pad_id), tgt_mask, sum(len(t) + 1 for t in "
        "tgt_seqs))"),
    "pad_sequence of <bos> y <eos>, then sliced (tgt_in's <eos> made padding); an extra keyword "
    "argument": _as(
        MAKE_BATCH, src="src = pad_sequence([torch.tensor(s) for s in src_seqs], batch_first=True, "
                        "padding_value=pad_id)",
        tgt_in="full = pad_sequence([torch.tensor([bos_id, *t, eos_id]) for t in tgt_seqs], True, pad_id)",
        tgt_out="tgt_in, tgt_out = full[:, :-1].masked_fill(full[:, :-1] == eos_id, pad_id), full[:, 1:]",
        args=', device="cpu"'),
    "everything filled in element by element; a namedtuple; n_tokens counted from the "
    "lengths": _as(MAKE_BATCH,
        "B, Ls, Lt = len(src_seqs), max(map(len, src_seqs)), max(map(len, tgt_seqs)) + 1",
        "src, tgt_in, tgt_out = (torch.full((B, L), pad_id, dtype=torch.long) for L in (Ls, Lt, Lt))",
        "for b, (s, t) in enumerate(zip(src_seqs, tgt_seqs)):",
        "    for row, tokens in ((src, s), (tgt_in, [bos_id, *t]), (tgt_out, [*t, eos_id])):",
        "        for j, tok in enumerate(tokens):", "            row[b, j] = tok",
        "tmask = torch.zeros(B, 1, Lt, Lt, dtype=torch.bool)", "for b in range(B):",
                   "    for i in range(Lt):",
        "        for j in range(i + 1):", "            tmask[b, 0, i, j] = bool(tgt_in[b, j] != pad_id)",
        'Fields = namedtuple("Fields", "src tgt_in tgt_out src_mask tgt_mask n_tokens")',
        "return Fields(src, tgt_in, tgt_out, (src != pad_id).reshape(B, 1, 1, Ls), tmask,",
        "              sum(len(t) + 1 for t in tgt_seqs))"),
    "numpy masks, a dataclass, n_tokens an int() of a numpy count": (batch_numpy := _as(MAKE_BATCH, ret=[
        "s, i, o = src.numpy(), tgt_in.numpy(), tgt_out.numpy()",
        "tmask = np.tril(np.ones((i.shape[1], i.shape[1]), dtype=bool))[None, None] & (i != pad_id)[:, None, "
        "None, :]",
        'B = make_dataclass("B", ["src", "tgt_in", "tgt_out", "src_mask", "tgt_mask", "n_tokens"])',
        "return B(src, tgt_in, tgt_out, torch.from_numpy(s != pad_id)[:, None, None, :], "
        "torch.from_numpy(tmask),",
        "         int((o != pad_id).sum()))"])),
    "logical_and of a triu-made causal mask and the padding, a contiguous copy of the source mask, a "
    "keyword-only extra": _as(MAKE_BATCH, args=', *, device="cpu"', ret=[
        "L, src = tgt_in.size(1), src.to(device)", "causal = torch.triu(torch.ones(L, L), diagonal=1) == 0",
        _NS + " n_tokens=sum(len(t) + 1 for t in tgt_seqs),",
        "    src_mask=(src != pad_id).view(src.size(0), 1, 1, -1).clone(),",
        "    tgt_mask=torch.logical_and(causal.view(1, 1, L, L), (tgt_in != pad_id).view(-1, 1, 1, L)))"]),
    "masks and n_tokens as properties computed from the stored tensors": _as(MAKE_BATCH, ret=[
        'return type("LazyBatch", (), dict(src=src, tgt_in=tgt_in, tgt_out=tgt_out,',
        "    src_mask=property(lambda self: (self.src != pad_id).unsqueeze(-2).unsqueeze(-2)),",
        "    tgt_mask=property(lambda self: (self.tgt_in != pad_id).unsqueeze(1).unsqueeze(1)",
        "                      & torch.ones(self.tgt_in.size(-1), self.tgt_in.size(-1), "
        "dtype=torch.bool).tril()),",
        "    n_tokens=property(lambda self: int((self.tgt_out != pad_id).sum()))))()"]),
    "deep copies edited in place (insert, append, extend): the caller's lists stay as they "
    "are": _as(MAKE_BATCH, src=[
        "src, tin, tout = copy.deepcopy(src_seqs), copy.deepcopy(tgt_seqs), copy.deepcopy(tgt_seqs)",
        "for s, t_in, t_out in zip(src, tin, tout):", "    t_in.insert(0, bos_id)",
                                "    t_out.append(eos_id)",
        "    s.extend([pad_id] * (max(map(len, src)) - len(s)))", "src = pad_sequences(src, pad_id)"],
        tgt_in="tgt_in = pad_sequences(tin, pad_id)", tgt_out="tgt_out = pad_sequences(tout, pad_id)"),
    "y padded once; tgt_out gets <eos> written at each length, tgt_in is <bos> then y without its last "
    "column": _as(
        MAKE_BATCH, tgt_in="y = pad_sequences([list(t) + [pad_id] for t in tgt_seqs], pad_id)", tgt_out=[
            "tgt_out = y.clone()", "tgt_out[torch.arange(len(y)), torch.tensor([len(t) for t in tgt_seqs])] "
                                   "= eos_id",
            "tgt_in = torch.cat([torch.full((len(y), 1), bos_id), y[:, :-1]], 1)"]),
    "tuples throughout (t + (eos,)), int32 turned into long, a class made with type()": _as(MAKE_BATCH, src=[
        "src_seqs, tgt_seqs = [tuple(s) for s in src_seqs], [tuple(t) for t in tgt_seqs]",
        "src = torch.tensor(pad_sequences(src_seqs, pad_id).tolist(), dtype=torch.int32).long()"],
        tgt_in="tgt_in = pad_sequences([(bos_id,) + t for t in tgt_seqs], pad_id)",
        tgt_out="tgt_out = pad_sequences([t + (eos_id,) for t in tgt_seqs], pad_id)", ret=[
            'return type("Batch", (), dict(src=src, tgt_in=tgt_in, tgt_out=tgt_out, n_tokens=sum(map(len, '
            'tgt_seqs))',
            "    + len(tgt_seqs), src_mask=padding_mask(src, pad_id), tgt_mask=target_mask(tgt_in, "
            "pad_id)))()"]),
    # n_tokens counted on tgt_in and tgt_mask built from tgt_out: both equal the contract's values (<bos> y
    # and y <eos> have their real tokens at the same places), so they are correct
    "n_tokens from tgt_in, tgt_mask from tgt_out": edit(MAKE_BATCH,
                                                        ("target_mask(tgt_in, pad_id)", "target_mask("
        "tgt_out, pad_id)"), ("int((tgt_out != pad_id).sum())", "int((tgt_in != pad_id).sum())")),
}
# right fields, but the caller's target lists get an <eos> appended (each epoch one more)
batch_appends_eos_in_place = _as(MAKE_BATCH, "for t in tgt_seqs:", "    t.append(eos_id)", "return solutions."
                                 "make_batch(src_seqs, [t[:-1] for t in tgt_seqs], pad_id, bos_id, eos_id)")
# tgt_in = shift_right(tgt_out): the <eos> of the shorter targets stays in tgt_in; the mask is built from it
batch_tgt_in_from_shift = edit(
    MAKE_BATCH, ("tgt_in = pad_sequences([[bos_id] + list(t) for t in tgt_seqs], pad_id)", ""),
    ("# (B, Lt): y <eos>", "\n    tgt_in = shift_right(tgt_out, bos_id)"))
# told 'tgt_in equals tgt_out' and '<bos> in tgt_out instead of <eos>' before
batch_in_out_swapped = edit(MAKE_BATCH,
                            ("return Batch(src, tgt_in, tgt_out,", "return Batch(src, tgt_out, tgt_in,"))
MAKE_BATCH_MISTAKES = [
    Mistake("decoder input not shifted", with_fields(tgt_in=lambda b, a: b.tgt_out), 5, "not shifted"),
    Mistake("tgt_in = shift_right(tgt_out)", batch_tgt_in_from_shift, 4, "keeps the <eos> of the shorter"),
    Mistake("tgt_in = shift_right(tgt_out): its mask", batch_tgt_in_from_shift, 0, "fix tgt_in",
            title="tgt_mask:"),
    Mistake("no <eos> in tgt_out", with_fields(tgt_out=lambda b, a: _pad(a.tgt, a.pad)), 5,
            "no <eos> in tgt_out"),
    Mistake("<bos> in tgt_out",
            with_fields(tgt_out=lambda b, a: _pad([[a.bos, *t, a.eos] for t in a.tgt], a.pad)), 5,
            "<bos> in tgt_out"),
    Mistake("tgt_out padded with <eos>",
            with_fields(tgt_out=lambda b, a: _pad([t + [a.eos] for t in a.tgt], a.eos)), 5,
            "padded with <eos>"),
    *(Mistake(f"tgt_in and tgt_out swapped: {what}", batch_in_out_swapped, 0,
              "tgt_in and tgt_out are swapped", title=t)
      for what, t in (("tgt_in", "tgt_in:"), ("tgt_out", "tgt_out:"), ("the ids", "uses pad_id"))),
    Mistake("n_tokens counts padding", with_fields(n_tokens=lambda b, a: b.tgt_out.numel()), 5,
            "padding counted"),
    Mistake("n_tokens without <eos>", with_fields(n_tokens=lambda b, a: sum(len(t) for t in a.tgt)), 5,
            "<eos> not counted"),
    Mistake("no n_tokens attribute", with_fields(drop=["n_tokens"]), 0, "without n_tokens"),
    # told 'pad every source on the right' before
    Mistake("the batch sorted by source length", lambda src_seqs, tgt_seqs, pad_id=PAD, bos_id=BOS,
            eos_id=EOS:
            solutions.make_batch(*zip(*sorted(zip(src_seqs, tgt_seqs), key=lambda p: -len(p[0]))), pad_id,
                                 bos_id,
                                 eos_id), 1, ("rows were reordered", "src_seqs[i]"), not_says="on the right"),
    # the contract's types: n_tokens is a Python int, as Batch declares it (the check used to compare with
    # .item())
    Mistake("n_tokens a 0-d tensor", with_fields(n_tokens=lambda b, a: (b.tgt_out != a.pad).sum()), 6,
            ("type(batch.n_tokens)", "expected int", "got torch.Tensor", "stayed a tensor")),
    Mistake("n_tokens a numpy integer", with_fields(n_tokens=lambda b, a: np.int64(b.n_tokens)), 6,
            ("expected int", "numpy.int64")),
    Mistake("n_tokens a float", with_fields(n_tokens=lambda b, a: float(b.n_tokens)), 6,
            ("expected int", "got float")),
    Mistake("tgt_mask only causal",
            with_fields(tgt_mask=lambda b, a: solutions.causal_mask(b.tgt_in.size(1))), 5,
            "only the causal part"),
    Mistake("tgt_mask only padding",
            with_fields(tgt_mask=lambda b, a: solutions.padding_mask(b.tgt_in, a.pad)), 5,
            "only the padding part"),
    Mistake("tgt_mask inverted", with_fields(tgt_mask=lambda b, a: ~b.tgt_mask), 5, "polarity"),
    Mistake("padded query rows masked too", with_fields(
        tgt_mask=lambda b, a: b.tgt_mask & (b.tgt_in != a.pad)[:, None, :, None]), 5, "padded query rows"),
    Mistake("src_mask of shape (B, Ls)", with_fields(src_mask=lambda b, a: b.src != a.pad), 5, "wrong shape"),
    Mistake("src_mask inverted", with_fields(src_mask=lambda b, a: b.src[:, None, None, :] == a.pad), 5,
            "polarity"),
    Mistake("float masks", with_fields(src_mask=lambda b, a: b.src_mask.float()), 5, "torch.bool"),
    Mistake("src_mask made from tgt_in",
            with_fields(src_mask=lambda b, a: (b.tgt_in != a.pad)[:, None, None, :]), 5,
            ("sizes do not fit", "padding mask of src")),
    Mistake("src left-padded",
            with_fields(src=lambda b, a: torch.tensor([[a.pad] * (3 - len(s)) + s for s in a.src])),
            5, "pad every source on the right"),
    # told only that the sizes do not fit
    Mistake("an <eos> added to the sources, the mask built right from them",
            edit(MAKE_BATCH, ("pad_sequences(src_seqs,", "pad_sequences([[*s, eos_id] for s in src_seqs],")),
            0, "fix src", title="src_mask:"),
    Mistake("ids ignored",
            edit(MAKE_BATCH, ("### BEGIN SOLUTION", "pad_id, bos_id, eos_id = PAD, BOS, EOS")), 6,
            "argument is ignored"),
    Mistake("the caller's lists edited in place", batch_appends_eos_in_place, 6, "edited in place"),
]

# ================================================================ batch_by_tokens
BBT_CORRECT = {
    "longest first: the first example of a batch is its "
    "longest": edit(BBT, (_ORDER, _ORDER.replace("lengths[i])",
        "-lengths[i])")), (_CLOSES, "lengths[current[0]] * (len(current) + 1)")),
    "torch.argsort, tensors of indices, and the batches in a shuffled order": _as(
        BBT, order="order = torch.argsort(torch.tensor(lengths), stable=True)",
        ret=["random.Random(0).shuffle(batches)", "return [torch.stack(b) for b in batches]"]),
    "indices grouped by length in a dict, the lengths walked in order": _as(BBT, order=[
        "by_length = defaultdict(list)", "for i, n in enumerate(lengths):", "    by_length[n].append(i)",
        "order = [i for n in sorted(by_length) for i in by_length[n]]"]),
    "longest first; each batch takes max_tokens // (its longest) examples at once": _as(
        BBT, "order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)", "batches, k = "
                                                                                            "[], 0",
        "while k < len(order):", "    size = max(1, max_tokens // lengths[order[k]])",
        "    batches.append(order[k:k + size])", "    k += size", "return batches"),
    "a generator of tuples": edit(BBT, ("            batches.append(current)",
                                        "            yield tuple(current)"),
                                  ("    batches.append(current)\n    return batches",
                                   "    yield tuple(current)")),
    "numpy arrays": _as(BBT, order=["lengths = np.asarray(lengths)", 'order = np.argsort(lengths, '
                                                                     'kind="stable")'],
                        ret="return [np.array(b) for b in batches]"),
    "adds the example, and takes it back out for the next batch when the batch is now over the limit": _as(
        BBT, "batches, cur = [], []", "for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):",
        "    cur.append(i)", "    if len(cur) > 1 and max(lengths[j] for j in cur) * len(cur) > max_tokens:",
        "        cur.pop()", "        batches.append(cur)", "        cur = [i]", "return batches + [cur] * "
                                                                                 "bool(cur)"),
    "itertools.groupby": _as(BBT, order="order = [i for _, group in "
                                        "itertools.groupby(sorted(range(len(lengths)), "
                             "key=lengths.__getitem__), key=lengths.__getitem__) for i in group]"),
    "longest first (torch.sort, stable), a pointer and slices of the sorted index tensor": _as(
        BBT, "vals, order = torch.sort(torch.tensor(lengths), descending=True, stable=True)", "batches, k = "
                                                                                              "[], 0",
        "while k < len(lengths):", "    size = 1",
        "    while k + size < len(lengths) and int(vals[k]) * (size + 1) <= max_tokens:", "        size += 1",
        "    batches.append(order[k:k + size])", "    k += size", "return batches"),
    "recursive": _as(
        BBT, "sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * len(lengths)))", "def split(rest):",
        "    if not rest:", "        return []", "    k = 1",
        "    while k < len(rest) and lengths[rest[k]] * (k + 1) <= max_tokens:", "        k += 1",
        "    return [rest[:k]] + split(rest[k:])",
        "return split(sorted(range(len(lengths)), key=lambda i: lengths[i]))"),
    "batches as sets; a keyword-only extra": _as(BBT, ret="return [set(b) for b in batches]",
                                                 args=", *, shuffle=False"),
}
bbt_unsorted = edit(BBT, (_ORDER, "order = range(len(lengths))"))
bbt_random = _as(BBT, "order = list(range(len(lengths)))", "random.Random(1).shuffle(order)",
                 "return [[order[i] for i in b] for b in bbt_unsorted([lengths[i] for i in order], "
                 "max_tokens)]")
_fits = _at(BBT, f"current and {_CLOSES} > max_tokens")  # closes the current batch when the text is true
# closes the current batch without checking that it holds anything: an empty batch when the first (shortest)
# example is already too long (it used to get full marks)
bbt_empty_batch = _fits("new_longest * (len(current) + 1) > max_tokens")
BBT_MISTAKES = [
    Mistake("no sorting by length", bbt_unsorted, 4, "sort the indices by length"),
    Mistake("random batches", bbt_random, 4, "sort the indices by length"),
    Mistake("positions in the sorted list",
            edit(BBT, (_ORDER, "lengths = sorted(lengths)\n    order = range(len(lengths))")), 2,
            "positions in the SORTED lengths"),
    Mistake("the caller's lengths sorted in place",
            edit(BBT, (_ORDER, "lengths.sort()\n    order = range(len(lengths))")), 0, "edited in place"),
    Mistake("the last batch lost", edit(BBT, ("    if current:\n        batches.append(current)\n", "")), 0,
            ("missing", "never appended")),
    Mistake("indices duplicated",
            _as(BBT, "batches = solutions.batch_by_tokens(lengths, max_tokens)", "return [b + ["
            "batches[k + 1][0]] if k + 1 < len(batches) else b for k, b in enumerate(batches)]"), 0,
            "more than once"),
    Mistake("an empty batch", bbt_empty_batch, 4, "an empty batch"),
    # it used to be a correct style: for no lengths it returns [[]], a batch that make_batch cannot build
    Mistake("the last batch appended even when empty", _as(
        BBT, "batches, cur = [], []", "for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):",
        "    cur.append(i)", "    if len(cur) > 1 and max(lengths[j] for j in cur) * len(cur) > max_tokens:",
        "        cur.pop()", "        batches.append(cur)", "        cur = [i]", "return batches + [cur]"), 4,
        ("batch_by_tokens([], 10)", "`if current:`")),
    Mistake("the last batch appended without `if current:`",
            edit(BBT, ("    if current:\n        batches.append(current)\n",
                       "    batches.append(current)\n")), 4,
            ("[] (no batches)", "only if it holds an example")),
    Mistake("long examples dropped", _as(BBT, "return [[i for i in b if lengths[i] <= max_tokens] for b in "
                                              "solutions.batch_by_tokens(lengths, max_tokens) if "
                                              "any(lengths[i] <= max_tokens for i in b)]"), 2,
            "missing"),
    Mistake("sum of lengths limited, not the padded size",
            _fits("current and sum(lengths[j] for j in current) + lengths[i] > max_tokens"), 4,
            "ignores the padding"),
    Mistake("the first length taken as the longest",
            _fits("current and lengths[current[0]] * (len(current) + 1) > max_tokens"), 2, "max_tokens"),
    # it was told that the sum of lengths ignores the padding
    Mistake("the longest from before the new example joins",
            _fits("current and longest * (len(current) + 1) > max_tokens"), 0, "BEFORE the new example",
            title="each batch's padded size", not_says="ignores the padding"),
    Mistake("checked after adding",  # adds first, checks afterwards: every batch ends one example too large
            _as(BBT, _ORDER, "batches, current = [], []", "for i in order:", "    current.append(i)",
                "    if max(lengths[j] for j in current) * len(current) > max_tokens:",
                "        batches.append(current)", "        current = []",
                "return batches + ([current] if current else [])"), 3,
            ("<= 400", "check the size before adding")),
    Mistake("< instead of <=", _fits("current and new_longest * (len(current) + 1) >= max_tokens"), 4,
            "<=, not <"),
    Mistake("one example per batch", _fits("current"), 4, ("2 batches of 4", "its own batch")),
    # a blind review's finds: each was told of another mistake on some lines
    Mistake("the lengths returned in place of the indices",
            _as(BBT, "batches = solutions.batch_by_tokens(lengths, max_tokens)",
                "return [[lengths[i] for i in b] for b in batches]"), 0,
            "not the lengths themselves", not_says="two batches"),
    Mistake("an example longer than max_tokens let into a batch",
            _fits("current and new_longest * (len(current) + 1) > max_tokens "
                  "and lengths[i] <= max_tokens"), 3,
            "cannot share a batch", not_says="BEFORE the new example"),
]

# ================================================================ noam_lr
NOAM_CORRECT = {
    "piecewise": _as(NOAM, "step = step or 1", "rate = step / warmup_steps ** 1.5 if step < warmup_steps "
                                               "else "
                     "1 / math.sqrt(step)", "return factor * rate / math.sqrt(d_model)"),
    "if / else": _as(NOAM, "if step < 1:", "    step = 1", "rate = step * warmup_steps ** -1.5 if step <= "
                                                           "warmup_steps "
                     "else step ** -0.5", "return factor * rate * d_model ** -0.5"),
    "the peak (d_model * warmup)^-0.5 times min(step / warmup, sqrt(warmup / step))": _as(NOAM, "step = step "
                                                                                                "or 1",
        "return factor * (d_model * warmup_steps) ** -0.5 * min(step / warmup_steps, (warmup_steps / step) "
        "** 0.5)"),
    "math.sqrt": _as(NOAM, "step = max(1, step)", "return factor / math.sqrt(d_model) * min(1 / "
                                                  "math.sqrt(step), step / (warmup_steps * "
                                                  "math.sqrt(warmup_steps)))"),
    "in log space": _as(NOAM, "s = max(step, 1)", "return factor * math.exp(-0.5 * math.log(d_model)",
                        "    + min(-0.5 * math.log(s), math.log(s) - 1.5 * math.log(warmup_steps)))"),
    "a float64 tensor, float() of it": _as(NOAM, "s = torch.tensor(float(max(1, step)), dtype=torch.float64)",
                                           "return float(factor * d_model ** -0.5 * torch.minimum(s.rsqrt(), "
                                           "s * warmup_steps ** -1.5))"),
    "numpy": _as(NOAM, "s = np.maximum(step, 1).astype(np.float64)", "return factor * np.power(d_model, "
                                                                     "-0.5) * np.minimum(np.power(s, -0.5), "
                                                                     "s * np.power(warmup_steps, -1.5))"),
    "lru_cache, a keyword-only extra": _as(NOAM, "step = max(step, min_step)",
                                           "return factor * (d_model ** -0.5) * "
                                           "min(step ** -0.5, step * warmup_steps ** -1.5)",
                                           args=", *, min_step=1",
                                           wrap=functools.lru_cache(maxsize=None)),
}
_RATE = "factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)"
_rate = _at(NOAM, f"return {_RATE}", "return {}")  # step = max(step, 1) kept
NOAM_MISTAKES = [
    Mistake("warmup exponent -0.5", _noam("warmup_steps ** -1.5", "warmup_steps ** -0.5"), 0,
            "warmup exponent"),
    Mistake("warmup_steps ** -3/2", _noam("warmup_steps ** -1.5", "warmup_steps ** -3 / 2"), 0,
            ("operator precedence", "warmup_steps ** -1.5")),
    Mistake("warmup_steps ** 1.5", _noam("warmup_steps ** -1.5", "warmup_steps ** 1.5"), 0, "no warmup"),
    Mistake("d_model exponent +0.5", _noam("d_model ** -0.5", "d_model ** 0.5"), 1, "d_model exponent"),
    Mistake("d_model exponent -1", _noam("d_model ** -0.5", "d_model ** -1.0"), 1, "d_model exponent"),
    Mistake("d_model ** -1/2", _noam("d_model ** -0.5", "d_model ** -1 / 2"), 1,
            ("operator precedence", "d_model ** -0.5")),
    Mistake("d_model on the decay term only", _rate(
        "factor * min(d_model ** -0.5 * step ** -0.5, step * warmup_steps ** -1.5)"), 0,
            "only the decay term"),
    Mistake("step ** -1/2", _noam("min(step ** -0.5", "min(step ** -1 / 2"), 1,
            ("operator precedence", "step ** -0.5")),
    Mistake("step ** 0.5", _noam("min(step ** -0.5", "min(step ** 0.5"), 1, "never decays"),
    Mistake("max instead of min", _noam("* min(step **", "* max(step **"), 0, "max instead of min"),
    Mistake("rate held at its peak after warmup",  # it was named 'off by one'
            _rate("factor * d_model ** -0.5 * min(step, warmup_steps) * warmup_steps ** -1.5"), 1,
            "stays at its peak",
            not_says="off by one"),
    Mistake("factor ignored", _noam("return factor * ", "return "), 3, "factor argument is ignored"),
    Mistake("divided by factor", _rate("d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5) / "
                                       "factor"), 3,
            "divided by factor"),
    Mistake("factor on the decay term only",  # it was named 'factor ignored'
            _rate("d_model ** -0.5 * min(factor * step ** -0.5, step * warmup_steps ** -1.5)"), 3,
            "only the decay term", not_says="factor argument is ignored"),
    Mistake("d_model and warmup_steps swapped", _as(
        NOAM, "return solutions.noam_lr(step, warmup_steps, d_model, factor)"), 0, "swapped"),
    Mistake("step 0 divides by zero", _noam("step = max(step, 1)", "pass"), 3,
            ("ZeroDivisionError", "max(step, 1)")),
    Mistake("step 0 gives 0", _noam("step = max(step, 1)", "if step == 0:\n        return 0.0"), 3,
            "step 0 gave 0"),
    Mistake("step 0 counted as 1 but integer division",  # it was told 'count it as step 1'
            _noam("step * warmup_steps ** -1.5", "(step // warmup_steps) * warmup_steps ** -0.5"), 0,
            ("formula itself gives 0", "integer division"), title="step 0 counts as step 1",
            not_says="step 0 gave 0"),
    Mistake("step + 1", _noam("max(step, 1)", "max(step + 1, 1)"), 0, ("off by one", "step + 1")),
    Mistake("step - 1", _noam("max(step, 1)", "max(step - 1, 1)"), 1, ("off by one", "step - 1")),
    Mistake("a string", _rate(f"repr({_RATE})"), 0, "expected a number"),
    # the contract's types: a Python float (numpy.float64 is one); the check used to compare float(...) of
    # anything
    Mistake("a float32 tensor", _as(NOAM, "s = torch.tensor(max(step, 1), dtype=torch.float32)",
                                    "return factor * d_model ** -0.5 * torch.min(s.rsqrt(), s * warmup_steps "
                                    "** -1.5)"),
            3, ("type(noam_lr(4000, 512))", "expected float", "got tensor", "float(rate)")),
    Mistake("a float64 tensor", _as(NOAM, "s = torch.tensor(float(max(1, step)), dtype=torch.float64)",
                                    "return factor * d_model ** -0.5 * torch.minimum(s.rsqrt(), "
                                    "s * warmup_steps ** -1.5)"),
            3, ("expected float", "got tensor")),
    Mistake("numpy float32",
            _as(NOAM, "s, f32 = np.float32(max(step, 1)), np.float32", "return f32(factor) * "
                                 "f32(d_model) ** f32(-0.5) * min(s ** f32(-0.5), s * f32(warmup_steps) ** "
                                 "f32(-1.5))"),
            3, ("expected float", "numpy.float32")),
    # Adam refuses it at its first step (addcdiv_(): 'value' must be Number, not numpy.ndarray)
    Mistake("a one-element numpy array", noam_array := _as(NOAM, "return np.array([solutions.noam_lr(step, "
                                                                 "d_model, warmup_steps, "
                                                   "factor)])"), 3, ("expected float", "numpy.ndarray")),
]


# ================================================================ make_optimizer
class _NoamOpt:
    """The Annotated Transformer's style: step() sets the rate of the NEXT optimizer step."""

    def __init__(self, optimizer, d_model, warmup, factor):
        self.optimizer, self.d, self.w, self.f, self._step = optimizer, d_model, warmup, factor, 0
        self.step()

    def step(self):
        self._step += 1
        for p in self.optimizer.param_groups:
            p["lr"] = self.rate()

    def rate(self):
        return self.f * (self.d ** (-0.5) * min(self._step ** (-0.5), self._step * self.w ** (-1.5)))


class NoamScheduler(_NoamOpt):
    """A hand-written scheduler whose rate is noam_lr's."""

    def rate(self):
        return NOAM(self._step, self.d, self.w, self.f)


class _NoamLR(torch.optim.lr_scheduler.LRScheduler):
    def __init__(self, optimizer, d_model, warmup_steps, factor):
        self.args = (d_model, warmup_steps, factor)
        super().__init__(optimizer)

    def get_lr(self):
        return [NOAM(self.last_epoch + 1, *self.args) for _ in self.base_lrs]


_STEPPED = ("    return optimizer, scheduler", "    scheduler.step()\n    return optimizer, scheduler")
MAKE_OPTIMIZER_CORRECT = {
    "Adam starts at the first step's rate; the lambda is a ratio to it": _as(MAKE_OPTIMIZER, opt=[
        "first = noam_lr(1, d_model, warmup_steps, factor)", _OPT], adam=_ADAM.replace("lr=1.0", "lr=first"),
        scheduler="torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: noam_lr(s + 1, d_model, "
                  "warmup_steps, factor) / first)"),
    "a hand-written scheduler": _as(MAKE_OPTIMIZER, adam="Adam(list(model.parameters()), betas=(0.9, 0.98), "
                                                         "eps=1e-9)",
                                    scheduler="NoamScheduler(optimizer, d_model, warmup_steps, factor)"),
    "the Annotated Transformer's NoamOpt": _as(MAKE_OPTIMIZER, adam=_ADAM.replace("lr=1.0", "lr=0"),
                                               scheduler="_NoamOpt(optimizer, d_model, warmup_steps, "
                                                         "factor)"),
    "an LRScheduler subclass": _as(MAKE_OPTIMIZER, adam=_ADAM.replace("lr=1.0, ", ""),
                                   scheduler="_NoamLR(optimizer, d_model, warmup_steps, factor)"),
    "two parameter groups, a list of lambdas, lr=1 as an int, the formula inline": _as(MAKE_OPTIMIZER, opt=[
        "matrices = [p for p in model.parameters() if p.dim() > 1]",
        "vectors = [p for p in model.parameters() if p.dim() <= 1]",
        "f = lambda s: factor * d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup_steps ** -1.5)  # "
        "noqa: E731",
        _OPT], adam='Adam([{"params": matrices}, {"params": vectors}], lr=1, betas=(0.9, 0.98), eps=1e-9)',
        scheduler="torch.optim.lr_scheduler.LambdaLR(optimizer, [f, f])"),
    "groups by parameter name, one lambda each, returned as a list": _as(MAKE_OPTIMIZER, opt=[
        'weights = [p for n, p in model.named_parameters() if n.endswith("weight")]',
        'rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]', _OPT],
        adam="Adam([dict(params=weights), dict(params=rest)], lr=1.0, betas=(0.9, 0.98), eps=1e-9)",
        scheduler=f"torch.optim.lr_scheduler.LambdaLR(optimizer, [{_LAMBDA} for _ in range(2)])",
        ret="return [optimizer, scheduler]"),
    "MultiplicativeLR: each step multiplies by noam(k + 1) / noam(k); Adam starts at noam(1)": _as(
        MAKE_OPTIMIZER, adam=_ADAM.replace("lr=1.0", "lr=noam_lr(1, d_model, warmup_steps, factor)"),
        scheduler="torch.optim.lr_scheduler.MultiplicativeLR(optimizer, lambda e: noam_lr(e + 1, d_model, "
        "warmup_steps, factor)\n        / noam_lr(e, d_model, warmup_steps, factor))"),
    "AdamW with weight_decay=0 is Adam; functools.partial for the lambda": _as(MAKE_OPTIMIZER, opt=[
        "f = functools.partial(lambda s, d, w, c: c * d ** -0.5 * min((s + 1) ** -0.5, (s + 1) * w ** -1.5),",
        "                      d=d_model, w=warmup_steps, c=factor)", _OPT],
        adam="AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)",
        scheduler="torch.optim.lr_scheduler.LambdaLR(optimizer, f)"),
    # PyTorch warns; the check stays silent
    "LinearLR for the warmup, then a LambdaLR decay, chained by SequentialLR": (opt_sequential_lr := _as(
        MAKE_OPTIMIZER, "w = warmup_steps",
        "opt = torch.optim.Adam(model.parameters(), lr=noam_lr(w, d_model, w, factor), betas=(0.9, 0.98), "
        "eps=1e-9,",
        "                       foreach=False)",
        "warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / w, end_factor=1.0, total_iters=w - "
        "1)",
        "decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (w / (s + w)) ** 0.5)",
        "return opt, torch.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[w - 1])")),
    # LambdaLR then changes it in place; it used to get 3/5
    "lr given as a tensor": (opt_tensor_lr := _adam("lr=1.0", "lr=torch.tensor(1.0)")),
    # noam_lr(0) = noam_lr(1): the k-th optimizer step still runs at noam_lr(k) (PyTorch warns about the
    # order; the check stays silent)
    "lambda s: noam_lr(s) and one scheduler step at creation": edit(MAKE_OPTIMIZER,
                                                                    ("noam_lr(s + 1,", "noam_lr(s,"),
                                                                    _STEPPED),
}
_lambda = _at(MAKE_OPTIMIZER, _LAMBDA, "lambda s: {}")
# before the first optimizer step: every step one ahead
opt_scheduler_stepped_early = edit(MAKE_OPTIMIZER, _STEPPED)
MAKE_OPTIMIZER_MISTAKES = [
    Mistake("biases left out", _adam("model.parameters()", "[p for p in model.parameters() if p.dim() > 1]"),
            3,
            "missing"),
    Mistake("the scheduler on another optimizer", edit(MAKE_OPTIMIZER, (
        "LambdaLR(\n        optimizer,", f"LambdaLR(\n        torch.optim.{_ADAM},")), 2,
            "another optimizer"),
    Mistake("Adam's default betas", _adam("betas=(0.9, 0.98)", "betas=(0.9, 0.999)"), 3, "(0.9, 0.999)"),
    Mistake("Adam's default eps", _adam("eps=1e-9", "eps=1e-8"), 4, "1e-8"),
    Mistake("amsgrad", _adam("eps=1e-9", "eps=1e-9, amsgrad=True"), 3, "amsgrad"),
    Mistake("Adam's lr not 1.0", _adam("lr=1.0", "lr=1e-3"), 2, "create Adam with lr=1.0"),
    Mistake("d_model and factor hard-coded in the lambda", _lambda("noam_lr(s + 1, 512, warmup_steps)"), 2,
            "d_model and factor arguments are ignored", not_says="create Adam with lr=1.0"),
    Mistake("every argument hard-coded in the lambda", _lambda("noam_lr(s + 1, 512)"), 2,
            "d_model, warmup_steps and factor arguments are ignored"),
    Mistake("d_model and factor hard-coded, a constant ratio", _lambda("noam_lr(s + 1, 256, warmup_steps, "
                                                                       "2.0)"), 2,
            ("though the warmup is right", "d_model or factor argument"), not_says="create Adam with lr=1.0"),
    Mistake("off by one: lambda(s) = noam_lr(s)", _lambda("noam_lr(s, d_model, warmup_steps, factor)"), 2,
            "off by one"),
    Mistake("scheduler stepped at creation", opt_scheduler_stepped_early, 2,
            ("off by one", "do not step the scheduler before")),
    Mistake("ZeroDivisionError at lambda(0)", _lambda(
        "factor * d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5)"), 0,
            "LambdaLR calls its lambda with 0"),
    Mistake("factor ignored", _lambda("noam_lr(s + 1, d_model, warmup_steps, 1.0)"), 3,
            "factor argument is ignored"),
    Mistake("warmup ignored", _lambda("noam_lr(s + 1, d_model, 4000, factor)"), 2,
            "warmup_steps argument is ignored"),
    Mistake("d_model and warmup_steps swapped in the lambda", _lambda("noam_lr(s + 1, warmup_steps, d_model, "
                                                                      "factor)"),
            2, "the schedule: d_model and warmup_steps swapped"),
    Mistake("the warmup exponent -0.5 in the lambda",
            _lambda("factor * d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup_steps ** -0.5)"), 2,
            ("the schedule", "warmup exponent")),
]
TABLES = {"shift_right": (SHIFT_CORRECT, SHIFT_MISTAKES),
          "make_batch": (MAKE_BATCH_CORRECT, MAKE_BATCH_MISTAKES),
          "batch_by_tokens": (BBT_CORRECT, BBT_MISTAKES), "noam_lr": (NOAM_CORRECT, NOAM_MISTAKES),
          "make_optimizer": (MAKE_OPTIMIZER_CORRECT, MAKE_OPTIMIZER_MISTAKES)}


# ================================================================ the tests
@pytest.mark.parametrize("name, fn", [pytest.param(name, fn, id=f"{name}: {what}")
                                      for name, (styles, _) in TABLES.items() for what, fn in styles.items()])
def test_other_correct(name, fn):
    assert_full_marks(fn, name)


@pytest.mark.parametrize("m", [pytest.param(*p.values, id=f"{name}: {p.id}") for name,
                               (_, rows) in TABLES.items()
                               for p in mistakes(name, rows)])
def test_mistakes(m):
    assert_mistake(m)


# training utilities whose checks make PyTorch (SequentialLR, a scheduler stepped too early) or numpy warn
QUIET = [opt_sequential_lr, opt_scheduler_stepped_early, opt_tensor_lr, bbt_empty_batch, batch_numpy,
         SHIFT_CORRECT["numpy"], noam_array]


def test_check_runs_write_nothing_to_stderr():
    """check() on QUIET's training utilities (each named as its contract), in a fresh interpreter: stderr
    empty."""
    run_silently("from autograder import check\nfrom tests.test_checks_stage12 import QUIET\n"
                 "for fn in QUIET:\n    check(fn)\n")
