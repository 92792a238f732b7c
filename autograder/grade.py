"""`python -m autograder grade NOTEBOOK... [--json FILE] [--csv FILE] [--jobs N] [--timeout S] [--cell-timeout S]
[--memory GB] [--lesson STEM] [--shard K/N] [--regrade]`: grade notebooks, each in a fresh kernel, and report the
points of every graded cell. A broken, slow or hostile notebook costs only its own grade, with the reason in the
report. What this protects and what it does not is in autograder/GRADING.md. A batch can be stopped (SIGINT,
SIGTERM) and gone on with, graded in shards on several machines, and merged (`python -m autograder merge`).

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
import signal
import sys
import tempfile
import threading
import time

from . import forkserver
from .outcomes import failed_title
from .kernel import (CANCELLED, CELL_TIMEOUT, MEMORY_GB, NOTEBOOK_TIMEOUT, Cancel, grade_notebook, isolation,
                     keep_files)
from .submission import course_pythonpath, lesson_of, lessons, read_submission

__all__ = ["grade", "grade_notebook", "isolation", "labels", "lesson_of", "merge", "read_submission", "shard_of",
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


class ReportError(ValueError):
    """--json names a file that is not a grade report (it is never overwritten), or merge was given reports that
    disagree: one line, for the command line."""


class Interrupted(Exception):
    """The batch was stopped by SIGINT or SIGTERM: `signum`, and `line`, what was kept (for the command line)."""

    def __init__(self, signum: int, line: str):
        super().__init__(line)
        self.signum, self.line = signum, line


def shard_of(path, count: int) -> int:
    """Which of `count` shares a notebook is graded in: from the sha256 of its path as given (normalized), so the
    same on every machine given the same paths, whatever their order, and unchanged when others are added."""
    key = os.path.normpath(str(path)).encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % count


def student_of(path) -> str:
    """The student a submission is: nbgrader's submitted/<student>/<lesson>/<notebook>.ipynb, else the file's name
    (without .ipynb)."""
    parts = pathlib.PurePath(str(path)).parts
    if len(parts) >= 4 and parts[-4] == "submitted":
        return parts[-3]
    return pathlib.PurePath(str(path)).stem


def _sha256(path) -> str | None:
    """The submission's sha256, read as the grader reads it (a regular file of its own, not too large), or None."""
    from .submission import _open_regular
    data, error = _open_regular(pathlib.Path(path))
    return None if error else hashlib.sha256(data).hexdigest()


def _write_atomically(path, text: str) -> None:
    """`text` into `path` by a new file renamed over it: a reader (or a batch stopped now) sees the old whole file
    or the new one, never a part."""
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


def load_report(path) -> dict | None:
    """The grade report in `path` (None when there is no such file); ReportError when the file is not one."""
    path = pathlib.Path(path)
    if not path.exists():
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ReportError(f"{path} is not a grade report ({type(e).__name__}): give --json another file") from None
    if not isinstance(report, dict) or not isinstance(report.get("notebooks"), list) or \
            not all(isinstance(n, dict) and isinstance(n.get("path"), str) for n in report["notebooks"]):
        raise ReportError(f"{path} is not a grade report (no \"notebooks\" list of graded paths): give --json "
                          "another file")
    return report


def _columns(report) -> list[str]:
    """The graded cells in the report, in the course's order (lesson by lesson)."""
    present = {c.get("grade_id") for n in report["notebooks"] for c in n.get("cells") or []}
    ordered = [gid for _, _, checks in lessons() for gid in checks if gid in present]
    return ordered + sorted(g for g in present if isinstance(g, str) and g not in ordered)


