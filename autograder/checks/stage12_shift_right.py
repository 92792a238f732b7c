"""Stage 12's checks of shift_right: <bos> in front, the last token dropped, the input left unchanged."""
from __future__ import annotations

import torch

from ..registry import CheckFailure, register
from ._util import seeded
from .stage12_training import BOS, EOS, PAD, _expect_ids, _ids

UNSHIFTED = ("the input came back unshifted: the decoder must read <bos> y_1 ... y_{L-1} to predict y_1 ... "
             "y_L (teacher forcing); put <bos> in front and drop the last column")
ROLLED = ("rolled: torch.roll wraps the last token around to the front; put <bos> there instead: "
          "torch.cat([bos column, tgt[:, :-1]], dim=1)")
DROPPED_FIRST = "the first column was dropped instead of the last: keep tgt[:, :-1], not tgt[:, 1:]"
SHIFTED_LEFT = "shifted left instead of right: <bos> goes in front and the last column is dropped"
KEPT_LAST = "the last column was kept: the output keeps the input's length L, so drop tgt[:, -1]"
EOS_TO_PAD = ("the <eos> was replaced by <pad>: shift_right only shifts (<bos> in front, last column "
              "dropped) and keeps every other token as it is")
PAD_IN_FRONT = "<pad> was put in front: the first column is bos_id (<bos>), not pad_id"
BATCH_AXIS = ("shifted along dim 0 (the batch) instead of dim 1 (the positions): a column of bos_id in "
              "front, tgt[:, :-1] after it, torch.cat(..., dim=1)")
SQUEEZED = ("the batch dimension was lost for a batch of one sentence (B = 1): no .squeeze() (it drops every "
            "size-1 dimension); keep (B, L) -> (B, L), e.g. torch.cat([bos column, tgt[:, :-1]], dim=1)")
SQUEEZED_L = ("the length dimension was lost for sentences of one token (L = 1): no .squeeze() (it drops "
              "every size-1 dimension); keep (B, L) -> (B, L), e.g. torch.cat([bos column, tgt[:, :-1]], "
              "dim=1)")
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
    got = shift_right(one.clone())
    squeezed = isinstance(got, torch.Tensor) and got.dim() < 2 and got.numel() == 2 and \
        bool((got.flatten() == BOS).all())  # the right values, a dimension lost: a .squeeze()
    _expect_ids(got, torch.tensor([[1], [1]]), "shift_right([[5], [6]])",
                SQUEEZED_L if squeezed else "with L = 1 only <bos> remains: tgt[:, :-1] is empty",
                _shift_mistakes(one))


@register("shift_right", "leaves its input unchanged (no in-place edit)")
def _shift_in_place(shift_right):
    tgt = torch.tensor([[5, 6, 2], [7, 2, 0]])
    before = tgt.clone()
    shift_right(tgt)
    if not torch.equal(tgt, before):
        raise CheckFailure("the tensor passed to shift_right", f"unchanged: {_ids(before)}",
                           f"changed to {_ids(tgt)}",
                           "the input was edited in place (tgt[:, 1:] = ... or tgt[:, 0] = ...); build a new "
                           "tensor with torch.cat, or work on tgt.clone()")
