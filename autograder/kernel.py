"""Running one submission for `python -m autograder grade` (autograder/grade.py): `grade_notebook`.

The notebook read by autograder/submission.py runs in a fresh kernel started by autograder.jail (its own
namespaces, as `nobody`, on a read-only file system with its scratch and connection folders only, the lesson's
own stage of `solutions` cleared), with a time limit per cell and per notebook. Each graded cell is replaced
by a call to autograder/serve.py, which connects to the checker (autograder/checker.py), a process started
before the kernel that holds the checks and never runs the notebook's code: it calls the learner's objects
across the socket (autograder/remote.py) and keeps its verdicts in a file that only the grade command reads.
Points come only from the checker's file: the outputs stored in the submission, what its cells print, and the
points its metadata claims count for nothing. Afterwards every process the notebook started is killed.

The kernel is driven by a child process of its own (`python -m autograder.runner SPEC`, autograder/runner.py),
which keeps the notebook's deadline and reports how the run ended.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

import nbformat

from .folders import SCRATCH_MB, notebook_folders, remove_folders  # noqa: F401  (SCRATCH_MB: the tests read it)
from .outcomes import Ending, name_lines
from .records import CellResult, CheckerSpec, JailSpec, NameVerdict, NotebookResult, RunSpec, RunStatus
from .runner import KERNEL_NAME, _ending, _error_of, _kill_token, _Stop  # noqa: F401  (the tests read three)
from .submission import _grade_id, course_pythonpath, expected_cells, lesson_of, read_submission

NOTEBOOK_TIMEOUT = 600    # seconds for a whole notebook
CELL_TIMEOUT = 180        # seconds for one cell
STOP_GRACE = 20          # seconds the notebook's own process gets, past the time limit, to stop and report
MEMORY_GB = float(os.environ.get("AUTOGRADER_MEMORY_GB", 4))  # the kernel's address space (RLIMIT_AS)
FILE_SIZE = 1 << 30       # the largest file the kernel may write (RLIMIT_FSIZE)
ROOT = pathlib.Path(__file__).resolve().parents[1]
_ISOLATION_LOCK = threading.Lock()


# -------------------------------------------------------------------------- the notebook to run
def prepare(nb, expected, problems, socket_path: str) -> tuple[object, dict[str, str], list]:
    """The notebook to execute: the submission's code cells with each graded cell replaced by a call to
    the checker (other copies of graded cells dropped), and the graded cells it lacks at the end. Returns
    it, {cell nonce: contract name}, and for each of its cells the submission's cell number (1-based; None
    for the cells the grader added)."""
    out = nbformat.v4.new_notebook()
    out.metadata = {"kernelspec": {"name": KERNEL_NAME, "display_name": "autograder", "language": "python"},
                    "language_info": {"name": "python"}}
    origin: list = []
    names = {gid: (name, points) for gid, name, points in expected}
    nonces: dict[str, str] = {}
    done: set = set()

    def grader(gid):
        nonce = secrets.token_hex(16)
        nonces[nonce] = names[gid][0]
        done.add(gid)
        return nbformat.v4.new_code_cell(f"# the autograder grades {names[gid][0]} here, from outside this "
                                         "kernel\n__import__('autograder.serve', "
                                         f"fromlist=['grade']).grade({names[gid][0]!r}, {nonce!r}, "
                                         f"{socket_path!r})")
    for number, cell in enumerate(nb.cells, 1):
        gid = _grade_id(cell)
        is_check = bool(gid and (gid in names or (gid.startswith("check_") and
                                                   cell.get("metadata", {}).get("nbgrader",
                                                                                {}).get("grade"))))
        if is_check:
            if gid in names and gid not in done and cell.cell_type == "code":
                if cell.source.strip() != f"check({names[gid][0]})":
                    problems.append(f"graded cell {gid} was edited: graded as in the lesson")
                out.cells.append(grader(gid))
                origin.append(number)
            continue
        if cell.cell_type == "code":
            out.cells.append(nbformat.v4.new_code_cell(cell.source))
            origin.append(number)
    for gid, _name, _ in expected:
        if gid not in done:
            problems.append(f"graded cell {gid} is missing (deleted, or not a code cell): graded at the end")
            out.cells.append(grader(gid))
            origin.append(None)
    return out, nonces, origin


_ISOLATION: list = []


def isolation() -> bool:
    """Whether kernels get their own namespaces with read-only file systems (probed once; set
    AUTOGRADER_ISOLATION=off to do without)."""
    with _ISOLATION_LOCK:
        if not _ISOLATION:
            from .jail import isolation_available
            _ISOLATION.append(os.environ.get("AUTOGRADER_ISOLATION", "auto") != "off"
                              and isolation_available())
        return _ISOLATION[0]


def keep_files() -> bool:
    """Whether a notebook's and a batch's working files are kept, to debug the grader (AUTOGRADER_KEEP
    set)."""
    return bool(os.environ.get("AUTOGRADER_KEEP"))


def _results(path: pathlib.Path) -> dict[str, NameVerdict]:
    """{cell nonce: the checker's verdict} from its results file (the first of each cell)."""
    out: dict = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and isinstance(r.get("cell"), str):
            out.setdefault(r["cell"], NameVerdict.from_json(r))
    return out


CANCELLED = "stopped: the batch was interrupted"


class _Cancelled(Exception):
    pass


class _CellRuns:
    """How the submission's cells ran, to say truly why a graded name was not there: which cells define it (by
    their text, read by autograder/submission.py, or as the lesson's answer cell of that name), what each
    raised (the runner's "errors", by the prepared notebook's cell), how far the run got ("reached")."""

    def __init__(self, nb, prepared, origin: list, nonces: dict, status: RunStatus):
        self.origin = origin
        self.number_to_index = {n: i for i, n in enumerate(origin) if n}
        self.cells = list(nb.cells) if nb is not None else []
        self.errors = {}
        for key, value in (status.errors or {}).items():
            if str(key).isdigit() and isinstance(value, dict) and int(key) < len(origin) and origin[int(key)]:
                self.errors[origin[int(key)]] = value
        self.reached = status.reached if isinstance(status.reached, int) else None
        self.graded_at = {}  # name -> index of its grader cell in the prepared notebook
        for index, cell in enumerate(prepared.cells if prepared is not None else []):
            for nonce, name in nonces.items():
                if nonce in cell.source:
                    self.graded_at.setdefault(name, index)

    def defining(self, name: str) -> list[int]:
        """The numbers (1-based) of the submission's code cells that define `name`."""
        out = []
        for number, cell in enumerate(self.cells, 1):
            meta = cell.get("metadata", {})
            facts = meta.get("autograder") or {}
            if cell.get("cell_type") == "code" and (name in (facts.get("defines") or []) or
                                                    (meta.get("nbgrader") or {}).get("grade_id") == name):
                out.append(number)
        return out

    @staticmethod
    def raised(error: dict) -> str:
        line = f" at line {error['line']}" if isinstance(error.get("line"), int) else ""
        what = f"{error.get('ename') or 'an error'}" + (f": {error['evalue']}" if error.get("evalue") else "")
        if error.get("ename") in ("SyntaxError", "IndentationError", "TabError"):
            return (f"has a {error['ename']}{line} ({error.get('evalue') or 'invalid syntax'}), "
                    "so none of it ran")
        return f"raised {what}{line}"

    def why_undefined(self, name: str, stopped: str | None) -> str:
        """Why `name` was not defined when its graded cell ran, as far as the run shows."""
        defining = self.defining(name)
        if not defining:
            return (f"no cell of the notebook defines it (no `def {name}`, `class {name}` or `{name} = ...`: "
                    "renamed, or its cell deleted?)")
        graded = self.graded_at.get(name)
        for number in defining:
            if number in self.errors:
                return f"cell {number}, which defines it, {self.raised(self.errors[number])}"
        before = [n for n in defining if graded is None or self.number_to_index.get(n, -1) < graded]
        if not before:
            return f"cell {defining[0]}, which defines it, comes after its graded cell: it had not run yet"
        number = before[-1]
        index = self.number_to_index.get(number)
        if index is None or self.reached is None or index > self.reached:
            return f"cell {number}, which defines it, did not run" + (f" ({stopped})" if stopped else "")
        return (f"cell {number} ran without an error but had not defined it when its graded cell ran (inside "
                "a condition that was false, or deleted or renamed by a later cell?)")

    def notes(self, name: str) -> list[str]:
        """A line for each cell that defines `name` and raised: what was graded is what the cells before
        left."""
        return [f"note: cell {n}, which defines {name}, {self.raised(self.errors[n])}"
                for n in self.defining(name) if n in self.errors]


class Cancel:
    """A batch's stop (grade.py calls it on SIGINT or SIGTERM): once called, no notebook's run starts, and
    each run under way is stopped (its runner gets SIGTERM: it stops the kernel and the checker, then
    reports)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: set = set()
        self.requested = False

    def start(self, *args, **kwargs) -> subprocess.Popen | None:
        """subprocess.Popen(*args, **kwargs) (in a session of its own), or None once the batch is stopped."""
        with self._lock:
            if self.requested:
                return None
            proc = subprocess.Popen(*args, **kwargs)
            self._running.add(proc)
            return proc

    def finished(self, proc) -> None:
        with self._lock:
            self._running.discard(proc)

    def __call__(self) -> None:
        with self._lock:
            self.requested = True
            running = list(self._running)
        for proc in running:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass


@dataclasses.dataclass
class _Run:
    """One notebook's run, as grade_notebook's steps fill it in: the options it was given, then what each step
    made."""
    timeout: float
    cell_timeout: float
    memory_gb: float
    threads: int
    protected: list
    isolated: bool
    checker_server: str | None
    kernel_server: str | None
    start: float
    token: str = dataclasses.field(default_factory=lambda: secrets.token_hex(16))
    prepared: object = None
    nonces: dict = dataclasses.field(default_factory=dict)
    origin: list = dataclasses.field(default_factory=list)
    status: RunStatus = dataclasses.field(default_factory=RunStatus)
    verdicts: dict = dataclasses.field(default_factory=dict)


def grade_notebook(path: str | os.PathLike, timeout: float = NOTEBOOK_TIMEOUT, **options) -> dict:
    """Grade one notebook: {"path", "points", "max_points", "error", "problems", "cells": [{"grade_id",
    "points", "max_points", "message"}], "seconds", "isolated", "lesson"}, run_notebook's record as JSON."""
    return run_notebook(path, timeout, **options).to_json()


def check_limits(timeout: float, cell_timeout: float, memory_gb: float) -> None:
    """ValueError unless each limit is a finite number > 0: a memory of 0 (or None) would set no bound at all,
    and an infinite one cannot be given to the kernel (RLIMIT_AS takes bytes)."""
    for name, value in (("timeout", timeout), ("cell_timeout", cell_timeout), ("memory_gb", memory_gb)):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def run_notebook(path: str | os.PathLike, timeout: float = NOTEBOOK_TIMEOUT, *,
                 cell_timeout: float = CELL_TIMEOUT,
                 memory_gb: float = MEMORY_GB, threads: int | None = None, protected: list | None = None,
                 lesson: str | None = None, batch: str | os.PathLike | None = None,
                 checker_server: str | None = None, kernel_server: str | None = None,
                 cancel: Cancel | None = None, isolated: bool | None = None,
                 keep: bool | None = None) -> NotebookResult:
    """Grade one notebook (records.NotebookResult). `lesson`: the assignment (else taken from the file's or
    folder's name); `batch`: the folder of the batch's working files (a new one by default), which the kernel
    never sees; `checker_server`: the socket of the batch's checker process (autograder.checker.serve), which
    forks this notebook's checker (else one is started for it); `kernel_server`: the socket of the batch's
    kernel server (autograder.jail.serve), which forks this notebook's kernel when it is isolated (else its
    launcher starts it); `cancel`: the batch's stop (a run it stopped is reported with the error "stopped: the
    batch was interrupted"); `isolated`, `keep`: the batch's isolation() and keep_files(), decided once for it
    (else here).

    The steps, in order: read (the submission), review (its cells, before they run), prepare (the notebook to
    run), views and specs (what each child reads), run (the runner, the kernel and the checker), collect (each
    graded cell's points from the checker's verdicts)."""
    check_limits(timeout, cell_timeout, memory_gb)
    isolated = isolation() if isolated is None else isolated
    run = _Run(timeout, cell_timeout, memory_gb, threads or 1, list(protected or []), isolated,
               checker_server, kernel_server, time.time())
    result = NotebookResult(path=str(pathlib.Path(path)), isolated=run.isolated)
    nb, expected = _read(pathlib.Path(path), lesson, result)
    if result.error:
        result.cells = [CellResult(g, 0.0, p, result.error) for g, _, p in expected]
        result.seconds = round(time.time() - run.start, 1)
        return result
    _review(nb, result.problems)
    own = batch is None
    batch = pathlib.Path(tempfile.mkdtemp(prefix="autograder-")) if own else pathlib.Path(batch)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="nb-", dir=batch)).resolve()
    os.chmod(tmp, 0o711)
    try:
        result.error = _run(nb, expected, result, run, tmp, batch, cancel)
    except _Cancelled:
        pass
    finally:
        if not (keep_files() if keep is None else keep):  # the working files, kept to debug the grader
            remove_folders(tmp, result.problems)
            if own:
                remove_folders(batch, result.problems)
    if cancel is not None and cancel.requested:
        result.error = CANCELLED
    result.cells = _collect(nb, expected, run, result.error)
    result.points = float(sum(c.points for c in result.cells))
    result.seconds = round(time.time() - run.start, 1)
    return result


