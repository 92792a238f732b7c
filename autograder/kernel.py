"""Running one submission for `python -m autograder grade` (autograder/grade.py): `grade_notebook`.

The notebook read by autograder/submission.py runs in a fresh kernel started by autograder.jail (its own
namespaces, as `nobody`, on a read-only file system with its scratch and connection folders only, the lesson's
own stage of `solutions` cleared), with a time limit per cell and per notebook. Each graded cell is replaced by
a call to autograder/serve.py, which connects to the checker (autograder/checker.py), a process started before
the kernel that holds the checks and never runs the notebook's code: it calls the learner's objects across the
socket (autograder/remote.py) and keeps its verdicts in a file that only the grade command reads. Points come
only from the checker's file: the outputs stored in the submission, what its cells print, and the points its
metadata claims count for nothing. Afterwards every process the notebook started is killed.

The kernel is driven by a child process of its own (`python -m autograder.kernel SPEC`, `_execute`), which
keeps the notebook's deadline and reports how the run ended.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

if __name__ == "__main__":
    # This module's own child process (driving the kernel with nbclient) validates notebooks and never an IRI:
    # without this, importing nbformat imports jsonschema's optional IRI checker, rfc3987_syntax, which builds its
    # grammar at import time (1.4 s of the child's start here; jsonschema issue #1428). jsonschema skips that format
    # checker when the import fails, which a None in sys.modules makes it do.
    sys.modules.setdefault("rfc3987_syntax", None)

import nbformat

from .outcomes import Ending, name_lines
from .records import CellResult, CheckerSpec, JailSpec, NameVerdict, NotebookResult, RunSpec, RunStatus
from .submission import _grade_id, course_pythonpath, expected_cells, lesson_of, read_submission

NOTEBOOK_TIMEOUT = 600    # seconds for a whole notebook
CELL_TIMEOUT = 180        # seconds for one cell
STOP_GRACE = 20          # seconds the notebook's own process gets, past the time limit, to stop and report
MEMORY_GB = float(os.environ.get("AUTOGRADER_MEMORY_GB", 4))  # the kernel's address space (RLIMIT_AS)
FILE_SIZE = 1 << 30       # the largest file the kernel may write (RLIMIT_FSIZE)
# what the kernel may write in all, with isolation: its working folder, HOME and connection folder are on a tmpfs of
# this size (three files of 1 GB, each under FILE_SIZE, filled the grader's disk before)
SCRATCH_MB = int(os.environ.get("AUTOGRADER_SCRATCH_MB", 512))
RUNNER_MEMORY = 1536 << 20  # the address space of the process that talks to the kernel (nbclient), RLIMIT_AS
OUTPUT_MESSAGE = 32 << 20  # the largest message the runner takes from the kernel: a larger one is dropped unread
ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNEL_NAME = "autograder-jail"
_ISOLATION_LOCK = threading.Lock()


# -------------------------------------------------------------------------- the notebook to run
def prepare(nb, expected, problems, socket_path: str) -> tuple[object, dict[str, str], list]:
    """The notebook to execute: the submission's code cells with each graded cell replaced by a call to
    the checker (other copies of graded cells dropped), and the graded cells it lacks at the end. Returns
    it, {cell nonce: contract name}, and for each of its cells the submission's cell number (1-based; None
    for the cells the grader added)."""
    out = nbformat.v4.new_notebook()
    out.metadata = {"kernelspec": {"name": KERNEL_NAME, "display_name": "autograder", "language": "python"},
                    "language_info": {"name": "python"}}
    origin: list = []
    names = {gid: (name, points) for gid, name, points in expected}
    nonces: dict[str, str] = {}
    done: set = set()

    def grader(gid):
        nonce = secrets.token_hex(16)
        nonces[nonce] = names[gid][0]
        done.add(gid)
        return nbformat.v4.new_code_cell(f"# the autograder grades {names[gid][0]} here, from outside this kernel\n"
                                         f"__import__('autograder.serve', fromlist=['grade']).grade("
                                         f"{names[gid][0]!r}, {nonce!r}, {socket_path!r})")
    for number, cell in enumerate(nb.cells, 1):
        gid = _grade_id(cell)
        is_check = bool(gid and (gid in names or (gid.startswith("check_") and
                                                   cell.get("metadata", {}).get("nbgrader", {}).get("grade"))))
        if is_check:
            if gid in names and gid not in done and cell.cell_type == "code":
                if cell.source.strip() != f"check({names[gid][0]})":
                    problems.append(f"graded cell {gid} was edited: graded as in the lesson")
                out.cells.append(grader(gid))
                origin.append(number)
            continue
        if cell.cell_type == "code":
            out.cells.append(nbformat.v4.new_code_cell(cell.source))
            origin.append(number)
    for gid, _name, _ in expected:
        if gid not in done:
            problems.append(f"graded cell {gid} is missing (deleted, or not a code cell): graded at the end")
            out.cells.append(grader(gid))
            origin.append(None)
    return out, nonces, origin


# ----------------------------------------------------------------------- the child that runs it
def _execute(spec_path: str) -> None:
    """Child process: start the checker, then execute the prepared notebook with the jailed kernel; write its
    status (records.RunStatus). Outputs are dropped as they come (nothing is read from them); a message from the
    kernel over OUTPUT_MESSAGE is dropped by ZeroMQ before it is read, and this process's address space is
    RUNNER_MEMORY (soft: the processes it starts set their own). The checker asks it to interrupt the kernel
    ("interrupt" on the checker's connection or output): it signals the kernel's launcher that it started, never a
    pid from elsewhere."""
    runner = _Runner(RunSpec.read(spec_path))
    client_class = _client_class(runner)
    spec = runner.spec
    signal.signal(signal.SIGTERM, runner.stop)
    log = open(spec.log, "wb")
    try:
        _start_checker(runner, log)
        nb = nbformat.read(spec.prepared, as_version=4)
        # each cell may run until its own limit or the notebook's, whichever comes first: at the notebook's the
        # kernel is interrupted, and the next cell does not start
        runner.client = client_class(
            nb, timeout_func=lambda cell: max(1.0, min(spec.cell_timeout, spec.deadline - time.time())),
            allow_errors=True, interrupt_on_timeout=True, kernel_name=KERNEL_NAME, startup_timeout=120,
            resources={"metadata": {"path": spec.work}})
        try:
            runner.client.execute(cwd=spec.work, stdout=subprocess.DEVNULL, stderr=log)
        finally:
            runner.status.interrupted = [i for i in runner.client.interrupted if isinstance(i, int)]
    except BaseException as e:  # noqa: BLE001  (reported to the parent)
        runner.failed(e)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _kill_token(os.environ.get("AUTOGRADER_TOKEN", ""))
        _end_checker(runner)
        log.close()
        runner.status.write(spec.status)
        os._exit(0)  # now, even if a thread of the kernel client is still waiting on the dead kernel


class _Stop(BaseException):
    """The notebook's time is up (in the runner)."""


class _Runner:
    """The runner's state: its spec, the status it reports, why it stopped, its kernel client and its checker."""

    def __init__(self, spec: RunSpec):
        self.spec, self.status = spec, RunStatus()
        self.stopped: list = []  # the reason, once the notebook's time is up
        self.client = self.checker = self.connection = self.pidfd = None

    def time_up(self) -> bool:
        if not self.stopped and time.time() >= self.spec.deadline:
            self.stopped.append(f"stopped after {self.spec.timeout:g} s (the notebook's time limit)")
        return bool(self.stopped)

    def stop(self, signum, frame):
        # the parent's fallback; an asyncio signal handler installed by the kernel client can replace this
        # one (seen with IPython 9's stack), which is why the deadline is kept here, by the cells' timeouts
        self.stopped.append(f"stopped after {self.spec.timeout:g} s (the notebook's time limit)")
        raise _Stop(self.stopped[0])

    def kernel_gone(self) -> bool:
        """Whether the kernel's launcher (this process's child) has exited: its sockets will never come."""
        process = getattr(getattr(getattr(self.client, "km", None), "provisioner", None), "process", None)
        return process is not None and process.poll() is not None

    def relay(self, readline) -> None:
        """The checker's requests to interrupt the kernel (a check past its time limit), passed to the client."""
        try:
            for line in iter(readline, b""):
                if line.strip() in (b"interrupt", "interrupt") and self.client is not None:
                    self.client.interrupt()
                if not line:
                    break
        except (OSError, ValueError):
            pass

    def failed(self, e: BaseException) -> None:
        """The status of a run that `e` stopped: the error, the cell it was in, how it ended."""
        status = self.status
        status.cell = getattr(self.client, "current", None)
        status.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        status.stopped = isinstance(e, _Stop) or bool(self.stopped)
        status.ending = _ending(e, status).value


def _client_class(runner: _Runner):
    """nbclient's NotebookClient as the runner drives it: over the sealed Unix sockets (seal_socket), messages over
    OUTPUT_MESSAGE dropped, the deadline kept before each cell, errors kept for the report, interruptions noted."""
    from nbclient import NotebookClient
    manager_class, client_factory = _sealed_classes(runner)
    spec, status = runner.spec, runner.status

    class Client(NotebookClient):
        current = None
        interrupted: list = []

        def create_kernel_manager(self):  # nbclient's own (asynchronous) manager, over Unix sockets
            self.km = manager_class(kernel_name=KERNEL_NAME, transport="ipc", ip=spec.ipc,
                                    connection_file=spec.connection_file, config=self.config)
            self.km.client_factory = client_factory
            return self.km

        def interrupt(self) -> None:
            _interrupt_kernel(getattr(getattr(self, "km", None), "provisioner", None))

        async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
            if runner.time_up():  # no cell starts after the time limit
                raise _Stop(runner.stopped[0])
            self.current = cell_index
            status.reached = cell_index
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)

        def output(self, outs, msg, display_id, cell_index):
            if msg.get("msg_type") == "error" and len(status.errors) < 200:  # what the cell raised, for the report
                status.errors.setdefault(str(cell_index), _error_of(msg.get("content")))
            return None

        async def _async_handle_timeout(self, timeout, cell=None):
            self.interrupted.append(self.current)
            return await super()._async_handle_timeout(timeout, cell)
    return Client


