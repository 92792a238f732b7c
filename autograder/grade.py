"""`python -m autograder grade NOTEBOOK... [--json FILE] [--jobs N] [--timeout S] [--cell-timeout S]
[--memory GB] [--lesson STEM]`: grade notebooks, each in a fresh kernel, and report the points of every graded
cell. A broken, slow or hostile notebook costs only its own grade, with the reason in the report. What this
protects and what it does not is in autograder/GRADING.md.

In three layers, each its own module:
1. autograder/submission.py reads a submission without running anything (`read_submission`).
2. autograder/kernel.py runs one notebook in a jailed kernel beside the checker (`grade_notebook`).
3. This module grades a batch, `jobs` at a time, and reports: the course's files and the submissions are hashed
   before and after each notebook; a change is reported in the report's "tampering" (and, when the kernels are
   not isolated, on the notebook, which then earns nothing).
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import pathlib
import sys
import tempfile
import threading

from . import forkserver
from .kernel import CELL_TIMEOUT, MEMORY_GB, NOTEBOOK_TIMEOUT, grade_notebook, isolation
from .submission import course_pythonpath, lesson_of, read_submission

__all__ = ["grade", "grade_notebook", "isolation", "labels", "lesson_of", "read_submission", "CELL_TIMEOUT",
           "MEMORY_GB", "NOTEBOOK_TIMEOUT"]
ROOT = pathlib.Path(__file__).resolve().parents[1]
UNSAFE = ("the kernels are not isolated on this machine (not root, or no util-linux unshare/setpriv, or the "
          "probe failed): a notebook can read and change what the grading user can, so these grades are not "
          "safe against a determined student")


def _hash_files(paths) -> dict[str, str]:
    """sha256 of every file under `paths` (folders walked; caches and .git skipped)."""
    out = {}
    skip = {".git", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}
    for top in paths:
        top = pathlib.Path(top)
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()
                                             and not skip & set(p.relative_to(top).parts)] if top.is_dir() else []
        for p in files:
            try:
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            except OSError:
                out[str(p)] = "unreadable"
    return out


def _protected_paths(notebooks) -> list:
    course = [ROOT / d for d in ("autograder", "solutions", "lessons")] + [ROOT / "pyproject.toml"]
    return [p for p in course if p.exists()] + [pathlib.Path(n).resolve() for n in notebooks]


def _checker_server(batch: str):
    """The batch's checker process (autograder.checker.serve), which forks each notebook's checker: (process,
    its socket), or None where it does not start (each notebook then starts a checker of its own)."""
    control = os.path.join(batch, "checkers.sock")
    return forkserver.start([sys.executable, "-m", "autograder.checker", "--serve", control], control,
                            dict(os.environ, PYTHONPATH=course_pythonpath()), batch)


def _kernel_server(batch: str, threads: int):
    """The batch's kernel server (autograder.jail.serve), which forks each isolated kernel from a process that
    imported PyTorch and ipykernel once: (process, its socket), or None where it does not start (each kernel is
    then started by its own launcher). Its environment is the variables a kernel keeps, nothing else: the kernels
    inherit its memory, and the grade command's environment may hold secrets."""
    from .jail import KEPT_ENV
    control = os.path.join(batch, "kernels.sock")
    home = os.path.join(batch, "server-home")
    os.makedirs(home, mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k in KEPT_ENV or k.startswith("LC_")}
    env.update(PYTHONPATH=course_pythonpath(), HOME=home, PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1",
               OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), MPLBACKEND="agg")
    return forkserver.start([sys.executable, "-m", "autograder.jail", "--serve", control], control, env, home)


def labels(paths) -> list[str]:
    """How the report names each notebook: its file name, or, when names repeat (one lesson, many students),
    its path below the folder they share. Example: [".../alice/03_attention/03_attention.ipynb",
    ".../bob/03_attention/03_attention.ipynb"] -> ["alice/03_attention/03_attention.ipynb", "bob/..."]"""
    names = [pathlib.Path(p).name for p in paths]
    if len(set(names)) < len(names):
        common = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
        names = [os.path.relpath(os.path.abspath(p), common) for p in paths]
    return names


