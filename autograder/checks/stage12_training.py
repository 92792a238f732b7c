"""Stage 12: training utilities. Teacher forcing's shift, batches with their masks, batching by tokens,
the warmup schedule and the paper's Adam, against values and masks written out in the checks, the
formula of the paper, and torch.optim.Adam itself, with the classic mistakes named."""
from __future__ import annotations

import copy
import math
import random
from collections import Counter

import torch
from torch import nn

from ..registry import CheckFailure, register
from ._util import diagnose, fmt, learner_side, seeded

PAD, BOS, EOS = 0, 1, 2


# ------------------------------------------------------------------------------------------ helpers
def _ids(t) -> str:
    return fmt(t.tolist()) if isinstance(t, torch.Tensor) else fmt(t)


REORDERED = ("the rows were reordered (sorted by length?): row i holds the i-th example, in the order given; "
             "batch_by_tokens groups examples of similar length, make_batch keeps their order (tgt_seqs[i] belongs "
             "to src_seqs[i])")


def _expect_ids(got, expected: torch.Tensor, what: str, hint: str | None = None,
                mistakes: dict[str, torch.Tensor] | None = None) -> None:
    """Token ids equal to `expected` (same shape, torch.long); a classic mistake's output is named."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(what, "a torch.Tensor of token ids", type(got).__name__, "return a LongTensor")
    if tuple(got.shape) == tuple(expected.shape) and torch.equal(got.long(), expected):
        if got.dtype != torch.long:
            raise CheckFailure(f"{what}: dtype", "torch.long (token ids)", str(got.dtype),
                               "token ids are torch.long: build the tensor with dtype=torch.long")
        return
    named = diagnose(got, mistakes, lambda g, wrong: tuple(g.shape) == tuple(wrong.shape)
                     and torch.equal(g.long(), wrong))
    if named is None and tuple(got.shape) == tuple(expected.shape) and got.dim() == 2 and \
            sorted(got.long().tolist()) == sorted(expected.tolist()):
        named = REORDERED
    hint = named or hint
    if tuple(got.shape) != tuple(expected.shape):
        raise CheckFailure(f"{what}: wrong shape", f"shape {tuple(expected.shape)}: {_ids(expected)}",
                           f"shape {tuple(got.shape)}: {_ids(got)}", hint)
    raise CheckFailure(what, _ids(expected), _ids(got), hint)


def _pad(seqs, pad_id=PAD) -> torch.Tensor:
    L = max(len(s) for s in seqs)
    return torch.tensor([list(s) + [pad_id] * (L - len(s)) for s in seqs], dtype=torch.long)


def _expect_mask(got, expected: torch.Tensor, what: str, hint: str, mistakes: dict[str, torch.Tensor]) -> None:
    """A boolean mask that broadcasts to expected's full shape (B, 1, Lq, Lk) and equals it there."""
    full = tuple(expected.shape)
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(what, f"a bool tensor broadcasting to {full}", type(got).__name__, hint)
    shape = tuple(got.shape)
    if not (len(shape) == 4 and all(s in (1, f) for s, f in zip(shape, full))):
        raise CheckFailure(f"{what}: wrong shape", f"shape {full} (or one that broadcasts to it)",
                           f"shape {tuple(got.shape)}",
                           "masks have 4 dimensions (batch, heads, queries, keys) so that they broadcast over "
                           "the heads: padding_mask is (B, 1, 1, L), target_mask (B, 1, L, L)" if len(shape) != 4 else
                           f"4 dimensions, but the sizes do not fit this batch: {hint}")
    values = got.expand(full)
    if got.dtype != torch.bool:
        same = torch.equal(values.ne(0), expected)
        raise CheckFailure(f"{what}: dtype", "torch.bool (True = may attend)", str(got.dtype),
                           "a 0/1 number mask: compare with != pad_id, which gives a bool tensor" if same else hint)
    if torch.equal(values, expected):
        return
    hint = diagnose(values, mistakes, lambda v, wrong: torch.equal(v, wrong.expand(full))) or hint
    raise CheckFailure(what, f"{full}, True at {int(expected.sum())} places", f"True at {int(values.sum())} places",
                       hint)


# ------------------------------------------------------------------------------------- shift_right
UNSHIFTED = ("the input came back unshifted: the decoder must read <bos> y_1 ... y_{L-1} to predict y_1 ... y_L "
             "(teacher forcing); put <bos> in front and drop the last column")
ROLLED = ("rolled: torch.roll wraps the last token around to the front; put <bos> there instead: "
          "torch.cat([bos column, tgt[:, :-1]], dim=1)")
DROPPED_FIRST = "the first column was dropped instead of the last: keep tgt[:, :-1], not tgt[:, 1:]"
SHIFTED_LEFT = "shifted left instead of right: <bos> goes in front and the last column is dropped"
KEPT_LAST = "the last column was kept: the output keeps the input's length L, so drop tgt[:, -1]"
EOS_TO_PAD = ("the <eos> was replaced by <pad>: shift_right only shifts (<bos> in front, last column dropped) and "
              "keeps every other token as it is")
PAD_IN_FRONT = "<pad> was put in front: the first column is bos_id (<bos>), not pad_id"
BATCH_AXIS = ("shifted along dim 0 (the batch) instead of dim 1 (the positions): a column of bos_id in front, "
              "tgt[:, :-1] after it, torch.cat(..., dim=1)")
SQUEEZED = ("the batch dimension was lost for a batch of one sentence (B = 1): no .squeeze() (it drops every size-1 "
            "dimension); keep (B, L) -> (B, L), e.g. torch.cat([bos column, tgt[:, :-1]], dim=1)")
BOS_AT_END = "<bos> was put at the end: it goes in FRONT (first column), and the last column is dropped"


def _shift_mistakes(tgt, bos_id=BOS):
    bos = torch.full_like(tgt[:, :1], bos_id)
    shifted = torch.cat([bos, tgt[:, :-1]], 1)
    return {UNSHIFTED: tgt, ROLLED: torch.roll(tgt, 1, dims=1),
            DROPPED_FIRST: torch.cat([bos, tgt[:, 1:]], 1),
            SHIFTED_LEFT: torch.cat([tgt[:, 1:], torch.zeros_like(bos)], 1),
            KEPT_LAST: torch.cat([bos, tgt], 1),
            EOS_TO_PAD: shifted.masked_fill(shifted == EOS, PAD),
            PAD_IN_FRONT: torch.cat([torch.full_like(bos, PAD), tgt[:, :-1]], 1),
            BATCH_AXIS: torch.cat([torch.full_like(tgt[:1], bos_id), tgt[:-1]], 0),
            BOS_AT_END: torch.cat([tgt[:, 1:], bos], 1)}


@register("shift_right", "puts <bos> in front and drops the last column")
def _shift_example(shift_right):
    tgt = torch.tensor([[5, 6, 2], [7, 2, 0]])
    _expect_ids(shift_right(tgt.clone()), torch.tensor([[1, 5, 6], [1, 7, 2]]),
                "shift_right([[5, 6, 2], [7, 2, 0]])", "torch.cat([a column of bos_id, tgt[:, :-1]], dim=1)",
                _shift_mistakes(tgt))


