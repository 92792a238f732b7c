"""CI runs every test it can: under CI=true, tests/conftest.py turns a skip into a failure that names the test
and its reason, unless the reason is on CI_ALLOWED_SKIPS. Each case runs pytest on a tiny test file in a
temporary folder, with this suite's conftest hooks and an allow-list of its own."""
import os
import re
import subprocess
import sys

import pytest

from tests import conftest

ROOT = conftest.ROOT

TINY_CONFTEST = """
import tests.conftest as course
course.CI_ALLOWED_SKIPS = {r"^no GPU here": "the CI machine has no GPU (an example)"}
from tests.conftest import (pytest_collectreport, pytest_runtest_makereport, pytest_sessionfinish,
                            pytest_terminal_summary)
"""

WIDGET_TESTS = """
import pytest

def test_runs():
    assert True

@pytest.mark.skipif(True, reason="widget is not installed")
def test_widget_marked():
    pass

def test_widget_in_body():
    pytest.skip("the widget tool is missing")

@pytest.fixture
def widget():
    pytest.skip("no widget for the fixture")

def test_widget_fixture(widget):
    pass
"""

# what CI lets through: a skip whose reason is on the allow-list, and an expected failure (not a skip)
ALLOWED_TESTS = """
import pytest

@pytest.mark.skipif(True, reason="no GPU here (CUDA)")
def test_gpu():
    pass

@pytest.mark.xfail(reason="a known bug, not a skip")
def test_known_bug():
    assert False
"""

# a whole module skipped while collecting
MODULE_SKIP = """
import pytest
pytest.importorskip("no_such_module_here_23", reason="gadget is not installed")

def test_gadget():
    pass
"""

DISALLOWED = {"test_widget.py::test_widget_marked": "widget is not installed",
              "test_widget.py::test_widget_in_body": "the widget tool is missing",
              "test_widget.py::test_widget_fixture": "no widget for the fixture",
              "test_module_skip.py": "gadget is not installed"}