def _read(path: pathlib.Path, lesson: str | None, result: NotebookResult) -> tuple[object, list]:
    """Read: the submission (autograder/submission.py) and its expected graded cells, into `result` (its
    lesson, problems, most points, and the error that stops it being run)."""
    nb, expected, problems, stem, error = read_submission(path, lesson)
    if error and not expected:  # unreadable, but the assignment is known: its cells, each at 0
        stem, _ = lesson_of(path, lesson)
        expected = expected_cells(stem)
    result.problems, result.lesson = problems, stem
    result.max_points = float(sum(p for _, _, p in expected))
    result.error = error
    return nb, expected


def _review(nb, problems: list) -> None:
    """Review: read before it runs, what reaches below the library-shortcut watch is named for review
    (audit.py)."""
    try:
        from .audit import audit_notebook
        problems.extend(audit_notebook(nb))
    except Exception as e:  # noqa: BLE001  (the notebook is graded all the same)
        problems.append(f"the grader could not read the cells for review: {type(e).__name__}")


def _run(nb, expected, result: NotebookResult, run: _Run, tmp: pathlib.Path, batch: pathlib.Path,
         cancel: Cancel | None) -> str | None:
    """Prepare, views, specs and run: the notebook's folders, the notebook to run, what its kernel sees of the
    course, each child's spec; then the runner, started and waited for, its status and the checker's verdicts
    into `run`. Returns the run's error (None when it ran to the end)."""
    dirs = notebook_folders(tmp, run.isolated)
    private = dirs["private"]
    socket_path = str(dirs["sock"] / "grader.sock")
    run.prepared, run.nonces, run.origin = prepare(nb, expected, result.problems, socket_path)
    from .views import build as build_views
    views = build_views(result.lesson, tmp / "views")
    _write_specs(run, dirs, socket_path, views, batch)
    stopped, err = _run_runner(run, private, cancel)
    run.status = _read_status(private / "status.json", err)
    run.verdicts = _results(private / "results.jsonl")
    result.problems.extend(_interruptions(run))
    return _run_error(run, stopped, private / "kernel.log")


