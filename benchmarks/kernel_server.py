"""A batch's kernels forked by the kernel server against kernels started by their launchers, in turns.

    python benchmarks/kernel_server.py [--lessons 03_attention ...] [--copies 4] [--runs 2] [--jobs 2]

Grades one batch, with `python -m autograder grade`'s own function, of `copies` solved and `copies` released
notebooks of each lesson: once with AUTOGRADER_KERNEL_SERVER=off (each kernel a fresh `python -m
ipykernel_launcher` behind unshare and setpriv) and once with the server (autograder/jail.py, serve: each
kernel forked from a process that imported PyTorch and ipykernel once), `runs` times in turns. Prints wall
seconds, the machine's CPU seconds (from /proc/stat: the forked kernels are reaped by the kernel, not waited
for, so wait4's rusage would miss them; run it on an otherwise idle machine), the points (which must be equal)
and the ratios off / on. Needs root and util-linux (the jail); without them there is no server to compare.
"""
from __future__ import annotations

import io
import os
import pathlib
import shutil
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import nbformat  # noqa: E402

from autograder.grade import grade, isolation  # noqa: E402
from autograder.notebooks import lesson_paths, solved  # noqa: E402
from solutions.cli import Parser, number  # noqa: E402


def busy_seconds() -> float:
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def main() -> None:
    ap = Parser(prog="python benchmarks/kernel_server.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lessons", nargs="+", default=["03_attention"],
                    help="solved lessons to grade (default: 03_attention)")
    ap.add_argument("--copies", type=number(int, 1), default=4, help="copies of each lesson (default: 4)")
    ap.add_argument("--runs", type=number(int, 1), default=2, help="runs of each way, in turns (default: 2)")
    ap.add_argument("--jobs", type=number(int, 1), default=2, help="notebooks at the same time (default: 2)")
    args = ap.parse_args()
    if not isolation():
        sys.exit("the kernels cannot be jailed here (root, unshare and setpriv): there is no kernel server "
                 "to compare")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="kernel-server-"))
    paths = []
    try:
        for path in [p for p in lesson_paths() if p.stem in args.lessons]:
            for kind, nb in (("solved", solved(path)), ("released", nbformat.read(str(path), as_version=4))):
                for i in range(args.copies):
                    paths.append(folder / path.stem / f"{kind}{i}.ipynb")
                    paths[-1].parent.mkdir(exist_ok=True)
                    nbformat.write(nb, str(paths[-1]))
        print(f"{len(paths)} notebooks ({', '.join(args.lessons)}), jobs={args.jobs}, {os.cpu_count()} cores")
        print(f"{'run':>4} {'server':>7} {'wall s':>7} {'CPU s':>7}  points")
        rows = {"off": [], "on": []}
        for run in range(1, args.runs + 1):
            for mode in ("off", "on"):
                os.environ["AUTOGRADER_KERNEL_SERVER"] = mode
                cpu, start = busy_seconds(), time.perf_counter()
                report = grade(paths, stream=io.StringIO(), jobs=args.jobs)
                wall, cpu = time.perf_counter() - start, busy_seconds() - cpu
                points = [n["points"] for n in report["notebooks"]]
                rows[mode].append((wall, cpu, points))
                print(f"{run:>4} {mode:>7} {wall:7.1f} {cpu:7.1f}  {sum(points):g} of "
                      f"{sum(n['max_points'] for n in report['notebooks']):g}")
        same = all(r[2] == rows["off"][0][2] for m in rows for r in rows[m])
        wall = {m: sum(r[0] for r in rows[m]) for m in rows}
        cpu = {m: sum(r[1] for r in rows[m]) for m in rows}
        print(f"ratio off / on: wall {wall['off'] / wall['on']:.2f}x, CPU {cpu['off'] / cpu['on']:.2f}x; "
              f"CPU saved per notebook {(cpu['off'] - cpu['on']) / args.runs / len(paths):.2f} s; "
              f"points {'the same' if same else 'DIFFER'}")
        if not same:
            sys.exit(1)
    finally:
        os.environ.pop("AUTOGRADER_KERNEL_SERVER", None)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
