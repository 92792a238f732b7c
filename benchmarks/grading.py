"""Grading time: a fully solved submission of every graded lesson (01-13), graded by the course's own
command and by nbgrader's `autograde`, in one run.

    python benchmarks/grading.py [--jobs N] [--lessons 03_attention 12_training ...] [--skip-nbgrader]

1. `python -m autograder grade` on the 13 solved notebooks (autograder.notebooks.solved: the lesson with
   the reference code in its solution cells), with --jobs notebooks at a time.
2. nbgrader 0.9: the course built by `python -m autograder nbgrader-course`, `generate_assignment` for
   every lesson (not timed), one student's solved submissions, then `nbgrader autograde` per lesson,
   timed together; then again with one call for every lesson at once (`nbgrader autograde "*"`: nbgrader
   takes the assignment argument as a glob), which saves nbgrader's start-up per lesson.
Prints seconds, points and each command's peak memory (the largest resident set of the command or any
process it waited for: the kernel is one of them), from the operating system's accounting (wait4's
rusage), and the ratio ours / nbgrader's (lower is better). Target: each under two minutes on 2 cores.
"""
from __future__ import annotations

import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import nbformat  # noqa: E402

from autograder.notebooks import lesson_paths, solved  # noqa: E402
from solutions.cli import Parser, number  # noqa: E402


def timed(cmd, cwd) -> tuple[float, float, subprocess.CompletedProcess]:
    """(seconds, peak resident MB of the command and everything it waited for, the finished process).
    os.wait4 gives this child's own rusage, its descendants included once it has waited for them."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        finished = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
        return seconds, usage.ru_maxrss / 1024, finished


def full_marks(what: str, points: float, top: float) -> None:
    """A solved submission earns every point; a time measured on anything else (a notebook that could not
    import the autograder, a kernel that died) is not the time to grade, so stop instead of reporting it."""
    if top == 0 or points != top:
        sys.exit(f"{what}: {points:g}/{top:g} points for the solved lessons; fix the set-up (is the course "
                 f"installed, `pip install -e .`?) before timing it")


def main() -> None:
    p = Parser(prog="python benchmarks/grading.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=number(int, 0), default=0,
                   help="notebooks graded at the same time by our command "
                        "(0: its default, one per core up to 4)")
    p.add_argument("--lessons", nargs="*", help="lesson stems (default: all graded lessons)")
    p.add_argument("--skip-nbgrader", action="store_true", help="time our command only")
    args = p.parse_args()
    lessons = [x for x in lesson_paths() if not args.lessons or x.stem in args.lessons]
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        tmp = pathlib.Path(tmp)
        rows = [ours(lessons, tmp, args.jobs)]
        if not args.skip_nbgrader:
            course = nbgrader_course(lessons, tmp)
            rows.append(nbgrader_per_lesson(lessons, course))
            rows.append(nbgrader_at_once(lessons, course))
    table(rows, lessons)


def ours(lessons: list, tmp: pathlib.Path, jobs: int) -> tuple:
    """`python -m autograder grade` on the solved lessons, timed: the table's row."""
    subs = tmp / "submissions"
    subs.mkdir()
    for path in lessons:
        nbformat.write(solved(path), str(subs / path.name))
    report = tmp / "report.json"
    command = [sys.executable, "-m", "autograder", "grade", *sorted(map(str, subs.glob("*.ipynb"))),
               "--json", str(report)]
    seconds, mb, proc = timed(command + (["--jobs", str(jobs)] if jobs else []), ROOT)
    if proc.returncode != 0:
        sys.exit(f"autograder grade failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    r = json.loads(report.read_text())
    for n in r["notebooks"]:
        if "seconds" in n:
            print(f"  ours {pathlib.Path(n['path']).stem}: {n['seconds']:.1f} s", flush=True)
    points = sum(n["points"] for n in r["notebooks"])
    top = sum(n["max_points"] for n in r["notebooks"])
    full_marks("python -m autograder grade", points, top)
    jobs = jobs or min(4, os.cpu_count() or 1)
    print(f"ours: {seconds:.1f} s, {points:g}/{top:g} points, peak {mb:.0f} MB", flush=True)
    return (f"python -m autograder grade (--jobs {jobs})", seconds, points, top, mb)


def nbgrader_course(lessons: list, tmp: pathlib.Path) -> pathlib.Path:
    """The nbgrader course (`python -m autograder nbgrader-course`), each assignment generated and one
    student's solved submissions in it (not timed)."""
    course = tmp / "course"
    subprocess.run([sys.executable, "-m", "autograder", "nbgrader-course", str(course), "--lessons",
                    *[x.stem for x in lessons]], check=True, capture_output=True, cwd=ROOT)
    for path in lessons:
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", path.stem, "--force"],
                       check=True, capture_output=True, cwd=course)
        folder = course / "submitted" / "student" / path.stem
        folder.mkdir(parents=True)
        nbformat.write(solved(path), str(folder / path.name))
    return course