@register("shift_right", "uses bos_id")
def _shift_bos(shift_right):
    tgt = torch.tensor([[5, 6, 7, 2]])
    mistakes = _shift_mistakes(tgt, 9)
    mistakes["the bos_id argument is ignored (BOS = 1 was put in front)"] = torch.tensor([[1, 5, 6, 7]])
    got = shift_right(tgt.clone(), bos_id=9)
    _expect_ids(got, torch.tensor([[9, 5, 6, 7]]), "shift_right([[5, 6, 7, 2]], bos_id=9)",
                SQUEEZED if isinstance(got, torch.Tensor) and got.dim() < 2 else
                "fill the first column with the bos_id argument", mistakes)


@register("shift_right", "keeps shape (B, L) for any batch and length, L = 1 included")
def _shift_shapes(shift_right):
    with seeded(0):
        tgt = torch.randint(3, 20, (4, 7))
    expected = torch.cat([torch.full((4, 1), BOS), tgt[:, :-1]], 1)
    _expect_ids(shift_right(tgt.clone()), expected, "shift_right(tgt of shape (4, 7))",
                "torch.cat([bos column, tgt[:, :-1]], dim=1) for any B and L", _shift_mistakes(tgt))
    one = torch.tensor([[5], [6]])
    _expect_ids(shift_right(one.clone()), torch.tensor([[1], [1]]), "shift_right([[5], [6]])",
                "with L = 1 only <bos> remains: tgt[:, :-1] is empty", _shift_mistakes(one))


@register("shift_right", "leaves its input unchanged (no in-place edit)")
def _shift_in_place(shift_right):
    tgt = torch.tensor([[5, 6, 2], [7, 2, 0]])
    before = tgt.clone()
    shift_right(tgt)
    if not torch.equal(tgt, before):
        raise CheckFailure("the tensor passed to shift_right", f"unchanged: {_ids(before)}", f"changed to {_ids(tgt)}",
                           "the input was edited in place (tgt[:, 1:] = ... or tgt[:, 0] = ...); build a new tensor "
                           "with torch.cat, or work on tgt.clone()")


# -------------------------------------------------------------------------------------- make_batch
SRC = [[5, 6, 7], [8], [9, 10, 4]]
TGT = [[11, 12], [13, 14, 15], [16]]
FIELDS = ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask", "n_tokens")


def _batch(make_batch, src=SRC, tgt=TGT, **kwargs):
    b, _ = _batch_and_inputs(make_batch, src, tgt, **kwargs)
    return b


def _batch_and_inputs(make_batch, src=SRC, tgt=TGT, **kwargs):
    """The batch, and the lists make_batch was given, as they are after the call."""
    inputs = ([list(s) for s in src], [list(t) for t in tgt])
    b = make_batch(*inputs, **kwargs)
    missing = [f for f in FIELDS if not hasattr(b, f)]
    if missing:
        raise CheckFailure("the object make_batch returned", f"attributes {', '.join(FIELDS)}",
                           f"{type(b).__name__} without {', '.join(missing)}",
                           "return Batch(src, tgt_in, tgt_out, src_mask, tgt_mask, n_tokens)")
    return b, inputs


def _lower(L, diagonal=0) -> torch.Tensor:
    """(L, L) bool, True on and below the given diagonal (bool .tril() is slow on a busy multi-core CPU)."""
    i = torch.arange(L)
    return i[:, None] + diagonal >= i[None, :]


def _expected_batch(src=SRC, tgt=TGT, pad_id=PAD, bos_id=BOS, eos_id=EOS):
    s = _pad(src, pad_id)
    tin = _pad([[bos_id] + list(t) for t in tgt], pad_id)
    tout = _pad([list(t) + [eos_id] for t in tgt], pad_id)
    L = tin.size(1)
    src_mask = (s != pad_id)[:, None, None, :]
    causal = _lower(L)[None, None]
    pad_keys = (tin != pad_id)[:, None, None, :]
    return dict(src=s, tgt_in=tin, tgt_out=tout, src_mask=src_mask, causal=causal, pad_keys=pad_keys,
                tgt_mask=causal & pad_keys, n_tokens=int((tout != pad_id).sum()))


def _tgt_mistakes(tgt, pad_id, bos_id, eos_id, e):
    y = _pad(tgt, pad_id)
    return {
        "decoder input not shifted: tgt_in equals tgt_out, so the decoder sees the token it must predict; "
        "tgt_in is <bos> y (shifted right), tgt_out is y <eos>": e["tgt_out"],
        "tgt_in lacks <bos> in front: tgt_in = <bos> y": y,
        "tgt_in ends with <eos>: it is <bos> y (no <eos>), so that it has the length of tgt_out": _pad(
            [[bos_id] + list(t) + [eos_id] for t in tgt], pad_id),
        "tgt_in keeps the <eos> of the shorter targets (shift_right of the padded tgt_out): tgt_in is <bos> y, "
        "padded with pad_id; build it from [bos_id] + y": torch.cat(
            [torch.full_like(e["tgt_out"][:, :1], bos_id), e["tgt_out"][:, :-1]], 1),
    }, {
        "no <eos> in tgt_out: the model must learn to stop, so tgt_out = y <eos>": y,
        "<bos> in tgt_out: the model never predicts <bos>; tgt_out = y <eos>": _pad(
            [[bos_id] + list(t) + [eos_id] for t in tgt], pad_id),
        "<bos> in tgt_out instead of <eos> at the end: tgt_out = y <eos>":
            _pad([[bos_id] + list(t) for t in tgt], pad_id),
        "tgt_out equals tgt_in: tgt_out = y <eos> is tgt_in shifted LEFT": e["tgt_in"],
    }


@register("make_batch", "src: the sources, right-padded with <pad>")
def _mb_src(make_batch):
    e = _expected_batch()
    b = _batch(make_batch)
    _expect_ids(b.src, e["src"], f"batch.src for sources {SRC}",
                "pad every source on the right to the longest one (pad_sequences)",
                {"<bos>/<eos> added to the source: the source is used as it is, only padded":
                     _pad([[BOS] + s + [EOS] for s in SRC]),
                 "<eos> added to the source: the source is used as it is, only padded": _pad([s + [EOS] for s in SRC])})


SWAPPED = ("tgt_in and tgt_out are swapped: tgt_in (the decoder input) is <bos> y, tgt_out (what the decoder must "
           "predict) is y <eos>; check the order of the fields, Batch(src, tgt_in, tgt_out, src_mask, tgt_mask, "
           "n_tokens)")


def _same_ids(t, expected: torch.Tensor) -> bool:
    return isinstance(t, torch.Tensor) and tuple(t.shape) == tuple(expected.shape) and torch.equal(t.long(), expected)


def _swapped(b, e) -> dict[str, torch.Tensor]:
    """SWAPPED, as a mistake of tgt_in, when the batch's tgt_in and tgt_out are each what the other should be."""
    if _same_ids(b.tgt_in, e["tgt_out"]) and _same_ids(b.tgt_out, e["tgt_in"]):
        return {SWAPPED: e["tgt_out"]}
    return {}


@register("make_batch", "tgt_in: <bos> y, padded (the decoder input, shifted right)")
def _mb_tgt_in(make_batch):
    e = _expected_batch()
    b = _batch(make_batch)
    _expect_ids(b.tgt_in, e["tgt_in"], "batch.tgt_in for targets [[11, 12], [13, 14, 15], [16]]",
                "tgt_in = [bos_id] + y, then right-padded",
                {**_swapped(b, e), **_tgt_mistakes(TGT, PAD, BOS, EOS, e)[0]})