def grade(paths, json_path=None, timeout: float = NOTEBOOK_TIMEOUT, stream=sys.stdout, *, jobs: int = 1,
          cell_timeout: float = CELL_TIMEOUT, memory_gb: float = MEMORY_GB, lesson: str | None = None) -> dict:
    """Grade every notebook (`jobs` at a time), print a report, and return (and write to json_path)
    {"notebooks": [...], "isolation", "safe", "tampering": [...]}. `lesson`: the assignment every notebook is
    graded as (else each one's file or folder name says)."""
    paths = [str(p) for p in paths]
    jobs = max(1, int(jobs or 1))
    protected = _protected_paths(paths)
    baseline = _hash_files(protected)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    isolated = isolation()
    report = {"notebooks": [], "isolation": isolated, "safe": isolated, "tampering": []}
    if not isolated:
        report["warning"] = UNSAFE
        print(f"WARNING: {UNSAFE} (see autograder/GRADING.md)", file=stream)
    seen_changes: set = set()
    lock = threading.Lock()
    batch = tempfile.mkdtemp(prefix="autograder-")
    checkers = _checker_server(batch) if len(paths) > 1 else None
    kernels = _kernel_server(batch, threads) if len(paths) > 1 and isolated and \
        os.environ.get("AUTOGRADER_KERNEL_SERVER", "on") != "off" else None

    def one(p):
        r = grade_notebook(p, timeout, cell_timeout=cell_timeout, memory_gb=memory_gb, threads=threads,
                           protected=[q for q in protected if q.is_dir()], lesson=lesson, batch=batch,
                           checker_server=checkers and checkers[1], kernel_server=kernels and kernels[1])
        now = _hash_files(protected)
        with lock:
            changed = sorted(k for k in set(baseline) | set(now) if baseline.get(k) != now.get(k)
                             and k not in seen_changes)
            seen_changes.update(changed)
        if changed:
            shown = ", ".join(os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c for c in changed[:5])
            if r.get("isolated"):  # read-only for the kernel: someone else changed them
                report["tampering"].append({"path": p, "files": changed, "by": "not a notebook: the files are "
                                            "read-only for the kernels, something else changed them"})
            else:
                note = (f"files outside the notebook's folder changed while it ran (it, or one graded at the same "
                        f"time, wrote there): {shown}")
                r["problems"].append(note)
                r["error"] = r["error"] or "tampering: " + note
                r["points"] = 0.0
                for c in r["cells"]:
                    c["points"] = 0.0
                report["tampering"].append({"path": p, "files": changed, "by": "this notebook, or one graded "
                                            "at the same time"})
        return r

    label = dict(zip(paths, labels(paths)))
    width = max([32] + [len(n) for n in label.values()])

    def show(r, p):
        name = label[p]
        for c in r["cells"]:
            print(f"{name:{width}s} {c['grade_id']:40s} {c['points']:6g} / {c['max_points']:g}", file=stream)
        status = f"  ERROR: {r['error']}" if r["error"] else ""
        print(f"{name:{width}s} {'TOTAL':40s} {r['points']:6g} / {r['max_points']:g}   ({r['seconds']:.0f} s){status}",
              file=stream)
        for problem in r["problems"]:
            print(f"{name:{width}s}   note: {problem}", file=stream)
        stream.flush()

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(one, p) for p in paths]
            for p, f in zip(paths, futures):
                try:
                    r = f.result()
                except Exception as e:  # noqa: BLE001  (a bug here must not stop the batch)
                    r = {"path": p, "points": 0.0, "max_points": 0.0, "error": f"the grader failed: {type(e).__name__}: "
                         f"{e}", "problems": [], "cells": [], "seconds": 0.0, "isolated": False, "lesson": None}
                report["notebooks"].append(r)
                show(r, p)
    finally:
        for server in (checkers, kernels):
            if server:
                forkserver.stop(server[0])
        if not os.environ.get("AUTOGRADER_KEEP"):  # no link followed, no recursion, never raises (jail.remove_tree)
            from .jail import remove_tree
            remove_tree(batch)
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(report, indent=2))
    return report
