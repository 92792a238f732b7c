"""The whole repository passes `ruff check` under pyproject.toml's [tool.ruff]: its rules (pyflakes,
pycodestyle, bugbear, import order where selected) and its line length."""
import ast
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                    reason="ruff is not installed: pip install -r requirements-ci.txt (it pins the version "
                           "CI runs)")
def test_ruff_finds_nothing():
    # --no-cache: nothing written into the repository; the configuration is the one in ROOT/pyproject.toml
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, ("ruff check found problems (fix them, or `# noqa: CODE` with the reason):\n"
                                  f"{proc.stdout}{proc.stderr}")


def _house_files():
    """The Python files outside tests/ and lessons/ (the grader, the reference, the benchmarks)."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(("tests/", "lessons/", ".", "build/")) and "/." not in rel:
            yield rel, path.read_text()


def _answer_cell(source: str, node) -> bool:
    """A reference function whose body is a lesson's answer cell (between BEGIN and END SOLUTION): the lesson
    shows it whole, its stub defines the same names, and the checks' tests edit its lines by their text."""
    body = "\n".join(source.splitlines()[node.lineno - 1:node.end_lineno])
    return "### BEGIN SOLUTION" in body


def test_no_function_over_60_lines():
    """Issue 39: no function over 60 lines (from `def` to its last line) outside tests and lessons. Exempt:
    the reference functions that are a lesson's answer cell (beam_search, learn_bpe), shown whole."""
    long = [f"{rel}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for rel, source in _house_files() for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 60 and not _answer_cell(source, node)]
    assert not long, "functions over 60 lines (cut them into named steps):\n" + "\n".join(long)


def test_no_file_over_its_bound():
    """Issue 39: no file over 600 lines outside autograder/checks/, and no check module over 800 (one over it
    splits by graded name, as stage01_<name>.py)."""
    big = [f"{rel} ({n} lines)" for rel, source in _house_files()
           if (n := source.count("\n")) > (800 if rel.startswith("autograder/checks/") else 600)]
    assert not big, "files over their bound (split them along a seam):\n" + "\n".join(big)
