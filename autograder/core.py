"""The machinery of `check`: a registry of checks per contract name, a time limit per check, silence on
stderr, and messages that say what was expected, what came back, and the likely mistake."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
import traceback
import warnings
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


def max_points(name: str) -> float:
    """The most that check() can return for the contract name `name`."""
    from . import checks  # noqa: F401  (fills the registry)
    if name not in REGISTRY:
        raise KeyError(f"no checks for {name!r}; known names: {', '.join(sorted(REGISTRY))}")
    return float(sum(c.points for c in REGISTRY[name]))


# ------------------------------------------------------------------------------------------ running
@contextlib.contextmanager
def _silenced():
    """Nothing reaches stderr (nbgrader zeroes a graded cell that writes there) and warnings are
    dropped; the learner's own prints during a check are swallowed too, so the check's lines stay clean."""
    sink = io.StringIO()
    saved_fd = None
    try:
        sys.stderr.flush()
        saved_fd = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)  # C-level writes (PyTorch's C++ warnings) too
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        saved_fd = None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        if saved_fd is not None:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)


def _alarm_available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _run_limited(fn: Callable, seconds: float):
    """Run fn() with a time limit: SIGALRM in the main thread (interrupts a Python loop), else a
    daemon thread that is abandoned when it overruns."""
    if _alarm_available():
        def on_alarm(signum, frame):
            raise CheckTimeout()
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (handed to the caller)
            box["error"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise CheckTimeout()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _describe_exception(e: BaseException) -> str:
    """`TypeError: ... (in your_function, line 12)`: the innermost frame outside the autograder."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "autograder" not in f.filename.replace("\\", "/")
              and "/torch/" not in f.filename.replace("\\", "/")]
    where = f" (in {frames[-1].name}, line {frames[-1].lineno})" if frames else ""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}{': ' + msg[:300] if msg else ''}{where}"


def run_check(c: Check, obj) -> tuple[float, str]:
    """(points, one line of report) for one check; never raises for anything the learner's code does."""
    try:
        with _silenced():
            _run_limited(lambda: c.fn(obj), c.timeout)
    except CheckFailure as e:
        return 0.0, f"✗ {c.title} [0/{c.points:g}]: {e}"
    except NotImplementedError:
        return 0.0, f"✗ {c.title} [0/{c.points:g}]: not implemented yet"
    except CheckTimeout:
        return 0.0, (f"✗ {c.title} [0/{c.points:g}]: took longer than {c.timeout:g} s. Likely: an endless loop "
                     "(a while loop whose condition never changes), or work repeated far more than needed")
    except RecursionError:
        return 0.0, f"✗ {c.title} [0/{c.points:g}]: endless recursion. Likely: the function calls itself"
    except MemoryError:
        return 0.0, f"✗ {c.title} [0/{c.points:g}]: ran out of memory. Likely: a tensor far larger than needed"
    except BaseException as e:  # noqa: BLE001  (SystemExit and KeyboardInterrupt from learner code included)
        if isinstance(e, KeyboardInterrupt) and not isinstance(e, CheckTimeout):
            raise  # the learner pressed stop: let the notebook stop
        return 0.0, f"✗ {c.title} [0/{c.points:g}]: your code raised {_describe_exception(e)}"
    return c.points, f"✓ {c.title} [{c.points:g}/{c.points:g}]"


def check(obj, verbose: bool = True) -> float:
    """Run every check registered for `obj.__name__` against obj, print one line per check, and return
    the points earned (so that a graded cell ending in check(...) gets partial credit in nbgrader)."""
    from . import checks  # noqa: F401  (fills the registry)
    name = getattr(obj, "__name__", None)
    if name not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        print(f"✗ no checks for {name or type(obj).__name__!r}: pass the function or class itself, e.g. "
              f"check(softmax). Known names: {known}")
        return 0.0
    total, earned, lines, timed_out = 0.0, 0.0, [], False
    for c in REGISTRY[name]:
        if timed_out:  # the code hangs: do not make the learner (or nbgrader's cell timeout) wait for each check
            points, line = 0.0, f"✗ {c.title} [0/{c.points:g}]: skipped, an earlier check ran out of time"
        else:
            points, line = run_check(c, obj)
            timed_out = "took longer than" in line
        earned += points
        total += c.points
        lines.append(line)
    for line in lines:
        print(line)
    print(f"{name}: {earned:g}/{total:g} points")
    return earned
