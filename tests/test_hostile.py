"""`python -m autograder grade` under broken, slow and hostile submissions: one batch of lesson-03
submissions (tests/submissions/corpus.py: forged verdicts, borrowed answers, harm to classmates and to the
machine, resources), graded two at a time, where each gets the score and the reason it must get, the honest
ones exactly the grade they get alone, nothing outside the notebooks' folders changes, the machine keeps no
trace, and no process they started survives. Plus the pieces that need no kernel."""
import hashlib
import io
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from types import SimpleNamespace

import nbformat
import pytest

from autograder.grade import grade, grade_notebook, isolation, read_submission
from tests.submissions.corpus import (
    FULL,
    PORT,
    RUNNER_LISTENER,
    cases,
    harm_cases,
    other_lessons,
    second_red_team,
    write,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
CASES = {c.name: c for c in cases()}
SLEEPER = b"4242.4242"  # what hostile_forks_sleepers' children run: sleep 4242.4242


def sha(path):
    return (hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest() if pathlib.Path(path).exists()
            else None)


# the checkers, their batch's process, the notebooks' runners
GRADER = (b"autograder.checker", b"autograder.runner")


class Watch:
    """While a batch is graded: the peak memory (VmHWM, the most resident memory a process ever had) of each
    of the grader's own processes (this one, which runs the grade command; every process whose command line
    names autograder.checker or autograder.runner), sampled 5 times a second, and the most the file system of
    the batch's folder ever held beyond what it held at the start."""

    def __init__(self, folder):
        self.folder, self.peak, self.disk = folder, {}, 0
        self.start_used = shutil.disk_usage(folder).used
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sample(self):
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes()
                if int(entry.name) != os.getpid() and not any(g in cmd for g in GRADER):
                    continue
                status = (entry / "status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    kb = int(line.split()[1])
                    name = cmd.replace(b"\0", b" ").decode(errors="replace")[:120]
                    self.peak[name] = max(self.peak.get(name, 0), kb)
        self.disk = max(self.disk, shutil.disk_usage(self.folder).used - self.start_used)

    def run(self):
        while not self.done.wait(0.2):
            self.sample()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.sample()


def canary_state(folder: pathlib.Path, canary: pathlib.Path):
    """What must not change outside the notebooks: the folder's names, the canary's bytes, owner, group and
    mode."""
    st = os.lstat(canary)
    return sorted(os.listdir(folder)), sha(canary), (st.st_uid, st.st_gid, oct(st.st_mode))


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    isolated = isolation()
    chosen = [c for c in CASES.values() if isolated or not c.needs_isolation]
    paths = [write(c, folder) for c in chosen]
    victims = [folder / "honest_solved.ipynb", folder / "honest_released.ipynb"]
    canary = tmp_path_factory.mktemp("outside") / "canary.txt"
    canary.write_text("canary")
    os.chmod(canary, 0o600)
    if isolated:  # without namespaces these would really damage the files (the report would say so)
        harm = harm_cases([str(v) for v in victims], str(canary)) + second_red_team(str(canary.parent),
                                                                                    str(canary))
        chosen += harm
        paths += [write(c, folder) for c in harm]
    before = {str(p): sha(p) for p in victims + [canary]}
    # a Unix socket outside every jail, which kernels name in the links they swap for their ZeroMQ sockets:
    # whoever connects to it is recorded (the runner, root, must never)
    runner_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    runner_listener.bind(str(canary.parent / RUNNER_LISTENER))
    runner_listener.listen(64)
    heard: list = []

    def hear():
        while True:
            try:
                conn, _ = runner_listener.accept()
            except OSError:  # closed: the batch is over
                return
            with conn:
                conn.settimeout(2)
                try:
                    heard.append(conn.recv(64))
                except OSError:
                    heard.append(b"")
    threading.Thread(target=hear, daemon=True).start()
    outside = canary_state(canary.parent, canary)
    out = io.StringIO()
    listener = socket.socket()  # a service on the machine's loopback, which no kernel may reach
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", PORT))
    listener.listen(8)
    hostname = socket.gethostname()
    # the grade command's environment: a secret no kernel may read, and the cache folder that importing
    # torch._dynamo in a root process sets (a kernel that inherited it could not import torch._dynamo)
    private_cache = tmp_path_factory.mktemp("root_only")
    os.chmod(private_cache, 0o700)
    saved = {k: os.environ.get(k) for k in ("GRADER_SECRET", "TORCHINDUCTOR_CACHE_DIR")}
    os.environ.update(GRADER_SECRET="s3cret",
                      TORCHINDUCTOR_CACHE_DIR=str(private_cache / "torchinductor_root"))
    start = time.time()
    try:
        with Watch(tempfile.gettempdir()) as watch:
            report = grade(paths, folder / "report.json", timeout=300, stream=out, jobs=2, cell_timeout=15,
                           lesson="03_attention")
    finally:
        listener.close()
        try:
            runner_listener.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept
        except OSError:
            pass
        runner_listener.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.time() - start
    peaks = {g.decode(): max([kb >> 10 for n, kb in watch.peak.items() if g.decode() in n] or [0]) for g
             in GRADER}
    print(f"\n{len(paths)} notebooks graded in {seconds:.0f} s (jobs=2, isolation={isolated}); peak memory "
          f"(MB) {peaks}, the largest {max(watch.peak.values(), default=0) >> 10} MB (this process "
          f"included); disk grown by {watch.disk >> 20} MB\n{out.getvalue()}")
    return SimpleNamespace(cases={c.name: c for c in chosen}, report=report, seconds=seconds,
                           isolated=isolated,
                           hostname=hostname, watch=watch, outside=outside, canary=canary, heard=heard,
                           by_name={pathlib.Path(n["path"]).stem: n for n in report["notebooks"]},
                           before=before, paths=paths, json=folder / "report.json", text=out.getvalue())


def everything_said(r):
    return "\n".join([r["error"] or ""] + r["problems"] + [c["message"] for c in r["cells"]])


def assert_graded_as_expected(batch, name) -> dict:
    """The case's points, whether it is an error, and every phrase it must say, in the batch's report of
    it."""
    case = batch.cases.get(name)
    if case is None:
        pytest.skip("needs the kernel's namespaces (isolation), not available here")
    r = batch.by_name[name]
    points, error, says = case.expected(batch.isolated)
    said = everything_said(r)
    assert r["max_points"] == case.max_points, r
    assert r["points"] == points, f"{name}: {r['points']} instead of {points}\n{said}"
    assert (r["error"] is not None) == error, f"{name}: error {r['error']!r}"
    for phrase in says:
        assert phrase.lower() in said.lower(), f"{name}: the report does not say {phrase!r}:\n{said}"
    return r


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_submission_gets_its_score_and_reason(batch, name):
    r = assert_graded_as_expected(batch, name)
    assert r["points"] == sum(c["points"] for c in r["cells"])


def test_the_batch_report(batch):
    """Every notebook is in the report, in order, with the documented fields; the JSON file is the same."""
    assert [n["path"] for n in batch.report["notebooks"]] == [str(p) for p in batch.paths]
    assert json.loads(batch.json.read_text()) == json.loads(json.dumps(batch.report))
    for n in batch.report["notebooks"]:
        assert {"path", "points", "max_points", "error", "cells", "problems"} <= set(n)
        for c in n["cells"]:
            assert {"grade_id", "points", "max_points", "message"} <= set(c)
            assert 0 <= c["points"] <= c["max_points"]
    # with isolation the files are read-only for the kernels: a change can only come from elsewhere (an
    # editor during the test), and costs no notebook its points
    assert all("not a notebook" in t["by"] for t in batch.report["tampering"]) if batch.isolated \
        else batch.report["tampering"] == []
    assert batch.seconds < 900, f"the batch took {batch.seconds:.0f} s"


def test_honest_grades_are_the_ones_they_get_alone(batch, tmp_path, monkeypatch):
    """Graded alone, the honest submissions get what they got in the hostile batch: in a batch of their own
    (checkers forked by the batch's checker process), and one whose batch's checker process is gone (the
    runner starts a checker of its own, as for a single notebook). No checker outlives its batch."""
    names = ["honest_solved", "honest_mistake_softmax_over_queries"]
    # the batch's folder, which its checkers' command names (short: a Unix socket's path has at most 107
    # bytes)
    batches = tempfile.mkdtemp(prefix="hostile-")
    monkeypatch.setattr(tempfile, "tempdir", batches)
    alone = grade([write(CASES[n], tmp_path) for n in names], stream=io.StringIO(), cell_timeout=15)
    assert not running(batches.encode()), "a checker of the batch still runs"
    monkeypatch.undo()
    os.rmdir(batches)
    one = grade_notebook(write(CASES[names[0]], tmp_path), cell_timeout=15,
                         checker_server=str(tmp_path / "gone.sock"))
    for n, r in zip(names + names[:1], alone["notebooks"] + [one]):
        assert [c["points"] for c in r["cells"]] == [c["points"] for c in batch.by_name[n]["cells"]], (n, r)


def running(marker: bytes) -> list:
    """The processes whose command line contains marker."""
    found = []
    for entry in pathlib.Path("/proc").iterdir() if pathlib.Path("/proc").is_dir() else []:
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes():
                    found.append(entry.name)
            except OSError:
                pass
    return found


def test_no_process_survives(batch):
    left = running(SLEEPER)
    assert not left, f"processes forked by a graded notebook still run: {left}"


def test_files_outside_the_notebooks_folders_do_not_change(batch):
    for path, digest in batch.before.items():
        assert sha(path) == digest, f"{path} changed while grading"
    assert all(sha(p) for p in batch.paths), "a submission was deleted"


# ----------------------------------------------------------------------------- no kernel needed
def test_the_command_goes_on_past_unreadable_files(tmp_path):
    """Broken files need no kernel: the command reports each, exits 1, and writes the JSON."""
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    empty = tmp_path / "empty.ipynb"
    empty.write_bytes(b"")
    binary = tmp_path / "binary.ipynb"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    folder = tmp_path / "folder.ipynb"
    folder.mkdir()
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(bad), str(empty), str(binary),
                           str(folder), str(tmp_path / "missing.ipynb"), "--json", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(out.read_text())
    errors = [n["error"] for n in report["notebooks"]]
    assert len(errors) == 5 and all(errors), errors
    assert "not valid JSON" in errors[0] and "not valid JSON" in errors[1] and "UTF-8" in errors[2]
    assert "not a regular file" in errors[3] and "cannot read" in errors[4]


def test_the_lesson_not_the_submission_says_what_is_graded(tmp_path):
    """Deleted, copied and re-weighted graded cells: the lesson's cells and points count."""
    from tests.submissions.corpus import LESSON, _cell
    nb = nbformat.read(str(LESSON), as_version=4)
    nb.cells.remove(_cell(nb, "check_scaled_dot_product_attention"))
    _cell(nb, "check_softmax").metadata["nbgrader"]["points"] = 99
    nb.cells.append(nbformat.v4.new_code_cell("check(softmax)", metadata={"nbgrader": {"grade": True,
                    "grade_id": "check_softmax", "points": 50, "solution": False, "locked": True}}))
    path = tmp_path / "renamed_by_the_student.ipynb"
    nbformat.write(nb, str(path))
    _, expected, problems, lesson, error = read_submission(path)
    assert error is None and lesson == "03_attention"
    assert expected == [("check_softmax", "softmax", 3.0),
                        ("check_scaled_dot_product_attention", "scaled_dot_product_attention", 7.0)]
    assert any("appears 2 times" in p for p in problems)


def test_isolation_probe_is_cached_and_boolean():
    assert isolation() in (True, False) and isolation() == isolation()


def test_a_kernel_s_view_of_the_grader_has_no_fixtures(tmp_path):
    """The expected answers (fixtures/*.json) and how they are made (fixtures/*.py) stay out of a kernel's
    view."""
    from autograder.views import autograder_view
    view = autograder_view("01_tokenization", tmp_path / "autograder")
    assert (view / "checks" / "stage01_tokenization.py").exists() and not (view / "fixtures").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the jail's namespaces need root")
def test_isolated_kernels_see_a_read_only_course(tmp_path):
    """With isolation, a notebook cannot write the course's files (the write fails in the cell)."""
    if not isolation():
        pytest.skip("no namespaces here")
    from autograder.notebooks import solved
    from tests.submissions.corpus import LESSON, _insert, _lean
    target = ROOT / "solutions" / "attention.py"
    before = sha(target)
    nb = _insert(_lean(solved(LESSON)), "softmax", f"open({str(target)!r}, 'a').write('# damaged')")
    path = tmp_path / "writes_the_course.ipynb"
    nbformat.write(nb, str(path))
    r = grade([path], stream=io.StringIO(), cell_timeout=15)["notebooks"][0]
    assert sha(target) == before and r["points"] == FULL and r["error"] is None, r


def test_a_notebook_past_its_time_limit_keeps_what_was_graded(tmp_path):
    """Stopped at the notebook's limit: the graded cells already run keep their verdicts, the others
    say why they got nothing, and nothing it started survives."""
    from autograder.notebooks import solved
    from tests.submissions.corpus import LESSON, _insert, _lean
    nb = _insert(_lean(solved(LESSON)), "scaled_dot_product_attention",
                 "import os, time\nif os.fork() == 0:\n    os.execvp('sleep', ['sleep', "
                 "'4242.4243'])\ntime.sleep(10**6)")
    path = tmp_path / "stops.ipynb"
    nbformat.write(nb, str(path))
    r = grade([path], stream=io.StringIO(), timeout=45, cell_timeout=600)["notebooks"][0]
    assert "stopped after 45 s" in r["error"], r
    assert [c["points"] for c in r["cells"]] == [3.0, 0.0], r
    assert "stopped after 45 s" in r["cells"][1]["message"]
    assert not running(b"4242.4243")


def test_the_report_tells_students_apart():
    """One lesson from many students: the console report names each by its folder, not only the file name."""
    from autograder.grade import labels
    same = [f"/c/submitted/{s}/03_attention/03_attention.ipynb" for s in ("alice", "bob")]
    assert labels(same) == ["alice/03_attention/03_attention.ipynb", "bob/03_attention/03_attention.ipynb"]
    assert labels(["/x/a/01_tokenization.ipynb", "/y/03_attention.ipynb"]) == ["01_tokenization.ipynb",
                                                                               "03_attention.ipynb"]


def test_the_machine_keeps_no_trace(batch):
    """What harm_touches_the_machine tried (a file in /dev and /etc, the hostname, a shared-memory segment
    left behind) left nothing on the machine."""
    if not batch.isolated:
        pytest.skip("needs the kernel's namespaces (isolation), not available here")
    for path in ("/dev/autograder-was-here", "/etc/autograder-was-here", "/dev/shm/autograder_leak"):
        assert not os.path.exists(path), path
    assert socket.gethostname() == batch.hostname


def test_the_report_says_whether_the_grades_are_safe(batch):
    assert batch.report["safe"] is batch.isolated
    assert ("WARNING" in batch.text) is (not batch.isolated)


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="needs os.wait4")
def test_the_grader_s_memory_and_time_stay_bounded(tmp_path):
    """A 22 MB notebook of empty cells and one that prints 50 MB: the grade command, its checker and the
    kernel each stay under 1 GB, and the refused file is not run."""
    by_name = {c.name: c for c in cases()}
    paths = [write(by_name[n], tmp_path) for n in ("broken_huge_file", "honest_prints_a_flood")]
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "autograder", "grade", *map(str, paths), "--lesson",
                             "03_attention",
                             "--timeout", "120", "--json", str(tmp_path / "r.json")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.time() - start
    report = json.loads((tmp_path / "r.json").read_text())
    huge, flood = report["notebooks"]
    # refused before any kernel starts: seconds of reading the lessons' list on a loaded machine, not the
    # --timeout of 120 s that running its cells would take
    assert "more than 20 MB" in huge["error"] and huge["seconds"] < 60, huge
    assert flood["points"] == FULL and flood["error"] is None, flood
    assert usage.ru_maxrss < 1 << 20, f"a process of the grading took {usage.ru_maxrss >> 10} MB"
    assert seconds < 120 + 30


def test_the_kernel_environment_is_its_own():
    """The kernel keeps PATH, the locale and PYTHONPATH of the grade command's environment, drops the rest (a
    secret, a cache folder the kernel cannot write), and gets its own HOME, TMPDIR and compiler caches."""
    from autograder.jail import kernel_env
    parent = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONPATH": "/course",
              "GITHUB_TOKEN": "s3cret", "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root", "USER": "root",
              "HOME": "/root"}
    env = kernel_env({"home": "/k/home", "conn": "/k/conn", "token": "t", "threads": 2, "isolate": True},
                     parent)
    assert {k: env[k] for k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH")} == \
        {k: parent[k] for k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH")}
    assert "GITHUB_TOKEN" not in env and "s3cret" not in "".join(env.values())
    assert env["HOME"] == "/k/home" and env["TMPDIR"] == "/k/home/tmp" and env["USER"] == "nobody"
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith("/k/home/") and env["OMP_NUM_THREADS"] == "2"
    assert kernel_env({"home": "/k", "token": "t"}, parent)["USER"] == "root"  # not isolated: the same user