@register("make_batch", "tgt_out: y <eos>, padded (what the decoder must predict)")
def _mb_tgt_out(make_batch):
    e = _expected_batch()
    b, (src, tgt) = _batch_and_inputs(make_batch)
    mistakes = {SWAPPED: e["tgt_in"]} if _swapped(b, e) else {}
    mistakes.update(_tgt_mistakes(TGT, PAD, BOS, EOS, e)[1])
    mistakes["tgt_out was padded with <eos>: pad it with pad_id (the loss ignores only pad_id)"] = _pad(
        [t + [EOS] for t in TGT], EOS)
    _expect_ids(b.tgt_out, e["tgt_out"], "batch.tgt_out for targets [[11, 12], [13, 14, 15], [16]]",
                "tgt_out = y + [eos_id], then right-padded", mistakes)
    if src != SRC or tgt != TGT:
        raise CheckFailure("the lists passed to make_batch", f"unchanged: sources {SRC}, targets {TGT}",
                           f"changed to sources {fmt(src)}, targets {fmt(tgt)}",
                           "the caller's lists were edited in place (t.append(eos_id), t.insert(0, bos_id), ...): "
                           "build new lists ([bos_id] + t, t + [eos_id]); otherwise every epoch adds more specials "
                           "to the data")


@register("make_batch", "src_mask: (B, 1, 1, Ls), True at the real source tokens")
def _mb_src_mask(make_batch):
    e = _expected_batch()
    b = _batch(make_batch)
    full = e["src_mask"]
    src = b.src
    if isinstance(src, torch.Tensor) and src.dim() == 2 and not src.dtype.is_floating_point and \
            src.dtype != torch.bool and not _same_ids(src, e["src"]) and not _mask_equals(b.src_mask, full) and \
            _mask_equals(b.src_mask, (src != PAD)[:, None, None, :]):
        raise CheckFailure(f"batch.src_mask for sources {SRC}", f"padding_mask of the right src, shape "
                                                                f"{tuple(full.shape)}",
                           f"padding_mask of the batch's own src, shape {tuple(b.src_mask.shape)}",
                           "the mask is the padding mask of the batch's own src, which is wrong (see the src item): "
                           "the mask is built right, fix src and the mask follows")
    _expect_mask(b.src_mask, full, f"batch.src_mask for sources {SRC}",
                 "src_mask = (src != pad_id)[:, None, None, :], the padding mask of src",
                 {"mask polarity inverted: True must mean 'may attend', i.e. a real token": ~full,
                  "all True: the padding of the source is not masked": torch.ones_like(full)})


FROM_WRONG_TGT_IN = ("the mask is target_mask of the batch's own tgt_in, which is wrong (see the tgt_in item): the "
                     "mask is built right, fix tgt_in and the mask follows")


def _own_target_mask(b, e):
    """target_mask of the learner's tgt_in (None when that tgt_in is right, or not a (B, L) tensor of ids)."""
    tin = b.tgt_in
    if not isinstance(tin, torch.Tensor) or tin.dim() != 2 or tin.size(0) != e["tgt_in"].size(0) or \
            tin.dtype.is_floating_point or tin.dtype == torch.bool or _same_ids(tin, e["tgt_in"]):
        return None
    return _lower(tin.size(1))[None, None] & (tin != PAD)[:, None, None, :]


def _mask_equals(mask, full: torch.Tensor) -> bool:
    """Whether mask is a bool tensor that broadcasts to full's shape and equals it there."""
    return isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.dim() == 4 and \
        all(s in (1, f) for s, f in zip(mask.shape, full.shape)) and torch.equal(mask.expand(full.shape), full)


@register("make_batch", "tgt_mask: (B, 1, Lt, Lt), causal and padding combined, from tgt_in")
def _mb_tgt_mask(make_batch):
    e = _expected_batch()
    b = _batch(make_batch)
    full = e["tgt_mask"]
    B, L = e["tgt_in"].shape
    causal = e["causal"].expand(B, 1, L, L)
    pad = e["pad_keys"].expand(B, 1, L, L)
    what = "batch.tgt_mask for targets [[11, 12], [13, 14, 15], [16]]"
    own = _own_target_mask(b, e)
    if own is not None and tuple(own.shape) != tuple(full.shape) and _mask_equals(b.tgt_mask, own):
        raise CheckFailure(f"{what}: wrong shape", f"shape {tuple(full.shape)} (or one that broadcasts to it)",
                           f"shape {tuple(b.tgt_mask.shape)}", FROM_WRONG_TGT_IN)
    _expect_mask(b.tgt_mask, full, what,
                 "tgt_mask = target_mask(tgt_in): (tgt_in != pad)[:, None, None, :] & causal_mask(Lt)",
                 {**({FROM_WRONG_TGT_IN: own} if own is not None else {}),
                  "only the causal part: the padding keys of tgt_in are not masked (combine with & the padding mask)":
                      causal,
                  "only the padding part: without the causal mask the decoder sees the future tokens it must predict":
                      pad,
                  "mask polarity inverted: True must mean 'may attend'": ~full,
                  "the causal part is upper-triangular: position i may attend to 0..i (tril), not to the future":
                      _lower(L).T.expand(B, 1, L, L) & pad,
                  "the diagonal is masked: position i may attend to itself (tril(), not tril(-1))":
                      _lower(L, -1).expand(B, 1, L, L) & pad,
                  "the padded query rows were masked too: target_mask masks the padding KEYS only, "
                  "(tgt_in != pad)[:, None, None, :] & causal_mask(Lt)":
                      full & (e["tgt_in"] != PAD)[:, None, :, None]})


@register("make_batch", "n_tokens: the real tokens of tgt_out (<eos> counted, padding not)")
def _mb_n_tokens(make_batch):
    e = _expected_batch()
    b = _batch(make_batch)
    n = b.n_tokens
    try:
        value = n.item() if isinstance(n, torch.Tensor) else n
        if isinstance(value, (str, bytes)):
            raise TypeError("a string is not a number")
        ok = float(value) == e["n_tokens"]
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailure("batch.n_tokens", f"the number {e['n_tokens']}", fmt(n),
                           "n_tokens = int((tgt_out != pad_id).sum())") from None
    if ok:
        if not isinstance(n, int) or isinstance(n, bool):
            kind = f"{type(n).__module__.replace('builtins', '')}.{type(n).__name__}".lstrip(".")
            raise CheckFailure("type(batch.n_tokens)", "int (a Python int, as Batch declares it)", kind,
                               f"the count stayed a {'tensor' if isinstance(n, torch.Tensor) else kind}: a count of "
                               "tokens is an int (the training loop adds it up and writes it to its JSON log, which "
                               "refuses tensors and numpy numbers); n_tokens = int((tgt_out != pad_id).sum())")
        return
    B, L = e["tgt_out"].shape
    hints = {B * L: "padding counted: count only the tokens of tgt_out that are not pad_id",
             sum(len(t) for t in TGT): "<eos> not counted: the model predicts it too, so it counts "
                                       "(the real tokens of tgt_out)",
             sum(len(s) for s in SRC): "the source tokens were counted: n_tokens counts tgt_out's real tokens",
             int((e["src"] != PAD).sum()): "the source tokens were counted: n_tokens counts tgt_out's real tokens"}
    raise CheckFailure("batch.n_tokens for targets [[11, 12], [13, 14, 15], [16]]", f"{e['n_tokens']} (2+1, 3+1, 1+1)",
                       fmt(value), hints.get(value, "n_tokens = int((tgt_out != pad_id).sum())"))


