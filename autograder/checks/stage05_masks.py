"""Stage 05: attention masks, against masks written out in the check (bool, True = may attend, shaped to
broadcast to (B, h, Lq, Lk)), with the classic mistakes named: polarity, the diagonal, queries vs keys."""
from __future__ import annotations

import math

import torch

from ..registry import CheckFailure, CheckPassed, CheckTimeout, register
from ._util import as_tensor, diagnose, expect_shape, fmt, learners_own

NOT_BOOL = ("the mask is not bool: masks are boolean, True = may attend (e.g. `ids != pad_id`, or "
            "torch.ones(..., dtype=torch.bool)); a float 0/1 or 0/-inf mask breaks `~mask` and masked_fill")


def _ids():
    # (B=2, L=5), right-padded with 0 = <pad>: the first sentence has 3 real tokens, the second 5
    return torch.tensor([[5, 7, 9, 0, 0], [4, 8, 6, 3, 2]])


def _expect_bool(got, what):
    got = as_tensor(got, what)
    if got.dtype != torch.bool:
        raise CheckFailure(f"{what}: dtype", "torch.bool", str(got.dtype), NOT_BOOL)
    return got


def _expect_shape(got, shape, what, wrong_shapes: dict):
    got = as_tensor(got, what)
    hint = wrong_shapes.get(tuple(got.shape), None)
    return expect_shape(got, shape, what, hint)


def _expect_mask(got, expected: torch.Tensor, what: str, hint: str, mistakes: dict | None = None):
    """Equal as booleans (the dtype has its own check); name the mistake whose mask it matches."""
    got = _expect_shape(got, expected.shape, what, {})
    values = got.detach().to("cpu")
    if values.dtype != torch.bool:
        low = values.min().item() if values.is_floating_point() and values.numel() else 0.0
        if values.is_floating_point() and low <= -1e4 and bool(((values == 0) | (values == low)).all()):
            raise CheckFailure(what, "a bool mask (True = may attend)", f"a {values.dtype} mask of 0 and "
                                                                        f"{low:g}",
                               f"an additive float mask (0 / {low:g}, added to the scores, as in Hugging "
                               "Face code): the course's masks are bool, True = may attend")
        values = values != 0
    if torch.equal(values, expected):
        return
    hint = diagnose(values, mistakes, lambda v,
                    wrong: wrong.shape == v.shape and torch.equal(v, wrong)) or hint
    where = tuple(int(i) for i in torch.nonzero(values != expected)[0].tolist())
    raise CheckFailure(f"{what}: wrong values (first at index {where})",
                       fmt(expected.int()) if expected.numel() <= 8 else f"{expected[where].item()} there",
                       fmt(values.int()) if values.numel() <= 8 else f"{values[where].item()} there", hint)


def _expect_unchanged(arg, original, what):
    if not torch.equal(arg, original):
        raise CheckFailure(f"the ids after {what}", fmt(original) + " (unchanged)", fmt(arg),
                           "the ids were modified in place (ids[ids == pad_id] = ..., masked_fill_, ...): "
                           "the caller still needs them; compare into a new tensor, ids != pad_id")


# ------------------------------------------------------------------------------------- padding_mask
PAD_SHAPES = {
    (2, 5): "the mask has shape (B, L): add the head and query dimensions, (ids != pad_id)[:, None, None, :] "
            "-> (B, 1, 1, L), so that it broadcasts to (B, h, Lq, Lk)",
    (2, 1, 5, 1): "the padding mask is over the queries (B, 1, L, 1) instead of the keys (B, 1, 1, L): "
                  "it must hide the padded keys from every query",
    (2, 1, 5): "one singleton dimension is missing: (B, 1, 1, L)",
    (2, 5, 1, 1): "the singleton dimensions are in the wrong place: (B, 1, 1, L)",
    (1, 1, 2, 5): "the new dimensions were added in front of the batch: (ids != pad_id)[:, None, None, :] "
                  "keeps the batch first, (B, 1, 1, L)",
    (2, 1, 5, 5): "the mask was expanded over the queries: keep (B, 1, 1, L), broadcasting does the rest",
    (1, 1, 1, 5): "one row for the whole batch: every sentence has its own row, (B, 1, 1, L)",
}
GREATER = ("ids > pad_id marks the ids above the pad id only: a real token is any id other than pad_id, ids "
           "!= pad_id")


