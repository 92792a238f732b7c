"""The notebook's side of `python -m autograder grade`: what runs in the kernel in place of a graded cell.

`grade(name, cell, path)` connects to the grader's socket, says which graded cell it is, and then only
answers: the grader (autograder/checker.py, another process) looks the name up in the notebook's namespace
and calls the learner's object through autograder/remote.py until its checks are done; then it sends the
lines of its verdict, which this cell prints. Nothing here decides a point: the verdict is kept by the
grader, out of the notebook's reach. The library shortcuts that a stage forbids (core.forbid) are watched
here, around each call of the learner's code, and reported to the grader (see GRADING.md for what that
can and cannot catch).
"""
from __future__ import annotations

import socket

from . import core
from .remote import ChannelError, Endpoint


class LearnerEndpoint(Endpoint):
    """The kernel's end: serves every request of the grader, and watches for forbidden library calls."""

    def __init__(self, sock, namespace):
        super().__init__(sock, trusted=False, namespace=namespace)
        self.used: list[str] = []

    def _op_watch(self, msg, blobs, reply, out):
        name = msg.get("name")
        rules = core.FORBIDDEN.get(name) if isinstance(name, str) else None
        obj = self.namespace.get(name) if isinstance(name, str) else None
        self.used = []
        self.watch = (lambda: core.watching(rules, obj, self.used)) if rules else None
        return None

    def _describe(self, e) -> dict:
        """The error as remote.Endpoint sends it, with the learner's failing frame (core.failing_site: the
        shapes of the tensors on its line), whose locals the grader cannot see from its side of the
        channel."""
        out = super()._describe(e)
        try:
            site = core.failing_site(e)
        except Exception:  # noqa: BLE001  (the error goes back without it)
            site = None
        if site:
            out["site"] = {"file": site["file"], "line": site["line"],
                           "shapes": {n: list(s) for n, s in list(site["shapes"].items())[:16]},
                           "last": {n: list(s) for n, s in list(site["last"].items())[:16]},
                           "entry": site.get("entry")}  # the parameters of the function the call entered
        return out

    def _op_watched(self, msg, blobs, reply, out):
        used, self.used, self.watch = list(dict.fromkeys(self.used)), [], None
        self.records.clear()
        return used


def grade(name: str, cell: str, path: str, namespace: dict | None = None) -> float:
    """Serve the grader for the graded cell `cell` (the name `name`); print its verdict; return its points.
    `namespace`: where the name is looked up (the kernel's user namespace by default)."""
    if namespace is None:
        try:
            namespace = get_ipython().user_ns  # noqa: F821  (IPython's builtin in a kernel)
        except NameError:
            import __main__
            namespace = vars(__main__)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        print(f"✗ the grader could not be reached ({e}): {name} is not graded")
        return 0.0
    ep = LearnerEndpoint(sock, namespace)
    done = None
    try:
        ep.ch.send({"k": "hello", "name": name, "cell": cell})
        while done is None:
            try:
                msg, blobs = ep.ch.recv()
                if msg.get("k") == "req":
                    ep.serve(msg, blobs)
                elif msg.get("k") == "done":
                    done = msg
            except KeyboardInterrupt:  # the grader's time limit interrupted the learner's code: go on serving
                continue
            except ChannelError:
                done = ep.done
                break
    finally:
        sock.close()
    if not isinstance(done, dict):
        print(f"✗ the grader did not finish grading {name}")
        return 0.0
    for line in done.get("lines") or []:
        print(str(line))
    points = done.get("points")
    return float(points) if isinstance(points, (int, float)) else 0.0
