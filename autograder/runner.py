"""The notebook's runner: `python -m autograder.runner SPEC`, one child process per notebook, started by
autograder/kernel.py (`run_notebook`) with the spec it wrote (records.RunSpec).

It starts the notebook's checker (autograder/checker.py), then executes the prepared notebook with nbclient in
the jailed kernel (autograder/jail.py), over hard links of the kernel's ZeroMQ sockets that the kernel cannot
replace (`seal_socket`), keeps the notebook's deadline, relays the checker's requests to interrupt the kernel,
and writes how the run ended (records.RunStatus, outcomes.Ending) for the grade command. Outputs are dropped
as they come. The threat model is in autograder/GRADING.md.
"""
from __future__ import annotations

import os
import pathlib
import resource
import signal
import subprocess
import sys
import threading
import time

if __name__ == "__main__":
    # This process validates notebooks and never an IRI: without this, importing nbformat imports jsonschema's
    # optional IRI checker, rfc3987_syntax, which builds its grammar at import time (1.4 s of this process's
    # start here; jsonschema issue #1428). jsonschema skips that format checker when the import fails, which a
    # None in sys.modules makes it do.
    sys.modules.setdefault("rfc3987_syntax", None)

import nbformat

from .outcomes import Ending
from .records import RunSpec, RunStatus

RUNNER_MEMORY = 1536 << 20  # the address space of the process that talks to the kernel (nbclient), RLIMIT_AS
# the largest message the runner takes from the kernel: a larger one is dropped unread
OUTPUT_MESSAGE = 32 << 20
KERNEL_NAME = "autograder-jail"


def _execute(spec_path: str) -> None:
    """Child process: start the checker, then execute the prepared notebook with the jailed kernel; write its
    status (records.RunStatus). Outputs are dropped as they come (nothing is read from them); a message from
    the kernel over OUTPUT_MESSAGE is dropped by ZeroMQ before it is read, and this process's address space is
    RUNNER_MEMORY (soft: the processes it starts set their own). The checker asks it to interrupt the kernel
    ("interrupt" on the checker's connection or output): it signals the kernel's launcher that it started,
    never a pid from elsewhere."""
    runner = _Runner(RunSpec.read(spec_path))
    client_class = _client_class(runner)
    spec = runner.spec
    signal.signal(signal.SIGTERM, runner.stop)
    log = open(spec.log, "wb")
    try:
        _start_checker(runner, log)
        nb = nbformat.read(spec.prepared, as_version=4)
        # each cell may run until its own limit or the notebook's, whichever comes first: at the notebook's
        # the kernel is interrupted, and the next cell does not start
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
    """The runner's state: its spec, the status it reports, why it stopped, its kernel client and its
    checker."""

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
        """The checker's requests to interrupt the kernel (a check past its time limit), passed to the
        client."""
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
    """nbclient's NotebookClient as the runner drives it: over the sealed Unix sockets (seal_socket), messages
    over OUTPUT_MESSAGE dropped, the deadline kept before each cell, errors kept for the report, interruptions
    noted."""
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
            # what the cell raised, for the report
            if msg.get("msg_type") == "error" and len(status.errors) < 200:
                status.errors.setdefault(str(cell_index), _error_of(msg.get("content")))
            return None

        async def _async_handle_timeout(self, timeout, cell=None):
            self.interrupted.append(self.current)
            return await super()._async_handle_timeout(timeout, cell)
    return Client


def _sealed_classes(runner: _Runner) -> tuple[type, type]:
    """(kernel manager, kernel client) classes whose ZeroMQ endpoints are the hard links in the runner's
    `sealed` folder (on the kernel's tmpfs, the runner's own) of the sockets the kernel bound in its
    connection folder, never those names (seal_socket); the client's context drops a message over
    OUTPUT_MESSAGE unread. The runner's address space is limited to RUNNER_MEMORY once the libraries are
    imported."""
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
            # every socket to the kernel: larger ones dropped
            context.setsockopt(zmq.MAXMSGSIZE, OUTPUT_MESSAGE)
            return context
    return Manager, BoundedClient


def _interrupt_kernel(provisioner) -> None:
    """SIGINT to the kernel's process group, as jupyter_client's interrupt does, while its launcher (this
    process's child, not yet reaped: its pid and group cannot be another's) runs."""
    process, pgid = getattr(provisioner, "process", None), getattr(provisioner, "pgid", None)
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(pgid, signal.SIGINT) if pgid else process.send_signal(signal.SIGINT)
    except OSError:
        pass


def _start_checker(runner: _Runner, log) -> None:
    """The notebook's checker: forked by the batch's checker process (autograder.checker.serve) where there is
    one, else started here; its requests to interrupt the kernel relayed (runner.relay)."""
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
    """The checker killed: the one started here, or the forked one (it exits when its connection closes;
    killed now, to be sure, by its pidfd, which names that process and never another that reuses its
    number)."""
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
    # jupyter_client says a kernel that died while starting with a plain RuntimeError ("Kernel died before
    # replying to kernel_info"): the library's own words, the one message read here
    if isinstance(e, DeadKernelError) or (isinstance(e, RuntimeError) and "died" in status.error.lower()):
        return Ending.DEAD_KERNEL
    if status.cell is None:
        return Ending.NO_START
    if any("Timeout" in kind.__name__ for kind in type(e).__mro__):
        return Ending.CELL_TIMEOUT
    return Ending.OTHER


def seal_socket(source: str, sealed: str, gone=lambda: False, timeout: float = 120.0) -> str:
    """The path the runner connects to for the kernel's socket `source` (in the kernel's connection folder,
    which the kernel can write): a hard link to it in `sealed`, the runner's own folder (the grading user's,
    0700, never shown to the kernel) on the same file system, made the first time, once the kernel has bound
    it. ZeroMQ connects again by this path after a drop: it names the socket's inode, whatever the kernel puts
    at `source` later (a link to a host socket, another file, nothing). The link is made without following a
    link at `source` (linkat without AT_SYMLINK_FOLLOW), can only name a file of the kernel's own file system
    (its tmpfs: what it holds the kernel made), and must be a socket, or the run stops. Waits for `source` up
    to `timeout` seconds, or until gone()."""
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
    """{"ename", "evalue", "line"} of an error a cell raised, from the kernel's message (the notebook's side:
    read as plain text, one line each, cut short). "line": the cell's line that raised (a SyntaxError's own,
    else the traceback's innermost line of the cell), or None."""
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
        # IPython's "Cell In[3], line 2": the cell's frame
        cell = [t for t in frames if t.startswith("Cell In[")]
        m = re.match(r"Cell In\[\d*\], line (\d+)", cell[0]) if cell else None
        line = int(m.group(1)) if m else None
    return {"ename": ename, "evalue": evalue, "line": line}


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


if __name__ == "__main__" and len(sys.argv) == 2:
    _execute(sys.argv[1])
