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
"""
from __future__ import annotations

import itertools
import json
import random
import socket
import struct
import sys
import traceback
import types

import torch

MAX_MESSAGE = 256 << 20      # bytes in one message, blobs included (what the notebook's side accepts)
MAX_NODES = 2_000_000       # values in one message
# What the grader's side accepts from the notebook: a message's JSON and its blobs are read only up to these sizes,
# and the JSON's values are counted in its raw bytes before it is decoded (a 256 MB message of empty lists built
# whole took a checker to 1.7 GB). The largest message of an honest notebook across every check is under 1 MB.
TRUSTED_HEAD = 4 << 20       # bytes of one message's JSON
TRUSTED_MESSAGE = 64 << 20   # bytes of one message, blobs included
TRUSTED_NODES = 200_000      # values in one message (counted as its JSON's brackets, braces and commas)
MAX_DEPTH = 64              # nested calls between the two sides
DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}
# what the learner's side may call on the grader's objects, besides calling the object itself
ALLOWED_METHODS = {"forward", "encode", "decode", "train", "eval", "parameters", "named_parameters", "buffers",
                   "named_buffers", "modules", "named_modules", "children", "named_children", "state_dict",
                   "extra_repr", "size", "dim", "numel", "items", "keys", "values", "get"}
ALLOWED_PRIVATE = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "__name__",
                   "__qualname__", "__module__", "__doc__"}
# builtin exceptions rebuilt by name on the grader's side (anything else becomes RemoteError)
EXCEPTIONS = {e.__name__: e for e in (
    ValueError, TypeError, RuntimeError, IndexError, KeyError, AttributeError, NotImplementedError, NameError,
    ZeroDivisionError, AssertionError, RecursionError, MemoryError, OverflowError, ArithmeticError, LookupError,
    FileNotFoundError, OSError, UnicodeError, UnicodeDecodeError, UnicodeEncodeError, ImportError,
    ModuleNotFoundError, UnboundLocalError, FloatingPointError, IsADirectoryError, PermissionError)}
# tensor methods that must run on the learner's side for a parameter handle (identity, storage, in place)
REMOTE_TENSOR_ATTRS = {"data", "grad", "requires_grad", "is_leaf", "grad_fn", "data_ptr", "untyped_storage",
                       "_version", "requires_grad_", "retain_grad", "is_set_to"}


class ChannelError(Exception):
    """The other side broke the protocol, sent too much, or went away."""


class RemoteError(Exception):
    """An exception of the learner's code that is not a builtin exception class."""


