"""Stage 12's checks of noam_lr: the paper's warmup schedule, a Python float, with the classic mistakes
named."""
from __future__ import annotations

import math

import torch

from ..registry import CheckFailure, register
from ._util import fmt
from .stage12_training import _noam, _noam_mistakes


def _number(x, what):
    try:
        if isinstance(x, (str, bytes)):
            raise TypeError("a string is not a number")
        item = getattr(x, "item", None)  # torch.Tensor, numpy arrays and scalars (one element: a number)
        return float(item() if callable(item) and not isinstance(x, (int, float)) else x)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailure(what, "a number", fmt(x), "return the learning rate as a float") from None


ZERO_RATE = ("the warmup term rounds down to 0, as an integer division does (step // warmup_steps, or "
             "int(...)): use true division (/) or powers, step * warmup_steps ** -1.5")


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
        raise CheckFailure("type(noam_lr(4000, 512))", "float (a Python float: LambdaLR multiplies lr=1.0 by "
                                                       "it, and the optimizer's lr, the logs and the "
                                                       "checkpoints keep it)", kind,
                           f"the rate stayed a {kind} (computed with torch or numpy): return float(rate), or "
                           "compute with Python numbers, step ** -0.5")


@register("noam_lr", "rises linearly until warmup_steps, then decays as step^-0.5")
def _noam_shape(noam_lr):
    lr = [_number(noam_lr(s, 64, warmup_steps=10),
                  f"noam_lr({s}, 64, warmup_steps=10)") for s in range(1, 41)]
    peak = max(range(40), key=lambda i: lr[i]) + 1
    if peak != 10:
        raise CheckFailure("the step of the largest noam_lr(step, 64, warmup_steps=10) over steps 1..40",
                           "step 10",
                           f"step {peak}", _noam_hint(noam_lr, 64, 10))
    if not (math.isclose(lr[4] / lr[9], 0.5,
                         rel_tol=1e-6) and math.isclose(lr[39] / lr[9], 0.5, rel_tol=1e-6)):
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
                           "0 ** -0.5 divides by zero: count step 0 as step 1 (step = max(step, 1)); "
                           "LambdaLR calls the schedule with 0 when it is created") from None
    got = _number(got, "noam_lr(0, 512)")
    if not math.isclose(got, _noam(1, 512), rel_tol=1e-6):
        one = _number(noam_lr(1, 512), "noam_lr(1, 512)")
        hint = ("step 0 gave infinity: count step 0 as step 1 (step = max(step, 1))" if not math.isfinite(got)
                else "step 0 is counted as step 1, but the formula itself gives 0 at step 1 (noam_lr(1, 512) "
                     "is 0 "
                "too): " + ZERO_RATE if got == 0 and one == 0
                else "step 0 gave 0: count it as step 1 (step = max(step, 1)), as the contract "
                     "says" if got == 0
                else "step 0 is counted as step 1, but the formula itself is wrong at step 1: see the other "
                     "checks"
                if math.isclose(got, one, rel_tol=1e-9) else "count step 0 as step 1 (step = max(step, 1))")
        raise CheckFailure("noam_lr(0, 512)", f"noam_lr(1, 512) = {_noam(1, 512):.6g}", f"{got:.6g}", hint)
    _expect_lr(noam_lr, 1, 512)
