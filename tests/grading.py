"""Helpers for the autograder's own tests: grade an object and capture what check() printed."""
import contextlib
import io
import os

from autograder import check, max_points


def grade(obj, name=None):
    """(points, printed text) of check(obj); `name` renames obj to the contract name it stands for."""
    if name is not None:
        obj.__name__ = name
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        points = check(obj)
    return points, buf.getvalue()


TIMEOUT_SCALE = float(os.environ.get("CHECK_TIMEOUT_SCALE", "3"))


@contextlib.contextmanager
def patient(factor: float = TIMEOUT_SCALE):
    """Every check's time limit times `factor` (CHECK_TIMEOUT_SCALE, 3 by default) while inside: what a row
    pins, and full marks, must not depend on how busy the machine is (a check that ran out of time skips the
    name's others). The limits themselves are tested by tests that set their own."""
    from autograder.core import REGISTRY
    saved = [(c, c.timeout) for checks in REGISTRY.values() for c in checks]
    try:
        for c, timeout in saved:
            c.timeout = timeout * factor
        yield
    finally:
        for c, timeout in saved:
            c.timeout = timeout


def assert_full_marks(obj, name=None):
    with patient():
        points, text = grade(obj, name)
    top = max_points(name or obj.__name__)
    assert points == top, f"{name or obj.__name__}: {points}/{top}\n{text}"


def grade_one(obj, name, title_start):
    """(points, printed line) of the one check of `name` whose title starts with `title_start`: a test about
    one check need not pay for all of them (a whole model's take seconds)."""
    from autograder.core import REGISTRY, run_check
    obj.__name__ = name
    [c] = [c for c in REGISTRY[name] if c.title.startswith(title_start)]
    return run_check(c, obj)


def run_silently(code, timeout=300):
    """`code` run by a fresh interpreter at the repository's root: it must exit 0 and write nothing to stderr
    (nbgrader gives a graded cell 0 points when it writes to stderr, and PyTorch warnings go there). Returns
    stdout."""
    import pathlib
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=pathlib.Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and done.stderr == "", done.stderr or done
    return done.stdout


def grade_one_across(obj, name, title_start):
    """grade_one as `python -m autograder grade` runs it: the object lives on the notebook's side of the
    channel (autograder/remote.py, served here in a thread), the check runs on the checker's and reaches it
    through a proxy; the learner's errors come back rebuilt, with the frames the kernel sent (file, line,
    function, line's text)."""
    import socket

    from autograder.core import FORBIDDEN, REGISTRY, run_check
    from autograder.remote import Endpoint
    from autograder.serve import LearnerEndpoint
    obj.__name__ = name
    a, b = socket.socketpair()
    learner = LearnerEndpoint(b, {name: obj})

    serve_in_thread(learner)
    [c] = [c for c in REGISTRY[name] if c.title.startswith(title_start)]
    saved = FORBIDDEN.pop(name, None)  # the shortcuts are watched on the notebook's side, as the checker does
    try:
        return run_check(c, Endpoint(a, trusted=True).request("resolve", name=name))
    finally:
        if saved is not None:
            FORBIDDEN[name] = saved
        a.close()
        b.close()


def serve_in_thread(learner):
    """Serve the notebook's side of the channel (a serve.LearnerEndpoint) in a daemon thread until it
    closes."""
    import threading

    from autograder.remote import ChannelError

    def serve():
        try:
            while True:
                msg, blobs = learner.ch.recv()
                if msg.get("k") == "req":
                    learner.serve(msg, blobs)
        except (ChannelError, OSError):
            pass
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


# ---------------------------------------------------------------- mistakes as rows of a table
import dataclasses  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Mistake:
    """One classic mistake, as a row of a stage's table: what the learner did (`name`), the code that does it
    (`impl`: a function or class, often `edit(reference, ...)`), the points it earns, exactly, and fragments
    that the report must say (case-insensitive). `title`: grade only the check whose title starts so
    (grade_one), for a mistake that one check is about. `contract`: the name it stands for, when not the
    table's."""
    name: str
    impl: object
    points: int
    says: tuple = ()
    title: str = ""
    contract: str = ""
    not_says: tuple = ()

    def __post_init__(self):
        if isinstance(self.says, str):
            object.__setattr__(self, "says", (self.says,))
        if isinstance(self.not_says, str):
            object.__setattr__(self, "not_says", (self.not_says,))


def mistakes(contract: str, rows: list[Mistake]) -> list:
    """pytest.params of a table's rows, each with its contract filled in and its name as the test id."""
    import pytest
    return [pytest.param(dataclasses.replace(m, contract=m.contract or contract), id=m.name) for m in rows]


def assert_mistake(m: Mistake) -> str:
    """The row's code earns exactly its points and its report says what the row says. Returns the report."""
    with patient():
        if m.title:
            points, text = grade_one(m.impl, m.contract, m.title)
            top = 1
        else:
            points, text = grade(m.impl, m.contract)
            top = max_points(m.contract)
    assert m.points < top, f"{m.name}: a mistake's row must lose points (pinned {m.points} of {top})"
    assert points == m.points, f"{m.name}: {points} points, the table pins {m.points}:\n{text}"
    missing = [s for s in m.says if s.lower() not in text.lower()]
    assert not missing, f"{m.name}: the report does not say {missing}:\n{text}"
    present = [s for s in m.not_says if s.lower() in text.lower()]
    assert not present, f"{m.name}: the report says {present}, a wrong guess for this mistake:\n{text}"
    return text


_EDITS = 0


def edit(reference, *changes: tuple[str, str], name: str | None = None):
    """`reference` (a function or class of solutions/) with its source changed: each (old, new) replaces
    `old`, which must occur exactly once, so a mistake is written as the diff that makes it. Compiled in the
    reference's own module (its imports and helpers), under a file name that the grader takes for the
    learner's and whose lines it can show. Example: edit(solutions.softmax, ("dim=dim, keepdim=True)\n    e",
    "dim=-1, ..."))"""
    import __future__

    import inspect
    import linecache
    import sys
    import textwrap
    global _EDITS
    # an edit of an edit starts from the edited source (inspect finds a class by its module's file: the
    # original)
    source = getattr(reference, "_edited_source", None) or textwrap.dedent(inspect.getsource(reference))
    for old, new in changes:
        count = source.count(old)
        assert count == 1, f"edit of {reference.__name__}: {old!r} occurs {count} times in its source"
        source = source.replace(old, new)
    _EDITS += 1
    filename = f"<mistake {_EDITS}: {reference.__name__}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(vars(sys.modules[reference.__module__]))
    exec(compile(source, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True),
         namespace)
    made = namespace[reference.__name__]
    made._edited_source = source
    if name is not None:
        made.__name__ = name
    return made
