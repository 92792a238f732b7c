"""One test over every graded name: the reference earns full marks, and the stub that nbgrader generates from
it (each solution region replaced by `raise NotImplementedError()`) earns 0, every check saying "not
implemented yet". The stage files test the other correct styles and the mistakes."""
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
    exec(compile(clear_solutions(solution_source(module.__name__.split(".")[-1], [name])), f"<stub {name}>",
                 "exec"),
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
    assert points == 0, text
    assert text.count("not implemented yet") == len(REGISTRY[name]), text


# ---------------------------------------------------------------- the contract as data: every check held to
# it
def _kinds(value, seen, depth=0):
    """The input kinds of autograder.checks.contract that `value` is (recursing into lists, tuples and
    dicts)."""
    import collections.abc

    import torch
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            seen.add(str(value.dtype).replace("torch.", ""))
        if value.dim() >= 2 and not value.is_contiguous():
            seen.add("strided")
        if value.dim() >= 1 and value.size(0) == 1:
            seen.add("batch of one")
        if value.numel() == 0:
            seen.add("empty")
    elif isinstance(value, collections.abc.Iterator):
        seen.add("one-pass")
    elif isinstance(value, (list, tuple)) and depth < 2:
        if len(value) == 0:
            seen.add("empty")
        elif len(value) == 1 and isinstance(value[0], (list, tuple)):
            seen.add("batch of one")
        for v in value[:4]:
            _kinds(v, seen, depth + 1)


def recording(name, seen):
    """The reference of `name` whose function (or its class's contract method) notes the kinds of its
    arguments."""
    import functools
    import inspect
    reference = getattr(solutions, name)
    if inspect.isclass(reference):
        from autograder.checks.contract import CONTRACTS
        method = CONTRACTS[name].method
        original = getattr(reference, method)

        @functools.wraps(original)
        def noted(self, *args, **kwargs):
            for a in list(args) + list(kwargs.values()):
                _kinds(a, seen)
            return original(self, *args, **kwargs)
        return type(name, (reference,), {method: noted, "__module__": reference.__module__})

    @functools.wraps(reference)
    def noted_call(*args, **kwargs):
        for a in list(args) + list(kwargs.values()):
            _kinds(a, seen)
        return reference(*args, **kwargs)
    return noted_call


def test_every_graded_name_has_a_contract():
    from autograder.checks.contract import CONTRACTS
    assert set(CONTRACTS) == set(NAMES), set(CONTRACTS) ^ set(NAMES)


@pytest.mark.parametrize("name", [n for n in NAMES if __import__("autograder.checks.contract", fromlist=["x"])
                                  .CONTRACTS[n].exercised])
def test_the_checks_run_over_the_declared_inputs(name):
    """Each kind of input the contract declares reaches the name during its checks (a check that ignores the
    contract, e.g. one that passes float32 only where float64 is declared, fails here), and the reference
    keeps full marks through the recorder."""
    from autograder.checks.contract import CONTRACTS
    seen: set = set()
    assert_full_marks(recording(name, seen), name)
    missing = set(CONTRACTS[name].exercised) - seen
    assert not missing, f"{name}: the checks never pass {sorted(missing)} (seen: {sorted(seen)})"


def test_a_check_that_ignores_the_contract_fails_the_contract_test():
    """The test above can fail: softmax graded by its checks without the float64 one records no float64
    input."""
    from autograder.checks import stage03_attention
    from autograder.core import REGISTRY
    saved = stage03_attention._keeps_float64
    # a softmax check that ignores the contract's dtypes
    stage03_attention._keeps_float64 = lambda softmax, x: None
    try:
        seen: set = set()
        for c in REGISTRY["softmax"]:
            c.fn(recording("softmax", seen))
        assert "float64" not in seen
    finally:
        stage03_attention._keeps_float64 = saved
    seen = set()
    for c in REGISTRY["softmax"]:
        c.fn(recording("softmax", seen))
    assert "float64" in seen


@pytest.mark.parametrize("given,says", [
    ("softmax", "✗ check('softmax') was given the name as text: pass the softmax you wrote itself, "
                "check(softmax)"),
    ("softmaks", "✗ no checks for 'str': pass the function or class itself, e.g. check(softmax). Known "
                 "names: "),
    (42, "✗ no checks for 'int': pass the function or class itself"),
    (lambda: None, "✗ no checks for '<lambda>'"),
])
def test_check_of_what_has_no_checks_says_what_to_pass(capsys, given, says):
    from autograder import check
    assert check(given) == 0.0
    out = capsys.readouterr().out
    assert out.startswith(says) and out.count("\n") == 1, out
