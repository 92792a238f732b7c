"""A class release: `python -m autograder release LESSON --out DIR [--repo OWNER/NAME]`.

DIR gets what a class's students get while LESSON is the open assignment: lessons/ up to and including LESSON,
a `solutions/` in which LESSON's stage and every later stage are nbgrader's stubs (autograder/views.py, the
view the grade command's kernels see), the autograder their `check` needs (LESSON's checks whole, so that a
student can check their work before handing it in; the checks of later stages, whose lessons are not released,
reduced as in the grade command's view), and README.md, requirements.txt, pyproject.toml, conftest.py and
binder/ so that the README's two commands install it and validate its lessons. Binder's badge, the Colab
badges and the Colab set-up cell point at OWNER/NAME, the class's repository.

After a deadline, the same command with the next lesson and the same DIR updates it: the files of the previous
release (listed in DIR/.course-release.json) are replaced, anything else in DIR (a .git, the instructor's own
files) is left alone. Lessons 14 and 15 have no stubs and use every stage: they are released only when every
stage is, i.e. `release 14_translate` (or `15_experiments`) once 13's deadline has passed.

Not handled: making or pushing a git repository (no .git is made; DIR is the instructor's to commit), handing
the release to students (nbgrader's exchange, a learning platform, a git push), and hiding the graded stage's
own checks: they hold what a self-check needs (see the comment "Why the graded stage's checks ship whole"
below).
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import shutil
import tempfile

import nbformat

from .notebooks import BEGIN, COURSE_REPO, END, LESSONS, MODULES, ROOT
from .views import autograder_view, solutions_view, stage_of

MANIFEST = ".course-release.json"
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

# Why the graded stage's checks ship whole (answer text or not?). A student's `check(fn)` in the released
# lesson runs them, in the student's own process, so they must compute the expected answers there: against
# PyTorch's own modules (stages 04, 07-11), formulas the lesson states (02, 05, 12's schedule), and for stage
# 13 a reference beam search and greedy decoder written over a table of next-token scores, one source at a
# time, with a flag per classic mistake, which is how the check names the mistake a wrong answer made. That
# one is close to answer text; reduced, the self-check of lesson 13 could say neither "right" nor why not. It
# stays, and the README's "Teach a class" says so; an instructor who wants stage 13's checks unseen grades
# lesson 13 with the grade command only and releases it without them (not automated here). The checks of every
# later stage, whose lessons are not in the release, are reduced to what a kernel needs (no references, no
# fixtures' makers). What answer text the graded stage's checks hold is found as leaks() finds it, and listed
# (Release.kept_in_checks): today, lesson 01's (a merge of adjacent symbols, as merge_pair does) and lesson
# 12's (noam_lr's formula).


class ReleaseError(ValueError):
    """A release that cannot be made as asked; the message says why and what to do."""


def lesson_stems(graded_only: bool = False) -> list[str]:
    stems = sorted(p.stem for p in LESSONS.glob("[0-9][0-9]_*.ipynb"))
    return [s for s in stems if s in MODULES] if graded_only else stems


def released_lessons(lesson: str) -> list[pathlib.Path]:
    """The lessons a release of `lesson` holds: 01 up to and including it (14 and 15 only as the lesson itself
    or after it: they come with every stage)."""
    return [LESSONS / f"{s}.ipynb" for s in lesson_stems() if s <= lesson]


def hidden_modules(lesson: str) -> list[str]:
    """The solutions modules whose answers a release of `lesson` must not hold: its stage's and every later
    one's."""
    stage = stage_of(lesson)
    return [module for stem, module in MODULES.items() if int(stem[:2]) >= stage]


# ------------------------------------------------------------------------------------------------ leaks
def _regions(text: str) -> list[str]:
    """The marked solution regions of a module (the lines between BEGIN and END)."""
    regions, current = [], None
    for line in text.split("\n"):
        if line.strip() == BEGIN and current is None:
            current = []
        elif line.strip() == END and current is not None:
            regions.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return regions


def _code(line: str) -> str:
    """A line stripped, without its comment ('' for a comment line)."""
    line = line.strip()
    return "" if line.startswith("#") else line.split("  #")[0].strip()


def _normal(text: str) -> str:
    """The code lines of a text, stripped, without comments and blank lines: the same code at another
    indentation, or in a notebook's cell, reads the same."""
    return "\n".join(c for c in map(_code, text.split("\n")) if c)


def answer_text(lesson: str, solutions: pathlib.Path = ROOT / "solutions") -> dict[str, list[str]]:
    """{module: [normalized answer region, ...]} of the stages a release of `lesson` hides, read from the
    course's own solutions/ (never from the bundle)."""
    return {m: [_normal(r) for r in _regions((solutions / f"{m}.py").read_text(encoding="utf-8"))
                if _normal(r)]
            for m in hidden_modules(lesson)}