def _sealed_classes(runner: _Runner) -> tuple[type, type]:
    """(kernel manager, kernel client) classes whose ZeroMQ endpoints are the hard links in the runner's `sealed`
    folder (on the kernel's tmpfs, the runner's own) of the sockets the kernel bound in its connection folder, never
    those names (seal_socket); the client's context drops a message over OUTPUT_MESSAGE unread. The runner's address
    space is limited to RUNNER_MEMORY once the libraries are imported."""
    import zmq
    import zmq.asyncio
    from jupyter_client.asynchronous import AsyncKernelClient
    from traitlets import default

    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (RUNNER_MEMORY if hard == resource.RLIM_INFINITY else
                                                min(RUNNER_MEMORY, hard), hard))
    except (ValueError, OSError):
        pass

    from jupyter_client.manager import AsyncKernelManager
    sealed = runner.spec.sealed

    class Sealed:
        def _make_url(self, channel: str) -> str:
            if self.transport != "ipc":
                return super()._make_url(channel)
            port = getattr(self, f"{channel}_port")
            return "ipc://" + seal_socket(f"{self.ip}-{port}", sealed, gone=runner.kernel_gone)

    class Manager(Sealed, AsyncKernelManager):
        pass

    class BoundedClient(Sealed, AsyncKernelClient):
        @default("context")
        def _context_default(self):
            self._created_context = True
            context = zmq.asyncio.Context()
            context.setsockopt(zmq.MAXMSGSIZE, OUTPUT_MESSAGE)  # every socket to the kernel: larger ones dropped
            return context
    return Manager, BoundedClient


