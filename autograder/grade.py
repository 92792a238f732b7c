"""`python -m autograder grade NOTEBOOK... [--json FILE] [--csv FILE] [--jobs N] [--timeout S] [--cell-timeout
S] [--memory GB] [--lesson STEM] [--shard K/N] [--regrade]`: grade notebooks, each in a fresh kernel, and
report the points of every graded cell. A broken, slow or hostile notebook costs only its own grade, with the
reason in the report. What this protects and what it does not is in autograder/GRADING.md. A batch can be
stopped (SIGINT, SIGTERM) and gone on with, graded in shards on several machines, and merged (`python -m
autograder merge`).

In three layers, each its own module:
1. autograder/submission.py reads a submission without running anything (`read_submission`).
2. autograder/kernel.py runs one notebook in a jailed kernel beside the checker (`grade_notebook`).
3. This module grades a batch, `jobs` at a time, and reports: the course's files and the submissions are
hashed
   before and after each notebook; a change is reported in the report's "tampering" (and, when the kernels are
   not isolated, on the notebook, which then earns nothing).
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import pathlib
import signal
import sys
import tempfile
import threading
import time

from . import forkserver
from .kernel import (
    CANCELLED,
    CELL_TIMEOUT,
    MEMORY_GB,
    NOTEBOOK_TIMEOUT,
    Cancel,
    check_limits,
    grade_notebook,
    isolation,
    keep_files,
    run_notebook,
)
from .outcomes import failed_title
from .records import NotebookResult
from .submission import course_pythonpath, lesson_of, lessons, read_submission

__all__ = ["grade", "grade_notebook", "isolation", "labels", "lesson_of", "merge", "read_submission",
           "shard_of",
           "student_of", "Interrupted", "ReportError", "CELL_TIMEOUT", "MEMORY_GB", "NOTEBOOK_TIMEOUT"]
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
        files = [top] if top.is_file() else [
            p for p in top.rglob("*") if p.is_file() and not skip & set(p.relative_to(top).parts)
        ] if top.is_dir() else []
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
    imported PyTorch and ipykernel once: (process, its socket), or None where it does not start (each kernel
    is then started by its own launcher). Its environment is the variables a kernel keeps, nothing else: the
    kernels inherit its memory, and the grade command's environment may hold secrets."""
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


class ReportError(ValueError):
    """--json names a file that is not a grade report (it is never overwritten), or merge was given reports
    that disagree: one line, for the command line."""


class Interrupted(Exception):
    """The batch was stopped by SIGINT or SIGTERM: `signum`, and `line`, what was kept (for the command
    line)."""

    def __init__(self, signum: int, line: str):
        super().__init__(line)
        self.signum, self.line = signum, line


def shard_of(path, count: int) -> int:
    """Which of `count` shares a notebook is graded in: from the sha256 of its path as given (normalized), so
    the same on every machine given the same paths, whatever their order, and unchanged when others are
    added."""
    key = os.path.normpath(str(path)).encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % count


def student_of(path) -> str:
    """The student a submission is: nbgrader's submitted/<student>/<lesson>/<notebook>.ipynb, else the file's
    name (without .ipynb)."""
    parts = pathlib.PurePath(str(path)).parts
    if len(parts) >= 4 and parts[-4] == "submitted":
        return parts[-3]
    return pathlib.PurePath(str(path)).stem


def _sha256(path) -> str | None:
    """The submission's sha256, read as the grader reads it (a regular file of its own, not too large), or
    None."""
    from .submission import _open_regular
    data, error = _open_regular(pathlib.Path(path))
    return None if error else hashlib.sha256(data).hexdigest()


def _write_atomically(path, text: str) -> None:
    """`text` into `path` by a new file renamed over it: a reader (or a batch stopped now) sees the old whole
    file or the new one, never a part."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent.resolve()))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_report(path, remedy: str = "give --json another file") -> dict | None:
    """The grade report in `path` (None when there is no such file); ReportError when the file is not one,
    ending with `remedy`, what to do."""
    path = pathlib.Path(path)
    if not path.exists():
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ReportError(f"{path} is not a grade report ({type(e).__name__}): {remedy}") from None
    if not isinstance(report, dict) or not isinstance(report.get("notebooks"), list) or \
            not all(isinstance(n, dict) and isinstance(n.get("path"), str) for n in report["notebooks"]):
        raise ReportError(f"{path} is not a grade report (no \"notebooks\" list of graded paths): {remedy}")
    return report


def _columns(report) -> list[str]:
    """The graded cells in the report, in the course's order (lesson by lesson)."""
    present = {c.get("grade_id") for n in report["notebooks"] for c in n.get("cells") or []}
    ordered = [gid for _, _, checks in lessons() for gid in checks if gid in present]
    return ordered + sorted(g for g in present if isinstance(g, str) and g not in ordered)


