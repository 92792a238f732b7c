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


share_the_cores(os.environ, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)

collect_ignore = ["lessons/14_translate.ipynb", "lessons/15_experiments.ipynb"]
