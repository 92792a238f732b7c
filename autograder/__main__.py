"""Command line: `python -m autograder grade NOTEBOOK... [--json FILE] [--csv FILE] [--jobs N] [--timeout S]
[--cell-timeout S] [--memory GB] [--lesson STEM] [--shard K/N] [--regrade]`,
`python -m autograder merge REPORT.json... --json FILE [--csv FILE]`,
`python -m autograder lessons [--write]`, `python -m autograder nbgrader-course DIR`,
`python -m autograder release LESSON --out DIR [--repo OWNER/NAME] [--force]`."""
from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":
    # The command validates notebooks (nbformat), never an IRI: without this, importing nbformat imports
    # jsonschema's optional IRI checker, rfc3987_syntax, which builds its grammar at import (1.7 s of every
    # command here; jsonschema issue #1428), and jsonschema skips that format checker when the import fails.
    # As in runner.py.
    sys.modules.setdefault("rfc3987_syntax", None)


PROG = "python -m autograder"


def main(argv=None) -> int:
    """Run the command that argv names: its exit status. A bad input is one line on stderr, exit status 2
    (solutions.cli's convention, as the course's other command lines), checked before anything is graded or
    written."""
    args = _parser().parse_args(argv)
    return COMMANDS[args.command](args)


def _parser() -> argparse.ArgumentParser:
    """The command line's parser: one subcommand each."""
    from solutions.cli import Parser, number

    seconds = number(float, 0, low_open=True)
    parser = Parser(prog=PROG)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade notebooks, each in a fresh kernel")
    g.add_argument("notebooks", nargs="+")
    g.add_argument("--json", help="also write the report as JSON to this file")
    g.add_argument("--timeout", type=seconds, default=600, help="seconds per notebook (default 600)")
    g.add_argument("--cell-timeout", type=seconds, default=180, help="seconds per cell (default 180)")
    g.add_argument("--jobs", "-j", type=number(int, 1), default=None,
                   help="notebooks graded at the same time (default: one per CPU core, at most 4)")
    g.add_argument("--memory", type=number(float, 0, low_open=True), default=None,
                   help="GB of address space for each kernel (default 4, or $AUTOGRADER_MEMORY_GB)")
    g.add_argument("--lesson",
                   help="the lesson every notebook is graded as, e.g. 03_attention (default: each "
                   "notebook's file or folder name)")
    g.add_argument("--csv",
                   help="also write one row per student (nbgrader's submitted/STUDENT/LESSON/, else the "
                   "file's name) with one column per graded cell and the total")
    g.add_argument("--shard", metavar="K/N",
                   help="grade only share K of N (K from 0 to N-1), chosen by a hash of "
                   "each path as given: N machines given the same notebooks grade each once (see merge)")
    g.add_argument("--regrade", action="store_true", help="grade again the notebooks that the --json report "
                   "already holds with the same file (default: they are kept, and the batch goes on from "
                   "there)")
    m = sub.add_parser("merge", help="merge the reports of a batch's shards (--shard K/N) into one")
    m.add_argument("reports", nargs="+", metavar="REPORT.json")
    m.add_argument("--json", required=True, help="the merged report")
    m.add_argument("--csv", help="also write the merged report's rows, one per student")
    les = sub.add_parser("lessons", help="check (or --write) that the lessons' stubs match solutions/")
    les.add_argument("--write", action="store_true")
    course = sub.add_parser("nbgrader-course", help="build an nbgrader course directory from the lessons")
    course.add_argument("directory")
    course.add_argument("--lessons", nargs="*", help="lesson stems (default: all)")
    rel = sub.add_parser("release", help="build (or update) a class's release of the lessons up to LESSON, "
                         "without the answers of LESSON's stage and the later ones")
    rel.add_argument("lesson",
                     help="the assignment now open, e.g. 05_masks (14_translate or 15_experiments: every "
                     "stage, after 13's deadline)")
    rel.add_argument("--out", required=True,
                     help="the release's folder (new, empty, or an earlier release's)")
    rel.add_argument("--repo", default=None,
                     help="OWNER/NAME of the class's GitHub repository, where Binder, "
                     "Colab and the Colab set-up cell find the release (default: the repository of the "
                     "release already in --out, else the course's own, "
                     "transformer-course/transformer-course)")
    rel.add_argument("--force", action="store_true",
                     help="release an earlier lesson over a later one's release")
    return parser


