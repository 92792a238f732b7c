"""autograder/shortcuts.py on its own: while a check runs, the forbidden library calls made by the learner's
code are recorded, whatever alias they use; the check's own calls, other calls and calls after the watch are
not; and the watch leaves torch as it found it. The functions of this file stand for the learner's code
(outside autograder/)."""
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autograder import shortcuts
from autograder.registry import Forbidden
from autograder.shortcuts import _watched, watching

SOFTMAX = Forbidden("torch.softmax", functions=("softmax",))
LAYER_NORM = Forbidden("nn.LayerNorm", functions=("layer_norm",), classes=("torch.nn.LayerNorm",))
SMOOTHED = Forbidden("label smoothing", functions=("cross_entropy",),
                     when=lambda args, kwargs: kwargs.get("label_smoothing", 0) > 0)


def as_ours(source: str, name: str):
    """The function `name` defined by `source`, compiled as if it were a file of autograder/ (a check's
    code)."""
    namespace = {"torch": torch, "nn": nn}
    exec(compile(source, os.path.join(os.path.dirname(shortcuts.__file__), "a_check.py"), "exec"), namespace)
    return namespace[name]


def used_by(fn, rules, obj=None) -> list[str]:
    used = []
    with watching(rules, obj, used):
        fn()
    return used


x = torch.randn(2, 5)


@pytest.mark.parametrize("call", [lambda: torch.softmax(x, -1), lambda: F.softmax(x, dim=-1),
                                  lambda: x.softmax(-1), lambda: torch.nn.functional.softmax(x, -1)],
                         ids=["torch.softmax", "F.softmax", "Tensor.softmax", "torch.nn.functional.softmax"])
def test_a_forbidden_function_is_caught_whatever_its_alias(call):
    assert used_by(call, [SOFTMAX]) == ["torch.softmax"]


def test_each_call_is_recorded_and_other_calls_are_not():
    assert used_by(lambda: (x.softmax(-1), x.softmax(0)), [SOFTMAX]) == ["torch.softmax"] * 2
    assert used_by(lambda: x.exp() / x.exp().sum(-1, keepdim=True), [SOFTMAX]) == []
    assert used_by(lambda: torch.log_softmax(x, -1), [SOFTMAX]) == []  # another function's name
    assert used_by(lambda: torch.softmax(x, -1), []) == []  # nothing forbidden for this name


def test_when_decides_which_calls_count():
    target = torch.tensor([1, 2])
    assert used_by(lambda: F.cross_entropy(x, target), [SMOOTHED]) == []
    assert used_by(lambda: F.cross_entropy(x, target, label_smoothing=0.1), [SMOOTHED]) == ["label smoothing"]


def test_the_checks_own_calls_are_allowed():
    reference = as_ours("def reference(x):\n    return torch.softmax(x, -1)\n", "reference")
    assert used_by(lambda: reference(x), [SOFTMAX]) == []
    # the learner's call inside a check's helper still counts: the innermost non-library frame decides
    helper = as_ours("def helper(fn):\n    return fn()\n", "helper")
    assert used_by(lambda: helper(lambda: x.softmax(-1)), [SOFTMAX]) == ["torch.softmax"]


def test_a_forbidden_class_built_or_called_by_the_learner():
    assert used_by(lambda: nn.LayerNorm(5), [LAYER_NORM]) == ["nn.LayerNorm"]  # built
    before = nn.LayerNorm(5)  # built outside the watch, so not the check's: calling it counts
    # forward, then F.layer_norm
    assert used_by(lambda: before(x), [LAYER_NORM]) == ["nn.LayerNorm", "nn.LayerNorm"]


def test_an_instance_the_check_built_may_be_called_by_the_learner():
    only_the_class = Forbidden("nn.LayerNorm", classes=("torch.nn.LayerNorm",))
    build = as_ours("def build():\n    return nn.LayerNorm(5)\n", "build")
    used = []
    with watching([only_the_class], None, used):
        given = build()
        given(x)  # the learner's code calls the norm the check handed it
    assert used == []


def test_the_graded_object_counts_when_it_is_the_librarys_own():
    class MyNorm(nn.LayerNorm):
        pass

    class Written(nn.Module):
        pass

    def softmax(x, dim=-1):
        return x.exp() / x.exp().sum(dim, keepdim=True)
    assert used_by(lambda: None, [LAYER_NORM], obj=MyNorm) == ["nn.LayerNorm"]  # a subclass of the library's
    assert used_by(lambda: None, [LAYER_NORM], obj=Written) == []
    # the library's function itself
    assert used_by(lambda: None, [SOFTMAX], obj=torch.softmax) == ["torch.softmax"]
    assert used_by(lambda: None, [SOFTMAX], obj=softmax) == []  # the learner's own, of the same name


def test_watched_returns_what_the_check_returns():
    used = []
    assert _watched(lambda f: f(x).shape, lambda t: t.softmax(-1), [SOFTMAX], used) == (2, 5)
    assert used == ["torch.softmax"]


def test_the_watch_leaves_torch_as_it_found_it():
    init, forward = nn.LayerNorm.__init__, nn.LayerNorm.forward
    used = []
    with pytest.raises(ZeroDivisionError):
        with watching([LAYER_NORM, SOFTMAX], None, used):
            assert nn.LayerNorm.__init__ is not init  # patched while inside
            assert torch._C._is_torch_function_mode_enabled()
            raise ZeroDivisionError  # a check that fails midway
    assert nn.LayerNorm.__init__ is init and nn.LayerNorm.forward is forward
    assert not torch._C._is_torch_function_mode_enabled()
    nn.LayerNorm(5)(x).softmax(-1)  # after the watch: nothing recorded
    assert used == []


def test_two_rules_on_one_class_restore_it_too():
    other = Forbidden("norms", classes=("torch.nn.LayerNorm",))
    init = nn.LayerNorm.__init__
    assert sorted(used_by(lambda: nn.LayerNorm(5), [LAYER_NORM, other])) == ["nn.LayerNorm", "norms"]
    assert nn.LayerNorm.__init__ is init
