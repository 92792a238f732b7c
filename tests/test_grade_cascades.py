"""A mistake paid once by `python -m autograder grade` as by a lesson's check() (issue 40): the checker holds
proxies of the learner's objects, so the checks find an earlier graded name of the lesson by asking the kernel
for it by that name. Two lesson-05 notebooks (triu for tril in causal_mask; a (B, 1, L) padding_mask) and one
lesson-09 notebook (a typo in DecoderLayer), graded by the command: the later name keeps its points and is
told which function to fix."""
import json
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest

from autograder.notebooks import LESSONS, solved
from tests.submissions.corpus import _lean

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _changed(lesson, grade_id, old, new):
    nb = _lean(solved(LESSONS / f"{lesson}.ipynb"))
    [cell] = [c for c in nb.cells if (c.metadata.get("nbgrader") or {}).get("grade_id") == grade_id]
    assert cell.source.count(old) == 1, (grade_id, old)
    cell.source = cell.source.replace(old, new)
    return nb


NOTEBOOKS = {
    "triu": ("05_masks", _changed("05_masks", "causal_mask", ".tril()[None, None]", ".triu(1)[None, None]")),
    "short": ("05_masks", _changed("05_masks", "padding_mask", "(ids != pad_id)[:, None, None, :]",
                                   "(ids != pad_id)[:, None, :]")),
    "typo": ("09_decoder", _changed("09_decoder", "DecoderLayer", "self.self_attn(y, y, y, tgt_mask)",
                                    "self.self_attn(y, y, y, None)")),
}


def _grade(folder, lesson, paths):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]]
                                                                     if os.environ.get("PYTHONPATH")
                                                                     else [])))
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", *paths, "--lesson", lesson, "--json",
                           f"{lesson}.json", "--jobs", "2"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    return {pathlib.Path(n["path"]).parent.name: {c["grade_id"]: c for c in n["cells"]}
            for n in json.loads((folder / f"{lesson}.json").read_text())["notebooks"]}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cascades")
    by_lesson: dict = {}
    for student, (lesson, nb) in NOTEBOOKS.items():
        path = folder / student / f"{lesson}.ipynb"
        path.parent.mkdir()
        nbformat.write(nb, str(path))
        by_lesson.setdefault(lesson, []).append(str(path.relative_to(folder)))
    cells = {}
    for lesson, paths in by_lesson.items():
        cells.update(_grade(folder, lesson, paths))
    return cells


def _full(cell):
    return cell["points"] == cell["max_points"]


def test_target_mask_beside_a_wrong_causal_mask_keeps_its_points(graded):
    cells = graded["triu"]
    assert cells["check_causal_mask"]["points"] == cells["check_causal_mask"]["max_points"] - 1, cells
    target = cells["check_target_mask"]
    assert _full(target) and "✓ uses the pad_id argument" in target["message"], target
    assert "fix causal_mask" in target["message"], target
    assert _full(cells["check_padding_mask"]), cells


def test_a_padding_mask_missing_a_dimension_pays_its_shape_point_only(graded):
    cells = graded["short"]
    pad = cells["check_padding_mask"]
    assert (pad["points"] == pad["max_points"] - 1
            and "one singleton dimension is missing" in pad["message"]), pad
    target = cells["check_target_mask"]
    assert (_full(target) and "fix padding_mask" in target["message"]
            and "shape (2, 1, 5)" in target["message"]), target


def test_a_correct_decoder_beside_a_wrong_decoder_layer_keeps_its_points(graded):
    cells = graded["typo"]
    assert cells["check_DecoderLayer"]["points"] < cells["check_DecoderLayer"]["max_points"], cells
    decoder = cells["check_Decoder"]
    assert _full(decoder) and "fix DecoderLayer" in decoder["message"], decoder