# ------------------------------------------------------------------------------------------ framing
def _recv_exact(sock, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ChannelError("the other side closed the connection")
        got += k
    return buf


class Channel:
    """Length-prefixed messages: a JSON header and raw blobs."""

    def __init__(self, sock: socket.socket, limit: int = MAX_MESSAGE, head_limit: int | None = None,
                 nodes: int | None = None):
        self.sock, self.limit = sock, limit
        self.head_limit = limit if head_limit is None else head_limit
        self.nodes = nodes

    def send(self, header: dict, blobs=()) -> None:
        head = json.dumps(header, allow_nan=False, separators=(",", ":")).encode()
        parts = [struct.pack("<II", len(head), len(blobs)), head]
        for b in blobs:
            b = memoryview(b).cast("B")
            parts += [struct.pack("<Q", len(b)), b]
        self.sock.sendall(b"".join(parts))

    def recv(self) -> tuple[dict, list]:
        n_head, n_blobs = struct.unpack("<II", _recv_exact(self.sock, 8))
        if n_head > self.head_limit or n_blobs > 100_000:
            raise ChannelError(f"a message of {n_head} bytes and {n_blobs} blobs is over the limit")
        raw = bytes(_recv_exact(self.sock, n_head))
        if self.nodes is not None:  # counted before anything is built: each value but the first follows a , [ or {
            found = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
            if found > self.nodes:
                raise ChannelError(f"a message of more than {self.nodes} values")
        try:
            header = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ChannelError(f"a message that is not JSON, or nested too deep: {type(e).__name__}") from None
        del raw
        if not isinstance(header, dict):
            raise ChannelError("a message that is not a JSON object")
        blobs, total = [], n_head
        for _ in range(n_blobs):
            (size,) = struct.unpack("<Q", _recv_exact(self.sock, 8))
            total += size
            if total > self.limit:
                raise ChannelError(f"a message over {self.limit >> 20} MB")
            blobs.append(_recv_exact(self.sock, size))
        return header, blobs


# ------------------------------------------------------------------------------------------- proxies
_FAKE_CLASSES: dict = {}


def _local_class(info: dict):
    """The class a proxy says it is, for isinstance: the library's own class where the object's class is a
    library class (torch.nn.Linear), else an empty class of the same name over the nearest library base."""
    mro = [tuple(x) for x in info.get("mro") or [] if isinstance(x, (list, tuple)) and len(x) == 2]
    key = tuple(mro)
    if key in _FAKE_CLASSES:
        return _FAKE_CLASSES[key]
    if mro and mro[0][0] == "builtins":
        builtin = {"type": type, "function": types.FunctionType, "method": types.MethodType,
                   "builtin_function_or_method": types.BuiltinFunctionType}.get(mro[0][1])
        if builtin is not None:
            _FAKE_CLASSES[key] = builtin
            return builtin
    base = object
    for module, qualname in mro:
        if isinstance(module, str) and (module == "torch" or module.startswith("torch.")) and "." not in qualname:
            found = getattr(sys.modules.get(module), qualname, None)
            if isinstance(found, type):
                base = found
                break
    if mro and mro[0][0] == getattr(base, "__module__", None) and mro[0][1] == base.__qualname__:
        cls = base
    else:
        name = str(mro[0][1]).rsplit(".", 1)[-1] if mro else "object"
        cls = type(name if name.isidentifier() else "Remote", (base,) if base is not object else (), {
            "__module__": str(mro[0][0]) if mro else "remote", "__doc__": "a proxy's class, never instantiated"})
    _FAKE_CLASSES[key] = cls
    return cls


class Remote:
    """A proxy of an object on the other side. Attribute reads, writes, calls, len, iteration and indexing
    are forwarded; equality and hashing are by identity (the same remote object is the same proxy)."""
    __slots__ = ("_ep", "_h", "_info", "__weakref__")

    def __init__(self, ep, h, info):
        object.__setattr__(self, "_ep", ep)
        object.__setattr__(self, "_h", h)
        object.__setattr__(self, "_info", info)

    @property
    def __class__(self):
        return _local_class(object.__getattribute__(self, "_info"))

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name not in ("__name__", "__qualname__", "__module__",
                                                                          "__doc__", "__wrapped__"):
            raise AttributeError(name)
        return self._ep.request("getattr", h=self._h, name=name)

    def __setattr__(self, name, value):
        self._ep.request("setattr", h=self._h, name=name, v=value)

    def __delattr__(self, name):
        self._ep.request("delattr", h=self._h, name=name)

    def __call__(self, *args, **kwargs):
        return self._ep.call(self._h, args, kwargs)

    def __len__(self):
        n = self._ep.request("len", h=self._h)
        if type(n) is not int or n < 0:
            raise TypeError("len() of the proxy is not a non-negative int")
        return n

    def __iter__(self):
        items = self._ep.request("iter", h=self._h)
        return iter(items if isinstance(items, list) else [])

    def __getitem__(self, key):
        return self._ep.request("getitem", h=self._h, key=key)

    def __setitem__(self, key, value):
        self._ep.request("setitem", h=self._h, key=key, v=value)

    def __contains__(self, item):
        return bool(self._ep.request("contains", h=self._h, v=item) is True)

    def __repr__(self):
        text = self._ep.request("repr", h=self._h)
        return text[:2000] if isinstance(text, str) else "<remote object>"

    __str__ = __repr__

    def __format__(self, spec):
        return format(repr(self), spec)

    def __bool__(self):
        return True

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return object.__hash__(self)

    def __dir__(self):
        names = self._ep.request("dir", h=self._h)
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    @property
    def __dict__(self):
        found = self._ep.request("getattr", h=self._h, name="__dict__")
        return found if isinstance(found, dict) else {}

    def __deepcopy__(self, memo):
        """copy.deepcopy of the learner's side's module: a local copy, for modules made of PyTorch's own
        classes (a check's reference copy of a model it built on that side)."""
        ep, h = object.__getattribute__(self, "_ep"), object.__getattribute__(self, "_h")
        if h in ep.built:  # a module the grader built: its own copy, never a description from the other side
            import copy
            return copy.deepcopy(ep.built[h], memo)
        return _materialize(ep.request("spec", h=h))

    def __instancecheck__(self, instance):
        """isinstance(x, proxy of a class): asked of the other side for its own objects, False for ours."""
        if not isinstance(instance, Remote) or object.__getattribute__(instance, "_ep") is not self._ep:
            return False
        return self._ep.request("isinstance", h=object.__getattribute__(instance, "_h"), cls=self._h) is True

    def __subclasscheck__(self, sub):
        if not isinstance(sub, Remote) or object.__getattribute__(sub, "_ep") is not self._ep:
            return False
        return self._ep.request("issubclass", h=object.__getattribute__(sub, "_h"), cls=self._h) is True


def _module_spec(m, depth=0):
    """The description of a module made of PyTorch's own classes that _materialize builds again."""
    if m is None:
        return None
    if not isinstance(m, torch.nn.Module) or depth > 20:
        raise TypeError("only modules can be copied")
    return {"module": type(m).__module__, "qualname": type(m).__qualname__,
            "plain": {k: v for k, v in vars(m).items() if not k.startswith("_") and
                      isinstance(v, (int, float, bool, str, tuple, type(None)))},
            "params": {k: (None if p is None else p.detach(), p is not None and p.requires_grad)
                       for k, p in m._parameters.items()},
            "buffers": {k: (None if b is None else b.detach()) for k, b in m._buffers.items()},
            "children": {k: _module_spec(c, depth + 1) for k, c in m._modules.items()}}


def _materialize(spec, depth=0):
    """A local nn.Module from the description `spec` of a module made of PyTorch's own classes."""
    if not isinstance(spec, dict) or depth > 20:
        raise TypeError("not a module description")
    module, qualname = str(spec.get("module", "")), str(spec.get("qualname", ""))
    cls = getattr(sys.modules.get(module), qualname, None) if module.startswith("torch.nn") else None
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"cannot copy a {qualname[:60]} here: only modules made of PyTorch's own classes")
    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    for k, v in (spec.get("plain") or {}).items():
        if isinstance(k, str) and not k.startswith("_") and isinstance(v, (int, float, bool, str, tuple, type(None))):
            object.__setattr__(obj, k, v)
    for k, (t, rg) in (spec.get("params") or {}).items():
        obj.register_parameter(str(k), None if t is None else torch.nn.Parameter(t.clone(), requires_grad=bool(rg)))
    for k, t in (spec.get("buffers") or {}).items():
        obj.register_buffer(str(k), None if t is None else t.clone())
    for k, child in (spec.get("children") or {}).items():
        obj.add_module(str(k), None if child is None else _materialize(child, depth + 1))
    return obj


