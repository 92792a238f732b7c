"""Stage 12's checks of make_optimizer: the paper's Adam over all the parameters, stepping at noam_lr(k)."""
from __future__ import annotations

import copy
import math

import torch
from torch import nn

from ..registry import CheckFailure, register
from ._util import fmt, learner_side, seeded
from .stage12_training import _noam, _noam_mistakes


@learner_side
def _tiny_model(seed=0):
    with seeded(seed):
        return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def _groups(opt) -> list:
    """opt.param_groups as data, checked: a list of 1 to 64 dicts with string keys, each with its "params" (a
    list of tensors) and a number or one-value tensor "lr" (with `python -m autograder grade` the optimizer is
    the kernel's: what it says about itself is checked before a check reads it)."""
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
                           "LambdaLR calls its lambda with 0 as soon as it is created: 0 ** -0.5 divides by "
                           "zero. Count step 0 as step 1, or shift: lambda s: noam_lr(s + 1, ...)") from None
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
    """`elsewhere`: the scheduler drives another optimizer than the one returned; `base_lr`: the optimizer's
    lr that the scheduler multiplies (None: unknown)."""
    n = len(got)
    expected = [_noam(k, d, w, f) for k in range(1, n + 1)]
    if all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, expected)):
        return
    k = next(i for i, (a, b) in enumerate(zip(got, expected)) if not math.isclose(a, b, rel_tol=1e-6)) + 1
    same = lambda seq: all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, seq))  # noqa: E731
    ratio = got[k - 1] / expected[k - 1] if expected[k - 1] else float("nan")
    if same([_noam(k - 1, d, w, f) for k in range(1, n + 1)]):
        hint = ("off by one: the k-th step ran at noam_lr(k - 1). LambdaLR evaluates lambda(0) before the "
                "first step, then lambda(1) after one scheduler step, ...: use lambda s: noam_lr(s + 1, ...)")
    elif same([_noam(k + 1, d, w, f) for k in range(1, n + 1)]):
        hint = ("off by one: the k-th step ran at noam_lr(k + 1); the first optimizer step must run at "
                "noam_lr(1) (do not step the scheduler before the first optimizer step, e.g. right after "
                "creating it)")
    elif same([_noam(k, d, 4000, f) for k in range(1, n + 1)]):
        hint = "the warmup_steps argument is ignored (4000 used)"
    elif same([_noam(k, d, w, 1.0) for k in range(1, n + 1)]):
        hint = "the factor argument is ignored"
    elif same([_noam(k, 512, w, f) for k in range(1, n + 1)]):
        hint = "the d_model argument is ignored (512 used)"
    elif same([_noam(k, 512, w, 1.0) for k in range(1, n + 1)]):
        hint = "the d_model and factor arguments are ignored (512 and 1.0 used): pass them on to noam_lr"
    elif same([_noam(k, 512, 4000, 1.0) for k in range(1, n + 1)]):
        hint = ("the d_model, warmup_steps and factor arguments are ignored (noam_lr's defaults or 512 "
                "used): pass them on: lambda s: noam_lr(s + 1, d_model, warmup_steps, factor)")
    elif elsewhere:
        hint = ("the scheduler was made for another optimizer than the one returned: create the LambdaLR on "
                "the Adam you return (one optimizer)")
    elif any(same(seq) for seq in _schedule_mistakes(d, w, f, n).values()):
        hint = "the schedule: " + "; or ".join(desc for desc, seq in _schedule_mistakes(d, w, f, n).items()
                                               if same(seq))
    elif all(math.isclose(a / b, ratio, rel_tol=1e-6) for a, b in zip(got, expected) if b):
        hint = (f"every rate is {ratio:.4g} x the schedule: LambdaLR multiplies the optimizer's lr by the "
                "lambda, so create Adam with lr=1.0" if base_lr is not None and
                not math.isclose(base_lr, 1.0) else
                f"every rate is {ratio:.4g} x the schedule, though the warmup is right: the constant factor "
                "factor * d_model ** -0.5 is off, so the d_model or factor argument looks ignored or "
                "replaced; pass both on: lambda s: noam_lr(s + 1, d_model, warmup_steps, factor)")
    elif len(set(got)) == 1:
        hint = "the rate never changes: step the scheduler (scheduler.step()) after each optimizer step"
    else:
        hint = ("LambdaLR(optimizer, lambda s: noam_lr(s + 1, d_model, warmup_steps, factor)) with Adam's "
                "lr=1.0")
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


# A process's first torch.optim.Adam imports PyTorch's compiler stack (torch._dynamo): 2 s on a quiet 2-core
# machine, and past the 10 s of a check when the machine is busy (seen grading lesson 12 beside a training
# run). The check that makes the learner's first Adam and the one that makes the grader's own get 30 s; a hang
# still stops there.
FIRST_ADAM_TIMEOUT = 30.0


@register("make_optimizer", "returns (Adam, scheduler) over all the model's parameters",
          timeout=FIRST_ADAM_TIMEOUT)
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
        raise CheckFailure(what + ": amsgrad", "False (plain Adam)", "True",
                           "the paper uses plain Adam: amsgrad=False")


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
    _expect_schedule(_lrs(opt, sched, model, 30), 64, 10, 2.0, what, _elsewhere(opt, sched),
                     _base_lr(opt, sched))


@register("make_optimizer", "follows d_model, warmup_steps and factor")
def _opt_args(make_optimizer):
    # 3 * 128 ** -0.5 is neither 512 ** -0.5, 128 ** -0.5 nor 3 * 512 ** -0.5 (d_model or factor ignored)
    for d, w, f in ((128, 4, 3.0), (32, 20, 1.0)):
        model = _tiny_model(1)
        opt, sched, what = _make_opt(make_optimizer, model, d, w=w, f=f)
        _expect_schedule(_lrs(opt, sched, model, 25), d, w, f, what, _elsewhere(opt, sched),
                         _base_lr(opt, sched))


@register("make_optimizer", "moves the parameters as Adam at that learning rate would",
          timeout=FIRST_ADAM_TIMEOUT)
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
                               "the same values as torch.optim.Adam(lr=noam_lr(k), betas=(0.9, 0.98), "
                               "eps=1e-9)",
                               "other values",
                               "the scheduler was made for another optimizer than the one returned: create "
                               "the LambdaLR on the Adam you return" if _elsewhere(opt, sched) else
                               "Adam over model.parameters() with lr=1.0, betas=(0.9, 0.98), "
                               "eps=1e-9, and LambdaLR(optimizer, lambda s: noam_lr(s + 1, ...))")
