"""Collect a learner's own implementation from their completed lessons, for the final notebook's
"train my own code" switch.

Each lesson's imports cell and stub cells (the ones the learner filled in) run in order in a namespace
of their own; every contract name whose object gets full points from the autograder's checks is used,
and every other one falls back to the reference in `solutions`, with a line saying so.

Example: impl, report = collect("lessons"); impl.Transformer is the learner's class if it passed its checks.
"""
from __future__ import annotations

import contextlib
import io
import pathlib
import types

import nbformat

import solutions

#: the names the final notebook's training and decoding take from `impl`, and those they rest on
CONTRACT = [n for n in solutions.__all__ if n not in ("PAD", "BOS", "EOS", "UNK", "Batch")]


def _stub_names(cell) -> list[str]:
    return cell.get("metadata", {}).get("course", {}).get("names", [])


def collect(lessons_dir="lessons", verify: bool = True, log=print):
    """(namespace with every contract name, {name: "yours" | "reference: why"})."""
    from autograder import check, max_points
    chosen: dict = {}
    report: dict = {}
    for path in sorted(pathlib.Path(lessons_dir).glob("[01][0-9]_*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        stubs = [c for c in code if _stub_names(c)]
        if not stubs:
            continue
        ns: dict = {"__name__": f"learner_{path.stem}"}
        imports = next((c.source for c in code[1:] if "import" in c.source and not _stub_names(c)), "")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(imports, f"{path.name}: imports", "exec"), ns)
            except Exception as e:  # noqa: BLE001
                log(f"{path.name}: its imports cell failed ({type(e).__name__}: {e}); using the reference")
                continue
        ns.update(chosen)  # the learner's earlier stages replace the reference ones the lesson imported
        for cell in stubs:
            try:
                exec(compile(cell.source, f"{path.name}: {' '.join(_stub_names(cell))}", "exec"), ns)
            except Exception as e:  # noqa: BLE001
                for name in _stub_names(cell):
                    report[name] = f"reference: the cell does not run ({type(e).__name__})"
                continue
            for name in _stub_names(cell):
                obj = ns.get(name)
                if obj is None or name not in CONTRACT:
                    continue
                if verify:
                    with contextlib.redirect_stdout(io.StringIO()):
                        points = check(obj)
                    if points < max_points(name):
                        report[name] = f"reference: yours scores {points:g}/{max_points(name):g}"
                        continue
                chosen[name] = obj
                ns[name] = obj
                report[name] = "yours"
    if not report:
        log(f"no lesson notebooks with your code in {pathlib.Path(lessons_dir).resolve()}: put your completed "
            "lessons (01_tokenization.ipynb ...) there, or pass their folder")
    for name in CONTRACT:
        report.setdefault(name, "reference: not found in the lessons")
    impl = types.SimpleNamespace(**{n: chosen.get(n, getattr(solutions, n)) for n in CONTRACT})
    mine = sorted(n for n, v in report.items() if v == "yours")
    log(f"your code: {len(mine)} of {len(CONTRACT)} names" + (f" ({', '.join(mine)})" if mine else ""))
    for name in CONTRACT:
        if report[name] != "yours":
            log(f"  {name}: {report[name]}")
    return impl, report
