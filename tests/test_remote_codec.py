"""autograder/remote_codec.py alone: every dtype and every kind of plain data crosses as itself (through JSON,
as the wire carries it), other objects cross as handles, and decoding builds only those values: no pickle, no
tag it does not know, no tensor whose bytes do not fit its shape, nothing nested too deep or of too many
values."""
import json
import math
import os
import socket

import pytest
import torch

from autograder.remote import Endpoint, Remote
from autograder.remote_codec import DTYPES, MAX_NODES
from autograder.remote_wire import ChannelError


@pytest.fixture
def sides():
    """(the learner's endpoint, the grader's endpoint): the codec of each, no conversation."""
    a, b = socket.socketpair()
    yield Endpoint(b, trusted=False), Endpoint(a, trusted=True)
    a.close()
    b.close()


def across(sender, receiver, value):
    """`value` encoded by `sender`, through JSON as the wire carries it, decoded by `receiver`."""
    blobs: list = []
    node = json.loads(json.dumps(sender.encode(value, blobs), allow_nan=False))
    return receiver.decode(node, [bytearray(b) for b in blobs])


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_a_tensor_of_every_dtype_crosses_as_itself(sides, name):
    """Values, dtype and shape; a strided view and an empty tensor too; a plain tensor on the other side."""
    learner, grader = sides
    dtype = DTYPES[name]
    values = torch.arange(-6, 6).reshape(3, 4)
    tensor = (values % 2 == 0) if dtype is torch.bool else (values * 1.5 if dtype.is_floating_point
                                                            else values)
    tensor = tensor.to(dtype) if dtype is not torch.uint8 else values.abs().to(dtype)
    for sent in (tensor, tensor.t(), tensor[:0]):
        got = across(learner, grader, sent)
        assert type(got) is torch.Tensor and got.dtype == dtype and got.shape == sent.shape
        assert torch.equal(got, sent), (name, got, sent)


def test_a_conjugate_or_negative_view_crosses_resolved(sides):
    learner, grader = sides
    z = torch.tensor([1 + 2j, 3 - 4j])
    assert torch.equal(across(learner, grader, z.conj()), torch.tensor([1 - 2j, 3 + 4j]))
    assert torch.equal(across(learner, grader, z.conj().imag), torch.tensor([-2.0, 4.0]))


def test_a_meta_tensor_crosses_without_bytes(sides):
    learner, grader = sides
    got = across(learner, grader, torch.empty(2, 3, device="meta"))
    assert got.device.type == "meta" and got.shape == (2, 3)


def test_a_tensor_that_needs_gradients_says_so(sides):
    learner, grader = sides
    got = across(learner, grader, torch.ones(2, requires_grad=True))
    assert got.requires_grad and got.is_leaf
    assert not across(learner, grader, torch.ones(2)).requires_grad


PLAIN = [None, True, False, 0, -7, 2 ** 53, -(2 ** 70), 0.1, -0.0, math.inf, -math.inf, "", "é,[{",
         b"\x00\xff",
         [], [1, [2, [3]]], (), (1, (2, "three")), {}, {"a": 1, (1, 2): [3], 4: None}, {1, "two"},
         frozenset({3}),
         slice(1, None, -2), Ellipsis, torch.Size([2, 0, 5]), torch.float16, torch.device("cpu"),
         torch.device("meta")]


def _stable_id(value):
    """repr, but a set's elements in a fixed order: xdist's workers must collect the same ids under any
    hash seed (CI failed with {1, 'two'} on one worker and {'two', 1} on another)."""
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(map(repr, value))})"
    return repr(value)


@pytest.mark.parametrize("value", PLAIN, ids=_stable_id)
def test_plain_data_crosses_as_itself(sides, value):
    """The same value and the same type, both ways (a nan below)."""
    for sender, receiver in (sides, sides[::-1]):
        got = across(sender, receiver, value)
        assert type(got) is type(value) and got == value, (value, got)
        if isinstance(value, float):
            assert math.copysign(1, got) == math.copysign(1, value)


