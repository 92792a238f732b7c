import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# the real Multi30k files, beside the repository on the development machine only (never committed)
MULTI30K = pathlib.Path(os.environ.get("MULTI30K_MIRROR", ROOT.parent / "shared" / "data" / "multi30k"))


def pytest_configure(config):
    """At most 2 threads, shared among pytest-xdist's workers: 1 each on a 2-core machine. Not in
    pytest-xdist's controller, which runs no test: importing PyTorch there delays every worker's start by a
    second or two."""
    if getattr(config.option, "numprocesses", None) and "PYTEST_XDIST_WORKER" not in os.environ:
        return
    import torch
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))
    torch.set_num_threads(max(1, min(2, torch.get_num_threads() // workers)))


@pytest.fixture(scope="module")
def one_thread():
    """One PyTorch thread for a module's tests, restored after it: tiny models gain little from a second
    thread, two threads slow down many times over when another process shares the cores, and one thread sums
    in one order."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed():
    import torch
    torch.manual_seed(0)


# ---------------------------------------------------------------- no silent skips in CI
# Under CI (the environment variable CI=true, as .ci/run sets it) a skipped test fails the run, unless its
# skip reason matches a pattern below. Each entry says why CI cannot run that test; "the tool is not
# installed" is never a reason: .ci/run installs it. Empty today: CI installs repo2docker, Chromium and
# Playwright, and has the Multi30k files in ../shared/data/multi30k, so in CI nothing skips.
CI_ALLOWED_SKIPS = {
    # r"regular expression searched in the skip reason": "why CI cannot run the test",
}


def running_in_ci():
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")


def skip_reason(report):
    """The reason given to pytest.skip / skipif / importorskip, without pytest's 'Skipped: ' prefix."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def allowed_in_ci(reason):
    return any(re.search(pattern, reason) for pattern in CI_ALLOWED_SKIPS)


def ci_skip_message(nodeid, reason):
    return (f"{nodeid} skipped under CI=true: {reason!r}. CI runs every test: install what it needs in "
            ".ci/run, or, where CI cannot run it, add its reason to CI_ALLOWED_SKIPS in tests/conftest.py "
            "with why.")


class _CISkipRepr:
    """A failure's longrepr: the whole message in the failure's section, its shorter form in the summary line
    (which names the test already)."""

    def __init__(self, nodeid, reason):
        self.message = ci_skip_message(nodeid, reason)
        short = f"skipped under CI=true: {reason!r} (not on CI_ALLOWED_SKIPS in tests/conftest.py)"
        self.reprcrash = type("ReprCrash", (), {"message": short})()

    def toterminal(self, tw):
        tw.line(self.message, red=True)

    def __str__(self):
        return self.message


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test skipped in setup (skipif, a fixture) or in its body: under CI, unless allowed, it fails
    instead."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and running_in_ci():
        reason = skip_reason(report)
        if not allowed_in_ci(reason):
            report.outcome = "failed"
            report.longrepr = _CISkipRepr(report.nodeid, reason)


_collection_skips = []   # (nodeid, reason) of whole modules skipped while collecting, disallowed under CI


def pytest_collectreport(report):
    """A module skipped while collecting (a module-level importorskip): failing its collection would stop the
    whole run before any test, so under CI it is noted here and fails the run at the end instead."""
    if report.skipped and running_in_ci():
        reason = skip_reason(report)
        if not allowed_in_ci(reason):
            _collection_skips.append((report.nodeid, reason))


def pytest_sessionfinish(session, exitstatus):
    if _collection_skips and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _collection_skips:
        terminalreporter.section("skipped under CI (a failure)", sep="=", red=True, bold=True)
        for nodeid, reason in _collection_skips:
            terminalreporter.line(ci_skip_message(nodeid, reason), red=True)