@register("make_batch", "uses pad_id, bos_id and eos_id")
def _mb_ids(make_batch):
    ids = dict(pad_id=30, bos_id=31, eos_id=32)
    e = _expected_batch(**ids)
    b = _batch(make_batch, **ids)
    ignored = "the {} argument is ignored (the default {} was used): use the arguments"
    what = "make_batch(sources, targets, pad_id=30, bos_id=31, eos_id=32)"
    _expect_ids(b.src, e["src"], what + ": src", "pad with pad_id",
                {ignored.format("pad_id", "<pad> = 0"): _pad(SRC, PAD)})
    _expect_ids(b.tgt_in, e["tgt_in"], what + ": tgt_in", "tgt_in = [bos_id] + y, padded with pad_id",
                {ignored.format("bos_id", "<bos> = 1"): _pad([[BOS] + t for t in TGT], 30),
                 ignored.format("pad_id", "<pad> = 0"): _pad([[31] + t for t in TGT], PAD),
                 ignored.format("bos_id and pad_id", "ids"): _pad([[BOS] + t for t in TGT], PAD),
                 **_swapped(b, e), **_tgt_mistakes(TGT, 30, 31, 32, e)[0]})
    _expect_ids(b.tgt_out, e["tgt_out"], what + ": tgt_out", "tgt_out = y + [eos_id], padded with pad_id",
                {ignored.format("eos_id", "<eos> = 2"): _pad([t + [EOS] for t in TGT], 30),
                 ignored.format("pad_id", "<pad> = 0"): _pad([t + [32] for t in TGT], PAD),
                 ignored.format("eos_id and pad_id", "ids"): _pad([t + [EOS] for t in TGT], PAD)})
    _expect_mask(b.src_mask, e["src_mask"], what + ": src_mask", "src_mask = (src != pad_id)[:, None, None, :]",
                 {ignored.format("pad_id", "<pad> = 0") + " in the source mask": (e["src"] != PAD)[:, None, None, :]})
    _expect_mask(b.tgt_mask, e["tgt_mask"], what + ": tgt_mask", "tgt_mask = target_mask(tgt_in, pad_id)",
                 {"no padding in the target mask: its padding part is missing, or it looked for <pad> = 0 instead "
                  "of the pad_id argument": e["causal"]})
    n = b.n_tokens.item() if isinstance(b.n_tokens, torch.Tensor) else b.n_tokens
    if isinstance(n, (str, bytes)) or n != e["n_tokens"]:
        raise CheckFailure(what + ": n_tokens", e["n_tokens"], fmt(n),
                           "count the tokens of tgt_out that are not pad_id")


# --------------------------------------------------------------------------------- batch_by_tokens
def _random_lengths(seed=0, n=300, extra=(450, 130)):
    rng = random.Random(seed)
    return [rng.randint(1, 60) for _ in range(n)] + list(extra)


def _batches(fn, lengths, max_tokens, what):
    given = list(lengths)
    got = fn(given, max_tokens)
    try:
        batches = [[int(i) for i in b] for b in got]
    except (TypeError, ValueError):
        raise CheckFailure(what, "a list of batches, each a list of example indices", fmt(got),
                           "return [[i, j, ...], [k, ...], ...] of indices into lengths, not the lengths") from None
    if given != list(lengths):
        raise CheckFailure(f"{what}: the list of lengths passed in", "unchanged after the call",
                           f"reordered or changed: {fmt(given)}",
                           "the caller's lengths were edited in place (lengths.sort(), ...): sort a list of indices, "
                           "sorted(range(len(lengths)), key=lambda i: lengths[i]), and leave lengths as it is")
    return batches


SORTED_POSITIONS = ("the indices are positions in the SORTED lengths (sorted(lengths)), not in lengths: sort the "
                    "indices, sorted(range(len(lengths)), key=lambda i: lengths[i]), and batch those")


def _sorted_positions(batches, lengths, max_tokens) -> bool:
    """Whether the batches are what a greedy cut of sorted(lengths) gives as positions in that sorted list
    (a classic mix-up): runs of consecutive positions, each within max_tokens there, each cut where the next
    example would not fit."""
    s = sorted(lengths)
    if s == list(lengths):
        return False
    runs = sorted(sorted(b) for b in batches if b)
    if any(b != list(range(b[0], b[0] + len(b))) or (len(b) > 1 and s[b[-1]] * len(b) > max_tokens) for b in runs):
        return False
    return all(s[nxt[0]] * (len(b) + 1) > max_tokens for b, nxt in zip(runs, runs[1:]))


def _expect_partition(batches, n, what):
    counts = Counter(i for b in batches for i in b)
    missing = sorted(set(range(n)) - set(counts))
    extra = sorted(i for i in counts if not 0 <= i < n)
    twice = sorted(i for i, c in counts.items() if c > 1)
    if extra:
        raise CheckFailure(what, f"indices 0..{n - 1}", f"also {extra[:5]}",
                           "return positions in lengths (indices), not the lengths themselves")
    if twice:
        raise CheckFailure(f"{what}: {len(twice)} indices appear more than once", "every index exactly once",
                           f"e.g. {twice[:5]} repeated", "an example was added to two batches: after a batch is "
                                                         "full, start the next one with the example that did not fit")
    if missing:
        raise CheckFailure(f"{what}: {len(missing)} indices are missing", "every index exactly once",
                           f"e.g. {missing[:5]} missing",
                           "the last batch was never appended (add it after the loop), or the example that did not "
                           "fit was dropped instead of starting the next batch")


OLD_LONGEST = ("the size test used the longest length from BEFORE the new example joined: in length order the new "
               "example is the longest, so test max(longest, lengths[i]) * (count + 1) > max_tokens before adding "
               "example i")


def _old_longest(batches, lengths, max_tokens) -> bool:
    """Whether every batch is what a size test with the longest length before the last addition lets through:
    its second-longest length x its count is within max_tokens (each batch stays within the limit until its
    longest example joins it)."""
    return all(sorted(lengths[i] for i in b)[-2] * len(b) <= max_tokens for b in batches if len(b) > 1)


@register("batch_by_tokens", "returns every index exactly once")
def _bbt_partition(fn):
    lengths = _random_lengths(0)
    what = f"batch_by_tokens({len(lengths)} random lengths, max_tokens=400)"
    _expect_partition(_batches(fn, lengths, 400, what), len(lengths), what)
    small = [5, 1, 4, 2]
    _expect_partition(_batches(fn, small, 8, "batch_by_tokens([5, 1, 4, 2], 8)"), 4, "batch_by_tokens([5, 1, 4, 2], 8)")
    none = _batches(fn, [], 10, "batch_by_tokens([], 10)")
    if none:
        raise CheckFailure("batch_by_tokens([], 10): no examples", "[] (no batches)", fmt(none),
                           "an empty batch: after the loop, append the last batch only if it holds an example "
                           "(`if current:`); make_batch cannot build a batch of nothing")


