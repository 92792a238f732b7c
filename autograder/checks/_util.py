"""Small tools the checks share: reproducible inputs, comparisons that fail with a teaching message,
and diagnosis by matching the learner's output against known mistakes."""
from __future__ import annotations

import contextlib
import functools
import re

import torch
from torch import nn

from ..registry import REGISTRY, CheckFailure, CheckTimeout

# set by the grade command's checker: BUILD_ELSEWHERE(factory, args, kwargs) builds a learner_side object with
# the checker's own factory and hands it to the notebook's kernel (autograder/remote.py, Endpoint.build)
BUILD_ELSEWHERE = None
# set by the grade command's checker: FOLDER_ELSEWHERE() names a new folder that the notebook's kernel made
# for a path a check hands to the learner's code (learner_folder)
FOLDER_ELSEWHERE = None

# set by the grade command's checker: LOOKUP_ELSEWHERE(name) is the learner's object bound to `name` in the
# notebook's namespace, asked of the kernel (autograder/remote.py, Endpoint's "resolve"); `name` is always a
# graded name of the course that a check chose (learners_own), never one the kernel supplied
LOOKUP_ELSEWHERE = None

_REDUCTION = re.compile(r"\b(max|amax|sum|logsumexp|mean|var|std)\(([^()]*)\)")


def reduces_without_keepdim(line: str) -> bool:
    """Whether a line (core.failing_line) reduces without keeping the dimension, x.mean(-1) or x.sum(dim): the
    line that a "use keepdim=True" hint is about; a broadcasting error on any other line gets no such hint
    (its Likely comes from its shapes). keepdim given by name or as the last positional True (x.var(-1, False,
    True)) is kept."""
    for m in _REDUCTION.finditer(line):
        args = [a.strip() for a in m.group(2).split(",") if a.strip()]
        if not any(a.replace(" ", "") == "keepdim=True" for a in args) and not (len(args) >= 2 and
                                                                                args[-1] == "True"):
            return True
    return False


def learner_side(factory):
    """For a check's object whose parameters the learner's code must own (a model handed to make_optimizer):
    when `python -m autograder grade` runs the checks outside the notebook, the checker builds it with this
    factory (its own code, never the kernel's copy) and the notebook's kernel gets a module of PyTorch's own
    classes with those values, so that the learner's optimizer holds its real parameters; copy.deepcopy of it
    is the checker's own copy. In a lesson's own check() it is built right here. The factory must build
    PyTorch's own modules."""
    @functools.wraps(factory)
    def build(*args, **kwargs):
        if BUILD_ELSEWHERE is not None:
            return BUILD_ELSEWHERE(factory, args, kwargs)
        return factory(*args, **kwargs)
    return build


def learners_own(name: str, near=None):
    """The learner's object bound to the graded name `name` (an earlier graded function or class of the
    lesson, e.g. causal_mask beside target_mask), for a check that pays a mistake once: in a lesson's check(),
    from the module globals of `near` (the checked function, or a class's methods: the notebook's namespace);
    in the grade command's checker, asked of the notebook's kernel by that name (LOOKUP_ELSEWHERE): a proxy,
    or plain data. None where there is none, or where it cannot be read. `name` must be a graded name: the
    check chooses it, never the kernel."""
    if name not in REGISTRY:
        raise ValueError(f"{name!r} is not a graded name")
    if LOOKUP_ELSEWHERE is not None:
        try:
            return LOOKUP_ELSEWHERE(name)
        except CheckTimeout:
            raise
        except Exception:  # noqa: BLE001 (not defined in the notebook, or not handed over: nothing to compare with)
            return None
    functions = [near] if not isinstance(near, type) else [
        v for v in vars(near).values() if hasattr(v, "__globals__")]
    for fn in functions:
        found = getattr(fn, "__globals__", None)
        if isinstance(found, dict) and name in found:
            return found[name]
    return None


