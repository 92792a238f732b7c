"""autograder/remote.py, the channel between the checker and the notebook's kernel, without a kernel: the
reference earns every point of every check across it, values cross as plain data whatever the notebook's
side sends, gradients and random state cross both ways, and the checker's side refuses what the notebook
may not ask of it."""
import json
import os
import pathlib
import socket
import subprocess
import sys
from types import SimpleNamespace

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
    cfg = {"socket": str(tmp_path / "s"), "results": str(tmp_path / "r.jsonl"),
           "cells": {n: n for n in names},
           "uid": None, "threads": 1, "tmp": str(tmp_path)}
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

    serve_in_thread(learner)
    grader = Endpoint(a, trusted=True)
    yield grader, namespace
    a.close()
    b.close()


def test_values_cross_as_plain_data(pair):
    """A tensor subclass that always compares equal, a str subclass, a numpy scalar: the checker gets an
    ordinary tensor, str and float; an object that says it equals everything is a proxy equal only to
    itself."""
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
    grader.channel.sock, saved = out_a, grader.channel.sock
    try:
        grader.serve(request, [bytearray(b) for b in blobs])
        from autograder.remote import Channel
        return Channel(out_b).recv()[0]
    finally:
        grader.channel.sock = saved
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
            ({"op": "call", "h": h, "method": "register_forward_hook", "args": [],
              "kwargs": {"$": "dict", "k": [], "v": []}}, "do not let you call"),
            ({"op": "setattr", "h": h, "name": "weight", "v": None}, "does not serve"),
            ({"op": "resolve", "name": "x"}, "does not serve"),
            ({"op": "build", "module": "os", "name": "system"}, "does not serve")]:
        reply = _ask(grader, {"k": "req", "id": 2, **request})
        assert not reply["ok"] and says in reply["exc"]["msg"], (request, reply)
    with pytest.raises(ChannelError):  # a handle never handed out ends the conversation
        _ask(grader, {"k": "req", "id": 3, "op": "call", "h": 999, "args": [], "kwargs": {}})
    with pytest.raises(ChannelError):  # a tensor whose bytes do not fit its shape
        grader.decode({"$": "t", "dt": "float32", "s": [4], "b": 0}, [b"\0" * 3])
    with pytest.raises(ChannelError):
        grader.decode({"$": "pickle", "v": "gASVAAAA"}, [])
    a.close()
    b.close()


def test_what_a_call_hands_back_as_a_generator_is_an_iterator_again(pair):
    """A learner's decoder that asks the checker's model for `next(model.parameters()).device`."""
    grader, ns = pair
    ns["first_device"] = lambda model: str(next(model.parameters()).device)
    assert grader.request("resolve", name="first_device")(nn.Linear(2, 2)) == "cpu"


# ---------------------------------------------------------------------------- the second red team (issue 36)
def test_the_checker_builds_only_the_tensor_classes_it_sent(pair):
    """A tensor tagged by the kernel as a class of the checks is a plain tensor on the checker's side, unless
    the check sent a tensor of that class in the same call (stage 05's ids "on another device", handed
    back)."""
    import autograder.remote as remote
    from autograder.checks.stage05_masks import _Elsewhere
    grader, ns = pair
    ns["cpu_mask"] = lambda size, device=None: torch.ones(size, size, dtype=torch.bool).tril()
    ns["same"] = lambda ids: ids + 0
    original = remote.Endpoint._enc_tensor

    def forged(self, v, blobs, diff):
        node = original(self, v, blobs, diff)
        if not self.trusted:
            node["sub"] = [_Elsewhere.__module__, _Elsewhere.__qualname__]
        return node
    remote.Endpoint._enc_tensor = forged
    try:
        got = grader.request("resolve", name="cpu_mask")(3, device=torch.device("meta"))
        assert type(got) is torch.Tensor and got.device.type == "cpu"
        back = grader.request("resolve", name="same")(torch.arange(4).as_subclass(_Elsewhere))
        assert type(back) is _Elsewhere and back.device.type == "meta"   # the class the check sent
    finally:
        remote.Endpoint._enc_tensor = original


