"""The notebook runner's layer on its own (autograder/kernel.py, runner.py, records.py, outcomes.py): the
records that cross between the grade command's processes, how a run's ending becomes the notebook's error, and
how a check's outcome is decided by its type, never by its message. No kernel is started here
(tests/test_hostile.py runs them whole)."""
import json
import time

import nbformat
import pytest

from autograder import kernel
from autograder.core import Check, CheckFailure, run_check, run_named
from autograder.outcomes import Ending, Outcome, check_line, failed_title, name_lines
from autograder.records import CheckerSpec, NameVerdict, NotebookResult, RunSpec, RunStatus
from autograder.remote import ChannelError


# ------------------------------------------------------------------------------------------ records
def test_a_record_is_its_fields_in_order_and_reads_back():
    spec = CheckerSpec(socket="/s", results="/r", cells={"n1": "softmax"}, uid=None, threads=2, tmp="/t",
                       memory=5)
    assert list(spec.to_json()) == ["socket", "results", "cells", "uid", "threads", "tmp", "memory"]
    assert CheckerSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_a_record_from_an_older_or_shorter_file_takes_the_defaults_and_drops_what_it_does_not_know():
    status = RunStatus.from_json({"error": "DeadKernelError: Kernel died", "cell": 3, "from_the_future": 1})
    assert (status.error, status.cell, status.stopped, status.ending, status.errors) == \
        ("DeadKernelError: Kernel died", 3, False, None, {})


def test_the_notebooks_record_is_the_reports_entry(tmp_path):
    """grade_notebook's dict, key for key and in order, is what the report has always held."""
    r = NotebookResult(path="a.ipynb", max_points=2.0, cells=[kernel.CellResult("check_x", 0.0, 2.0, "why")])
    assert list(r.to_json()) == ["path", "points", "max_points", "error", "problems", "cells", "seconds",
                                 "isolated", "lesson"]
    assert r.to_json()["cells"] == [{"grade_id": "check_x", "points": 0.0, "max_points": 2.0,
                                     "message": "why"}]
    assert NotebookResult.from_json(r.to_json()) == r
    spec = RunSpec(prepared="p", status="s", work="w", cell_timeout=1, log="l", timeout=2, deadline=3.0,
                   checker="c", private="v", ipc="i", connection_file="f", sealed="x")
    spec.write(tmp_path / "spec.json")
    assert RunSpec.read(tmp_path / "spec.json") == spec


def test_the_checkers_results_file_is_read_first_verdict_per_cell(tmp_path):
    path = tmp_path / "results.jsonl"
    lines = [NameVerdict(cell="n1", name="softmax", points=1.0).to_json(), "not json",
             NameVerdict(cell="n1", name="softmax", points=2.0).to_json(), {"cell": 7}]
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines))
    verdicts = kernel._results(path)
    assert list(verdicts) == ["n1"] and verdicts["n1"].points == 1.0


# ------------------------------------------------------------------------------- how a run ended
def _ending(e, cell=None, stopped=False):
    status = RunStatus(error=f"{type(e).__name__}: {e}", cell=cell, stopped=stopped)
    return kernel._ending(e, status)


def test_the_runner_names_how_the_run_ended_by_the_errors_type():
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    assert _ending(DeadKernelError("Kernel died"), cell=4) is Ending.DEAD_KERNEL
    assert _ending(RuntimeError("Kernel died before replying to kernel_info")) is Ending.DEAD_KERNEL
    assert _ending(RuntimeError("the checker did not start")) is Ending.NO_START
    assert _ending(CellTimeoutError("Cell execution timed out"), cell=2) is Ending.CELL_TIMEOUT
    assert _ending(ValueError("a Timeout in the text is not a timeout"), cell=2) is Ending.OTHER
    assert _ending(kernel._Stop("stopped after 1 s"), cell=2, stopped=True) is Ending.STOPPED


@pytest.mark.parametrize("ending, cell, expected", [
    (Ending.DEAD_KERNEL, 1, "the kernel died while running the notebook's cell 5 (the notebook's code "
                            "exited, was killed, or crashed): the cells after it did not run"),
    (Ending.DEAD_KERNEL, 0, "the kernel died while grading (the notebook's code exited, was killed, or "
                            "crashed): the cells after it did not run"),
    (Ending.NO_START, None, "the kernel could not start: E: x (the log's last line)"),
    (Ending.CELL_TIMEOUT, 1, "a cell while running the notebook's cell 5 ran past 9 s and could not be "
                             "interrupted"),
    (Ending.OTHER, None, "the run stopped: E: x"),
])
def test_the_notebooks_error_is_written_from_the_ending(tmp_path, ending, cell, expected):
    (tmp_path / "kernel.log").write_text("first\nthe log's last line\n")
    run = kernel._Run(timeout=60, cell_timeout=9, memory_gb=1, threads=1, protected=[], isolated=False,
                      checker_server=None, kernel_server=None, start=time.time())
    run.origin = [None, 5]
    run.status = RunStatus(error="E: x", cell=cell, ending=ending.value)
    assert kernel._run_error(run, False, tmp_path / "kernel.log") == expected
    run.status.stopped = True
    stopped = kernel._run_error(run, False, tmp_path / "kernel.log")
    assert stopped == "stopped after 60 s (the notebook's time limit)"


def test_a_runner_that_left_no_status_could_not_start(tmp_path):
    status = kernel._read_status(tmp_path / "status.json", "Traceback\nMemoryError: out of memory\n")
    assert status.error == "the grader's runner failed: MemoryError: out of memory"
    assert Ending(status.ending) is Ending.NO_START


