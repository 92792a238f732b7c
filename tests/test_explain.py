"""autograder/explain.py on its own: whose frame is whose, how an exception raised here or in the notebook's
kernel is described (the learner's line, the shapes on it, the call), and when a 'Likely' is said. The
functions of this file stand for the learner's code: it lives outside autograder/ and the libraries."""
import os
import sys

import pytest
import torch

from autograder import explain
from autograder.explain import (
    _describe_exception,
    _entry_call,
    _exception_line,
    _frame_kind,
    _last_item_of_batch,
    _plain_shapes,
    _remote_where,
    _shapes_hint,
    failing_line,
    failing_site,
)

# where a kernel's cell runs (any folder)
KERNEL_CELL = "/tmp/autograder-x/home/tmp/ipykernel_1/2928958320.py"


def as_ours(source: str, name: str):
    """The function `name` defined by `source`, compiled as if it were a file of autograder/ (a check's
    code)."""
    namespace = {}
    exec(compile(source, os.path.join(os.path.dirname(explain.__file__), "a_check.py"), "exec"), namespace)
    return namespace[name]


# the check's side: calls the learner's function and keeps the error, as run_check does
_RAISED = """
def raised(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as e:
        return e
    raise AssertionError("expected an exception")
"""
raised = as_ours(_RAISED, "raised")


def divide(x):
    y = x - 1
    return y / 0


def add(a, b):
    return a + b  # (2, 3) + (2, 4): sizes 3 and 4, each a dimension of one tensor


def outer(x):
    return divide(x)  # the learner's own helper raises, one frame further in


def attend(q, k, n=3):
    return q @ k


def reassigns(x, scale=2.0):
    x = x * scale
    return x @ x


def line_of(fn, text):
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


# ---------------------------------------------------------------- whose frame
def test_frames_are_ours_the_librarys_or_the_learners():
    assert _frame_kind(explain.__file__) == "ours"
    assert _frame_kind(os.path.join(os.path.dirname(explain.__file__), "checks", "_util.py")) == "ours"
    assert _frame_kind(torch.__file__) == "library" and _frame_kind(os.__file__) == "library"
    assert _frame_kind("<frozen importlib._bootstrap>") == "library"
    assert _frame_kind(__file__) == "learner"
    assert _frame_kind(KERNEL_CELL) == "learner" and _frame_kind("<ipython-input-3-abc>") == "learner"


def test_called_by_learner_looks_past_library_frames_only():
    assert explain._called_by_learner(sys._getframe())
    where = as_ours("import sys\ndef where():\n    return sys._getframe()\n", "where")
    assert not explain._called_by_learner(where())  # the innermost non-library frame is ours
    assert not explain._called_by_learner(None)


# ---------------------------------------------------------------- an exception raised here
def test_an_exception_is_described_by_the_learners_innermost_line():
    e = raised(divide, 3)
    assert _describe_exception(e) == \
        f"ZeroDivisionError: division by zero (in divide, line {line_of(divide, 'y / 0')}: `return y / 0`)"
    assert failing_line(e) == "return y / 0"
    # the innermost of the learner's frames
    assert _describe_exception(raised(outer, 3)) == _describe_exception(e)
    assert _describe_exception(raised(lambda: (_ for _
                                               in ()).throw(ValueError()))).startswith("ValueError (in ")


def test_a_long_message_keeps_its_first_line_and_300_characters():
    def fails():
        message = "x" * 400 + "\n" + "SECOND"
        raise RuntimeError(message)
    text = _describe_exception(raised(fails))
    assert text.startswith("RuntimeError: " + "x" * 300 + " (in fails, line ") and "SECOND" not in text


def test_an_error_with_no_learner_frame_is_described_without_a_place():
    e = RuntimeError("made by a check")  # never raised: no traceback, no frame of anyone's
    assert _describe_exception(e) == "RuntimeError: made by a check"
    assert failing_line(e) == "" and failing_site(e) is None and _shapes_hint(e) == ("", None)


def test_failing_site_names_the_tensors_on_the_line_and_the_entry():
    def last_row(h, w):
        top = h[-1]
        return top @ w
    e = raised(last_row, torch.zeros(2, 5, 8), torch.zeros(3, 4))
    site = failing_site(e)
    assert site["text"] == "return top @ w" and site["line"] == line_of(last_row, "top @ w")
    assert site["shapes"] == {"top": (5, 8), "w": (3, 4)}  # only the names on the failing line
    assert site["last"] == {"h": (2, 5, 8)}  # indexed as h[-1] in the function
    assert site["entry"] == {"name": "last_row", "params": ["h", "w"]}


def test_a_size_mismatch_names_the_two_dimensions_that_met():
    e = raised(add, torch.zeros(2, 3), torch.zeros(2, 4))
    shapes, hint = _shapes_hint(e)
    assert shapes == "a (2, 3), b (2, 4)"
    assert hint.startswith("3 is a's size at dim 1 and 4 is b's size at dim 1: on this line the one stands "
                           "where")


def test_no_likely_when_the_sizes_do_not_point_at_one_dimension_each():
    e = raised(add, torch.zeros(3, 3), torch.zeros(3, 4))  # 3 is a's size at dims 0 and 1 (and b's at 0)
    assert _shapes_hint(e) == ("a (3, 3), b (3, 4)", None)
    e = raised(add, torch.zeros(2, 3), [1])  # not a size mismatch: no sizes in the message
    assert _shapes_hint(e)[1] is None

    def widened(a, b):
        return a + b[:, :1].expand(2, 5)  # 5 is the size of no tensor named on the line
    assert _shapes_hint(raised(widened, torch.zeros(2, 3), torch.zeros(2, 4))) == ("a (2, 3), b (2, 4)", None)


