"""The narrow channel between the grader's checks and the learner's code when `python -m autograder grade`
grades a notebook: the checks run in the grader's own process, the learner's objects stay in the notebook's
kernel, and the two talk over a Unix socket. The threat model is in autograder/GRADING.md.

What crosses, in both directions, is plain data: None, bool, int, float, str, bytes, lists, tuples, dicts,
sets, slices, torch.Size, dtypes, devices, and tensors as (dtype, shape, raw bytes). JSON carries the
structure and the tensors' bytes follow it; nothing is ever unpickled. Every other object stays where it
lives and crosses as a handle: the other side gets a proxy that forwards attribute reads and writes, calls,
len, iteration and indexing. Parameters of the learner's modules cross as handles too, so that a check
that copies weights into them (`p.copy_(w)` under no_grad, `p.data = w`) changes the learner's module.

A call carries the caller's random state, grad mode and default device, and hands the callee's random state
back, so `torch.manual_seed` in a check seeds the learner's initialisation and dropout exactly as it did when
both ran in one process. A call whose inputs or outputs need gradients goes through an autograd Function on
the caller's side, whose backward asks the other side for the gradients of the inputs; the learner's
parameters collect their own .grad where they live. Arguments that the callee changed in place are copied
back, so a check can still see that the learner's code changed its input.

The trusted side (the grader) never lets the answer of a comparison come from the other side: proxies of
the learner's objects compare by identity and are always true; tensors are rebuilt from bytes as ordinary
tensors before any check looks at them. What the learner's side may do with the grader's objects (a fake
model, a recording dropout, a LayerNorm put into the learner's module) is limited to calling them, their
forward-like methods and reading their public attributes (`ALLOWED_METHODS`); tensors it reads are copies.

The channel in parts, each read straight through: autograder/remote_wire.py (framing and the limits on a
message), autograder/remote_codec.py (how a value crosses: plain data, tensors, handles),
autograder/remote_proxies.py (the proxies of the other side's objects, the handles given out),
autograder/remote_policy.py (what the kernel may ask of the grader, and what the grader makes of its answers:
the allow-lists GRADING.md audits), and here the Endpoint: requests, calls across (with autograd), and the
dispatch of the requests it serves.
"""
from __future__ import annotations

import contextlib
import itertools
import random
import socket
import traceback

import torch

from . import remote_policy as policy
from .remote_codec import DTYPES, MAX_NODES, Codec, _Iterated
from .remote_policy import ALLOWED_METHODS, ALLOWED_PRIVATE, EXCEPTIONS, RemoteError
from .remote_proxies import REMOTE_TENSOR_ATTRS, Handles, Remote, RemoteTensor, _materialize, _module_spec
from .remote_wire import MAX_MESSAGE, TRUSTED_HEAD, TRUSTED_MESSAGE, TRUSTED_NODES, Channel, ChannelError

__all__ = ["ALLOWED_METHODS", "ALLOWED_PRIVATE", "DTYPES", "EXCEPTIONS", "MAX_DEPTH", "MAX_MESSAGE",
           "MAX_NODES",
           "REMOTE_TENSOR_ATTRS", "TRUSTED_HEAD", "TRUSTED_MESSAGE", "TRUSTED_NODES", "Channel",
           "ChannelError",
           "Endpoint", "Remote", "RemoteError", "RemoteTensor"]

MAX_DEPTH = 64              # nested calls between the two sides


# -------------------------------------------------------------------------------------- the bridge
class _Call:
    """One call across, run inside _Bridge.forward so that autograd links its outputs to its inputs."""

    def __init__(self, endpoint, fields):
        self.endpoint, self.fields = endpoint, fields
        self.result = None
        self.record = None
        self.diff = []
        self.n_inputs = 0


class _Bridge(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call, dummy, *inputs):
        call.result, call.record, call.diff = call.endpoint._call_now(call.fields)
        ctx.call = call
        marker = dummy.new_zeros(())
        ctx.mark_non_differentiable(marker)
        return (marker, *call.diff)

    @staticmethod
    def backward(ctx, _marker, *grads):
        call = ctx.call
        if call.record is None:
            return (None, None) + (None,) * call.n_inputs
        got = call.endpoint.request("backward", record=call.record, grads=list(grads))
        got = list(got) if isinstance(got, (list, tuple)) else []
        got = (got + [None] * call.n_inputs)[:call.n_inputs]
        return (None, None, *[g if isinstance(g, torch.Tensor) else None for g in got])


def _layout(tensor) -> tuple:
    """What changes when code changes a tensor in place: its version, shape and strides."""
    return tensor._version, tuple(tensor.shape), tensor.stride()


