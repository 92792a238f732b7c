"""The proxies: how an object that stays on the other side of the channel is seen on this one. A handle (an
int the other side gave out) becomes a Remote, which forwards attribute reads and writes, calls, len,
iteration and indexing, and compares by identity; a tensor that must stay where it lives (a parameter of the
learner's module) becomes a RemoteTensor, read as a copy and written in place. Also the handles this side
gives out (Handles, a part of the Endpoint of autograder/remote.py), and the description of a module of
PyTorch's own classes that is built again on the other side (_module_spec, _materialize).
"""
from __future__ import annotations

import sys
import types

import torch

# tensor methods that must run on the learner's side for a parameter handle (identity, storage, in place)
REMOTE_TENSOR_ATTRS = {"data", "grad", "requires_grad", "is_leaf", "grad_fn", "data_ptr", "untyped_storage",
                       "_version", "requires_grad_", "retain_grad", "is_set_to"}

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
        if isinstance(module, str) and (module == "torch"
                                        or module.startswith("torch.")) and "." not in qualname:
            found = getattr(sys.modules.get(module), qualname, None)
            if isinstance(found, type):
                base = found
                break
    if mro and mro[0][0] == getattr(base, "__module__", None) and mro[0][1] == base.__qualname__:
        cls = base
    else:
        name = str(mro[0][1]).rsplit(".", 1)[-1] if mro else "object"
        cls = type(name if name.isidentifier() else "Remote", (base,) if base is not object else (), {
            "__module__": str(mro[0][0]) if mro else "remote",
            "__doc__": "a proxy's class, never instantiated"})
    _FAKE_CLASSES[key] = cls
    return cls


class Remote:
    """A proxy of an object on the other side. Attribute reads, writes, calls, len, iteration and indexing
    are forwarded; equality and hashing are by identity (the same remote object is the same proxy)."""
    __slots__ = ("_endpoint", "_handle", "_info", "__weakref__")

    def __init__(self, endpoint, handle, info):
        object.__setattr__(self, "_endpoint", endpoint)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_info", info)

    @property
    def __class__(self):
        return _local_class(object.__getattribute__(self, "_info"))

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name not in ("__name__", "__qualname__",
                                                                          "__module__",
                                                                          "__doc__", "__wrapped__"):
            raise AttributeError(name)
        return self._endpoint.request("getattr", h=self._handle, name=name)

    def __setattr__(self, name, value):
        self._endpoint.request("setattr", h=self._handle, name=name, v=value)

    def __delattr__(self, name):
        self._endpoint.request("delattr", h=self._handle, name=name)

    def __call__(self, *args, **kwargs):
        return self._endpoint.call(self._handle, args, kwargs)

    def __len__(self):
        n = self._endpoint.request("len", h=self._handle)
        if type(n) is not int or n < 0:
            raise TypeError("len() of the proxy is not a non-negative int")
        return n

    def __iter__(self):
        items = self._endpoint.request("iter", h=self._handle)
        return iter(items if isinstance(items, list) else [])

    def __getitem__(self, key):
        return self._endpoint.request("getitem", h=self._handle, key=key)

    def __setitem__(self, key, value):
        self._endpoint.request("setitem", h=self._handle, key=key, v=value)

    def __contains__(self, item):
        return bool(self._endpoint.request("contains", h=self._handle, v=item) is True)

    def __repr__(self):
        text = self._endpoint.request("repr", h=self._handle)
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
        names = self._endpoint.request("dir", h=self._handle)
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    @property
    def __dict__(self):
        found = self._endpoint.request("getattr", h=self._handle, name="__dict__")
        return found if isinstance(found, dict) else {}

    def __deepcopy__(self, memo):
        """copy.deepcopy of the learner's side's module: a local copy, for modules made of PyTorch's own
        classes (a check's reference copy of a model it built on that side)."""
        endpoint, handle = object.__getattribute__(self, "_endpoint"), object.__getattribute__(self,
                                                                                               "_handle")
        # a module the grader built: its own copy, never a description from the other side
        if handle in endpoint.built:
            import copy
            return copy.deepcopy(endpoint.built[handle], memo)
        return _materialize(endpoint.request("spec", h=handle))

    def __instancecheck__(self, instance):
        """isinstance(x, proxy of a class): asked of the other side for its own objects, False for ours."""
        return self._ask_of_class("isinstance", instance)

    def __subclasscheck__(self, sub):
        return self._ask_of_class("issubclass", sub)

    def _ask_of_class(self, op: str, other) -> bool:
        """isinstance or issubclass of the other side's `other` and this proxy's class, asked of the other
        side."""
        if not isinstance(other, Remote) or object.__getattribute__(other, "_endpoint") is not self._endpoint:
            return False
        return self._endpoint.request(op, h=object.__getattribute__(other, "_handle"),
                                      cls=self._handle) is True

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
        if isinstance(k, str) and not k.startswith("_") and isinstance(v, (int, float, bool, str, tuple,
                                                                           type(None))):
            object.__setattr__(obj, k, v)
    for k, (t, rg) in (spec.get("params") or {}).items():
        obj.register_parameter(str(k), None if t is None else torch.nn.Parameter(t.clone(),
                                                                                 requires_grad=bool(rg)))
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
        value = self._endpoint.request("value", h=self._handle)
        if not isinstance(value, torch.Tensor) or isinstance(value, Remote):
            raise TypeError("the value of a remote tensor is not a tensor")
        return value

    def __getattr__(self, name):
        if name in REMOTE_TENSOR_ATTRS or (name.endswith("_") and not name.startswith("_")):
            if name in ("data_ptr", "_version", "data", "grad", "requires_grad", "is_leaf", "grad_fn"):
                return self._endpoint.request("getattr", h=self._handle, name=name)
            endpoint, handle = self._endpoint, self._handle
            return lambda *args, **kwargs: endpoint.call_method(handle, name, args, kwargs)
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
            return args[0]._endpoint.request("torchfn", h=args[0]._handle, where=where, fn=name,
                                             args=list(args[1:]),
                                       kwargs=kwargs)
        return func(*_unwrap(list(args)), **_unwrap(kwargs))

    def __setitem__(self, key, value):
        self._endpoint.call_method(self._handle, "__setitem__", (key, value), {})

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


