"""Helpers for the autograder's own tests: grade an object and capture what check() printed."""
import contextlib
import io

from autograder import check, max_points


def grade(obj, name=None):
    """(points, printed text) of check(obj); `name` renames obj to the contract name it stands for."""
    if name is not None:
        obj.__name__ = name
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        points = check(obj)
    return points, buf.getvalue()


def assert_full_marks(obj, name=None):
    points, text = grade(obj, name)
    top = max_points(name or obj.__name__)
    assert points == top, f"{name or obj.__name__}: {points}/{top}\n{text}"


def assert_caught(obj, name, *keywords):
    """The mutant loses points, and the report names the mistake (every keyword appears, case-insensitive)."""
    points, text = grade(obj, name)
    assert points < max_points(name), f"mutant of {name} got full marks:\n{text}"
    missing = [k for k in keywords if k.lower() not in text.lower()]
    assert not missing, f"mutant of {name} lost points but the report does not say {missing}:\n{text}"
    return points, text
