"""The grader's side of `python -m autograder grade`: `python -m autograder.checker CONFIG`, one process per
notebook, started before the notebook's kernel and never running any of the notebook's code.

It listens on a Unix socket in the kernel's connection folder, prints "listening", and imports the checks.
Each graded cell of the notebook (autograder/serve.py) connects and names its cell; the checker grades the
contract name that the lesson gives that cell (never a name the notebook chooses), with the learner's object
reached through autograder/remote.py, and appends the verdict to its results file, which only the grade
command reads. A check that runs past its time limit has the kernel interrupted (it asks the process that
started it, the notebook's runner, which signals the kernel it launched: never a pid taken from the socket)
and the name's other checks are skipped.

It never touches a path the kernel can write or name: its socket is in a folder the kernel may only read, its
temporary files go to a folder of its own (CONFIG's "tmp"; tempfile.TemporaryDirectory is the library's,
there), and a folder a check hands to the learner's code (a tokenizer's save and load: _util.learner_folder,
asked for by the check) is made by the kernel, in the kernel's own temporary folder, at the checker's request
(remote.Endpoint, "tempdir"); the checker only passes its name back.

CONFIG (JSON, records.CheckerSpec): {"socket", "results", "cells": {cell nonce: name}, "uid": the kernel's uid
or null, "threads", "memory", "tmp"}. Each verdict is a line of the results file (records.NameVerdict).

A batch starts its checkers from one process, `python -m autograder.checker --serve SOCKET` (`serve`), which
imports PyTorch and the checks once and forks a checker per notebook on request (each from the same untouched
state, so no notebook's grading sees another's): a checker then starts in milliseconds instead of paying two
seconds of imports. The forked checker is the same program as the one started alone.
"""
from __future__ import annotations

import json
import os
import resource
import socket
import struct
import sys
import threading
import time

from .outcomes import Outcome, Verdict, check_line, name_lines
from .records import CheckerSpec, NameVerdict

NAME_BUDGET = 240.0   # seconds for all the checks of one name, on top of each check's own limit
HELLO_TIMEOUT = 20.0


def _peer(conn) -> tuple[int, int]:
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))
    return pid, uid


#: how this checker asks its runner to interrupt the kernel (set by main)
_INTERRUPT: list = []


def _interrupt() -> None:
    """Ask the runner, which started the kernel, to interrupt it: never a pid taken from the socket."""
    for tell in _INTERRUPT:
        try:
            tell()
        except (OSError, ValueError):
            pass


