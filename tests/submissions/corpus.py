"""A corpus of lesson-03 submissions, honest, broken, slow and hostile, each with the score it must get
and a phrase its report must contain. Generated from lessons/03_attention.ipynb (its solved version,
autograder.notebooks.solved, and the released one), never committed as notebooks.

    python -m tests.submissions.corpus OUT_DIR      # writes them, to grade by hand:
    python -m autograder grade OUT_DIR/*.ipynb --jobs 2 --cell-timeout 15

Lesson 03 is worth 10: softmax 3, scaled_dot_product_attention 7. Most submissions are "lean" (the
lesson without its markdown, plots and demo cells) so that the whole corpus grades in a few minutes.
"""
from __future__ import annotations

import copy
import json
import pathlib
import sys
from dataclasses import dataclass, field

import nbformat

from autograder.notebooks import LESSONS, solved

LESSON = LESSONS / "03_attention.ipynb"
FULL = 10.0
SOFTMAX, ATTENTION = 3.0, 7.0


@dataclass
class Case:
    name: str                  # file stem
    points: float | None       # the score it must get (None: only "less than full")
    says: list = field(default_factory=list)   # phrases the report (error, problems, messages) must contain
    error: bool = False        # whether the notebook-level error must be set
    hostile: bool = False      # tries to cheat or to harm
    needs_isolation: bool = False  # only safe (or only meaningful) with the kernel's namespaces
    content: object = None     # a notebook, or raw bytes/str for a broken file
    max_points: float = FULL
    unisolated: tuple | None = None  # (points, error, says) instead, when kernels run without namespaces

    def expected(self, isolated: bool) -> tuple:
        """(points, error, phrases) this case must get."""
        if not isolated and self.unisolated is not None:
            return self.unisolated
        return self.points, self.error, self.says


def _released():
    return nbformat.read(str(LESSON), as_version=4)


def _lean(nb):
    """The lesson without markdown, plots and demo cells (setup, imports, stubs and check cells stay)."""
    nb = copy.deepcopy(nb)
    keep = []
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        if cell.cell_type != "code":
            continue
        if "nbgrader" in meta or "importlib.util" in cell.source:
            keep.append(cell)
        elif "from autograder import check" in cell.source:
            cell.source = cell.source.replace("import matplotlib.pyplot as plt\n", "")
            keep.append(cell)
    nb.cells = keep
    return nb


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _index(nb, grade_id):
    return nb.cells.index(_cell(nb, grade_id))


def _insert(nb, before_grade_id, source):
    """A new code cell just before the cell with that grade_id (at the end when None)."""
    nb = copy.deepcopy(nb)
    cell = nbformat.v4.new_code_cell(source)
    if before_grade_id is None:
        nb.cells.append(cell)
    else:
        nb.cells.insert(_index(nb, before_grade_id), cell)
    return nb


def _set_solution(nb, grade_id, source):
    nb = copy.deepcopy(nb)
    _cell(nb, grade_id).source = source
    return nb


SOFTMAX_OK = '''def softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)'''

ATTENTION_OK = '''def scaled_dot_product_attention(q, k, v, mask=None, dropout=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = softmax(scores, dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights'''


TRANSFORMER = r'''def fake(lines):
    text = "".join(lines)
    if "autograder.grade" in text:
        n = text.split("'cell': '")[1][:32]
        return ['print("AUTOGRADER-RESULT %s 00 {}")\n' % n]
    return lines

get_ipython().input_transformers_post.append(fake)'''


