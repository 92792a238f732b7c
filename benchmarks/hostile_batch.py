"""The hostile batch's time, this tree against a peer (an older checkout): the same notebooks graded by each.

    git archive 5924e73 | tar -x -C /tmp/peer      # the commit before issue 36's hardening
    python benchmarks/hostile_batch.py --peer /tmp/peer --runs 2

The notebooks are the peer's own hostile corpus (tests/submissions/corpus.py: every case, and the harm
cases where the jail runs), written once by the peer's code, so both trees grade the same files. Each run
grades them with `python -m autograder grade` as tests/test_hostile.py's batch does (two at a time, lesson
03, 300 s a notebook, 15 s a cell), in turns (peer, this, peer, this, ...). Prints one line a run and the
ratio of the medians.
"""
from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from solutions.cli import Parser, number

HERE = pathlib.Path(__file__).resolve().parent.parent
WRITE = """
import pathlib, sys
from autograder.grade import isolation
from tests.submissions.corpus import cases, harm_cases, write
folder, outside = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
chosen = [c for c in cases() if isolation() or not c.needs_isolation]
paths = [write(c, folder) for c in chosen]
canary = outside / "canary.txt"
canary.write_text("canary")
if isolation():
    victims = [str(folder / "honest_solved.ipynb"), str(folder / "honest_released.ipynb")]
    paths += [write(c, folder) for c in harm_cases(victims, str(canary))]
print(len(paths))
"""


def _env(tree: pathlib.Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(tree), GRADER_SECRET="s3cret")


def _grade(tree: pathlib.Path, notebooks: list[str], report: pathlib.Path) -> tuple[float, float]:
    """Seconds to grade the notebooks with the tree's grade command, and the points they earned."""
    command = [sys.executable, "-m", "autograder", "grade", *notebooks, "--json", str(report), "--jobs", "2",
               "--timeout", "300", "--cell-timeout", "15", "--lesson", "03_attention"]
    start = time.perf_counter()
    subprocess.run(command, cwd=tree, env=_env(tree), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    notebooks = json.loads(report.read_text())["notebooks"]
    return seconds, sum(float(n.get("points") or 0.0) for n in notebooks)


def main(argv=None) -> None:
    parser = Parser(prog="python benchmarks/hostile_batch.py", description=__doc__.split("\n")[0])
    parser.add_argument("--peer", type=pathlib.Path, required=True, help="an older checkout to compare with")
    parser.add_argument("--runs", type=number(int, 1), default=2,
                        help="runs of each tree, in turns (default 2)")
    parser.add_argument("--first", type=number(int, 0), default=0,
                        help="grade the first N only (default: 0, all)")
    args = parser.parse_args(argv)
    if not (args.peer / "autograder").is_dir():
        parser.error(f"--peer {args.peer}: not a checkout of this course (no autograder/ in it)")
    work = pathlib.Path(tempfile.mkdtemp(prefix="hostile-batch-"))
    folder, outside = work / "submissions", work / "outside"
    folder.mkdir()
    outside.mkdir()
    written = subprocess.run([sys.executable, "-c", WRITE, str(folder), str(outside)], cwd=args.peer,
                             env=_env(args.peer), capture_output=True, text=True, check=True)
    notebooks = sorted(str(p) for p in folder.glob("*.ipynb"))[:args.first or None]
    print(f"{written.stdout.strip()} notebooks of the peer's corpus in {folder}, {len(notebooks)} graded",
          flush=True)
    times: dict[str, list[float]] = {"peer": [], "this": []}
    for run in range(args.runs):
        for name, tree in (("peer", args.peer), ("this", HERE)):
            seconds, points = _grade(tree, notebooks, work / f"{name}-{run}.json")
            times[name].append(seconds)
            load = os.getloadavg()[0]
            print(f"run {run + 1} {name}: {seconds:.1f} s, {points:g} points, load average {load:.1f}",
                  flush=True)
    peer, this = statistics.median(times["peer"]), statistics.median(times["this"])
    print(f"median peer {peer:.1f} s, this {this:.1f} s: ratio this / peer {this / peer:.2f}")


if __name__ == "__main__":
    main()