def test_a_model_the_check_builds_is_the_checker_s(pair):
    """learner_side: the checker builds the model with its own factory (the kernel's copy, rebound, is never
    called), the kernel gets PyTorch's modules with the checker's values, and copy.deepcopy gives the
    checker's own copy."""
    import copy

    from autograder.checks import _util
    grader, ns = pair

    def factory(seed=0):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    expected = factory(5)
    _util.BUILD_ELSEWHERE = grader.build
    try:
        model = _util.learner_side(factory)(5)
    finally:
        _util.BUILD_ELSEWHERE = None
    assert isinstance(model, Remote) and isinstance(model[0].weight, RemoteTensor)
    assert torch.equal(model[0].weight._fetch(), expected[0].weight)
    ns["zero"] = lambda m: [p.data.zero_() for p in m.parameters()] and None
    # the kernel changes its module: the checker's copy is its own
    grader.request("resolve", name="zero")(model)
    reference = copy.deepcopy(model)
    assert type(reference) is nn.Sequential and torch.equal(reference[0].weight, expected[0].weight)
    assert torch.equal(model[0].weight._fetch(), torch.zeros(4, 3))


def test_gradients_of_a_call_are_given_once():
    """The kernel asks the checker for the gradients of a call it answered: once, of its outputs' shapes;
    asked again (pumping gradients into the checker's modules), refused."""
    a, b = socket.socketpair()
    grader = Endpoint(a, trusted=True)
    lin = nn.Linear(2, 2)
    out = lin(torch.ones(1, 2))
    grader.records[7] = ([], [out])
    blobs: list = []
    grads = grader.encode([torch.ones(1, 2)], blobs)
    first = _ask(grader, {"k": "req", "id": 1, "op": "backward", "record": 7, "grads": grads}, blobs)
    assert first["ok"]
    once = lin.weight.grad.clone()
    again = _ask(grader, {"k": "req", "id": 2, "op": "backward", "record": 7, "grads": grads}, blobs)
    assert not again["ok"] and "already" in again["exc"]["msg"] and torch.equal(lin.weight.grad, once)
    grader.records[8] = ([], [lin(torch.ones(1, 2))])
    blobs = []
    wrong = _ask(grader, {"k": "req", "id": 3, "op": "backward", "record": 8,
                          "grads": grader.encode([torch.ones(5, 5)], blobs)}, blobs)
    assert not wrong["ok"] and "shapes" in wrong["exc"]["msg"]
    a.close()
    b.close()


def test_a_folder_for_the_learner_s_code_is_made_by_the_kernel(pair, tmp_path, monkeypatch):
    """_util.learner_folder in the checker while it grades: the kernel makes the folder (in its own temporary
    folder) and the checker only hands its name on; in a lesson's own check(), a temporary folder of its own.
    The library's tempfile.TemporaryDirectory stays the library's in the checker (in its own folder: a check
    that writes a file itself never writes where the kernel named)."""
    import tempfile

    from autograder import checker
    from autograder.checks import _util
    grader, ns = pair
    kernel_tmp, own_tmp = tmp_path / "kernel", tmp_path / "checker"
    kernel_tmp.mkdir()
    own_tmp.mkdir()
    library = tempfile.TemporaryDirectory
    # the notebook's side runs in this process here
    monkeypatch.setattr(tempfile, "tempdir", str(kernel_tmp))
    monkeypatch.setattr(_util, "FOLDER_ELSEWHERE", lambda: checker._kernel_folder(grader))
    with _util.learner_folder() as folder:
        assert pathlib.Path(folder).parent == kernel_tmp and pathlib.Path(folder).is_dir()
    # the checker removes nothing of the kernel's: the grade command does
    assert pathlib.Path(folder).is_dir()
    for env in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(env, "unset")
    checker._own_temp(str(own_tmp))
    assert tempfile.TemporaryDirectory is library
    with tempfile.TemporaryDirectory() as mine:
        assert pathlib.Path(mine).parent == own_tmp
    monkeypatch.setattr(_util, "FOLDER_ELSEWHERE", None)
    with _util.learner_folder() as plain:
        assert pathlib.Path(plain).parent == own_tmp and pathlib.Path(plain).is_dir()
    assert not pathlib.Path(plain).exists()
    with pytest.raises(RuntimeError, match="did not make"):
        checker._kernel_folder(SimpleNamespace(request=lambda op: "relative/path"))