def _students(report) -> list[str]:
    """Each notebook's row name: its student, or, where two notebooks of one lesson would share a row, its path."""
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
    """A screen of the class: per lesson, the notebooks, the mean and median, how the scores spread (by tenths of
    the most), those not graded (an error), and the checks failed most often."""
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
        share = (lambda x: x / top) if top else (lambda x: 0.0)
        bins = collections.Counter(min(9, int(share(x) * 10)) if share(x) < 1 else 10 for x in scores)
        spread = "  ".join(f"{b * 10}-{b * 10 + 9}%: {bins[b]}" if b < 10 else f"100%: {bins[b]}"
                           for b in range(11) if bins[b])
        errors = sum(1 for n in group if n.get("error"))
        lines.append(f"{lesson}: {len(group)} notebook{'s' if len(group) != 1 else ''}, mean {mean:.3g} / {top:g} "
                     f"({100 * share(mean):.0f}%), median {median:g}" + (f", {errors} with an error" if errors else ""))
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

    For a batch left running: `progress` (stderr by default) gets a line as each notebook finishes (k of N, the
    time so far and an estimate of what is left); the report is rewritten (atomically) at json_path and csv_path
    as each one finishes. SIGINT or SIGTERM stops the batch: the runs under way are stopped and not recorded, what
    finished stays in the report, and Interrupted is raised. A report already at json_path is gone on from: a
    notebook whose path and sha256 are in it is not graded again (unless `regrade`), its other notebooks are kept.
    `shard` (K, N): only the notebooks that shard_of puts in share K of N."""
    progress = sys.stderr if progress is None else progress
    paths = list(dict.fromkeys(str(p) for p in paths))
    if shard is not None:
        k, count = shard
        paths = [p for p in paths if shard_of(p, count) == k]
    previous = load_report(json_path) if json_path else None
    jobs = max(1, int(jobs or 1))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    isolated, keep = isolation(), keep_files()  # decided once for the batch, passed to each notebook
    report = {"notebooks": [], "isolation": isolated, "safe": isolated, "tampering": []}
    if previous is not None:
        report["safe"] = bool(previous.get("safe", False)) and isolated
        report["tampering"] = [t for t in previous.get("tampering") or [] if isinstance(t, dict)]
    if shard is not None:
        report["shard"] = {"index": shard[0], "count": shard[1], "assigned": paths}
    if not report["safe"]:
        report["warning"] = UNSAFE
    if not isolated:
        print(f"WARNING: {UNSAFE} (see autograder/GRADING.md)", file=stream)
    entries = {n["path"]: n for n in (previous or {}).get("notebooks", [])}
    order = list(entries) + [p for p in paths if p not in entries]
    sha = {p: _sha256(p) for p in paths}
    kept = {p for p in paths if not regrade and p in entries and sha[p] is not None
            and entries[p].get("sha256") == sha[p] and (lesson is None or entries[p].get("lesson") == lesson)}
    todo = [p for p in paths if p not in kept]
    protected = _protected_paths(todo)
    baseline = _hash_files(protected)
    seen_changes: set = set()
    lock = threading.Lock()
    cancel = Cancel()
    stopped: list = []

    def publish():  # the report as it stands, in the files (called by the main thread only)
        report["notebooks"] = [entries[p] for p in order if p in entries]
        if json_path:
            _write_atomically(json_path, json.dumps(report, indent=2))
        if csv_path:
            _write_atomically(csv_path, csv_text(report))

    def one(p):
        r = grade_notebook(p, timeout, cell_timeout=cell_timeout, memory_gb=memory_gb, threads=threads,
                           protected=[q for q in protected if q.is_dir()], lesson=lesson, batch=batch,
                           checker_server=checkers and checkers[1], kernel_server=kernels and kernels[1],
                           cancel=cancel, isolated=isolated, keep=keep)
        if r.get("error") == CANCELLED:
            return r
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

    label = dict(zip(paths, labels(paths))) if paths else {}
    width = max([32] + [len(n) for n in label.values()])

    def show(r, p, k):
        name = label[p]
        for c in r["cells"]:
            print(f"{name:{width}s} {c['grade_id']:40s} {c['points']:6g} / {c['max_points']:g}", file=stream)
        status = f"  ERROR: {r['error']}" if r["error"] else ""
        how = "kept: graded before, the file unchanged" if p in kept else f"{r['seconds']:.0f} s"
        print(f"{name:{width}s} {'TOTAL':40s} {r['points']:6g} / {r['max_points']:g}   ({how}; {k} of {len(paths)})"
              f"{status}", file=stream)
        for problem in r["problems"]:
            print(f"{name:{width}s}   note: {problem}", file=stream)
        stream.flush()

    def on_signal(signum, frame):
        if not stopped:
            stopped.append(signum)
            cancel()

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, on_signal)
    graded_now: set = set()
    shown: list = []

    def show_ready():  # on screen in the order given, each as soon as it and those before it are done
        while len(shown) < len(paths) and (paths[len(shown)] in kept or paths[len(shown)] in graded_now):
            p = paths[len(shown)]
            shown.append(p)
            show(entries[p], p, len(shown))

    batch = tempfile.mkdtemp(prefix="autograder-")
    checkers = kernels = None
    start = time.time()
    try:
        if kept:
            print(f"{len(kept)} of {len(paths)} notebooks kept from {json_path} (graded before, the file unchanged); "
                  f"grading {len(todo)}", file=progress, flush=True)
        checkers = _checker_server(batch) if len(todo) > 1 and not stopped else None
        kernels = _kernel_server(batch, threads) if len(todo) > 1 and isolated and not stopped and \
            os.environ.get("AUTOGRADER_KERNEL_SERVER", "on") != "off" else None
        publish()
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(one, p): p for p in todo}
            pending, done = set(futures), 0
            while pending and not stopped:
                finished, pending = concurrent.futures.wait(pending, timeout=0.5,
                                                            return_when=concurrent.futures.FIRST_COMPLETED)
                for f in sorted(finished, key=lambda f: todo.index(futures[f])):
                    p = futures[f]
                    try:
                        r = f.result()
                    except Exception as e:  # noqa: BLE001  (a bug here must not stop the batch)
                        r = {"path": p, "points": 0.0, "max_points": 0.0, "error": f"the grader failed: "
                             f"{type(e).__name__}: {e}", "problems": [], "cells": [], "seconds": 0.0,
                             "isolated": False, "lesson": None}
                    if r.get("error") == CANCELLED:
                        continue
                    r.update(student=student_of(p), sha256=sha[p], graded_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
                    entries[p] = r
                    publish()
                    done += 1
                    elapsed = time.time() - start
                    left = elapsed / done * (len(todo) - done)
                    print(f"graded {done} of {len(todo)}: {label[p]} {r['points']:g}/{r['max_points']:g}; "
                          f"{_duration(elapsed)} so far" + (f", about {_duration(left)} left" if done < len(todo)
                                                             else ""), file=progress, flush=True)
                    graded_now.add(p)
                show_ready()
            if stopped:
                for f in pending:
                    f.cancel()
                cancel()
    finally:
        for server in (checkers, kernels):
            if server:
                forkserver.stop(server[0])
        if not keep:  # no link followed, no recursion, never raises (jail.remove_tree)
            from .jail import remove_tree
            remove_tree(batch)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if not stopped:
        show_ready()
    publish()
    if stopped:
        graded = len(graded_now)
        where = f"kept in {json_path}: run the same command to go on" if json_path else \
            "nothing kept (no --json file)"
        raise Interrupted(stopped[0], f"interrupted ({signal.Signals(stopped[0]).name}): {graded} of {len(todo)} "
                                      f"notebooks graded in this run, {where}")
    if summary and report["notebooks"]:
        print("\n" + summary_text(report), file=stream)
    return report


def merge(reports, json_path=None, csv_path=None) -> tuple[dict, list[str]]:
    """One report from the reports of a batch's shards (or of any batches): (the report, what is missing). A notebook
    in several reports must have the same file (sha256) and the same result in each (ReportError if not). What is
    missing, when the reports say their shard: a shard with no report, the notebooks of a shard not graded (its batch
    was stopped)."""
    loaded = []
    for path in reports:
        report = load_report(path)
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
        raise ReportError(f"the reports are shards of different counts ({', '.join(map(str, sorted(counts)))}): "
                          "merge the shards of one batch")
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
                missing.append(f"{len(left)} notebook{'s' if len(left) > 1 else ''} of shard {s.get('index')}/{count} "
                               f"not graded ({path}: its batch was stopped?): {', '.join(left[:3])}"
                               + (", ..." if len(left) > 3 else ""))
        merged["missing"] = missing
    if json_path:
        _write_atomically(json_path, json.dumps(merged, indent=2))
    if csv_path:
        _write_atomically(csv_path, csv_text(merged))
    return merged, missing