def _interrupt_kernel(provisioner) -> None:
    """SIGINT to the kernel's process group, as jupyter_client's interrupt does, while its launcher (this process's
    child, not yet reaped: its pid and group cannot be another's) runs."""
    process, pgid = getattr(provisioner, "process", None), getattr(provisioner, "pgid", None)
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(pgid, signal.SIGINT) if pgid else process.send_signal(signal.SIGINT)
    except OSError:
        pass


def _start_checker(runner: _Runner, log) -> None:
    """The notebook's checker: forked by the batch's checker process (autograder.checker.serve) where there is one,
    else started here; its requests to interrupt the kernel relayed (runner.relay)."""
    spec = runner.spec
    if spec.checker_server:
        from .checker import connect
        try:
            runner.connection, pid = connect(spec.checker_server, spec.checker, spec.log)
        except (OSError, RuntimeError) as e:  # that process is gone: a checker of this notebook's own
            log.write(f"autograder.kernel: no forked checker ({e}); starting one\n".encode())
            log.flush()
        else:
            try:
                runner.pidfd = os.pidfd_open(pid)
            except (AttributeError, OSError):  # an older kernel or Python: closing the connection ends it
                pass
            reader = runner.connection.makefile("rb")
            threading.Thread(target=runner.relay, args=(reader.readline,), daemon=True).start()
    if runner.connection is None:
        runner.checker = subprocess.Popen([sys.executable, "-m", "autograder.checker", spec.checker],
                                          stdout=subprocess.PIPE, stderr=log, cwd=spec.private, text=True)
        if (runner.checker.stdout.readline() or "").strip() != "listening":
            raise RuntimeError("the checker did not start")
        threading.Thread(target=runner.relay, args=(runner.checker.stdout.readline,), daemon=True).start()


def _end_checker(runner: _Runner) -> None:
    """The checker killed: the one started here, or the forked one (it exits when its connection closes; killed
    now, to be sure, by its pidfd, which names that process and never another that reuses its number)."""
    if runner.checker is not None:
        runner.checker.kill()
        runner.checker.wait()
    if runner.connection is not None:
        if runner.pidfd is not None:
            try:
                signal.pidfd_send_signal(runner.pidfd, signal.SIGKILL)
            except OSError:
                pass
            os.close(runner.pidfd)
        runner.connection.close()


