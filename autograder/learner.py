"""Collect a learner's own implementation from their completed lessons, for the final notebook's
"train my own code" switch, and record which of it actually ran.

Each lesson's imports cell and stub cells (the ones the learner filled in) run in order, in a namespace
of their own; every contract name whose object earns full points from `check` is the learner's, and the
learner's earlier stages replace the reference ones that a later lesson imported (so your Transformer is
built from your Encoder, which is built from your MultiHeadAttention, ...). Every other name is taken
from `fallback` (lesson 14 passes the reference, `solutions`; this package itself never imports it).

A reference object that a later stage takes from `fallback` is rebuilt on the learner's finished parts: with
their own `Decoder` and the reference `Transformer`, impl.Transformer is the reference's class whose methods
look `Decoder` up among the learner's names (a subclass; the reference module itself is left alone), so their
Decoder trains. Names in `exclude` stay the reference's, and so do the parts they are built from.

Two notebooks of one lesson in the folder (Jupyter's `05_masks-Copy1.ipynb` beside `05_masks.ipynb`): the one
saved last is used, and collect says so; every score and name reported for that lesson is that notebook's.

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

    def __init__(self, objects: dict, mine: list[str], report: dict, usage: set, rebuilt: dict | None = None,
                 notebooks: list | None = None):
        super().__init__(**objects)
        self.__dict__["_meta"] = (list(mine), dict(report), usage)
        # {reference name: [the learner's names inside it]}
        self.__dict__["rebuilt"] = dict(rebuilt or {})
        # the lesson notebooks the names were collected from
        self.__dict__["notebooks"] = list(notebooks or [])

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
            return ("none of your code was used (no name of yours earned full points): "
                    "the reference ran everything")
        idle = [n for n in mine if n not in ran]
        lines = [f"your code that ran: {len(ran)} of your {len(mine)} names"
                 + (f" ({', '.join(ran)})" if ran else "")]
        if idle:
            lines.append("yours, but never called in this run (your other code, or the notebook, did not "
                         f"need them): {', '.join(idle)}")
        if self.rebuilt:
            lines.append("the reference's " + "; ".join(f"{n}, built from your {', '.join(parts)}"
                                                        for n, parts in self.rebuilt.items()))
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
            elif isinstance(value, (staticmethod, classmethod)) and isinstance(value.__func__,
                                                                               types.FunctionType):
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
    return any(getattr(getattr(inspect.unwrap(f), "__code__", None), "co_filename",
                       "").startswith(filename_prefix)
               for f in funcs)  # unwrap: a function decorated with @torch.no_grad() is the learner's inside


def _global_names(fn) -> set[str]:
    """The global names a function's code (and the code nested in it) reads."""
    def walk(code):
        names = set(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names |= walk(const)
        return names
    return walk(fn.__code__)


class _Rebinder:
    """Reference functions and classes rebuilt so that, where they read a contract name from their module,
    they get `swap[name]` (the learner's object, or a reference one rebuilt in turn) instead of the
    reference's own."""

    def __init__(self, swap: dict, fallback):
        self.swap, self.fallback, self.copies, self.used = swap, fallback, {}, set()

    def _targets(self, fn) -> dict:
        g = fn.__globals__
        return {k: self.swap[k] for k in _global_names(fn) & self.swap.keys()
                if g.get(k) is getattr(self.fallback, k, None)}

    def _globals(self, g: dict) -> dict:
        if id(g) not in self.copies:
            self.copies[id(g)] = {**g, **{k: v for k, v in self.swap.items()
                                          if g.get(k) is getattr(self.fallback, k, None)}}
        return self.copies[id(g)]

    def function(self, fn):
        """fn itself when nothing in it reads a swapped name; else a copy reading the swapped objects (a
        decorator's wrapper, e.g. @torch.no_grad(), is copied around its rebuilt inner function)."""
        if not isinstance(fn, types.FunctionType):
            return fn
        targets = self._targets(fn)
        cells = fn.__closure__ or ()
        inner = [self.function(c.cell_contents) if _filled(c)
                 and isinstance(c.cell_contents, types.FunctionType)
                 else None for c in cells]
        if not targets and all(i is None or i is c.cell_contents for i, c in zip(inner, cells)):
            return fn
        self.used |= targets.keys()
        closure = tuple(types.CellType(i) if i is not None and i is not c.cell_contents else c
                        for i, c in zip(inner, cells)) or None
        copy = types.FunctionType(fn.__code__, self._globals(fn.__globals__), fn.__name__, fn.__defaults__,
                                  closure)
        copy.__kwdefaults__, copy.__qualname__, copy.__doc__ = fn.__kwdefaults__, fn.__qualname__, fn.__doc__
        copy.__module__, copy.__dict__ = fn.__module__, dict(fn.__dict__)
        if "__wrapped__" in copy.__dict__:
            copy.__wrapped__ = self.function(fn.__wrapped__)
        return copy

    def __call__(self, obj):
        if isinstance(obj, types.FunctionType):
            return self.function(obj)
        if not isinstance(obj, type):
            return obj
        changed = {}
        for attr, value in vars(obj).items():
            if isinstance(value, types.FunctionType):
                new = self.function(value)
            elif isinstance(value, (staticmethod, classmethod)):
                new = type(value)(self.function(value.__func__))
                new = value if new.__func__ is value.__func__ else new
            elif isinstance(value, property) and value.fget is not None:
                fget = self.function(value.fget)
                new = value if fget is value.fget else property(fget, value.fset, value.fdel, value.__doc__)
            else:
                continue
            if new is not value:
                changed[attr] = new
        if not changed:
            return obj
        # a subclass: isinstance with the reference class still holds, and zero-argument super() in a copied
        # method (its __class__ cell is the reference class) goes on to the reference class's own bases
        return type(obj.__name__, (obj,), {"__module__": obj.__module__, "__qualname__": obj.__qualname__,
                                            "__doc__": obj.__doc__, **changed})


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (reading an empty cell raises ValueError)
    except ValueError:
        return False
    return True


def _with_learner_parts(chosen: dict, fallback, names: list[str], exclude=()) -> tuple[dict, dict]:
    """({name: object} for every name, the learner's where chosen, else the fallback's rebuilt on the
    learner's parts where it uses any; {rebuilt name: the learner's names inside it, directly or through
    another rebuilt one}). Names in `exclude` stay the fallback's own, parts included (a reference
    BPETokenizer keeps the reference learn_bpe)."""
    swap, inside, rebuilt = dict(chosen), {n: [n] for n in chosen}, {}
    for name in names:
        if name in chosen or name in exclude or not hasattr(fallback, name):
            continue
        rebinder = _Rebinder(swap, fallback)
        ref = getattr(fallback, name)
        new = rebinder(ref)
        if new is not ref:
            swap[name] = new
            inside[name] = list(dict.fromkeys(p for used in names if used in rebinder.used for p
                                              in inside[used]))
            rebuilt[name] = inside[name]
    return swap, rebuilt


def _one_per_lesson(paths: list[pathlib.Path], log) -> list[pathlib.Path]:
    """One notebook per lesson number: where a folder holds two (a Jupyter copy beside the lesson), the one
    saved last, the lesson's own name first on a tie; collect says which and why."""
    by_number: dict = {}
    for path in paths:
        by_number.setdefault(path.name[:2], []).append(path)
    kept = []
    for number, group in sorted(by_number.items()):
        best = max(group, key=lambda p: (p.stat().st_mtime, "copy" not in p.stem.lower(), -len(p.name)))
        if len(group) > 1:
            others = ", ".join(p.name for p in group if p != best)
            log(f"lesson {number}: {len(group)} notebooks; using {best.name}, the one saved last (not "
                f"{others}): its code and its scores are the ones below. To use another, move the rest out "
                f"of {best.parent}")
        kept.append(best)
    return kept


def collect(lessons_dir="lessons", fallback=None, verify: bool = True, log=print,
            exclude=()) -> Implementation:
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

    names = contract_names()
    chosen: dict = {}
    report: dict = {}
    spaces: list[dict] = []
    order: list[str] = []
    notebooks = _one_per_lesson(sorted(pathlib.Path(lessons_dir).glob(LESSON_GLOB)), log)
    used: list = []
    for path in notebooks:
        nb = nbformat.read(str(path), as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        stubs = [c for c in code if _stub_names(c)]
        if not stubs:
            continue
        order += [n for c in stubs for n in _stub_names(c) if n in names]
        ns = _lesson_namespace(path, code, chosen, fallback, names, exclude, log)
        if ns is None:
            continue
        spaces.append(ns)
        used.append(path)
        for cell in stubs:
            _run_stub_cell(cell, path, ns, names, chosen, report, fallback, exclude, verify)
    if not report:
        log(f"no lesson notebooks with your code in {pathlib.Path(lessons_dir).resolve()}: put your "
            "completed lessons (01_tokenization.ipynb ...) there, or pass their folder")
    names = list(dict.fromkeys(order + names))
    for name in names:
        report.setdefault(name, "reference: not found in the lessons")

    # From now on each of the learner's functions and methods notes that it ran, wherever it is called from
    # (the checks above ran before: they do not count).
    usage: set = set()
    for name in list(chosen):
        chosen[name] = _traced(chosen[name], name, usage)
    swap, rebuilt = _rewire(chosen, spaces, fallback, names, exclude)
    for name, parts in rebuilt.items():
        report[name] += f"; built from your {', '.join(parts)}"
    objects = {n: swap[n] if n in swap else getattr(fallback, n) for n in names
               if n in swap or hasattr(fallback, n)}
    mine = [n for n in names if n in chosen]
    _log_choices(log, names, mine, report)
    return Implementation(objects, mine, report, usage, rebuilt, used)


def _lesson_namespace(path, code, chosen, fallback, names, exclude, log) -> dict | None:
    """The namespace a lesson's stub cells run in: its imports cell run, then the learner's earlier stages
    (and the reference's built on them) in place of the reference's; None when the imports cell fails."""
    ns: dict = {"__name__": f"learner_{path.stem}"}
    imports = next((c.source for c in code[1:] if "import" in c.source and not _stub_names(c)), "")
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            exec(compile(imports, f"{path.name}: imports", "exec"), ns)
        except Exception as e:  # noqa: BLE001
            log(f"{path.name}: its imports cell failed ({type(e).__name__}: {e}); using the reference")
            return None
    ns.update(chosen)  # the learner's earlier stages replace the reference ones the lesson imported
    swap, _ = _with_learner_parts(chosen, fallback, names, exclude)
    for name, obj in list(ns.items()):  # and reference ones built on them (their Decoder in our Transformer)
        if name in swap and fallback is not None and obj is getattr(fallback, name, None):
            ns[name] = swap[name]
    return ns


def _run_stub_cell(cell, path, ns, names, chosen, report, fallback, exclude, verify) -> None:
    """Runs one of the lesson's stub cells in `ns` and takes each name it defines that passes (into `chosen`),
    saying in `report` which is used, the learner's or the reference, and why."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(cell.source, f"{path.name}: {' '.join(_stub_names(cell))}", "exec"), ns)
    except Exception as e:  # noqa: BLE001
        for name in _stub_names(cell):
            report[name] = f"reference: the cell does not run ({type(e).__name__})"
        return
    for name in _stub_names(cell):
        obj = ns.get(name)
        if obj is None or name not in names:
            continue
        report[name] = _verdict(name, obj, path, ns, fallback, exclude, verify)
        if report[name] == "yours":
            chosen[name] = obj
            ns[name] = obj


def _verdict(name, obj, path, ns, fallback, exclude, verify) -> str:
    """'yours', or 'reference: ' and why not (excluded, defined elsewhere, short of full points)."""
    from .core import check, max_points

    if name in exclude:
        if hasattr(fallback, name):
            ns[name] = getattr(fallback, name)  # the lesson's later cells use the reference one too
        return "reference: you chose it (exclude)"
    if not _defined_in(obj, f"{path.name}: "):
        return "reference: the lesson's cell does not define it (imported from elsewhere?)"
    if verify:
        with contextlib.redirect_stdout(io.StringIO()):
            points = check(obj)
        if points < max_points(name):
            return f"reference: yours scores {points:g}/{max_points(name):g}"
    return "yours"


def _rewire(chosen, spaces, fallback, names, exclude) -> tuple[dict, dict]:
    """The reference's later stages rebuilt on the learner's finished (and now traced) parts, put in place in
    every lesson's namespace: (swap, rebuilt) as _with_learner_parts gives them."""
    if fallback is not None:
        swap, rebuilt = _with_learner_parts(chosen, fallback, names, exclude)
    else:
        swap, rebuilt = dict(chosen), {}
    for ns in spaces:
        for name, obj in list(ns.items()):
            if name in chosen or (name in swap and obj is getattr(fallback, name, None)):
                ns[name] = swap[name]
    return swap, rebuilt


def _log_choices(log, names, mine, report) -> None:
    log(f"full points, so yours from here on: {len(mine)} of {len(names)} names"
        + (f" ({', '.join(mine)})" if mine else "") + " (what actually runs is recorded: impl.ran())")
    unwritten = [n for n in names if re.fullmatch(r"reference: yours scores 0/.*", report[n])]
    if unwritten:
        log(f"  the reference for {', '.join(unwritten)}: yours scores 0 (not written yet?)")
    for name in names:
        if report[name] != "yours" and name not in unwritten:
            log(f"  {name}: {report[name]}")
