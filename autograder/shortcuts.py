"""The library-shortcut detector: while a check runs, the calls that a stage forbids (registry.forbid) made by
the learner's code are recorded, whatever alias they use (a TorchFunctionMode for torch functions, patched
__init__/forward for classes)."""
from __future__ import annotations

import contextlib
import sys
from typing import Callable

from .explain import _TRANSPARENT, _called_by_learner, _frame_kind
from .registry import Forbidden


def _resolve(path: str):
    import importlib
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _watched(fn: Callable, obj, rules: list[Forbidden], used: list[str]):
    """fn(obj), recording in `used` the labels of the forbidden calls made by the learner's code."""
    with watching(rules, obj, used):
        return fn(obj)


@contextlib.contextmanager
def watching(rules: list[Forbidden], obj, used: list[str]):
    """While inside, record in `used` the labels of the forbidden calls (`rules`) made by the learner's code;
    `obj`, the graded object, counts when it is the library's own class or function."""
    by_name: dict[str, list[Forbidden]] = {}
    for rule in rules:
        for f in rule.functions:
            by_name.setdefault(f, []).append(rule)
    watch = _function_watch(by_name, used)
    _library_own(rules, obj, used)
    patched: list = []
    try:
        _wrap_classes(rules, used, patched)
        if by_name:
            with watch:
                yield
        else:
            yield
    finally:
        for cls, attr, original in reversed(patched):
            setattr(cls, attr, original)


def _function_watch(by_name: dict[str, list[Forbidden]], used: list[str]):
    """A TorchFunctionMode that records the forbidden torch functions (`by_name`) the learner's code calls."""
    from torch.overrides import TorchFunctionMode

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            for rule in by_name.get(getattr(func, "__name__", None), ()):
                if (rule.when is None or rule.when(args, kwargs)) and _called_by_learner(sys._getframe(1)):
                    used.append(rule.label)
            return func(*args, **kwargs)

    _TRANSPARENT.add(Watch.__torch_function__.__code__)
    return Watch()


def _library_own(rules: list[Forbidden], obj, used: list[str]) -> None:
    """Record the rules whose library class or function the graded object is (a subclass, or the function
    itself)."""
    for rule in rules:
        if isinstance(obj, type):
            if any(issubclass(obj, _resolve(path)) for path in rule.classes):
                used.append(rule.label)
        elif getattr(obj, "__name__", None) in rule.functions:
            code = getattr(obj, "__code__", None)
            if code is None or _frame_kind(code.co_filename) == "library":
                used.append(rule.label)


def _wrap_classes(rules: list[Forbidden], used: list[str], patched: list) -> None:
    """Patch the forbidden classes' __init__ and forward to record the learner's code building or calling one;
    each patch is added to `patched` (class, attribute, original) as it is made, for watching() to undo."""
    theirs_ok: set[int] = set()  # instances the check built itself, which the learner's code may call

    def wrap(cls, attr, rule):
        original = cls.__dict__[attr]

        def init(self, *args, **kwargs):
            if _called_by_learner(sys._getframe(1)):
                used.append(rule.label)
            else:
                theirs_ok.add(id(self))
            return original(self, *args, **kwargs)

        def forward(self, *args, **kwargs):
            if id(self) not in theirs_ok and _called_by_learner(sys._getframe(1)):
                used.append(rule.label)
            return original(self, *args, **kwargs)
        _TRANSPARENT.update((init.__code__, forward.__code__))
        patched.append((cls, attr, original))
        setattr(cls, attr, init if attr == "__init__" else forward)

    for rule in rules:
        for path in rule.classes:
            cls = _resolve(path)
            for attr in ("__init__", "forward"):
                if attr in cls.__dict__:
                    wrap(cls, attr, rule)
