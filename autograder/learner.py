"""Collect a learner's own implementation from their completed lessons, for the final notebook's
"train my own code" switch, and record which of it actually ran.

Each lesson's imports cell and stub cells (the ones the learner filled in) run in order, in a namespace
of their own; every contract name whose object earns full points from `check` is the learner's, and the
learner's earlier stages replace the reference ones that a later lesson imported (so your Transformer is
built from your Encoder, which is built from your MultiHeadAttention, ...). Every other name is taken
from `fallback` (lesson 14 passes the reference, `solutions`; this package itself never imports it).

After collecting, each of the learner's functions and each method of their classes notes when it runs:
`impl.ran()` names what ran since, so a report says "yours, and it ran", never only "yours".

Example: impl = collect("lessons", fallback=solutions)
         impl.Transformer        -> the learner's class when it earned full points, else solutions.Transformer
         impl.mine               -> ["learn_bpe", ..., "corpus_bleu"]    (the names that are the learner's)
         impl.ran()              -> ["BPETokenizer", "Transformer", ...]  (those whose code has run since)
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import io
import pathlib
import re
import types

LESSON_GLOB = "[01][0-9]_*.ipynb"


def _stub_names(cell) -> list[str]:
    return cell.get("metadata", {}).get("course", {}).get("names", [])


def contract_names() -> list[str]:
    """Every graded contract name (those `check` knows), in the lessons' order."""
    from .core import REGISTRY
    return list(REGISTRY)


def find_lessons(*folders) -> pathlib.Path | None:
    """The first folder holding lesson notebooks 01-13 (not 14), or None.
    Example: find_lessons(".", "lessons") -> PosixPath("lessons") when run from the course's root"""
    for folder in folders:
        folder = pathlib.Path(folder)
        if any("01" <= p.name[:2] <= "13" for p in folder.glob(LESSON_GLOB)):  # 14 and 15 have no stubs
            return folder
    return None


class Implementation(types.SimpleNamespace):
    """Every contract name as an attribute (the learner's or the fallback's), with what is whose:
    `mine` (the learner's names), `report` ({name: "yours" | "reference: why"}), `ran()`."""

    def __init__(self, objects: dict, mine: list[str], report: dict, usage: set):
        super().__init__(**objects)
        self.__dict__["_meta"] = (list(mine), dict(report), usage)

    @property
    def mine(self) -> list[str]:
        return list(self._meta[0])

    @property
    def report(self) -> dict:
        return dict(self._meta[1])

    def ran(self) -> list[str]:
        """The learner's names whose code has run since they were collected, in the lessons' order."""
        usage = self._meta[2]
        return [n for n in self._meta[0] if n in usage]

    def forget_runs(self) -> None:
        """Start counting runs again from now."""
        self._meta[2].clear()

    def usage_report(self) -> str:
        """Which of the learner's names ran, and which did not (nothing here called them)."""
        mine, ran = self.mine, self.ran()
        if not mine:
            return "none of your code was used (no name of yours earned full points): the reference ran everything"
        idle = [n for n in mine if n not in ran]
        lines = [f"your code that ran: {len(ran)} of your {len(mine)} names" + (f" ({', '.join(ran)})" if ran else "")]
        if idle:
            lines.append(f"yours, but never called in this run (your other code, or the notebook, did not need them): "
                         f"{', '.join(idle)}")
        return "\n".join(lines)

    def __repr__(self):
        return f"Implementation(yours: {len(self._meta[0])} names, ran: {len(self.ran())})"


def _traced(obj, name: str, usage: set):
    """A function that adds `name` to `usage` each time it runs, then calls obj; for a class, the class
    itself with each of its own methods (and properties) so wrapped. Behaviour is unchanged."""
    def wrap(fn):
        if getattr(fn, "__course_traced__", False):
            return fn

        @functools.wraps(fn)
        def run(*args, **kwargs):
            usage.add(name)
            return fn(*args, **kwargs)
        run.__course_traced__ = True
        return run

    if isinstance(obj, types.FunctionType):
        return wrap(obj)
    if isinstance(obj, type):
        for attr, value in list(vars(obj).items()):
            if isinstance(value, types.FunctionType):
                setattr(obj, attr, wrap(value))
            elif isinstance(value, (staticmethod, classmethod)) and isinstance(value.__func__, types.FunctionType):
                setattr(obj, attr, type(value)(wrap(value.__func__)))
            elif isinstance(value, property) and isinstance(value.fget, types.FunctionType):
                setattr(obj, attr, property(wrap(value.fget), value.fset, value.fdel, value.__doc__))
    return obj