@contextlib.contextmanager
def learner_folder():
    """A folder for a path a check hands to the learner's code (a tokenizer's save and load): in a lesson's
    own check(), a temporary folder, removed afterwards; when `python -m autograder grade` runs the checks
    outside the notebook, a folder the notebook's kernel made in its own temporary folder, which the checker
    only names (it never opens, writes or removes anything there: the kernel can write it). A check that
    writes a file itself uses tempfile.mkdtemp, its own folder, not this one."""
    if FOLDER_ELSEWHERE is not None:
        yield FOLDER_ELSEWHERE()
        return
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        yield folder


@contextlib.contextmanager
def seeded(seed: int = 0):
    """A fixed seed inside the check, without disturbing the learner's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def fmt(x, digits: int = 4) -> str:
    """A short, readable rendering of a tensor, number or list for a message."""
    if isinstance(x, torch.Tensor):
        if x.numel() <= 8:
            vals = x.detach().float().flatten().tolist()
            return f"tensor{tuple(x.shape)} {[round(v, digits) for v in vals]}"
        return f"tensor of shape {tuple(x.shape)}"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    s = repr(x)
    return s if len(s) < 160 else s[:157] + "..."


def as_tensor(got, what: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(what, "a torch.Tensor", f"{type(got).__name__}",
                           "return the tensor itself (not a list, a numpy array or None)")
    return got


def expect_shape(got, shape, what: str, hint: str | None = None) -> torch.Tensor:
    got = as_tensor(got, what)
    if tuple(got.shape) != tuple(shape):
        raise CheckFailure(f"{what}: wrong shape", f"shape {tuple(shape)}", f"shape {tuple(got.shape)}", hint)
    return got


def close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> bool:
    return (isinstance(a, torch.Tensor) and a.shape == b.shape and bool(torch.isfinite(a).all())
            and torch.allclose(a.detach().double(), b.detach().double(), atol=atol, rtol=rtol))


SEVERAL_MISTAKES = "one of these mistakes (they give the same answer here): "


def matching_mistakes(got, mistakes, same, every: bool = False) -> list[str]:
    """Compare, then diagnose: the descriptions of the classic mistakes whose answer `got` is, in the table's
    order. `mistakes` maps a description to the wrong answer that mistake gives, or to a function computing it
    (called only when it is reached: costly answers are made for a wrong answer only); None (or a function
    returning None): the mistake does not apply here. `mistakes` itself may also be a function returning the
    table (called only here). `same(got, wrong)`: the comparison (==, close with tolerances, equal masks...).
    every=False: the first match alone (the table is read no further); every=True: each match (several can
    coincide on one small example)."""
    if callable(mistakes):
        mistakes = mistakes()
    found = []
    for description, wrong in (mistakes or {}).items():
        if callable(wrong):
            wrong = wrong()
        if wrong is not None and same(got, wrong):
            found.append(description)
            if not every:
                break
    return found


def diagnose(got, mistakes, same, every: bool = False) -> str | None:
    """The mistake `got` matches (see matching_mistakes), as a hint, or None. every=True: when several match,
    one hint names them all (SEVERAL_MISTAKES)."""
    found = matching_mistakes(got, mistakes, same, every)
    if len(found) > 1:
        return SEVERAL_MISTAKES + " | ".join(found)
    return found[0] if found else None


def expect_close(got, expected: torch.Tensor, what: str, hint: str | None = None, atol: float = 1e-4,
                 rtol: float = 1e-4, mistakes: dict[str, torch.Tensor] | None = None,
                 formula: str | None = None) -> None:
    """Fail unless got ≈ expected. `mistakes` maps a classic mistake's description to the output it would give
    (see matching_mistakes: lazily computed answers, or a function making the table, work too): when got
    matches one, the message names that mistake instead of the generic hint. `formula`: how the right values
    are made, said beside the expected value when no mistake matches (then no cause is guessed: a formula
    restated is not a likely cause)."""
    got = expect_shape(got, expected.shape, what, hint)
    if not torch.isfinite(got).all():
        bad = (~torch.isfinite(got)).sum().item()
        raise CheckFailure(f"{what}: {bad} values are NaN or inf", "finite values", fmt(got),
                           hint or "an overflow (exp of a large number) or 0/0 (a row with nothing to attend "
                                   "to)")
    if close(got, expected, atol, rtol):
        return
    named = diagnose(got, mistakes, lambda g, w: close(g, w, atol, rtol))
    if named is not None:
        hint = named
    if formula is not None and named is None:
        hint = None
    # a NaN difference (NaN in the expected values: e.g. the learner's code changed an input in place) counts
    # as the largest, so there is always an index to name
    diff = (got.detach().double() - expected.double()).abs().nan_to_num(nan=float("inf"))
    where = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0].tolist())
    raise CheckFailure(f"{what}: values differ (largest difference {diff.max().item():.3g} at index {where})",
                       fmt(expected.flatten()[diff.flatten().argmax()].item()) + " there"
                       + (f" ({formula})" if formula is not None and named is None else ""),
                       fmt(got.detach().flatten()[diff.flatten().argmax()].item()), hint)


def expect_raises(fn, exc_type, what: str, hint: str | None = None) -> None:
    try:
        fn()
    except exc_type:
        return
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001
        raise CheckFailure(what, f"{exc_type.__name__} with a message naming the problem",
                           f"{type(e).__name__}: {str(e)[:120]}", hint) from None
    raise CheckFailure(what, f"{exc_type.__name__} with a message naming the problem", "no error", hint)


def build(cls, *args, what: str, **kwargs):
    """Instantiate the learner's class; a TypeError about arguments says which signature is expected."""
    try:
        return cls(*args, **kwargs)
    except NotImplementedError:
        raise
    except TypeError as e:
        about_arguments = "argument" in str(e)
        raise CheckFailure(f"{what}: could not construct it", f"{cls.__name__}({_sig(args, kwargs)}) to work",
                           f"TypeError: {e}",
                           "keep the signature of the stub" if about_arguments else None) from None


