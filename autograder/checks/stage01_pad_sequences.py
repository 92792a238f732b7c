"""Stage 01's checks of pad_sequences: right-padding into a (batch, max_len) tensor of torch.long ids."""
from __future__ import annotations

import torch

from ..registry import CheckFailure, register
from ._util import diagnose, expect_shape, fmt


def _pad_check(pad_sequences, seqs, pad_id, what, mistakes_extra=None):
    given = [list(s) for s in seqs]
    got = pad_sequences(given) if pad_id is None else pad_sequences(given, pad_id=pad_id)
    if given != [list(s) for s in seqs]:
        raise CheckFailure(f"{what}: the lists passed in", f"unchanged, {[list(s) for s in seqs]}",
                           fmt(given),
                           "build new rows (s + [pad_id] * (max_len - len(s))) instead of extending the "
                           "learner's lists in place")
    p = 0 if pad_id is None else pad_id
    width = max(len(s) for s in seqs)
    expected = torch.tensor([list(s) + [p] * (width - len(s)) for s in seqs], dtype=torch.long)
    left = torch.tensor([[p] * (width - len(s)) + list(s) for s in seqs], dtype=torch.long)
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(what, "a torch.LongTensor", f"{type(got).__name__} {fmt(got)}",
                           "build the result with torch.full((batch, max_len), pad_id, dtype=torch.long)")
    if tuple(got.shape) == (width, len(seqs)) != tuple(expected.shape):
        raise CheckFailure(f"{what}: wrong shape", f"shape {tuple(expected.shape)} (batch, max_len)",
                           f"shape {tuple(got.shape)}", "transposed, (max_len, batch): one ROW per sequence "
                           "(nn.utils.rnn.pad_sequence needs batch_first=True)")
    expect_shape(got, expected.shape, what, "shape (number of sequences, length of the LONGEST one)")
    if got.dtype != torch.long:
        hint = ("token ids must be torch.long (nn.Embedding needs integer ids): torch.full(..., "
                "dtype=torch.long)"
                if got.dtype.is_floating_point else "use dtype=torch.long (int64)")
        raise CheckFailure(f"{what}: dtype", "torch.int64 (torch.long)", str(got.dtype), hint)
    if torch.equal(got, expected):
        return
    mistakes = {"left-padded: pad on the right, after each sequence's tokens": left}
    if p != 0:
        mistakes["pad_id ignored: fill with pad_id, not 0"] = torch.tensor(
            [list(s) + [0] * (width - len(s)) for s in seqs], dtype=torch.long)
    mistakes.update(mistakes_extra or {})
    if sorted(got.tolist()) == sorted(expected.tolist()) and not torch.equal(got, expected):
        mistakes["the rows were reordered (sorted by length?): row i holds seqs[i], in the order given"] = got
    real = torch.tensor([[j < len(s) for j in range(width)] for s in seqs])
    fill = got[~real].unique()
    if torch.equal(got[real], expected[real]) and fill.numel() == 1:
        mistakes[f"padded with {fill.item()} instead of pad_id" +
                 (" (its default is PAD = 0)" if pad_id is None else
                                                                   f" = {p}")] = got
    hint = diagnose(got, mistakes, torch.equal) or "copy each sequence to the start of its row"
    raise CheckFailure(what, str(expected.tolist()), str(got.tolist()), hint)


@register("pad_sequences", "right-pads with 0 into a (batch, max_len) tensor (the docstring example)")
def _pad_example(pad_sequences):
    _pad_check(pad_sequences, [[5, 6, 7], [8]], None, "pad_sequences([[5, 6, 7], [8]])")


@register("pad_sequences", "returns torch.long ids")
def _pad_dtype(pad_sequences):
    got = pad_sequences([[1, 2], [3]])
    if isinstance(got, torch.Tensor) and got.dtype != torch.long:
        raise CheckFailure("pad_sequences([[1, 2], [3]]).dtype", "torch.int64 (torch.long)", str(got.dtype),
                           "token ids must be torch.long (nn.Embedding needs integer ids): build it with "
                           "torch.full(..., dtype=torch.long)" if got.dtype.is_floating_point else
                           "use dtype=torch.long")
    _pad_check(pad_sequences, [[1, 2], [3]], None, "pad_sequences([[1, 2], [3]])")


@register("pad_sequences", "fills with pad_id")
def _pad_id(pad_sequences):
    _pad_check(pad_sequences, [[5, 6, 7], [8], [9, 4]], 9,
               "pad_sequences([[5, 6, 7], [8], [9, 4]], pad_id=9)")
    _pad_check(pad_sequences, [[5, 6], [7]], 1, "pad_sequences([[5, 6], [7]], pad_id=1)")


@register("pad_sequences", "pads to the longest sequence wherever it is; equal lengths need no padding; an "
                           "empty batch is refused (an error, not a tensor)")
def _pad_longest(pad_sequences):
    _pad_check(pad_sequences, [[1], [2, 3, 4], [5, 6]], None, "pad_sequences([[1], [2, 3, 4], [5, 6]])")
    _pad_check(pad_sequences, [[1, 2], [3, 4]], None, "pad_sequences([[1, 2], [3, 4]])")
    _pad_check(pad_sequences, [[7, 8, 9]], None, "pad_sequences([[7, 8, 9]])")
    # the contract's empty input: no batch has no width, so a clear ValueError (the stub's given lines raise
    # it)
    hint = ("keep the stub's given check at the top, `if not seqs: raise ValueError(...)`: a batch of no "
            "sequences has no length to pad to, and an empty tensor would fail later, far from the cause")
    try:
        got = pad_sequences([])
    except Exception:  # noqa: BLE001 (refused: the stub's ValueError, or a library's own error for no sequences)
        return
    raise CheckFailure("pad_sequences([])", "an error (an empty batch), the stub's ValueError",
                       f"{type(got).__name__} {fmt(got)}", hint)
