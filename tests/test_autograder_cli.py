"""The instructor's command line (`python -m autograder`) answers a bad input as the course's other command
lines do (solutions/cli.py): one line on stderr that says what was wrong and what to do, exit status 2, before
anything is graded or written. Each case calls main() in this process (the subprocess runs are in
test_grade_batch, test_release and test_nbgrader); one case runs the real command, to see the line as a user
sees it."""
import subprocess
import sys

import pytest

from autograder import kernel
from autograder.__main__ import _parser, main
from tests.conftest import ROOT

BAD = [
    # (arguments, what the line must say): a limit that would not bound, or bound nothing
    (["grade", "--timeout", "-3", "x.ipynb"], "--timeout: must be > 0, got -3"),
    (["grade", "--timeout", "0", "x.ipynb"], "--timeout: must be > 0, got 0"),
    (["grade", "--cell-timeout", "-1", "x.ipynb"], "--cell-timeout: must be > 0, got -1"),
    (["grade", "--jobs", "0", "x.ipynb"], "--jobs/-j: must be >= 1, got 0"),
    (["grade", "-j", "two", "x.ipynb"], "expected an integer, got 'two'"),
    (["grade", "--memory", "0", "x.ipynb"], "--memory: must be > 0, got 0"),
    (["grade", "--memory", "-1", "x.ipynb"], "--memory: must be > 0, got -1"),
    (["grade", "--memory", "nan", "x.ipynb"], "expected a finite number, got 'nan'"),
    (["grade", "--memory", "inf", "x.ipynb"], "expected a finite number, got 'inf'"),
    (["grade", "--timeout", "1e400", "x.ipynb"], "expected a finite number, got '1e400'"),
    (["grade", "--memory", "lots", "x.ipynb"], "expected a number, got 'lots'"),
    (["grade", "--lesson", "5_masks", "x.ipynb"], "--lesson 5_masks is not a lesson; the lessons: 01_tok"),
    (["grade", "--shard", "3/3", "x.ipynb"], "--shard 3/3: expected K/N with 0 <= K < N"),
    (["grade"], "the following arguments are required: notebooks"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["release", "05_masks"], "the following arguments are required: --out"),
]


SUBCOMMANDS = ("grade", "merge", "release", "nbgrader-course")


def one_line(capsys, argv):
    """main(argv) must exit with status 2 and one line on stderr, nothing on stdout: that line."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2, (argv, stop.value.code, err)
    assert out == "" and err.count("\n") == 1 and err.endswith("\n"), (argv, out, err)
    prog = f"python -m autograder {argv[0]}" if argv[0] in SUBCOMMANDS else "python -m autograder"
    assert err.startswith(f"{prog}: error: "), err
    return err


@pytest.mark.parametrize("argv,says", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_argument_is_one_line_and_status_2(capsys, argv, says):
    err = one_line(capsys, argv)
    assert says in err, (says, err)


def test_an_output_the_command_could_not_write_is_refused_before_grading(capsys, tmp_path):
    """--json and --csv into a folder that is not there, or onto a folder: refused at once, not after an hour
    of grading (the report was written only at the end, with a FileNotFoundError traceback)."""
    missing = tmp_path / "no" / "r.json"
    err = one_line(capsys, ["grade", "--json", str(missing), "x.ipynb"])
    assert f"there is no folder {missing.parent}" in err
    err = one_line(capsys, ["grade", "--csv", str(tmp_path), "x.ipynb"])
    assert "is a folder" in err
    err = one_line(capsys, ["merge", "a.json", "--json", str(missing)])
    assert "there is no folder" in err
    assert not missing.parent.exists()


def test_a_merge_input_that_is_no_report_says_what_merge_takes(capsys, tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}')
    err = one_line(capsys, ["merge", str(notes), "--json", str(tmp_path / "m.json")])
    assert "is not a grade report" in err and "merge takes the --json reports that grade wrote" in err
    assert "give --json another file" not in err and not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("value", ["abc", "0", "-2", "nan", "inf"])
def test_a_bad_memory_in_the_environment_is_refused(capsys, monkeypatch, value):
    """$AUTOGRADER_MEMORY_GB=0 would have lifted the kernels' memory bound (0 meant none) instead of setting
    one."""
    monkeypatch.setenv("AUTOGRADER_MEMORY_GB", value)
    err = one_line(capsys, ["grade", "x.ipynb"])
    assert f"AUTOGRADER_MEMORY_GB={value!r}: expected a finite number of GB > 0" in err


def test_an_unknown_lesson_for_nbgrader_is_refused_before_the_folder_is_made(capsys, tmp_path):
    err = one_line(capsys, ["nbgrader-course", str(tmp_path / "course"), "--lessons", "05_masks", "99_nope"])
    assert "--lessons: not a lesson: 99_nope; the lessons: 01_tokenization" in err
    assert not (tmp_path / "course").exists()


def test_a_file_where_a_folder_is_wanted_is_refused(capsys, tmp_path):
    thesis = tmp_path / "thesis.tex"
    thesis.write_text("mine")
    err = one_line(capsys, ["release", "05_masks", "--out", str(thesis)])
    assert "is a file: give a folder" in err
    err = one_line(capsys, ["nbgrader-course", str(thesis)])
    assert "is a file: give a folder" in err
    assert thesis.read_text() == "mine"


@pytest.mark.parametrize("limits", [dict(memory_gb=0), dict(memory_gb=None), dict(memory_gb=float("inf")),
                                    dict(timeout=-1), dict(cell_timeout=0), dict(cell_timeout=float("nan"))])
def test_the_library_refuses_a_limit_that_would_not_bound(limits, tmp_path):
    """grade() and run_notebook() themselves, not only the command: a memory of 0 or None would set no
    bound (RLIMIT_AS not set), so it is refused before any notebook runs."""
    from autograder.grade import grade
    from autograder.kernel import run_notebook
    with pytest.raises(ValueError, match="must be a finite number > 0"):
        grade([str(tmp_path / "x.ipynb")], **limits)
    with pytest.raises(ValueError, match="must be a finite number > 0"):
        run_notebook(tmp_path / "x.ipynb", **limits)


def test_grade_s_help_states_the_defaults_the_grader_uses():
    parser = _parser()
    args = parser.parse_args(["grade", "x.ipynb"])
    assert (args.timeout, args.cell_timeout) == (kernel.NOTEBOOK_TIMEOUT, kernel.CELL_TIMEOUT)
    grade_help = parser._subparsers._group_actions[0].choices["grade"].format_help()
    flat = " ".join(grade_help.split())
    assert f"seconds per notebook (default {kernel.NOTEBOOK_TIMEOUT:g})" in flat
    assert f"seconds per cell (default {kernel.CELL_TIMEOUT:g})" in flat
    assert "GB of address space for each kernel (default 4, or $AUTOGRADER_MEMORY_GB)" in flat


def test_the_real_command_prints_the_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", "--memory", "0", "x.ipynb"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr == ("python -m autograder grade: error: argument --memory: must be > 0, got 0 "
                           "(see python -m autograder grade --help)\n"), done.stderr
