"""autograder/remote_policy.py alone, and the two sides it sets apart: what the grader serves, shows and lets
the kernel call, the gradients it gives once, the tensor classes it builds, and the exceptions it rebuilds
from what the kernel sends; the kernel's side serves the grader every request that the grader's side refuses
the kernel."""
import os
import socket

import pytest
import torch

from autograder import remote_policy as policy
from autograder.remote import Channel, Endpoint
from autograder.serve import LearnerEndpoint


@pytest.mark.parametrize("op", ["resolve", "setattr", "delattr", "setitem", "build", "tempdir", "torchfn",
                                "spec",
                                "isinstance", "forget", "watch", "nothing", ["call"], None])
def test_the_grader_serves_only_its_requests(op):
    with pytest.raises(PermissionError, match="does not serve"):
        policy.check_request(op)


@pytest.mark.parametrize("op", policy.SERVED)
def test_the_requests_the_grader_serves(op):
    policy.check_request(op)


def test_the_grader_shows_public_attributes_and_a_module_s_parts():
    for name in ("weight", "forward", "_parameters", "_modules", "__name__"):
        policy.check_attribute(name)
    for name in ("_forward_hooks", "__globals__", "__class__", "_apply", "__dict__"):
        with pytest.raises(AttributeError, match="do not show"):
            policy.check_attribute(name)
    assert policy.shown(["weight", "_buffers", "__init__"]) == ["weight"]


def test_the_kernel_calls_only_the_allowed_methods_or_the_object_it_was_handed():
    norm = torch.nn.LayerNorm(2)
    policy.check_bound_method(norm, "forward", norm.forward)
    # a function kept as an attribute, not a method
    policy.check_bound_method(norm, "fn", len)
    with pytest.raises(AttributeError, match="do not let you call"):
        policy.check_bound_method(norm, "load_state_dict", norm.load_state_dict)
    policy.check_method("parameters")
    for method in ("register_forward_hook", "__call__", 3):
        with pytest.raises(PermissionError, match="do not let you call"):
            policy.check_method(method)
    policy.check_callable(norm, 5, set())                          # a module may be called
    policy.check_callable(len, 5, {5})                             # handed out as callable
    with pytest.raises(PermissionError, match="may not be called"):
        policy.check_callable(len, 5, {6})
    with pytest.raises(TypeError, match="modules"):
        policy.check_handed_out(os)


def test_gradients_are_given_once_and_of_their_outputs_shapes():
    answered: set = set()
    policy.check_backward(7, answered)
    with pytest.raises(RuntimeError, match="already"):
        policy.check_backward(7, answered)
    out = torch.ones(2, 3)
    policy.check_gradients([(out, torch.ones(2, 3))])
    for grad in (torch.ones(3, 2), torch.ones(2, 3, dtype=torch.int64)):
        with pytest.raises(ValueError, match="shapes"):
            policy.check_gradients([(out, grad)])


def test_a_tensor_class_is_the_checks_and_on_the_grader_s_side_one_it_sent():
    from autograder.checks.stage05_masks import _Elsewhere
    tag = [_Elsewhere.__module__, _Elsewhere.__qualname__]
    sent = [torch.ones(1), torch.ones(1).as_subclass(_Elsewhere)]
    assert policy.answer_classes(sent) == (_Elsewhere,)
    assert policy.tensor_class(tag, True, (_Elsewhere,)) is _Elsewhere
    assert policy.tensor_class(tag, True, ()) is None              # not sent in this call
    assert policy.tensor_class(tag, False, ()) is _Elsewhere      # the kernel's side: a class of the checks
    assert policy.tensor_class(["torch.nn.parameter", "Parameter"], False, ()) is None
    assert policy.tensor_class(["autograder.checks.stage05_masks", "padding_mask"], False, ()) is None
    assert policy.tensor_class("autograder.checks", False, ()) is None


def test_exceptions_are_rebuilt_by_name_and_cut_short():
    e = policy.rebuilt_exception({"type": "ValueError", "msg": "bad", "tb": [["f.py", 3, "g", "x = 1"]] * 30})
    assert type(e) is ValueError and str(e) == "bad" and len(e.remote_frames) == 20
    assert e.remote_frames[0] == ("f.py", "3", "g", "x = 1") and e.remote_site is None
    key = policy.rebuilt_exception({"type": "KeyError", "msg": "k"})
    assert type(key) is KeyError and key.args == ("k",)
    other = policy.rebuilt_exception({"type": "SystemExit", "msg": "x" * 5000, "site": {"line": 2}})
    assert type(other) is policy.RemoteError and other.remote_type == "SystemExit"
    assert len(str(other)) == len("SystemExit: ") + 2000 and other.remote_site == {"line": 2}
    stop = policy.rebuilt_exception({"type": "KeyboardInterrupt"})
    assert type(stop) is policy.RemoteError and "interrupted" in str(stop)
    assert type(policy.rebuilt_exception("not a description")) is policy.RemoteError


def _served(endpoint, request):
    """The reply of `endpoint` to `request`, as the other side would read it."""
    mine, theirs = socket.socketpair()
    endpoint.channel.sock = mine
    try:
        endpoint.serve({"k": "req", "id": 1, **request}, [])
        return Channel(theirs).recv()[0]
    finally:
        mine.close()
        theirs.close()


def test_the_kernel_s_side_serves_what_the_grader_s_refuses():
    """The policy binds the grader's side only: the same requests, answered by the kernel's side."""
    norm = torch.nn.LayerNorm(2)
    a, b = socket.socketpair()
    grader, learner = Endpoint(a, trusted=True), LearnerEndpoint(b, {"x": 3})
    for request, says in [({"op": "resolve", "name": "x"}, "does not serve"),
                          ({"op": "getattr", "name": "_forward_hooks"}, "do not show"),
                          ({"op": "getattr", "name": "load_state_dict"}, "do not let you call")]:
        refused = _served(grader, dict(request, h=grader.export(norm)))
        assert not refused["ok"] and says in refused["exc"]["msg"], refused
        answered = _served(learner, dict(request, h=learner.export(norm)))
        assert answered["ok"], answered
    a.close()
    b.close()