def _ending(e: BaseException, status: RunStatus) -> Ending:
    """How the run ended, from what stopped it (in the runner, where its type is known)."""
    from nbclient.exceptions import DeadKernelError
    if status.stopped:
        return Ending.STOPPED
    # jupyter_client says a kernel that died while starting with a plain RuntimeError ("Kernel died before replying
    # to kernel_info"): the library's own words, the one message read here
    if isinstance(e, DeadKernelError) or (isinstance(e, RuntimeError) and "died" in status.error.lower()):
        return Ending.DEAD_KERNEL
    if status.cell is None:
        return Ending.NO_START
    if any("Timeout" in kind.__name__ for kind in type(e).__mro__):
        return Ending.CELL_TIMEOUT
    return Ending.OTHER


def seal_socket(source: str, sealed: str, gone=lambda: False, timeout: float = 120.0) -> str:
    """The path the runner connects to for the kernel's socket `source` (in the kernel's connection folder, which the
    kernel can write): a hard link to it in `sealed`, the runner's own folder (the grading user's, 0700, never shown to
    the kernel) on the same file system, made the first time, once the kernel has bound it. ZeroMQ connects again by
    this path after a drop: it names the socket's inode, whatever the kernel puts at `source` later (a link to a host
    socket, another file, nothing). The link is made without following a link at `source` (linkat without
    AT_SYMLINK_FOLLOW), can only name a file of the kernel's own file system (its tmpfs: what it holds the kernel
    made), and must be a socket, or the run stops. Waits for `source` up to `timeout` seconds, or until gone()."""
    import stat
    target = os.path.join(sealed, os.path.basename(source))
    if not os.path.lexists(target):
        deadline = time.time() + timeout
        while not os.path.lexists(source):
            if gone() or time.time() > deadline:
                raise RuntimeError(f"the kernel did not open its socket {os.path.basename(source)}")
            time.sleep(0.02)
        os.link(source, target, follow_symlinks=False)
        made, home = os.lstat(target), os.stat(os.path.dirname(source))
        if not stat.S_ISSOCK(made.st_mode) or made.st_dev != home.st_dev:
            os.unlink(target)
            raise RuntimeError(f"the kernel's {os.path.basename(source)} is not a socket")
    return target


def _error_of(content) -> dict:
    """{"ename", "evalue", "line"} of an error a cell raised, from the kernel's message (the notebook's side: read as
    plain text, one line each, cut short). "line": the cell's line that raised (a SyntaxError's own, else the
    traceback's innermost line of the cell), or None."""
    import re
    content = content if isinstance(content, dict) else {}
    def plain(value, n: int) -> str:  # without colours, on one line
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(value or "")[:20000])
        return re.sub(r"[\x00-\x1f\x7f]+", " ", text)[:n].strip()
    ename, evalue = plain(content.get("ename"), 100), plain(content.get("evalue"), 300)
    line = None
    if ename in ("SyntaxError", "IndentationError", "TabError"):
        m = re.search(r" \((?:[^()]*), line (\d+)\)$", evalue)
        if m:
            evalue, line = evalue[:m.start()], int(m.group(1))
    else:
        frames = [plain(t, 2000) for t in content.get("traceback") or [] if isinstance(t, str)][:50]
        cell = [t for t in frames if t.startswith("Cell In[")]  # IPython's "Cell In[3], line 2": the cell's frame
        m = re.match(r"Cell In\[\d*\], line (\d+)", cell[0]) if cell else None
        line = int(m.group(1)) if m else None
    return {"ename": ename, "evalue": evalue, "line": line}


# ---------------------------------------------------------------------------- processes, files
def _kill_token(token: str) -> int:
    """Kill every process whose environment carries the notebook's token (but this one); how many."""
    if not token:
        return 0
    needle = f"AUTOGRADER_TOKEN={token}".encode()
    killed = 0
    for entry in pathlib.Path("/proc").iterdir() if pathlib.Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


_ISOLATION: list = []


def isolation() -> bool:
    """Whether kernels get their own namespaces with read-only file systems (probed once; set
    AUTOGRADER_ISOLATION=off to do without)."""
    with _ISOLATION_LOCK:
        if not _ISOLATION:
            from .jail import isolation_available
            _ISOLATION.append(os.environ.get("AUTOGRADER_ISOLATION", "auto") != "off" and isolation_available())
        return _ISOLATION[0]


def keep_files() -> bool:
    """Whether a notebook's and a batch's working files are kept, to debug the grader (AUTOGRADER_KEEP set)."""
    return bool(os.environ.get("AUTOGRADER_KEEP"))