def _grade(args) -> int:
    """grade: the notebooks, each in a fresh kernel; 0 when every one of this shard was graded without an
    error."""
    prog = f"{PROG} grade"
    memory = args.memory if args.memory is not None else _memory_from_environment(prog)
    from .grade import Interrupted, ReportError, grade, shard_of
    from .submission import lessons
    stems = [stem for stem, _, _ in lessons()]
    if args.lesson is not None and args.lesson not in stems:
        _fail(prog, f"--lesson {args.lesson} is not a lesson; the lessons: {', '.join(stems)}")
    shard = None
    if args.shard is not None:
        k, _, n = args.shard.partition("/")
        if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
            _fail(prog, f"--shard {args.shard}: expected K/N with 0 <= K < N, e.g. --shard 0/4")
        shard = (int(k), int(n))
    _check_output(prog, "--json", args.json)
    _check_output(prog, "--csv", args.csv)
    jobs = args.jobs or min(4, os.cpu_count() or 1)
    try:
        report = grade(args.notebooks, args.json, args.timeout, jobs=jobs, cell_timeout=args.cell_timeout,
                       memory_gb=memory, lesson=args.lesson, csv_path=args.csv, shard=shard,
                       regrade=args.regrade)
    except ReportError as e:
        _fail(prog, str(e))
    except Interrupted as e:
        print(e.line, file=sys.stderr)
        return 128 + e.signum
    mine = {str(p) for p in args.notebooks if shard is None or shard_of(p, shard[1]) == shard[0]}
    return 0 if all(n["error"] is None for n in report["notebooks"] if n["path"] in mine) else 1


def _merge(args) -> int:
    """merge: the reports of a batch's shards into one; 1 when something is missing."""
    from .grade import ReportError, merge, summary_text
    prog = f"{PROG} merge"
    _check_output(prog, "--json", args.json)
    _check_output(prog, "--csv", args.csv)
    try:
        merged, missing = merge(args.reports, args.json, args.csv)
    except ReportError as e:
        _fail(prog, str(e))
    print(f"{len(merged['notebooks'])} notebooks from {len(args.reports)} reports written to {args.json}"
          + (f" and {args.csv}" if args.csv else ""))
    if merged["notebooks"]:
        print(summary_text(merged))
    for line in missing:
        print(f"missing: {line}", file=sys.stderr)
    return 1 if missing else 0


def _lessons(args) -> int:
    """lessons: check (or --write) the lessons' stubs against solutions/."""
    from .notebooks import sync
    stale = sync(write=args.write)
    verb = "rewrote" if args.write else "out of date (run: python -m autograder lessons --write)"
    print(f"{verb}: {', '.join(stale)}" if stale else "lessons are in sync with solutions/")
    return 1 if stale and not args.write else 0


def _release(args) -> int:
    """release: build (or update) a class's release of the lessons up to LESSON."""
    from .release import ReleaseError, build_release
    try:
        made = build_release(args.lesson, args.out, args.repo, force=args.force)
    except ReleaseError as e:
        _fail(f"{PROG} release", str(e))
    print(f"release of {made.lesson} written to {os.path.abspath(args.out)}: {len(made.files)} files, "
          f"lessons up to {made.lesson}, Binder and Colab at github.com/{made.repo}")
    for where in sorted({line.split(": ", 1)[0] for line in made.kept_in_checks}):
        print(f"  note: {where}: the graded stage's checks, kept whole for check(), hold answer text "
              f"(see .course-release.json, kept_in_checks)")
    return 0


def _nbgrader_course(args) -> int:
    """nbgrader-course: build an nbgrader course directory from the lessons."""
    from .course import build_course
    from .notebooks import lesson_paths
    prog, stems = f"{PROG} nbgrader-course", [p.stem for p in lesson_paths()]
    unknown = [stem for stem in args.lessons or () if stem not in stems]
    if unknown:
        _fail(prog, f"--lessons: not a lesson: {', '.join(unknown)}; the lessons: {', '.join(stems)}")
    if os.path.exists(args.directory) and not os.path.isdir(args.directory):
        _fail(prog, f"{args.directory} is a file: give a folder (new, or a course directory to add to)")
    path = build_course(args.directory, args.lessons)
    print(f"nbgrader course written to {path}")
    return 0


def _fail(prog: str, message: str):
    """One line, `prog: error: message`, and exit status 2."""
    from solutions.cli import fail
    fail(prog, " ".join(message.split()))


def _check_output(prog: str, flag: str, path) -> None:
    """A file the command will write (--json, --csv) must be one it can write, said before any grading: its
    folder there, the path not a folder."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        _fail(prog, f"{flag} {path} is a folder: give the path of a file in it")
    if not os.path.isdir(folder):
        _fail(prog, f"{flag} {path}: there is no folder {folder}; make it first, or give another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        _fail(prog, f"{flag} {path}: the folder {folder} is not writable; give another path")


def _memory_from_environment(prog: str) -> float:
    """The kernels' memory when --memory is not given: $AUTOGRADER_MEMORY_GB, else 4 GB; a value that is not a
    positive number is a bad input (0 or less would lift the bound instead of setting one)."""
    text = os.environ.get("AUTOGRADER_MEMORY_GB", "4")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        _fail(prog, f"AUTOGRADER_MEMORY_GB={text!r}: expected a finite number of GB > 0 (or --memory GB)")
    return value


COMMANDS = {"grade": _grade, "merge": _merge, "lessons": _lessons, "release": _release,
            "nbgrader-course": _nbgrader_course}


if __name__ == "__main__":
    sys.exit(main())