def _write_specs(run: _Run, dirs: dict, socket_path: str, views: dict, batch: pathlib.Path) -> None:
    """The specs each child reads, in the notebook's private folder: the checker's, the kernel launcher's
    (jail), the kernel's (Jupyter's kernelspec), the prepared notebook and the runner's."""
    from .jail import NOBODY, python_paths
    private, work, home, conn = dirs["private"], dirs["work"], dirs["home"], dirs["conn"]
    memory = int(run.memory_gb * (1 << 30)) if run.memory_gb else None
    CheckerSpec(socket=socket_path, results=str(private / "results.jsonl"), cells=run.nonces,
                uid=NOBODY if run.isolated else None, threads=run.threads, tmp=str(private / "tmp"),
                memory=memory).write(private / "checker.json")
    JailSpec(work=str(work), home=str(home), conn=str(conn), writable=[str(work), str(home), str(conn)],
             token=run.token, memory=memory, file_size=FILE_SIZE, isolate=run.isolated, threads=run.threads,
             protected=[str(p) for p in run.protected][:50], hide=[str(batch.resolve()), str(ROOT)],
             show=python_paths() + [str(dirs["sock"])], views=views,
             server=run.kernel_server if run.isolated else None).write(private / "jail.json")
    kernels = private / "kernels" / KERNEL_NAME
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "autograder.jail", str(private / "jail.json"), "--",
                 sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "autograder", "language": "python", "interrupt_mode": "signal",
        "env": {"PYTHONPATH": course_pythonpath()}}))
    nbformat.write(run.prepared, str(private / "prepared.ipynb"))
    RunSpec(prepared=str(private / "prepared.ipynb"), status=str(private / "status.json"), work=str(work),
            cell_timeout=run.cell_timeout, log=str(private / "kernel.log"), timeout=run.timeout,
            deadline=run.start + run.timeout, checker=str(private / "checker.json"), private=str(private),
            ipc=str(conn / "kernel"), connection_file=str(conn / "kernel.json"), sealed=str(dirs["sealed"]),
            checker_server=run.checker_server).write(private / "spec.json")


