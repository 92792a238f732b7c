"""What the kernel of `python -m autograder grade` sees of the course, built per lesson: `solutions/` with the
graded stage's and every later stage's solutions cleared, and `autograder/` with those stages' checks reduced
to what the kernel's side needs (the shortcut rules, the tensor classes and model factories that cross the
channel), so that neither the reference nor the checks' own reference code can be borrowed. See GRADING.md.
"""
from __future__ import annotations

import ast
import functools
import os
import pathlib
import shutil
import threading

from .notebooks import BEGIN, CODE_STUB, END, MODULES

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def stage_of(lesson: str | None) -> int:
    """01_tokenization -> 1; an unknown lesson -> 0 (every stage hidden)."""
    return int(lesson[:2]) if lesson and lesson[:2].isdigit() else 0


# The grade command builds views in one thread per notebook being graded. CPython 3.11 keeps the depth counter
# of ast.parse's tree building in the interpreter, not the thread: two threads parsing at once can corrupt it,
# and the parse then fails with "SystemError: AST constructor recursion depth mismatch"
# (python/cpython#106905; seen here as a solved lesson graded to 0 in a batch). One parse at a time.
_PARSING = threading.Lock()


def parse(text: str) -> ast.Module:
    """ast.parse, one thread at a time (see _PARSING)."""
    with _PARSING:
        return ast.parse(text)


def cleared(text: str, begin: str = BEGIN, end: str = END, stub: list[str] = CODE_STUB) -> str:
    """A module's text with each marked region (a line that is only the BEGIN marker, to a line that is
    only the END marker) replaced by the stub, indented like its marker; a solution left unclosed is cut."""
    out, inside = [], False
    for line in text.split("\n"):
        if line.strip() == begin and not inside:
            inside = True
            indent = line[:len(line) - len(line.lstrip())]
            out.extend(indent + s for s in stub)
        elif line.strip() == end and inside:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def solutions_view(lesson: str | None, dest: pathlib.Path) -> pathlib.Path:
    """A copy of solutions/ in which the modules of `lesson`'s stage and of every later stage have their
    solutions cleared (nbgrader's stubs: `raise NotImplementedError()`): earlier stages stay usable, the
    graded one and those built on it cannot be borrowed."""
    stage = stage_of(lesson)
    hidden = {module for stem, module in MODULES.items() if int(stem[:2]) >= stage}
    dest.mkdir(parents=True, exist_ok=True)
    for src in sorted((ROOT / "solutions").rglob("*.py")):  # the stages' modules, and solutions/translate/
        text, target = src.read_text(encoding="utf-8"), dest / src.relative_to(ROOT / "solutions")
        target.parent.mkdir(parents=True, exist_ok=True)
        stage_module = src.parent == ROOT / "solutions" and src.stem in hidden
        target.write_text(cleared(text) if stage_module else text, encoding="utf-8")
    os.chmod(dest, 0o755)
    return dest


