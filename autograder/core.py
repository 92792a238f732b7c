"""The machinery of `check`: a registry of checks per contract name, a time limit per check, silence on
stderr, and messages that say what was expected, what came back, and the likely mistake."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
import warnings
from typing import Callable

from . import checks  # noqa: F401,E402  (fills the registry: imported once, here)
from .explain import _describe_exception, _exception_line, _frame_kind, _site, failing_line, failing_site  # noqa: F401
from .outcomes import Outcome, Verdict, check_line
from .registry import (  # noqa: F401
    DEFAULT_TIMEOUT,
    FORBIDDEN,
    REGISTRY,
    Check,
    CheckFailure,
    CheckPassed,
    CheckTimeout,
    Forbidden,
    forbid,
    register,
)
from .shortcuts import _watched, watching  # noqa: F401


def max_points(name: str) -> float:
    """The most that check() can return for the contract name `name`."""
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


def run_check(c: Check, obj, lost: tuple = ()) -> Verdict:
    """(points, one line of report) for one check, and how it ended (a Verdict); never raises for anything the
    learner's code does. When the stage forbids a library shortcut (see `forbid`) and the learner's code used
    it during this check, the check earns nothing, whatever its verdict. `lost`: the exceptions that mean the
    kernel stopped answering (the grade command's channel errors)."""
    used: list[str] = []
    rules = FORBIDDEN.get(c.name)
    try:
        with _silenced():
            _run_limited(lambda: _watched(c.fn, obj, rules, used) if rules else c.fn(obj), c.timeout)
    except CheckPassed as e:  # right given a wrong earlier name, which the note names (paid once, there)
        verdict = Verdict(c.points, check_line(c.title, c.points, True, str(e)), Outcome.PASSED)
    except BaseException as e:  # noqa: BLE001  (SystemExit and KeyboardInterrupt from learner code included)
        failure = _failure(c, e, lost)
        if failure is None:
            raise  # the learner pressed stop: let the notebook stop
        note, outcome = failure
        verdict = Verdict(0.0, check_line(c.title, c.points, False, note), outcome)
    else:
        verdict = Verdict(c.points, check_line(c.title, c.points, True), Outcome.PASSED)
    if used:
        return refused(c, list(dict.fromkeys(used)))
    return verdict


def _failure(c: Check, e: BaseException, lost: tuple) -> tuple[str, Outcome] | None:
    """(the note, the outcome) of a check that raised `e`; None for the learner's KeyboardInterrupt (raised
    on). The outcome is LOST when `e`, or the error it was raised from or while handling, is one of `lost`."""
    outcome = Outcome.LOST if lost and _raised_from(e, lost) else Outcome.FAILED
    if isinstance(e, CheckFailure):
        return str(e), outcome
    if isinstance(e, NotImplementedError):
        return "not implemented yet", outcome
    if isinstance(e, CheckTimeout):
        return (f"took longer than {c.timeout:g} s. Likely: an endless loop (a while loop whose condition "
                "never changes), or work repeated far more than needed"), Outcome.TIMEOUT
    if isinstance(e, RecursionError):
        return "endless recursion. Likely: the function calls itself", outcome
    if isinstance(e, MemoryError):
        return "ran out of memory. Likely: a tensor far larger than needed", outcome
    if isinstance(e, KeyboardInterrupt):
        return None
    return _exception_line(e), outcome


def _raised_from(e: BaseException, kinds: tuple) -> bool:
    """Whether `e` or an error in its chain (__cause__, __context__) is one of `kinds`."""
    seen: set = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, kinds):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def refused(c: Check, names: list[str]) -> Verdict:
    """The verdict of a check during which the learner's code called the forbidden shortcuts `names`."""
    note = f"your code calls {', '.join(names)}, which does this lesson's work for you: write it yourself"
    return Verdict(0.0, check_line(c.title, c.points, False, note), Outcome.REFUSED)


def run_checks(obj) -> tuple[str | None, float, float, list[str]]:
    """(contract name, points earned, most points, one line per check) for obj, printing nothing.
    The name is None when no checks are registered for obj.__name__."""
    name = getattr(obj, "__name__", None)
    if not isinstance(name, str) or name not in REGISTRY:
        return None, 0.0, 0.0, []
    return run_named(name, obj)


def run_named(name: str, obj, run: Callable | None = None) -> tuple[str | None, float, float, list[str]]:
    """The checks of the contract name `name` (not obj's own __name__) against obj. `run(check, obj)` runs
    one check, run_check by default (the grade command's runs it across to the notebook's kernel)."""
    if name not in REGISTRY:
        return None, 0.0, 0.0, []
    run = run or run_check
    total, earned, lines, timed_out = 0.0, 0.0, [], False
    for c in REGISTRY[name]:
        # the code hangs: do not make the learner (or nbgrader's cell timeout) wait for each check
        if timed_out:
            points, line = 0.0, check_line(c.title, c.points, False,
                                           "skipped, an earlier check ran out of time")
        else:
            verdict = run(c, obj)
            points, line = verdict
            timed_out = getattr(verdict, "outcome", None) is Outcome.TIMEOUT
        earned += points
        total += c.points
        lines.append(line)
    return name, earned, total, lines


def check(obj, verbose: bool = True) -> float:
    """Run every check registered for `obj.__name__` against obj, print one line per check, and return
    the points earned (so that a graded cell ending in check(...) gets partial credit in nbgrader)."""
    name, earned, total, lines = run_checks(obj)
    if name is None:
        known = ", ".join(sorted(REGISTRY))
        shown = getattr(obj, "__name__", None)
        if isinstance(obj, str) and obj in REGISTRY:
            print(f"✗ check({obj!r}) was given the name as text: pass the {obj} you wrote itself, "
                  f"check({obj})")
            return 0.0
        print(f"✗ no checks for {shown if isinstance(shown, str) else type(obj).__name__!r}: pass the "
              f"function or class itself, e.g. check(softmax). Known names: {known}")
        return 0.0
    for line in lines:
        print(line)
    print(f"{name}: {earned:g}/{total:g} points")
    return earned


