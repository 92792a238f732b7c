"""A class release (`python -m autograder release`): what students get for lesson 05 installs with the
README's two commands and runs its lessons; no answer of stage 05 or a later stage is in it (and the search
for one finds a planted one); the next release updates the same folder; the graded stage's own checks work in
it."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from autograder.notebooks import COURSE_REPO, ROOT, solution_source
from autograder.release import ReleaseError, answer_text, build_release, hidden_modules, leaks

LESSON = "05_masks"
REPO = "my-school/transformer-2027"
FIVE = ["01_tokenization", "02_positional_encoding", "03_attention", "04_multi_head_attention", "05_masks"]


def without_the_course(env=None):
    """The environment of a student's shell: nothing on PYTHONPATH (the tests put the course's own folder
    there)."""
    env = dict(env or os.environ)
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("class") / "release"
    proc = subprocess.run([sys.executable, "-m", "autograder", "release", LESSON, "--out", str(out), "--repo",
                           REPO],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_the_release_holds_the_lessons_up_to_05_pointing_at_the_class(release):
    assert sorted(p.stem for p in (release / "lessons").glob("*.ipynb")) == FIVE
    for name in ("README.md", "requirements.txt", "pyproject.toml", "conftest.py", "binder/postBuild",
                 "binder/requirements.txt", "autograder/checks/stage05_masks.py",
                 "autograder/fixtures/stage01_bpe.json"):
        assert (release / name).is_file(), name
    assert not (release / ".git").exists() and not (release / "tests").exists()
    readme = (release / "README.md").read_text()
    assert f"mybinder.org/v2/gh/{REPO}/HEAD" in readme
    assert readme.count(f"colab.research.google.com/github/{REPO}/blob/main/lessons/") == 5
    for stem in FIVE:
        text = (release / "lessons" / f"{stem}.ipynb").read_text()
        assert f"colab.research.google.com/github/{REPO}/blob/main/lessons/{stem}.ipynb" in text, stem
        # the Colab set-up cell installs the release
        assert f"git+https://github.com/{REPO}" in text, stem
        assert COURSE_REPO not in text, stem
    # the graded stage and the later ones are nbgrader's stubs; the earlier ones are the reference, unchanged
    masks = (release / "solutions" / "masks.py").read_text()
    assert masks.count("raise NotImplementedError()") == 3 and "### BEGIN SOLUTION" not in masks
    assert (release / "solutions" / "attention.py").read_text() == \
        (ROOT / "solutions" / "attention.py").read_text()
    # the checks of stages whose lessons are not released are reduced: stage 13's reference beam search is not
    # there
    assert "_ref_beam" in (ROOT / "autograder" / "checks" / "stage13_decoding.py").read_text()
    assert "_ref_beam" not in (release / "autograder" / "checks" / "stage13_decoding.py").read_text()


def test_no_answer_of_stage_05_or_later_is_in_the_release(release):
    assert hidden_modules(LESSON)[0] == "masks" and hidden_modules(LESSON)[-1] == "decoding"
    answers = answer_text(LESSON)
    # 9 stages, each with its answers to look for
    assert len(answers) == 9 and all(answers.values())
    assert leaks(release, LESSON) == []                           # every file, nothing exempt


def test_the_search_finds_a_planted_answer(release, tmp_path):
    """The search above can fail: a whole answer pasted in a lesson's cell, three lines of one in the README,
    and one committed to a .git folder are each found."""
    copy = tmp_path / "release"
    shutil.copytree(release, copy)
    assert leaks(copy, LESSON) == []
    lesson = copy / "lessons" / f"{LESSON}.ipynb"
    nb = json.loads(lesson.read_text())
    cell = next(c for c in nb["cells"] if "".join(c["source"]).startswith("def padding_mask"))
    # the solved cell, as in the instructor's copy
    cell["source"] = solution_source("masks", ["padding_mask"])
    lesson.write_text(json.dumps(nb, indent=1))
    beam = max(answer_text(LESSON)["decoding"], key=len).split("\n")   # beam_search's: the longest answer
    with open(copy / "README.md", "a") as f:
        f.write("\n```python\n" + "\n".join(beam[10:13]) + "\n```\n")
    (copy / ".git" / "objects").mkdir(parents=True)
    (copy / ".git" / "objects" / "loose").write_text(solution_source("masks", ["causal_mask"]))
    found = leaks(copy, LESSON)
    assert any(f.startswith(f"lessons/{LESSON}.ipynb: masks: a whole answer") for f in found), found
    assert any(f.startswith("README.md: decoding: ") for f in found), found
    assert any(f.startswith(".git/objects/loose: masks: a whole answer") for f in found), found


def test_it_installs_with_the_readmes_commands_and_its_lessons_run(release, tmp_path):
    """The README's `pip install -r requirements.txt` and `python -m pytest -q`, in a fresh virtual
    environment that sees this machine's packages (--system-site-packages: offline and fast; pip then installs
    only the release itself, editable, with --no-index and --no-build-isolation so that nothing is
    downloaded). The release is what that Python imports, and nbval runs every cell of lessons 01-05 as
    released without an error."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True)
    python = str(venv / "bin" / "python")
    env = without_the_course()
    proc = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
                           "-r", "requirements.txt"], cwd=release, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    probe = textwrap.dedent("""
        import torch, solutions, autograder
        print(solutions.__file__, autograder.__file__)
        solutions.scaled_dot_product_attention(torch.ones(1, 2, 4), torch.ones(1, 2, 4), torch.ones(1, 2, 4))
        try:
            solutions.padding_mask(torch.tensor([[5, 0]]))
        except NotImplementedError:
            print("padding_mask is a stub")
    """)
    proc = subprocess.run([python, "-c", probe], cwd="/", env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[0] == f"{release}/solutions/__init__.py {release}/autograder/__init__.py"
    assert "padding_mask is a stub" in proc.stdout
    collected = subprocess.run([python, "-m", "pytest", "--collect-only", "-q", "-n", "0"], cwd=release,
                               env=env, capture_output=True, text=True, timeout=300)
    assert sorted({line.split("::")[0] for line in collected.stdout.split("\n") if "::" in line}) == \
        [f"lessons/{stem}.ipynb" for stem in FIVE], collected.stdout[-2000:]
    # -n 0: one process (this machine's cores are shared); the README's command runs the same on every core
    proc = subprocess.run([python, "-m", "pytest", "-q", "-n", "0"], cwd=release, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert (" passed" in proc.stdout and "failed" not in proc.stdout
            and "error" not in proc.stdout.split("\n")[-2])


def test_the_graded_stages_check_works_in_the_release(release):
    """A student checks their work before handing it in: lesson 05's checks are whole in the release (the
    reference padding_mask, written in as a student would, earns full marks; the stub earns nothing)."""
    answer = solution_source("masks", ["padding_mask"])
    probe = "import torch\nfrom solutions import PAD\nfrom autograder import check, max_points\n" + answer + \
        "\nimport solutions.masks as stub\n" \
        "print(check(padding_mask), max_points('padding_mask'), check(stub.padding_mask))"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=release, capture_output=True, text=True,
                          timeout=300, env=dict(without_the_course(), PYTHONPATH=str(release)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got, top, stub = map(float, proc.stdout.strip().split("\n")[-1].split())
    assert got == top > 0 and stub == 0, proc.stdout[-2000:]


def test_the_next_release_updates_the_folder(tmp_path):
    out = tmp_path / "class"
    build_release(LESSON, out, REPO)
    (out / "NOTES.md").write_text("the instructor's own file\n")
    (out / ".git").mkdir()
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    manifest = json.loads((out / ".course-release.json").read_text())
    # a file an older release wrote, no longer made
    (out / "lessons" / "00_gone.ipynb").write_text("{}")
    manifest["files"].append("lessons/00_gone.ipynb")
    (out / ".course-release.json").write_text(json.dumps(manifest))
    # after 05's deadline; the repo is remembered
    made = build_release("06_feed_forward", out)
    assert made.repo == REPO and made.lesson == "06_feed_forward"
    assert sorted(p.stem for p in (out / "lessons").glob("*.ipynb")) == FIVE + ["06_feed_forward"]
    assert (out / "solutions" / "masks.py").read_text() == (ROOT / "solutions" / "masks.py").read_text()
    feed_forward = (out / "solutions" / "feed_forward.py").read_text()
    assert "raise NotImplementedError()" in feed_forward and "### BEGIN SOLUTION" not in feed_forward
    assert (out / "NOTES.md").exists() and (out / ".git" / "HEAD").exists()
    assert leaks(out, "06_feed_forward") == []
    with pytest.raises(ReleaseError, match="take back"):
        build_release(LESSON, out)
    assert build_release(LESSON, out, force=True).lesson == LESSON
    assert "raise NotImplementedError()" in (out / "solutions" / "masks.py").read_text()


def test_the_command_refuses_what_it_cannot_release(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "autograder", "release", *args], capture_output=True,
                              text=True, cwd=ROOT)
    proc = run("5_masks", "--out", str(tmp_path / "a"))
    assert (proc.returncode == 2 and "is not a lesson" in proc.stderr
            and "05_masks, 06_feed_forward" in proc.stderr)
    proc = run(LESSON, "--out", str(tmp_path / "a"), "--repo", "not a repo")
    assert proc.returncode == 2 and "OWNER/NAME" in proc.stderr
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "thesis.tex").write_text("")
    proc = run(LESSON, "--out", str(tmp_path / "b"))
    assert proc.returncode == 2 and "holds no release" in proc.stderr
    assert (tmp_path / "b" / "thesis.tex").exists() and not (tmp_path / "a").exists()
    proc = run(LESSON, "--out", str(ROOT))
    assert proc.returncode == 2 and "course's own folder" in proc.stderr


def test_after_13s_deadline_every_stage_and_lessons_14_15(tmp_path):
    made = build_release("15_experiments", tmp_path / "all", REPO)
    stems = sorted(p.stem for p in (tmp_path / "all" / "lessons").glob("*.ipynb"))
    assert stems[-3:] == ["13_decoding", "14_translate", "15_experiments"] and len(stems) == 15
    for module in ("masks", "decoding", "training"):
        assert (tmp_path / "all" / "solutions" / f"{module}.py").read_text() == \
            (ROOT / "solutions" / f"{module}.py").read_text()
    for module in ("__init__", "loop", "commands"):  # lesson 14's package, solutions/translate/, whole
        assert (tmp_path / "all" / "solutions" / "translate" / f"{module}.py").read_text() == \
            (ROOT / "solutions" / "translate" / f"{module}.py").read_text()
    assert list((tmp_path / "all" / "benchmarks" / "results" / "table3").glob("*.json"))
    assert made.kept_in_checks == []


def test_what_the_graded_stages_checks_hold_is_said(tmp_path):
    """Lesson 12's checks, kept whole for check(), compute noam_lr's formula as the reference does: the
    release says so (its manifest, and the command's output), and nothing else of stage 12 or 13 is in it."""
    made = build_release("12_training", tmp_path / "r12", REPO)
    assert made.kept_in_checks and all(k.startswith("autograder/checks/stage12_training.py: training: ")
                                       for k in made.kept_in_checks)
    assert leaks(tmp_path / "r12", "12_training", exempt=("autograder/checks/stage12_training.py",)) == []


def test_the_open_lessons_demonstrations_that_need_its_stubs_are_skipped_and_say_why(tmp_path):
    """Lesson 12's training demonstration needs make_batch and make_optimizer, stubs in its release: the
    release's test command reports those cells skipped, naming the stub; a cell that fails for another reason
    still fails."""
    out = tmp_path / "r12"
    build_release("12_training", out, REPO)
    env = dict(without_the_course(), PYTHONPATH=str(out))
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
           "lessons/12_training.ipynb"]
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert ("needs a function of the open assignment, a stub in this release (NotImplementedError)"
            in proc.stdout)
    assert " skipped" in proc.stdout and "failed" not in proc.stdout
    path = out / "lessons" / "12_training.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"].insert(5, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                           "source": "raise ValueError('a broken release')"})
    path.write_text(json.dumps(nb))
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "1 failed" in proc.stdout, proc.stdout[-3000:]