# ---------------------------------------------------------------------------------- check outcomes
def _check(fn, timeout=5.0):
    return Check("softmax", "rows sum to 1", 2.0, fn, timeout)


def _raise(e):
    def fn(obj):
        raise e
    return fn


def test_each_way_a_check_ends_is_an_outcome_and_its_line_is_unchanged():
    passed = run_check(_check(lambda obj: None), None)
    assert passed == (2.0, "✓ rows sum to 1 [2/2]") and passed.outcome is Outcome.PASSED
    failed = run_check(_check(_raise(CheckFailure("expected 1, got 1.5"))), None)
    assert failed == (0.0, "✗ rows sum to 1 [0/2]: expected 1, got 1.5") and failed.outcome is Outcome.FAILED
    slow = run_check(_check(lambda obj: time.sleep(5), timeout=0.2), None)
    assert slow.outcome is Outcome.TIMEOUT
    assert slow.line.startswith("✗ rows sum to 1 [0/2]: took longer than 0.2 s"), slow.line


def test_the_channel_breaking_is_known_by_its_type_not_by_the_words_of_the_line():
    closed = ChannelError("the other side closed the connection")
    assert run_check(_check(_raise(closed)), None, lost=(ChannelError,)).outcome is Outcome.LOST

    def wrapped(obj):  # a check that turns the broken call into its own failure
        try:
            raise ChannelError("the other side closed the connection")
        except ChannelError as e:
            raise CheckFailure(f"calling it failed: {e}") from e
    assert run_check(_check(wrapped), None, lost=(ChannelError,)).outcome is Outcome.LOST
    # the learner's own error that says the same words is the learner's: a failed check, not a lost kernel
    mimic = _raise(RuntimeError("ChannelError: the other side closed"))
    assert run_check(_check(mimic), None, lost=(ChannelError,)).outcome is Outcome.FAILED
    says_slow = run_check(_check(_raise(RuntimeError("took longer than 1 s"))), None)
    assert says_slow.outcome is Outcome.FAILED


def test_a_timeout_skips_the_names_other_checks(monkeypatch):
    from autograder import core
    checks = [_check(lambda obj: time.sleep(5), timeout=0.2), _check(lambda obj: None)]
    monkeypatch.setitem(core.REGISTRY, "softmax", checks)
    name, earned, total, lines = run_named("softmax", None)
    assert (name, earned, total) == ("softmax", 0.0, 4.0)
    assert lines[1] == "✗ rows sum to 1 [0/2]: skipped, an earlier check ran out of time"


def test_the_report_line_is_rendered_and_read_in_one_place():
    assert check_line("rows sum to 1", 2, False, "got 1.5") == "✗ rows sum to 1 [0/2]: got 1.5"
    assert check_line("rows sum to 1", 0.5, True) == "✓ rows sum to 1 [0.5/0.5]"
    assert check_line("t", 1, True, "") == "✓ t [1/1]: "  # CheckPassed with an empty note keeps its colon
    assert failed_title("✗ rows sum to 1 [0/2]: got 1.5") == "rows sum to 1"
    assert failed_title("✗ softmax is not defined: run it") == "softmax is not defined"
    assert failed_title("✓ rows sum to 1 [2/2]") is None
    assert name_lines(["✓ a [1/1]"], ["asked twice"], "the grader failed") == \
        ["✓ a [1/1]", "✗ refused: asked twice", "✗ the grader failed"]


# ------------------------------------------------------------------------------------- collect
def _collected(verdict, error=None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    nb.cells[0].metadata["autograder"] = {"defines": ["x"]}
    run = kernel._Run(timeout=60, cell_timeout=9, memory_gb=1, threads=1, protected=[], isolated=False,
                      checker_server=None, kernel_server=None, start=time.time())
    run.nonces, run.origin = {"n1": "softmax"}, [1, None]
    run.verdicts = {"n1": verdict} if verdict else {}
    return kernel._collect(nb, [("check_softmax", "softmax", 2.0)], run, error)


def test_a_cells_points_come_from_the_checkers_verdict_capped_and_voided_by_a_flag():
    [cell] = _collected(NameVerdict(cell="n1", name="softmax", points=5.0, lines=["✓ a [2/2]"]))
    assert (cell.points, cell.message) == (2.0, "✓ a [2/2]")
    flagged = NameVerdict(cell="n1", name="softmax", points=2.0, lines=["✓ a [2/2]"], flags=["f", "f"])
    [cell] = _collected(flagged)
    assert (cell.points, cell.message) == (0.0, "✓ a [2/2]\n✗ refused: f")
    [cell] = _collected(None, error="stopped after 60 s (the notebook's time limit)")
    assert cell.message == "not run: stopped after 60 s (the notebook's time limit)" and cell.points == 0.0


def test_an_undefined_name_is_said_why_from_the_verdicts_flag_not_its_text():
    verdict = NameVerdict(cell="n1", name="softmax", undefined=True,
                          lines=["✗ softmax is not defined: run the cell that defines it"])
    [cell] = _collected(verdict)
    why = "✗ softmax is not defined: no cell of the notebook defines it"
    assert cell.message.startswith(why), cell.message
    same_text = NameVerdict(cell="n1", name="softmax", lines=verdict.lines)  # the line alone decides nothing
    [cell] = _collected(same_text)
    assert cell.message == "✗ softmax is not defined: run the cell that defines it"
