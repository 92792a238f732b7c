"""What the notebook's kernel may ask of the grader across the channel, and what the grader makes of its
answers: the allow-lists that autograder/GRADING.md audits, and the checks that apply them.

The grader's side (the trusted endpoint of autograder/remote.py) serves only the requests in SERVED; on its
objects the kernel may call the object itself where the grader handed it out as callable, or a module, and the
methods in ALLOWED_METHODS, and read public attributes and those in ALLOWED_PRIVATE; it gets no module and
tensors only as copies. Of what the kernel answers, the grader rebuilds only builtin exceptions by name
(EXCEPTIONS; any other is a RemoteError), a tensor of a class of the checks only where the check sent one of
that class in the same call, and gives each call's gradients once, of its outputs' shapes. The kernel's side
serves every request of the grader. The limits on a message's size are the wire's (autograder/remote_wire.py:
TRUSTED_HEAD, TRUSTED_MESSAGE, TRUSTED_NODES), on its nesting and values the codec's
(autograder/remote_codec.py).
"""
from __future__ import annotations

import sys
import types

import torch

# the requests the grader's side serves (a tuple: the request's name is any JSON value the kernel sent)
SERVED = ("call", "getattr", "backward", "len", "iter", "getitem", "repr", "value", "contains", "dir")
# what the learner's side may call on the grader's objects, besides calling the object itself
ALLOWED_METHODS = {"forward", "encode", "decode", "train", "eval", "parameters", "named_parameters",
                   "buffers",
                   "named_buffers", "modules", "named_modules", "children", "named_children", "state_dict",
                   "extra_repr", "size", "dim", "numel", "items", "keys", "values", "get"}
# the private attributes of the grader's objects the learner's side may read (a module's parts, a function's
# name)
ALLOWED_PRIVATE = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "__name__",
                   "__qualname__", "__module__", "__doc__"}
# builtin exceptions rebuilt by name on the grader's side (anything else becomes RemoteError)
EXCEPTIONS = {e.__name__: e for e in (
    ValueError, TypeError, RuntimeError, IndexError, KeyError, AttributeError, NotImplementedError, NameError,
    ZeroDivisionError, AssertionError, RecursionError, MemoryError, OverflowError, ArithmeticError,
    LookupError,
    FileNotFoundError, OSError, UnicodeError, UnicodeDecodeError, UnicodeEncodeError, ImportError,
    ModuleNotFoundError, UnboundLocalError, FloatingPointError, IsADirectoryError, PermissionError)}
# the modules whose tensor classes may cross by name (stage 05's ids "on another device")
CHECKS = "autograder.checks."


class RemoteError(Exception):
    """An exception of the learner's code that is not a builtin exception class."""


# ------------------------------------------------------------------ what the kernel may ask of the grader
def check_request(op) -> None:
    """A request the grader's side serves, else PermissionError."""
    if op not in SERVED:
        raise PermissionError(f"the grader does not serve {str(op)[:30]!r}")


def check_attribute(name: str) -> None:
    """An attribute of the grader's objects the kernel may read or name: a public one, or one of
    ALLOWED_PRIVATE."""
    if name.startswith("_") and name not in ALLOWED_PRIVATE:
        raise AttributeError(f"the grader's objects do not show {name!r}")


def check_bound_method(obj, name: str, value) -> None:
    """A method of the grader's object `obj` read as an attribute: only those of ALLOWED_METHODS."""
    if getattr(value, "__self__", None) is obj and name not in ALLOWED_METHODS:
        raise AttributeError(f"the grader's objects do not let you call {name!r}")


def check_method(method) -> None:
    """A method the kernel asks to call on the grader's object: one of ALLOWED_METHODS."""
    if not isinstance(method, str) or method not in ALLOWED_METHODS:
        raise PermissionError(f"the grader's objects do not let you call {str(method)[:30]!r}")


def check_callable(obj, handle, callable_ok: set) -> None:
    """The grader's object itself, called by the kernel: a module, or one handed out as callable."""
    if handle not in callable_ok and not isinstance(obj, torch.nn.Module):
        raise PermissionError("the grader's object may not be called")


def check_handed_out(value) -> None:
    """What the grader hands out as a handle: never a module of Python's."""
    if isinstance(value, types.ModuleType):
        raise TypeError("the grader does not hand out modules")


def shown(names: list) -> list:
    """The names of dir() on the grader's object that the kernel sees: the public ones."""
    return [n for n in names if not n.startswith("_")]


def check_backward(record, answered: set) -> None:
    """A backward request for a call the grader answered: once per call (no pumping gradients into its
    modules)."""
    if record in answered:
        raise RuntimeError("the gradients of this call were already computed")
    answered.add(record)


def check_gradients(pairs: list) -> None:
    """(output, gradient) pairs of a backward request, on either side: each gradient of its output's shape,
    floating."""
    if any(tuple(g.shape) != tuple(o.shape) or not (g.is_floating_point() or g.is_complex()) for o, g
           in pairs):
        raise ValueError("gradients that do not have their outputs' shapes")


# ------------------------------------------------------------------ what the grader makes of the kernel's
# answers
def answer_classes(sent: list) -> tuple:
    """The tensor classes a tensor of the answer to a call may be rebuilt as, on the grader's side: the
    checks' own classes among the tensors `sent` in that call."""
    return tuple({type(t) for t in sent if type(t) is not torch.Tensor and
                  (type(t).__module__ or "").startswith(CHECKS)})


def tensor_class(sub, trusted: bool, allowed: tuple):
    """The class a tensor tagged `sub` ([module, qualname]) is rebuilt as, or None for a plain tensor: on the
    grader's side one of `allowed` (answer_classes), on the kernel's a class of the checks."""
    if not (isinstance(sub, list) and len(sub) == 2):
        return None
    if trusted:  # only a class of the tensors this side sent in the call being answered
        cls = next((c for c in allowed if [c.__module__, c.__qualname__] == sub), None)
    elif str(sub[0]).startswith(CHECKS):
        cls = getattr(sys.modules.get(str(sub[0])), str(sub[1]), None)
    else:
        cls = None
    return cls if isinstance(cls, type) and issubclass(cls, torch.Tensor) else None


def rebuilt_exception(exc) -> BaseException:
    """The exception that the other side's description `exc` stands for: a builtin one by name (EXCEPTIONS),
    else a RemoteError that names it; with its frames (remote_frames) and failing site (remote_site) as sent,
    cut short."""
    exc = exc if isinstance(exc, dict) else {}
    name, text = str(exc.get("type", "Exception"))[:100], str(exc.get("msg", ""))[:2000]
    cls = EXCEPTIONS.get(name)
    if cls is None and name == "KeyboardInterrupt":
        e = RemoteError(f"KeyboardInterrupt: {text}" if text else "KeyboardInterrupt (interrupted)")
    elif cls is None:
        e = RemoteError(f"{name}: {text}" if text else name)
        e.remote_type = name
    else:
        try:
            e = cls(text) if cls is not KeyError else KeyError(text)
        except Exception:  # noqa: BLE001
            e = RemoteError(f"{name}: {text}")
    frames = exc.get("tb") if isinstance(exc.get("tb"), list) else []
    e.remote_frames = [tuple(str(x)[:300] for x in f[:4]) for f in frames[-20:] if isinstance(f, list) and
                       len(f) >= 3]
    e.remote_site = exc.get("site") if isinstance(exc.get("site"), dict) else None  # checked where it is read
    return e