def _value(x):
    return x._fetch() if isinstance(x, RemoteTensor) else x


def _unwrap(obj):
    if isinstance(obj, RemoteTensor):
        return obj._fetch()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_unwrap(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _unwrap(v) for k, v in obj.items()}
    return obj


def _binary(name):
    def op(self, *args):
        return getattr(self._fetch(), name)(*[_value(a) for a in args])
    op.__name__ = name
    return op


class RemoteTensor(Remote):
    """A proxy of a tensor that must stay on the other side (a parameter of the learner's module, its .data):
    reading it gives a copy, writing to it (in-place methods, torch.nn.init, __setitem__, .data = ...) changes
    the original."""
    __slots__ = ()

    def _fetch(self):
        value = self._ep.request("value", h=self._h)
        if not isinstance(value, torch.Tensor) or isinstance(value, Remote):
            raise TypeError("the value of a remote tensor is not a tensor")
        return value

    def __getattr__(self, name):
        if name in REMOTE_TENSOR_ATTRS or (name.endswith("_") and not name.startswith("_")):
            if name in ("data_ptr", "_version", "data", "grad", "requires_grad", "is_leaf", "grad_fn"):
                return self._ep.request("getattr", h=self._h, name=name)
            ep, h = self._ep, self._h
            return lambda *args, **kwargs: ep.call_method(h, name, args, kwargs)
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self._fetch(), name)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        module = getattr(func, "__module__", "") or ""
        if args and isinstance(args[0], RemoteTensor) and (module == "torch.nn.init" or (
                name.endswith("_") and not name.startswith("_") and hasattr(torch.Tensor, name))):
            where = "init" if module == "torch.nn.init" else "method"
            return args[0]._ep.request("torchfn", h=args[0]._h, where=where, fn=name, args=list(args[1:]),
                                       kwargs=kwargs)
        return func(*_unwrap(list(args)), **_unwrap(kwargs))

    def __setitem__(self, key, value):
        self._ep.call_method(self._h, "__setitem__", (key, value), {})

    def __getitem__(self, key):
        return self._fetch()[_value(key)]

    def __len__(self):
        return len(self._fetch())

    def __iter__(self):
        return iter(self._fetch())

    def __bool__(self):
        return bool(self._fetch())

    def __float__(self):
        return float(self._fetch())

    def __int__(self):
        return int(self._fetch())

    def __index__(self):
        return self._fetch().__index__()

    def __repr__(self):
        return repr(self._fetch())

    __str__ = __repr__

    def __format__(self, spec):
        return format(self._fetch(), spec)

    def __hash__(self):
        return object.__hash__(self)

    __eq__ = _binary("__eq__")
    __ne__ = _binary("__ne__")


for _name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv", "mod",
              "pow", "rpow", "matmul", "rmatmul", "lt", "le", "gt", "ge", "and", "or", "xor", "neg", "pos", "abs",
              "invert"):
    setattr(RemoteTensor, f"__{_name}__", _binary(f"__{_name}__"))


# -------------------------------------------------------------------------------------- the bridge
class _Iterated(list):
    """The items of an iterator or generator that a call returned, to cross as a list and be an iterator
    again on the other side (`next(model.parameters())`)."""


