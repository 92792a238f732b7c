"""Stage 12's checks of make_batch: each field of the batch against values and masks written out here."""
from __future__ import annotations

import torch

from ..registry import CheckFailure, register
from ._util import fmt
from .stage12_training import BOS, EOS, PAD, _expect_ids, _expect_mask, _pad

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
        "tgt_in keeps the <eos> of the shorter targets (shift_right of the padded tgt_out): tgt_in is <bos> "
        "y, padded with pad_id; build it from [bos_id] + y": torch.cat(
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
                 "<eos> added to the source: the source is used as it is, only "
                 "padded": _pad([s + [EOS] for s in SRC])})


SWAPPED = ("tgt_in and tgt_out are swapped: tgt_in (the decoder input) is <bos> y, tgt_out (what the decoder "
           "must predict) is y <eos>; check the order of the fields, Batch(src, tgt_in, tgt_out, src_mask, "
           "tgt_mask, n_tokens)")


def _same_ids(t, expected: torch.Tensor) -> bool:
    return (isinstance(t, torch.Tensor) and tuple(t.shape) == tuple(expected.shape) and
            torch.equal(t.long(), expected))


def _swapped(b, e) -> dict[str, torch.Tensor]:
    """SWAPPED, as a mistake of tgt_in, when the batch's tgt_in and tgt_out are each what the other should
    be."""
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
                           "the caller's lists were edited in place (t.append(eos_id), t.insert(0, bos_id), "
                           "...): build new lists ([bos_id] + t, t + [eos_id]); otherwise every epoch adds "
                           "more specials to the data")


@register("make_batch", "src_mask: (B, 1, 1, Ls), True at the real source tokens")
def _mb_src_mask(make_batch):
    e = _expected_batch()
    b = _batch(make_batch)
    full = e["src_mask"]
    src = b.src
    if isinstance(src, torch.Tensor) and src.dim() == 2 and not src.dtype.is_floating_point and \
            src.dtype != torch.bool and not _same_ids(src, e["src"]) and \
            not _mask_equals(b.src_mask, full) and \
            _mask_equals(b.src_mask, (src != PAD)[:, None, None, :]):
        raise CheckFailure(f"batch.src_mask for sources {SRC}", f"padding_mask of the right src, shape "
                                                                f"{tuple(full.shape)}",
                           f"padding_mask of the batch's own src, shape {tuple(b.src_mask.shape)}",
                           "the mask is the padding mask of the batch's own src, which is wrong (see the src "
                           "item): the mask is built right, fix src and the mask follows")
    _expect_mask(b.src_mask, full, f"batch.src_mask for sources {SRC}",
                 "src_mask = (src != pad_id)[:, None, None, :], the padding mask of src",
                 {"mask polarity inverted: True must mean 'may attend', i.e. a real token": ~full,
                  "all True: the padding of the source is not masked": torch.ones_like(full)})


FROM_WRONG_TGT_IN = ("the mask is target_mask of the batch's own tgt_in, which is wrong (see the tgt_in "
                     "item): the mask is built right, fix tgt_in and the mask follows")


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
        all(s in (1, f) for s,
            f in zip(mask.shape, full.shape)) and torch.equal(mask.expand(full.shape), full)


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
        raise CheckFailure(f"{what}: wrong shape",
                           f"shape {tuple(full.shape)} (or one that broadcasts to it)",
                           f"shape {tuple(b.tgt_mask.shape)}", FROM_WRONG_TGT_IN)
    _expect_mask(b.tgt_mask, full, what,
                 "tgt_mask = target_mask(tgt_in): (tgt_in != pad)[:, None, None, :] & causal_mask(Lt)",
                 {**({FROM_WRONG_TGT_IN: own} if own is not None else {}),
                  "only the causal part: the padding keys of tgt_in are not masked (combine with & the "
                  "padding mask)":
                      causal,
                  "only the padding part: without the causal mask the decoder sees the future tokens it must "
                  "predict":
                      pad,
                  "mask polarity inverted: True must mean 'may attend'": ~full,
                  "the causal part is upper-triangular: position i may attend to 0..i (tril), not to the "
                  "future":
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
                               f"the count stayed a {'tensor' if isinstance(n, torch.Tensor) else kind}: a "
                               "count of tokens is an int (the training loop adds it up and writes it to its "
                               "JSON log, which refuses tensors and numpy numbers); n_tokens = int((tgt_out "
                               "!= pad_id).sum())")
        return
    B, L = e["tgt_out"].shape
    hints = {B * L: "padding counted: count only the tokens of tgt_out that are not pad_id",
             sum(len(t) for t in TGT): "<eos> not counted: the model predicts it too, so it counts "
                                       "(the real tokens of tgt_out)",
             sum(len(s) for s in SRC): "the source tokens were counted: n_tokens counts tgt_out's real "
                                       "tokens",
             int((e["src"] != PAD).sum()): "the source tokens were counted: n_tokens counts tgt_out's real "
                                           "tokens"}
    raise CheckFailure("batch.n_tokens for targets [[11, 12], [13, 14, 15], [16]]",
                       f"{e['n_tokens']} (2+1, 3+1, 1+1)",
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
    _expect_mask(b.src_mask, e["src_mask"], what + ": src_mask", "src_mask = (src != pad_id)[:, None, None, "
                                                                 ":]",
                 {ignored.format("pad_id",
                                 "<pad> = 0") + " in the source mask": (e["src"] != PAD)[:, None, None, :]})
    _expect_mask(b.tgt_mask, e["tgt_mask"], what + ": tgt_mask", "tgt_mask = target_mask(tgt_in, pad_id)",
                 {"no padding in the target mask: its padding part is missing, or it looked for <pad> = 0 "
                  "instead of the pad_id argument": e["causal"]})
    n = b.n_tokens.item() if isinstance(b.n_tokens, torch.Tensor) else b.n_tokens
    if isinstance(n, (str, bytes)) or n != e["n_tokens"]:
        raise CheckFailure(what + ": n_tokens", e["n_tokens"], fmt(n),
                           "count the tokens of tgt_out that are not pad_id")
