"""The data of the final lesson: the Multi30k loader against a real HTTP server on 127.0.0.1 (the real
files where a copy is present, small files made here otherwise), its failure modes, and the
synthetic corpus. Nothing here touches the network beyond 127.0.0.1."""
import contextlib
import gzip
import hashlib
import http.server
import re
import socket
import threading

import pytest

from solutions import data
from solutions.data import (
    MULTI30K_SHA256,
    DataDownloadError,
    load_data,
    load_multi30k,
    load_synthetic,
    synthetic_corpus,
)

from .conftest import MULTI30K


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder, or `routes` ({"/name": [action, ...]}) where each request takes the next action
    (the last one repeats): ("ok", body), ("status", code), or ("truncate", body): announces
    len(body) bytes, sends half of them and hangs up."""

    routes: dict = {}
    requests: list = []
    folder = None

    def do_GET(self):
        self.requests.append(self.path)
        actions = self.routes.get(self.path)
        if actions is None:
            return super().do_GET() if self.folder else self.send_error(404)
        kind, arg = actions.pop(0) if len(actions) > 1 else actions[0]
        if kind == "status":
            return self.send_error(arg)
        self.send_response(200)
        self.send_header("Content-Length", str(len(arg)))
        self.end_headers()
        self.wfile.write(arg if kind == "ok" else arg[: len(arg) // 2])
        if kind == "truncate":
            self.close_connection = True

    def log_message(self, *args):  # keep pytest's output clean
        pass


@contextlib.contextmanager
def serve(folder=None, routes=None):
    """An HTTP server on a free port of 127.0.0.1 in a thread; yields (base URL, list of request paths)."""
    requests = []
    handler = type("Handler", (_Handler,), {"routes": routes or {}, "requests": requests, "folder": folder})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **kw: handler(*a, directory=str(folder) if folder else None, **kw))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()


def small_mirror(monkeypatch) -> dict[str, bytes]:
    """Six tiny gzip files with the Multi30k names, and their sha256 patched in as the pinned ones."""
    files = {}
    for name in MULTI30K_SHA256:
        lang = "de" if ".de." in name else "en"
        lines = [f"{lang} sentence {i} of {name}" for i in range(3)]
        files[name] = gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)
        monkeypatch.setitem(MULTI30K_SHA256, name, hashlib.sha256(files[name]).hexdigest())
    return files


def leftovers(cache):
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


# ---------------------------------------------------------------- the real files, served locally
@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"no copy of the Multi30k files at {MULTI30K} "
                                                   "(set MULTI30K_MIRROR to a folder that has them)")
def test_real_multi30k_over_http_is_verified_and_cached(tmp_path):
    cache = tmp_path / "cache"
    with serve(MULTI30K) as (url, requests):
        splits = load_multi30k(url, cache_dir=cache, retries=0)
        # the published sizes of task 1: 29000 training pairs, 1014 validation, 1000 test_2016_flickr
        assert {k: (len(de), len(en)) for k, (de, en) in splits.items()} == {
            "train": (29000, 29000), "val": (1014, 1014), "test": (1000, 1000)}
        assert splits["val"][1][1] == "A man sleeping in a green room on a couch."
        assert leftovers(cache) == sorted(MULTI30K_SHA256)  # the six files, no temporary ones
        for name, sha in MULTI30K_SHA256.items():
            assert data.sha256_of(cache / name) == sha
        assert len(requests) == 6
        again = load_multi30k(url, cache_dir=cache, retries=0)
        assert len(requests) == 6, "the second call should read the cache, not download again"
        assert again == splits


# ---------------------------------------------------------------- failures, with files made here
def test_corrupted_download_is_deleted_and_named(tmp_path, monkeypatch):
    files = small_mirror(monkeypatch)
    bad = bytearray(files["train.de.gz"])
    bad[len(bad) // 2] ^= 0xFF  # one flipped byte
    cache = tmp_path / "cache"
    with serve(routes={"/train.de.gz": [("ok", bytes(bad))]}) as (url, _):
        with pytest.raises(DataDownloadError) as err:
            load_multi30k(url, cache_dir=cache, retries=0)
    message = str(err.value)
    assert "train.de.gz" in message and "checksum mismatch" in message
    assert MULTI30K_SHA256["train.de.gz"] in message and hashlib.sha256(bad).hexdigest() in message
    assert "synthetic" in message and "folder" in message  # what to do offline
    assert leftovers(cache) == [], "a corrupt download must not stay in the cache"


def test_truncated_download_is_retried_then_fails_cleanly(tmp_path, monkeypatch):
    files = small_mirror(monkeypatch)
    cache = tmp_path / "cache"
    with serve(routes={"/train.de.gz": [("truncate", files["train.de.gz"])]}) as (url, requests):
        with pytest.raises(DataDownloadError, match=r"train\.de\.gz: truncated download .* 2 attempt"):
            load_multi30k(url, cache_dir=cache, retries=1, backoff=0)
    assert requests == ["/train.de.gz"] * 2  # a broken transfer may be a hiccup: tried again once
    assert leftovers(cache) == []


def test_truncated_gzip_with_matching_checksum_is_rejected(tmp_path, monkeypatch):
    # A pinned checksum that matches a cut gzip stream (a wrong pin, or a cut local copy): the file
    # is still checked by decompressing it before it enters the cache.
    files = small_mirror(monkeypatch)
    cut = files["val.en.gz"][:-6]
    monkeypatch.setitem(MULTI30K_SHA256, "val.en.gz", hashlib.sha256(cut).hexdigest())
    cache = tmp_path / "cache"
    routes = {"/" + name: [("ok", body)] for name, body in files.items()}
    routes["/val.en.gz"] = [("ok", cut)]
    with serve(routes=routes) as (url, _):
        with pytest.raises(DataDownloadError, match=r"val\.en\.gz: truncated or invalid gzip"):
            load_multi30k(url, cache_dir=cache, retries=0)
    assert "val.en.gz" not in leftovers(cache) and not any(n.endswith(".part") for n in leftovers(cache))


def test_server_error_is_retried(tmp_path, monkeypatch):
    files = small_mirror(monkeypatch)
    routes = {"/" + name: [("ok", body)] for name, body in files.items()}
    routes["/train.en.gz"] = [("status", 500), ("ok", files["train.en.gz"])]  # fails once, then works
    with serve(routes=routes) as (url, requests):
        splits = load_multi30k(url, cache_dir=tmp_path, retries=2, backoff=0)
    assert requests.count("/train.en.gz") == 2
    assert splits["train"][1] == ["en sentence 0 of train.en.gz", "en sentence 1 of train.en.gz",
                                  "en sentence 2 of train.en.gz"]


def test_not_found_is_not_retried(tmp_path, monkeypatch):
    small_mirror(monkeypatch)
    with serve(routes={}) as (url, requests):  # every path: 404
        with pytest.raises(DataDownloadError, match=r"train\.de\.gz: HTTP error 404"):
            load_multi30k(url, cache_dir=tmp_path, retries=3, backoff=0)
    assert requests == ["/train.de.gz"]


def test_cached_file_with_wrong_checksum_is_fetched_again(tmp_path, monkeypatch):
    files = small_mirror(monkeypatch)
    (tmp_path / "val.de.gz").write_bytes(b"not the file")
    routes = {"/" + name: [("ok", body)] for name, body in files.items()}
    with serve(routes=routes) as (url, requests):
        load_multi30k(url, cache_dir=tmp_path, retries=0)
    assert "/val.de.gz" in requests and (tmp_path / "val.de.gz").read_bytes() == files["val.de.gz"]


def test_local_folder_mirror(tmp_path, monkeypatch):
    files = small_mirror(monkeypatch)
    for name, body in files.items():
        (tmp_path / name).write_bytes(body)
    splits = load_multi30k(str(tmp_path))
    assert splits["test"][0][2] == "de sentence 2 of test_2016_flickr.de.gz"
    (tmp_path / "val.en.gz").unlink()
    with pytest.raises(DataDownloadError, match=r"val\.en\.gz: not found in the local folder"):
        load_multi30k(str(tmp_path))


def test_load_data_falls_back_to_synthetic_when_offline(tmp_path, monkeypatch, capsys):
    with socket.socket() as s:  # a port on which nothing listens: connection refused, like no network
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(data, "MULTI30K_URL", f"http://127.0.0.1:{port}/")
    name, splits = load_data("multi30k", cache_dir=tmp_path, synthetic_sizes=(50, 5, 5), retries=0)
    out = capsys.readouterr().out
    assert name == "synthetic" and len(splits["train"][0]) == 50
    assert "Could not load Multi30k" in out and "train.de.gz" in out and "NOT comparable" in out
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------- the synthetic corpus
GERMAN_VERBS = {form for verbs in (data.TRANSITIVE, data.INTRANSITIVE) for v in verbs for form in v[2:]}


def test_synthetic_corpus_is_deterministic():
    assert synthetic_corpus(200, seed=0) == synthetic_corpus(200, seed=0)
    assert synthetic_corpus(200, seed=0) != synthetic_corpus(200, seed=1)
    splits = load_synthetic(300, 40, 40, seed=3)
    assert [len(de) for de, _ in splits.values()] == [300, 40, 40]
    assert not set(splits["train"][0]) & set(splits["test"][0]), "a test sentence also in the training split"


def test_synthetic_corpus_has_word_order_and_compounds():
    pairs = synthetic_corpus(2000, seed=0)
    # verb last in a subordinate clause: "Der Hund lacht, weil die Katze im Garten schläft."
    subordinate = [de for de, _ in pairs if re.search(r", (weil|während|dass) ", de)]
    assert len(subordinate) > 300
    assert all(de[:-1].split()[-1] in GERMAN_VERBS for de in subordinate), "the verb should end the clause"
    # verb second after a fronted time: "Heute sieht der Mann ..." / "Today the man sees ..."
    assert any(de.startswith("Heute ") and de.split()[1] in GERMAN_VERBS and en.startswith("Today the ")
               for de, en in pairs)
    # compounds: one German word for two English ones
    assert any("Fußballspieler" in de and "football player" in en for de, en in pairs)
    # agreement: the accusative masculine article and adjective ending ("den großen Hund")
    assert any(re.search(r"\bden \w+en [A-ZÄÖÜ]", de) for de, _ in pairs)
