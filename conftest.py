"""pytest at the repository's root: what nbval (--nbval-lax, in pyproject.toml) does not collect under
lessons/. Lessons 14 and 15 train a model for minutes; tests/test_translate_notebook.py and
tests/test_experiments_notebook.py run them with small parameters (papermill) and check what their prose
says."""
import os

import pytest


# Every process a pytest-xdist worker starts (nbval's and papermill's kernels, nbclient's, nbgrader's,
# training subprocesses) uses the worker's share of the cores, as the worker itself does (tests/conftest.py).
# Left to PyTorch's default, a child takes every core, and its OpenMP threads spin while the other worker
# holds a core: lesson 15's run took 330 s of CPU beside one busy core instead of 27 s with one thread
# (measured here, 2 cores, 2026-12-02). Set in the workers only: they inherit the controller's environment, so
# a value set there would pass for the user's own (which setdefault keeps).
def share_the_cores(environ, cores):
    """In a pytest-xdist worker's environment, OMP_NUM_THREADS and MKL_NUM_THREADS at its share of `cores`,
    unless already set; outside a worker (the controller, or no xdist) nothing changes."""
    if "PYTEST_XDIST_WORKER_COUNT" in environ:
        share = max(1, cores // int(environ["PYTEST_XDIST_WORKER_COUNT"]))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            environ.setdefault(name, str(share))


CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
share_the_cores(os.environ, CORES)

collect_ignore = ["lessons/14_translate.ipynb", "lessons/15_experiments.ipynb"]


# ----------------------------------------------------------- pytest-xdist: workers, work units, longest first
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml): one worker more than cores, as a worker often waits rather than computes (a
    notebook's time limit running out, kernels starting, a batch graded in processes of its own)."""
    return CORES + 1


#: `--dist loadfile` gives a whole file to one worker (a module's fixture runs once). A few files hold minutes
#: of tests that share no module fixture with each other: each such group is a work unit of its own, which
#: another worker may run at the same time. {file: {unit: [test names, or "name[" + the start of a parameter
#: id]]}}; a test not named here stays in its file's own unit. A module fixture used in two units would run
#: twice: collection stops with an error instead (check_units). test_lesson_claims' `runs` runs each lesson at
#: most once per worker, and only for the lessons its tests ask for, so its units are cut by lesson.
UNITS = {
    "tests/test_hostile.py": {  # the `batch` fixture's tests stay together in the file's own unit
        "alone": ["test_the_command_goes_on_past_unreadable_files",
                  "test_isolated_kernels_see_a_read_only_course",
                  "test_a_notebook_past_its_time_limit_keeps_what_was_graded",
                  "test_the_grader_s_memory_and_time_stay_bounded",
                  "test_the_kernel_server_holds_nothing_of_the_course",
                  "test_a_kernel_the_server_cannot_jail_is_started_by_its_launcher"],
        "others": ["test_the_kernel_chooses_no_path_type_or_model_of_the_checker",
                   "test_the_isolation_probes_pass_from_a_virtual_environment_under_tmp",
                   "test_the_views_parse_one_thread_at_a_time"],
    },
    "tests/test_lesson_claims.py": {
        "12-13": ["test_claim_holds_on_the_solved_lesson[12_training-",
                  "test_claim_holds_on_the_solved_lesson[13_decoding-"],
        "06-09": ["test_claim_holds_on_the_solved_lesson[06_feed_forward-",
                  "test_claim_holds_on_the_solved_lesson[09_decoder-"],
    },
    "tests/test_lessons.py": {"lesson-05": ["test_a_wrong_padding_mask_is_reported_and_lesson_05_goes_on"]},
    "tests/test_release.py": {
        "lesson-12": ["test_the_open_lessons_demonstrations_that_need_its_stubs_are_skipped_and_say_why"]},
    "tests/test_nbgrader.py": {"alone": ["test_importing_the_graded_stages_answer_earns_nothing",
                                         "test_a_rebuild_keeps_the_instructors_config"]},
}


def _names(test, name):
    """Whether `name` (a test's name, or "name[" + the start of a parameter id) names `test` (what follows the
    file in a node id)."""
    if name.endswith(("[", "-")):
        return test.startswith(name)
    return test == name or test.startswith(name + "[")


def work_unit(nodeid):
    """The work unit of a test: its file, or "file (unit)" for a test that UNITS names."""
    path, _, test = nodeid.partition("::")
    for unit, names in UNITS.get(path, {}).items():
        if any(_names(test, name) for name in names):
            return f"{path} ({unit})"
    return path


#: The units that take longest (each a minute or more of one worker, measured with --durations), started first
#: so that none of them is left running alone at the end; every other file keeps its place after them.
LONGEST_FIRST = ["tests/test_hostile.py", "tests/test_lessons.py", "tests/test_grade_batch.py",
                 "tests/test_hostile.py (alone)", "tests/test_release.py",
                 "tests/test_lesson_claims.py (12-13)",
                 "tests/test_lesson_claims.py (06-09)", "tests/test_hostile.py (others)",
                 "tests/test_lesson_claims.py", "tests/test_release.py (lesson-12)",
                 "tests/test_checks_stage10.py", "tests/test_nbgrader.py", "tests/test_translate_notebook.py",
                 "tests/test_nbgrader.py (alone)", "tests/test_checks_stage01.py",
                 "lessons/12_training.ipynb"]


def check_units(items):
    """A module-scoped fixture used by tests of two units of one file would run once in each: an error that
    says which, so that UNITS is mended (the test named with the fixture's other users)."""
    users = {}
    for item in items:
        for name, defs in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).items():
            if defs and defs[-1].scope == "module" and item.nodeid.split("::")[0] in UNITS:
                users.setdefault((item.nodeid.split("::")[0], name), set()).add(work_unit(item.nodeid))
    shared = {key: sorted(units) for key, units in users.items() if len(units) > 1}
    if shared:
        raise pytest.UsageError("conftest.py UNITS: a module fixture used in more than one work unit would "
                                f"run in each: {shared}; name its tests in one unit")


def pytest_collection_modifyitems(session, config, items):
    check_units(items)
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    # stable: the rest keep their order
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))


def _unit_scheduling(config, log):
    """`--dist loadfile`, a work unit (work_unit) in place of a file."""
    from xdist.scheduler import LoadFileScheduling

    class LoadUnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return work_unit(nodeid)
    return LoadUnitScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return _unit_scheduling(config, log) if config.getvalue("dist") == "loadfile" else None