@register("padding_mask", "returns a bool tensor, on the device of the ids")
def _pad_dtype(padding_mask):
    _expect_bool(padding_mask(_ids()), "padding_mask(ids)")
    _on_ids_device(padding_mask, "padding_mask", "build the mask from the ids themselves, ids != pad_id, "
                                                 "which stays on their device")


@register("padding_mask", "shape (B, 1, 1, L): masks the keys, broadcasts over heads and queries")
def _pad_shape(padding_mask):
    _expect_shape(padding_mask(_ids()), (2, 1, 1, 5), "padding_mask(ids of shape (2, 5))", PAD_SHAPES)


def _as_key_mask(got, shape):
    """A mask of another shape whose values are one per (sentence, key), in order ((B, L), (B, 1, L), (B, 1,
    L, 1), (1, 1, B, L)...: what the shape check names), viewed as (B, 1, 1, L) for the value checks: the
    shape is paid once, by its own check. Anything else is returned as it is."""
    if (isinstance(got, torch.Tensor) and tuple(got.shape) != tuple(shape) and got.numel() == math.prod(shape)
            and [n for n in got.shape if n != 1] == [n for n in shape if n != 1]):
        return got.reshape(shape)
    return got


@register("padding_mask", "True at real tokens, False at <pad> (whatever the shape)")
def _pad_values(padding_mask):
    ids = _ids()
    expected = (ids != 0)[:, None, None, :]
    arg = ids.clone()
    got = _expect_shape(_as_key_mask(padding_mask(arg), (2, 1, 1, 5)), (2, 1, 1, 5),
                        "padding_mask(ids of shape "
                        "(2, 5))", PAD_SHAPES)
    _expect_mask(got, expected, "padding_mask([[5, 7, 9, 0, 0], [4, 8, 6, 3, 2]])",
                 "True where ids != pad_id", {"polarity inverted: True must mean a real token (may attend), "
                                              "i.e. ids != pad_id, not ids == pad_id": ~expected})
    _expect_unchanged(arg, ids, "padding_mask(ids)")
    ones = torch.tensor([[4, 5, 6]])
    _expect_mask(_as_key_mask(padding_mask(ones), (1, 1, 1, 3)), torch.ones(1, 1, 1, 3, dtype=torch.bool),
                 "padding_mask([[4, 5, 6]]) (no padding)",
                 "a batch without padding is all True")


@register("padding_mask", "uses the pad_id argument")
def _pad_id(padding_mask):
    ids = torch.tensor([[5, 0, 3, 9, 9], [7, 9, 9, 9, 9]])  # 9 plays <pad>; 0 here is an ordinary token
    expected = (ids != 9)[:, None, None, :]
    got = _expect_shape(_as_key_mask(padding_mask(ids, pad_id=9), (2, 1, 1, 5)), (2, 1, 1, 5),
                        "padding_mask(ids, pad_id=9)", PAD_SHAPES)
    _expect_mask(got, expected, "padding_mask([[5, 0, 3, 9, 9], [7, 9, 9, 9, 9]], pad_id=9)",
                 "compare with pad_id",
                 {"the pad_id argument is ignored (compared with 0 = PAD)": (ids != 0)[:, None, None, :],
                  "polarity inverted: True must mean a real token (may attend), i.e. ids != "
                  "pad_id": ~expected,
                  GREATER: (ids > 9)[:, None, None, :]})


# ------------------------------------------------------------------------------------- causal_mask
def _causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()[None, None]


def _causal_mistakes(n):
    one = torch.ones(n, n, dtype=torch.bool)
    return {
        "the diagonal is missing (tril(diagonal=-1) or triu offset off by one): position i must see itself, "
        "True on AND below the diagonal": one.tril(-1)[None, None],
        "inverted: True above the diagonal means attending to the future; True on and below it, e.g. "
        "torch.ones(n, n, dtype=torch.bool).tril() or ~triu(ones, diagonal=1)": one.triu(1)[None, None],
        "transposed: True on and above the diagonal lets position 0 see everything; use tril, not triu":
            one.triu()[None, None],
        "one step into the future allowed (tril(diagonal=1)): True on and below the diagonal only":
            one.tril(1)[None, None],
        "only the diagonal (eye): position i also sees every earlier position, True on and below the "
        "diagonal, tril()": torch.eye(n, dtype=torch.bool)[None, None],
        "all True: the future is not hidden; keep True on and below the diagonal only, "
        "torch.ones(size, size, dtype=torch.bool).tril()": one[None, None],
    }


