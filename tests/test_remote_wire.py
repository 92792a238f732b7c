"""autograder/remote_wire.py, the channel's framing alone: a message crosses whole (JSON and blobs), and the
grader's end reads no message past its limits, nor one that is not a JSON object, and ends on a closed
connection. Two of these tests came from tests/test_remote.py."""
import socket
import struct
import threading

import pytest

from autograder.remote import Endpoint
from autograder.remote_wire import MAX_BLOBS, TRUSTED_NODES, Channel, ChannelError, count_values


@pytest.fixture
def ends():
    """(a, b): the two ends of a socket pair."""
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _raw(sock, header: bytes, blobs=()):
    """A message as a hostile kernel could frame it: any JSON bytes, any blobs."""
    parts = [struct.pack("<II", len(header), len(blobs)), header]
    for b in blobs:
        parts += [struct.pack("<Q", len(b)), b]
    sock.sendall(b"".join(parts))


def _try(fn):
    try:
        fn()
    except OSError:
        pass


def test_a_message_crosses_whole(ends):
    """The header as JSON, the blobs as bytes in their order (an empty one too), twice in a row on one
    socket."""
    a, b = ends
    sent = {"k": "req", "id": 1, "v": [1, "two", {"$": "f", "v": "0.5"}]}
    Channel(a).send(sent, [b"abc", b"", bytearray(b"\x00\xff")])
    Channel(a).send({"k": "rep"})
    got, blobs = Channel(b).recv()
    assert got == sent and [bytes(x) for x in blobs] == [b"abc", b"", b"\x00\xff"]
    assert Channel(b).recv() == ({"k": "rep"}, [])


def test_values_are_counted_in_raw_bytes():
    """Each value but the first follows a comma, a bracket or a brace; a string's commas count too (an
    overcount)."""
    assert count_values(b"0") == 0
    assert count_values(b'{"v": [1, 2, 3]}') == 4
    assert count_values(b'"a,b"') == 1


def test_a_message_over_the_limit_is_refused():
    a, b = socket.socketpair()
    b.sendall(struct.pack("<II", 1 << 31, 0))
    with pytest.raises(ChannelError):
        Endpoint(a, trusted=True).channel.recv()
    a.close()
    b.close()


@pytest.mark.parametrize("header,blobs,says", [
    (b"[" + b"[]," * 2_000_000 + b"[]]", [], "over the limit"),                 # 6 MB of JSON: refused unread
    # 600 kB, counted before it is built
    (b'{"v": [' + b"0," * 300_000 + b"0]}", [], "more than 200000 values"),
    (b'{"v": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", [], "nested too deep"),
    # blobs past the whole message's limit
    (b'{"k": "rep"}', [b"\0" * (1 << 20)] * 70, "over 64 MB"),
], ids=["6 MB of JSON", "300,000 values", "nested 100,000 deep", "70 MB of blobs"])
def test_the_checker_reads_no_message_past_its_limits(header, blobs, says):
    """Messages a kernel may send the checker: over 4 MB of JSON, over 200,000 values, nested past the
    decoder, blobs over 64 MB: each refused with ChannelError (the connection ends), none built whole."""
    a, b = socket.socketpair()
    sender = threading.Thread(target=lambda: _try(lambda: _raw(b, header, blobs)))
    sender.start()
    with pytest.raises(ChannelError, match=says):
        Endpoint(a, trusted=True).channel.recv()
    a.close()
    sender.join()
    b.close()


@pytest.mark.parametrize("header,n_blobs,says", [
    (b"[1, 2]", 0, "not a JSON object"),
    (b"{'k': 1}", 0, "not JSON"),
    # refused before any blob is read
    (b"{}", MAX_BLOBS + 1, "over the limit"),
])
def test_a_message_that_is_not_one_is_refused(ends, header, n_blobs, says):
    a, b = ends
    b.sendall(struct.pack("<II", len(header), n_blobs) + header)
    with pytest.raises(ChannelError, match=says):
        Channel.for_grader(a).recv()


def test_the_notebook_s_end_counts_no_values_and_the_checker_s_does(ends):
    """The TRUSTED_ limits are the grader's end's: the notebook's end reads a message of more values whole."""
    a, b = ends
    many = b'{"v": [' + b"0," * TRUSTED_NODES + b"0]}"     # 400 kB: more than a socket pair holds unread
    sender = threading.Thread(target=lambda: (_raw(b, many), _raw(b, many)))
    sender.start()
    assert len(Channel(a).recv()[0]["v"]) == TRUSTED_NODES + 1
    with pytest.raises(ChannelError, match="values"):
        Channel.for_grader(a).recv()
    sender.join()


def test_a_closed_connection_ends_the_channel(ends):
    """The other side gone, mid-message or before one: ChannelError, never a short message."""
    a, b = ends
    b.sendall(struct.pack("<II", 10, 0) + b'{"k"')
    b.close()
    with pytest.raises(ChannelError, match="closed"):
        Channel(a).recv()