def _sig(args, kwargs):
    return ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])


def as_module(obj, what: str):
    """The learner's object, which must be an nn.Module."""
    if not isinstance(obj, nn.Module):
        raise CheckFailure(what, "an nn.Module", type(obj).__name__, "subclass nn.Module and call "
                                                                     "super().__init__()")
    return obj


def expect_attr(module: nn.Module, name: str, kind, what: str) -> object:
    value = getattr(module, name, None)
    if value is None or (kind is not None and not isinstance(value, kind)):
        raise CheckFailure(f"{what}: attribute `{name}`", f"an {kind.__name__ if kind else 'attribute'} "
                                                          f"named {name}",
                           type(value).__name__ if value is not None else "no such attribute",
                           "use the contract's attribute names so weights can be copied to and from PyTorch")
    return value


LEFT_AUTOGRAD = ("the computation left autograd (numpy, .item() or .tolist(), .detach() or .data, "
                 "torch.no_grad(), or a new torch.tensor(...) built from computed values): the model is "
                 "trained through this code, so build the result from torch operations on the inputs")
IN_PLACE_BACKWARD = ("an in-place operation (e /= ..., x.exp_(), out[...] = ... on a tensor autograd still "
                     "needs) broke backward(): write e = e / ... (a new tensor)")


def expect_grads(got_fn, ref_fn, leaves: dict[str, tuple[torch.Tensor, torch.Tensor]], what: str,
                 hint: str = LEFT_AUTOGRAD, mistakes: dict[str, dict[str, torch.Tensor]] | None = None,
                 seed: int = 1234) -> None:
    """The learner's computation passes the same gradients back as the reference's: got_fn() and ref_fn()
    compute outputs of the same shape from the leaves (name -> (the learner's leaf, the reference's leaf),
    each requiring grad); both backpropagate (out * r).sum() for one fixed random r, and every leaf's
    gradient must match. `mistakes` maps a description to the gradients that mistake gives, by leaf name."""
    try:
        out = got_fn()
    except RuntimeError as e:
        if "requires grad" not in str(e):  # numpy() and friends refuse a tensor in the graph
            raise
        raise CheckFailure(f"{what} with inputs that require grad", "a result autograd can differentiate",
                           f"RuntimeError: {str(e)[:110]}", hint) from None
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise CheckFailure(f"{what}: the output's requires_grad", "True: gradients flow back to the inputs",
                           "False",
                           hint)
    ref = ref_fn()
    if out.shape != ref.shape:
        raise CheckFailure(f"{what}: wrong shape", f"shape {tuple(ref.shape)}", f"shape {tuple(out.shape)}")
    r = torch.randn(ref.shape, generator=torch.Generator().manual_seed(seed), dtype=ref.dtype)
    try:
        (out * r.to(out.dtype)).sum().backward()
    except RuntimeError as e:
        if "inplace" not in str(e) and "in-place" not in str(e):
            raise
        raise CheckFailure(f"{what}: backward()", "gradients", f"RuntimeError: {str(e)[:110]}",
                           IN_PLACE_BACKWARD) from None
    (ref * r).sum().backward()
    for name, (mine, theirs) in leaves.items():
        if theirs.grad is None:
            continue
        where = f"the gradient of {what} with respect to {name}"
        if mine.grad is None:
            raise CheckFailure(where, "a tensor (the output depends on it)", "None", hint)
        wrong = {d: g[name] for d, g in (mistakes or {}).items() if name in g}
        expect_close(mine.grad, theirs.grad, where, hint=hint, mistakes=wrong)


