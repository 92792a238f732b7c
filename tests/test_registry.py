"""One test over every graded name: the reference earns full marks, and the stub that nbgrader generates from it
(each solution region replaced by `raise NotImplementedError()`) earns 0, every check saying "not implemented
yet". The stage files test the other correct styles and the mistakes."""
import sys

import pytest

import solutions
from autograder import checks  # noqa: F401  (fills the registry)
from autograder.core import REGISTRY
from autograder.notebooks import clear_solutions, solution_source
from tests.grading import assert_full_marks, grade

NAMES = list(REGISTRY)


def stub(name):
    """The lesson's stub of `name`: its reference source through nbgrader's ClearSolutions, run in the
    reference's module (so its helpers and imports resolve as in the lesson)."""
    reference = getattr(solutions, name)
    module = sys.modules[reference.__module__]
    namespace = dict(vars(module))
    exec(compile(clear_solutions(solution_source(module.__name__.split(".")[-1], [name])), f"<stub {name}>", "exec"),
         namespace)
    return namespace[name]


def test_every_graded_name_has_a_reference():
    assert len(NAMES) == 35 and all(hasattr(solutions, name) for name in NAMES), NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_gets_full_marks(name):
    assert_full_marks(getattr(solutions, name), name)


@pytest.mark.parametrize("name", NAMES)
def test_the_stub_gets_zero_and_says_not_implemented(name):
    points, text = grade(stub(name), name)
    lines = [line for line in text.splitlines() if line.strip()]
    assert points == 0, text
    assert text.count("not implemented yet") == len(REGISTRY[name]), text