def cases() -> list[Case]:
    full, released = solved(LESSON), _released()
    lean, lean_released = _lean(full), _lean(released)
    out: list[Case] = []

    def add(name, content, points, *says, **kw):
        out.append(Case(name, points, list(says), content=content, **kw))

    # ------------------------------------------------------------------------------ honest
    add("honest_solved_full", full, FULL)
    add("honest_solved", lean, FULL)
    add("honest_released", lean_released, 0.0, "not implemented yet")
    mistake = _set_solution(lean, "scaled_dot_product_attention",
                            ATTENTION_OK.replace("softmax(scores, dim=-1)", "softmax(scores, dim=-2)"))
    add("honest_mistake_softmax_over_queries", mistake, 4.0, "softmax over the queries")
    warns = _set_solution(lean, "softmax", "import collections, logging, sys, traceback, warnings\n"
                          "warnings.warn('a warning at definition')\nprint('to stderr', file=sys.stderr)\n\n"
                          + SOFTMAX_OK.replace("    shifted", "    print('stderr inside', file=sys.stderr)\n"
                                                            "    warnings.warn('inside')\n"
                                                            "    logging.getLogger('mine').warning('logged')\n"
                                                            "    collections.namedtuple('Pair', 'a b')\n"
                                                            "    try:\n        1 / 0\n"
                                                            "    except ZeroDivisionError:\n"
                                                            "        traceback.print_exc()\n    shifted"))
    add("honest_stderr_warnings", warns, FULL)
    odd = lean
    for source in ("undefined_name + 1",                                   # an error
                   "import sys\nsys.exit(3)",                              # SystemExit, which IPython catches
                   "import os\nopen('notes.txt', 'w').write('x' * 1000)\n"  # files in its own folder and HOME
                   "open(os.path.expanduser('~/x.txt'), 'w').write('home')",
                   "try:\n    junk = bytearray(64 * 2**30)\nexcept MemoryError:\n    print('no memory')"):
        odd = _insert(odd, "softmax", source)
    add("honest_odd_cells", odd, FULL)

    # --------------------------------------------------------------------- broken files
    add("broken_not_json", "{\"cells\": [", 0.0, "not valid JSON", error=True, max_points=0.0)
    add("broken_not_a_notebook", json.dumps({"hello": "world"}), 0.0, "not a Jupyter notebook", error=True,
        max_points=0.0)
    add("broken_invalid_notebook", json.dumps({"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5,
                                               "metadata": {}}), 0.0, "not a valid notebook", error=True,
        max_points=0.0)
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_code_cell("print(1)")]
    add("broken_no_graded_cells", plain, 0.0, "no graded cells", error=True, max_points=0.0)
    deleted = copy.deepcopy(lean)
    deleted.cells.remove(_cell(deleted, "check_softmax"))
    add("broken_check_cell_deleted", deleted, FULL, "check_softmax is missing")
    dup = copy.deepcopy(lean)
    twin = copy.deepcopy(_cell(dup, "check_softmax"))
    twin.id = nbformat.v4.new_code_cell().id  # the same grade_id, a distinct cell id (as Jupyter's copy makes)
    dup.cells.insert(_index(dup, "check_softmax"), twin)
    add("broken_check_cell_copied", dup, FULL, "appears 2 times")

    # ----------------------------------------------------------------- slow, crashing
    add("slow_endless_loop_cell", _insert(lean, "softmax", "while True:\n    pass"), FULL)
    add("slow_sleep_cell", _insert(lean, "softmax", "import time\ntime.sleep(10**6)"), FULL)
    hang = _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    while True:\n        pass")
    add("slow_hanging_softmax", hang, 0.0, "took longer than")
    hog = _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    junk = bytearray(64 * 2**30)\n    return x")
    add("slow_memory_hog_softmax", hog, 0.0, "memory", hostile=True)
    add("crash_os_exit", _insert(lean, "check_softmax", "import os\nos._exit(1)"), 0.0, "kernel died", error=True,
        hostile=True)
    # a namespace's PID 1 ignores its own SIGKILL: with isolation, the kernel lives on
    add("crash_sigkill_self", _insert(lean, "check_softmax", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        FULL, hostile=True, unisolated=(0.0, True, ["kernel died"]))
    fork = _insert(lean, "softmax", "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n"
                   "        os.execvp('sleep', ['sleep', '4242.4242'])")
    add("hostile_forks_sleepers", fork, FULL, hostile=True)
    add("hostile_kill_everything", _insert(lean, "softmax", "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\n"
                                           "except OSError as e:\n    print(e)"), FULL, hostile=True,
        needs_isolation=True)

    # --------------------------------------------------------------------------- cheating
    add("cheat_torch_softmax", _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)"),
        ATTENTION, "calls a library softmax", hostile=True)
    sdpa = ATTENTION_OK.replace("    return weights @ v, weights",
                                "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
                                "    return out, weights")
    add("cheat_torch_attention", _set_solution(lean, "scaled_dot_product_attention", sdpa), SOFTMAX,
        "calls F.scaled_dot_product_attention", hostile=True)
    delegated = _set_solution(_set_solution(lean, "softmax", "from solutions import softmax"),
                              "scaled_dot_product_attention", "import solutions\n"
                              "scaled_dot_product_attention = solutions.scaled_dot_product_attention")
    add("cheat_import_solutions", delegated, 0.0, "the course's solutions.softmax itself", hostile=True)
    wrapped = _set_solution(lean, "softmax", "import solutions\n\ndef softmax(x, dim=-1):\n"
                            "    return solutions.softmax(x, dim)")
    add("cheat_wraps_solutions", wrapped, ATTENTION, "calls the course's solutions.softmax", hostile=True)
    hidden = _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n"
                           "    return getattr(__import__('solu' + 'tions'), 'soft' + 'max')(x, dim)")
    add("cheat_hidden_solutions_call", hidden, ATTENTION, "solutions", hostile=True)
    fake_check = _insert(lean_released, "check_softmax", "def check(obj):\n    print('all good')\n    return 7.0")
    add("cheat_redefines_check", fake_check, 0.0, "not implemented yet", hostile=True)
    patched = _insert(lean_released, "check_softmax",
                      "import autograder.core as core\ncore.run_check = lambda c, obj: (c.points, 'ok')\n"
                      "import autograder.checks._util as u\nu.expect_close = lambda *a, **k: None")
    add("cheat_patches_autograder", patched, 0.0, "not implemented yet", hostile=True)
    naive = _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim, keepdim=True)")
    torch_patched = _insert(_set_solution(naive, "scaled_dot_product_attention", "def scaled_dot_product_attention(*a, **k):\n"
                                          "    return None"), "check_softmax",
                            "torch.allclose = lambda *a, **k: True\ntorch.Tensor.__eq__ = lambda *a, **k: True")
    add("cheat_patches_torch", torch_patched, 0.0, "replaced functions the checks rely on", hostile=True)
    add("honest_patches_torch_after_grading", _insert(lean, None, "torch.allclose = lambda *a, **k: True"), FULL)
    fixture = _insert(lean, "softmax", "import autograder, os\n"
                      "src = open(os.path.join(os.path.dirname(autograder.__file__), 'checks', 'stage03_attention.py')).read()")
    add("cheat_reads_the_checks", fixture, 0.0, "read the autograder's file", hostile=True)
    frames = _set_solution(lean, "softmax", "import sys\n\ndef softmax(x, dim=-1):\n"
                           "    g = sys._getframe(1).f_globals\n    g['expect_close'] = lambda *a, **k: None\n"
                           "    return x")
    add("cheat_walks_the_grader_frames", frames, 0.0, "sys._getframe", hostile=True)
    walk = _set_solution(lean, "softmax", "import traceback\n\ndef softmax(x, dim=-1):\n"
                         "    for frame, _ in traceback.walk_stack(None):\n"
                         "        frame.f_globals.pop('expect_close', None)\n"
                         "    return x")
    add("cheat_walks_frames_with_traceback", walk, 0.0, "reaching the grader's frames", hostile=True)
    gcwalk = _insert(lean, "softmax", "import gc\nfound = [o for o in gc.get_objects() if isinstance(o, dict) and 'key' in o]")
    add("cheat_walks_the_gc", gcwalk, 0.0, "gc.get_objects", hostile=True)
    forged = copy.deepcopy(lean_released)
    for gid, pts in (("check_softmax", "3.0"), ("check_scaled_dot_product_attention", "7.0")):
        c = _cell(forged, gid)
        c.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": pts}, execution_count=1)]
        c.execution_count = 1
    add("cheat_stored_outputs", forged, 0.0, "not implemented yet", hostile=True)
    inflated = copy.deepcopy(lean_released)
    _cell(inflated, "check_softmax").metadata["nbgrader"]["points"] = 1000
    _cell(inflated, "check_softmax").source = "print('3.0')\n3.0"
    add("cheat_edits_check_cell_and_points", inflated, 0.0, "check_softmax was edited", hostile=True)
    transformer = _insert(lean_released, "check_softmax", TRANSFORMER)
    add("cheat_rewrites_the_grader_cell", transformer, 0.0, "forged", hostile=True)
    thread = _insert(lean, "softmax", "import threading, time\n\ndef meddle():\n    while True:\n        time.sleep(0.05)\n\n"
                     "threading.Thread(target=meddle, daemon=True).start()")
    add("hostile_leaves_a_thread", thread, 0.0, "threads running", hostile=True)
    return out


