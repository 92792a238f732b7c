"""The registry: the checks of each contract name (`register`), the library calls a stage forbids (`forbid`),
and the exceptions a check raises. The lowest layer: the stages' checks import it, and it imports nothing of
the autograder."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

DEFAULT_TIMEOUT = 10.0  # seconds per check: generous for a correct CPU implementation, short for a hang


class CheckFailure(Exception):
    """A check's verdict on wrong code: what was checked, expected, got, and the likely cause."""

    def __init__(self, what: str, expected=None, got=None, hint: str | None = None):
        super().__init__(what)
        self.what, self.expected, self.got, self.hint = what, expected, got, hint

    def __str__(self):
        parts = [self.what]
        if self.expected is not None:
            parts.append(f"expected {self.expected}")
        if self.got is not None:
            parts.append(f"got {self.got}")
        text = "; ".join(parts)
        return text + (f". Likely: {self.hint}" if self.hint else "")


class CheckPassed(Exception):
    """Raised by a check whose name is right given an earlier graded name that is wrong (a mistake is paid
    once): the check keeps its points, and the note says which earlier name to fix."""


class CheckTimeout(Exception):
    pass


@dataclass
class Check:
    name: str          # the contract name it grades, e.g. "softmax"
    title: str         # what it verifies, one short line
    points: float
    fn: Callable       # fn(obj) -> None; raises CheckFailure (or anything) when obj is wrong
    timeout: float


REGISTRY: dict[str, list[Check]] = {}


def register(name: str, title: str, points: float = 1.0, timeout: float = DEFAULT_TIMEOUT):
    """Decorator: add a check for the contract name `name`."""
    def wrap(fn):
        REGISTRY.setdefault(name, []).append(Check(name, title, points, fn, timeout))
        return fn
    return wrap


@dataclass
class Forbidden:
    """A library call that does a stage's own work. `functions`: the __name__s of torch functions
    (torch.softmax, F.softmax and Tensor.softmax all report "softmax"), caught through a
    TorchFunctionMode whatever alias the learner used; `classes`: dotted paths of torch classes
    (nn.LayerNorm), caught when the learner's code builds one or calls one it did not get from the
    check; `when(args, kwargs)`: only the calls it accepts count (e.g. label_smoothing > 0)."""
    label: str
    functions: tuple = ()
    classes: tuple = ()
    when: Callable | None = None


FORBIDDEN: dict[str, list[Forbidden]] = {}


def forbid(names, label: str, *, functions=(), classes=(), when=None) -> None:
    """Declare that the contract names `names` must not get their work done by a library call: during
    their checks, a use of it from the learner's code makes each check earn nothing, with a message
    naming `label`. The same calls stay allowed everywhere else (other names, other stages, the checks)."""
    for name in ([names] if isinstance(names, str) else names):
        FORBIDDEN.setdefault(name, []).append(Forbidden(label, tuple(functions), tuple(classes), when))
