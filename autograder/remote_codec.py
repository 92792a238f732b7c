"""The codec: how a value crosses the channel. Plain data (None, bool, int, float, str, bytes, lists, tuples,
dicts, sets, slices, torch.Size, dtypes, devices) as JSON, with a tag ({"$": ...}) where JSON has no such
value; tensors as dtype, shape and raw bytes (a blob that follows the JSON); every other object as a handle,
which the other side turns into a proxy (autograder/remote_proxies.py). Nothing is ever unpickled: decoding
builds only these values, and refuses a message nested too deep or with too many values.
"""
from __future__ import annotations

import torch

from . import remote_policy as policy
from .remote_proxies import Remote
from .remote_wire import ChannelError

MAX_NODES = 2_000_000       # values in one message
DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}


class _Iterated(list):
    """The items of an iterator or generator that a call returned, to cross as a list and be an iterator
    again on the other side (`next(model.parameters())`)."""


class Codec:
    """Encoding and decoding, a part of autograder/remote.py's Endpoint: uses its `trusted`, its handles
    (export, exports, proxies) and `subclasses`, the tensor classes of the call being answered."""

    # ------------------------------------------------------------------ encoding
    def encode(self, value, blobs: list, diff: list | None = None, export_callables: bool = False,
               depth: int = 0,
               force_handle: bool = False):
        """The JSON of `value`; its tensors' bytes are appended to `blobs`. `diff`: collects the tensors that
        need gradients (the outputs of a call the other side may ask the gradients of); `export_callables`:
        objects handed out may be called by the other side; `force_handle`: a tensor crosses as a handle, not
        a copy."""
        if depth > 40:
            raise ValueError("a value nested more than 40 levels deep cannot cross to the grader")
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int:
            return value if -(1 << 53) < value < (1 << 53) else {"$": "int", "v": str(value)}
        if kind is float:
            return {"$": "f", "v": repr(value)}
        if not force_handle and isinstance(value, torch.Tensor) and not isinstance(value, Remote) and (
                # the learner's parameters stay there
                self.trusted or not isinstance(value, torch.nn.Parameter)):
            return self._enc_tensor(value, blobs, diff)

        def items(values, diff=diff, export_callables=export_callables):
            return [self.encode(x, blobs, diff, export_callables, depth + 1) for x in values]
        if kind is list:
            return items(value)
        if kind is _Iterated:
            return {"$": "iter", "v": items(value)}
        if kind is tuple:
            return {"$": "tuple", "v": items(value)}
        if kind is dict or (not self.trusted and isinstance(value, dict)
                            and type(value).__module__ == "collections"):
            return {"$": "dict", "k": items(value.keys(), None, False), "v": items(value.values())}
        if kind is slice:
            return {"$": "slice", "v": items((value.start, value.stop, value.step), None, False)}
        if kind is set or kind is frozenset:
            return {"$": kind.__name__, "v": items(value, None, False)}
        return self._encode_other(value, blobs, export_callables)

    def _encode_other(self, value, blobs: list, export_callables: bool):
        """A value that holds no other: a size, dtype, device, Ellipsis or bytes; a proxy handed back; on the
        learner's side a builtin's subclass or a numpy scalar as its plain value; else a handle."""
        kind = type(value)
        if kind is torch.Size:
            return {"$": "size", "v": [int(s) for s in value]}
        if kind is torch.dtype:
            return {"$": "dtype", "v": str(value).replace("torch.", "")}
        if kind is torch.device:
            return {"$": "device", "v": str(value)}
        if value is Ellipsis:
            return {"$": "ellipsis"}
        if kind is bytes or kind is bytearray:
            blobs.append(bytes(value))
            return {"$": "bytes", "b": len(blobs) - 1}
        if isinstance(value, Remote) and object.__getattribute__(value, "_endpoint") is self:
            return {"$": "back", "h": object.__getattribute__(value, "_handle")}
        if not self.trusted:
            if isinstance(value, bool):
                return bool(value)
            if isinstance(value, int):
                return self.encode(int(value), blobs)
            if isinstance(value, float):
                return self.encode(float(value), blobs)
            if isinstance(value, str):
                return str(value)
            if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim",
                                                                                        None) == 0:
                return self.encode(value.item(), blobs)
        if self.trusted:
            policy.check_handed_out(value)
        handle = self.export(value, callable_ok=export_callables)
        return {"$": "h", "h": handle, "i": self._info(value)}

    def _enc_tensor(self, tensor, blobs: list, diff: list | None):
        """A tensor's node: dtype, shape and its bytes as a blob (none for a meta tensor), a class of the
        checks by name, and whether it needs gradients. (Its name: tests/submissions/corpus.py's FORGED_TAG
        patches it.)"""
        node = {"$": "t", "dt": str(tensor.dtype).replace("torch.", ""), "s": [int(s) for s in tensor.shape]}
        if node["dt"] not in DTYPES:
            raise TypeError(f"a tensor of dtype {tensor.dtype} cannot cross")
        if tensor.device.type == "meta":
            node["meta"] = True
        else:
            data = tensor.detach()
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
        if type(tensor) is not torch.Tensor and not isinstance(tensor, torch.nn.Parameter):
            module = type(tensor).__module__ or ""
            if module.startswith(policy.CHECKS):
                node["sub"] = [module, type(tensor).__qualname__]
        if tensor.requires_grad and diff is not None:
            diff.append(tensor)
            node["d"] = len(diff) - 1
        elif tensor.requires_grad:
            node["rg"] = True
        return node

    # ------------------------------------------------------------------ decoding
    def decode(self, node, blobs, count: list | None = None, depth: int = 0, leaves: list | None = None,
               diff: list | None = None):
        """The value of `node`. `count`: the values decoded so far in this message; `leaves`: collects every
        tensor (arguments of a call we serve, which become leaves that need gradients where the caller's did);
        `diff`: collects the tensors of an answer that the other side marked as needing gradients."""
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
            return [self.decode(x, blobs, count, depth + 1, leaves, diff) for x in node]
        if not isinstance(node, dict):
            raise ChannelError("a value of an unknown kind")
        tag = node.get("$")
        if tag == "t":
            tensor = self._decode_tensor(node, blobs, grad=diff is None)
            if leaves is not None:
                leaves.append(tensor)
            if diff is not None and node.get("d") is not None:
                diff.append(tensor)
            return tensor
        if tag in ("back", "h"):
            return self._decode_handle(tag, node)
        if tag in ("tuple", "iter", "dict", "slice", "set", "frozenset"):
            return self._decode_container(tag, node, blobs, count, depth, leaves, diff)
        return self._decode_scalar(tag, node, blobs)

    def _decode_container(self, tag, node, blobs, count, depth, leaves, diff):
        """A tuple, iterator, dict, slice, set or frozenset; a dict's keys, a slice's bounds and a set's items
        are never tensors that collect into `leaves` or `diff`."""
        def item(x):
            return self.decode(x, blobs, count, depth + 1, leaves, diff)

        def key(x):
            return self.decode(x, blobs, count, depth + 1)
        if tag == "tuple":
            return tuple(item(x) for x in self._list(node))
        if tag == "iter":
            return iter([item(x) for x in self._list(node)])
        if tag == "dict":
            keys = [key(k) for k in self._list(node, "k")]
            values = [item(x) for x in self._list(node, "v")]
            if len(keys) != len(values):
                raise ChannelError("a dict whose keys and values differ in number")
            return dict(zip(keys, values))
        parts = [key(x) for x in self._list(node)]
        if tag == "slice":
            return slice(*(parts + [None] * 3)[:3])
        return set(parts) if tag == "set" else frozenset(parts)

    def _decode_scalar(self, tag, node, blobs):
        """A tagged value that holds no other: a float, an int past JSON's, a size, dtype, device, Ellipsis,
        bytes."""
        if tag == "f":
            return float(str(node.get("v")))
        if tag == "int":
            return int(str(node.get("v"))[:400])
        if tag == "size":
            return torch.Size([int(s) for s in self._list(node)])
        if tag == "dtype":
            dtype = DTYPES.get(node.get("v"))
            if dtype is None:
                raise ChannelError(f"an unknown dtype {str(node.get('v'))[:40]!r}")
            return dtype
        if tag == "device":
            return torch.device(str(node.get("v"))[:40])
        if tag == "ellipsis":
            return Ellipsis
        if tag == "bytes":
            return bytes(self._blob(blobs, node.get("b")))
        raise ChannelError(f"an unknown tag {str(tag)[:20]!r}")

    def _decode_handle(self, tag, node):
        """One of our own objects handed back ("back"), or a proxy of one of the other side's ("h")."""
        handle = node.get("h")
        if tag == "back":
            if handle not in self.exports:
                raise ChannelError("a handle that was never given out")
            return self.exports[handle]
        if type(handle) is not int:
            raise ChannelError("a handle that is not an int")
        return self.proxy(handle, node.get("i"))

    @staticmethod
    def _list(node, key="v"):
        found = node.get(key)
        if not isinstance(found, list):
            raise ChannelError("a malformed value")
        return found

    @staticmethod
    def _blob(blobs, i):
        if type(i) is not int or not 0 <= i < len(blobs):
            raise ChannelError("a reference to a missing blob")
        return blobs[i]

    def _decode_tensor(self, node, blobs, grad: bool = True):
        """A tensor from its node, its shape and byte count checked; a class of the checks only as the policy
        allows."""
        dtype = DTYPES.get(node.get("dt"))
        shape = node.get("s")
        if dtype is None or not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape) \
                or len(shape) > 16:
            raise ChannelError("a malformed tensor")
        n = 1
        for s in shape:
            n *= s
        if node.get("meta"):
            if n > 1 << 40:
                raise ChannelError("a meta tensor too large")
            tensor = torch.empty(shape, dtype=dtype, device="meta")
        else:
            raw = self._blob(blobs, node.get("b"))
            size = torch.empty((), dtype=dtype).element_size()
            if len(raw) != n * size:
                raise ChannelError(f"a tensor of shape {shape} and dtype {dtype} with {len(raw)} bytes")
            tensor = torch.frombuffer(raw, dtype=dtype).reshape(shape) if n else torch.empty(shape,
                                                                                             dtype=dtype)
        cls = policy.tensor_class(node.get("sub"), self.trusted, self.subclasses)
        if cls is not None:
            tensor = tensor.as_subclass(cls)
        if (grad and node.get("d") is not None or node.get("rg")) and (tensor.is_floating_point() or
                                                                          tensor.is_complex()):
            tensor.requires_grad_(True)
        return tensor