def _kept(node) -> bool:
    """What the kernel's side needs of a stage's checks: imports, forbid(...) rules, tensor classes that
    cross the channel, and factories marked @learner_side."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
            isinstance(node.value.func, ast.Name) and node.value.func.id == "forbid":
        return True
    if isinstance(node, ast.ClassDef):
        return any(ast.unparse(b) in ("torch.Tensor", "Tensor") for b in node.bases)
    if isinstance(node, ast.FunctionDef):
        return any(ast.unparse(d) == "learner_side" for d in node.decorator_list)
    return False


def _names_used(nodes) -> set[str]:
    return {sub.id for node in nodes for sub in ast.walk(node) if isinstance(sub, ast.Name)}


def reduced_checks(text: str, also: set[str] = frozenset()) -> tuple[str, dict[str, set[str]]]:
    """A stage's checks module with only what _kept keeps (and the names in `also`, which another reduced
    module imports from it), with the top-level definitions those use. Returns the text and, per sibling
    stage module, the names it still imports from there."""
    reduced, needs = _reduced(text, frozenset(also))
    return reduced, {module: set(names) for module, names in needs.items()}


@functools.lru_cache(maxsize=256)
def _reduced(text: str, also: frozenset) -> tuple[str, dict[str, frozenset]]:
    """reduced_checks, remembered by the module's text: a batch builds one view per notebook, and parsing the
    checks is most of a view's cost (0.8 s for lesson 03's)."""
    tree = parse(text)
    defined = {}
    for node in tree.body:
        targets = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
            [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else []
        for name in targets:
            defined[name] = node
    keep = [n for n in tree.body if _kept(n) and not _sibling(n)] + [defined[n] for n in also if n in defined]
    seen = {id(n) for n in keep}
    frontier = list(keep)
    while frontier:  # the definitions the kept code refers to, and theirs
        node = frontier.pop()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in defined and id(defined[sub.id]) not in seen:
                seen.add(id(defined[sub.id]))
                frontier.append(defined[sub.id])
    body = [n for n in tree.body if id(n) in seen]
    used = _names_used(body)
    needs: dict[str, set[str]] = {}
    for node in tree.body:  # imports from the other stages' checks: only the names still used
        if _sibling(node):
            names = [a for a in node.names if (a.asname or a.name) in used]
            if names:
                needs.setdefault(node.module, set()).update(a.name for a in names)
                first = sum(1 for n in body if isinstance(n, ast.ImportFrom) and n.module == "__future__")
                body.insert(first, ast.ImportFrom(module=node.module, names=names, level=node.level))
    doc = ('"""Generated by autograder/views.py for a graded notebook\'s kernel: the checks of this stage '
           'run in the grader,\nnot here. Only the shortcut rules, tensor classes and model factories are '
           'left."""')
    return (doc + "\n" + ast.unparse(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])))
            + "\n", {module: frozenset(names) for module, names in needs.items()})


def _sibling(node) -> bool:
    return isinstance(node, ast.ImportFrom) and node.level == 1 and (node.module or "").startswith("stage")


def autograder_view(lesson: str | None, dest: pathlib.Path, *, reduce_from: int | None = None,
                    fixtures: bool = False) -> pathlib.Path:
    """A copy of autograder/ with the checks of `lesson`'s stage and of every later stage reduced, and no
    fixtures (they hold expected answers). A class release (autograder/release.py) keeps the graded stage's
    checks whole, so that a student's `check` works, and the fixtures' JSON: `reduce_from` is the first stage
    reduced (default: the lesson's), `fixtures` keeps fixtures/*.json (never the scripts that make them)."""
    stage = stage_of(lesson) if reduce_from is None else reduce_from
    dest.mkdir(parents=True, exist_ok=True)
    reduced = {src.stem: src.read_text(encoding="utf-8") for src in (HERE / "checks").glob("stage*.py")
               if int(src.stem[5:7]) >= stage}
    also: dict[str, set[str]] = {}
    for _ in range(len(reduced) + 1):  # until no reduced module needs more of another
        texts, wanted = {}, {}
        for stem, text in reduced.items():
            texts[stem], needs = reduced_checks(text, also.get(stem, set()))
            for module, names in needs.items():
                wanted.setdefault(module, set()).update(names)
        if all(names <= also.get(m, set()) for m, names in wanted.items()):
            break
        for m, names in wanted.items():
            also.setdefault(m, set()).update(names)
    for src in HERE.rglob("*.py"):
        rel = src.relative_to(HERE)
        # fixtures/*.py: how the expected answers are made
        if "__pycache__" in rel.parts or rel.parts[0] == "fixtures":
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        text = (texts[src.stem] if rel.parts[0] == "checks" and src.stem in texts
                else src.read_text(encoding="utf-8"))
        target.write_text(text, encoding="utf-8")
    if fixtures:
        for src in (HERE / "fixtures").glob("*.json"):
            (dest / "fixtures").mkdir(exist_ok=True)
            shutil.copyfile(src, dest / "fixtures" / src.name)
    for d in [dest, *(p for p in dest.rglob("*") if p.is_dir())]:
        os.chmod(d, 0o755)
    return dest


def build(lesson: str | None, dest: pathlib.Path) -> dict[str, str]:
    """Both views under dest: {mount point in the course: view folder}."""
    if dest.exists():
        shutil.rmtree(dest)
    return {str(ROOT / "solutions"): str(solutions_view(lesson, dest / "solutions")),
            str(ROOT / "autograder"): str(autograder_view(lesson, dest / "autograder"))}
