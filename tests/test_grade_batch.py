"""`python -m autograder grade` as an instructor runs it on a class: a lesson-05 class laid out as nbgrader
lays it out (submitted/<student>/05_masks/05_masks.ipynb), graded by the command line, stopped by SIGINT
mid-batch and started again, one student graded again, and the class graded in shards by three processes and
merged. The reasons the report gives (a SyntaxError, an exception at definition, a cell that did not run, the
answer imported from solutions) are the true ones. Plus the pieces that need no kernel."""
import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import nbformat
import pytest

from autograder.grade import ReportError, merge, shard_of, student_of
from autograder.kernel import _error_of
from autograder.notebooks import LESSONS, lesson_paths, solved
from autograder.submission import _lessons, answer_imports, cell_facts
from tests.submissions.corpus import _insert, _lean, _set_solution

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSON = "05_masks"
STUDENTS = ("alice", "bob", "carol")
MASKS = ["padding_mask", "causal_mask", "target_mask"]
FULL = 11.0   # padding_mask 4, causal_mask 3, target_mask 4

SOLVED = _lean(solved(LESSONS / f"{LESSON}.ipynb"))
# in flight when the batch stops
SLEEPS = _insert(SOLVED, "check_padding_mask", "import time\ntime.sleep(900)")
# target_mask reading the length from a dimension the ids do not have: an error raised in the kernel, which
# the message shows with the call as the check made it, its argument named as the notebook names it
WRONG_TARGET = _set_solution(SOLVED, "target_mask", "def target_mask(tgt_ids, pad_id=PAD):\n"
                             "    L = tgt_ids.shape[2]\n"
                             "    return padding_mask(tgt_ids, pad_id) & causal_mask(L, tgt_ids.device)")
BROKEN = _insert(_set_solution(_set_solution(_set_solution(
    SOLVED, "padding_mask", "import nonexistent_module_x\n\n\ndef padding_mask(ids, pad_id=PAD):\n"
                            "    return ids != pad_id"),
    "causal_mask", "def causal_mask(size, device=None):\n    return (\n"),
    "target_mask", "from solutions.masks import target_mask"),
    "check_target_mask", "import os\nos._exit(1)")


def _path(folder, student):
    return folder / "submitted" / student / LESSON / f"{LESSON}.ipynb"


