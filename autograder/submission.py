"""Reading a submission for `python -m autograder grade` (autograder/grade.py), without running any of it.

A submission is read in a process of its own with a memory limit (`python -m autograder.submission`, fed the
file's bytes): a regular file (no symlink, no second hard link), at most MAX_NOTEBOOK_BYTES, valid JSON, a
Jupyter notebook (nbformat 4, valid), at most MAX_CELLS cells; its outputs are dropped. Its lesson is the
assignment's (--lesson, else the file's name, else its folder's name), not guessed from its contents; graded
cells of another lesson are reported. The lesson says which graded cells there are and what each is worth (the
checks' max_points). A graded cell that was deleted is graded at the end of the notebook, one that was copied
is graded once, an edited one as if untouched (autograder/kernel.py's `prepare`); each is reported under
"problems".
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import resource
import stat
import subprocess
import sys
import threading

if __name__ == "__main__":
    # This module's own child process (reading a notebook's bytes from stdin) validates notebooks and never an
    # IRI: without this, importing nbformat imports jsonschema's optional IRI checker, rfc3987_syntax, which
    # builds its grammar at import time (1.4 s of the child's start here; jsonschema issue #1428). jsonschema
    # skips that format checker when the import fails, which a None in sys.modules makes it do.
    sys.modules.setdefault("rfc3987_syntax", None)

import nbformat

MAX_NOTEBOOK_BYTES = 20 << 20   # a lesson with its outputs is well under 5 MB
MAX_CELLS = 2000
READ_MEMORY = 1 << 30     # the address space of the process that reads a submission
ROOT = pathlib.Path(__file__).resolve().parents[1]
ANSWER_IMPORT = "imports the graded stage's answer from solutions"


def course_pythonpath() -> str:
    """PYTHONPATH for the grader's own child processes (reader, runner, checkers, kernel): the course first,
    then whatever the caller had."""
    return os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))


def graded_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader",
                                                                                       {}).get("grade")]


def _grade_id(cell) -> str | None:
    meta = cell.get("metadata", {})
    nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
    gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
    return gid if isinstance(gid, str) else None


_LESSONS: list = []
_LESSONS_LOCK = threading.Lock()


def lessons() -> list[tuple[str, set, list]]:
    """(stem, every grade_id, the check cells' grade_ids in order) of each course lesson (read once)."""
    with _LESSONS_LOCK:
        if not _LESSONS:
            from .notebooks import lesson_paths
            found = []
            for path in lesson_paths():
                try:
                    nb = nbformat.read(str(path), as_version=4)
                except Exception:  # noqa: BLE001
                    continue
                ids = [_grade_id(c) for c in nb.cells]
                checks = [c.metadata["nbgrader"]["grade_id"] for c in graded_cells(nb)
                          if c.metadata["nbgrader"].get("grade_id", "").startswith("check_")]
                if checks:
                    found.append((path.stem, {i for i in ids if i}, checks))
            _LESSONS.append(found)
        return _LESSONS[0]


_lessons = lessons  # the name tests/test_grade_batch.py imports


def _max_points(name: str) -> float | None:
    from .core import REGISTRY, max_points
    return max_points(name) if name in REGISTRY else None


def expected_cells(stem: str | None) -> list[tuple[str, str, float]]:
    """The graded cells of lesson `stem`, in its order: (grade_id, contract name, most points); [] for no
    lesson. The one place that says which cells a submission is graded on and what each is worth."""
    found = {s: checks for s, _, checks in lessons()}
    return [(gid, gid[len("check_"):], _max_points(gid[len("check_"):]) or 0.0) for gid
            in found.get(stem, [])]


def _open_regular(path: pathlib.Path) -> tuple[bytes | None, str | None]:
    """The bytes of a submission that is a regular file of its own (not a symlink, not a second hard link
    to someone else's file, not a FIFO or a device), at most MAX_NOTEBOOK_BYTES; else why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if path.is_symlink():
            return None, "not graded: the submission is a symbolic link, not a file of its own"
        return None, f"cannot read the file: {e.strerror or e}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not graded: the submission is not a regular file"
        if st.st_nlink > 1:
            return None, "not graded: the submission is a hard link shared with another file"
        if st.st_size > MAX_NOTEBOOK_BYTES:
            return None, (f"not graded: the file is {st.st_size >> 20} MB, "
                          f"more than {MAX_NOTEBOOK_BYTES >> 20} MB")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_NOTEBOOK_BYTES:
                return None, f"not graded: the file is more than {MAX_NOTEBOOK_BYTES >> 20} MB"
            chunks.append(chunk)
        return b"".join(chunks), None
    finally:
        os.close(fd)


MAX_FACTS = 200  # names kept of one cell
MAX_WORDS = 2000  # words of its strings


def _without_magics(source: str) -> str:
    """The cell's text with IPython's line magics and shell escapes (`%time`, `!pip`) made `pass`, so that
    Python's parser reads the rest; a cell magic (`%%bash`) leaves nothing to read."""
    if source.lstrip().startswith("%%"):
        return ""
    lines = []
    for line in source.split("\n"):
        body = line.lstrip()
        lines.append(line[:len(line) - len(body)] + "pass" if body[:1] in ("%", "!") else line)
    return "\n".join(lines)


_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)|^([A-Za-z_]\w*)[ \t]*(?::[^=\n"
                  r"]*)?=(?!=)",
                  re.M)


def cell_facts(source: str) -> dict:
    """What the grade command needs to know of a code cell, read without running it (in the reading process):
    "defines", the names it binds at its top level (def, class, assignment, import; read by the text's own
    lines when it does not parse), and, where it mentions `solutions`, "solutions": the dotted names it
    reaches there ("solutions.masks.padding_mask"; "solutions.*" for a star import) and "words": the words of
    its strings (exec(open("../solutions/masks.py").read()), getattr(solutions, "padding_mask")). At most
    MAX_FACTS each."""
    import ast
    try:
        tree = ast.parse(_without_magics(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _facts_by_lines(source)  # a cell that does not parse
    facts: dict = {"defines": list(dict.fromkeys(_top_level_names(tree)))[:MAX_FACTS]}
    if "solutions" not in source:
        return facts
    found, words = _solutions_reached(tree)
    facts["solutions"] = [[d, sorted(c)[:MAX_FACTS]] for d, c in list(found.items())[:MAX_FACTS]]
    facts["words"] = sorted(words)[:MAX_WORDS] if "solutions" in words else []
    return facts


def _facts_by_lines(source: str) -> dict:
    """cell_facts of a cell that does not parse, read by its text's lines."""
    facts: dict = {"defines": list(dict.fromkeys(a or b for a, b in _DEF.findall(source)))[:MAX_FACTS]}
    if "solutions" in source:
        found = {re.sub(r"\s+", "", m): [] for m in re.findall(r"solutions(?:\s*\.\s*[A-Za-z_]\w*)*", source)}
        for module, names in re.findall(r"from\s+(solutions(?:\.\w+)*)\s+import\s+\(?([\w\s,*]+)", source):
            for n in names.split(","):
                if n.split():  # `a as b` binds b
                    found[f"{module}.{n.split()[0]}"] = [n.split()[-1]]
        facts["solutions"] = [[d, c] for d, c in list(found.items())[:MAX_FACTS]]
        quoted = " ".join(a or b for a, b in re.findall(r"'([^'\n]*)'|\"([^\"\n]*)\"", source))
        words = set(re.findall(r"\b[A-Za-z_]\w{0,63}\b", quoted))
        facts["words"] = sorted(words)[:MAX_WORDS] if "solutions" in words else []
    return facts


def _top_level_names(tree) -> list[str]:
    """The names a cell binds at its top level (inside if/for/while/with/try too, not inside a def or
    class)."""
    import ast
    defines: list = []

    def bind(target):
        if isinstance(target, ast.Name):
            defines.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                bind(t)

    def top(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defines.append(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    bind(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                bind(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defines.extend((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            for field in ("body", "orelse", "finalbody"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    top(getattr(node, field, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                top(handler.body)
    top(tree.body)
    return defines


def _binds(node) -> set:
    """The names a statement defines: what it reaches in solutions is used for them."""
    import ast
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _solutions_reached(tree) -> tuple[dict, set]:
    """({a dotted name reached in solutions: the names it was bound to, or used in}, the words of the
    strings)."""
    import ast
    # a name bound to solutions or one of its parts -> which
    bound: dict[str, str] = {"solutions": "solutions"}
    found: dict[str, set] = {}
    words: set = set()

    def reach(node, context: set) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "solutions" or a.name.startswith("solutions."):
                    found.setdefault(a.name, set()).add(a.asname or a.name.split(".")[0])
                    bound[a.asname or "solutions"] = a.name if a.asname else "solutions"
            return
        if isinstance(node, ast.ImportFrom):
            if node.module and not node.level and (node.module == "solutions"
                                                   or node.module.startswith("solutions.")):
                for a in node.names:
                    found.setdefault(f"{node.module}.{a.name}", set()).add(a.asname or a.name)
                    if a.name != "*":
                        bound[a.asname or a.name] = f"{node.module}.{a.name}"
            return
        if isinstance(node, ast.Attribute) or isinstance(node, ast.Name):
            chain, root = [], node
            while isinstance(root, ast.Attribute):
                chain.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.setdefault(".".join([bound[root.id]] + chain[::-1]), set()).update(context)
                return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            words.update(re.findall(r"\b[A-Za-z_]\w{0,63}\b", node.value[:10000]))
        for child in ast.iter_child_nodes(node):
            reach(child, context)

    def statements(body, context: set) -> None:
        for node in body:
            here = context | _binds(node)
            nested = [getattr(node, f, None) or [] for f in ("body", "orelse", "finalbody")] + \
                [h.body for h in getattr(node, "handlers", None) or []]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not any(nested):
                reach(node, here)
            else:  # if/try/for/with at the top level: its own parts, then its statements
                for field, value in ast.iter_fields(node):
                    if field not in ("body", "orelse", "finalbody", "handlers"):
                        for child in value if isinstance(value, list) else [value]:
                            if isinstance(child, ast.AST):
                                reach(child, here)
                for block in nested:
                    statements(block, here)
    statements(tree.body, set())
    return found, words


def answer_imports(cells, stem: str | None, names) -> list[str]:
    """Where a submission's code cells take lesson `stem`'s answer from `solutions`: "cell N: what" for each,
    from the cells' facts (cell_facts). `names`: the contract names graded in that lesson. Taken: a graded
    name bound to (or defined with) what solutions has under a graded name (from solutions.masks import
    padding_mask; padding_mask = solutions.padding_mask; def softmax(x): return solutions.softmax(x); from
    solutions import *); anything of the graded stage's module or under a graded name in a lesson's answer
    cell (the cell whose grade_id is the name); a string naming solutions and the graded stage's module or a
    graded name (exec(open("../solutions/masks.py") .read()), getattr(__import__("solutions"),
    "padding_mask")). Not taken: what the lessons themselves do with solutions (the given names of the graded
    module, a demonstration that falls back on the course's answer)."""
    from .notebooks import MODULES
    from .views import stage_of
    if stem is None:
        return []
    names = set(names)
    module = {m for s, m in MODULES.items() if int(s[:2]) == stage_of(stem)}
    out = []
    for number, cell in enumerate(cells, 1):
        facts = cell.get("metadata", {}).get("autograder") or {}
        answer_cell = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") in names
        hits = []
        for entry in facts.get("solutions") or []:
            dotted, context = str(entry[0]), set(entry[1] or [])
            parts = set(dotted.split(".")[1:])
            if "*" in parts or (parts & names and (context & names or answer_cell)) or (answer_cell
                                                                                        and parts & module):
                hits.append(dotted)
        hits = [d for d in hits if not any(h.startswith(d + ".") for h in hits)]  # the longest of each
        words = set(facts.get("words") or [])
        if not hits and "solutions" in words and words & (names | module):
            named = sorted(words & (names | module))
            hits = [f"a text naming solutions and {', '.join(named[:3])}"]
        if hits:
            out.append(f"cell {number}: {', '.join(hits[:3])}")
    return out


def _parse(data: bytes) -> dict:
    """In the reading process: {"cells": [{cell_type, source, metadata: {nbgrader}}]} or {"error"}."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return {"error": f"not a notebook: the file is not UTF-8 text ({e.reason} at byte {e.start})"}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        return {"error": f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})"}
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list) or "nbformat" not in raw:
        return {"error": "not a Jupyter notebook: the JSON has no \"cells\" list or no \"nbformat\""}
    if len(raw["cells"]) > MAX_CELLS:
        return {"error": f"not graded: {len(raw['cells'])} cells, more than {MAX_CELLS}"}
    del raw
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # noqa: BLE001  (nbformat's ValidationError and anything it trips on)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return {"error": f"not a valid notebook (nbformat): {msg[:300]}"}
    cells = []
    for c in nb.cells:
        meta = c.get("metadata", {})
        nbg = meta.get("nbgrader") if isinstance(meta.get("nbgrader"), dict) else None
        cells.append({"cell_type": c.cell_type, "source": c.source, "metadata": {"nbgrader": nbg} if nbg
                      else {}, **({"facts": cell_facts(c.source)} if c.cell_type == "code" else {})})
    return {"cells": cells}


def _read_limited(data: bytes) -> dict:
    """_parse(data) in a process of its own with READ_MEMORY of address space and a minute: a notebook
    built to exhaust the reader costs only its own grade."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (READ_MEMORY, READ_MEMORY))
    try:
        out = subprocess.run([sys.executable, "-m", "autograder.submission"], input=data, capture_output=True,
                             timeout=60, preexec_fn=limit, cwd=str(ROOT),
                             env=dict(os.environ, PYTHONPATH=course_pythonpath()))
    except subprocess.TimeoutExpired:
        return {"error": "not graded: reading the notebook took more than a minute"}
    if out.returncode != 0:
        why = "it needs more memory than a notebook may" if b"MemoryError" in out.stderr else \
            (out.stderr.decode(errors="replace").strip().splitlines() or ["no reason"])[-1][:200]
        return {"error": f"not graded: the notebook could not be read ({why})"}
    try:
        return json.loads(out.stdout)
    except ValueError:
        return {"error": "not graded: the notebook could not be read"}


def lesson_of(path, lesson: str | None = None) -> tuple[str | None, str | None]:
    """(the lesson a submission is graded as, how that was decided): --lesson, else a file or folder named
    after a lesson (nbgrader's submitted/<student>/<lesson>/<lesson>.ipynb)."""
    stems = {stem for stem, _, _ in lessons()}
    if lesson:
        return (lesson, "the assignment") if lesson in stems else (None, f"--lesson {lesson} is not a lesson")
    path = pathlib.Path(path)
    for candidate, how in ((path.stem, "its file name"), (path.parent.name, "its folder's name")):
        if candidate in stems:
            return candidate, how
    return None, None


def read_submission(path, lesson: str | None = None) -> tuple[object, list, list, str | None, str | None]:
    """(notebook or None, expected graded cells [(grade_id, name, points)], problems, lesson stem, error)."""
    path = pathlib.Path(path)
    problems: list[str] = []
    data, error = _open_regular(path)
    if error:
        return None, [], problems, None, error
    parsed = _read_limited(data)
    del data
    if parsed.get("error") or not isinstance(parsed.get("cells"), list):
        return None, [], problems, None, str(parsed.get("error")
                                             or "not graded: the notebook could not be read")
    nb = nbformat.v4.new_notebook()
    for c in parsed["cells"]:
        cell = (nbformat.v4.new_code_cell if c.get("cell_type") == "code" else nbformat.v4.new_markdown_cell)(
            str(c.get("source", "")))
        cell.metadata = c.get("metadata") or {}
        # the reader's, never the submission's own metadata (only nbgrader's)
        if isinstance(c.get("facts"), dict):
            cell.metadata["autograder"] = c["facts"]
        nb.cells.append(cell)

    ids = [_grade_id(c) for c in nb.cells]
    counts: dict[str, int] = {}
    for i in ids:
        if i:
            counts[i] = counts.get(i, 0) + 1
    for gid, n in counts.items():
        if n > 1:
            problems.append(f"grade_id {gid} appears {n} times (a cell was copied): graded once")
    found = {stem: checks for stem, _, checks in lessons()}
    by_content, best = None, 0
    for stem, lesson_ids, _checks in lessons():
        overlap = len(lesson_ids & set(counts))
        if overlap > best:
            by_content, best = stem, overlap
    stem, how = lesson_of(path, lesson)
    if lesson and stem is None:
        return nb, [], problems, None, how
    if stem is None and by_content is not None:
        stem = by_content
        problems.append(f"graded as lesson {stem}, recognised by its graded cells (no assignment given: use "
                        "--lesson)")
    elif stem is not None and by_content is not None and by_content != stem:
        problems.append(f"this notebook's graded cells are lesson {by_content}'s, but it is graded as lesson "
                        f"{stem} ({how}): another lesson's notebook under this lesson's name?")
    expected = expected_cells(stem)
    if stem is not None:
        extra = [gid for gid in counts if gid.startswith("check_") and gid not in found[stem]]
        if extra:
            problems.append(f"graded cells not in lesson {stem}, not graded: {', '.join(extra)}")
    if not expected:
        return nb, [], problems, None, "no graded cells of a course lesson in this notebook"
    borrowed = answer_imports(nb.cells, stem, [name for _, name, _ in expected])
    if borrowed:
        problems.append(f"{ANSWER_IMPORT} ({'; '.join(borrowed[:3])}{'; ...' if len(borrowed) > 3 else ''}): "
                        "the grader's solutions/ has that stage stubbed, so what it imports earns nothing")
    return nb, expected, problems, stem, None


if __name__ == "__main__":
    sys.stdout.write(json.dumps(_parse(sys.stdin.buffer.read())))