@register("batch_by_tokens", "each batch's padded size (longest x count) is within max_tokens")
def _bbt_limit(fn):
    lengths = _random_lengths(1)
    what = f"batch_by_tokens({len(lengths)} random lengths, max_tokens=400)"
    batches = _batches(fn, lengths, 400, what)
    _expect_partition(batches, len(lengths), what)
    for b in batches:
        if not b:
            raise CheckFailure(what, "batches of at least one example", "an empty batch",
                               "append a batch only when it holds an example")
        longest = max(lengths[i] for i in b)
        if len(b) > 1 and longest * len(b) > 400:
            real = sum(lengths[i] for i in b)
            raise CheckFailure(f"{what}: a batch of {len(b)} examples, the longest {longest} tokens",
                               "padded size = longest x count <= 400", f"{longest} x {len(b)} = {longest * len(b)}",
                               SORTED_POSITIONS if _sorted_positions(batches, lengths, 400) else
                               OLD_LONGEST if _old_longest(batches, lengths, 400) else
                               "the padded size was not what was limited: the sum of the lengths "
                               f"({real}) ignores the padding; limit max(length) * count" if real <= 400 else
                               "check the size before adding an example: would max(longest, new) * (count + 1) "
                               "exceed max_tokens? then start a new batch")


@register("batch_by_tokens", "an example longer than max_tokens stands alone")
def _bbt_long(fn):
    lengths = [3, 50, 4, 2, 30, 5, 3]
    what = "batch_by_tokens([3, 50, 4, 2, 30, 5, 3], max_tokens=20)"
    batches = _batches(fn, lengths, 20, what)
    _expect_partition(batches, len(lengths), what)
    for i in (1, 4):
        home = [b for b in batches if i in b][0]
        if home != [i]:
            raise CheckFailure(f"{what}: the batch of index {i} (length {lengths[i]} > 20)", f"[{i}], alone",
                               fmt(home), SORTED_POSITIONS if _sorted_positions(batches, lengths, 20) else
                               "an example longer than max_tokens cannot share a batch: put it in its own "
                               "(and do not drop it)")
    what = "batch_by_tokens([30, 25], max_tokens=20)"
    batches = _batches(fn, [30, 25], 20, what)
    _expect_partition(batches, 2, what)
    if sorted(map(sorted, batches)) != [[0], [1]]:
        raise CheckFailure(what, "[[1], [0]]: each example alone (both are longer than max_tokens)", fmt(batches),
                           "an empty batch: append a batch only when it holds an example (the first example is "
                           "already too long for an empty batch)" if any(not b for b in batches) else
                           "an example longer than max_tokens cannot share a batch: put it in its own")


@register("batch_by_tokens", "groups similar lengths (little padding on random lengths)")
def _bbt_similar(fn):
    lengths = _random_lengths(2, n=400, extra=())
    what = f"batch_by_tokens({len(lengths)} random lengths 1..60, max_tokens=600)"
    batches = _batches(fn, lengths, 600, what)
    _expect_partition(batches, len(lengths), what)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches if b)
    real = sum(lengths)
    if padded > 1.2 * real:
        raise CheckFailure(f"{what}: total padded size", f"at most 1.2 x the {real} real tokens",
                           f"{padded} ({padded / real:.2f} x)",
                           SORTED_POSITIONS if _sorted_positions(batches, lengths, 600) else
                           "batches mix short and long examples: sort the indices by length first "
                           "(sorted(range(n), key=lambda i: lengths[i])), then cut the sorted list into batches")


@register("batch_by_tokens", "fills batches up to max_tokens (not a few examples each)")
def _bbt_full(fn):
    what = "batch_by_tokens([3] * 8, max_tokens=12)"
    batches = _batches(fn, [3] * 8, 12, what)
    _expect_partition(batches, 8, what)
    if sorted(len(b) for b in batches) != [4, 4]:
        largest = max(len(b) for b in batches)
        raise CheckFailure(what, "2 batches of 4 (4 x 3 = 12 tokens each)", f"batch sizes {[len(b) for b in batches]}",
                           "every example got its own batch: keep adding examples while longest x count stays within "
                           "max_tokens" if largest == 1 else
                           f"a batch of {largest} x 3 = {3 * largest} tokens is over max_tokens = 12: check the size "
                           "before adding an example (would max(longest, new) * (count + 1) exceed max_tokens?)"
                           if largest > 4 else
                           "keep adding examples while longest x count stays within max_tokens (<=, not <)")
    lengths = _random_lengths(3, n=400, extra=())
    what = f"batch_by_tokens({len(lengths)} random lengths 1..60, max_tokens=600)"
    batches = _batches(fn, lengths, 600, what)
    _expect_partition(batches, len(lengths), what)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches if b)
    if padded < 0.7 * 600 * len(batches):
        raise CheckFailure(f"{what}: mean padded size of a batch", "close to max_tokens=600 (at least 420)",
                           f"{padded / len(batches):.0f} over {len(batches)} batches",
                           "batches are cut too early: add examples while longest x count stays within max_tokens")


