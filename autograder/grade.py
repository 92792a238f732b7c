"""`python -m autograder grade NOTEBOOK... [--json FILE] [--jobs N] [--timeout S] [--cell-timeout S]
[--memory GB]`: grade notebooks, each in a fresh kernel, and report the points of every graded cell.
A broken, slow or hostile notebook costs only its own grade, with the reason in the report.

How one notebook is graded
1. Read without running anything: valid JSON, a Jupyter notebook (nbformat 4, valid), and its graded
   cells (nbgrader metadata `grade: true`, grade_id `check_<name>`). The course lesson it comes from is
   recognised by its grade_ids, and the lesson, not the submission's metadata, says which graded cells
   there are and what each is worth (the checks' max_points). A graded cell that was deleted is graded
   at the end of the notebook, one that was copied (a duplicate grade_id) is graded once, an edited one
   is graded as if untouched; each is reported under "problems".
2. Run in a fresh kernel started by autograder.jail (a scratch folder as its working directory and
   HOME, a memory limit, and where the machine allows it read-only file systems and its own PID
   namespace), with a time limit per cell and per notebook. A hidden first cell runs
   autograder/sandbox.py's `startup` before any of the notebook's code; each graded cell is replaced by
   a call to the grader, which grades the name with a private copy of the checks and writes a verdict
   signed with a key that only the grade command and the grader know (see autograder/sandbox.py).
3. Points come only from those signed verdicts: the outputs stored in the submission, what its cells
   print, and the points its metadata claims count for nothing.
Afterwards every process the notebook started is killed, and the course's files and the submissions are
hashed again; a change is reported in the report's "tampering" (and, when the kernels are not isolated,
on the notebook, which then earns nothing).

What is protected, and what is not
* Protected: other notebooks' grades (each has its own kernel, scratch folder, and processes, all
  killed when it ends; its own time and memory limits); the course's files, solutions/, the other
  submissions, and everything outside the scratch folder, which are read-only for the kernel where mount
  namespaces are available (root with util-linux's unshare and setpriv: `isolation` in the report), and
  otherwise checked by hashing before and after; the grader's verdicts (signed); the checks themselves
  (compiled from the sources read before the run, not from the notebook's modules); the libraries the
  checks use (their functions' identities compared with those recorded before the notebook ran);
  delegating the graded work to solutions/, to the autograder's code, or to a library call that does the
  lesson's work (see core.forbid).
* Not protected: a graded function that replaces a library function (torch.allclose, say) and restores
  it before it returns can still fool a check, since module attributes are not audited; code that
  reaches the grader's memory by a way Python does not audit; the number of processes and threads, CPU
  use (only time limits), and the network. Without namespaces (not root, or no unshare), a submission can
  write wherever the grading user can: the damage is reported, not prevented.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import nbformat

NOTEBOOK_TIMEOUT = 600    # seconds for a whole notebook
CELL_TIMEOUT = 180        # seconds for one cell
STOP_GRACE = 20          # seconds the notebook's own process gets, past the time limit, to stop and report
MEMORY_GB = float(os.environ.get("AUTOGRADER_MEMORY_GB", 4))  # the kernel's address space (RLIMIT_AS)
FILE_SIZE = 1 << 30       # the largest file the kernel may write (RLIMIT_FSIZE)
MAX_NOTEBOOK_BYTES = 50 << 20
MARK, START = "AUTOGRADER-RESULT", "AUTOGRADER-START"
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
KERNEL_NAME = "autograder-jail"


# ------------------------------------------------------------------------- reading, no code run
def graded_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def restore_check_cells(nb) -> None:
    """Put back `check(<name>)` in every graded cell (what nbgrader's locked cells hold)."""
    for cell in graded_cells(nb):
        grade_id = cell.metadata["nbgrader"].get("grade_id", "")
        if grade_id.startswith("check_"):
            cell.source = f"check({grade_id[len('check_'):]})"


def _grade_id(cell) -> str | None:
    meta = cell.get("metadata", {})
    nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
    gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
    return gid if isinstance(gid, str) else None


_LESSONS: list = []
_LESSONS_LOCK = threading.Lock()


def _lessons() -> list[tuple[str, set, list]]:
    """(stem, every grade_id, the check cells' grade_ids in order) of each course lesson."""
    with _LESSONS_LOCK:
        if not _LESSONS:
            from .notebooks import lesson_paths
            found = []
            for path in lesson_paths():
                try:
                    nb = nbformat.read(str(path), as_version=4)
                except Exception:  # noqa: BLE001
                    continue
                ids = [_grade_id(c) for c in nb.cells]
                checks = [c.metadata["nbgrader"]["grade_id"] for c in graded_cells(nb)
                          if c.metadata["nbgrader"].get("grade_id", "").startswith("check_")]
                found.append((path.stem, {i for i in ids if i}, checks))
            _LESSONS.append(found)
        return _LESSONS[0]


def _max_points(name: str) -> float | None:
    from .core import REGISTRY, max_points
    from . import checks  # noqa: F401
    return max_points(name) if name in REGISTRY else None


def read_submission(path) -> tuple[object, list, list, str | None, str | None]:
    """(notebook or None, expected graded cells [(grade_id, name, points)], problems, lesson stem, error)."""
    path = pathlib.Path(path)
    problems: list[str] = []
    try:
        size = path.stat().st_size
    except OSError as e:
        return None, [], problems, None, f"cannot read the file: {e.strerror or e}"
    if size > MAX_NOTEBOOK_BYTES:
        return None, [], problems, None, f"not graded: the file is {size >> 20} MB, more than {MAX_NOTEBOOK_BYTES >> 20} MB"
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        return None, [], problems, None, f"not a notebook: the file is not UTF-8 text ({e.reason} at byte {e.start})"
    except OSError as e:
        return None, [], problems, None, f"cannot read the file: {e.strerror or e}"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        return None, [], problems, None, f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})"
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list) or "nbformat" not in raw:
        return None, [], problems, None, "not a Jupyter notebook: the JSON has no \"cells\" list or no \"nbformat\""
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # noqa: BLE001  (nbformat's ValidationError and anything it trips on)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, [], problems, None, f"not a valid notebook (nbformat): {msg[:300]}"

    ids = [_grade_id(c) for c in nb.cells]
    counts: dict[str, int] = {}
    for i in ids:
        if i:
            counts[i] = counts.get(i, 0) + 1
    for gid, n in counts.items():
        if n > 1:
            problems.append(f"grade_id {gid} appears {n} times (a cell was copied): graded once")
    lesson, best = None, 0
    for stem, lesson_ids, checks in _lessons():
        overlap = len(lesson_ids & set(counts)) + (0.5 if stem == path.stem else 0)
        if overlap > best and lesson_ids & set(counts):
            lesson, best = (stem, checks), overlap
    expected: list[tuple[str, str, float]] = []
    if lesson is not None:
        for gid in lesson[1]:
            name = gid[len("check_"):]
            expected.append((gid, name, _max_points(name) or 0.0))
        extra = [gid for gid in counts if gid.startswith("check_") and gid not in lesson[1]]
        if extra:
            problems.append(f"graded cells not in lesson {lesson[0]}, not graded: {', '.join(extra)}")
    else:
        for cell in graded_cells(nb):
            gid = _grade_id(cell) or ""
            name = gid[len("check_"):]
            if not gid.startswith("check_") or _max_points(name) is None:
                problems.append(f"graded cell {gid or '(no grade_id)'} has no checks: not graded")
            elif gid not in [e[0] for e in expected]:
                expected.append((gid, name, _max_points(name)))
    if not expected:
        return nb, [], problems, None, "no graded cells (nbgrader metadata grade: true) in this notebook"
    return nb, expected, problems, lesson[0] if lesson else None, None


