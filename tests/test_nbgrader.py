"""The instructor's path through real nbgrader on lesson 03: build the course, generate the assignment (it
must reproduce the lesson), autograde three students (solved, untouched, one classic mistake), export the
grades. On lesson 05: a submission that imports the graded stage's answer from solutions (or hands in a
solutions/ of its own) earns nothing, the honest one full marks."""
import csv
import pathlib
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder.notebooks import LESSONS, solved

pytest.importorskip("nbgrader")
LESSON = "03_attention"


def nbgrader(course, *args):
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    subprocess.run([sys.executable, "-m", "autograder", "nbgrader-course", str(root), "--lessons", LESSON],
                   check=True, capture_output=True)
    nbgrader(root, "generate_assignment", LESSON, "--force")
    return root


def test_generate_assignment_reproduces_the_lesson(course):
    released = nbformat.read(str(course / "release" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    lesson = nbformat.read(str(LESSONS / f"{LESSON}.ipynb"), as_version=4)
    assert [c.source for c in released.cells] == [c.source for c in lesson.cells]
    assert [c.cell_type for c in released.cells] == [c.cell_type for c in lesson.cells]


def submit(course, student, nb):
    folder = course / "submitted" / student / LESSON
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / f"{LESSON}.ipynb"))


def test_autograde_and_export(course):
    released = nbformat.read(str(course / "release" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    good = solved(LESSONS / f"{LESSON}.ipynb")
    mistake = solved(LESSONS / f"{LESSON}.ipynb")
    for cell in mistake.cells:  # the classic one: softmax over the queries
        if "def scaled_dot_product_attention" in cell.source:
            assert "softmax(scores, dim=-1)" in cell.source
            cell.source = cell.source.replace("softmax(scores, dim=-1)", "softmax(scores, dim=-2)")
    submit(course, "alice", good)
    submit(course, "bob", released)
    submit(course, "carol", mistake)
    nbgrader(course, "autograde", LESSON, "--force")
    nbgrader(course, "export", "--to", "grades.csv")
    rows = {r["student_id"]: r for r in csv.DictReader(open(course / "grades.csv"))}
    score = {s: float(rows[s]["raw_score"]) for s in ("alice", "bob", "carol")}
    top = float(rows["alice"]["max_score"])
    assert top == 10 and score["alice"] == top, score
    assert score["bob"] == 0, score
    assert 0 < score["carol"] < top, score
    nbgrader(course, "generate_feedback", LESSON, "--force")
    feedback = next((course / "feedback" / "carol" / LESSON).glob("*.html")).read_text()
    assert "softmax over the queries" in feedback
    # the feedback's list of graded cells names each test cell (nbgrader's own template says "Test cell")
    assert ">check(softmax)</a> (Score: " in feedback
    assert ">check(scaled_dot_product_attention)</a> (Score: " in feedback
    assert ">Test cell<" not in feedback


def test_autograde_every_lesson_in_one_call(course):
    """README: `nbgrader autograde "*"` grades every released lesson at once (nbgrader reads the name as a
    pattern); the same grades as one call per lesson."""
    if not (course / "submitted" / "alice" / LESSON).exists():
        pytest.skip("needs test_autograde_and_export's submissions")
    before = {r["student_id"]: r["raw_score"] for r in csv.DictReader(open(course / "grades.csv"))}
    shutil.rmtree(course / "autograded")
    nbgrader(course, "autograde", "*", "--force")
    assert sorted(p.parent.parent.name for p
                  in (course / "autograded").glob(f"*/{LESSON}/{LESSON}.ipynb")) == \
        ["alice", "bob", "carol"]
    nbgrader(course, "export", "--to", "grades.csv")
    after = {r["student_id"]: r["raw_score"] for r in csv.DictReader(open(course / "grades.csv"))}
    assert after == before


def test_a_rebuild_keeps_the_instructors_config(tmp_path):
    """nbgrader_config.py says "edit freely": building the course again (to add a lesson) keeps the edits."""
    from autograder.course import build_course
    root = build_course(tmp_path / "course", [LESSON])
    config = root / "nbgrader_config.py"
    config.write_text(config.read_text() + "c.Execute.timeout = 1200\n")
    build_course(root, [LESSON, "04_multi_head_attention"])
    assert config.read_text().endswith("c.Execute.timeout = 1200\n")
    assert (root / "source" / "04_multi_head_attention" / "04_multi_head_attention.ipynb").exists()


def test_importing_the_graded_stages_answer_earns_nothing(tmp_path):
    """Lesson 05 under nbgrader: graded cells that import padding_mask, causal_mask and target_mask from
    solutions got 11/11 when the kernel imported the instructor's whole reference; against the stage-limited
    solutions/ that nbgrader-course puts beside each submission they get 0, and so does a student who hands in
    the whole reference as solutions/ of their own (with masks as a package folder, which Python prefers to
    masks.py). The honest solved lesson keeps its 11. The kernel runs under NBGRADER_EXECUTION=autograde,
    which the lessons' training demonstrations read (solutions/toy_tasks.py)."""
    lesson = "05_masks"
    subprocess.run([sys.executable, "-m", "autograder", "nbgrader-course", str(tmp_path), "--lessons",
                    lesson],
                   check=True, capture_output=True)
    nbgrader(tmp_path, "generate_assignment", lesson, "--force")
    masks = tmp_path / "release" / lesson / "solutions" / "masks.py"
    assert masks.read_text().count("NotImplementedError") == 3
    probe = nbformat.v4.new_code_cell("import os, solutions\nprint(os.environ.get('NBGRADER_EXECUTION'), "
                                      "solutions.__file__)")
    honest = solved(LESSONS / f"{lesson}.ipynb")
    honest.cells.append(probe)
    importer = solved(LESSONS / f"{lesson}.ipynb")
    names = []
    for cell in importer.cells:
        if cell.get("metadata", {}).get("course", {}).get("names"):
            names += cell.metadata.course.names
            cell.source = "".join(f"from solutions.masks import {name}\n" for name
                                  in cell.metadata.course.names)
    assert names == ["padding_mask", "causal_mask", "target_mask"]
    for student, nb in (("alice", honest), ("mallory", importer), ("trudy", importer)):
        folder = tmp_path / "submitted" / student / lesson
        folder.mkdir(parents=True)
        nbformat.write(nb, str(folder / f"{lesson}.ipynb"))
    own = tmp_path / "submitted" / "trudy" / lesson / "solutions"
    shutil.copytree(pathlib.Path(__file__).resolve().parents[1] / "solutions", own,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (own / "masks").mkdir()
    (own / "masks" / "__init__.py").write_text((own / "masks.py").read_text().replace("from .tokenization",
                                                                                      "from ..tokenization"))
    nbgrader(tmp_path, "autograde", lesson, "--force")
    nbgrader(tmp_path, "export", "--to", "grades.csv")
    rows = {r["student_id"]: r for r in csv.DictReader(open(tmp_path / "grades.csv"))}
    score = {s: float(rows[s]["raw_score"]) for s in ("alice", "mallory", "trudy")}
    assert float(rows["alice"]["max_score"]) == 11 and score == {"alice": 11, "mallory": 0, "trudy": 0}, score
    graded = nbformat.read(str(tmp_path / "autograded" / "alice" / lesson / f"{lesson}.ipynb"), as_version=4)
    printed = graded.cells[-1].outputs[0]["text"].split()
    assert printed == ["autograde",
                       str(tmp_path / "autograded" / "alice" / lesson / "solutions" / "__init__.py")]
    assert not (tmp_path / "autograded" / "trudy" / lesson / "solutions" / "masks").exists()


def test_demonstrations_run_short_under_a_grader(monkeypatch):
    from solutions import toy_tasks
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert toy_tasks.demo_steps(600) == 600
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert toy_tasks.demo_steps(600) == toy_tasks.GRADED_STEPS == 20 and toy_tasks.demo_steps(5) == 5
    _, losses, _ = toy_tasks.train(toy_tasks.copy, steps=1000)
    assert len(losses) == 20