for _name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv",
              "mod",
              "pow", "rpow", "matmul", "rmatmul", "lt", "le", "gt", "ge", "and", "or", "xor", "neg", "pos",
              "abs",
              "invert"):
    setattr(RemoteTensor, f"__{_name}__", _binary(f"__{_name}__"))


# ------------------------------------------------------------------------------------------- handles
class Handles:
    """The handles an Endpoint gives out (its objects the other side may use) and its proxies of the other
    side's: a part of autograder/remote.py's Endpoint, whose __init__ makes the tables (exports, export_of,
    callable_ok, proxies) and the ids and records used here."""

    def export(self, obj, callable_ok: bool = False) -> int:
        """The handle of our object `obj`, given out once; `callable_ok`: the other side may call it."""
        handle = self.export_of.get(id(obj))
        if handle is None:
            handle = next(self.ids)
            self.exports[handle], self.export_of[id(obj)] = obj, handle
        if callable_ok:
            self.callable_ok.add(handle)
        return handle

    def proxy(self, handle: int, info) -> Remote:
        """Our proxy of the other side's object `handle` (one per handle), described by `info` (see _info)."""
        proxy = self.proxies.get(handle)
        if proxy is None:
            info = info if isinstance(info, dict) else {}
            proxy = (RemoteTensor if info.get("tensor") else Remote)(self, handle, info)
            self.proxies[handle] = proxy
        return proxy

    def forget(self) -> None:
        """Drop every handle and record (between graded names)."""
        self.exports.clear()
        self.export_of.clear()
        self.callable_ok.clear()
        self.records.clear()
        self.proxies.clear()

    def _info(self, obj) -> dict:
        """What the other side's proxy knows of our object: its classes by name, callable, a tensor."""
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