def _defined_in(obj, filename_prefix: str) -> bool:
    """Whether obj's code was compiled from a cell of that lesson (not imported from elsewhere)."""
    if isinstance(obj, type):
        funcs = [v for v in vars(obj).values() if isinstance(v, types.FunctionType)]
    else:
        funcs = [obj]
    return any(getattr(getattr(inspect.unwrap(f), "__code__", None), "co_filename", "").startswith(filename_prefix)
               for f in funcs)  # unwrap: a function decorated with @torch.no_grad() is the learner's inside


def collect(lessons_dir="lessons", fallback=None, verify: bool = True, log=print, exclude=()) -> Implementation:
    """The learner's implementation from the lessons in `lessons_dir`: every contract name that earns
    full points is theirs (with verify=False: every name their cells define), every other one is
    `fallback`'s (left out when fallback is None). Names in `exclude` stay the fallback's even where theirs
    would earn full points, also inside their later stages (e.g. ["BPETokenizer"] when theirs is too slow).
    Prints one line per name that is not theirs, and why.
    """
    import torch

    # the lessons' imports cells set the seed and (lesson 13) one thread: the caller's kernel keeps its own
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    try:
        return _collect(lessons_dir, fallback, verify, log, exclude)
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)


def _collect(lessons_dir, fallback, verify, log, exclude) -> Implementation:
    import nbformat

    from .core import check, max_points

    names = contract_names()
    chosen: dict = {}
    report: dict = {}
    spaces: list[dict] = []
    order: list[str] = []
    for path in sorted(pathlib.Path(lessons_dir).glob(LESSON_GLOB)):
        nb = nbformat.read(str(path), as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        stubs = [c for c in code if _stub_names(c)]
        if not stubs:
            continue
        order += [n for c in stubs for n in _stub_names(c) if n in names]
        ns: dict = {"__name__": f"learner_{path.stem}"}
        imports = next((c.source for c in code[1:] if "import" in c.source and not _stub_names(c)), "")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(imports, f"{path.name}: imports", "exec"), ns)
            except Exception as e:  # noqa: BLE001
                log(f"{path.name}: its imports cell failed ({type(e).__name__}: {e}); using the reference")
                continue
        ns.update(chosen)  # the learner's earlier stages replace the reference ones the lesson imported
        spaces.append(ns)
        for cell in stubs:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(cell.source, f"{path.name}: {' '.join(_stub_names(cell))}", "exec"), ns)
            except Exception as e:  # noqa: BLE001
                for name in _stub_names(cell):
                    report[name] = f"reference: the cell does not run ({type(e).__name__})"
                continue
            for name in _stub_names(cell):
                obj = ns.get(name)
                if obj is None or name not in names:
                    continue
                if name in exclude:
                    report[name] = "reference: you chose it (exclude)"
                    if hasattr(fallback, name):
                        ns[name] = getattr(fallback, name)  # the lesson's later cells use the reference one too
                    continue
                if not _defined_in(obj, f"{path.name}: "):
                    report[name] = "reference: the lesson's cell does not define it (imported from elsewhere?)"
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
    names = list(dict.fromkeys(order + names))
    for name in names:
        report.setdefault(name, "reference: not found in the lessons")

    # From now on each of the learner's functions and methods notes that it ran, wherever it is called from
    # (the checks above ran before: they do not count).
    usage: set = set()
    for name in list(chosen):
        chosen[name] = _traced(chosen[name], name, usage)
    for ns in spaces:
        for name, obj in chosen.items():
            if name in ns:
                ns[name] = obj
    objects = {n: chosen[n] if n in chosen else getattr(fallback, n) for n in names
               if n in chosen or hasattr(fallback, n)}
    mine = [n for n in names if n in chosen]
    log(f"full points, so yours from here on: {len(mine)} of {len(names)} names" + (f" ({', '.join(mine)})" if mine else "")
        + " (what actually runs is recorded: impl.ran())")
    unwritten = [n for n in names if re.fullmatch(r"reference: yours scores 0/.*", report[n])]
    if unwritten:
        log(f"  the reference for {', '.join(unwritten)}: yours scores 0 (not written yet?)")
    for name in names:
        if report[name] != "yours" and name not in unwritten:
            log(f"  {name}: {report[name]}")
    return Implementation(objects, mine, report, usage)