def run_tiny(tmp_path, ci, files):
    """pytest -q on `files` ({name: source}) in tmp_path, with CI set to `ci` (None: unset)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(TINY_CONFTEST)
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    # not a worker of this run's pytest-xdist (pytest-benchmark, seeing a worker's variables, warns on
    # stderr), and none of the installed plugins (nbval, xdist, ...: seconds of imports per run), only pytest
    # and the hooks
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.update(PYTHONPATH=str(ROOT), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env.pop("CI", None)
    if ci is not None:
        env["CI"] = ci
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *files],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


EVERYTHING = {"test_widget.py": WIDGET_TESTS, "test_allowed.py": ALLOWED_TESTS,
              "test_module_skip.py": MODULE_SKIP}


def test_under_ci_a_skip_fails_and_names_the_test_and_its_reason(tmp_path):
    code, out = run_tiny(tmp_path, "true", EVERYTHING)
    assert code == 1, out
    for nodeid, reason in DISALLOWED.items():
        assert f"{nodeid} skipped under CI=true: {reason!r}" in out, \
            f"{nodeid} is not named as a failure:\n{out}"
    assert "CI_ALLOWED_SKIPS in tests/conftest.py" in out, out
    named = "\n".join(line for line in out.splitlines() if "skipped under CI" in line)
    assert "test_gpu" not in named and "test_known_bug" not in named, named
    # the marked skip and the fixture's fail in setup (errors), the body's skip fails in the call
    summary = out.strip().splitlines()[-1]
    assert re.search(r"1 failed, 1 passed, 2 skipped, 1 xfailed, 2 errors", summary), summary


def test_under_ci_an_allowed_skip_and_an_xfail_pass(tmp_path):
    code, out = run_tiny(tmp_path, "true", {"test_allowed.py": ALLOWED_TESTS})
    assert code == 0, out
    assert "SKIPPED [1] test_allowed.py" in out and "no GPU here (CUDA)" in out, out
    assert "skipped under CI" not in out, out
    assert re.search(r"1 skipped, 1 xfailed", out), out


@pytest.mark.parametrize("ci", [None, "false", "0"])
def test_outside_ci_a_skip_is_only_a_skip(tmp_path, ci):
    code, out = run_tiny(tmp_path, ci, EVERYTHING)
    assert code == 0, out
    assert "skipped under CI" not in out, out
    assert re.search(r"1 passed, 5 skipped, 1 xfailed", out), out


def test_the_allow_list_says_why_for_each_entry():
    for pattern, why in conftest.CI_ALLOWED_SKIPS.items():
        re.compile(pattern)
        assert isinstance(why, str) and len(why.split()) >= 3, (pattern, why)


def root_conftest():
    import importlib.util
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)
    return root


def test_each_worker_s_children_share_the_cores():
    """The root conftest.py gives a pytest-xdist worker's children its share of the cores, and leaves the
    controller (whose environment the workers inherit) and a value the user set alone."""
    root = root_conftest()
    worker = {"PYTEST_XDIST_WORKER_COUNT": "2"}
    for environ, cores, threads in [(worker, 2, ("1", "1")), (worker, 16, ("8", "8")),
                                    ({"PYTEST_XDIST_WORKER_COUNT": "4"}, 2, ("1", "1")),
                                    (dict(worker, OMP_NUM_THREADS="3"), 2, ("3", "1")),
                                    ({}, 2, (None, None))]:
        environ = dict(environ)
        root.share_the_cores(environ, cores)
        assert (environ.get("OMP_NUM_THREADS"), environ.get("MKL_NUM_THREADS")) == threads, (environ, cores)


def test_the_longest_files_start_first_and_the_rest_keep_their_order():
    """The root conftest.py's schedule for pytest-xdist (--no-loadscope-reorder in pyproject.toml): the work
    units of LONGEST_FIRST (files, or units of UNITS, which must exist), in its order, then every other test
    in collection order; one worker more than cores."""
    from types import SimpleNamespace
    root = root_conftest()
    def known(unit):  # a file, or "file (unit)" for a unit of root.UNITS
        path, _, name = unit.partition(" (")
        return (ROOT / path).is_file() and (not name or name.rstrip(")") in root.UNITS.get(path, {}))
    assert root.LONGEST_FIRST and all(known(unit) for unit in root.LONGEST_FIRST), root.LONGEST_FIRST
    assert not known("tests/test_hostile.py (nowhere)") and not known("tests/no_such_file.py")
    assert "--no-loadscope-reorder" in (ROOT / "pyproject.toml").read_text()
    first, second = root.LONGEST_FIRST[:2]
    ids = ["tests/test_a.py::x", f"{second}::y", "tests/test_b.py::z", f"{first}::w", "tests/test_a.py::v",
           f"{second}::u"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    root.pytest_collection_modifyitems(None, None, items)
    assert [i.nodeid for i in items] == [f"{first}::w", f"{second}::y", f"{second}::u", "tests/test_a.py::x",
                                         "tests/test_b.py::z", "tests/test_a.py::v"]
    assert root.pytest_xdist_auto_num_workers(None) == root.CORES + 1



SEEDS = (0, 14)  # two hash seeds under which Python orders {1, 'two'} differently (asserted below)


def _in_python(seed, code):
    """A Python process under hash seed `seed`, started (the caller reads its output)."""
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.Popen([sys.executable, *code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _collected_ids(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    return [line for line in out.splitlines() if "::" in line]


def test_the_suite_collects_the_same_ids_under_any_hash_seed():
    """xdist's workers each collect the suite and must agree on every id, in the same order; each worker has
    its own hash seed, so an id made from a set's repr, or parameters taken from a set, can differ between
    them, and CI stops at collection (it did once: {1, 'two'}). The two collections run at once."""
    shown = [_in_python(seed, ["-c", "print(repr({1, 'two'}))"]) for seed in SEEDS]
    orders = {proc.communicate(timeout=60)[0] for proc in shown}
    assert len(orders) == 2, f"seeds {SEEDS} order a set the same way ({orders}): this test could not fail"
    procs = [_in_python(seed, ["-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                               "-o", "addopts=", "tests"]) for seed in SEEDS]
    first, second = (_collected_ids(proc) for proc in procs)
    assert len(first) > 1000, f"only {len(first)} tests collected"
    differ = sorted(set(first) ^ set(second))
    assert not differ, f"ids that depend on the hash seed: {differ[:6]}"
    moved = next((k for k, (a, b) in enumerate(zip(first, second)) if a != b), None)
    assert moved is None, f"the same ids in another order from test {moved}: {first[moved]} / {second[moved]}"