class Grader:
    """The checker's grading of one notebook: each connection is one graded cell (handle)."""

    def __init__(self, spec: CheckerSpec):
        from . import core
        self.core, self.spec = core, spec
        self.cells = {str(k): str(v) for k, v in spec.cells.items()}
        self.graded: set[str] = set()
        self.results = open(spec.results, "a", encoding="utf-8")

    def record(self, result: NameVerdict) -> None:
        self.results.write(json.dumps(result.to_json()) + "\n")
        self.results.flush()
        os.fsync(self.results.fileno())

    def handle(self, conn) -> None:
        """Grade the graded cell that `conn` names: its contract name's checks, the verdict recorded and
        sent."""
        _, uid = _peer(conn)
        if self.spec.uid is not None and uid != self.spec.uid:
            conn.close()
            return
        ep = self._endpoint(conn)
        try:
            hello, _ = self.core._run_limited(ep.ch.recv, HELLO_TIMEOUT)
        except BaseException:  # noqa: BLE001  (a connection that says nothing)
            conn.close()
            return
        cell = str(hello.get("cell", ""))[:64]
        name = self.cells.get(cell)
        result = NameVerdict(cell=cell, name=name)
        if name is None or cell in self.graded:
            why = "an unknown graded cell" if name is None else "a graded cell that was already graded"
            result.flags.append(f"the notebook asked to grade {why}")
            self._finish(ep, result, record=False)
            return
        self.graded.add(cell)
        result.max_points = self.core.max_points(name)
        self._grade(ep, name, result)
        self._finish(ep, result)

    def _endpoint(self, conn):
        """The channel to the kernel, and the checks' ways to reach it (_util's hooks)."""
        from .checks import _util
        from .remote import Endpoint
        ep = Endpoint(conn, trusted=True)
        ep.passthrough = (self.core.CheckTimeout,)
        _util.BUILD_ELSEWHERE = ep.build
        # an earlier graded name of the lesson, by the name a check chose (_util.learners_own): a mistake paid
        # once
        _util.LOOKUP_ELSEWHERE = lambda graded: ep.request("resolve", name=graded)
        _util.FOLDER_ELSEWHERE = lambda: _kernel_folder(ep)
        return ep

    def _grade(self, ep, name: str, result: NameVerdict) -> None:
        """The learner's `name`, handed over by the kernel, through its checks: into `result`."""
        core = self.core
        start = time.time()
        try:
            obj = core._run_limited(lambda: ep.request("resolve", name=name), 30)
        except NameError:
            result.undefined = True
            result.lines = [f"✗ {name} is not defined: run the cell that defines it"]
            return
        except BaseException as e:  # noqa: BLE001
            result.error = f"the kernel did not hand over {name}: {type(e).__name__}: {str(e)[:200]}"
            return
        broken: list = []
        try:
            _, earned, total, lines = core.run_named(name, obj, run=lambda c,
                                                     o: self._check(ep, c, o, broken))
        except BaseException as e:  # noqa: BLE001  (a bug of the grader's: the name earns nothing, said so)
            result.error = f"the grader failed: {type(e).__name__}: {str(e)[:200]}"
        else:
            result.points, result.lines = float(earned), list(lines)
        result.seconds = round(time.time() - start, 2)

    def _check(self, ep, check, obj, broken: list) -> Verdict:
        """One check, run across to the kernel with its shortcuts watched there. `broken`: why the name's
        later checks are skipped (the kernel stopped answering, or a check ran out of time), once known."""
        from .remote import ChannelError
        core = self.core
        if broken:
            return lost(check, f"skipped: {broken[0]}", Outcome.SKIPPED)
        # the shortcuts are watched where the learner's code runs
        saved = core.FORBIDDEN.pop(check.name, None)
        try:
            core._run_limited(lambda: ep.request("watch", name=check.name), 20)
            verdict = core.run_check(check, obj, lost=(ChannelError,))
        except BaseException as e:  # noqa: BLE001
            broken.append(f"the kernel stopped answering ({type(e).__name__})")
            return lost(check, broken[0])
        finally:
            if saved is not None:
                core.FORBIDDEN[check.name] = saved
        if verdict.outcome is Outcome.TIMEOUT:
            _interrupt()
            broken.append("an earlier check ran out of time")
            return verdict
        if verdict.outcome is Outcome.LOST:
            broken.append("the kernel stopped answering")
            return lost(check, "the kernel stopped answering")
        try:
            used = core._run_limited(lambda: ep.request("watched"), 20)
        except BaseException:  # noqa: BLE001
            broken.append("the kernel stopped answering")
            return lost(check, "the kernel stopped answering")
        used = [str(u)[:200] for u in used] if isinstance(used, list) else []
        return core.refused(check, used) if used else verdict

    def _finish(self, ep, result: NameVerdict, record=True) -> None:
        if record:
            self.record(result)
        shown = name_lines(result.lines, result.flags, result.error)
        shown.append(f"{result.name}: {result.points:g}/{result.max_points:g} points (graded outside "
                     "the notebook)")
        try:
            ep.ch.send({"k": "done", "lines": shown, "points": result.points})
        except OSError:
            pass
        try:
            ep.ch.sock.close()
        except OSError:
            pass


def lost(check, note: str, outcome: Outcome = Outcome.LOST) -> Verdict:
    """The verdict of a check that earned nothing because the kernel stopped answering (or, SKIPPED, an
    earlier check of the name lost it or ran out of time)."""
    return Verdict(0.0, check_line(check.title, check.points, False, note), outcome)


def _kernel_folder(ep) -> str:
    """A new folder for a path a check hands to the learner's code (_util.learner_folder): made by the kernel
    in its own temporary folder (the kernel's code must write there); the checker only hands the name on, and
    never opens, makes, changes or removes anything there. Removed with the kernel's folders."""
    name = ep.request("tempdir")
    if not isinstance(name, str) or not name.startswith("/") or "\0" in name or len(name) > 400:
        raise RuntimeError("the kernel did not make a temporary folder")
    return name


