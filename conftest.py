"""pytest at the repository's root: what nbval (--nbval-lax, in pyproject.toml) does not collect under lessons/.
Lessons 14 and 15 train a model for minutes; tests/test_translate_notebook.py and tests/test_experiments_notebook.py
run them with small parameters (papermill) and check what their prose says."""
import os

# Every process a pytest-xdist worker starts (nbval's and papermill's kernels, nbclient's, nbgrader's, training
# subprocesses) uses the worker's share of the cores, as the worker itself does (tests/conftest.py). Left to
# PyTorch's default, a child takes every core, and its OpenMP threads spin while the other worker holds a core:
# lesson 15's run took 330 s of CPU beside one busy core instead of 27 s with one thread (measured here, 2 cores,
# 2026-12-02). Set in the workers only: they inherit the controller's environment, so a value set there would
# pass for the user's own (which setdefault keeps).
def share_the_cores(environ, cores):
    """In a pytest-xdist worker's environment, OMP_NUM_THREADS and MKL_NUM_THREADS at its share of `cores`, unless
    already set; outside a worker (the controller, or no xdist) nothing changes."""
    if "PYTEST_XDIST_WORKER_COUNT" in environ:
        share = max(1, cores // int(environ["PYTEST_XDIST_WORKER_COUNT"]))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            environ.setdefault(name, str(share))


CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
share_the_cores(os.environ, CORES)

collect_ignore = ["lessons/14_translate.ipynb", "lessons/15_experiments.ipynb"]


# ---------------------------------------------------------------- pytest-xdist: workers, and the longest files first
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml): one worker more than cores, as a worker often waits rather than computes (a
    notebook's time limit running out, kernels starting, a batch graded in processes of its own)."""
    return CORES + 1


#: The files that take longest (each a minute or more of one worker, measured with --durations), started first so
#: that none of them is left running alone at the end; every other file keeps its place after them.
LONGEST_FIRST = ["tests/test_hostile.py", "tests/test_lessons.py", "tests/test_release.py",
                 "tests/test_grade_batch.py", "tests/test_lesson_claims.py",
                 "tests/test_checks_stage10.py", "tests/test_nbgrader.py", "tests/test_translate_notebook.py",
                 "tests/test_checks_stage01.py", "lessons/12_training.ipynb"]


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order
