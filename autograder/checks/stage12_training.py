"""Stage 12: training utilities. Teacher forcing's shift, batches with their masks, batching by tokens,
the warmup schedule and the paper's Adam, against values and masks written out in the checks, the
formula of the paper, and torch.optim.Adam itself, with the classic mistakes named. This module holds what the
stage's checks share; each graded name's checks are in a module of its own (stage12_shift_right.py, ...)."""
from __future__ import annotations

import torch

from ..registry import CheckFailure
from ._util import diagnose, fmt

PAD, BOS, EOS = 0, 1, 2


# ------------------------------------------------------------------------------------------ helpers
def _ids(t) -> str:
    return fmt(t.tolist()) if isinstance(t, torch.Tensor) else fmt(t)


REORDERED = ("the rows were reordered (sorted by length?): row i holds the i-th example, in the order given; "
             "batch_by_tokens groups examples of similar length, make_batch keeps their order (tgt_seqs[i] "
             "belongs to src_seqs[i])")


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


def _expect_mask(got, expected: torch.Tensor, what: str, hint: str,
                 mistakes: dict[str, torch.Tensor]) -> None:
    """A boolean mask that broadcasts to expected's full shape (B, 1, Lq, Lk) and equals it there."""
    full = tuple(expected.shape)
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(what, f"a bool tensor broadcasting to {full}", type(got).__name__, hint)
    shape = tuple(got.shape)
    if not (len(shape) == 4 and all(s in (1, f) for s, f in zip(shape, full))):
        raise CheckFailure(f"{what}: wrong shape", f"shape {full} (or one that broadcasts to it)",
                           f"shape {tuple(got.shape)}",
                           "masks have 4 dimensions (batch, heads, queries, keys) so that they broadcast "
                           "over the heads: padding_mask is (B, 1, 1, L), target_mask (B, 1, L, "
                           "L)" if len(shape) != 4 else
                           f"4 dimensions, but the sizes do not fit this batch: {hint}")
    values = got.expand(full)
    if got.dtype != torch.bool:
        same = torch.equal(values.ne(0), expected)
        raise CheckFailure(f"{what}: dtype", "torch.bool (True = may attend)", str(got.dtype),
                           "a 0/1 number mask: compare with != pad_id, which gives a bool "
                           "tensor" if same else hint)
    if torch.equal(values, expected):
        return
    hint = diagnose(values, mistakes, lambda v, wrong: torch.equal(v, wrong.expand(full))) or hint
    raise CheckFailure(what, f"{full}, True at {int(expected.sum())} places",
                       f"True at {int(values.sum())} places",
                       hint)


# --------------------------------------------------------- the schedule (noam_lr's and make_optimizer's)
def _noam(step, d_model, warmup_steps=4000, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


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
        "no warmup: the rate starts at its largest and only decays; the warmup term is step * warmup_steps "
        "** -1.5 (a negative exponent), and the rate is the min of the two terms": f * d ** -0.5 * s ** -0.5,
        "the rate never decays: after warmup_steps it follows step ** -0.5 (a negative exponent), the min of "
        "the two terms": f * d ** -0.5 * s * w ** -1.5,
        "divided by factor: multiply by it": d ** -0.5 * min(s ** -0.5, s * w ** -1.5) / f,
        "d_model and warmup_steps swapped": f * w ** -0.5 * min(s ** -0.5, s * d ** -1.5),
        "the warmup term is step / warmup_steps: it is step * warmup_steps ** -1.5": f * d ** -0.5 * min(
            s ** -0.5, s / w),
        "the rate stays at its peak after warmup_steps (min(step, warmup_steps) * warmup_steps ** -1.5): "
        "after the warmup it decays as step ** -0.5, the min of the two "
        "terms": f * d ** -0.5 * min(s, w) * w ** -1.5,
        "factor multiplies only the decay term: it multiplies the whole rate":
            d ** -0.5 * min(f * s ** -0.5, s * w ** -1.5),
        "factor multiplies only the warmup term: it multiplies the whole rate":
            d ** -0.5 * min(s ** -0.5, f * s * w ** -1.5),
    }