# ------------------------------------------------------------------------------------- grading
def _private_dirs(tmp: pathlib.Path, isolated: bool) -> dict[str, pathlib.Path]:
    """The folders of one notebook: `private` (the grade command's and the checker's, never shown to the kernel;
    its `tmp` is the checker's temporary folder), `sock` (the checker's socket: shown to the kernel, read-only),
    and, in `scratch` (with isolation a tmpfs of SCRATCH_MB, made before the kernel exists), the kernel's `work`,
    `home` and `conn` (its connection folder), which are the kernel user's, and `sealed` (the grading user's, 0700: the
    runner's links to the kernel's sockets, seal_socket). Nothing here is made, changed or removed through a path the
    kernel can write while it runs."""
    dirs = {name: tmp / name for name in ("private", "sock", "scratch")}
    for d in dirs.values():
        d.mkdir()
    (dirs["private"] / "tmp").mkdir()
    os.chmod(dirs["private"], 0o700)
    os.chmod(dirs["sock"], 0o755)
    if isolated:
        from .jail import mount_scratch
        if not mount_scratch(str(dirs["scratch"]), SCRATCH_MB):
            raise RuntimeError("the kernel's folders could not be mounted")
    for name in ("work", "home", "conn"):
        dirs[name] = dirs["scratch"] / name
        dirs[name].mkdir()
    dirs["sealed"] = dirs["scratch"] / "sealed"  # the runner's links to the kernel's sockets (seal_socket)
    dirs["sealed"].mkdir()
    os.chmod(dirs["sealed"], 0o700)
    for sub in ("tmp", ".cache", ".config", ".ipython", ".local"):
        (dirs["home"] / sub).mkdir()
    if isolated:
        from .jail import NOBODY
        for name in ("work", "home", "conn"):
            for p in [dirs[name], *dirs[name].rglob("*")]:
                os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
    return dirs


def _remove(tmp: pathlib.Path, problems: list) -> None:
    """Remove one notebook's folders: the kernel's tmpfs detached, the rest removed without following a link or
    recursing (jail.remove_tree); what could not be removed is said in the notebook's problems, never raised."""
    from .jail import remove_tree, unmount
    try:
        scratch = tmp / "scratch"
        if os.path.ismount(scratch):
            unmount(str(scratch))
        left = remove_tree(tmp)
    except Exception as e:  # noqa: BLE001
        left = [f"{type(e).__name__}: {e}"]
    if left:
        problems.append(f"the grader could not remove all of the notebook's working files: {left[0][:200]}")


def _results(path: pathlib.Path) -> dict[str, NameVerdict]:
    """{cell nonce: the checker's verdict} from its results file (the first of each cell)."""
    out: dict = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and isinstance(r.get("cell"), str):
            out.setdefault(r["cell"], NameVerdict.from_json(r))
    return out


CANCELLED = "stopped: the batch was interrupted"


class _Cancelled(Exception):
    pass


class _CellRuns:
    """How the submission's cells ran, to say truly why a graded name was not there: which cells define it (by their
    text, read by autograder/submission.py, or as the lesson's answer cell of that name), what each raised (the
    runner's "errors", by the prepared notebook's cell), how far the run got ("reached")."""

    def __init__(self, nb, prepared, origin: list, nonces: dict, status: RunStatus):
        self.origin = origin
        self.number_to_index = {n: i for i, n in enumerate(origin) if n}
        self.cells = list(nb.cells) if nb is not None else []
        self.errors = {}
        for key, value in (status.errors or {}).items():
            if str(key).isdigit() and isinstance(value, dict) and int(key) < len(origin) and origin[int(key)]:
                self.errors[origin[int(key)]] = value
        self.reached = status.reached if isinstance(status.reached, int) else None
        self.graded_at = {}  # name -> index of its grader cell in the prepared notebook
        for index, cell in enumerate(prepared.cells if prepared is not None else []):
            for nonce, name in nonces.items():
                if nonce in cell.source:
                    self.graded_at.setdefault(name, index)

    def defining(self, name: str) -> list[int]:
        """The numbers (1-based) of the submission's code cells that define `name`."""
        out = []
        for number, cell in enumerate(self.cells, 1):
            meta = cell.get("metadata", {})
            facts = meta.get("autograder") or {}
            if cell.get("cell_type") == "code" and (name in (facts.get("defines") or []) or
                                                    (meta.get("nbgrader") or {}).get("grade_id") == name):
                out.append(number)
        return out

    @staticmethod
    def raised(error: dict) -> str:
        line = f" at line {error['line']}" if isinstance(error.get("line"), int) else ""
        what = f"{error.get('ename') or 'an error'}" + (f": {error['evalue']}" if error.get("evalue") else "")
        if error.get("ename") in ("SyntaxError", "IndentationError", "TabError"):
            return f"has a {error['ename']}{line} ({error.get('evalue') or 'invalid syntax'}), so none of it ran"
        return f"raised {what}{line}"

    def why_undefined(self, name: str, stopped: str | None) -> str:
        """Why `name` was not defined when its graded cell ran, as far as the run shows."""
        defining = self.defining(name)
        if not defining:
            return (f"no cell of the notebook defines it (no `def {name}`, `class {name}` or `{name} = ...`: renamed, "
                    "or its cell deleted?)")
        graded = self.graded_at.get(name)
        for number in defining:
            if number in self.errors:
                return f"cell {number}, which defines it, {self.raised(self.errors[number])}"
        before = [n for n in defining if graded is None or self.number_to_index.get(n, -1) < graded]
        if not before:
            return f"cell {defining[0]}, which defines it, comes after its graded cell: it had not run yet"
        number = before[-1]
        index = self.number_to_index.get(number)
        if index is None or self.reached is None or index > self.reached:
            return f"cell {number}, which defines it, did not run" + (f" ({stopped})" if stopped else "")
        return (f"cell {number} ran without an error but had not defined it when its graded cell ran (inside a "
                "condition that was false, or deleted or renamed by a later cell?)")

    def notes(self, name: str) -> list[str]:
        """A line for each cell that defines `name` and raised: what was graded is what the cells before left."""
        return [f"note: cell {n}, which defines {name}, {self.raised(self.errors[n])}"
                for n in self.defining(name) if n in self.errors]