def _run_runner(run: _Run, private: pathlib.Path, cancel: Cancel | None) -> tuple[bool, str]:
    """The runner (`python -m autograder.runner SPEC`) started and waited for: (whether it had to be stopped,
    the end of its stderr). The runner keeps the deadline itself; this is the fallback for one that cannot."""
    env = dict(os.environ, JUPYTER_PATH=str(private), AUTOGRADER_TOKEN=run.token,
               PYTHONPATH=course_pythonpath())
    runner = ([sys.executable, "-m", "autograder.runner", str(private / "spec.json")],)
    options = dict(stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, text=True,
                   env=env, cwd=str(private))
    proc = cancel.start(*runner, **options) if cancel is not None else subprocess.Popen(*runner, **options)
    if proc is None:
        raise _Cancelled()
    stopped = False
    try:
        _, err = proc.communicate(timeout=max(0.0, run.start + run.timeout - time.time()) + STOP_GRACE)
    except subprocess.TimeoutExpired:  # the runner stops the kernel, then reports
        stopped = True
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
                try:
                    kill()
                except OSError:
                    pass
            _, err = proc.communicate()
    finally:
        _kill_token(run.token)
        if cancel is not None:
            cancel.finished(proc)
    return stopped, (err or "")[-20000:]


def _read_status(path: pathlib.Path, err: str) -> RunStatus:
    """The runner's status.json; where there is none, an error from the end of its stderr."""
    try:
        return RunStatus.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return RunStatus(error="the grader's runner failed: "
                               f"{(err.strip().splitlines() or ['no report'])[-1][:300]}",
                         ending=Ending.NO_START.value)