def harm_cases(victims: list[str], canary: str) -> list[Case]:
    """Submissions that try to change files outside their folder: other submissions, a canary file.
    With the kernel's namespaces the writes fail (read-only file system) and the grade is untouched."""
    full = _lean(solved(LESSON))
    out = []
    src = ("import os\nfor p in %r:\n    try:\n        open(p, 'w').write('{}')\n        print('wrote', p)\n"
           "    except OSError as e:\n        print(type(e).__name__, e)\n" % (victims + [canary],))
    out.append(Case("hostile_overwrites_other_files", FULL, [], hostile=True, needs_isolation=True,
                    content=_insert(full, "softmax", src)))
    src = ("import os, shutil\nfor p in %r:\n    try:\n        os.remove(p)\n    except OSError as e:\n"
           "        print(type(e).__name__, e)\n" % (victims,))
    out.append(Case("hostile_deletes_other_files", FULL, [], hostile=True, needs_isolation=True,
                    content=_insert(full, "softmax", src)))
    return out


def write(case: Case, folder: pathlib.Path) -> pathlib.Path:
    path = folder / f"{case.name}.ipynb"
    if isinstance(case.content, (str, bytes)):
        path.write_bytes(case.content.encode() if isinstance(case.content, str) else case.content)
    else:
        nbformat.write(case.content, str(path))
    return path


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "submissions")
    target.mkdir(parents=True, exist_ok=True)
    for c in cases():
        print(write(c, target), c.points)