class Cancel:
    """A batch's stop (grade.py calls it on SIGINT or SIGTERM): once called, no notebook's run starts, and each run
    under way is stopped (its runner gets SIGTERM: it stops the kernel and the checker, then reports)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: set = set()
        self.requested = False

    def start(self, *args, **kwargs) -> subprocess.Popen | None:
        """subprocess.Popen(*args, **kwargs) (in a session of its own), or None once the batch is stopped."""
        with self._lock:
            if self.requested:
                return None
            proc = subprocess.Popen(*args, **kwargs)
            self._running.add(proc)
            return proc

    def finished(self, proc) -> None:
        with self._lock:
            self._running.discard(proc)

    def __call__(self) -> None:
        with self._lock:
            self.requested = True
            running = list(self._running)
        for proc in running:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass


@dataclasses.dataclass
class _Run:
    """One notebook's run, as grade_notebook's steps fill it in: the options it was given, then what each step made."""
    timeout: float
    cell_timeout: float
    memory_gb: float
    threads: int
    protected: list
    isolated: bool
    checker_server: str | None
    kernel_server: str | None
    start: float
    token: str = dataclasses.field(default_factory=lambda: secrets.token_hex(16))
    prepared: object = None
    nonces: dict = dataclasses.field(default_factory=dict)
    origin: list = dataclasses.field(default_factory=list)
    status: RunStatus = dataclasses.field(default_factory=RunStatus)
    verdicts: dict = dataclasses.field(default_factory=dict)


def grade_notebook(path: str | os.PathLike, timeout: float = NOTEBOOK_TIMEOUT, **options) -> dict:
    """Grade one notebook: {"path", "points", "max_points", "error", "problems", "cells": [{"grade_id",
    "points", "max_points", "message"}], "seconds", "isolated", "lesson"}, run_notebook's record as JSON."""
    return run_notebook(path, timeout, **options).to_json()


def run_notebook(path: str | os.PathLike, timeout: float = NOTEBOOK_TIMEOUT, *, cell_timeout: float = CELL_TIMEOUT,
                 memory_gb: float = MEMORY_GB, threads: int | None = None, protected: list | None = None,
                 lesson: str | None = None, batch: str | os.PathLike | None = None,
                 checker_server: str | None = None, kernel_server: str | None = None,
                 cancel: Cancel | None = None, isolated: bool | None = None,
                 keep: bool | None = None) -> NotebookResult:
    """Grade one notebook (records.NotebookResult). `lesson`: the assignment (else taken from the file's or folder's
    name); `batch`: the folder of the batch's working files (a new one by default), which the kernel never sees;
    `checker_server`: the socket of the batch's checker process (autograder.checker.serve), which forks this
    notebook's checker (else one is started for it); `kernel_server`: the socket of the batch's kernel server
    (autograder.jail.serve), which forks this notebook's kernel when it is isolated (else its launcher starts it);
    `cancel`: the batch's stop (a run it stopped is reported with the error "stopped: the batch was interrupted");
    `isolated`, `keep`: the batch's isolation() and keep_files(), decided once for it (else here).

    The steps, in order: read (the submission), review (its cells, before they run), prepare (the notebook to
    run), views and specs (what each child reads), run (the runner, the kernel and the checker), collect (each
    graded cell's points from the checker's verdicts)."""
    isolated = isolation() if isolated is None else isolated
    run = _Run(timeout, cell_timeout, memory_gb, threads or 1, list(protected or []), isolated, checker_server,
               kernel_server, time.time())
    result = NotebookResult(path=str(pathlib.Path(path)), isolated=run.isolated)
    nb, expected = _read(pathlib.Path(path), lesson, result)
    if result.error:
        result.cells = [CellResult(g, 0.0, p, result.error) for g, _, p in expected]
        result.seconds = round(time.time() - run.start, 1)
        return result
    _review(nb, result.problems)
    own = batch is None
    batch = pathlib.Path(tempfile.mkdtemp(prefix="autograder-")) if own else pathlib.Path(batch)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="nb-", dir=batch)).resolve()
    os.chmod(tmp, 0o711)
    try:
        result.error = _run(nb, expected, result, run, tmp, batch, cancel)
    except _Cancelled:
        pass
    finally:
        if not (keep_files() if keep is None else keep):  # the working files, kept to debug the grader
            _remove(tmp, result.problems)
            if own:
                _remove(batch, result.problems)
    if cancel is not None and cancel.requested:
        result.error = CANCELLED
    result.cells = _collect(nb, expected, run, result.error)
    result.points = float(sum(c.points for c in result.cells))
    result.seconds = round(time.time() - run.start, 1)
    return result