def _run_error(run: _Run, stopped: bool, log_path: pathlib.Path) -> str | None:
    """The notebook's error from how the run ended (outcomes.Ending), or None when it ran to the end."""
    status = run.status
    if stopped or status.stopped:
        return f"stopped after {run.timeout:g} s (the notebook's time limit)"
    if not status.error:
        return None
    cell = status.cell
    number = run.origin[cell] if isinstance(cell, int) and 0 <= cell < len(run.origin) else None
    where = (f" while running the notebook's cell {number}" if number else
             " while grading" if isinstance(cell, int) else "")
    ending = Ending(status.ending or Ending.NO_START.value)
    if ending is Ending.DEAD_KERNEL:
        return (f"the kernel died{where} (the notebook's code exited, was killed, or crashed): the cells "
                "after it did not run")
    if ending is Ending.NO_START:
        try:
            log = log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            log = []
        return f"the kernel could not start: {status.error}" + (f" ({log[-1][:200]})" if log else "")
    if ending is Ending.CELL_TIMEOUT:
        return f"a cell{where} ran past {run.cell_timeout:g} s and could not be interrupted"
    return f"the run stopped{where}: {status.error}"


def _interruptions(run: _Run) -> list[str]:
    """A note for each cell interrupted at the cell time limit (the run went on)."""
    out = []
    for index in run.status.interrupted or []:
        number = run.origin[index] if isinstance(index, int) and 0 <= index < len(run.origin) else None
        if number:
            out.append(f"cell {number} ran past the cell time limit ({run.cell_timeout:g} s) and was "
                       "interrupted; the cells after it still ran")
    return out


def _collect(nb, expected, run: _Run, error: str | None) -> list[CellResult]:
    """Collect: each expected graded cell's points and message, from the checker's verdict on its name."""
    by_name: dict[str, NameVerdict] = {}
    for nonce, name in run.nonces.items():
        if nonce in run.verdicts:
            by_name.setdefault(name, run.verdicts[nonce])
    cells = _CellRuns(nb, run.prepared, run.origin, run.nonces, run.status)
    out = []
    for gid, name, top in expected:
        verdict = by_name.get(name)
        if verdict is None:
            why = f"not run: {error}" if error else \
                "not graded: the graded cell did not reach the grader (the notebook's code stopped it)"
            out.append(CellResult(gid, 0.0, top, why))
            continue
        lines = [str(x) for x in verdict.lines or []]
        if verdict.undefined:  # the checker cannot know why
            lines = [f"✗ {name} is not defined: {cells.why_undefined(name, error)}"]
        else:
            lines += cells.notes(name)
        flags = list(dict.fromkeys(str(f) for f in verdict.flags or []))
        message = "\n".join(name_lines(lines, flags, verdict.error))
        points = 0.0 if flags or verdict.error else max(0.0, min(float(verdict.points or 0.0), top))
        out.append(CellResult(gid, points, top, message))
    return out