def _write(folder, student, nb):
    path = _path(folder, student)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def _command(folder, *args, **kwargs):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]]
                                                                     if os.environ.get("PYTHONPATH")
                                                                     else [])))
    return subprocess.Popen([sys.executable, "-m", "autograder", *args], cwd=str(folder), env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def _run(folder, *args, timeout=600):
    proc = _command(folder, *args)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _notebooks(path):
    return {n["path"]: n for n in json.loads(pathlib.Path(path).read_text())["notebooks"]}


# as the instructor's glob gives them
NOTEBOOKS = [f"submitted/{s}/{LESSON}/{LESSON}.ipynb" for s in STUDENTS]


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """The class graded as an instructor would: stopped by SIGINT while bob's notebook runs (alice's done),
    then the same command again (bob's file fixed meanwhile), then carol graded again after she
    resubmitted."""
    folder = tmp_path_factory.mktemp("class")
    _write(folder, "alice", SOLVED)
    _write(folder, "bob", SLEEPS)
    _write(folder, "carol", BROKEN)
    args = ["grade", *NOTEBOOKS, "--json", "report.json", "--csv", "grades.csv", "--jobs", "1"]
    first = _command(folder, *args)
    deadline = time.time() + 300
    while time.time() < deadline and first.poll() is None:
        try:
            if len(json.loads((folder / "report.json").read_text())["notebooks"]) >= 1:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    time.sleep(3)  # bob's notebook is under way (its kernel sleeps)
    first.send_signal(signal.SIGINT)
    out1, err1 = first.communicate(timeout=120)
    stopped = {"rc": first.returncode, "out": out1, "err": err1, "report": _notebooks(folder / "report.json"),
               "csv": _rows(folder / "grades.csv")}
    _write(folder, "bob", WRONG_TARGET)
    rc, out2, err2 = _run(folder, *args)
    resumed = {"rc": rc, "out": out2, "err": err2, "report": _notebooks(folder / "report.json"),
               "csv": _rows(folder / "grades.csv")}
    _write(folder, "carol", SOLVED)
    rc, out3, err3 = _run(folder, "grade", NOTEBOOKS[2], "--json", "report.json", "--csv", "grades.csv")
    regraded = {"rc": rc, "out": out3, "err": err3, "report": _notebooks(folder / "report.json"),
                "csv": _rows(folder / "grades.csv")}
    return folder, stopped, resumed, regraded


def test_sigint_keeps_what_was_graded_and_exits_with_one_line(klass):
    _, stopped, _, _ = klass
    assert stopped["rc"] == 128 + signal.SIGINT, stopped
    assert "Traceback" not in stopped["err"], stopped["err"]
    last = stopped["err"].strip().splitlines()[-1]
    assert last.startswith("interrupted (SIGINT): 1 of 3 notebooks graded in this run, "
                           "kept in report.json"), last
    assert list(stopped["report"]) == [NOTEBOOKS[0]], stopped["report"].keys()
    alice = stopped["report"][NOTEBOOKS[0]]
    assert alice["points"] == FULL and alice["student"] == "alice" and len(alice["sha256"]) == 64
    assert stopped["csv"] == [["student", "check_padding_mask", "check_causal_mask", "check_target_mask",
                               "total"],
                              ["alice", "4", "3", "4", "11"]]


def test_the_same_command_goes_on_without_grading_again(klass):
    """alice's grade is kept (the same graded_at, the stderr says so); bob's (changed since) and carol's are
    graded."""
    _, stopped, resumed, _ = klass
    assert resumed["rc"] == 1, resumed["err"]  # carol's kernel dies: an error in the report
    assert "1 of 3 notebooks kept from report.json" in resumed["err"], resumed["err"]
    assert "graded 2 of 2" in resumed["err"] and "graded 3 of" not in resumed["err"], resumed["err"]
    alice = resumed["report"][NOTEBOOKS[0]]
    assert alice == stopped["report"][NOTEBOOKS[0]]
    assert list(resumed["report"]) == NOTEBOOKS
    lines = [line for line in resumed["out"].splitlines() if " TOTAL " in line]
    assert [line.split()[0] for line in lines] == [f"{s}/{LESSON}/{LESSON}.ipynb" for s in STUDENTS], lines
    assert "kept: graded before" in lines[0] and "1 of 3" in lines[0] and "3 of 3" in lines[2], lines
    assert f"{LESSON}: 3 notebooks, mean" in resumed["out"] and "failed by" in resumed["out"], resumed["out"]


def test_the_reasons_are_true(klass):
    """carol's notebook: padding_mask's cell raises at its first line, causal_mask's has a SyntaxError,
    target_mask is the course's (imported), and the kernel dies before target_mask's graded cell. bob's
    target_mask raises a size IndexError in the kernel: the call is shown with its parameter's name."""
    _, _, resumed, _ = klass
    carol = resumed["report"][NOTEBOOKS[2]]
    said = {c["grade_id"]: c["message"] for c in carol["cells"]}
    assert carol["points"] == 0
    assert said["check_padding_mask"] == ("✗ padding_mask is not defined: cell 3, which defines it, raised "
                                          "ModuleNotFoundError: No module named 'nonexistent_module_x' at "
                                          "line 1")
    assert said["check_causal_mask"].startswith("✗ causal_mask is not defined: cell 5, which defines it, has "
                                                "a SyntaxError at line 2"), said
    assert "run the cell that defines it" not in "\n".join(said.values())
    assert said["check_target_mask"].startswith(
        "not run: the kernel died while running the notebook's cell 8"), said
    assert any(p.startswith("imports the graded stage's answer from solutions (cell 7: "
                            "solutions.masks.target_mask)")
               for p in carol["problems"]), carol["problems"]
    assert "note: imports the graded stage's answer from solutions" in resumed["out"]
    bob = resumed["report"][NOTEBOOKS[1]]
    assert bob["points"] == 7.0, bob
    target = next(c["message"] for c in bob["cells"] if c["grade_id"] == "check_target_mask")
    assert ("your code raised IndexError: tuple index out of range "
            "(in target_mask, line 2: `L = tgt_ids.shape[2]`)") \
        in target and "the call was target_mask(tgt_ids (2, 5))" in target, target


def test_the_csv_has_a_row_per_student_and_a_regrade_changes_only_that_row(klass):
    _, _, resumed, regraded = klass
    header = ["student", "check_padding_mask", "check_causal_mask", "check_target_mask", "total"]
    assert resumed["csv"] == [header, ["alice", "4", "3", "4", "11"], ["bob", "4", "3", "0", "7"],
                              ["carol", "0", "0", "0", "0"]]
    assert regraded["rc"] == 0, regraded["err"]
    assert regraded["csv"] == resumed["csv"][:3] + [["carol", "4", "3", "4", "11"]]
    for path in NOTEBOOKS[:2]:
        assert regraded["report"][path] == resumed["report"][path]
    assert regraded["report"][NOTEBOOKS[2]]["graded_at"] >= resumed["report"][NOTEBOOKS[2]]["graded_at"]
    assert regraded["report"][NOTEBOOKS[2]]["sha256"] != resumed["report"][NOTEBOOKS[2]]["sha256"]


def test_shards_in_three_processes_merge_to_the_unsharded_report(klass):
    folder, _, _, regraded = klass
    count = 3
    assert sorted({shard_of(p, count) for p
                   in NOTEBOOKS}) != [0], "the shares must differ for the test to prove it"
    procs = [_command(folder, "grade", *NOTEBOOKS[::-1] if k % 2 else NOTEBOOKS, "--shard", f"{k}/{count}",
                      "--json", f"shard-{k}.json", "--jobs", "1") for k in range(count)]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    for k in range(count):
        report = json.loads((folder / f"shard-{k}.json").read_text())
        assert report["shard"]["assigned"] == [p for p in NOTEBOOKS if shard_of(p, count) == k]
    rc, out, err = _run(folder, "merge", *[f"shard-{k}.json" for k in range(count)], "--json", "merged.json",
                        "--csv", "merged.csv")
    assert rc == 0, err
    merged = _notebooks(folder / "merged.json")
    assert list(merged) == NOTEBOOKS
    keys = ("points", "max_points", "error", "sha256", "student", "lesson")
    for path in NOTEBOOKS:
        assert {k: merged[path][k] for k in keys} == {k: regraded["report"][path][k] for k in keys}, path
        assert [(c["grade_id"], c["points"], c["message"]) for c in merged[path]["cells"]] == \
            [(c["grade_id"], c["points"], c["message"]) for c in regraded["report"][path]["cells"]]
    assert _rows(folder / "merged.csv") == regraded["csv"]
    # a shard left out is named
    rc, _, err = _run(folder, "merge", "shard-0.json", "shard-2.json", "--json", "partial.json")
    assert rc == 1 and "missing: no report of shard 1/3" in err, err


# ------------------------------------------------------------------------------------------- without a kernel
@pytest.mark.parametrize("source, found", [
    ("from solutions.masks import padding_mask", "solutions.masks.padding_mask"),
    ("import solutions\n\npadding_mask = solutions.padding_mask", "solutions.padding_mask"),
    ("import solutions\n\ndef causal_mask(size, device=None):\n"
     "    return solutions.masks.causal_mask(size, device)",
     "solutions.masks.causal_mask"),
    ("exec(open('../solutions/masks.py').read())", "a text naming solutions and masks"),
    ("from solutions import *", "solutions.*"),
    ("def target_mask(:\nfrom solutions.masks import target_mask", "solutions.masks.target_mask"),
])
def test_the_answer_taken_from_solutions_is_named(source, found):
    cells = [{"metadata": {"autograder": cell_facts(source)}}]
    assert answer_imports(cells, LESSON, MASKS) == [f"cell 1: {found}"]


def test_no_lesson_is_taken_for_a_submission_that_borrows():
    """What the lessons themselves do with solutions (the given names of the graded module, a demonstration
    that falls back on the course's answer, an earlier stage) is not the answer taken; the same names for
    another lesson than the graded one are not either."""
    checks = {stem: [gid[len("check_"):] for gid in ids] for stem, _, ids in _lessons()}
    for path in lesson_paths():
        for nb in (nbformat.read(str(path), as_version=4), solved(path)):
            cells = [{"metadata": {"autograder": cell_facts(c.source),
                                   "nbgrader": c.metadata.get("nbgrader")}}
                     if c.cell_type == "code" else {} for c in nb.cells]
            assert answer_imports(cells, path.stem, checks.get(path.stem, [])) == [], path.stem
    earlier = [{"metadata": {"autograder": cell_facts("from solutions import padding_mask")}}]
    assert answer_imports(earlier, "08_encoder", checks["08_encoder"]) == []


def test_cell_errors_are_read_from_the_kernels_messages():
    syntax = _error_of({"ename": "SyntaxError", "evalue": "incomplete input (370628644.py, line 3)"})
    assert syntax == {"ename": "SyntaxError", "evalue": "incomplete input", "line": 3}
    raised = _error_of({"ename": "NameError", "evalue": "name 'nn' is not defined", "traceback": [
        "\x1b[0;31m-----\x1b[0m",
        "Cell \x1b[0;32mIn[4], line 2\x1b[0m\n\x1b[0;32m----> 2\x1b[0m class A(nn.Module):",
        "Cell \x1b[0;32mIn[4], line 9\x1b[0m, in f()"]})
    assert raised == {"ename": "NameError", "evalue": "name 'nn' is not defined", "line": 2}
    assert _error_of("not a dict") == {"ename": "", "evalue": "", "line": None}


def test_students_and_shards():
    assert student_of("class/submitted/dana/05_masks/05_masks.ipynb") == "dana"
    assert student_of("/srv/hw/erin.ipynb") == "erin"
    paths = [f"submitted/s{i}/{LESSON}/{LESSON}.ipynb" for i in range(40)]
    shares = [shard_of(p, 4) for p in paths]
    assert sorted(set(shares)) == [0, 1, 2, 3]
    assert [shard_of(p, 4) for p in reversed(paths)] == shares[::-1]   # each path's own, whatever the order
    assert shard_of("./" + paths[0], 4) == shares[0]


def _report(path, notebooks, **extra):
    path.write_text(json.dumps({"notebooks": notebooks, "isolation": True, "safe": True, "tampering": [],
                                **extra}))
    return path


def _entry(path, points, sha="a" * 64):
    return {"path": path, "points": points, "max_points": 4.0, "error": None, "lesson": LESSON, "sha256": sha,
            "cells": [{"grade_id": "check_padding_mask", "points": points, "max_points": 4.0, "message": ""}]}


def test_merge_refuses_overlaps_that_disagree_and_says_what_is_missing(tmp_path):
    a = _report(tmp_path / "a.json", [_entry("x.ipynb", 4.0), _entry("y.ipynb", 1.0)],
                shard={"index": 0, "count": 3, "assigned": ["x.ipynb", "y.ipynb", "z.ipynb"]})
    b = _report(tmp_path / "b.json", [_entry("y.ipynb", 1.0)], shard={"index": 1, "count": 3,
                                                                      "assigned": ["y.ipynb"]})
    merged, missing = merge([a, b], tmp_path / "m.json")
    assert [n["path"] for n in merged["notebooks"]] == ["x.ipynb", "y.ipynb"]   # the same result twice: once
    assert missing == ["no report of shard 2/3",
                       f"1 notebook of shard 0/3 not graded ({a}: its batch was stopped?): z.ipynb"]
    c = _report(tmp_path / "c.json", [_entry("y.ipynb", 2.0)])
    with pytest.raises(ReportError, match="y.ipynb is in .* with different results"):
        merge([a, c], tmp_path / "m2.json")
    assert not (tmp_path / "m2.json").exists()


def test_bad_input_is_one_line_and_status_2(tmp_path):
    rc, out, err = _run(tmp_path, "grade", "x.ipynb", "--lesson", "5_masks")
    assert rc == 2 and err.count("\n") == 1 and "05_masks" in err and "01_tokenization" in err, err
    notes = tmp_path / "notes.json"
    notes.write_text("my notes, not a report")
    rc, out, err = _run(tmp_path, "grade", "x.ipynb", "--json", "notes.json")
    assert rc == 2 and err.count("\n") == 1 and "not a grade report" in err, err
    assert notes.read_text() == "my notes, not a report"
    rc, out, err = _run(tmp_path, "grade", "x.ipynb", "--shard", "3/3")
    assert rc == 2 and err.count("\n") == 1, err