# ---------------------------------------------------------------------------------------- noam_lr
def _noam(step, d_model, warmup_steps=4000, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def _number(x, what):
    try:
        if isinstance(x, (str, bytes)):
            raise TypeError("a string is not a number")
        item = getattr(x, "item", None)  # torch.Tensor, numpy arrays and scalars (one element: a number)
        return float(item() if callable(item) and not isinstance(x, (int, float)) else x)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailure(what, "a number", fmt(x), "return the learning rate as a float") from None


def _noam_mistakes(step, d, w, f):
    s = max(step, 1)
    rate = min(s ** -0.5, s * w ** -1.5)
    return {
        "the warmup exponent is -0.5: the warmup term is step * warmup_steps ** -1.5":
            f * d ** -0.5 * min(s ** -0.5, s * w ** -0.5),
        "max instead of min: the learning rate is the smaller of the warmup line and the decay":
            f * d ** -0.5 * max(s ** -0.5, s * w ** -1.5),
        "the d_model exponent is wrong: d_model ** -0.5 (1 / sqrt(d_model))": f * d ** 0.5 * rate,
        "the d_model exponent is wrong: d_model ** -0.5, not d_model ** -1": f * d ** -1 * rate,
        "d_model is missing: the rate is multiplied by d_model ** -0.5": f * min(s ** -0.5, s * w ** -1.5),
        "d_model ** -0.5 multiplies only the decay term: it multiplies the whole min(...)":
            f * min(d ** -0.5 * s ** -0.5, s * w ** -1.5),
        "d_model ** -0.5 multiplies only the warmup term: it multiplies the whole min(...)":
            f * min(s ** -0.5, d ** -0.5 * s * w ** -1.5),
        "off by one: noam_lr(step) gave the rate of step + 1; use step itself (only step 0 counts as 1)":
            f * d ** -0.5 * min((s + 1) ** -0.5, (s + 1) * w ** -1.5),
        "off by one: noam_lr(step) gave the rate of step - 1; use step itself (only step 0 counts as 1)":
            f * d ** -0.5 * min(max(s - 1, 1) ** -0.5, max(s - 1, 1) * w ** -1.5),
        "the factor argument is ignored: multiply by factor": d ** -0.5 * min(s ** -0.5, s * w ** -1.5),
        "the warmup_steps argument is ignored (4000 used)": f * d ** -0.5 * min(s ** -0.5, s * 4000 ** -1.5),
        "the d_model argument is ignored (512 used)": f * 512 ** -0.5 * min(s ** -0.5, s * w ** -1.5),
        "d_model ** -1/2 is (d_model ** -1) / 2 in Python (operator precedence): write d_model ** -0.5":
            f * d ** -1 / 2 * rate,
        "step ** -1/2 is (step ** -1) / 2 in Python (operator precedence): write step ** -0.5":
            f * d ** -0.5 * min(s ** -1 / 2, s * w ** -1.5),
        "warmup_steps ** -3/2 is (warmup_steps ** -3) / 2 in Python (operator precedence): write "
        "warmup_steps ** -1.5": f * d ** -0.5 * min(s ** -0.5, s * w ** -3 / 2),
        "no warmup: the rate starts at its largest and only decays; the warmup term is step * warmup_steps ** -1.5 "
        "(a negative exponent), and the rate is the min of the two terms": f * d ** -0.5 * s ** -0.5,
        "the rate never decays: after warmup_steps it follows step ** -0.5 (a negative exponent), the min of the "
        "two terms": f * d ** -0.5 * s * w ** -1.5,
        "divided by factor: multiply by it": d ** -0.5 * min(s ** -0.5, s * w ** -1.5) / f,
        "d_model and warmup_steps swapped": f * w ** -0.5 * min(s ** -0.5, s * d ** -1.5),
        "the warmup term is step / warmup_steps: it is step * warmup_steps ** -1.5": f * d ** -0.5 * min(
            s ** -0.5, s / w),
        "the rate stays at its peak after warmup_steps (min(step, warmup_steps) * warmup_steps ** -1.5): after the "
        "warmup it decays as step ** -0.5, the min of the two terms": f * d ** -0.5 * min(s, w) * w ** -1.5,
        "factor multiplies only the decay term: it multiplies the whole rate": d ** -0.5 * min(f * s ** -0.5,
                                                                                                s * w ** -1.5),
        "factor multiplies only the warmup term: it multiplies the whole rate": d ** -0.5 * min(s ** -0.5,
                                                                                                 f * s * w ** -1.5),
    }


ZERO_RATE = ("the warmup term rounds down to 0, as an integer division does (step // warmup_steps, or int(...)): "
             "use true division (/) or powers, step * warmup_steps ** -1.5")


def _expect_lr(noam_lr, step, d, w=None, f=None, hint=None):
    _expect_lrs(noam_lr, [(step, d, w, f)], hint)


def _expect_lrs(noam_lr, cases, hint=None):
    """noam_lr at each (step, d_model, warmup_steps or None, factor or None) of cases (None: the default left
    out). A mistake is named only when it gives the learner's value at every case where the learner is wrong
    (a value that happens to equal a mistake's at one step does not name it)."""
    rows = []
    for step, d, w, f in cases:
        kwargs = {}
        if w is not None:
            kwargs["warmup_steps"] = w
        if f is not None:
            kwargs["factor"] = f
        w_, f_ = (4000 if w is None else w), (1.0 if f is None else f)
        what = f"noam_lr({', '.join([str(step), str(d)] + [f'{k}={v}' for k, v in kwargs.items()])})"
        rows.append((what, _number(noam_lr(step, d, **kwargs), what), _noam(step, d, w_, f_),
                     _noam_mistakes(step, d, w_, f_)))
    wrong = [r for r in rows if not math.isclose(r[1], r[2], rel_tol=1e-6, abs_tol=1e-15)]
    if not wrong:
        return
    what, got, expected, _ = wrong[0]
    names = [description for description in wrong[0][3]
             if all(math.isclose(g, m[description], rel_tol=1e-6, abs_tol=1e-15) for _, g, _, m in wrong)]
    hint = "; or ".join(names) or (ZERO_RATE if all(r[1] == 0 for r in wrong) else hint)
    raise CheckFailure(what, f"{expected:.6g}", f"{got:.6g}",
                       hint or "factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)")


@register("noam_lr", "equals factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), a Python float")
def _noam_formula(noam_lr):
    _expect_lrs(noam_lr, [(step, 512, None, None) for step in (1, 10, 1000, 3999, 4000, 4001, 10000, 100000)])
    got = noam_lr(4000, 512)
    if not isinstance(got, float):  # numpy.float64 is a float
        kind = "tensor" if isinstance(got, torch.Tensor) else f"{type(got).__module__}.{type(got).__name__}"
        raise CheckFailure("type(noam_lr(4000, 512))", "float (a Python float: LambdaLR multiplies lr=1.0 by it, and "
                           "the optimizer's lr, the logs and the checkpoints keep it)", kind,
                           f"the rate stayed a {kind} (computed with torch or numpy): return float(rate), or compute "
                           "with Python numbers, step ** -0.5")


@register("noam_lr", "rises linearly until warmup_steps, then decays as step^-0.5")
def _noam_shape(noam_lr):
    lr = [_number(noam_lr(s, 64, warmup_steps=10), f"noam_lr({s}, 64, warmup_steps=10)") for s in range(1, 41)]
    peak = max(range(40), key=lambda i: lr[i]) + 1
    if peak != 10:
        raise CheckFailure("the step of the largest noam_lr(step, 64, warmup_steps=10) over steps 1..40", "step 10",
                           f"step {peak}", _noam_hint(noam_lr, 64, 10))
    if not (math.isclose(lr[4] / lr[9], 0.5, rel_tol=1e-6) and math.isclose(lr[39] / lr[9], 0.5, rel_tol=1e-6)):
        raise CheckFailure("noam_lr(5) / noam_lr(10) and noam_lr(40) / noam_lr(10) with warmup_steps=10",
                           "0.5 and 0.5 (linear warmup; then 1 / sqrt(step))",
                           f"{lr[4] / lr[9]:.4g} and {lr[39] / lr[9]:.4g}", _noam_hint(noam_lr, 64, 10))


def _noam_hint(noam_lr, d, w):
    """The mistake whose values match the learner's at a step before and a step after the warmup."""
    got = {s: _number(noam_lr(s, d, warmup_steps=w), "noam_lr") for s in (w // 2, 4 * w)}
    wrong = {s: _noam_mistakes(s, d, w, 1.0) for s in got}
    names = [description for description in wrong[w // 2]
             if all(math.isclose(got[s], wrong[s][description], rel_tol=1e-6) for s in got)]
    if names:
        return "; or ".join(names)
    if got[w // 2] == 0:
        return "noam_lr is 0 during the warmup: " + ZERO_RATE
    return "min(step ** -0.5, step * warmup_steps ** -1.5): the two meet at step = warmup_steps"


@register("noam_lr", "uses d_model, warmup_steps and factor")
def _noam_args(noam_lr):
    _expect_lrs(noam_lr, [(3, 64, 50, 2.0), (50, 64, 50, 2.0), (200, 64, 50, 2.0), (7, 128, 10, 0.5)])


@register("noam_lr", "step 0 counts as step 1 (no ZeroDivisionError)")
def _noam_zero(noam_lr):
    try:
        got = noam_lr(0, 512)
    except ZeroDivisionError:
        raise CheckFailure("noam_lr(0, 512)", f"noam_lr(1, 512) = {_noam(1, 512):.6g}", "ZeroDivisionError",
                           "0 ** -0.5 divides by zero: count step 0 as step 1 (step = max(step, 1)); LambdaLR "
                           "calls the schedule with 0 when it is created") from None
    got = _number(got, "noam_lr(0, 512)")
    if not math.isclose(got, _noam(1, 512), rel_tol=1e-6):
        one = _number(noam_lr(1, 512), "noam_lr(1, 512)")
        hint = ("step 0 gave infinity: count step 0 as step 1 (step = max(step, 1))" if not math.isfinite(got)
                else "step 0 is counted as step 1, but the formula itself gives 0 at step 1 (noam_lr(1, 512) is 0 "
                "too): " + ZERO_RATE if got == 0 and one == 0
                else "step 0 gave 0: count it as step 1 (step = max(step, 1)), as the contract says" if got == 0
                else "step 0 is counted as step 1, but the formula itself is wrong at step 1: see the other checks"
                if math.isclose(got, one, rel_tol=1e-9) else "count step 0 as step 1 (step = max(step, 1))")
        raise CheckFailure("noam_lr(0, 512)", f"noam_lr(1, 512) = {_noam(1, 512):.6g}", f"{got:.6g}", hint)
    _expect_lr(noam_lr, 1, 512)


# ---------------------------------------------------------------------------------- make_optimizer
@learner_side
def _tiny_model(seed=0):
    with seeded(seed):
        return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def _groups(opt) -> list:
    """opt.param_groups as data, checked: a list of 1 to 64 dicts with string keys, each with its "params" (a list of
    tensors) and a number or one-value tensor "lr" (with `python -m autograder grade` the optimizer is the kernel's:
    what it says about itself is checked before a check reads it)."""
    groups = getattr(opt, "param_groups", None)
    bad = None
    if not isinstance(groups, list) or not 1 <= len(groups) <= 64:
        bad = f"{type(groups).__name__} of {len(groups) if isinstance(groups, list) else '?'} groups"
    else:
        for g in groups:
            if not isinstance(g, dict) or not all(isinstance(k, str) for k in g):
                bad = f"a group that is a {type(g).__name__}"
            elif not isinstance(g.get("params"), list) or len(g["params"]) > 100_000 or \
                    not all(isinstance(q, torch.Tensor) for q in g["params"]):
                bad = "a group whose params are not a list of tensors"
            elif not isinstance(g.get("lr"), (int, float, torch.Tensor)) or isinstance(g.get("lr"), bool) or \
                    (isinstance(g["lr"], torch.Tensor) and g["lr"].numel() != 1):
                bad = f"a group whose lr is {type(g.get('lr')).__name__}"
            if bad:
                break
    if bad:
        raise CheckFailure("optimizer.param_groups", "a list of dicts, each with its params and lr", bad,
                           "return the torch.optim.Adam itself, as created over model.parameters()")
    return groups


def _make_opt(make_optimizer, model, d, w=None, f=None):
    kwargs = {}
    if w is not None:
        kwargs["warmup_steps"] = w
    if f is not None:
        kwargs["factor"] = f
    what = f"make_optimizer(model, {d}{''.join(f', {k}={v}' for k, v in kwargs.items())})"
    try:
        out = make_optimizer(model, d, **kwargs)
    except ZeroDivisionError:
        raise CheckFailure(what, "an optimizer and a scheduler", "ZeroDivisionError",
                           "LambdaLR calls its lambda with 0 as soon as it is created: 0 ** -0.5 divides by zero. "
                           "Count step 0 as step 1, or shift: lambda s: noam_lr(s + 1, ...)") from None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise CheckFailure(what, "a pair (optimizer, scheduler)", type(out).__name__,
                           "return optimizer, scheduler")
    opt, sched = out
    if not isinstance(opt, torch.optim.Optimizer):
        raise CheckFailure(what + "[0]", "a torch.optim.Adam", type(opt).__name__,
                           "return (optimizer, scheduler) in that order")
    if not callable(getattr(sched, "step", None)):
        raise CheckFailure(what + "[1]", "a learning-rate scheduler with .step()", type(sched).__name__,
                           "torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: ...)")
    return opt, sched, what


def _lrs(opt, sched, model, n):
    """The learning rate of each of the first n optimizer steps, stepping as the contract says."""
    out = []
    x = torch.linspace(-1, 1, 6).view(2, 3)
    for _ in range(n):
        rates = {float(g["lr"]) for g in _groups(opt)}  # (float: a tensor lr is changed in place)
        out.append(rates.pop() if len(rates) == 1 else float("nan"))
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
        sched.step()
    return out


def _base_lr(opt, sched):
    """The optimizer's lr that a LambdaLR multiplies by its lambda (None when the scheduler keeps none)."""
    base = _groups(opt)[0].get("initial_lr", (getattr(sched, "base_lrs", None) or [None])[0])
    try:
        return None if base is None else float(base)
    except (TypeError, ValueError):
        return None


def _expect_schedule(got, d, w, f, what, elsewhere=False, base_lr=None):
    """`elsewhere`: the scheduler drives another optimizer than the one returned; `base_lr`: the optimizer's lr
    that the scheduler multiplies (None: unknown)."""
    n = len(got)
    expected = [_noam(k, d, w, f) for k in range(1, n + 1)]
    if all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, expected)):
        return
    k = next(i for i, (a, b) in enumerate(zip(got, expected)) if not math.isclose(a, b, rel_tol=1e-6)) + 1
    same = lambda seq: all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, seq))  # noqa: E731
    ratio = got[k - 1] / expected[k - 1] if expected[k - 1] else float("nan")
    if same([_noam(k - 1, d, w, f) for k in range(1, n + 1)]):
        hint = ("off by one: the k-th step ran at noam_lr(k - 1). LambdaLR evaluates lambda(0) before the first "
                "step, then lambda(1) after one scheduler step, ...: use lambda s: noam_lr(s + 1, ...)")
    elif same([_noam(k + 1, d, w, f) for k in range(1, n + 1)]):
        hint = ("off by one: the k-th step ran at noam_lr(k + 1); the first optimizer step must run at noam_lr(1) "
                "(do not step the scheduler before the first optimizer step, e.g. right after creating it)")
    elif same([_noam(k, d, 4000, f) for k in range(1, n + 1)]):
        hint = "the warmup_steps argument is ignored (4000 used)"
    elif same([_noam(k, d, w, 1.0) for k in range(1, n + 1)]):
        hint = "the factor argument is ignored"
    elif same([_noam(k, 512, w, f) for k in range(1, n + 1)]):
        hint = "the d_model argument is ignored (512 used)"
    elif same([_noam(k, 512, w, 1.0) for k in range(1, n + 1)]):
        hint = "the d_model and factor arguments are ignored (512 and 1.0 used): pass them on to noam_lr"
    elif same([_noam(k, 512, 4000, 1.0) for k in range(1, n + 1)]):
        hint = ("the d_model, warmup_steps and factor arguments are ignored (noam_lr's defaults or 512 used): pass "
                "them on: lambda s: noam_lr(s + 1, d_model, warmup_steps, factor)")
    elif elsewhere:
        hint = ("the scheduler was made for another optimizer than the one returned: create the LambdaLR on the "
                "Adam you return (one optimizer)")
    elif any(same(seq) for seq in _schedule_mistakes(d, w, f, n).values()):
        hint = "the schedule: " + "; or ".join(desc for desc, seq in _schedule_mistakes(d, w, f, n).items()
                                               if same(seq))
    elif all(math.isclose(a / b, ratio, rel_tol=1e-6) for a, b in zip(got, expected) if b):
        hint = (f"every rate is {ratio:.4g} x the schedule: LambdaLR multiplies the optimizer's lr by the lambda, so "
                "create Adam with lr=1.0" if base_lr is not None and not math.isclose(base_lr, 1.0) else
                f"every rate is {ratio:.4g} x the schedule, though the warmup is right: the constant factor "
                "factor * d_model ** -0.5 is off, so the d_model or factor argument looks ignored or replaced; pass "
                "both on: lambda s: noam_lr(s + 1, d_model, warmup_steps, factor)")
    elif len(set(got)) == 1:
        hint = "the rate never changes: step the scheduler (scheduler.step()) after each optimizer step"
    else:
        hint = "LambdaLR(optimizer, lambda s: noam_lr(s + 1, d_model, warmup_steps, factor)) with Adam's lr=1.0"
    raise CheckFailure(f"{what}: learning rate of optimizer step {k}",
                       f"noam_lr({k}) = {expected[k - 1]:.6g}", f"{got[k - 1]:.6g}", hint)


def _schedule_mistakes(d, w, f, n):
    """The rates of optimizer steps 1..n for each noam_lr mistake (as a lambda s: mistake(s + 1))."""
    rows = [_noam_mistakes(k, d, w, f) for k in range(1, n + 1)]
    return {desc: [row[desc] for row in rows] for desc in rows[0] if not desc.startswith("off by one")}


def _elsewhere(opt, sched) -> bool:
    """Whether the scheduler holds another optimizer than opt (one made twice)."""
    other = getattr(sched, "optimizer", opt)
    return isinstance(other, torch.optim.Optimizer) and other is not opt


# A process's first torch.optim.Adam imports PyTorch's compiler stack (torch._dynamo): 2 s on a quiet 2-core machine,
# and past the 10 s of a check when the machine is busy (seen grading lesson 12 beside a training run). The check that
# makes the learner's first Adam and the one that makes the grader's own get 30 s; a hang still stops there.
FIRST_ADAM_TIMEOUT = 30.0


@register("make_optimizer", "returns (Adam, scheduler) over all the model's parameters", timeout=FIRST_ADAM_TIMEOUT)
def _opt_params(make_optimizer):
    model = _tiny_model()
    opt, _, what = _make_opt(make_optimizer, model, 16)
    if not isinstance(opt, torch.optim.Adam):
        raise CheckFailure(what + ": the optimizer", "torch.optim.Adam", type(opt).__name__,
                           "the paper trains with Adam: torch.optim.Adam(model.parameters(), lr=1.0, ...)")
    held = {id(p) for g in _groups(opt) for p in g["params"]}
    missing = [n for n, p in model.named_parameters() if id(p) not in held]
    if missing:
        raise CheckFailure(what + ": the optimizer's parameters", "every parameter of the model",
                           f"missing {missing}", "pass model.parameters() to Adam")
    wd = {g.get("weight_decay", 0) for g in _groups(opt)}
    if wd != {0}:
        raise CheckFailure(what + ": weight_decay", "0 (plain Adam)", fmt(sorted(wd)),
                           "the paper's Adam has no weight decay")
    if any(g.get("amsgrad") for g in _groups(opt)):
        raise CheckFailure(what + ": amsgrad", "False (plain Adam)", "True", "the paper uses plain Adam: amsgrad=False")


@register("make_optimizer", "Adam's betas are (0.9, 0.98) and eps is 1e-9, not the defaults")
def _opt_betas(make_optimizer):
    opt, _, what = _make_opt(make_optimizer, _tiny_model(), 16)
    g = _groups(opt)[0]
    betas, eps = tuple(float(b) for b in g.get("betas", ())), g.get("eps")
    if betas != (0.9, 0.98):
        raise CheckFailure(what + ": betas", "(0.9, 0.98)", fmt(betas),
                           "Adam's default betas (0.9, 0.999) were kept: the paper uses betas=(0.9, 0.98)"
                           if betas == (0.9, 0.999) else "betas=(0.9, 0.98), as in the paper (section 5.3)")
    if eps is None or not math.isclose(eps, 1e-9, rel_tol=1e-9):
        raise CheckFailure(what + ": eps", "1e-09", fmt(eps),
                           "Adam's default eps 1e-8 was kept: the paper uses eps=1e-9"
                           if eps is not None and math.isclose(eps, 1e-8) else "eps=1e-9, as in the paper")


@register("make_optimizer", "the k-th optimizer step runs at noam_lr(k), k = 1, 2, ...")
def _opt_schedule(make_optimizer):
    model = _tiny_model()
    opt, sched, what = _make_opt(make_optimizer, model, 64, w=10, f=2.0)
    _expect_schedule(_lrs(opt, sched, model, 30), 64, 10, 2.0, what, _elsewhere(opt, sched), _base_lr(opt, sched))


@register("make_optimizer", "follows d_model, warmup_steps and factor")
def _opt_args(make_optimizer):
    # 3 * 128 ** -0.5 is neither 512 ** -0.5, 128 ** -0.5 nor 3 * 512 ** -0.5 (d_model or factor ignored)
    for d, w, f in ((128, 4, 3.0), (32, 20, 1.0)):
        model = _tiny_model(1)
        opt, sched, what = _make_opt(make_optimizer, model, d, w=w, f=f)
        _expect_schedule(_lrs(opt, sched, model, 25), d, w, f, what, _elsewhere(opt, sched), _base_lr(opt, sched))


@register("make_optimizer", "moves the parameters as Adam at that learning rate would", timeout=FIRST_ADAM_TIMEOUT)
def _opt_updates(make_optimizer):
    model = _tiny_model(2)
    reference = copy.deepcopy(model)
    opt, sched, what = _make_opt(make_optimizer, model, 16, w=3, f=1.0)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    x = torch.linspace(-1, 1, 6).view(2, 3)
    for k in range(1, 6):
        for m, o in ((model, opt), (reference, ref_opt)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
        for g in ref_opt.param_groups:
            g["lr"] = _noam(k, 16, 3, 1.0)
        opt.step()
        sched.step()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if not torch.allclose(p.detach(), q.detach(), atol=1e-6, rtol=1e-5):
            diff = (p - q).abs().max().item()
            raise CheckFailure(f"{what}: parameter {name} after 5 steps (largest difference {diff:.3g})",
                               "the same values as torch.optim.Adam(lr=noam_lr(k), betas=(0.9, 0.98), eps=1e-9)",
                               "other values",
                               "the scheduler was made for another optimizer than the one returned: create the "
                               "LambdaLR on the Adam you return" if _elsewhere(opt, sched) else
                               "Adam over model.parameters() with lr=1.0, betas=(0.9, 0.98), "
                               "eps=1e-9, and LambdaLR(optimizer, lambda s: noam_lr(s + 1, ...))")
