"""Binder (repo2docker), Colab and the lessons' first cell: what a learner's first minutes depend on."""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from packaging.requirements import Requirement

from autograder.notebooks import COURSE_REPO, SETUP_SOURCE, lesson_paths

ROOT = pathlib.Path(__file__).resolve().parents[1]


def requirements(path):
    reqs = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            r = Requirement(line)
            reqs[r.name.lower()] = str(r.specifier)
    return reqs


def test_binder_takes_the_cpu_build_and_the_same_ranges():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    assert requirements(ROOT / "binder" / "requirements.txt") == requirements(ROOT / "requirements.txt")


def test_binder_post_build_installs_the_course():
    post = ROOT / "binder" / "postBuild"
    assert os.access(post, os.X_OK) and "pip install" in post.read_text() and "-e ." in post.read_text()


@pytest.mark.skipif(shutil.which("repo2docker") is None,
                    reason="repo2docker is not installed (pip install -r requirements-ci.txt)")
def test_repo2docker_renders_a_build_plan_from_binder(tmp_path):
    proc = subprocess.run(["repo2docker", "--no-build", "--debug", "--user-id", "1000", "--user-name",
                           "jovyan", str(ROOT)], capture_output=True, text=True, timeout=120)
    plan = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    install = plan.index('pip install --no-cache-dir -r "binder/requirements.txt"')
    copy_all = plan.index("COPY --chown=1000:1000 src/ ${REPO_DIR}/")
    post = plan.index("./binder/postBuild")
    assert install < copy_all < post, "requirements first (cached layer), then the repository, then postBuild"
    assert "py-2d3-2e11" in plan or "python=3.11" in plan, "binder/runtime.txt asks for Python 3.11"


@pytest.mark.parametrize("path", lesson_paths(False), ids=[p.stem for p in lesson_paths(False)])
def test_first_code_cell_makes_the_course_importable(path):
    nb = nbformat.read(str(path), as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.source == SETUP_SOURCE
    assert (f"colab.research.google.com/github/{COURSE_REPO}/blob/main/lessons/{path.name}"
            in nb.cells[0].source)


def test_setup_cell_is_silent_where_the_course_is_installed():
    proc = subprocess.run(["python", "-c", SETUP_SOURCE], capture_output=True, text=True,
                          cwd=ROOT / "lessons")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""


def test_setup_cell_says_how_to_install_where_the_course_is_missing(tmp_path):
    """A kernel whose Python lacks the course (JupyterLab started from another environment), in a folder with
    no course above it: the setup cell stops with the fix, naming that Python, not with a bare import error
    later."""
    proc = subprocess.run([sys.executable, "-S", "-c", SETUP_SOURCE], capture_output=True, text=True,
                          cwd=tmp_path)  # -S: no site-packages, so no installed course
    assert proc.returncode == 1, proc
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: this kernel's Python, ") and sys.executable in last, last
    assert "pip install -r requirements.txt" in last and "restart the kernel" in last, last


def test_readme_badges_point_at_lessons_that_exist():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(rf"colab\.research\.google\.com/github/{COURSE_REPO}/blob/main/(lessons/[\w.]+)",
                       readme)
    assert len(links) >= 13
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
    assert f"mybinder.org/v2/gh/{COURSE_REPO}/HEAD?urlpath=lab/tree/lessons/01_tokenization.ipynb" in readme