def _shared_lines(lesson: str, solutions: pathlib.Path) -> set[str]:
    """The code lines that the released solutions/ hold anyway (earlier stages, the helpers, the signatures
    and docstrings of the hidden ones): such a line, in an answer too (`self.dropout = nn.Dropout(dropout)`),
    gives nothing away."""
    hidden = set(hidden_modules(lesson))
    lines = set()
    for path in solutions.rglob("*.py"):  # solutions/translate/ too
        text = path.read_text(encoding="utf-8")
        if path.parent == solutions and path.stem in hidden:
            for region in _regions(text):
                text = text.replace(region, "")
        lines.update(_normal(text).split("\n"))
    return lines


def _readable(path: pathlib.Path) -> str:
    """A file as text: a notebook's cells' sources and outputs unescaped, a binary file byte for byte."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text).get("cells", [])
            return "\n".join([text] + ["".join(c.get("source", "")) for c in cells] +
                             [json.dumps(c.get("outputs", [])) for c in cells])
        except (ValueError, AttributeError):
            return text
    return text


def leaks(directory, lesson: str, solutions: pathlib.Path = ROOT / "solutions", window: int = 3,
          exempt: tuple[str, ...] = ()) -> list[str]:
    """Where answer text of `lesson`'s stage or of a later one appears under `directory` (every file, .git
    included, but the relative paths in `exempt`), as 'path: module: what'. Counted: a whole answer (the code
    between a function's solution markers), or `window` of its lines in a row, compared stripped and without
    comments, unless each of them is a line the released solutions/ hold anyway (see _shared_lines). A
    lesson's prose that shows one line or two of an answer as a hint does not count; three in a row do."""
    directory = pathlib.Path(directory)
    shared = _shared_lines(lesson, solutions)
    pieces = []  # (module, what, normalized text)
    for module, regions in answer_text(lesson, solutions).items():
        for region in regions:
            lines = region.split("\n")
            pieces.append((module, "a whole answer", region))
            pieces += [(module, " / ".join(lines[i:i + window]), "\n".join(lines[i:i + window]))
                       for i in range(len(lines) - window + 1)]
    pieces = [(m, what, text) for m, what, text in pieces if not set(text.split("\n")) <= shared]
    found = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory)
        if str(rel) in exempt:
            continue
        normal = "\n" + _normal(_readable(path)) + "\n"
        found += [f"{rel}: {module}: {what}" for module, what, text in pieces if "\n" + text + "\n" in normal]
    return found


# ------------------------------------------------------------------------------------------------ the files
def _retarget(text: str, repo: str) -> str:
    """The course's own GitHub repository, in Binder's, Colab's and pip's addresses, replaced by the
    class's."""
    return text.replace(f"github.com/{COURSE_REPO}", f"github.com/{repo}") \
               .replace(f"/gh/{COURSE_REPO}/", f"/gh/{repo}/") \
               .replace(f"colab.research.google.com/github/{COURSE_REPO}/",
                        f"colab.research.google.com/github/{repo}/")


def _lesson_rows(lessons: list[str], repo: str) -> list[str]:
    """The README's table rows of the released lessons, with the class's Colab badges."""
    rows = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").split("\n"):
        m = re.match(r"^\| (\d\d) \|", line)
        if m and "colab-badge" in line:
            rows[m.group(1)] = _retarget(line, repo)
    return [rows[s[:2]] for s in lessons if s[:2] in rows]


README = """# Build the Transformer from scratch: lessons {first} to {last}

<!-- Generated by `python -m autograder release {lesson}`; the next release rewrites this file. -->

[![Binder](https://mybinder.org/badge_logo.svg)](https://mybinder.org/v2/gh/{repo}/HEAD?urlpath=lab/tree/lessons/{first_file})

An interactive course in which you implement the encoder-decoder Transformer of
["Attention Is All You Need"](https://arxiv.org/abs/1706.03762) (Vaswani et al. 2017) in PyTorch, one stage at a
time. This is your class's release: {open_line}

## Set up

Python 3.10 or newer. From this folder:

```bash
pip install -r requirements.txt   # PyTorch, JupyterLab, and this release's packages (solutions/, autograder/)
python -m pytest -q               # every cell of the released lessons runs without an error (nbval)
```

(In the open assignment's lesson, a demonstration that needs what you have not written yet is reported as skipped,
with its reason, until you write it.)

No GPU needed. On a machine without a GPU, run `pip install torch --index-url https://download.pytorch.org/whl/cpu`
*before* the first command to keep the install small.

## Learn

```bash
jupyter lab lessons/
```

Or without installing anything: the Binder badge above, or a lesson's Colab badge below (its first cell installs
this release quietly). Open the lessons in order. Each lesson imports what the earlier stages built from
`solutions/`, so a stage you have not finished never blocks the next; {hidden_line}

| # | stage | you implement | Colab |
|---|---|---|---|
{rows}

## Check your work

Under every function you write there is a check cell, `check(softmax)` for instance. Run it: it prints one line per
check (what it expected, what came back, the likely mistake), then your points. Your instructor grades the same
checks, in a fresh kernel, against this release's `solutions/`: importing the graded stage's function from
`solutions` instead of writing it earns nothing.
"""  # noqa: E501  (the released file's text, as the class gets it)


