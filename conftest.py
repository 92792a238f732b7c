"""pytest at the repository's root: what nbval (--nbval-lax, in pyproject.toml) does not collect under lessons/.
Lessons 14 and 15 train a model for minutes; tests/test_translate_notebook.py and tests/test_experiments_notebook.py
run them with small parameters (papermill) and check what their prose says."""
import os

# Every process the tests start (nbval's and papermill's kernels, nbclient's, nbgrader's, training subprocesses) uses
# this worker's share of the cores, as the worker itself does (tests/conftest.py). Left to PyTorch's default, a
# child takes every core, and its OpenMP threads spin while the other worker holds a core: lesson 15's run took
# 330 s of CPU beside one busy core instead of 27 s with one thread (measured here, 2 cores, 2026-12-02).
_share = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
_share = max(1, _share // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1)))
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, str(_share))

collect_ignore = ["lessons/14_translate.ipynb", "lessons/15_experiments.ipynb"]