def _causal_shapes(n):
    capped = {(1, 1, k, k): f"a {k} x {k} mask for size {n}: the size is capped or hard-coded (a fixed table "
                            "cut "
              "with [:size, :size]); build the mask for the size asked, torch.ones(size, size, ...)"
              for k in range(1, n - 1)}
    return {**capped, (n, n): "add the batch and head dimensions: mask[None, None] -> (1, 1, size, size)",
            (1, n, n): "one of the two leading dimensions is missing: mask[None, None] -> (1, 1, size, size)",
            (1, 1, n - 1, n - 1): "off by one: the mask is size x size, one row and one column per position",
            (1, 1, n + 1, n + 1): "off by one: the mask is size x size, one row and one column per position"}


@register("causal_mask", "returns a bool tensor of shape (1, 1, size, size)")
def _causal_shape(causal_mask):
    got = _expect_shape(causal_mask(4), (1, 1, 4, 4), "causal_mask(4)", _causal_shapes(4))
    _expect_bool(got, "causal_mask(4)")


@register("causal_mask", "True on and below the diagonal (position i sees 0..i), sizes 1 to 64")
def _causal_values(causal_mask):
    for n in (5, 1, 2, 9, 64):
        got = _expect_shape(causal_mask(n), (1, 1, n, n), f"causal_mask({n})", _causal_shapes(n))
        _expect_mask(got, _causal(n), f"causal_mask({n})", "torch.ones(size, size, dtype=torch.bool).tril()",
                     _causal_mistakes(n))


@register("causal_mask", "is built on the requested device")
def _causal_device(causal_mask):
    # 'meta' is PyTorch's data-less device: it stands in for 'cuda' on a machine without a GPU
    try:
        got = as_tensor(causal_mask(3, device=torch.device("meta")), "causal_mask(3, "
                                                                     "device=torch.device('meta'))")
    except NotImplementedError as e:
        if not _copied_off_meta(e):
            raise
        raise CheckFailure("causal_mask(3, device=torch.device('meta'))", "a mask on the requested device",
                           f"NotImplementedError: {str(e)[:60]}",
                           "a .cpu(), .to('cpu') or .tolist() of the mask made on `device` sends it to the "
                           "CPU: on a GPU it comes back there and cannot meet the scores; return the tensor "
                           "made with device=device as it is") from None
    if got.device.type != "meta":
        raise CheckFailure("causal_mask(3, device=torch.device('meta')).device", "meta", str(got.device),
                           "causal_mask ignores `device`: create the tensor on it, "
                           "torch.ones(size, size, dtype=torch.bool, device=device)")
    got = as_tensor(causal_mask(3, "meta"), "causal_mask(3, 'meta')")
    if got.device.type != "meta":
        raise CheckFailure("causal_mask(3, 'meta').device", "meta", str(got.device),
                           "the second positional argument is the device")
    got = as_tensor(causal_mask(3), "causal_mask(3)")
    if got.device.type != "cpu":
        raise CheckFailure("causal_mask(3).device", "cpu (device=None)", str(got.device),
                           "with device=None the tensor is made on the default device")