def nbgrader_points(course: pathlib.Path) -> tuple[float, float]:
    """(points, most points) of nbgrader's database, by `nbgrader export`."""
    subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", "grades.csv"], check=True,
                   capture_output=True, cwd=course)
    grades = list(csv.DictReader(open(course / "grades.csv")))
    return (sum(float(g["raw_score"] or 0) for g in grades),
            sum(float(g["max_score"] or 0) for g in grades))


def nbgrader_per_lesson(lessons: list, course: pathlib.Path) -> tuple:
    """`nbgrader autograde` once per lesson, timed together: the table's row."""
    total_s, peak = 0.0, 0.0
    for path in lessons:
        s, m, proc = timed([sys.executable, "-m", "nbgrader", "autograde", path.stem, "--force"], course)
        if proc.returncode != 0:
            sys.exit(f"nbgrader autograde {path.stem} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        total_s, peak = total_s + s, max(peak, m)
        print(f"  nbgrader autograde {path.stem}: {s:.1f} s", flush=True)
    points, top = nbgrader_points(course)
    full_marks("nbgrader autograde", points, top)
    print(f"nbgrader: {total_s:.1f} s, {points:g}/{top:g} points, peak {peak:.0f} MB", flush=True)
    return ("nbgrader autograde (one call per lesson)", total_s, points, top, peak)


def nbgrader_at_once(lessons: list, course: pathlib.Path) -> tuple:
    """The same submissions again, every lesson in one call (`nbgrader autograde "*"`): the table's row.
    autograded/ is rebuilt (--force) and the database's earlier grades are replaced, so the points are this
    call's own."""
    shutil.rmtree(course / "autograded")
    s, m, proc = timed([sys.executable, "-m", "nbgrader", "autograde", "*", "--force"], course)
    if proc.returncode != 0:
        sys.exit(f"nbgrader autograde '*' failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    graded = len(list((course / "autograded").glob("*/*/*.ipynb")))
    if graded != len(lessons):
        sys.exit(f"nbgrader autograde '*' graded {graded} notebooks, expected {len(lessons)}")
    points, top = nbgrader_points(course)
    full_marks('nbgrader autograde "*"', points, top)
    print(f"nbgrader, one call: {s:.1f} s, {points:g}/{top:g} points, peak {m:.0f} MB", flush=True)
    return ('nbgrader autograde "*" (one call, all lessons)', s, points, top, m)


def table(rows: list, lessons: list) -> None:
    """The rows as a Markdown table, and the ratio ours / each of nbgrader's."""
    print(f"\n{len(lessons)} solved lessons, {os.cpu_count()} CPUs\n")
    print(f"| {'command':47s} | {'seconds':>7s} | {'points':>9s} | {'peak MB':>7s} |")
    print(f"|{'-' * 49}|{'-' * 9}|{'-' * 11}|{'-' * 9}|")
    for name, s, pts, top, mb in rows:
        print(f"| {name:47s} | {s:7.1f} | {pts:4g}/{top:<4g} | {mb:7.0f} |")
    for name, s, *_ in rows[1:]:
        print(f"\nratio ours / {name}: {rows[0][1] / s:.2f} (lower is better)")
    if len(rows) > 1:
        print("target: each under 120 s")


if __name__ == "__main__":
    main()
