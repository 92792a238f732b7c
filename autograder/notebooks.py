"""The lessons' stub cells are generated from `solutions/`, never written by hand.

A lesson's stub cell carries metadata {"course": {"names": [...]}}: the functions and classes of the
lesson's solutions module that it holds. `render` fills it with their source (the solved notebook,
nbgrader's source version, markers included) or with nbgrader's ClearSolutions applied to that source
(the learner's stub). `python -m autograder lessons` says whether lessons/ is in sync;
`--write` brings it in sync. Solutions are read as text (ast), never imported.
"""
from __future__ import annotations

import ast
import copy
import pathlib
import re

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"
SOLUTIONS = ROOT / "solutions"
COURSE_REPO = "transformer-course/transformer-course"  # github owner/name: the Colab install
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CODE_STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]  # nbgrader's default stub for Python

# lesson file stem -> its solutions module
MODULES = {
    "01_tokenization": "tokenization", "02_positional_encoding": "positional_encoding",
    "03_attention": "attention", "04_multi_head_attention": "multi_head_attention", "05_masks": "masks",
    "06_feed_forward": "feed_forward", "07_residual_layer_norm": "residual_layer_norm",
    "08_encoder": "encoder", "09_decoder": "decoder", "10_output_projection": "output_projection",
    "11_label_smoothing": "label_smoothing", "12_training": "training", "13_decoding": "decoding",
}

SETUP_SOURCE = f'''# Setup: makes `solutions` and `autograder` importable. On Colab it installs the course quietly;
# elsewhere (after `pip install -r requirements.txt`, or on Binder) it does nothing visible.
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("autograder") is None:
    if "google.colab" in sys.modules:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                        "git+https://github.com/{COURSE_REPO}"], check=True)
    elif os.path.isdir(os.path.join("..", "autograder")):
        sys.path.insert(0, os.path.abspath(".."))
    else:  # JupyterLab started from another Python than the one the course was installed into
        raise ModuleNotFoundError(f"this kernel's Python, {{sys.executable}}, cannot import the course: run "
                                  "`python -m pip install -r requirements.txt` in the course's folder with that "
                                  "Python, or open the lesson from the course's lessons/ folder; then restart the \
kernel")'''  # noqa: E501  (the setup cell as the lessons hold it)


# ------------------------------------------------------------------------------------------ sources
def solution_source(module: str, names: list[str]) -> str:
    """The source of top-level functions/classes `names` of solutions/<module>.py, in that order."""
    path = SOLUTIONS / f"{module}.py"
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    found = {node.name: node for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
    lines = text.splitlines()
    parts = []
    for name in names:
        if name not in found:
            raise KeyError(f"{name} is not defined at the top level of {path}")
        node = found[name]
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        end = node.end_lineno  # the AST ends at the last statement: take the trailing "### END SOLUTION" too
        while end < len(lines) and lines[end].strip().startswith("#") and \
                len(lines[end]) - len(lines[end].lstrip()) > node.col_offset:
            end += 1
        parts.append("\n".join(lines[start:end]))
    return "\n\n\n".join(parts)


def clear_solutions(source: str) -> str:
    """What nbgrader's ClearSolutions does to a code cell: each marked region becomes the stub,
    indented like its BEGIN marker."""
    out, inside = [], False
    for line in source.split("\n"):
        if BEGIN in line:
            if inside:
                raise ValueError("nested BEGIN SOLUTION")
            inside = True
            indent = re.match(r"\s*", line).group(0)
            out.extend(indent + s for s in CODE_STUB)
        elif END in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


# ----------------------------------------------------------------------------------------- cells
def _points(name: str) -> float:
    from .core import REGISTRY, max_points
    return max_points(name) if name in REGISTRY else 0.0


def render(nb, stem: str, solved: bool):
    """A copy of lesson `nb` whose stub cells hold the solution source (solved) or the stub, whose check
    cells are worth max_points, and with no outputs."""
    nb = copy.deepcopy(nb)
    module = MODULES.get(stem)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            if cell.source.startswith("# Setup: makes `solutions` and `autograder` importable"):
                cell.source = SETUP_SOURCE  # one setup cell for every lesson, kept in step here
        grading = cell.get("metadata", {}).get("nbgrader", {})
        if grading.get("grade") and grading.get("grade_id", "").startswith("check_"):
            grading["points"] = _points(grading["grade_id"][len("check_"):])  # always the checks' max_points
        names = cell.get("metadata", {}).get("course", {}).get("names")
        if names:
            source = solution_source(module, names)
            cell.source = source if solved else clear_solutions(source)
    return nb


def lesson_paths(graded_only: bool = True) -> list[pathlib.Path]:
    """The lesson notebooks in order; by default only the graded ones (01-13, not 14_translate)."""
    return sorted(p for p in LESSONS.glob("[0-9][0-9]_*.ipynb") if p.stem in MODULES or not graded_only)


def solved(path: pathlib.Path):
    """The solved version of a lesson (nbgrader's source notebook)."""
    return render(nbformat.read(str(path), as_version=4), path.stem, solved=True)


def sync(write: bool) -> list[str]:
    """Lessons whose stub cells differ from what solutions/ generates; rewritten when `write`."""
    stale = []
    for path in lesson_paths():
        nb = nbformat.read(str(path), as_version=4)
        fresh = render(nb, path.stem, solved=False)
        if nbformat.writes(fresh) != nbformat.writes(nb):
            stale.append(path.name)
            if write:
                nbformat.write(fresh, str(path))
    return stale
