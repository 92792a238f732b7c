"""The channel's wire: length-prefixed messages on a Unix socket, each a JSON header and raw blobs, and the
limits on what one side reads of the other's. Nothing here builds a value from a message
(autograder/remote_codec.py does).

A message is `<II` (the header's bytes, the number of blobs), the header's JSON, then each blob as `<Q` (its
bytes) and its bytes. The grader's side reads a message's JSON and blobs only up to its limits, and counts the
JSON's values in its raw bytes before it is decoded.
"""
from __future__ import annotations

import json
import socket
import struct

MAX_MESSAGE = 256 << 20      # bytes in one message, blobs included (what the notebook's side accepts)
MAX_BLOBS = 100_000          # blobs in one message
# What the grader's side accepts from the notebook: a message's JSON and its blobs are read only up to these
# sizes, and the JSON's values are counted in its raw bytes before it is decoded (a 256 MB message of empty
# lists built whole took a checker to 1.7 GB). The largest message of an honest notebook across every check is
# under 1 MB.
TRUSTED_HEAD = 4 << 20       # bytes of one message's JSON
TRUSTED_MESSAGE = 64 << 20   # bytes of one message, blobs included
TRUSTED_NODES = 200_000      # values in one message (counted as its JSON's brackets, braces and commas)


class ChannelError(Exception):
    """The other side broke the protocol, sent too much, or went away."""


def _recv_exact(sock, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ChannelError("the other side closed the connection")
        got += k
    return buf


def count_values(raw: bytes) -> int:
    """The values in a message's JSON, counted before anything is built: each value but the first follows a ,
    [ or {."""
    return raw.count(b",") + raw.count(b"[") + raw.count(b"{")


class Channel:
    """Length-prefixed messages: a JSON header and raw blobs."""

    def __init__(self, sock: socket.socket, limit: int = MAX_MESSAGE, head_limit: int | None = None,
                 nodes: int | None = None):
        self.sock, self.limit = sock, limit
        self.head_limit = limit if head_limit is None else head_limit
        self.nodes = nodes

    @classmethod
    def for_grader(cls, sock: socket.socket) -> Channel:
        """The grader's end: what it reads of the notebook's side is held to the TRUSTED_ limits."""
        return cls(sock, TRUSTED_MESSAGE, TRUSTED_HEAD, TRUSTED_NODES)

    def send(self, header: dict, blobs=()) -> None:
        head = json.dumps(header, allow_nan=False, separators=(",", ":")).encode()
        parts = [struct.pack("<II", len(head), len(blobs)), head]
        for b in blobs:
            b = memoryview(b).cast("B")
            parts += [struct.pack("<Q", len(b)), b]
        self.sock.sendall(b"".join(parts))

    def recv(self) -> tuple[dict, list]:
        n_head, n_blobs = struct.unpack("<II", _recv_exact(self.sock, 8))
        if n_head > self.head_limit or n_blobs > MAX_BLOBS:
            raise ChannelError(f"a message of {n_head} bytes and {n_blobs} blobs is over the limit")
        raw = bytes(_recv_exact(self.sock, n_head))
        if self.nodes is not None and count_values(raw) > self.nodes:
            raise ChannelError(f"a message of more than {self.nodes} values")
        try:
            header = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ChannelError("a message that is not JSON, or nested too deep: "
                               f"{type(e).__name__}") from None
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