def _own_temp(folder) -> None:
    """The checker's temporary files go to `folder`, its own (the kernel cannot see it): tempfile's, the
    library's TemporaryDirectory included, and torch's compilers'. A folder a check hands to the learner's
    code is asked for explicitly (_util.learner_folder) and is the kernel's."""
    import tempfile
    if folder:
        tempfile.tempdir = folder
        for key in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            os.environ[key] = folder if key == "TMPDIR" else os.path.join(folder, key.split("_")[0].lower())


def main(cfg_path: str, ready=None, interrupt=None) -> None:
    """Grade the notebook of CONFIG: listen, then call ready() (by default print "listening"), serve its
    cells. interrupt(): how to ask the runner to interrupt the kernel (by default print "interrupt")."""
    spec = CheckerSpec.read(cfg_path)
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = int(spec.memory) if spec.memory else hard  # (not the runner's, inherited)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit) if spec.memory else (hard, hard))
    except (ValueError, OSError):
        pass
    _INTERRUPT[:] = [interrupt or (lambda: print("interrupt", flush=True))]
    # listening first: the kernel starts meanwhile, and a graded cell that comes early waits in the backlog.
    # The socket's folder is the grade command's (the kernel may only read it): no link in it, and the socket
    # is made connectable by the umask, not by a chmod of its path
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.lexists(spec.socket):  # left by a forked checker whose request failed: this one replaces it
        os.unlink(spec.socket)
    mask = os.umask(0o111)
    try:
        server.bind(spec.socket)
    finally:
        os.umask(mask)
    server.listen(8)
    (ready or (lambda: print("listening", flush=True)))()
    import torch
    torch.set_num_threads(int(spec.threads or 1))
    _own_temp(spec.tmp)
    grader = Grader(spec)
    while True:
        conn, _ = server.accept()
        try:
            grader.handle(conn)
        except BaseException as e:  # noqa: BLE001  (one bad connection does not stop the grading)
            sys.stderr.write(f"autograder.checker: {type(e).__name__}: {e}\n")
            try:
                conn.close()
            except OSError:
                pass


# --------------------------------------------------------------------------- one process, many checkers
def serve(control: str) -> None:
    """`python -m autograder.checker --serve SOCKET`, started by the grade command for a batch: import what
    every checker needs, print "ready", then for each connection to SOCKET fork a checker. The connection
    carries one request, {"config": CONFIG path, "log": file for the checker's stderr}, and the answer
    "listening PID"; the checker lives as long as its requester keeps the connection open (it exits when the
    connection closes, whatever ended the requester). This process exits when its standard input closes (the
    grade command ended). It never runs a check itself: every checker starts from the state of these
    imports."""
    import torch  # noqa: F401  (what the fork saves each checker: PyTorch, the checks, the channel)

    from . import core, remote  # noqa: F401
    from .checks import _util  # noqa: F401
    from .forkserver import serve_forks
    serve_forks(control, _forked, "autograder.checker")


def _forked(conn) -> None:
    """A checker forked by serve(): read the request, send "listening PID", grade until the connection
    closes."""
    conn.settimeout(30)
    request = b""
    while not request.endswith(b"\n") and len(request) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            return
        request += chunk
    conn.settimeout(None)
    req = json.loads(request)
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    for fd, target in ((0, null), (1, log), (2, log)):
        os.dup2(target, fd)
    os.close(null)
    os.close(log)
    os.chdir(os.path.dirname(os.path.abspath(req["config"])))

    def watch():  # the requester's end closed: it is done with this notebook, or it died
        try:
            while conn.recv(4096):
                pass
        finally:
            os._exit(0)
    threading.Thread(target=watch, daemon=True).start()
    main(req["config"], ready=lambda: conn.sendall(f"listening {os.getpid()}\n".encode()),
         interrupt=lambda: conn.sendall(b"interrupt\n"))


def connect(control: str, config: str, log: str, timeout: float = 60.0) -> tuple[socket.socket, int]:
    """Ask serve() at `control` for a checker of CONFIG: (the connection to keep open while it grades, its
    pid)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    conn.connect(control)
    conn.sendall(json.dumps({"config": config, "log": log}).encode() + b"\n")
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = conn.recv(256)
        if not chunk:
            break
        answer += chunk
    word, _, pid = answer.decode(errors="replace").strip().partition(" ")
    if word != "listening" or not pid.isdigit():
        conn.close()
        raise RuntimeError("the checker did not start")
    conn.settimeout(None)
    return conn, int(pid)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(sys.argv[2])
    else:
        main(sys.argv[1])