def test_nan_bytearray_and_an_iterator_cross(sides):
    learner, grader = sides
    assert math.isnan(across(learner, grader, math.nan))
    assert across(learner, grader, bytearray(b"ab")) == b"ab"
    from autograder.remote_codec import _Iterated
    got = across(learner, grader, _Iterated([1, 2]))
    assert next(got) == 1 and list(got) == [2]


def test_the_learner_s_builtin_subclasses_cross_as_plain_values(sides):
    """On the learner's side a str, int or float subclass and a numpy scalar cross as the plain value; on the
    grader's they are objects of their own (handles)."""
    import numpy as np
    learner, grader = sides

    class Sly(str):
        def __eq__(self, other):
            return True
    for value, plain in ((Sly("no"), "no"), (np.float32(0.5), 0.5), (np.int64(3), 3), (np.bool_(True), True)):
        got = across(learner, grader, value)
        assert type(got) is type(plain) and got == plain
    assert isinstance(across(grader, learner, Sly("no")), Remote)


def test_other_objects_cross_as_handles(sides):
    """An object crosses as a proxy (one per object), and a proxy handed back is the object itself."""
    learner, grader = sides
    model = torch.nn.Linear(2, 2)
    proxy = across(learner, grader, model)
    assert isinstance(proxy, Remote) and across(learner, grader, model) is proxy
    assert isinstance(proxy, torch.nn.Linear)      # the library's class, for isinstance
    assert across(grader, learner, proxy) is model
    # a parameter stays
    assert isinstance(across(learner, grader, torch.nn.Parameter(torch.ones(2))), Remote)


def test_the_grader_hands_out_no_module(sides):
    _, grader = sides
    with pytest.raises(TypeError, match="modules"):
        grader.encode(os, [])


def test_a_value_nested_too_deep_does_not_cross(sides):
    learner, _ = sides
    deep: list = []
    for _ in range(45):
        deep = [deep]
    with pytest.raises(ValueError, match="40 levels"):
        learner.encode(deep, [])


@pytest.mark.parametrize("node,blobs,says", [
    ({"$": "pickle", "v": "gASVAAAA"}, [], "unknown tag"),
    ({"$": ["t"]}, [], "unknown tag"),
    (object(), [], "unknown kind"),
    ({"$": "t", "dt": "float32", "s": [4], "b": 0}, [b"\0" * 3], "with 3 bytes"),
    ({"$": "t", "dt": "float32", "s": [4], "b": 1}, [b"\0" * 16], "missing blob"),
    ({"$": "t", "dt": "object", "s": [1], "b": 0}, [b"\0"], "malformed tensor"),
    ({"$": "t", "dt": "uint8", "s": [-1], "b": 0}, [b""], "malformed tensor"),
    ({"$": "t", "dt": "uint8", "s": [1] * 17, "b": 0}, [b"\0"], "malformed tensor"),
    ({"$": "t", "dt": "float32", "s": [1 << 30, 1 << 30], "meta": True}, [], "too large"),
    ({"$": "dtype", "v": "object"}, [], "unknown dtype"),
    ({"$": "dict", "k": [1, 2], "v": [3]}, [], "differ in number"),
    ({"$": "tuple", "v": "not a list"}, [], "malformed value"),
    ({"$": "back", "h": 12345}, [], "never given out"),
    ({"$": "h", "h": "1"}, [], "not an int"),
])
def test_decoding_refuses_what_is_not_a_value(sides, node, blobs, says):
    _, grader = sides
    with pytest.raises(ChannelError, match=says):
        grader.decode(node, [bytearray(b) for b in blobs])


def test_decoding_counts_values_and_depth(sides):
    """MAX_NODES values in one message, 45 levels: past either, ChannelError."""
    _, grader = sides
    assert grader.decode([1, 2], [], count=[MAX_NODES - 3]) == [1, 2]
    with pytest.raises(ChannelError, match="too many values"):
        grader.decode([1, 2], [], count=[MAX_NODES - 2])
    deep: list = []
    for _ in range(46):
        deep = [deep]
    with pytest.raises(ChannelError, match="nested too deep"):
        grader.decode(deep, [])