class _Call:
    """One call across, run inside _Bridge.forward so that autograd links its outputs to its inputs."""

    def __init__(self, ep, fields):
        self.ep, self.fields = ep, fields
        self.result = None
        self.record = None
        self.diff = []
        self.n_inputs = 0


class _Bridge(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call, dummy, *inputs):
        call.result, call.record, call.diff = call.ep._call_now(call.fields)
        ctx.call = call
        marker = dummy.new_zeros(())
        ctx.mark_non_differentiable(marker)
        return (marker, *call.diff)

    @staticmethod
    def backward(ctx, _marker, *grads):
        call = ctx.call
        if call.record is None:
            return (None, None) + (None,) * call.n_inputs
        got = call.ep.request("backward", record=call.record, grads=list(grads))
        got = list(got) if isinstance(got, (list, tuple)) else []
        got = (got + [None] * call.n_inputs)[:call.n_inputs]
        return (None, None, *[g if isinstance(g, torch.Tensor) else None for g in got])


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
class Endpoint:
    """One side of the channel. `trusted`: the grader's side (strict decoding, a restricted set of requests
    served); otherwise the learner's side, which serves every request of the grader."""

    def __init__(self, sock: socket.socket, trusted: bool, namespace: dict | None = None):
        self.ch = Channel(sock, TRUSTED_MESSAGE, TRUSTED_HEAD, TRUSTED_NODES) if trusted else Channel(sock)
        self.trusted = trusted
        self.subclasses: tuple = ()                 # trusted side: the tensor classes of the call being answered
        self.built: dict[int, object] = {}          # trusted side: handle -> the grader's own copy of what it built
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
        self.passthrough: tuple = ()                # exceptions of the grader's that are not answers (its time limit)

    # ------------------------------------------------------------------ handles
    def export(self, obj, callable_ok: bool = False) -> int:
        h = self.export_of.get(id(obj))
        if h is None:
            h = next(self.ids)
            self.exports[h], self.export_of[id(obj)] = obj, h
        if callable_ok:
            self.callable_ok.add(h)
        return h

    def forget(self) -> None:
        """Drop every handle and record (between graded names)."""
        self.exports.clear()
        self.export_of.clear()
        self.callable_ok.clear()
        self.records.clear()
        self.proxies.clear()

    def _info(self, obj) -> dict:
        cls = type(obj)
        try:
            mro = [[str(getattr(c, "__module__", "")), str(getattr(c, "__qualname__", c.__name__))]
                   for c in cls.__mro__][:12]
        except Exception:  # noqa: BLE001
            mro = []
        info = {"mro": mro, "callable": callable(obj)}
        if isinstance(obj, type):
            info["mro"] = [["builtins", "type"]]
        if isinstance(obj, torch.Tensor):
            info["tensor"] = True
        return info

    # ------------------------------------------------------------------ encoding
    def enc(self, v, blobs: list, diff: list | None = None, export_callables: bool = False, depth: int = 0,
            force_handle: bool = False):
        if depth > 40:
            raise ValueError("a value nested more than 40 levels deep cannot cross to the grader")
        t = type(v)
        if v is None or t is bool or t is str:
            return v
        if t is int:
            return v if -(1 << 53) < v < (1 << 53) else {"$": "int", "v": str(v)}
        if t is float:
            return {"$": "f", "v": repr(v)}
        if not force_handle and isinstance(v, torch.Tensor) and not isinstance(v, Remote) and (
                self.trusted or not isinstance(v, torch.nn.Parameter)):
            return self._enc_tensor(v, blobs, diff)
        if t is list:
            return [self.enc(x, blobs, diff, export_callables, depth + 1) for x in v]
        if t is _Iterated:
            return {"$": "iter", "v": [self.enc(x, blobs, diff, export_callables, depth + 1) for x in v]}
        if t is tuple:
            return {"$": "tuple", "v": [self.enc(x, blobs, diff, export_callables, depth + 1) for x in v]}
        if t is dict or (not self.trusted and isinstance(v, dict) and type(v).__module__ == "collections"):
            return {"$": "dict", "k": [self.enc(k, blobs, None, False, depth + 1) for k in v.keys()],
                    "v": [self.enc(x, blobs, diff, export_callables, depth + 1) for x in v.values()]}
        if t is torch.Size:
            return {"$": "size", "v": [int(s) for s in v]}
        if t is torch.dtype:
            return {"$": "dtype", "v": str(v).replace("torch.", "")}
        if t is torch.device:
            return {"$": "device", "v": str(v)}
        if t is slice:
            return {"$": "slice", "v": [self.enc(x, blobs, None, False, depth + 1) for x in (v.start, v.stop, v.step)]}
        if v is Ellipsis:
            return {"$": "ellipsis"}
        if t is bytes or t is bytearray:
            blobs.append(bytes(v))
            return {"$": "bytes", "b": len(blobs) - 1}
        if t is set or t is frozenset:
            return {"$": t.__name__, "v": [self.enc(x, blobs, None, False, depth + 1) for x in v]}
        if isinstance(v, Remote) and object.__getattribute__(v, "_ep") is self:
            return {"$": "back", "h": object.__getattribute__(v, "_h")}
        if not self.trusted:
            # the learner's side: builtin subclasses and numpy scalars as the plain values they stand for
            if isinstance(v, bool):
                return bool(v)
            if isinstance(v, int):
                return self.enc(int(v), blobs)
            if isinstance(v, float):
                return self.enc(float(v), blobs)
            if isinstance(v, str):
                return str(v)
            if type(v).__module__ == "numpy" and hasattr(v, "item") and getattr(v, "ndim", None) == 0:
                return self.enc(v.item(), blobs)
        if self.trusted and isinstance(v, types.ModuleType):
            raise TypeError("the grader does not hand out modules")
        h = self.export(v, callable_ok=export_callables)
        return {"$": "h", "h": h, "i": self._info(v)}

    def _enc_tensor(self, v, blobs, diff):
        node = {"$": "t", "dt": str(v.dtype).replace("torch.", ""), "s": [int(s) for s in v.shape]}
        if node["dt"] not in DTYPES:
            raise TypeError(f"a tensor of dtype {v.dtype} cannot cross")
        if v.device.type == "meta":
            node["meta"] = True
        else:
            data = v.detach()
            if data.device.type != "cpu":
                data = data.cpu()
            data = data.as_subclass(torch.Tensor).contiguous()
            if data.is_conj():
                data = data.resolve_conj()
            if data.is_neg():
                data = data.resolve_neg()
            flat = data.reshape(-1)
            blobs.append(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
            node["b"] = len(blobs) - 1
        if type(v) is not torch.Tensor and not isinstance(v, torch.nn.Parameter):
            module = type(v).__module__ or ""
            if module.startswith("autograder.checks."):
                node["sub"] = [module, type(v).__qualname__]
        if v.requires_grad and diff is not None:
            diff.append(v)
            node["d"] = len(diff) - 1
        elif v.requires_grad:
            node["rg"] = True
        return node

    # ------------------------------------------------------------------ decoding
    def dec(self, node, blobs, count: list | None = None, depth: int = 0, leaves: list | None = None,
            diff: list | None = None):
        """The value of `node`. `leaves`: collects every tensor (arguments of a call we serve, which become
        leaves that need gradients where the caller's did); `diff`: collects the tensors of an answer that
        the other side marked as needing gradients."""
        if count is None:
            count = [0]
        count[0] += 1
        if count[0] > MAX_NODES or depth > 45:
            raise ChannelError("a message with too many values, or nested too deep")
        if node is None or isinstance(node, (bool, str)):
            return node
        if isinstance(node, int):
            return int(node)
        if isinstance(node, float):
            return float(node)
        if isinstance(node, list):
            return [self.dec(x, blobs, count, depth + 1, leaves, diff) for x in node]
        if not isinstance(node, dict):
            raise ChannelError("a value of an unknown kind")
        tag = node.get("$")
        if tag == "f":
            return float(str(node.get("v")))
        if tag == "int":
            return int(str(node.get("v"))[:400])
        if tag == "tuple":
            return tuple(self.dec(x, blobs, count, depth + 1, leaves, diff) for x in self._list(node))
        if tag == "iter":
            return iter([self.dec(x, blobs, count, depth + 1, leaves, diff) for x in self._list(node)])
        if tag == "dict":
            keys = [self.dec(k, blobs, count, depth + 1) for k in self._list(node, "k")]
            values = [self.dec(x, blobs, count, depth + 1, leaves, diff) for x in self._list(node, "v")]
            if len(keys) != len(values):
                raise ChannelError("a dict whose keys and values differ in number")
            return dict(zip(keys, values))
        if tag == "size":
            return torch.Size([int(s) for s in self._list(node)])
        if tag == "dtype":
            dt = DTYPES.get(node.get("v"))
            if dt is None:
                raise ChannelError(f"an unknown dtype {str(node.get('v'))[:40]!r}")
            return dt
        if tag == "device":
            return torch.device(str(node.get("v"))[:40])
        if tag == "slice":
            parts = [self.dec(x, blobs, count, depth + 1) for x in self._list(node)]
            return slice(*(parts + [None] * 3)[:3])
        if tag == "ellipsis":
            return Ellipsis
        if tag == "bytes":
            return bytes(self._blob(blobs, node.get("b")))
        if tag in ("set", "frozenset"):
            items = [self.dec(x, blobs, count, depth + 1) for x in self._list(node)]
            return set(items) if tag == "set" else frozenset(items)
        if tag == "t":
            t = self._dec_tensor(node, blobs, grad=diff is None)
            if leaves is not None:
                leaves.append(t)
            if diff is not None and node.get("d") is not None:
                diff.append(t)
            return t
        if tag == "back":  # one of our own objects, handed back
            h = node.get("h")
            if h not in self.exports:
                raise ChannelError("a handle that was never given out")
            return self.exports[h]
        if tag == "h":
            h = node.get("h")
            if type(h) is not int:
                raise ChannelError("a handle that is not an int")
            proxy = self.proxies.get(h)
            if proxy is None:
                info = node.get("i") if isinstance(node.get("i"), dict) else {}
                proxy = (RemoteTensor if info.get("tensor") else Remote)(self, h, info)
                self.proxies[h] = proxy
            return proxy
        raise ChannelError(f"an unknown tag {str(tag)[:20]!r}")

    @staticmethod
    def _list(node, key="v"):
        v = node.get(key)
        if not isinstance(v, list):
            raise ChannelError("a malformed value")
        return v

    @staticmethod
    def _blob(blobs, i):
        if type(i) is not int or not 0 <= i < len(blobs):
            raise ChannelError("a reference to a missing blob")
        return blobs[i]

    def _dec_tensor(self, node, blobs, grad: bool = True):
        dt = DTYPES.get(node.get("dt"))
        shape = node.get("s")
        if dt is None or not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape) \
                or len(shape) > 16:
            raise ChannelError("a malformed tensor")
        n = 1
        for s in shape:
            n *= s
        if node.get("meta"):
            if n > 1 << 40:
                raise ChannelError("a meta tensor too large")
            t = torch.empty(shape, dtype=dt, device="meta")
        else:
            raw = self._blob(blobs, node.get("b"))
            size = torch.empty((), dtype=dt).element_size()
            if len(raw) != n * size:
                raise ChannelError(f"a tensor of shape {shape} and dtype {dt} with {len(raw)} bytes")
            t = torch.frombuffer(raw, dtype=dt).reshape(shape) if n else torch.empty(shape, dtype=dt)
        sub = node.get("sub")
        if isinstance(sub, list) and len(sub) == 2:
            if self.trusted:  # only a class of the tensors this side sent in the call being answered
                cls = next((c for c in self.subclasses if [c.__module__, c.__qualname__] == sub), None)
            elif str(sub[0]).startswith("autograder.checks."):
                cls = getattr(sys.modules.get(str(sub[0])), str(sub[1]), None)
            else:
                cls = None
            if isinstance(cls, type) and issubclass(cls, torch.Tensor):
                t = t.as_subclass(cls)
        if (grad and node.get("d") is not None or node.get("rg")) and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
        return t

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
                self.enc(value, blobs)
        return self._exchange(header, blobs)[0]

    def _exchange(self, header, blobs):
        if self.depth >= MAX_DEPTH:
            raise RecursionError("calls between the grader and the notebook nested too deep")
        self.ch.send(header, blobs)
        self.depth += 1
        try:
            while True:
                msg, got = self.ch.recv()
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
        diff: list = []
        if "state" in msg:
            self._set_state(msg["state"], blobs)
        if not msg.get("ok"):
            raise self._exception(msg.get("exc"))
        value = self.dec(msg.get("v"), blobs, diff=diff)
        mutated = [self.dec(m, blobs) for m in msg.get("mut") or []] if isinstance(msg.get("mut"), list) else []
        return value, diff, mutated, msg.get("record")

    def _exception(self, exc) -> BaseException:
        exc = exc if isinstance(exc, dict) else {}
        name, text = str(exc.get("type", "Exception"))[:100], str(exc.get("msg", ""))[:2000]
        cls = EXCEPTIONS.get(name)
        if cls is None and name == "KeyboardInterrupt":
            e = RemoteError(f"KeyboardInterrupt: {text}" if text else "KeyboardInterrupt (interrupted)")
        elif cls is None:
            e = RemoteError(f"{name}: {text}" if text else name)
            e.remote_type = name
        else:
            try:
                e = cls(text) if cls is not KeyError else KeyError(text)
            except Exception:  # noqa: BLE001
                e = RemoteError(f"{name}: {text}")
        frames = exc.get("tb") if isinstance(exc.get("tb"), list) else []
        e.remote_frames = [tuple(str(x)[:300] for x in f[:4]) for f in frames[-20:] if isinstance(f, list) and
                           len(f) >= 3]
        e.remote_site = exc.get("site") if isinstance(exc.get("site"), dict) else None  # checked where it is read
        return e

    def call(self, h, args, kwargs):
        """Call the other side's object `h`; through the autograd bridge when gradients may be needed."""
        return self._call(h, None, args, kwargs)

    def call_method(self, h, name, args, kwargs):
        return self._call(h, name, args, kwargs)

    def _call(self, h, method, args, kwargs):
        fields = {"h": h, "method": method, "args": list(args), "kwargs": dict(kwargs)}
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
        header = {"k": "req", "id": next(self.ids), "op": "call", "h": fields["h"], "method": fields["method"],
                  "grad": grad, "state": self._state(blobs)}
        header["state"]["grad"] = grad
        sent = []
        header["args"] = self.enc(fields["args"], blobs, diff if grad else None, export_callables=True)
        header["kwargs"] = self.enc(fields["kwargs"], blobs, diff if grad else None, export_callables=True)
        _tensors([fields["args"], fields["kwargs"]], sent)
        saved = self.subclasses
        if self.trusted:  # the answer may be of a tensor class the check sent (stage 05's ids "on another device")
            self.subclasses = tuple({type(t) for t in sent if type(t) is not torch.Tensor and
                                     (type(t).__module__ or "").startswith("autograder.checks.")})
        try:
            value, out_diff, mutated, record = self._exchange(header, blobs)
        finally:
            self.subclasses = saved
        for pair in mutated:  # arguments the callee changed in place: changed here too
            if isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int and 0 <= pair[0] < len(sent) \
                    and isinstance(pair[1], torch.Tensor):
                with torch.no_grad():
                    sent[pair[0]].data = pair[1].to(sent[pair[0]].dtype)
        out_diff = out_diff if grad else []
        return value, (record if out_diff else None), out_diff

    # ------------------------------------------------------------------ serving
    def serve(self, msg, blobs) -> None:
        rid, op = msg.get("id"), msg.get("op")
        reply: dict = {"k": "rep", "id": rid}
        out: list = []
        try:
            if self.trusted and op not in ("call", "getattr", "backward", "len", "iter", "getitem", "repr", "value",
                                           "contains", "dir"):
                raise PermissionError(f"the grader does not serve {str(op)[:30]!r}")
            value = getattr(self, f"_op_{op}", None)
            if value is None:
                raise ChannelError(f"an unknown request {str(op)[:30]!r}")
            saved, self.subclasses = self.subclasses, ()
            try:
                result = value(msg, blobs, reply, out)
            finally:
                self.subclasses = saved
            reply["ok"] = True
            if "v" not in reply:
                reply["v"] = self.enc(result, out)
        except ChannelError:
            raise
        except BaseException as e:  # noqa: BLE001  (the learner's code's errors, an interrupt included)
            if self.trusted and (not isinstance(e, Exception) or isinstance(e, self.passthrough)):
                raise  # the grader's own time limit: not an answer to send
            out = []
            reply = {"k": "rep", "id": rid, "ok": False, "exc": self._describe(e)}
            if "state" in msg:
                reply["state"] = self._state(out)
        self.ch.send(reply, out)

    def _describe(self, e) -> dict:
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
        h = msg.get("h")
        if h not in self.exports:
            raise ChannelError("a request for an object that was never given out")
        return self.exports[h]

    def _check_name(self, obj, name) -> str:
        if not isinstance(name, str):
            raise ChannelError("an attribute name that is not a string")
        if self.trusted and name.startswith("_") and name not in ALLOWED_PRIVATE:
            raise AttributeError(f"the grader's objects do not show {name!r}")
        return name

    def _op_resolve(self, msg, blobs, reply, out):
        name = msg.get("name")
        if not isinstance(name, str) or name not in self.namespace:
            raise NameError(f"name {name!r} is not defined")
        obj = self.namespace[name]
        reply["v"] = self.enc(obj, out, force_handle=isinstance(obj, torch.Tensor))
        return None

    def _op_getattr(self, msg, blobs, reply, out):
        obj = self._target(msg)
        name = self._check_name(obj, msg.get("name"))
        value = getattr(obj, name)
        force = (not self.trusted and isinstance(obj, torch.Tensor) and name == "data")
        if self.trusted and callable(value) and not isinstance(value, (torch.nn.Module, type)):
            if getattr(value, "__self__", None) is obj and name not in ALLOWED_METHODS:
                raise AttributeError(f"the grader's objects do not let you call {name!r}")
            reply["v"] = self.enc(value, out, export_callables=True)
            return None
        reply["v"] = self.enc(value, out, force_handle=force)
        return None

    def _op_setattr(self, msg, blobs, reply, out):
        obj = self._target(msg)
        setattr(obj, self._check_name(obj, msg.get("name")), self.dec(msg.get("v"), blobs))

    def _op_delattr(self, msg, blobs, reply, out):
        obj = self._target(msg)
        delattr(obj, self._check_name(obj, msg.get("name")))

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
        return self._target(msg)[self.dec(msg.get("key"), blobs)]

    def _op_setitem(self, msg, blobs, reply, out):
        self._target(msg)[self.dec(msg.get("key"), blobs)] = self.dec(msg.get("v"), blobs)

    def _op_contains(self, msg, blobs, reply, out):
        return bool(self.dec(msg.get("v"), blobs) in self._target(msg))

    def _op_repr(self, msg, blobs, reply, out):
        return repr(self._target(msg))[:2000]

    def _op_dir(self, msg, blobs, reply, out):
        return [n for n in dir(self._target(msg)) if not (self.trusted and n.startswith("_"))][:2000]

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
        args, kwargs = self.dec(msg.get("args"), blobs), self.dec(msg.get("kwargs"), blobs)
        fn = getattr(torch.nn.init, name) if msg.get("where") == "init" else getattr(torch.Tensor, name)
        fn(obj, *args, **kwargs)
        return None

    def _op_call(self, msg, blobs, reply, out):
        obj = self._target(msg)
        method = msg.get("method")
        if method is not None:
            if not isinstance(method, str) or (self.trusted and method not in ALLOWED_METHODS):
                raise PermissionError(f"the grader's objects do not let you call {str(method)[:30]!r}")
            fn = getattr(obj, method)
        else:
            if self.trusted and msg.get("h") not in self.callable_ok and not isinstance(obj, torch.nn.Module):
                raise PermissionError("the grader's object may not be called")
            fn = obj
        state = msg.get("state") if isinstance(msg.get("state"), dict) else {}
        self._set_state(state, blobs)
        leaves: list = []
        args = self.dec(msg.get("args"), blobs, leaves=leaves)
        kwargs = self.dec(msg.get("kwargs"), blobs, leaves=leaves)
        if not isinstance(args, list) or not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise ChannelError("malformed call arguments")
        before = [(t._version, tuple(t.shape), t.stride()) for t in leaves]
        grad = bool(state.get("grad", True))
        device = state.get("device")
        with torch.set_grad_enabled(grad), (torch.device(str(device)[:40]) if device else _null()):
            if self.watch is not None:
                with self.watch():
                    result = fn(*args, **kwargs)
            else:
                result = fn(*args, **kwargs)
            if hasattr(type(result), "__next__") and hasattr(type(result), "__iter__") and \
                    not isinstance(result, (torch.Tensor, str, bytes, Remote)):
                result = self._op_iter_value(result)
        diff: list = []
        reply["v"] = self.enc(result, out, diff if grad else None)
        mutated = []
        for i, (t, (version, shape, stride)) in enumerate(zip(leaves, before)):
            if t._version != version or tuple(t.shape) != shape or t.stride() != stride:
                mutated.append(self.enc([i, t.detach()], out))
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
            if msg.get("record") in self.backwarded:
                raise RuntimeError("the gradients of this call were already computed")
            self.backwarded.add(msg.get("record"))
        leaves, outputs = record
        grads = self.dec(msg.get("grads"), blobs)
        if not isinstance(grads, list) or len(grads) > len(outputs):
            raise ChannelError("malformed gradients")
        pairs = [(o, g) for o, g in zip(outputs, grads) if isinstance(g, torch.Tensor)]
        if any(tuple(g.shape) != tuple(o.shape) or not (g.is_floating_point() or g.is_complex()) for o, g in pairs):
            raise ValueError("gradients that do not have their outputs' shapes")
        saved = [t.grad for t in leaves]
        for t in leaves:
            t.grad = None
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g.to(o.dtype) for o, g in pairs], retain_graph=True)
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
        """A module the grader built (autograder.checks._util.learner_side), made on this side from its description:
        PyTorch's own classes, the grader's values."""
        module = _materialize(self.dec(msg.get("spec"), blobs))
        reply["v"] = self.enc(module, out, force_handle=True)
        return None

    def build(self, factory, args, kwargs):
        """A check's object whose parameters the learner's code must own (a model handed to make_optimizer): built
        here, by the grader's own factory, then made on the other side from its description (PyTorch's own module
        classes and the values built here); copy.deepcopy of it gives the grader's own copy, as built."""
        local = factory(*args, **kwargs)
        blobs: list = []
        header = {"k": "req", "id": next(self.ids), "op": "build", "spec": self.enc(_module_spec(local), blobs)}
        proxy = self._exchange(header, blobs)[0]
        if not isinstance(proxy, Remote):
            raise ChannelError("a built object that did not stay on the other side")
        self.built[object.__getattribute__(proxy, "_h")] = local
        return proxy

    def _op_tempdir(self, msg, blobs, reply, out):
        """A new folder in this side's temporary folder, for a path a check hands to the learner's code (a tokenizer's
        save and load): made here, by this side's user, so that the grader never touches a path this side can write."""
        import tempfile
        return tempfile.mkdtemp(prefix="check-")

    def _op_ping(self, msg, blobs, reply, out):
        return "pong"

    def _op_forget(self, msg, blobs, reply, out):
        self.records.clear()
        return None


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