def _students(report) -> list[str]:
    """Each notebook's row name: its student, or, where two notebooks of one lesson would share a row, its
    path."""
    ids = [n.get("student") or student_of(n["path"]) for n in report["notebooks"]]
    seen: dict = {}
    for i, n in enumerate(report["notebooks"]):
        seen.setdefault((ids[i], n.get("lesson")), []).append(i)
    clashing = sorted(i for group in seen.values() if len(group) > 1 for i in group)
    if clashing:
        names = labels([report["notebooks"][i]["path"] for i in clashing])
        for i, name in zip(clashing, names):
            ids[i] = name[:-len(".ipynb")] if name.endswith(".ipynb") else name
    return ids


def csv_text(report) -> str:
    """One row per student (sorted), one column per graded cell (points), and the total."""
    import csv
    import io
    columns = _columns(report)
    rows: dict = {}
    for sid, n in zip(_students(report), report["notebooks"]):
        row = rows.setdefault(sid, {})
        for c in n.get("cells") or []:
            row[c.get("grade_id")] = row.get(c.get("grade_id"), 0.0) + float(c.get("points") or 0.0)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student"] + columns + ["total"])
    for sid in sorted(rows):
        row = rows[sid]
        writer.writerow([sid] + [f"{row[g]:g}" if g in row else "" for g in columns] +
                        [f"{sum(row.values()):g}"])
    return out.getvalue()


def _failed_checks(n) -> list[str]:
    """'name: check' of each check the notebook failed (from its cells' messages)."""
    out = []
    for c in n.get("cells") or []:
        name = str(c.get("grade_id", ""))[len("check_"):]
        for line in str(c.get("message") or "").splitlines():
            title = failed_title(line)
            if title is not None:
                out.append(f"{name}: {title[:90]}")
    return out