def _readme(lesson: str, lessons: list[str], repo: str) -> str:
    graded = lesson in MODULES
    if graded:
        open_line = (f"lesson {lesson[:2]} ({lesson[3:].replace('_', ' ')}) is the assignment now open; the "
                     "lessons before it are released with their reference solutions.")
        hidden_line = (f"in this release the stage you are working on ({lesson[:2]}) and the later ones are "
                       "stubs there (`raise NotImplementedError()`): their solutions come with later "
                       "releases, after their deadlines.")
    else:
        open_line = "every stage is released, with its reference solution, and the two final lessons."
        hidden_line = "every stage's reference solution is there."
    return README.format(first=lessons[0][:2], last=lessons[-1][:2], lesson=lesson, repo=repo,
                         first_file=f"{lessons[0]}.ipynb", open_line=open_line, hidden_line=hidden_line,
                         rows="\n".join(_lesson_rows(lessons, repo)))


CONFTEST = '''"""Generated by `python -m autograder release`: what `python -m pytest -q` runs in a class release. nbval
(--nbval-lax, in pyproject.toml) runs every released lesson's cells; lessons 14 and 15 train a model for minutes
and are left out. In the open assignment's lesson, a demonstration may need a function of that stage, which this
release holds only as a stub: the first cell that fails with NotImplementedError, and every cell of that lesson
that fails after it, are reported as skipped, each with its reason. Any other failure fails."""
import os

import pytest

OPEN = {open_lesson!r}   # the open assignment's notebook (None: every stage is released)
collect_ignore = ["lessons/14_translate.ipynb", "lessons/15_experiments.ipynb"]
# a kernel per worker: each uses its share of the cores rather than all of them
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(share))

_stopped_at = {{}}  # notebook -> the cell that met a stub


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    notebook, _, cell = item.nodeid.partition("::")
    if notebook != OPEN or report.when != "call" or not report.failed:
        return
    if notebook not in _stopped_at and "NotImplementedError" in str(report.longrepr):
        _stopped_at[notebook] = cell
        reason = "needs a function of the open assignment, a stub in this release (NotImplementedError)"
    elif notebook in _stopped_at:
        reason = f"after {{_stopped_at[notebook]}} met a stub of the open assignment (NotImplementedError)"
    else:
        return
    report.outcome, report.longrepr = "skipped", (str(item.path), None, f"{{cell}}: {{reason}}")
'''  # noqa: E501  (the released file's text, as the class gets it)