# -------------------------------------------------------------------------- the notebook to run
def _sources() -> dict[str, str]:
    """The checks' sources, read once per grade command, before any notebook runs."""
    out = {"core.py": (HERE / "core.py").read_text(encoding="utf-8")}
    for p in sorted((HERE / "checks").glob("*.py")):
        if p.name != "__init__.py":
            out[f"checks/{p.name}"] = p.read_text(encoding="utf-8")
    return out


def prepare(nb, expected, problems, nonce0: str, sources: dict) -> tuple[object, dict[str, str], list]:
    """The notebook to execute: the startup cell, the submission's cells with each graded cell replaced
    by a call to the grader (other copies of graded cells dropped), and the graded cells it lacks at
    the end. Returns it, {grade_id: cell nonce}, and for each of its cells the submission's cell number
    (1-based; None for the cells the grader added)."""
    sandbox = (HERE / "sandbox.py").read_text(encoding="utf-8")
    cfg = {"nonce": nonce0, "root": str(HERE), "course": str(ROOT), "sources": sources}
    startup = (f"_g = {{'__name__': '__autograder_sandbox__', '__builtins__': dict(vars(__import__('builtins')))}}\n"
               f"exec(compile({sandbox!r}, {str(HERE / 'sandbox.py')!r}, 'exec'), _g)\n"
               f"_g['startup']({cfg!r})\n"
               "del _g")
    out = nbformat.v4.new_notebook()
    out.metadata = {"kernelspec": {"name": KERNEL_NAME, "display_name": "autograder", "language": "python"},
                    "language_info": {"name": "python"}}
    out.cells.append(nbformat.v4.new_code_cell(startup))
    origin: list = [None]
    names = {gid: (name, points) for gid, name, points in expected}
    nonces: dict[str, str] = {}

    def grader(gid):
        nonces[gid] = secrets.token_hex(16)
        call = {"name": names[gid][0], "cell": nonces[gid]}
        return nbformat.v4.new_code_cell(f"# the autograder grades {names[gid][0]} here\n"
                                         f"__import__('sys').audit('autograder.grade', {nonce0!r}, {call!r});")
    for number, cell in enumerate(nb.cells, 1):
        gid = _grade_id(cell)
        is_check = bool(gid and (gid in names or (gid.startswith("check_") and
                                                   cell.get("metadata", {}).get("nbgrader", {}).get("grade"))))
        if is_check:
            if gid in names and gid not in nonces and cell.cell_type == "code":
                if cell.source.strip() != f"check({names[gid][0]})":
                    problems.append(f"graded cell {gid} was edited: graded as in the lesson")
                out.cells.append(grader(gid))
                origin.append(number)
            continue
        if cell.cell_type == "code":
            out.cells.append(nbformat.v4.new_code_cell(cell.source))
            origin.append(number)
    for gid, name, _ in expected:
        if gid not in nonces:
            problems.append(f"graded cell {gid} is missing (deleted, or not a code cell): graded at the end")
            out.cells.append(grader(gid))
            origin.append(None)
    return out, nonces, origin


