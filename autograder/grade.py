"""`python -m autograder grade NOTEBOOK... [--json FILE]`: run each notebook in a fresh kernel, in a
scratch folder, with a time limit, and report the points of every graded cell.

A graded cell is one with nbgrader metadata `grade: true`; its source is restored to `check(<name>)`
from its grade_id before the run, so an edited check cell grades the same as the original. A cell
earns the number it returns, like nbgrader: nothing when it raised or wrote to stderr.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import nbformat

NOTEBOOK_TIMEOUT = 600  # seconds for a whole notebook
CELL_TIMEOUT = 180      # seconds for one cell


def graded_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def restore_check_cells(nb) -> None:
    for cell in graded_cells(nb):
        grade_id = cell.metadata["nbgrader"].get("grade_id", "")
        if grade_id.startswith("check_"):
            cell.source = f"check({grade_id[len('check_'):]})"


def cell_points(cell) -> tuple[float, str]:
    """(points, message) of an executed graded cell."""
    top = float(cell.metadata["nbgrader"].get("points", 0))
    stdout, value = [], None
    for out in cell.get("outputs", []):
        if out.output_type == "error":
            return 0.0, f"error: {out.ename}: {out.evalue}"
        if out.output_type == "stream" and out.name == "stderr":
            return 0.0, "wrote to stderr: " + "".join(out.text)[:300]
        if out.output_type == "stream":
            stdout.append("".join(out.text))
        if out.output_type == "execute_result":
            value = out.get("data", {}).get("text/plain")
    message = "".join(stdout).strip()
    try:
        points = float(value)
    except (TypeError, ValueError):
        return 0.0, (message + "\n" if message else "") + "the cell did not return a number of points"
    return max(0.0, min(points, top)), message


def _execute(path: pathlib.Path, workdir: pathlib.Path, out_path: pathlib.Path) -> None:
    """Child process: execute the notebook in `workdir`, write the executed notebook to out_path."""
    from nbclient import NotebookClient
    nb = nbformat.read(str(path), as_version=4)
    restore_check_cells(nb)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, allow_errors=True, interrupt_on_timeout=True,
                            kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
    try:
        client.execute(cwd=str(workdir))
    finally:
        nbformat.write(nb, str(out_path))


def grade_notebook(path: str | os.PathLike, timeout: float = NOTEBOOK_TIMEOUT) -> dict:
    path = pathlib.Path(path)
    result = {"path": str(path), "points": 0.0, "max_points": 0.0, "error": None, "cells": []}
    try:
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # noqa: BLE001  (anything unreadable is this notebook's problem only)
        result["error"] = f"not a readable notebook: {type(e).__name__}: {str(e)[:200]}"
        return result
    cells = graded_cells(nb)
    result["max_points"] = sum(float(c.metadata["nbgrader"].get("points", 0)) for c in cells)
    if not cells:
        result["error"] = "no graded cells (nbgrader metadata grade: true) in this notebook"
        return result
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        tmp = pathlib.Path(tmp)
        work = tmp / "work"
        work.mkdir()
        src, out = tmp / "in.ipynb", tmp / "out.ipynb"
        shutil.copyfile(path, src)
        proc = subprocess.Popen([sys.executable, "-m", "autograder.grade", "--execute", str(src), str(work), str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True)
        try:
            _, err = proc.communicate(timeout=timeout)
            if proc.returncode and not out.exists():
                result["error"] = f"the notebook could not run: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            result["error"] = f"stopped after {timeout:g} s"
        executed = nbformat.read(str(out), as_version=4) if out.exists() else None
    by_id = {c.metadata["nbgrader"]["grade_id"]: c for c in graded_cells(executed)} if executed else {}
    for cell in cells:
        grade_id = cell.metadata["nbgrader"].get("grade_id", "?")
        top = float(cell.metadata["nbgrader"].get("points", 0))
        done = by_id.get(grade_id)
        points, message = cell_points(done) if done is not None else (0.0, result["error"] or "not run")
        result["cells"].append({"grade_id": grade_id, "points": points, "max_points": top, "message": message})
    result["points"] = sum(c["points"] for c in result["cells"])
    return result


def grade(paths, json_path=None, timeout: float = NOTEBOOK_TIMEOUT, stream=sys.stdout) -> dict:
    report = {"notebooks": []}
    for p in paths:
        start = time.time()
        r = grade_notebook(p, timeout)
        report["notebooks"].append(r)
        name = pathlib.Path(p).name
        for c in r["cells"]:
            print(f"{name:32s} {c['grade_id']:40s} {c['points']:6g} / {c['max_points']:g}", file=stream)
        status = f"  ERROR: {r['error']}" if r["error"] else ""
        print(f"{name:32s} {'TOTAL':40s} {r['points']:6g} / {r['max_points']:g}   ({time.time() - start:.0f} s){status}",
              file=stream)
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--execute":
    _execute(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4]))
