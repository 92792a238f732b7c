"""autograder/remote.py, the channel between the checker and the notebook's kernel, without a kernel: the
reference earns every point of every check across it, values cross as plain data whatever the notebook's
side sends, gradients and random state cross both ways, and the checker's side refuses what the notebook
may not ask of it."""
import json
import os
import pathlib
import socket
import struct
import subprocess
import sys

import pytest
import torch
from torch import nn

from autograder import core
from autograder.remote import ChannelError, Endpoint, Remote, RemoteTensor
from autograder.serve import LearnerEndpoint
from tests.grading import serve_in_thread

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_reference_earns_every_point_across_the_channel(tmp_path):
    """Every registered name, the reference's object served by a plain Python process, graded by the
    checker process: the points of an in-process check(), and each check's line."""
    from autograder import checks  # noqa: F401
    names = sorted(core.REGISTRY)
    cfg = {"socket": str(tmp_path / "s"), "results": str(tmp_path / "r.jsonl"), "cells": {n: n for n in names},
           "uid": None, "threads": 1, "exchange": str(tmp_path)}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    checker = subprocess.Popen([sys.executable, "-m", "autograder.checker", str(tmp_path / "c.json")],
                               stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert checker.stdout.readline().strip() == "listening"
        learner = ("import io, contextlib, solutions, torch\ntorch.set_num_threads(1)\n"
                   "from autograder.serve import grade\n"
                   "ns = {n: getattr(solutions, n) for n in solutions.__all__}\n"
                   f"for n in {names!r}:\n"
                   "    with contextlib.redirect_stdout(io.StringIO()):\n"
                   f"        grade(n, n, {cfg['socket']!r}, ns)\n")
        subprocess.run([sys.executable, "-c", learner], cwd=tmp_path, env=env, check=True, timeout=900)
    finally:
        checker.kill()
        checker.wait()
    results = {r["name"]: r for r in map(json.loads, (tmp_path / "r.jsonl").read_text().splitlines())}
    assert sorted(results) == names
    short = {n: [line for line in r["lines"] if not line.startswith("✓")] for n, r in results.items()
             if r["points"] != core.max_points(n) or r["error"]}
    assert not short, short


@pytest.fixture
def pair():
    """(the checker's endpoint, the notebook's namespace): the notebook's side served in a thread."""
    a, b = socket.socketpair()
    namespace = {}
    learner = LearnerEndpoint(b, namespace)

    thread = serve_in_thread(learner)
    grader = Endpoint(a, trusted=True)
    yield grader, namespace
    a.close()
    b.close()


def test_values_cross_as_plain_data(pair):
    """A tensor subclass that always compares equal, a str subclass, a numpy scalar: the checker gets an
    ordinary tensor, str and float; an object that says it equals everything is a proxy equal only to itself."""
    grader, ns = pair

    class Yes(torch.Tensor):
        def __eq__(self, other):
            return True

    class Sly(str):
        def __eq__(self, other):
            return True

    class Equal:
        def __eq__(self, other):
            return True
    import numpy as np
    ns.update(f=lambda: torch.zeros(2).as_subclass(Yes), s=lambda: Sly("no"), n=lambda: np.float32(0.5),
              e=lambda: Equal())
    t = grader.request("resolve", name="f")()
    assert type(t) is torch.Tensor and not torch.equal(t, torch.ones(2))
    s = grader.request("resolve", name="s")()
    assert type(s) is str and s != "yes"
    assert type(grader.request("resolve", name="n")()) is float
    e = grader.request("resolve", name="e")()
    assert isinstance(e, Remote) and e != 1 and e == e and bool(e)


def test_gradients_random_state_and_in_place_changes_cross(pair):
    """A module on the notebook's side, called from the checker: its parameters are handles (a copy into
    them changes the module), gradients reach the checker's input and the module's own parameters, a
    seeded dropout drops what it drops in one process, and an input changed in place is changed here."""
    grader, ns = pair
    ns["lin"] = nn.Linear(3, 2)
    ns["drop"] = nn.Dropout(0.5)
    ns["bump"] = lambda x: x.add_(1)
    lin = grader.request("resolve", name="lin")
    assert isinstance(lin, nn.Linear) and isinstance(lin.weight, RemoteTensor)
    ref = nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(ref.weight)
        lin.bias.copy_(ref.bias)
    x, y = torch.randn(4, 3, requires_grad=True), None
    lin(x).pow(2).sum().backward()
    y = x.detach().clone().requires_grad_()
    ref(y).pow(2).sum().backward()
    assert torch.allclose(x.grad, y.grad) and torch.allclose(lin.weight.grad, ref.weight.grad)
    drop = grader.request("resolve", name="drop")
    torch.manual_seed(7)
    across = drop(torch.ones(1000))
    torch.manual_seed(7)
    assert torch.equal(across, nn.Dropout(0.5)(torch.ones(1000)))
    z = torch.zeros(3)
    grader.request("resolve", name="bump")(z)
    assert torch.equal(z, torch.ones(3))


def _ask(grader, request, blobs=()):
    """Send the checker's endpoint a request as the notebook's side would; return its reply."""
    out_a, out_b = socket.socketpair()
    grader.ch.sock, saved = out_a, grader.ch.sock
    try:
        grader.serve(request, list(blobs))
        from autograder.remote import Channel
        return Channel(out_b).recv()[0]
    finally:
        grader.ch.sock = saved
        out_a.close()
        out_b.close()


def test_the_checker_refuses_what_the_notebook_may_not_ask():
    """The checker's objects can be called and their public attributes read; not their private parts, their
    other methods, objects never handed out, or requests outside the narrow set."""
    a, b = socket.socketpair()
    grader = Endpoint(a, trusted=True)
    norm = nn.LayerNorm(4)
    h = grader.export(norm)
    fn = grader.export(lambda t: t * 2, callable_ok=True)
    ok = _ask(grader, {"k": "req", "id": 1, "op": "getattr", "h": h, "name": "weight"})
    assert ok["ok"] and ok["v"]["$"] == "t"  # a copy of the tensor
    for request, says in [
            ({"op": "getattr", "h": h, "name": "_forward_hooks"}, "do not show"),
            ({"op": "getattr", "h": fn, "name": "__globals__"}, "do not show"),
            ({"op": "getattr", "h": h, "name": "load_state_dict"}, "do not let you call"),
            ({"op": "call", "h": h, "method": "register_forward_hook", "args": [], "kwargs": {"$": "dict", "k": [],
                                                                                                "v": []}}, "do not let you call"),
            ({"op": "setattr", "h": h, "name": "weight", "v": None}, "does not serve"),
            ({"op": "resolve", "name": "x"}, "does not serve"),
            ({"op": "build", "module": "os", "name": "system"}, "does not serve")]:
        reply = _ask(grader, {"k": "req", "id": 2, **request})
        assert not reply["ok"] and says in reply["exc"]["msg"], (request, reply)
    with pytest.raises(ChannelError):  # a handle never handed out ends the conversation
        _ask(grader, {"k": "req", "id": 3, "op": "call", "h": 999, "args": [], "kwargs": {}})
    with pytest.raises(ChannelError):  # a tensor whose bytes do not fit its shape
        grader.dec({"$": "t", "dt": "float32", "s": [4], "b": 0}, [b"\0" * 3])
    with pytest.raises(ChannelError):
        grader.dec({"$": "pickle", "v": "gASVAAAA"}, [])
    a.close()
    b.close()


def test_a_message_over_the_limit_is_refused():
    a, b = socket.socketpair()
    b.sendall(struct.pack("<II", 1 << 31, 0))
    with pytest.raises(ChannelError):
        Endpoint(a, trusted=True).ch.recv()
    a.close()
    b.close()


def test_what_a_call_hands_back_as_a_generator_is_an_iterator_again(pair):
    """A learner's decoder that asks the checker's model for `next(model.parameters()).device`."""
    grader, ns = pair
    ns["first_device"] = lambda model: str(next(model.parameters()).device)
    assert grader.request("resolve", name="first_device")(nn.Linear(2, 2)) == "cpu"