# ------------------------------------------------------------------------------------- target_mask
def _target(ids, pad_id=0):
    L = ids.size(1)
    return (ids != pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()[None, None]


def _target_mistakes(ids, pad_id=0):
    B, L = ids.shape
    real = ids != pad_id
    causal = torch.ones(L, L, dtype=torch.bool).tril()[None, None]
    keys, queries = real[:, None, None, :], real[:, None, :, None]
    return {
        "the padding part is missing: combine both, padding_mask(tgt_ids, pad_id) & causal_mask(L, device)":
            causal.expand(B, 1, L, L),
        "the causal part is missing: combine both, padding_mask(tgt_ids, pad_id) & causal_mask(L, device)":
            keys.expand(B, 1, L, L),
        # with right padding and the causal part, padding the queries alone or queries and keys give the same
        # mask
        "the padding is applied to the queries (rows): only the padded keys (columns) are hidden, and a "
        "padded query keeps its causal row; use padding_mask's (B, 1, 1, L), not (B, 1, L, "
        "1)": queries & causal,
        "the padding is applied to the queries (rows) as well as the keys: only the padded keys (columns) "
        "are hidden, and a padded query keeps its causal row": queries & keys & causal,
        "the pad_id argument is ignored (compared with 0 = PAD)": (ids != 0)[:, None, None, :] & causal,
        "or instead of and: the mask must be causal AND not padding": keys | causal,
        "^ (exclusive or) instead of &: it keeps a position where exactly one part is True; the mask must be "
        "causal AND not padding, padding_mask(tgt_ids, pad_id) & causal_mask(L, device)": keys ^ causal,
        "the causal part is missing, and the padding is applied to the queries (rows) as well as the keys: "
        "padding_mask(tgt_ids, pad_id) & causal_mask(L, device), padding on the keys (columns) only":
            (queries & keys).expand(B, 1, L, L),
        "the causal part is inverted (True above the diagonal)": keys & ~causal,
        "the causal part has no diagonal": keys & torch.ones(L, L, dtype=torch.bool).tril(-1)[None, None],
        "the causal part is transposed (True on and above the diagonal): tril, not triu":
            keys & torch.ones(L, L, dtype=torch.bool).triu()[None, None],
        "the padding part is inverted (True at <pad>): real tokens are ids != pad_id": ~keys & causal,
        GREATER: (ids > pad_id)[:, None, None, :] & causal,
    }


def _tgt_shapes(B, L):
    return {
        (B, B, 1, 1, L): "the masks were broadcast wrongly: padding (B, 1, 1, L) & causal (1, 1, L, L) -> "
                         "(B, 1, L, L)",
        (B, L, L): "the head dimension is missing: (B, 1, L, L)",
        (1, 1, L, L): "the padding part (one row per sentence) is missing: (B, 1, L, L)",
        (B, 1, 1, L): "the causal part is missing: padding (B, 1, 1, L) & causal (1, 1, L, L) -> (B, 1, L, "
                      "L)",
    }


TGT_SHAPES = _tgt_shapes(2, 5)


def _tgt_call(target_mask, ids, what, **kwargs):
    """target_mask(ids, **kwargs), a broadcasting error between its two parts explained."""
    try:
        return target_mask(ids, **kwargs)
    except RuntimeError as e:
        if "must match the size" not in str(e):
            raise
        raise CheckFailure(what, "a mask of shape (B, 1, L, L)", f"RuntimeError: {str(e)[:100]}",
                           "the padding part (B, 1, 1, L) and the causal part (1, 1, L, L) do not fit "
                           "together: both use L = tgt_ids.size(1), the length (not tgt_ids.size(0), the "
                           "batch size)") from None


@register("target_mask", "returns a bool tensor of shape (B, 1, L, L)")
def _tgt_shape(target_mask):
    raw = _tgt_call(target_mask, _ids(), "target_mask(ids of shape (2, 5))")
    try:
        got = _expect_shape(raw, (2, 1, 5, 5), "target_mask(ids of shape (2, 5))", TGT_SHAPES)
        _expect_bool(got, "target_mask(ids)")
    except CheckFailure:
        _blame_earlier_parts(target_mask, _ids(), raw)
        raise


@register("target_mask", "causal AND not padding (padded keys hidden, every query keeps its causal row)")
def _tgt_values(target_mask):
    ids = _ids()
    arg = ids.clone()
    raw = _tgt_call(target_mask, arg, "target_mask(ids of shape (2, 5))")
    try:
        got = _expect_shape(raw, (2, 1, 5, 5), "target_mask(ids of shape (2, 5))", TGT_SHAPES)
        _expect_mask(got, _target(ids), "target_mask([[5, 7, 9, 0, 0], [4, 8, 6, 3, 2]])",
                     "padding_mask(tgt_ids, pad_id) & causal_mask(L, tgt_ids.device)", _target_mistakes(ids))
    except CheckFailure:
        _blame_earlier_parts(target_mask, ids, raw)
        raise
    _expect_unchanged(arg, ids, "target_mask(ids)")


def _earlier(fn, name):
    """The learner's own earlier graded function `name` that fn calls: the one bound to that name in the
    notebook (fn's module globals in a lesson's check(); asked of the kernel by the graded name in the grade
    command's checker, _util.learners_own); None where there is none, or it is not a function of that name."""
    found = learners_own(name, fn)
    try:
        return found if callable(found) and getattr(found, "__name__", None) == name else None
    except CheckTimeout:
        raise
    except Exception:  # noqa: BLE001 (a proxy whose __name__ cannot be read)
        return None


def _blame_earlier_parts(target_mask, ids, got, pad_id=0):
    """A mistake paid once: target_mask is right when it is the composition of the learner's own padding_mask
    and causal_mask, and one of those is wrong. Then this check passes, and says which earlier function to
    fix."""
    pad_fn, causal_fn = _earlier(target_mask, "padding_mask"), _earlier(target_mask, "causal_mask")
    if pad_fn is None or causal_fn is None:
        return
    L = ids.size(1)
    try:
        pad, causal = pad_fn(ids.clone(), pad_id), causal_fn(L, ids.device)
        composed = (pad.detach().cpu() != 0) & (causal.detach().cpu() != 0)
        values = got.detach().cpu() != 0
    except Exception:  # noqa: BLE001 (parts that fail or do not combine: nothing to compare with)
        return
    if composed.shape != values.shape or not torch.equal(composed, values):
        return
    shapes = {name: tuple(part.shape) for name, part in (("padding_mask", pad), ("causal_mask", causal))}
    wrong = [name for name, part, right in (("causal_mask", causal, _causal(L)),
                                            ("padding_mask", pad, (ids != pad_id)[:, None, None, :]))
             if not (isinstance(part, torch.Tensor) and part.shape == right.shape
                     and torch.equal(part.detach().cpu() != 0, right))]
    if wrong:
        said = ", ".join(f"{name} gives shape {shapes[name]}" for name in wrong)
        raise CheckPassed("target_mask is padding_mask(...) & causal_mask(...) of your own functions, as it "
                          f"should be; the mask is wrong because your {' and '.join(wrong)} "
                          f"{'is' if len(wrong) == 1 else 'are'} ({said}): fix {' and '.join(wrong)} (its "
                          f"checks say how)")


@register("target_mask", "uses the pad_id argument")
def _tgt_pad_id(target_mask):
    ids = torch.tensor([[1, 0, 4, 7, 7, 7], [1, 5, 6, 2, 3, 7]])  # 7 plays <pad>; 0 is an ordinary token here
    raw = _tgt_call(target_mask, ids, "target_mask(ids of shape (2, 6), pad_id=7)", pad_id=7)
    try:
        got = _expect_shape(raw, (2, 1, 6, 6), "target_mask(ids of shape (2, 6), pad_id=7)",
                            _tgt_shapes(2, 6))
    except CheckFailure:
        _blame_earlier_parts(target_mask, ids, raw, pad_id=7)
        raise
    expected = _target(ids, 7)
    if _same_as_default_pad(target_mask, got, expected):
        # pad_id is passed on (these ids with 0 as <pad> give the same mask by default): the mask is wrong for
        return
        # another reason, which the check 'causal AND not padding' says, once
    _expect_mask(got, expected, "target_mask([[1, 0, 4, 7, 7, 7], [1, 5, 6, 2, 3, 7]], pad_id=7)",
                 "pass pad_id on to the padding part", _target_mistakes(ids, 7))


def _same_as_default_pad(target_mask, got, expected) -> bool:
    """Whether a wrong target_mask(ids, pad_id=7) is what the same ids with 0 and 7 swapped give with the
    default pad_id: then pad_id is used as <pad>, and the mask is wrong for another reason."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape or \
            torch.equal(got.detach().cpu() != 0, expected):
        return False
    # the pad_id check's ids, 0 and 7 swapped
    swapped = torch.tensor([[1, 7, 4, 0, 0, 0], [1, 5, 6, 2, 3, 0]])
    try:
        again = target_mask(swapped)
        return (isinstance(again, torch.Tensor) and got.shape == again.shape
                and torch.equal(got.detach().cpu() != 0, again.detach().cpu() != 0))
    except Exception:
        return False


DEVICE_HINT = ("make the causal part on the ids' device: causal_mask(L, tgt_ids.device) (on a GPU, a CPU "
               "mask combined with CUDA ids fails the same way)")


MOVED_TO_CPU = ("a .cpu() or .to('cpu') (of the result, or of a part of the mask) sends the mask to the "
                "CPU: on a GPU it comes back there and cannot meet the scores; leave it out, and return the "
                "tensor made with {made} as it is")


def _copied_off_meta(e: BaseException) -> bool:
    """Whether e is what .cpu(), .to('cpu') or .tolist() of a 'meta' tensor raises (there is no data to
    copy)."""
    return isinstance(e, NotImplementedError) and "copy out of meta" in str(e).lower()


def _reads_values(e: BaseException) -> bool:
    """Whether e says the code looked at the values of a 'meta' tensor, which has none."""
    text = str(e).lower()
    return ((isinstance(e, NotImplementedError) and "meta" in text)
            or (isinstance(e, RuntimeError) and "cannot be called on meta tensors" in text))


class _Elsewhere(torch.Tensor):
    """Ids whose values can be read (.tolist(), .item(), .cpu().numpy()) but which say they are on the device
    'meta': they play ids on a GPU for code that reads the values (a real 'meta' tensor has none). As on a
    GPU, .cpu() gives a plain CPU tensor and .numpy() refuses, so a mask built on the CPU and never moved back
    to the ids' device comes out as a plain CPU tensor."""

    @property
    def device(self):
        return torch.device("meta")

    @property
    # code that moves its mask with .cuda() when the ids are there: tried, then judged below
    def is_cuda(self):
        return True

    def cpu(self, *args, **kwargs):
        plain = self.as_subclass(torch.Tensor)
        # no values to copy: the copy says what was copied (it reaches the check as the result)
        if plain.is_meta:
            # the ids (or counts made from them): reading their values, as zeros
            if plain.dtype == torch.long:
                return torch.zeros(plain.shape, dtype=plain.dtype)
            # a mask or a part of it, made on the ids' device
            return torch.ones(plain.shape, dtype=plain.dtype)
        return plain.clone()

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        to_cpu = isinstance(target, (str, torch.device)) and str(target).startswith("cpu")
        if to_cpu and self.as_subclass(torch.Tensor).is_meta:
            return self.cpu()
        out = super().to(*args, **kwargs)
        if to_cpu:
            return out.as_subclass(torch.Tensor)
        return out

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                        "to host memory first.")