def _read(path: pathlib.Path, lesson: str | None, result: NotebookResult) -> tuple[object, list]:
    """Read: the submission (autograder/submission.py) and its expected graded cells, into `result` (its
    lesson, problems, most points, and the error that stops it being run)."""
    nb, expected, problems, stem, error = read_submission(path, lesson)
    if error and not expected:  # unreadable, but the assignment is known: its cells, each at 0
        stem, _ = lesson_of(path, lesson)
        expected = expected_cells(stem)
    result.problems, result.lesson = problems, stem
    result.max_points = float(sum(p for _, _, p in expected))
    result.error = error
    return nb, expected


def _review(nb, problems: list) -> None:
    """Review: read before it runs, what reaches below the library-shortcut watch is named for review (audit.py)."""
    try:
        from .audit import audit_notebook
        problems.extend(audit_notebook(nb))
    except Exception as e:  # noqa: BLE001  (the notebook is graded all the same)
        problems.append(f"the grader could not read the cells for review: {type(e).__name__}")


def _run(nb, expected, result: NotebookResult, run: _Run, tmp: pathlib.Path, batch: pathlib.Path,
         cancel: Cancel | None) -> str | None:
    """Prepare, views, specs and run: the notebook's folders, the notebook to run, what its kernel sees of the
    course, each child's spec; then the runner, started and waited for, its status and the checker's verdicts into
    `run`. Returns the run's error (None when it ran to the end)."""
    dirs = _private_dirs(tmp, run.isolated)
    private = dirs["private"]
    socket_path = str(dirs["sock"] / "grader.sock")
    run.prepared, run.nonces, run.origin = prepare(nb, expected, result.problems, socket_path)
    from .views import build as build_views
    views = build_views(result.lesson, tmp / "views")
    _write_specs(run, dirs, socket_path, views, batch)
    stopped, err = _run_runner(run, private, cancel)
    run.status = _read_status(private / "status.json", err)
    run.verdicts = _results(private / "results.jsonl")
    result.problems.extend(_interruptions(run))
    return _run_error(run, stopped, private / "kernel.log")


def _write_specs(run: _Run, dirs: dict, socket_path: str, views: dict, batch: pathlib.Path) -> None:
    """The specs each child reads, in the notebook's private folder: the checker's, the kernel launcher's (jail),
    the kernel's (Jupyter's kernelspec), the prepared notebook and the runner's."""
    from .jail import NOBODY, python_paths
    private, work, home, conn = dirs["private"], dirs["work"], dirs["home"], dirs["conn"]
    memory = int(run.memory_gb * (1 << 30)) if run.memory_gb else None
    CheckerSpec(socket=socket_path, results=str(private / "results.jsonl"), cells=run.nonces,
                uid=NOBODY if run.isolated else None, threads=run.threads, tmp=str(private / "tmp"),
                memory=memory).write(private / "checker.json")
    JailSpec(work=str(work), home=str(home), conn=str(conn), writable=[str(work), str(home), str(conn)],
             token=run.token, memory=memory, file_size=FILE_SIZE, isolate=run.isolated, threads=run.threads,
             protected=[str(p) for p in run.protected][:50], hide=[str(batch.resolve()), str(ROOT)],
             show=python_paths() + [str(dirs["sock"])], views=views,
             server=run.kernel_server if run.isolated else None).write(private / "jail.json")
    kernels = private / "kernels" / KERNEL_NAME
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "autograder.jail", str(private / "jail.json"), "--",
                 sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "autograder", "language": "python", "interrupt_mode": "signal",
        "env": {"PYTHONPATH": course_pythonpath()}}))
    nbformat.write(run.prepared, str(private / "prepared.ipynb"))
    RunSpec(prepared=str(private / "prepared.ipynb"), status=str(private / "status.json"), work=str(work),
            cell_timeout=run.cell_timeout, log=str(private / "kernel.log"), timeout=run.timeout,
            deadline=run.start + run.timeout, checker=str(private / "checker.json"), private=str(private),
            ipc=str(conn / "kernel"), connection_file=str(conn / "kernel.json"), sealed=str(dirs["sealed"]),
            checker_server=run.checker_server).write(private / "spec.json")