def _tensors(obj, out, depth=0):
    """The tensors in a structure of plain values, in encoding order."""
    if depth > 20:
        return out
    if type(obj) is torch.Tensor or (isinstance(obj, torch.Tensor) and not isinstance(obj, Remote)):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out, depth + 1)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out, depth + 1)
    return out


# -------------------------------------------------------------------------------------- the endpoint
class Endpoint(Handles, Codec):
    """One side of the channel. `trusted`: the grader's side (strict decoding, a restricted set of requests
    served); otherwise the learner's side, which serves every request of the grader."""

    def __init__(self, sock: socket.socket, trusted: bool, namespace: dict | None = None):
        self.channel = Channel.for_grader(sock) if trusted else Channel(sock)
        self.trusted = trusted
        # trusted side: the tensor classes of the call being answered
        self.subclasses: tuple = ()
        # trusted side: handle -> the grader's own copy of what it built
        self.built: dict[int, object] = {}
        self.backwarded: set[int] = set()           # trusted side: records whose gradients were already given
        self.namespace = namespace if namespace is not None else {}
        self.ids = itertools.count(1)
        self.exports: dict[int, object] = {}        # handle -> our object the other side may use
        self.export_of: dict[int, int] = {}         # id(object) -> handle
        self.callable_ok: set[int] = set()          # handles the other side may call (trusted side)
        self.proxies: dict[int, Remote] = {}        # the other side's handle -> our proxy
        self.records: dict[int, tuple] = {}         # backward records of calls we served
        self.depth = 0
        self.done = None                            # the trusted side's last word (learner's side)
        self.watch = None                           # learner's side: (enter, exit) around the learner's code
        self._dummy = torch.zeros((), requires_grad=True)
        self._synced = (None, None)                 # the random state both sides last agreed on
        # exceptions of the grader's that are not answers (its time limit)
        self.passthrough: tuple = ()

    @property
    def ch(self) -> Channel:
        """The channel, by the name autograder/checker.py, autograder/serve.py and tests/grading.py use."""
        return self.channel

    # ------------------------------------------------------------------ requests
    def _state(self, blobs) -> dict:
        """The random state, grad mode and default device to hand over; the random state only when it
        changed since both sides last agreed on it."""
        state = {"grad": torch.is_grad_enabled()}
        rng = torch.get_rng_state().numpy().tobytes()
        py = random.getstate()
        if (rng, py) != self._synced:
            blobs.append(rng)
            state["rng"] = len(blobs) - 1
            state["py"] = [py[0], list(py[1]), py[2]]
            self._synced = (rng, py)
        device = str(torch.get_default_device())
        if device != "cpu":
            state["device"] = device
        return state

    def _set_state(self, state, blobs) -> None:
        """Take the other side's random state, where it sent one."""
        if not isinstance(state, dict) or "rng" not in state:
            return
        raw = self._blob(blobs, state.get("rng"))
        torch.set_rng_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
        py = state.get("py")
        if isinstance(py, list) and len(py) == 3 and isinstance(py[1], list) and len(py[1]) == 625 \
                and all(type(x) is int for x in py[1]):
            try:
                random.setstate((py[0], tuple(py[1]), py[2]))
            except (TypeError, ValueError):
                pass
        self._synced = (torch.get_rng_state().numpy().tobytes(), random.getstate())

    def request(self, op: str, **fields):
        """Send a request and wait for its answer, serving the other side's requests meanwhile."""
        blobs: list = []
        header = {"k": "req", "id": next(self.ids), "op": op}
        for key, value in fields.items():
            header[key] = value if key in ("h", "name", "where", "fn", "record", "cls", "module") else \
                self.encode(value, blobs)
        return self._exchange(header, blobs)[0]

    def _exchange(self, header, blobs):
        """Send a request; serve the other side's requests until its answer comes (_answer)."""
        if self.depth >= MAX_DEPTH:
            raise RecursionError("calls between the grader and the notebook nested too deep")
        self.channel.send(header, blobs)
        self.depth += 1
        try:
            while True:
                msg, got = self.channel.recv()
                kind = msg.get("k")
                if kind == "req":
                    self.serve(msg, got)
                elif kind == "rep" and msg.get("id") == header["id"]:
                    return self._answer(msg, got)
                elif kind == "done" and not self.trusted:
                    self.done = msg
                    raise ChannelError("the grader finished")
                # a late answer to a request given up on (after a time limit): dropped
        finally:
            self.depth -= 1

    def _answer(self, msg, blobs):
        """(value, its tensors that need gradients, the arguments changed in place, the backward record) of an
        answer; the error it describes raised (the policy rebuilds it)."""
        diff: list = []
        if "state" in msg:
            self._set_state(msg["state"], blobs)
        if not msg.get("ok"):
            raise policy.rebuilt_exception(msg.get("exc"))
        value = self.decode(msg.get("v"), blobs, diff=diff)
        mutated = [self.decode(m, blobs) for m in msg.get("mut") or []] if isinstance(msg.get("mut"),
                                                                                      list) else []
        return value, diff, mutated, msg.get("record")

    def build(self, factory, args, kwargs):
        """A check's object whose parameters the learner's code must own (a model handed to make_optimizer):
        built here, by the grader's own factory, then made on the other side from its description (PyTorch's
        own module classes and the values built here); copy.deepcopy of it gives the grader's own copy, as
        built."""
        local = factory(*args, **kwargs)
        blobs: list = []
        header = {"k": "req", "id": next(self.ids), "op": "build", "spec": self.encode(_module_spec(local),
                                                                                       blobs)}
        proxy = self._exchange(header, blobs)[0]
        if not isinstance(proxy, Remote):
            raise ChannelError("a built object that did not stay on the other side")
        self.built[object.__getattribute__(proxy, "_handle")] = local
        return proxy

    def call(self, handle, args, kwargs):
        """Call the other side's object `handle`; through the autograd bridge when gradients may be needed."""
        return self._call(handle, None, args, kwargs)

    def call_method(self, handle, name, args, kwargs):
        """Call the method `name` of the other side's object `handle` (a parameter's in-place methods)."""
        return self._call(handle, name, args, kwargs)

    def _call(self, handle, method, args, kwargs):
        """The call as it is sent (_call_now), inside _Bridge when gradients are enabled, so that autograd
        links its outputs to its inputs."""
        fields = {"h": handle, "method": method, "args": list(args), "kwargs": dict(kwargs)}
        if not torch.is_grad_enabled():
            value, _, _ = self._call_now(fields, grad=False)
            return value
        inputs = [t for t in _tensors([fields["args"], fields["kwargs"]], []) if t.requires_grad]
        call = _Call(self, fields)
        call.n_inputs = len(inputs)
        _Bridge.apply(call, self._dummy, *inputs)
        return call.result

    def _call_now(self, fields, grad: bool = True):
        """(result, backward record or None, the outputs that need gradients)."""
        blobs: list = []
        diff: list = []
        header = {"k": "req", "id": next(self.ids), "op": "call", "h": fields["h"],
                  "method": fields["method"],
                  "grad": grad, "state": self._state(blobs)}
        header["state"]["grad"] = grad
        sent = []
        header["args"] = self.encode(fields["args"], blobs, diff if grad else None, export_callables=True)
        header["kwargs"] = self.encode(fields["kwargs"], blobs, diff if grad else None, export_callables=True)
        _tensors([fields["args"], fields["kwargs"]], sent)
        saved = self.subclasses
        # the answer may be of a tensor class the check sent (stage 05's ids "on another device")
        if self.trusted:
            self.subclasses = policy.answer_classes(sent)
        try:
            value, out_diff, mutated, record = self._exchange(header, blobs)
        finally:
            self.subclasses = saved
        for pair in mutated:  # arguments the callee changed in place: changed here too
            if isinstance(pair,
                          list) and len(pair) == 2 and type(pair[0]) is int and 0 <= pair[0] < len(sent) \
                    and isinstance(pair[1], torch.Tensor):
                with torch.no_grad():
                    sent[pair[0]].data = pair[1].to(sent[pair[0]].dtype)
        out_diff = out_diff if grad else []
        return value, (record if out_diff else None), out_diff

    # ------------------------------------------------------------------ serving
    def serve(self, msg, blobs) -> None:
        """Answer the other side's request `msg` by its `_op_` method; its error is answered as a
        description."""
        request_id, op = msg.get("id"), msg.get("op")
        reply: dict = {"k": "rep", "id": request_id}
        out: list = []
        try:
            if self.trusted:
                policy.check_request(op)
            handler = getattr(self, f"_op_{op}", None)
            if handler is None:
                raise ChannelError(f"an unknown request {str(op)[:30]!r}")
            saved, self.subclasses = self.subclasses, ()
            try:
                result = handler(msg, blobs, reply, out)
            finally:
                self.subclasses = saved
            reply["ok"] = True
            if "v" not in reply:
                reply["v"] = self.encode(result, out)
        except ChannelError:
            raise
        except BaseException as e:  # noqa: BLE001  (the learner's code's errors, an interrupt included)
            if self.trusted and (not isinstance(e, Exception) or isinstance(e, self.passthrough)):
                raise  # the grader's own time limit: not an answer to send
            out = []
            reply = {"k": "rep", "id": request_id, "ok": False, "exc": self._describe(e)}
            if "state" in msg:
                reply["state"] = self._state(out)
        self.channel.send(reply, out)

    def _describe(self, e) -> dict:
        """An error as it crosses: its type's name, its message and the learner's frames (no grader's, no
        torch's)."""
        frames = []
        for f in traceback.extract_tb(e.__traceback__):
            name = f.filename.replace("\\", "/")
            if "/autograder/" in name or "/torch/" in name:
                continue
            frames.append([f.filename, f.lineno or 0, f.name, (f.line or "")[:200]])
        try:
            text = str(e)[:2000]
        except Exception:  # noqa: BLE001
            text = ""
        return {"type": type(e).__name__, "msg": text, "tb": frames[-20:]}

    def _target(self, msg):
        handle = msg.get("h")
        if handle not in self.exports:
            raise ChannelError("a request for an object that was never given out")
        return self.exports[handle]

    def _attribute_name(self, name) -> str:
        """A request's attribute name: a string, on the grader's side one the policy shows."""
        if not isinstance(name, str):
            raise ChannelError("an attribute name that is not a string")
        if self.trusted:
            policy.check_attribute(name)
        return name

    def _op_resolve(self, msg, blobs, reply, out):
        name = msg.get("name")
        if not isinstance(name, str) or name not in self.namespace:
            raise NameError(f"name {name!r} is not defined")
        obj = self.namespace[name]
        reply["v"] = self.encode(obj, out, force_handle=isinstance(obj, torch.Tensor))
        return None

    def _op_getattr(self, msg, blobs, reply, out):
        obj = self._target(msg)
        name = self._attribute_name(msg.get("name"))
        value = getattr(obj, name)
        force = (not self.trusted and isinstance(obj, torch.Tensor) and name == "data")
        if self.trusted and callable(value) and not isinstance(value, (torch.nn.Module, type)):
            policy.check_bound_method(obj, name, value)
            reply["v"] = self.encode(value, out, export_callables=True)
            return None
        reply["v"] = self.encode(value, out, force_handle=force)
        return None

    def _op_setattr(self, msg, blobs, reply, out):
        obj = self._target(msg)
        setattr(obj, self._attribute_name(msg.get("name")), self.decode(msg.get("v"), blobs))

    def _op_delattr(self, msg, blobs, reply, out):
        obj = self._target(msg)
        delattr(obj, self._attribute_name(msg.get("name")))

    def _op_len(self, msg, blobs, reply, out):
        return len(self._target(msg))

    def _op_iter(self, msg, blobs, reply, out):
        items = []
        for i, x in enumerate(iter(self._target(msg))):
            if i >= 100_000:
                raise ValueError("more than 100000 items")
            items.append(x)
        return items

    def _op_getitem(self, msg, blobs, reply, out):
        return self._target(msg)[self.decode(msg.get("key"), blobs)]

    def _op_setitem(self, msg, blobs, reply, out):
        self._target(msg)[self.decode(msg.get("key"), blobs)] = self.decode(msg.get("v"), blobs)

    def _op_contains(self, msg, blobs, reply, out):
        return bool(self.decode(msg.get("v"), blobs) in self._target(msg))

    def _op_repr(self, msg, blobs, reply, out):
        return repr(self._target(msg))[:2000]

    def _op_dir(self, msg, blobs, reply, out):
        names = dir(self._target(msg))
        return (policy.shown(names) if self.trusted else names)[:2000]

    def _op_value(self, msg, blobs, reply, out):
        obj = self._target(msg)
        if not isinstance(obj, torch.Tensor):
            raise TypeError("not a tensor")
        return obj.detach().as_subclass(torch.Tensor)

    def _op_torchfn(self, msg, blobs, reply, out):
        obj = self._target(msg)
        name = msg.get("fn")
        if not isinstance(name, str) or not name.endswith("_") or name.startswith("_"):
            raise ChannelError("a malformed in-place request")
        args, kwargs = self.decode(msg.get("args"), blobs), self.decode(msg.get("kwargs"), blobs)
        fn = getattr(torch.nn.init, name) if msg.get("where") == "init" else getattr(torch.Tensor, name)
        fn(obj, *args, **kwargs)
        return None

    def _callee(self, msg):
        """What a call request calls: the object, or its method; on the grader's side only as the policy
        allows."""
        obj = self._target(msg)
        method = msg.get("method")
        if method is not None:
            if self.trusted or not isinstance(method, str):
                policy.check_method(method)
            return getattr(obj, method)
        if self.trusted:
            policy.check_callable(obj, msg.get("h"), self.callable_ok)
        return obj

    def _op_call(self, msg, blobs, reply, out):
        """Call under the caller's random state, grad mode and default device; answer the result, the
        arguments changed in place, a record for the gradients of the outputs, and this side's random
        state."""
        fn = self._callee(msg)
        state = msg.get("state") if isinstance(msg.get("state"), dict) else {}
        self._set_state(state, blobs)
        leaves: list = []
        args = self.decode(msg.get("args"), blobs, leaves=leaves)
        kwargs = self.decode(msg.get("kwargs"), blobs, leaves=leaves)
        if not isinstance(args, list) or not isinstance(kwargs, dict) or not all(isinstance(k, str) for k
                                                                                 in kwargs):
            raise ChannelError("malformed call arguments")
        before = [_layout(t) for t in leaves]
        grad = bool(state.get("grad", True))
        device = state.get("device")
        with torch.set_grad_enabled(grad), (torch.device(str(device)[:40]) if device
                                            else contextlib.nullcontext()):
            if self.watch is not None:
                with self.watch():
                    result = fn(*args, **kwargs)
            else:
                result = fn(*args, **kwargs)
            if hasattr(type(result), "__next__") and hasattr(type(result), "__iter__") and \
                    not isinstance(result, (torch.Tensor, str, bytes, Remote)):
                result = self._op_iter_value(result)
        diff: list = []
        reply["v"] = self.encode(result, out, diff if grad else None)
        mutated = [self.encode([i, t.detach()], out) for i, (t, was) in enumerate(zip(leaves, before))
                   if _layout(t) != was]
        if mutated:
            reply["mut"] = mutated
        if diff:
            record = next(self.ids)
            self.records[record] = ([t for t in leaves if t.requires_grad], diff)
            reply["record"] = record
        reply["state"] = self._state(out)
        return None

    @staticmethod
    def _op_iter_value(it):
        items = _Iterated()
        for i, x in enumerate(it):
            if i >= 100_000:
                raise ValueError("more than 100000 items")
            items.append(x)
        return items

    def _op_backward(self, msg, blobs, reply, out):
        record = self.records.get(msg.get("record"))
        if record is None:
            raise ChannelError("a backward request for an unknown call")
        if self.trusted:  # once per call answered: no pumping gradients into the grader's modules
            policy.check_backward(msg.get("record"), self.backwarded)
        leaves, outputs = record
        grads = self.decode(msg.get("grads"), blobs)
        if not isinstance(grads, list) or len(grads) > len(outputs):
            raise ChannelError("malformed gradients")
        pairs = [(o, g) for o, g in zip(outputs, grads) if isinstance(g, torch.Tensor)]
        policy.check_gradients(pairs)
        saved = [t.grad for t in leaves]
        for t in leaves:
            t.grad = None
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g.to(o.dtype) for o, g in pairs],
                                    retain_graph=True)
        got = [t.grad for t in leaves]
        for t, s in zip(leaves, saved):
            t.grad = s
        return got

    def _op_spec(self, msg, blobs, reply, out):
        return _module_spec(self._target(msg))

    def _op_isinstance(self, msg, blobs, reply, out):
        cls = self._target({"h": msg.get("cls")})
        return isinstance(self._target(msg), cls) if isinstance(cls, type) else False

    def _op_issubclass(self, msg, blobs, reply, out):
        cls, sub = self._target({"h": msg.get("cls")}), self._target(msg)
        return issubclass(sub, cls) if isinstance(cls, type) and isinstance(sub, type) else False

    def _op_build(self, msg, blobs, reply, out):
        """A module the grader built (autograder.checks._util.learner_side), made on this side from its
        description: PyTorch's own classes, the grader's values."""
        module = _materialize(self.decode(msg.get("spec"), blobs))
        reply["v"] = self.encode(module, out, force_handle=True)
        return None

    def _op_tempdir(self, msg, blobs, reply, out):
        """A new folder in this side's temporary folder, for a path a check hands to the learner's code (a
        tokenizer's save and load): made here, by this side's user, so that the grader never touches a path
        this side can write."""
        import tempfile
        return tempfile.mkdtemp(prefix="check-")

    def _op_ping(self, msg, blobs, reply, out):
        return "pong"

    def _op_forget(self, msg, blobs, reply, out):
        self.records.clear()
        return None