def _arg(name):
    return "tgt_ids" if name == "target_mask" else "ids"


NUMPY_HINT = ".numpy() fails the same way for ids on a GPU: stay with torch operations on the ids' device"


def _on_ids_device(fn, name, hint):
    """fn(ids) is a tensor on the ids' device, for ids on a device other than the CPU ('meta' plays a GPU):
    ids on 'meta'; for code that reads the values, ids that say they are on 'meta' (_Elsewhere); then CPU ids
    while tensors made without a device land on 'meta'."""
    what = f"{name}(ids on device 'meta')"
    try:
        # 'meta' stands in for 'cuda': a mask made on the CPU cannot be combined with it
        got = fn(_ids().to("meta"))
    except (NotImplementedError, RuntimeError, TypeError) as e:
        e_meta = e
        if not _reads_values(e):
            if isinstance(e, NotImplementedError):
                raise
            if isinstance(e, TypeError):
                if "numpy" not in str(e):
                    raise
                raise CheckFailure(what, "a mask on the device of the ids", f"TypeError: {str(e)[:100]}",
                                   NUMPY_HINT) from None
            raise CheckFailure(what, "a mask on the device of the ids", f"RuntimeError: {str(e)[:100]}",
                               DEVICE_HINT if name == "target_mask" else hint) from None
    else:
        got = as_tensor(got, what)
        if got.device.type != "meta":
            raise CheckFailure(f"{what}.device", "meta", str(got.device), hint)
        return
    if _copied_off_meta(e_meta):  # a copy to the CPU: reading the values, or a result moved there at the end
        _moved_to_cpu(fn, name)
    # the code reads the ids' values, which 'meta' tensors do not have
    what = f"{name}(ids whose values can be read but which are on another device than the CPU, as on a GPU)"
    try:
        got = fn(_ids().as_subclass(_Elsewhere))
    except CheckTimeout:
        raise
    except Exception as e:  # noqa: BLE001  (e.g. these ids mixed with tensors made on their device: judged below)
        if isinstance(e, TypeError) and "numpy" in str(e):
            raise CheckFailure(what, "a mask on the device of the ids", f"TypeError: {str(e)[:100]}",
                               NUMPY_HINT) from None
        got = None
    # a plain CPU tensor: made there, never moved
    if isinstance(got, torch.Tensor) and got.device.type == "cpu":
        raise CheckFailure(f"{what}: the mask's device", "the device of the ids", "cpu",
                           "the mask was built on the CPU (torch.tensor(...) or torch.ones(...) without "
                           "device=, torch.from_numpy, .cpu()) and never moved to the ids' device: with ids "
                           "on a GPU it cannot meet the scores there; create it with "
                           f"device={_arg(name)}.device, finish with .to({_arg(name)}.device), or {hint}")
    _by_default_device(fn, name)