# ------------------------------------------------------------------------------------------------ dropout
# the tests dropout's checks share: a module called again on the same input in eval mode (no dropout) or in
# train mode at p = 1 (everything dropped) gives the same output; train mode survives a call
NO_DROPOUT_IN_EVAL = "the same output (no dropout in eval mode)"
DROPOUT_IN_EVAL = ("dropout still acts in eval mode: use an nn.Dropout module (off after .eval()), "
                   "not F.dropout(..., training=True)")
DROPOUT_FIXED_RATE = ("the dropout argument is not used (a fixed rate such as 0.1?): "
                      "self.dropout = nn.Dropout(dropout)")


def expect_same_again(first, again, what: str, expected: str, hint, equal_nan: bool = False) -> None:
    """Two calls of a module on the same input, where no dropout may make them differ, give the same output.
    `hint`: the hint, or a function making it (called only when they differ)."""
    if not torch.allclose(first, again, equal_nan=equal_nan):
        raise CheckFailure(f"{what}, called twice", expected, "two different outputs",
                           hint() if callable(hint) else hint)


def expect_no_dropout_in_eval(first, second, what: str, hint=DROPOUT_IN_EVAL) -> None:
    """Two calls in eval mode (outputs of one shape: another shape is the other checks' business) agree."""
    if first.shape == second.shape:
        expect_same_again(first, second, what, NO_DROPOUT_IN_EVAL, hint)


def expect_all_dropped(got, expected: torch.Tensor, rerun, seed: int, what: str, drops: str,
                       equal_nan: bool = False) -> None:
    """Train mode with dropout=1.0 drops every `drops` (weight, hidden unit, value), so the output is
    `expected` at every call: when got is another output of its shape, a second call, rerun() under `seed`,
    that differs from it shows a dropout whose rate is not the argument. A reproducible wrong output is left
    to the caller's diagnosis."""
    if not close(got, expected) and isinstance(got, torch.Tensor) and got.shape == expected.shape:
        with seeded(seed):
            again = rerun()
        expect_same_again(got, again, what, f"the same output (p=1 drops every {drops})", DROPOUT_FIXED_RATE,
                          equal_nan)


def expect_still_training(module: nn.Module, what: str, noun: str) -> None:
    """After a call in train mode, the module and all its parts are still in train mode (forward leaves the
    mode to the caller). `noun`: what the hint calls it (the module, the model)."""
    if not all(part.training for part in module.modules()):
        raise CheckFailure(f"{what}.train(), after a call", "still in train mode", "switched to eval mode",
                           f"forward calls .eval() (or .train(False)) on the {noun} or one of its parts: "
                           "dropout would never be active in training; leave the mode to the caller")