def _pyproject() -> str:
    """The course's pyproject.toml with the tests the release has: its lessons (the kernels nbval starts run
    this Python, whatever kernels the machine has installed)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text = re.sub(r'(?m)^testpaths = .*$', 'testpaths = ["lessons"]', text)
    text = re.sub(r'(?m)^addopts = "(.*)"$',
                  lambda m: 'addopts = "-ra --nbval-lax --nbval-current-env -n auto --dist loadfile"', text)
    if 'testpaths = ["lessons"]' not in text or "--nbval-current-env" not in text:
        raise ReleaseError("pyproject.toml's [tool.pytest.ini_options] changed: update autograder/release.py")
    return text


def _lesson(path: pathlib.Path, repo: str) -> str:
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        cell.source = _retarget(cell.source, repo)
    return nbformat.writes(nb).rstrip("\n") + "\n"


# ------------------------------------------------------------------------------------------------ building
def check_lesson(lesson: str) -> str:
    stems = lesson_stems()
    if lesson not in stems:
        raise ReleaseError(f"{lesson!r} is not a lesson; the lessons: {', '.join(stems)}")
    return lesson


def _previous(out: pathlib.Path) -> dict | None:
    manifest = out / MANIFEST
    if manifest.is_file():
        return json.loads(manifest.read_text(encoding="utf-8"))
    if out.exists() and any(out.iterdir()):
        raise ReleaseError(f"{out} is not empty and holds no release (no {MANIFEST}): release into a new or "
                           "empty folder, or into the folder of an earlier release")
    return None


@dataclasses.dataclass
class Release:
    """What a release holds: DIR/.course-release.json, read back by the next release into the same folder."""
    lesson: str
    repo: str
    files: list[str]            # relative to the release's folder: what the next release replaces
    # 'path: module: lines' of answer text the graded stage's checks hold (see above)
    kept_in_checks: list[str]


def build_release(lesson: str, out, repo: str | None = None, force: bool = False) -> Release:
    """Write (or update) the release of `lesson` in `out`, for the class's GitHub repository `repo` (default:
    the previous release's in `out`, else the course's own). Raises ReleaseError with the reason for a lesson,
    folder or repository it cannot release to, and when the result would hold answer text."""
    check_lesson(lesson)
    out = pathlib.Path(out).resolve()
    if out == ROOT or out in ROOT.parents:
        raise ReleaseError(f"{out} is the course's own folder or holds it: release into a folder of its own")
    if out.exists() and not out.is_dir():
        raise ReleaseError(f"--out {out} is a file: give a folder (new, empty, or an earlier release's)")
    previous = _previous(out)
    repo = repo or (previous or {}).get("repo") or COURSE_REPO
    if not REPO.match(repo):
        raise ReleaseError(f"--repo {repo!r}: expected OWNER/NAME, a GitHub repository (e.g. "
                           f"my-school/transformer-2027)")
    if previous and previous["lesson"] > lesson and not force:
        raise ReleaseError(f"{out} holds the release of {previous['lesson']}: releasing {lesson} would take "
                           "back the lessons after it (their answers are already out); --force to do it "
                           "anyway")
    lessons = [p.stem for p in released_lessons(lesson)]
    with tempfile.TemporaryDirectory(prefix="release-") as tmp:  # built whole, checked, then moved in
        stage = pathlib.Path(tmp) / "release"
        solutions_view(lesson, stage / "solutions")
        autograder_view(lesson, stage / "autograder", reduce_from=stage_of(lesson) + 1, fixtures=True)
        # the Colab set-up cell that `lessons --write` makes
        notebooks = stage / "autograder" / "notebooks.py"
        notebooks.write_text(notebooks.read_text(encoding="utf-8").replace(
            f'COURSE_REPO = "{COURSE_REPO}"', f'COURSE_REPO = "{repo}"'), encoding="utf-8")
        (stage / "lessons").mkdir()
        for stem in lessons:
            (stage / "lessons" / f"{stem}.ipynb").write_text(_lesson(LESSONS / f"{stem}.ipynb", repo),
                                                             encoding="utf-8")
        if "15_experiments" in lessons:  # the recorded runs lesson 15 reads
            shutil.copytree(ROOT / "benchmarks" / "results" / "table3",
                            stage / "benchmarks" / "results" / "table3")
        (stage / "README.md").write_text(_readme(lesson, lessons, repo), encoding="utf-8")
        (stage / "pyproject.toml").write_text(_pyproject(), encoding="utf-8")
        open_lesson = f"lessons/{lesson}.ipynb" if lesson in MODULES else None
        (stage / "conftest.py").write_text(CONFTEST.format(open_lesson=open_lesson), encoding="utf-8")
        shutil.copyfile(ROOT / "requirements.txt", stage / "requirements.txt")
        shutil.copytree(ROOT / "binder", stage / "binder")
        checks = [str(p.relative_to(stage)) for p
                  in (stage / "autograder" / "checks").glob(f"stage{lesson[:2]}_*.py")]
        found = leaks(stage, lesson, exempt=tuple(checks))
        if found:  # never reached while views.py clears what it should: a last guard, not the mechanism
            raise ReleaseError("the release would hold answer text: " + "; ".join(found[:5]))
        # what the graded stage's own checks hold (kept whole for check())
        kept = leaks(stage, lesson) if checks else []
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
        _replace(out, previous, stage, files)
        record = Release(lesson=lesson, repo=repo, files=files, kept_in_checks=kept)
        (out / MANIFEST).write_text(json.dumps(dataclasses.asdict(record), indent=1) + "\n", encoding="utf-8")
    return record


def _replace(out: pathlib.Path, previous: dict | None, stage: pathlib.Path, files: list[str]) -> None:
    """The previous release's files removed (and the folders they leave empty), the new ones moved in."""
    out.mkdir(parents=True, exist_ok=True)
    for rel in (previous or {}).get("files", []):
        path = out / rel
        if path.is_file() or path.is_symlink():
            path.unlink()
        for parent in path.parents:  # folders left empty, up to out
            if parent == out or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()
    for rel in files:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stage / rel, out / rel)
    for d in [out, *(p for p in out.rglob("*") if p.is_dir() and ".git" not in p.relative_to(out).parts)]:
        d.chmod(0o755)