def _moved_to_cpu(fn, name):
    """For code that copied a 'meta' tensor to the CPU: the same ids on 'meta' once more, with .cpu() and
    .to('cpu') giving a CPU tensor of the right shape: zeros for the ids (a copy to read their values), ones
    for anything else (a mask, or a part of it, made on the ids' device). A plain CPU result with no False in
    it is such a copy of a mask, moved off the device (a trailing .cpu()); a mask made from the copied ids is
    judged by the probes after this one. (What was copied is told by the values that come back, not by a
    record kept here: it holds when the learner's code runs in another process.)"""
    try:
        got = fn(_ids().to("meta").as_subclass(_Elsewhere))
    except CheckTimeout:
        raise
    except Exception:  # noqa: BLE001  (the values are read: .tolist(), .item(); judged by the probes that follow)
        return
    # a copy of a mask made on the device comes back all True (ones); one made from the ids' copy (zeros), not
    if isinstance(got, torch.Tensor) and type(got) is torch.Tensor and got.device.type == "cpu" and \
            got.numel() and bool((got != 0).all()):
        raise CheckFailure(f"{name}(ids on device 'meta'): the mask's device", "the device of the ids", "cpu",
                           MOVED_TO_CPU.format(made=f"device={_arg(name)}.device (or from {_arg(name)} "
                                                    "itself)"))