PARSE_RACE = """
import ast, gc, json, sys, threading, time
from autograder import views
text = open(views.__file__, encoding="utf-8").read()
sys.setswitchinterval(1e-6)   # threads switch inside ast.parse: in the finalizers that a collection runs there
gc.set_threshold(20, 1, 1)
class Cycle:
    def __del__(self):
        for _ in range(20):
            pass
def race(parse, seconds=1.5):
    errors, stop = [], time.time() + seconds
    def work():
        while time.time() < stop and not errors:
            for _ in range(50):
                c = Cycle(); c.me = c
            try:
                parse(text)
            except SystemError as e:
                errors.append(str(e))
    threads = [threading.Thread(target=work) for _ in range(3)]
    [t.start() for t in threads]; [t.join() for t in threads]
    return errors
print(json.dumps([race(ast.parse), race(views.parse)]))
"""  # noqa: E501  (a script run as written)


def test_the_views_parse_one_thread_at_a_time():
    """A batch builds its views in one thread per notebook; CPython 3.11's ast.parse, run by two threads at
    once, can fail with 'AST constructor recursion depth mismatch' (python/cpython#106905), which once graded
    a solved lesson 0. Under a load that makes bare ast.parse fail here within a second, views.parse never
    fails."""
    out = subprocess.run([sys.executable, "-c", PARSE_RACE], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    bare, locked = json.loads(out.stdout)
    print(f"bare ast.parse: {bare[:1] or 'no error on this Python'}")
    assert locked == [], f"views.parse failed under threads: {locked[0]}"


@pytest.mark.parametrize("imported,serves", [("", True), ("import autograder.checks._util", False),
                                             ("import solutions", False)])
def test_the_kernel_server_holds_nothing_of_the_course(tmp_path, imported, serves):
    """The batch's kernels inherit the kernel server's memory (autograder/jail.py, serve): it serves only if
    none of the checks, solutions/ or tests/ was imported into it, and says which one was."""
    control = tmp_path / "kernels.sock"
    code = f"{imported}\nimport sys\nfrom autograder.jail import serve\nserve(sys.argv[1])"
    proc = subprocess.Popen([sys.executable, "-c", code, str(control)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    first = proc.stdout.readline().strip()
    proc.stdin.close()  # the server exits when its input closes
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == (0 if serves else 70), err
    assert (first == "ready") is serves and control.exists() is serves, (first, err)
    if not serves:
        assert "the kernel server imported" in err and imported.split()[-1] in err, err


def test_a_kernel_the_server_cannot_jail_is_started_by_its_launcher(tmp_path):
    """Where the kernel server's fork fails to jail a kernel (here its drop to nobody raises), the kernel's
    launcher starts the kernel itself, jailed as without a server: the notebook is graded as usual."""
    if not isolation():
        pytest.skip("needs the kernel's namespaces (isolation), not available here")
    from autograder import forkserver
    control = str(tmp_path / "kernels.sock")
    broken = ("import sys, autograder.jail as jail\n"
              "def broken(libc):\n    raise PermissionError('no drop here')\n"
              "jail._drop_privileges = broken\njail.serve(sys.argv[1])")
    server = forkserver.start([sys.executable, "-c", broken, control], control,
                              {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
                              str(ROOT))
    assert server is not None
    try:
        path = write(CASES["honest_solved"], tmp_path)
        r = grade_notebook(path, timeout=300, lesson="03_attention", kernel_server=control)
    finally:
        forkserver.stop(server[0])
    assert r["error"] is None and r["points"] == 10.0, r


# ------------------------------------------------------------------------- the second red team (issue 36)
RED_TEAM = [c.name for c in second_red_team("/outside", "/outside/canary.txt")]


@pytest.mark.parametrize("name", RED_TEAM)
def test_each_attack_of_the_second_red_team_gets_its_score_and_reason(batch, name):
    """Links raced into the kernel's folders by helper processes, a folder 1500 deep, messages over the
    checker's limits, an output of 400 MB, files past the kernel's disk, shortcuts below the watch: each its
    points and note."""
    r = assert_graded_as_expected(batch, name)
    if not name.startswith("below_the_watch"):  # an honest line is never named for review
        assert not any("library-shortcut watch" in p for p in r["problems"]), r["problems"]


def test_nothing_outside_the_notebooks_changes_owner_mode_or_names(batch):
    """The links the helpers raced, the ones left for the cleanup and the deep folder's all point at the
    canary's folder: root (the checker, the grade command's cleanup) never followed one. Nothing new in that
    folder, the canary's bytes, owner, group and mode as they were."""
    assert canary_state(batch.canary.parent, batch.canary) == batch.outside


def test_no_link_in_the_connection_folder_decides_where_the_runner_connects(batch):
    """The kernels that swap their ZeroMQ socket files for links to a Unix socket outside the jail (again and
    again, or for good) and make the runner drop and connect again: the listener never hears from anyone (the
    runner connects by its own links to the sockets the kernel bound, kernel.seal_socket), the hostile
    notebooks keep what their answers earn with no error, and the honest classmates beside them theirs."""
    swapped = [n for n in RED_TEAM if n.startswith("zmq_sockets_swapped")]
    assert len(swapped) == 2
    for name in swapped:
        r = assert_graded_as_expected(batch, name)
        assert r["error"] is None and r["points"] == FULL, r
    assert batch.heard == [], ("the runner connected to the listener outside the jail "
                               f"{len(batch.heard)} times")
    for honest in ("honest_solved", "honest_released"):
        assert batch.by_name[honest]["error"] is None, batch.by_name[honest]
    assert batch.by_name["honest_solved"]["points"] == FULL


def test_an_interrupt_lands_on_the_kernel_whatever_pids_it_recycles(batch):
    """Helpers forked from the kernel fork and reap children while a check and a cell run past their time
    limits: the kernel is interrupted (its check's time-out said, its cell's note given, the cells after it
    run), and no other process is: no grader process failed (every notebook has its verdicts, the batch its
    report) and no classmate was interrupted (no note of an interruption, no KeyboardInterrupt, outside the
    cases that ran past a limit)."""
    for name in ("pids_recycled_around_a_check_s_time_limit", "pids_recycled_around_a_cell_s_time_limit"):
        r = assert_graded_as_expected(batch, name)
        assert r["error"] is None, r
    slow = {n for n, c in batch.cases.items() if n.startswith(("slow_", "pids_")) or "time limit"
            in " ".join(c.says)}
    for name, r in batch.by_name.items():
        # the classmates: honest, broken
        if name in slow or name not in batch.cases or batch.cases[name].hostile:
            continue
        said = everything_said(r)
        assert "KeyboardInterrupt" not in said and "was interrupted" not in said, f"{name}: {said}"
        assert "the grader failed" not in said and "stopped answering" not in said, f"{name}: {said}"


def test_a_call_s_gradients_are_given_once(batch):
    """After each call the kernel makes into the checker's objects (lesson 03's dropout module), 40 backward
    requests for it, of the right shapes (a million each) or not: the checker answers one, refuses the rest,
    and its own tensors are untouched (the dropout check compares what its module saw and gave with its own
    reference): full points; a notebook that got a second answer spoils its own answer."""
    for name in ("gradients_pumped_same", "gradients_pumped_wrong_shapes"):
        r = assert_graded_as_expected(batch, name)
        assert r["error"] is None and r["points"] == FULL, r


def test_the_grader_s_processes_stay_under_1_gb(batch):
    """The grade command, the checkers (and their batch's process) and the notebooks' runners, while the batch
    (a 100 MB message to the checker, a 400 MB output, 1.5 GB of files) is graded: each under 1 GB at its
    peak."""
    peaks = batch.watch.peak
    assert any("autograder.checker" in n for n in peaks) and any("autograder.runner" in n for n
                                                                 in peaks), peaks
    over = {n: kb >> 10 for n, kb in peaks.items() if kb >= 1 << 20}
    assert not over, f"over 1 GB (MB): {over}"


def test_the_kernels_disk_is_bounded(batch):
    """Three files of 1 GB written by one notebook: its folders are a tmpfs of 512 MB (autograder.kernel's
    SCRATCH_MB), so the grader's disk never holds them (two notebooks at a time: at most 1 GB of tmpfs, in
    memory)."""
    from autograder.kernel import SCRATCH_MB
    assert SCRATCH_MB <= 512
    if not batch.isolated:
        pytest.skip("needs the kernel's namespaces (isolation), not available here")
    assert batch.watch.disk < 1 << 30, f"the temporary folder's disk grew by {batch.watch.disk >> 20} MB"


@pytest.fixture(scope="module")
def others(tmp_path_factory):
    """Submissions of lessons 01, 05 and 12 (each in a folder of its own, named as the lesson), graded
    together."""
    if not isolation():
        pytest.skip("needs the kernel's namespaces (isolation), not available here")
    folder = tmp_path_factory.mktemp("other_lessons")
    canary = tmp_path_factory.mktemp("outside_others") / "canary.txt"
    canary.write_text("canary")
    os.chmod(canary, 0o600)
    chosen = other_lessons(str(canary.parent), str(canary))
    paths = []
    for lesson, case in chosen:
        (folder / case.name).mkdir()
        paths.append(folder / case.name / f"{lesson}.ipynb")
        nbformat.write(case.content, str(paths[-1]))
    outside = canary_state(canary.parent, canary)
    report = grade(paths, folder / "report.json", timeout=300, stream=io.StringIO(), jobs=2, cell_timeout=30)
    return SimpleNamespace(cases={c.name: c for _, c in chosen}, outside=outside, canary=canary,
                           by_name={pathlib.Path(n["path"]).parent.name: n for n in report["notebooks"]})


@pytest.mark.parametrize("name", [c.name for _, c in other_lessons("/outside", "/outside/canary.txt")])
def test_the_kernel_chooses_no_path_type_or_model_of_the_checker(others, name):
    """Lesson 01: the kernel names the canary's folder for the tokenizer's save (helpers race links there):
    the checker only hands the name back, the save fails in the kernel. Lesson 05: every tensor tagged as the
    checks' class of ids 'on another device': a CPU mask is still a CPU mask (2/3). Lesson 12: the checks'
    model factory rebound in the kernel, or what it builds zeroed: Adam(maximize=True) still loses 'moves the
    parameters as Adam would' (4/5)."""
    case, r = others.cases[name], others.by_name[name]
    said = everything_said(r)
    assert (r["points"], r["max_points"], r["error"]) == (case.points, case.max_points,
                                                          None), f"{name}: {said}"
    for phrase in case.says:
        assert phrase.lower() in said.lower(), f"{name}: the report does not say {phrase!r}:\n{said}"
    assert canary_state(others.canary.parent, others.canary) == others.outside


def test_the_isolation_probes_pass_from_a_virtual_environment_under_tmp(tmp_path):
    """The README's setup in a virtual environment under /tmp (the interpreter it was made from elsewhere):
    the jail shows both again at their paths, and the probes of classmates and of the machine count them as
    shown, and still nothing else (issue 38)."""
    if not isolation():
        pytest.skip("needs the kernel's namespaces (isolation), not available here")
    venv = pathlib.Path(tempfile.mkdtemp(prefix="venv-")) / "venv"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                       check=True, capture_output=True, timeout=120)
        python = venv / "bin" / "python"
        prefix = subprocess.run([str(python), "-c", "import sys; print(sys.prefix, sys.base_prefix)"],
                                capture_output=True, text=True, check=True).stdout.split()
        assert prefix[0].startswith(tempfile.gettempdir()) and prefix[0] != prefix[1], prefix
        names = ["harm_reaches_for_classmates", "harm_touches_the_machine"]
        paths = [write(CASES[n], tmp_path) for n in names]
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
        env.update(PYTHONPATH=str(ROOT), VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
        proc = subprocess.run([str(python), "-m", "autograder", "grade", *map(str, paths), "--lesson",
                               "03_attention",
                               "--jobs", "2", "--cell-timeout", "30", "--json", str(tmp_path / "r.json")],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        report = json.loads((tmp_path / "r.json").read_text())
        assert report["isolation"] is True, proc.stdout + proc.stderr
        for name, r in zip(names, report["notebooks"]):
            assert r["points"] == FULL and r["error"] is None, (name, everything_said(r))
    finally:
        shutil.rmtree(venv.parent, ignore_errors=True)