def _run_runner(run: _Run, private: pathlib.Path, cancel: Cancel | None) -> tuple[bool, str]:
    """The runner (`python -m autograder.kernel SPEC`) started and waited for: (whether it had to be stopped, the
    end of its stderr). The runner keeps the deadline itself; this is the fallback for one that cannot."""
    env = dict(os.environ, JUPYTER_PATH=str(private), AUTOGRADER_TOKEN=run.token, PYTHONPATH=course_pythonpath())
    runner = ([sys.executable, "-m", "autograder.kernel", str(private / "spec.json")],)
    options = dict(stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, text=True, env=env,
                   cwd=str(private))
    proc = cancel.start(*runner, **options) if cancel is not None else subprocess.Popen(*runner, **options)
    if proc is None:
        raise _Cancelled()
    stopped = False
    try:
        _, err = proc.communicate(timeout=max(0.0, run.start + run.timeout - time.time()) + STOP_GRACE)
    except subprocess.TimeoutExpired:  # the runner stops the kernel, then reports
        stopped = True
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
                try:
                    kill()
                except OSError:
                    pass
            _, err = proc.communicate()
    finally:
        _kill_token(run.token)
        if cancel is not None:
            cancel.finished(proc)
    return stopped, (err or "")[-20000:]


def _read_status(path: pathlib.Path, err: str) -> RunStatus:
    """The runner's status.json; where there is none, an error from the end of its stderr."""
    try:
        return RunStatus.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return RunStatus(error=f"the grader's runner failed: {(err.strip().splitlines() or ['no report'])[-1][:300]}",
                         ending=Ending.NO_START.value)


def _run_error(run: _Run, stopped: bool, log_path: pathlib.Path) -> str | None:
    """The notebook's error from how the run ended (outcomes.Ending), or None when it ran to the end."""
    status = run.status
    if stopped or status.stopped:
        return f"stopped after {run.timeout:g} s (the notebook's time limit)"
    if not status.error:
        return None
    cell = status.cell
    number = run.origin[cell] if isinstance(cell, int) and 0 <= cell < len(run.origin) else None
    where = f" while running the notebook's cell {number}" if number else " while grading" if isinstance(cell, int) \
        else ""
    ending = Ending(status.ending or Ending.NO_START.value)
    if ending is Ending.DEAD_KERNEL:
        return (f"the kernel died{where} (the notebook's code exited, was killed, or crashed): the cells after it did "
                "not run")
    if ending is Ending.NO_START:
        try:
            log = log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            log = []
        return f"the kernel could not start: {status.error}" + (f" ({log[-1][:200]})" if log else "")
    if ending is Ending.CELL_TIMEOUT:
        return f"a cell{where} ran past {run.cell_timeout:g} s and could not be interrupted"
    return f"the run stopped{where}: {status.error}"


def _interruptions(run: _Run) -> list[str]:
    """A note for each cell interrupted at the cell time limit (the run went on)."""
    out = []
    for index in run.status.interrupted or []:
        number = run.origin[index] if isinstance(index, int) and 0 <= index < len(run.origin) else None
        if number:
            out.append(f"cell {number} ran past the cell time limit ({run.cell_timeout:g} s) and was interrupted; "
                       "the cells after it still ran")
    return out


def _collect(nb, expected, run: _Run, error: str | None) -> list[CellResult]:
    """Collect: each expected graded cell's points and message, from the checker's verdict on its name."""
    by_name: dict[str, NameVerdict] = {}
    for nonce, name in run.nonces.items():
        if nonce in run.verdicts:
            by_name.setdefault(name, run.verdicts[nonce])
    cells = _CellRuns(nb, run.prepared, run.origin, run.nonces, run.status)
    out = []
    for gid, name, top in expected:
        verdict = by_name.get(name)
        if verdict is None:
            why = f"not run: {error}" if error else \
                "not graded: the graded cell did not reach the grader (the notebook's code stopped it)"
            out.append(CellResult(gid, 0.0, top, why))
            continue
        lines = [str(x) for x in verdict.lines or []]
        if verdict.undefined:  # the checker cannot know why
            lines = [f"✗ {name} is not defined: {cells.why_undefined(name, error)}"]
        else:
            lines += cells.notes(name)
        flags = list(dict.fromkeys(str(f) for f in verdict.flags or []))
        message = "\n".join(name_lines(lines, flags, verdict.error))
        points = 0.0 if flags or verdict.error else max(0.0, min(float(verdict.points or 0.0), top))
        out.append(CellResult(gid, points, top, message))
    return out


if __name__ == "__main__" and len(sys.argv) == 2:
    _execute(sys.argv[1])