def _by_default_device(fn, name):
    """For code that reads the ids' values: CPU ids while tensors made without a device land on 'meta'
    (as, on a GPU, CUDA ids while they land on the CPU): the mask must still be on the ids' device."""
    ids = _ids()
    what = f"{name}(ids on the CPU, with torch.device('meta') as the default device)"
    default = ("a tensor made without device= lands on the default device, not the ids' one: pass "
               f"device={_arg(name)}.device (torch.ones, torch.tensor, torch.arange, causal_mask)")
    try:
        with torch.device("meta"):
            got = fn(ids)
    except (NotImplementedError, RuntimeError) as e:
        # e.g. a tensor made on the default device, then moved: fine on a GPU, untestable here
        if _reads_values(e):
            return
        if isinstance(e, NotImplementedError):
            raise
        raise CheckFailure(what, "a mask on the device of the ids (cpu)", f"{type(e).__name__}: "
                                                                          f"{str(e)[:100]}",
                           default) from None
    got = as_tensor(got, what)
    if got.device.type != "cpu":
        raise CheckFailure(f"{what}.device", "cpu (the ids' device)", str(got.device), default)


@register("target_mask", "is built on the device of tgt_ids")
def _tgt_device(target_mask):
    _on_ids_device(target_mask, "target_mask", "build the mask on tgt_ids.device: causal_mask(L, "
                                               "tgt_ids.device)")