# ----------------------------------------------------------------------- the child that runs it
def _execute(spec_path: str) -> None:
    """Child process: execute the prepared notebook with the jailed kernel; write the executed notebook
    and {"error": ...}."""
    from nbclient import NotebookClient

    class Stop(BaseException):
        pass

    stopped = []  # the reason, once the notebook's time is up

    def time_up() -> bool:
        if not stopped and time.time() >= spec["deadline"]:
            stopped.append(f"stopped after {spec['timeout']:g} s (the notebook's time limit)")
        return bool(stopped)

    class Client(NotebookClient):
        current = None

        async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
            if time_up():  # no cell starts after the time limit
                raise Stop(stopped[0])
            self.current = cell_index
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)

    def stop(signum, frame):
        # the parent's fallback; an asyncio signal handler installed by the kernel client can replace this
        # one (seen with IPython 9's stack), which is why the deadline is kept here, by the cells' timeouts
        stopped.append(f"stopped after {spec['timeout']:g} s (the notebook's time limit)")
        raise Stop(stopped[0])

    spec = json.loads(pathlib.Path(spec_path).read_text())
    signal.signal(signal.SIGTERM, stop)
    nb = nbformat.read(spec["prepared"], as_version=4)
    # each cell may run until its own limit or the notebook's, whichever comes first: at the notebook's the
    # kernel is interrupted, and the next cell does not start
    client = Client(nb, timeout_func=lambda cell: max(1.0, min(spec["cell_timeout"], spec["deadline"] - time.time())),
                    allow_errors=True, interrupt_on_timeout=True, kernel_name=KERNEL_NAME, startup_timeout=120,
                    resources={"metadata": {"path": spec["work"]}})
    status = {"error": None, "cell": None}
    log = open(spec["log"], "wb")
    try:
        client.execute(cwd=spec["work"], stdout=subprocess.DEVNULL, stderr=log)
    except BaseException as e:  # noqa: BLE001  (reported to the parent)
        status["cell"] = client.current
        status["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        status["stopped"] = isinstance(e, Stop) or bool(stopped)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log.close()
        # the kernel and all it started are dead before the executed notebook (with the grader's key in
        # its first cell's output) is written
        _kill_token(os.environ.get("AUTOGRADER_TOKEN", ""))
        nbformat.write(nb, spec["out"])
        pathlib.Path(spec["status"]).write_text(json.dumps(status))


# ---------------------------------------------------------------------------- processes, files
def _kill_token(token: str) -> int:
    """Kill every process whose environment carries the notebook's token (but this one); how many."""
    if not token:
        return 0
    needle = f"AUTOGRADER_TOKEN={token}".encode()
    killed = 0
    for entry in pathlib.Path("/proc").iterdir() if pathlib.Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


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


_ISOLATION: list = []


def isolation() -> bool:
    """Whether kernels get their own namespaces with read-only file systems (probed once; set
    AUTOGRADER_ISOLATION=off to do without)."""
    with _LESSONS_LOCK:
        if not _ISOLATION:
            from .jail import isolation_available
            _ISOLATION.append(os.environ.get("AUTOGRADER_ISOLATION", "auto") != "off" and isolation_available())
        return _ISOLATION[0]


# ------------------------------------------------------------------------------------- grading
def _verdicts(executed, nonces: dict[str, str], key: str | None) -> dict[str, tuple[dict | None, str]]:
    """{grade_id: (verdict or None, why none)} from the executed notebook's grader cells."""
    out = {}
    cells = {}
    for cell in executed.cells if executed is not None else []:
        for gid, nonce in nonces.items():
            if nonce in cell.source and "autograder.grade" in cell.source:
                cells[gid] = cell
    for gid, nonce in nonces.items():
        cell = cells.get(gid)
        if cell is None or (not cell.get("outputs") and cell.get("execution_count") is None):
            out[gid] = (None, "not run")
            continue
        valid, other, error = [], 0, None
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                error = f"{o.get('ename')}: {o.get('evalue')}"[:300]
            if o.get("output_type") != "stream" or o.get("name") != "stdout":
                continue
            for line in "".join(o.get("text", "")).splitlines():
                if not line.startswith(MARK + " "):
                    continue
                parts = line.split(" ", 3)
                if len(parts) != 4 or parts[1] != nonce:
                    other += 1
                    continue
                sig, text = parts[2], parts[3]
                if key is None or sig == "unsigned":
                    try:
                        why = "; ".join(json.loads(text).get("flags") or []) or "unsigned"
                    except (ValueError, AttributeError):
                        why = "unsigned"
                    out.setdefault(gid, (None, f"the grader refused to sign its verdict: {why}"))
                    other += 1
                    continue
                expected = _hmac(key, nonce + " " + text)
                if not secrets.compare_digest(sig, expected):
                    other += 1
                    continue
                try:
                    valid.append(json.loads(text))
                except ValueError:
                    other += 1
        if gid in out:
            continue
        if len(valid) == 1 and valid[0].get("cell") == nonce and not other:
            out[gid] = (valid[0], "")
        elif len(valid) > 1 or other:
            out[gid] = (None, "more than one verdict, or a forged one, in the grader's cell: refused")
        elif error:
            out[gid] = (None, f"the grader's cell failed: {error}")
        else:
            out[gid] = (None, "the grader did not report (the notebook may have replaced sys.audit or "
                              "__import__, rewritten the cell, or hidden its output)")
    return out


def _hmac(key: str, text: str) -> str:
    import hmac
    return hmac.new(bytes.fromhex(key), text.encode(), hashlib.sha256).hexdigest()


def _start_key(executed, nonce0: str) -> str | None:
    if executed is None or not executed.cells:
        return None
    for o in executed.cells[0].get("outputs", []):
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            for line in "".join(o.get("text", "")).splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == START and parts[1] == nonce0:
                    return parts[2]
    return None


def grade_notebook(path: str | os.PathLike, timeout: float = NOTEBOOK_TIMEOUT, *, cell_timeout: float = CELL_TIMEOUT,
                   memory_gb: float = MEMORY_GB, threads: int | None = None, sources: dict | None = None,
                   protected: list | None = None) -> dict:
    """Grade one notebook: {"path", "points", "max_points", "error", "problems", "cells": [{"grade_id",
    "points", "max_points", "message"}], "seconds", "isolated", "lesson"}."""
    start = time.time()
    path = pathlib.Path(path)
    result = {"path": str(path), "points": 0.0, "max_points": 0.0, "error": None, "problems": [], "cells": [],
              "seconds": 0.0, "isolated": False, "lesson": None}
    nb, expected, problems, lesson, error = read_submission(path)
    result["problems"], result["lesson"] = problems, lesson
    result["max_points"] = float(sum(p for _, _, p in expected))
    if error:
        result["error"] = error
        result["cells"] = [{"grade_id": g, "points": 0.0, "max_points": p, "message": error} for g, _, p in expected]
        result["seconds"] = round(time.time() - start, 1)
        return result
    nonce0 = secrets.token_hex(16)
    prepared, nonces, origin = prepare(nb, expected, problems, nonce0, sources or _sources())
    token = secrets.token_hex(16)
    isolated = isolation()
    result["isolated"] = isolated
    verdicts: dict = {}
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        tmp = pathlib.Path(tmp).resolve()
        work, home, kernels = tmp / "work", tmp / "home", tmp / "kernels" / KERNEL_NAME
        for d in (work, home, kernels):
            d.mkdir(parents=True)
        os.chmod(tmp, 0o700)
        jail_cfg = {"work": str(work), "home": str(home), "writable": [str(work), str(home)], "token": token,
                    "memory": int(memory_gb * (1 << 30)) if memory_gb else None, "file_size": FILE_SIZE,
                    "isolate": isolated, "threads": threads or 1,
                    "protected": [str(p) for p in (protected or [])][:50]}
        (tmp / "jail.json").write_text(json.dumps(jail_cfg))
        (kernels / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "autograder.jail", str(tmp / "jail.json"), "--",
                     sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "autograder", "language": "python", "interrupt_mode": "signal",
            "env": {"PYTHONPATH": os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]]
                                                                  if os.environ.get("PYTHONPATH") else []))}}))
        nbformat.write(prepared, str(tmp / "prepared.ipynb"))
        spec = {"prepared": str(tmp / "prepared.ipynb"), "out": str(tmp / "out.ipynb"), "status": str(tmp / "status.json"),
                "work": str(work), "cell_timeout": cell_timeout, "log": str(tmp / "kernel.log"), "timeout": timeout,
                "deadline": start + timeout}
        (tmp / "spec.json").write_text(json.dumps(spec))
        env = dict(os.environ, JUPYTER_PATH=str(tmp), AUTOGRADER_TOKEN=token,
                   PYTHONPATH=os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
        proc = subprocess.Popen([sys.executable, "-m", "autograder.grade", "--execute", str(tmp / "spec.json")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True,
                                env=env, cwd=str(tmp))
        stopped = False
        try:  # the child keeps the deadline itself; this is the fallback for a child that cannot
            _, err = proc.communicate(timeout=max(0.0, start + timeout - time.time()) + STOP_GRACE)
        except subprocess.TimeoutExpired:  # the child stops the kernel, then writes what was graded so far
            stopped = True
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                _, err = proc.communicate(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                _, err = proc.communicate()
        finally:
            _kill_token(token)
        status = {}
        try:
            status = json.loads((tmp / "status.json").read_text())
        except (OSError, ValueError):
            pass
        try:
            executed = nbformat.read(str(tmp / "out.ipynb"), as_version=4)
        except Exception:  # noqa: BLE001
            executed = None
        key = _start_key(executed, nonce0)
        if stopped or status.get("stopped"):
            result["error"] = f"stopped after {timeout:g} s (the notebook's time limit)"
        elif executed is None:
            last = err.strip().splitlines()[-1] if err and err.strip() else f"exit status {proc.returncode}"
            result["error"] = f"the notebook could not run: {last[:300]}"
        elif key is None:
            try:
                log = (tmp / "kernel.log").read_text(errors="replace").strip().splitlines()
            except OSError:
                log = []
            result["error"] = ("the kernel did not start the grader (it could not start, or died at once): "
                               + (status.get("error") or "no report") + (f" ({log[-1][:200]})" if log else ""))
        elif status.get("error"):
            cell = status.get("cell")
            number = origin[cell] if isinstance(cell, int) and 0 <= cell < len(origin) else None
            where = f" while running the notebook's cell {number}" if number else \
                " while grading" if isinstance(cell, int) and cell > 0 else ""
            e = status["error"]
            if "DeadKernel" in e or "died" in e.lower():
                result["error"] = (f"the kernel died{where} (the notebook's code exited, was killed, or crashed): "
                                   "the cells after it did not run")
            elif "Timeout" in e:
                result["error"] = f"a cell{where} ran past {cell_timeout:g} s and could not be interrupted"
            else:
                result["error"] = f"the run stopped{where}: {e}"
        verdicts = _verdicts(executed, nonces, key)
    for gid, name, top in expected:
        verdict, why = verdicts.get(gid, (None, "not run"))
        if verdict is None:
            if why == "not run" and result["error"]:
                why = f"not run: {result['error']}"
            result["cells"].append({"grade_id": gid, "points": 0.0, "max_points": top, "message": why})
            continue
        lines = list(verdict.get("lines") or [])
        flags = list(dict.fromkeys(verdict.get("flags") or []))
        message = "\n".join(lines + [f"✗ refused: {f}" for f in flags] +
                            ([f"✗ {verdict['error']}"] if verdict.get("error") else []))
        points = 0.0 if flags or verdict.get("error") else max(0.0, min(float(verdict.get("points") or 0.0), top))
        result["cells"].append({"grade_id": gid, "points": points, "max_points": top, "message": message})
    result["points"] = float(sum(c["points"] for c in result["cells"]))
    result["seconds"] = round(time.time() - start, 1)
    return result


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
          cell_timeout: float = CELL_TIMEOUT, memory_gb: float = MEMORY_GB) -> dict:
    """Grade every notebook (`jobs` at a time), print a report, and return (and write to json_path)
    {"notebooks": [...], "isolation", "tampering": [...]}."""
    paths = [str(p) for p in paths]
    jobs = max(1, int(jobs or 1))
    sources = _sources()
    protected = _protected_paths(paths)
    baseline = _hash_files(protected)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    report = {"notebooks": [], "isolation": isolation(), "tampering": []}
    seen_changes: set = set()
    lock = threading.Lock()

    def one(p):
        r = grade_notebook(p, timeout, cell_timeout=cell_timeout, memory_gb=memory_gb, threads=threads,
                           sources=sources, protected=[q for q in protected if q.is_dir()])
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

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, p) for p in paths]
        for p, f in zip(paths, futures):
            try:
                r = f.result()
            except Exception as e:  # noqa: BLE001  (a bug here must not stop the batch)
                r = {"path": p, "points": 0.0, "max_points": 0.0, "error": f"the grader failed: {type(e).__name__}: {e}",
                     "problems": [], "cells": [], "seconds": 0.0, "isolated": False, "lesson": None}
            report["notebooks"].append(r)
            show(r, p)
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--execute":
    _execute(sys.argv[2])