def test_a_matmul_mismatch_is_read_from_its_own_message():
    e = raised(attend, torch.zeros(2, 3), torch.zeros(5, 7))
    assert "shapes cannot be multiplied (2x3 and 5x7)" in str(e)
    assert _shapes_hint(e)[1].startswith("3 is q's size at dim 1 and 5 is k's size at dim 0")


def test_the_last_item_of_the_batch_taken_for_the_last_position():
    said = _last_item_of_batch({"h": (2, 5, 8)}, [2, 7])
    assert said.startswith("h[-1] takes the last item of the batch (h is (2, 5, 8), dim 0 the batch of 2)")
    assert said.endswith("h[:, -1] keeps one row per sentence")
    assert _last_item_of_batch({"h": (5, 5, 8)}, [5, 7]) is None  # batch and length alike: nothing to tell
    assert _last_item_of_batch({"h": (2, 8)}, [2, 7]) is None  # 2-d: h[-1] may well be meant
    assert _last_item_of_batch({"h": (2, 5, 8)}, [3, 7]) is None


def test_the_call_shows_the_arguments_as_given():
    e = raised(attend, torch.zeros(2, 3), torch.zeros(5, 7))
    assert _entry_call(e) == "attend(q (2, 3), k (5, 7), n=3)"
    # an argument the function reassigns is left out: its value now is not the one it was given
    assert _entry_call(raised(reassigns, torch.zeros(2, 3))) == "reassigns(scale=2.0)"


def test_the_call_shows_a_modules_argument_as_given_even_if_reassigned():
    class Norm(torch.nn.Module):
        def forward(self, x):
            x = x - x.mean(-1)
            return x @ x
    assert _entry_call(raised(Norm(), torch.zeros(2, 3))) == "Norm.forward(x (2, 3))"


def test_the_exception_line_puts_it_together():
    e = raised(add, torch.zeros(2, 3), torch.zeros(2, 4))
    text = _exception_line(e)
    assert text.startswith("your code raised RuntimeError: The size of tensor a (3) must match the size of "
                           "tensor b (4) at non-singleton dimension 1 (in add, line ")
    assert (", with a (2, 3), b (2, 4); the call was add(a (2, 3), b (2, 4)). "
            "Likely: 3 is a's size at dim 1") in text
    assert _exception_line(raised(divide, 3)).endswith("`return y / 0`); the call was divide(x=3)")


# ---------------------------------------------------------------- an error rebuilt from the notebook's kernel
def kernel_error(frames, site=None) -> RuntimeError:
    e = RuntimeError("The size of tensor a (3) must match the size of tensor b (4) at non-singleton "
                     "dimension 1")
    e.remote_frames = frames
    if site is not None:
        e.remote_site = site
    return e


SENT = [(explain.__file__, 40, "run_check", "fn(obj)"),  # the kernel's own frames are not the learner's
        (KERNEL_CELL, 7, "add", "    return a + b   ")]


def test_a_kernels_error_is_placed_by_the_frames_it_sent():
    e = kernel_error(SENT)
    assert _remote_where(e) == " (in add, line 7: `return a + b`)"
    assert _describe_exception(e).endswith(" (in add, line 7: `return a + b`)")
    assert _remote_where(kernel_error([SENT[0]])) == "" and _remote_where(kernel_error(["not a frame",
                                                                                        3])) == ""
    long = kernel_error([(KERNEL_CELL, 9, "f", "y = " + "x" * 200)])
    assert _remote_where(long) == f" (in f, line 9: `y = {'x' * 113}...`)"


def test_a_kernels_site_counts_only_where_it_names_the_same_frame():
    site = {"file": KERNEL_CELL, "line": 7, "shapes": {"a": [2, 3], "b": [2, 4]}, "last": {}}
    assert failing_line(kernel_error(SENT, site)) == "return a + b"
    assert _shapes_hint(kernel_error(SENT,
                                     site))[1].startswith("3 is a's size at dim 1 and 4 is b's size at dim 1")
    for other in ({**site, "line": 8}, {**site, "file": "/elsewhere.py"}, "not a dict"):
        assert failing_line(kernel_error(SENT, other)) == "" and _shapes_hint(kernel_error(SENT,
                                                                                           other)) == ("",
                                                                                                       None)


def test_the_kernels_shapes_are_taken_only_as_plain_names_and_sizes():
    assert _plain_shapes({"a": [2, 3], "b": []}) == {"a": (2, 3), "b": ()}
    bad = {"not a name": [1], "c": [-1], "d": [1.5], "e": "2x3", "f": [True], "g": [1] * 17, "h" * 65: [1],
           3: [1]}
    assert _plain_shapes(bad) == {}
    assert len(_plain_shapes({f"t{i}": [i] for i in range(40)})) == 16
    assert _plain_shapes([("a", [2])]) == {}


@pytest.mark.parametrize("params,expected", [
    (["a", "b"], ["a", "b"]), (["a", "not a name"], []), ("a b", []), (["x" * 65], [])])
def test_the_entrys_parameters_are_taken_only_as_names(params, expected):
    e = kernel_error(SENT, {"entry": {"name": "add", "params": params}})
    assert explain._entry_params(e, "add") == expected
    assert explain._entry_params(e, "other") == []  # not the function the frames say
