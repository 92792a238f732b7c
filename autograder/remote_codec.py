"""The codec: how a value crosses the channel. Plain data (None, bool, int, float, str, bytes, lists, tuples, dicts,
sets, slices, torch.Size, dtypes, devices) as JSON, with a tag ({"$": ...}) where JSON has no such value; tensors as
dtype, shape and raw bytes (a blob that follows the JSON); every other object as a handle, which the other side
turns into a proxy (autograder/remote_proxies.py). Nothing is ever unpickled: decoding builds only these values, and
refuses a message nested too deep or with too many values.
"""
from __future__ import annotations

import torch

from . import remote_policy as policy
from .remote_proxies import Remote, RemoteTensor
from .remote_wire import ChannelError

MAX_NODES = 2_000_000       # values in one message
DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}


class _Iterated(list):
    """The items of an iterator or generator that a call returned, to cross as a list and be an iterator
    again on the other side (`next(model.parameters())`)."""


class Codec:
    """Encoding and decoding, a part of autograder/remote.py's Endpoint: uses its `trusted`, its handles (export,
    exports, proxies) and `subclasses`, the tensor classes of the call being answered."""

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
        if self.trusted:
            policy.check_handed_out(v)
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
            if module.startswith(policy.CHECKS):
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
        cls = policy.tensor_class(node.get("sub"), self.trusted, self.subclasses)
        if cls is not None:
            t = t.as_subclass(cls)
        if (grad and node.get("d") is not None or node.get("rg")) and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
        return t