def summary_text(report) -> str:
    """A screen of the class: per lesson, the notebooks, the mean and median, how the scores spread (by tenths
    of the most), those not graded (an error), and the checks failed most often."""
    import collections
    import statistics
    lines = []
    by_lesson: dict = {}
    for n in report["notebooks"]:
        by_lesson.setdefault(n.get("lesson") or "no lesson", []).append(n)
    for lesson, group in sorted(by_lesson.items()):
        top = max(float(n.get("max_points") or 0.0) for n in group)
        scores = [float(n.get("points") or 0.0) for n in group]
        mean, median = statistics.fmean(scores), statistics.median(scores)
        share = (lambda x, top=top: x / top) if top else (lambda x: 0.0)
        bins = collections.Counter(min(9, int(share(x) * 10)) if share(x) < 1 else 10 for x in scores)
        spread = "  ".join(f"{b * 10}-{b * 10 + 9}%: {bins[b]}" if b < 10 else f"100%: {bins[b]}"
                           for b in range(11) if bins[b])
        errors = sum(1 for n in group if n.get("error"))
        lines.append(f"{lesson}: {len(group)} notebook{'s' if len(group) != 1 else ''}, mean {mean:.3g} / "
                     f"{top:g} ({100 * share(mean):.0f}%), median "
                     f"{median:g}" + (f", {errors} with an error" if errors else ""))
        lines.append(f"  scores: {spread}")
        failed = collections.Counter(f for n in group for f in dict.fromkeys(_failed_checks(n)))
        for check, count in failed.most_common(5 if len(by_lesson) <= 2 else 2):
            lines.append(f"  failed by {count:>3}: {check}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


def grade(paths, json_path=None, timeout: float = NOTEBOOK_TIMEOUT, stream=sys.stdout, *, jobs: int = 1,
          cell_timeout: float = CELL_TIMEOUT, memory_gb: float = MEMORY_GB, lesson: str | None = None,
          csv_path=None, shard: tuple[int, int] | None = None, regrade: bool = False, progress=None,
          summary: bool = True) -> dict:
    """Grade every notebook (`jobs` at a time), print a report, and return (and write to json_path)
    {"notebooks": [...], "isolation", "safe", "tampering": [...]}. `lesson`: the assignment every notebook is
    graded as (else each one's file or folder name says).

    For a batch left running: `progress` (stderr by default) gets a line as each notebook finishes (k of N,
    the time so far and an estimate of what is left); the report is rewritten (atomically) at json_path and
    csv_path as each one finishes. SIGINT or SIGTERM stops the batch: the runs under way are stopped and not
    recorded, what finished stays in the report, and Interrupted is raised. A report already at json_path is
    gone on from: a notebook whose path and sha256 are in it is not graded again (unless `regrade`), its other
    notebooks are kept. `shard` (K, N): only the notebooks that shard_of puts in share K of N.

    The batch's steps, in order (each a method of _Batch): read, prepare, run (each notebook:
    kernel.run_notebook's read, review, prepare, views, specs, run and collect), collect."""
    check_limits(timeout, cell_timeout, memory_gb)
    batch = _Batch(json_path=json_path, csv_path=csv_path, stream=stream,
                   progress=sys.stderr if progress is None else progress, lesson=lesson, regrade=regrade,
                   options=dict(timeout=timeout, cell_timeout=cell_timeout, memory_gb=memory_gb,
                                lesson=lesson))
    batch.read(paths, shard, jobs)
    batch.prepare()
    batch.run()
    return batch.collect(summary)


class _Batch:
    """One batch of grade(), as its steps fill it in."""

    def __init__(self, *, json_path, csv_path, stream, progress, lesson, regrade, options: dict):
        self.json_path, self.csv_path, self.stream, self.progress = json_path, csv_path, stream, progress
        self.lesson, self.regrade, self.options = lesson, regrade, options
        self.cancel, self.lock = Cancel(), threading.Lock()
        self.stopped: list = []          # the signal that stopped the batch, once one has
        self.seen_changes: set = set()   # the protected files already reported changed
        self.graded_now: set = set()     # the notebooks graded in this run
        self.shown: list = []            # the notebooks on screen, in the order given
        self.folder = None               # the batch's working files
        self.checkers = self.kernels = None

    def read(self, paths, shard: tuple[int, int] | None, jobs: int) -> None:
        """Read: the notebooks of this batch (of its shard), the report it goes on from, and the isolation and
        keep decisions, once for every notebook."""
        paths = list(dict.fromkeys(str(p) for p in paths))
        if shard is not None:
            k, count = shard
            paths = [p for p in paths if shard_of(p, count) == k]
        self.paths, self.shard = paths, shard
        self.previous = load_report(self.json_path) if self.json_path else None
        self.jobs = max(1, int(jobs or 1))
        self.threads = max(1, (os.cpu_count() or 1) // self.jobs)
        # decided once for the batch, passed to each notebook
        self.isolated, self.keep = isolation(), keep_files()

    def prepare(self) -> None:
        """Prepare: the report's header, the notebooks kept from the previous report and those to grade, and
        the hashes of the files that no notebook may change."""
        isolated, previous, paths = self.isolated, self.previous, self.paths
        report = {"notebooks": [], "isolation": isolated, "safe": isolated, "tampering": []}
        if previous is not None:
            report["safe"] = bool(previous.get("safe", False)) and isolated
            report["tampering"] = [t for t in previous.get("tampering") or [] if isinstance(t, dict)]
        if self.shard is not None:
            report["shard"] = {"index": self.shard[0], "count": self.shard[1], "assigned": paths}
        if not report["safe"]:
            report["warning"] = UNSAFE
        if not isolated:
            print(f"WARNING: {UNSAFE} (see autograder/GRADING.md)", file=self.stream)
        self.report = report
        self.entries = {n["path"]: n for n in (previous or {}).get("notebooks", [])}
        self.order = list(self.entries) + [p for p in paths if p not in self.entries]
        self.sha = {p: _sha256(p) for p in paths}
        self.kept = {p for p in paths if not self.regrade and p in self.entries and self.sha[p] is not None
                     and self.entries[p].get("sha256") == self.sha[p]
                     and (self.lesson is None or self.entries[p].get("lesson") == self.lesson)}
        self.todo = [p for p in paths if p not in self.kept]
        self.protected = _protected_paths(self.todo)
        self.baseline = _hash_files(self.protected)
        self.label = dict(zip(paths, labels(paths))) if paths else {}
        self.width = max([32] + [len(n) for n in self.label.values()])

    def run(self) -> None:
        """Run: every notebook to grade, `jobs` at a time, in the batch's folder, beside its checker and
        kernel servers; stopped by SIGINT or SIGTERM."""
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, self._on_signal)
        self.folder = tempfile.mkdtemp(prefix="autograder-")
        self.start = time.time()
        try:
            if self.kept:
                print(f"{len(self.kept)} of {len(self.paths)} notebooks kept from {self.json_path} (graded "
                      "before, the file unchanged); grading "
                      f"{len(self.todo)}", file=self.progress, flush=True)
            many = len(self.todo) > 1
            self.checkers = _checker_server(self.folder) if many and not self.stopped else None
            self.kernels = _kernel_server(self.folder,
                                          self.threads) if many and self.isolated and not self.stopped \
                and os.environ.get("AUTOGRADER_KERNEL_SERVER", "on") != "off" else None
            self.publish()
            self._pool()
        finally:
            for server in (self.checkers, self.kernels):
                if server:
                    forkserver.stop(server[0])
            if not self.keep:  # no link followed, no recursion, never raises (folders.remove_tree)
                from .folders import remove_tree
                remove_tree(self.folder)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def _pool(self) -> None:
        """The notebooks to grade, `jobs` at a time: each recorded (and shown, in order) as it finishes."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = {pool.submit(self.one, p): p for p in self.todo}
            pending = set(futures)
            while pending and not self.stopped:
                finished, pending = concurrent.futures.wait(pending, timeout=0.5,
                                                            return_when=concurrent.futures.FIRST_COMPLETED)
                for f in sorted(finished, key=lambda f: self.todo.index(futures[f])):
                    self._record(futures[f], f)
                self.show_ready()
            if self.stopped:
                for f in pending:
                    f.cancel()
                self.cancel()

    def _record(self, p: str, future) -> None:
        """One notebook's result in the report (unless its run was stopped), and a line of progress."""
        try:
            r = future.result()
        except Exception as e:  # noqa: BLE001  (a bug here must not stop the batch)
            r = NotebookResult(path=p, error=f"the grader failed: {type(e).__name__}: {e}")
        if r.error == CANCELLED:
            return
        self.entries[p] = {**r.to_json(), "student": student_of(p), "sha256": self.sha[p],
                           "graded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self.publish()
        self.graded_now.add(p)
        done, elapsed = len(self.graded_now), time.time() - self.start
        left = elapsed / done * (len(self.todo) - done)
        print(f"graded {done} of {len(self.todo)}: {self.label[p]} {r.points:g}/{r.max_points:g}; "
              f"{_duration(elapsed)} so far" + (f", about {_duration(left)} left" if done < len(self.todo)
                                                 else ""), file=self.progress, flush=True)

    def one(self, p: str) -> NotebookResult:
        """Grade notebook `p` (in a worker thread), then look for changes to the protected files."""
        r = run_notebook(p, **self.options, threads=self.threads,
                         protected=[q for q in self.protected if q.is_dir()],
                         batch=self.folder, checker_server=self.checkers and self.checkers[1],
                         kernel_server=self.kernels and self.kernels[1], cancel=self.cancel,
                         isolated=self.isolated, keep=self.keep)
        if r.error == CANCELLED:
            return r
        now = _hash_files(self.protected)
        with self.lock:
            changed = sorted(k for k in set(self.baseline) | set(now) if self.baseline.get(k) != now.get(k)
                             and k not in self.seen_changes)
            self.seen_changes.update(changed)
        if changed:
            self._tampered(p, r, changed)
        return r

    def _tampered(self, p: str, r: NotebookResult, changed: list) -> None:
        """Report files changed while `p` ran: with isolation someone else did it; without, the notebook (or
        one graded beside it) may have, and it earns nothing."""
        shown = ", ".join(os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c for c in changed[:5])
        if r.isolated:  # read-only for the kernel: someone else changed them
            self.report["tampering"].append({"path": p, "files": changed,
                                             "by": "not a notebook: the files are "
                                             "read-only for the kernels, something else changed them"})
            return
        note = ("files outside the notebook's folder changed while it ran (it, or one graded at the same "
                f"time, wrote there): {shown}")
        r.problems.append(note)
        r.error = r.error or "tampering: " + note
        r.points = 0.0
        for c in r.cells:
            c.points = 0.0
        self.report["tampering"].append({"path": p, "files": changed,
                                         "by": "this notebook, or one graded at the "
                                         "same time"})

    def publish(self) -> None:
        """The report as it stands, in its files (called by the main thread only)."""
        self.report["notebooks"] = [self.entries[p] for p in self.order if p in self.entries]
        if self.json_path:
            _write_atomically(self.json_path, json.dumps(self.report, indent=2))
        if self.csv_path:
            _write_atomically(self.csv_path, csv_text(self.report))

    def show_ready(self) -> None:
        """On screen in the order given, each notebook as soon as it and those before it are done."""
        paths, shown = self.paths, self.shown
        while len(shown) < len(paths) and (paths[len(shown)] in self.kept or paths[len(shown)]
                                           in self.graded_now):
            p = paths[len(shown)]
            shown.append(p)
            self._show(self.entries[p], p, len(shown))

    def _show(self, r: dict, p: str, k: int) -> None:
        name, width, stream = self.label[p], self.width, self.stream
        for c in r["cells"]:
            print(f"{name:{width}s} {c['grade_id']:40s} {c['points']:6g} / {c['max_points']:g}", file=stream)
        status = f"  ERROR: {r['error']}" if r["error"] else ""
        how = "kept: graded before, the file unchanged" if p in self.kept else f"{r['seconds']:.0f} s"
        print(f"{name:{width}s} {'TOTAL':40s} {r['points']:6g} / {r['max_points']:g}   ({how}; {k} of "
              f"{len(self.paths)}){status}", file=stream)
        for problem in r["problems"]:
            print(f"{name:{width}s}   note: {problem}", file=stream)
        stream.flush()

    def _on_signal(self, signum, frame) -> None:
        if not self.stopped:
            self.stopped.append(signum)
            self.cancel()

    def collect(self, summary: bool) -> dict:
        """Collect: the report shown and written in full; Interrupted when the batch was stopped."""
        if not self.stopped:
            self.show_ready()
        self.publish()
        if self.stopped:
            where = f"kept in {self.json_path}: run the same command to go on" if self.json_path else \
                "nothing kept (no --json file)"
            raise Interrupted(self.stopped[0], f"interrupted ({signal.Signals(self.stopped[0]).name}): "
                                               f"{len(self.graded_now)} of {len(self.todo)} notebooks graded "
                                               f"in this run, {where}")
        if summary and self.report["notebooks"]:
            print("\n" + summary_text(self.report), file=self.stream)
        return self.report


def merge(reports, json_path=None, csv_path=None) -> tuple[dict, list[str]]:
    """One report from the reports of a batch's shards (or of any batches): (the report, what is missing). A
    notebook in several reports must have the same file (sha256) and the same result in each (ReportError if
    not). What is missing, when the reports say their shard: a shard with no report, the notebooks of a shard
    not graded (its batch was stopped)."""
    loaded = []
    for path in reports:
        report = load_report(path, "merge takes the --json reports that grade wrote")
        if report is None:
            raise ReportError(f"{path}: no such file")
        loaded.append((str(path), report))
    entries: dict = {}
    where: dict = {}
    same = ("sha256", "points", "max_points", "error", "cells", "lesson")
    for path, report in loaded:
        for n in report["notebooks"]:
            p = n["path"]
            if p in entries and any(entries[p].get(k) != n.get(k) for k in same):
                raise ReportError(f"{p} is in {where[p]} and in {path} with different results (or files): "
                                  "grade it again in one of them, or leave one out")
            entries.setdefault(p, n)
            where.setdefault(p, path)
    merged = {"notebooks": [entries[p] for p in sorted(entries)],
              "isolation": all(r.get("isolation", False) for _, r in loaded),
              "safe": all(r.get("safe", False) for _, r in loaded),
              "tampering": [t for _, r in loaded for t in r.get("tampering") or []],
              "merged": [path for path, _ in loaded]}
    if not merged["safe"]:
        merged["warning"] = UNSAFE
    missing = []
    shards = [(path, r["shard"]) for path, r in loaded if isinstance(r.get("shard"), dict)]
    counts = {s.get("count") for _, s in shards}
    if len(counts) > 1:
        raise ReportError("the reports are shards of different counts "
                          f"({', '.join(map(str, sorted(counts)))}): merge the shards of one batch")
    if shards:
        count = counts.pop()
        have = {s.get("index") for _, s in shards}
        absent = [k for k in range(int(count)) if k not in have]
        if absent:
            missing.append(f"no report of shard{'s' if len(absent) > 1 else ''} "
                           f"{', '.join(f'{k}/{count}' for k in absent)}")
        for path, s in shards:
            left = [p for p in s.get("assigned") or [] if p not in entries]
            if left:
                missing.append(f"{len(left)} notebook{'s' if len(left) > 1 else ''} of shard "
                               f"{s.get('index')}/{count} not graded ({path}: its batch was stopped?): "
                               f"{', '.join(left[:3])}"
                               + (", ..." if len(left) > 3 else ""))
        merged["missing"] = missing
    if json_path:
        _write_atomically(json_path, json.dumps(merged, indent=2))
    if csv_path:
        _write_atomically(csv_path, csv_text(merged))
    return merged, missing
