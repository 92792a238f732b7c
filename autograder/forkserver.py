"""A process that forks a child of its own for each connection to its Unix socket, until its standard input
closes: the batch's checker process (autograder/checker.py, `serve`) and the batch's kernel server
(autograder/jail.py, `serve`) are two, each started for a batch by the grade command (autograder/grade.py)
with `start` below.

The standard library only: the kernel server imports this module, and nothing of the course's answers or
checks may be in that process (autograder/GRADING.md).
"""
from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys


def serve_forks(control: str, child, name: str) -> None:
    """Listen on the Unix socket `control` (mode 0600, its owner's only), print "ready", then for each
    connection fork a process that runs child(connection) and exits (70, with `name` and the error on its
    stderr, if it raised). The forks are reaped by the kernel, never waited for. Exits when standard input
    closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(control)
    os.chmod(control, 0o600)
    server.listen(64)
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([server, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
            os._exit(0)
        if server not in readable:
            continue
        conn, _ = server.accept()
        if os.fork() == 0:
            code = 0
            try:
                server.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                child(conn)
            except BaseException as e:  # noqa: BLE001  (a fork must never return into the loop)
                sys.stderr.write(f"{name}: {type(e).__name__}: {e}\n")
                code = 70
            finally:
                os._exit(code)
        conn.close()


def start(argv: list, control: str, env: dict, cwd: str):
    """Start a server (`argv` ends up in serve_forks on `control`) and wait for its "ready": (process,
    control), or None where it does not start. stop() ends it."""
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)
    except OSError:
        return None
    if (proc.stdout.readline() or "").strip() != "ready":
        stop(proc)
        return None
    return proc, control


def stop(proc) -> None:
    try:
        proc.stdin.close()  # serve_forks exits when its input closes
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
