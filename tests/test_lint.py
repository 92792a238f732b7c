"""The whole repository passes `ruff check` under pyproject.toml's [tool.ruff]: its rules (pyflakes,
pycodestyle, bugbear, import order where selected) and its line length."""
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
