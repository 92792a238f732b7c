"""Parallel corpora for the final lesson: Multi30k German-English (task 1, Elliott et al. 2016),
downloaded and checked against pinned sha256 sums, WMT 2014 English-German (the paper's data, the same way),
and a synthetic German-English corpus made by a small grammar, for when there is no network or no time.

Every loader returns the same thing: {"train": (german_lines, english_lines), "val": ..., "test": ...}.

Example: splits = load_synthetic(100, 10, 10); de, en = splits["train"]; len(de) -> 100
"""
from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import pathlib
import random
import socket
import tempfile
import time
import urllib.error
import urllib.request

MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
MULTI30K_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/data/task1/raw/"
# sha256 of each raw file at that commit (and its number of lines, checked after reading)
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}
MULTI30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}  # split -> file stem
OFFLINE_HINT = ("Offline? Put the six files of Multi30k task 1 ({files}) in a folder and pass that folder "
                "as the source (DATA=\"/path/to/folder\"), or train on the synthetic corpus "
                "(DATA=\"synthetic\").")


class DataDownloadError(RuntimeError):
    """A Multi30k file could not be fetched or failed its checks. The message names the file, what
    failed, and what to do offline."""


def default_cache_dir() -> pathlib.Path:
    """$TRANSFORMER_COURSE_DATA, else ~/.cache/transformer-course/multi30k."""
    env = os.environ.get("TRANSFORMER_COURSE_DATA")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "transformer-course" / "multi30k"


def sha256_of(path) -> str:
    """Hex sha256 of a file. Example: an empty file -> "e3b0c442...b855"."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fail(name: str, what: str) -> DataDownloadError:
    return DataDownloadError(f"Multi30k file {name}: {what}. "
                             + OFFLINE_HINT.format(files=", ".join(MULTI30K_SHA256)))


def _check_file(path: pathlib.Path, name: str, where: str) -> None:
    """Raise unless `path` has the pinned sha256 and is a complete gzip stream."""
    expected, got = MULTI30K_SHA256[name], sha256_of(path)
    if got != expected:
        raise _fail(name, f"checksum mismatch for {where}: expected sha256 {expected}, got {got} "
                          f"(a corrupt, truncated or different file)")
    try:
        with gzip.open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    except (EOFError, OSError) as e:  # gzip.BadGzipFile is an OSError
        raise _fail(name, f"truncated or invalid gzip in {where} ({e})") from None


class _Truncated(Exception):
    """The connection ended before Content-Length bytes came."""


def _download(url: str, dest: pathlib.Path, timeout: float) -> None:
    """One attempt: stream `url` into `dest`, checking the length against Content-Length."""
    with urllib.request.urlopen(url, timeout=timeout) as response, open(dest, "wb") as f:
        expected = response.headers.get("Content-Length")
        size = 0
        for chunk in iter(lambda: response.read(1 << 16), b""):
            f.write(chunk)
            size += len(chunk)
    if expected is not None and size != int(expected):
        raise _Truncated(f"{size} of {expected} bytes")


def fetch(name: str, source: str = "multi30k", cache_dir=None, retries: int = 3, timeout: float = 30.0,
          backoff: float = 1.0) -> pathlib.Path:
    """The verified local path of one Multi30k file, downloading it into the cache when needed.

    source: "multi30k" (the pinned GitHub commit), an http(s) URL of a mirror with the same file names,
    or a local folder. A download goes to a temporary file in the cache folder, is checked (length,
    sha256, gzip) and only then renamed into place, so the cache never holds a bad file; a cached file
    with the wrong checksum is fetched again. Network errors and truncated transfers are retried
    `retries` times, waiting backoff, 2*backoff, ... seconds.
    Example: fetch("val.en.gz", "/data/multi30k") -> PosixPath("/data/multi30k/val.en.gz")
    """
    if name not in MULTI30K_SHA256:
        raise ValueError(f"unknown Multi30k file {name!r}: expected one of {sorted(MULTI30K_SHA256)}")
    if source != "multi30k" and not source.startswith(("http://", "https://")):  # a local folder
        path = pathlib.Path(source).expanduser() / name
        if not path.is_file():
            raise _fail(name, f"not found in the local folder {path.parent}")
        _check_file(path, name, str(path))
        return path

    base = MULTI30K_URL if source == "multi30k" else source.rstrip("/") + "/"
    cache = pathlib.Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / name
    if target.is_file():
        if sha256_of(target) == MULTI30K_SHA256[name]:
            return target
        target.unlink()  # a stale or damaged copy: fetch it again

    url = base + name
    last_error = "no attempt was made"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=cache)
        os.close(fd)
        tmp = pathlib.Path(tmp)
        try:
            _download(url, tmp, timeout)
            _check_file(tmp, name, url)  # a bad file is not a network hiccup: no retry
            os.replace(tmp, target)      # atomic: the cache holds the whole verified file or nothing
            return target
        except urllib.error.HTTPError as e:
            last_error = f"HTTP error {e.code} {e.reason} from {url}"
            if 400 <= e.code < 500 and e.code not in (408, 429):
                break  # not found, forbidden...: asking again will not help
        except (_Truncated, http.client.IncompleteRead) as e:
            last_error = f"truncated download from {url} (connection closed after {e})"
        except (socket.timeout, TimeoutError) as e:
            last_error = f"timeout after {timeout} s from {url} ({e})"
        except urllib.error.URLError as e:
            reason = e.reason
            kind = "timeout" if isinstance(reason, (socket.timeout, TimeoutError)) else "network error"
            last_error = f"{kind} for {url} ({reason})"
        except (ConnectionError, http.client.HTTPException) as e:
            last_error = f"network error for {url} ({type(e).__name__}: {e})"
        finally:
            tmp.unlink(missing_ok=True)  # after os.replace it is gone already; otherwise never left behind
    raise _fail(name, f"{last_error}, after {attempt + 1} attempt(s)")


def _read_lines(path: pathlib.Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def load_multi30k(source: str = "multi30k", cache_dir=None, retries: int = 3, timeout: float = 30.0,
                  backoff: float = 1.0) -> dict[str, tuple[list[str], list[str]]]:
    """Multi30k task 1: {"train": (29000 German lines, 29000 English lines), "val": (1014, 1014),
    "test": (1000, 1000)} (test is test_2016_flickr). Raises DataDownloadError on failure.

    Example: load_multi30k("path/to/multi30k")["val"][1][1] -> "A man sleeping in a green room on a couch."
    """
    splits = {}
    for split, stem in MULTI30K_SPLITS.items():
        de, en = (_read_lines(fetch(f"{stem}.{lang}.gz", source, cache_dir, retries, timeout, backoff))
                  for lang in ("de", "en"))
        if len(de) != len(en):
            raise _fail(f"{stem}.de.gz",
                        f"{len(de)} German lines but {len(en)} English lines in {stem}.en.gz")
        splits[split] = (de, en)
    return splits


# ---------------------------------------------------------------- WMT 2014 English-German (the paper's data)
# The four archives that make the WMT 2014 English-German task as tensor2tensor, fairseq and Hugging Face
# build it: Europarl v7, Common Crawl and News Commentary v9 for training (4,508,785 sentence pairs), and the
# news test sets: newstest2013 (3,000 sentences, the usual validation set) and newstest2014 (3,003, the test
# set; sacreBLEU calls it "wmt14/full", its "wmt14" being the 2,737-sentence filtered version). Pinned: the
# zip copies of statmt.org's archives on the Hugging Face hub, with the sha256 and sizes that
# huggingface/datasets records for them (datasets/wmt14/dataset_infos.json, commit 040102f1 of that
# repository). 1.70 GB to download.
WMT14_SOURCES = {  # file name -> (URL, sha256, bytes)
    "training-parallel-europarl-v7.zip": (
        "https://huggingface.co/datasets/wmt/wmt13/resolve/main-zip/training-parallel-europarl-v7.zip",
        "5b2d8b32c2396da739b4e731871c597fcc6e75729becd74619d0712eecf7770e", 658092427),
    "training-parallel-commoncrawl.zip": (
        "https://huggingface.co/datasets/wmt/wmt13/resolve/main-zip/training-parallel-commoncrawl.zip",
        "5ffe980072ea29adfd84568d099bea366d9f72772b988e670794ae851b4e5627", 918734483),
    "training-parallel-nc-v9.zip": (
        "https://huggingface.co/datasets/wmt/wmt14/resolve/main-zip/training-parallel-nc-v9.zip",
        "ce199f93ec56ff480137ba29f0819f9a22e70d88be6d7458f112303d67d623d5", 80462375),
    "dev.zip": (
        "https://huggingface.co/datasets/wmt/wmt19/resolve/main-zip/translation-task/dev.zip",
        "d796e363740fdc4261aa6f5a3d2f8223e3adaee7d737b7724863325b8956dfd1", 38714274),
}
# each split: (archive, German file, English file) inside it, found by the file's own name (any folder)
WMT14_FILES = {
    "train": [("training-parallel-europarl-v7.zip", "europarl-v7.de-en.de", "europarl-v7.de-en.en"),
              ("training-parallel-commoncrawl.zip", "commoncrawl.de-en.de", "commoncrawl.de-en.en"),
              ("training-parallel-nc-v9.zip", "news-commentary-v9.de-en.de", "news-commentary-v9.de-en.en")],
    "val": [("dev.zip", "newstest2013.de", "newstest2013.en")],                           # plain text
    # SGML: <seg id=..>
    "test": [("dev.zip", "newstest2014-deen-src.de.sgm", "newstest2014-deen-ref.en.sgm")],
}
WMT14_HINT = ("Offline? Put the four archives ({files}) in a folder and pass that folder as the source "
              "(load_wmt14(\"/path/to/folder\")), or copy them into the cache folder {cache}.")


def wmt14_cache_dir() -> pathlib.Path:
    """$TRANSFORMER_COURSE_DATA/wmt14, else ~/.cache/transformer-course/wmt14."""
    env = os.environ.get("TRANSFORMER_COURSE_DATA")
    return (pathlib.Path(env) / "wmt14" if env
            else pathlib.Path.home() / ".cache" / "transformer-course" / "wmt14")


def _wmt_fail(name: str, what: str, cache) -> DataDownloadError:
    return DataDownloadError(f"WMT 2014 file {name}: {what}. "
                             + WMT14_HINT.format(files=", ".join(WMT14_SOURCES), cache=cache))


def fetch_wmt14(name: str, source: str = "wmt14", cache_dir=None, checksums: dict | None = None,
                retries: int = 3, timeout: float = 60.0, backoff: float = 1.0) -> pathlib.Path:
    """The verified local path of one WMT 2014 archive (a name of WMT14_SOURCES), as fetch() does for
    Multi30k: source "wmt14" (the pinned URLs, into the cache), an http(s) mirror with the same file names
    (into the cache), or a local folder (read where it is). A file whose sha256 is not the pinned one is
    refused with an error naming it (a cached one is fetched again). `checksums` replaces the pinned sums (for
    a test fixture).
    Example: fetch_wmt14("dev.zip") -> PosixPath("~/.cache/transformer-course/wmt14/dev.zip")
    """
    sums = {k: v[1] for k, v in WMT14_SOURCES.items()} if checksums is None else checksums
    if name not in sums:
        raise ValueError(f"unknown WMT 2014 file {name!r}: expected one of {sorted(sums)}")
    cache = pathlib.Path(cache_dir) if cache_dir is not None else wmt14_cache_dir()
    if source != "wmt14" and not source.startswith(("http://", "https://")):  # a local folder
        path = pathlib.Path(source).expanduser() / name
        if not path.is_file():
            raise _wmt_fail(name, f"not found in the local folder {path.parent}", cache)
        got = sha256_of(path)
        if got != sums[name]:
            raise _wmt_fail(name, f"checksum mismatch for {path}: expected sha256 {sums[name]}, got {got} "
                                  "(a corrupt, truncated or different file)", cache)
        return path
    url = WMT14_SOURCES[name][0] if source == "wmt14" else source.rstrip("/") + "/" + name
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / name
    if target.is_file():
        if sha256_of(target) == sums[name]:
            return target
        target.unlink()  # a stale or damaged copy: fetch it again
    last_error = "no attempt was made"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        tmp = cache / f".{name}.part"
        try:
            _download(url, tmp, timeout)
            got = sha256_of(tmp)
            if got != sums[name]:  # a wrong file is not a network hiccup: no retry
                raise _wmt_fail(name, f"checksum mismatch for {url}: expected sha256 {sums[name]}, got {got}",
                                cache)
            os.replace(tmp, target)  # the cache holds the whole verified file or nothing
            return target
        except urllib.error.HTTPError as e:
            last_error = f"HTTP error {e.code} {e.reason} from {url}"
            if 400 <= e.code < 500 and e.code not in (408, 429):
                break
        except (_Truncated, http.client.IncompleteRead, socket.timeout, TimeoutError, urllib.error.URLError,
                ConnectionError, http.client.HTTPException) as e:
            last_error = f"{type(e).__name__} for {url} ({e})"
        finally:
            tmp.unlink(missing_ok=True)
    raise _wmt_fail(name, f"{last_error}, after {attempt + 1} attempt(s)", cache)


def _zip_lines(archive: pathlib.Path, file_name: str) -> list[str]:
    """The lines of the file called `file_name` (in any folder) inside a zip archive; SGML keeps only the
    text of each <seg> as sacreBLEU reads it (spaces collapsed), plain text every line as it is."""
    import re
    import zipfile

    with zipfile.ZipFile(archive) as z:
        members = [m for m in z.namelist() if m.rsplit("/", 1)[-1] == file_name]
        if len(members) != 1:
            raise DataDownloadError(f"WMT 2014 file {archive.name}: expected one {file_name} inside, "
                                    f"found {len(members)} (is it the pinned archive?)")
        text = z.read(members[0]).decode("utf-8")
    # split at "\n" only: Common Crawl has other line separators inside lines
    if not file_name.endswith(".sgm"):
        lines = text.split("\n")
        return [line.rstrip("\r") for line in (lines[:-1] if text.endswith("\n") else lines)]
    return [re.sub(r"\s+", " ", m.strip()) for m in re.findall(r"<seg[^>]*>(.*?)</seg>", text)]


def load_wmt14(source: str = "wmt14", cache_dir=None, direction: str = "de-en", checksums: dict | None = None,
               **download) -> dict[str, tuple[list[str], list[str]]]:
    """WMT 2014 English-German: {"train": (4,508,785 source lines, as many target lines), "val": newstest2013
    (3,000; sacreBLEU's "wmt13"), "test": newstest2014 (3,003; sacreBLEU's "wmt14/full")}. direction "de-en"
    gives (German, English) like every loader here; "en-de", the paper's direction, gives (English, German).
    Each archive is checked against its pinned sha256 first (fetch_wmt14); a German file and its English file
    of different lengths are an error naming them.

    Costs (not measured here, where nothing downloads): 1.70 GB of archives in the cache, ~1.4 GB of text in
    memory as Python strings (several GB), and the course's pure-Python BPE over 9 million lines.
    Example: load_wmt14(direction="en-de")["test"][1][0] -> the first German reference of newstest2014
    """
    if direction not in ("de-en", "en-de"):
        raise ValueError(f"direction must be 'de-en' or 'en-de', got {direction!r}")
    archives = {name: fetch_wmt14(name, source, cache_dir, checksums, **download) for name in WMT14_SOURCES}
    splits = {}
    for split, files in WMT14_FILES.items():
        de, en = [], []
        for archive, de_file, en_file in files:
            de_lines, en_lines = _zip_lines(archives[archive], de_file), _zip_lines(archives[archive],
                                                                                    en_file)
            if len(de_lines) != len(en_lines):
                raise DataDownloadError(f"WMT 2014 file {archive}: {len(de_lines)} lines in {de_file} but "
                                        f"{len(en_lines)} in {en_file}")
            de += de_lines
            en += en_lines
        splits[split] = (de, en) if direction == "de-en" else (en, de)
    return splits


# ---------------------------------------------------------------- the synthetic corpus
# A tiny grammar of German and English with what makes translation hard: gender and case on articles
# and adjective endings, verb agreement, verb-second main clauses ("Heute sieht der Mann ..."), verb-final
# subordinate clauses ("..., weil der Hund im Garten schläft."), and compound nouns written as one word
# ("Fußballspieler" = "football player"), which BPE has to split and attention has to align.

# (English singular, English plural, German singular, German plural, gender)
NOUNS = [
    ("man", "men", "Mann", "Männer", "m"), ("woman", "women", "Frau", "Frauen", "f"),
    ("child", "children", "Kind", "Kinder", "n"), ("dog", "dogs", "Hund", "Hunde", "m"),
    ("cat", "cats", "Katze", "Katzen", "f"), ("girl", "girls", "Mädchen", "Mädchen", "n"),
    ("boy", "boys", "Junge", "Jungen", "m"), ("bird", "birds", "Vogel", "Vögel", "m"),
    ("teacher", "teachers", "Lehrer", "Lehrer", "m"), ("doctor", "doctors", "Arzt", "Ärzte", "m"),
    ("friend", "friends", "Freund", "Freunde", "m"), ("horse", "horses", "Pferd", "Pferde", "n"),
]
OBJECTS = [
    ("ball", "balls", "Ball", "Bälle", "m"), ("book", "books", "Buch", "Bücher", "n"),
    ("car", "cars", "Auto", "Autos", "n"), ("bicycle", "bicycles", "Fahrrad", "Fahrräder", "n"),
    ("apple", "apples", "Apfel", "Äpfel", "m"), ("table", "tables", "Tisch", "Tische", "m"),
    ("door", "doors", "Tür", "Türen", "f"), ("bag", "bags", "Tasche", "Taschen", "f"),
    ("picture", "pictures", "Bild", "Bilder", "n"), ("letter", "letters", "Brief", "Briefe", "m"),
    ("flower", "flowers", "Blume", "Blumen", "f"), ("hat", "hats", "Hut", "Hüte", "m"),
]
# compounds: a modifier (English, German) + a head noun; German writes one word: "Fußball" + "spieler"
MODIFIERS = [("football", "Fußball"), ("tennis", "Tennis"), ("kitchen", "Küchen"), ("school", "Schul"),
             ("city", "Stadt"), ("garden", "Garten"), ("water", "Wasser"), ("mountain", "Berg")]
PERSON_HEADS = [("player", "players", "spieler", "spieler", "m"),
                ("teacher", "teachers", "lehrer", "lehrer", "m"),
                ("friend", "friends", "freund", "freunde", "m")]
OBJECT_HEADS = [("ball", "balls", "ball", "bälle", "m"), ("door", "doors", "tür", "türen", "f"),
                ("table", "tables", "tisch", "tische", "m"), ("bag", "bags", "tasche", "taschen", "f"),
                ("book", "books", "buch", "bücher", "n")]
ADJECTIVES = [("big", "groß"), ("small", "klein"), ("old", "alt"), ("young", "jung"), ("red", "rot"),
              ("blue", "blau"), ("happy", "glücklich"), ("fast", "schnell"), ("new", "neu"),
              ("black", "schwarz"), ("white", "weiß"), ("green", "grün")]
# verbs: English base, English 3rd singular, German 1st singular, 3rd singular, plural
TRANSITIVE = [("see", "sees", "sehe", "sieht", "sehen"), ("buy", "buys", "kaufe", "kauft", "kaufen"),
              ("find", "finds", "finde", "findet", "finden"),
              ("carry", "carries", "trage", "trägt", "tragen"),
              ("hold", "holds", "halte", "hält", "halten"), ("wash", "washes", "wasche", "wäscht", "waschen"),
              ("paint", "paints", "male", "malt", "malen"), ("throw", "throws", "werfe", "wirft", "werfen"),
              ("catch", "catches", "fange", "fängt", "fangen"), ("build", "builds", "baue", "baut", "bauen")]
INTRANSITIVE = [("run", "runs", "laufe", "läuft", "laufen"),
                ("sleep", "sleeps", "schlafe", "schläft", "schlafen"),
                ("play", "plays", "spiele", "spielt", "spielen"),
                ("laugh", "laughs", "lache", "lacht", "lachen"),
                ("wait", "waits", "warte", "wartet", "warten"), ("sing", "sings", "singe", "singt", "singen")]
SAY = [("say", "says", "sage", "sagt", "sagen"), ("think", "thinks", "denke", "denkt", "denken"),
       ("know", "knows", "weiß", "weiß", "wissen")]
PRONOUNS = [("I", "ich", "1sg"), ("he", "er", "3sg"), ("she", "sie", "3sg"), ("we", "wir", "pl"),
            ("they", "sie", "pl")]
TIMES = [("today", "heute"), ("now", "jetzt"), ("in the morning", "am Morgen"),
         ("in the evening", "am Abend")]
PLACES = [("in the park", "im Park"), ("in the garden", "im Garten"), ("on the street", "auf der Straße"),
          ("at school", "in der Schule"), ("by the river", "am Fluss")]
CONJUNCTIONS = [("because", "weil"), ("while", "während")]

ARTICLES = {  # (definite?, case, gender or "pl") -> German article
    (True, "nom", "m"): "der", (True, "nom", "f"): "die", (True, "nom", "n"): "das",
    (True, "nom", "pl"): "die",
    (True, "acc", "m"): "den", (True, "acc", "f"): "die", (True, "acc", "n"): "das",
    (True, "acc", "pl"): "die",
    (False, "nom", "m"): "ein", (False, "nom", "f"): "eine", (False, "nom", "n"): "ein",
    (False, "nom", "pl"): "",
    (False, "acc", "m"): "einen", (False, "acc", "f"): "eine", (False, "acc", "n"): "ein",
    (False, "acc", "pl"): "",
}
ENDINGS = {  # adjective ending after that article (weak after der/die/das, mixed after ein, strong with none)
    (True, "nom", "m"): "e", (True, "nom", "f"): "e", (True, "nom", "n"): "e", (True, "nom", "pl"): "en",
    (True, "acc", "m"): "en", (True, "acc", "f"): "e", (True, "acc", "n"): "e", (True, "acc", "pl"): "en",
    (False, "nom", "m"): "er", (False, "nom", "f"): "e", (False, "nom", "n"): "es", (False, "nom", "pl"): "e",
    (False, "acc", "m"): "en", (False, "acc", "f"): "e", (False, "acc", "n"): "es", (False, "acc", "pl"): "e",
}


def _noun(rng: random.Random, people: bool) -> tuple[str, str, str, str, str]:
    """A simple or (one time in four) compound noun: (en_sg, en_pl, de_sg, de_pl, gender)."""
    if rng.random() < 0.25:
        (mod_en, mod_de), (en, en_pl, de, de_pl, gender) = rng.choice(MODIFIERS), rng.choice(
            PERSON_HEADS if people else OBJECT_HEADS)
        return f"{mod_en} {en}", f"{mod_en} {en_pl}", mod_de + de, mod_de + de_pl, gender
    return rng.choice(NOUNS if people else OBJECTS)


def _noun_phrase(rng: random.Random, case: str, people: bool) -> tuple[str, str, str]:
    """(English, German, person/number) of e.g. "the big dog" / "den großen Hund" (case "acc").

    Example: definite, "acc", big, dog -> ("the big dog", "den großen Hund", "3sg")
    """
    en_sg, en_pl, de_sg, de_pl, gender = _noun(rng, people)
    plural, definite = rng.random() < 0.3, rng.random() < 0.6
    key = (definite, case, "pl" if plural else gender)
    en_words, de_words = [], [ARTICLES[key]] if ARTICLES[key] else []
    if definite:
        en_words.append("the")
    elif not plural:
        en_words.append("a")
    if rng.random() < 0.4:
        adj_en, adj_de = rng.choice(ADJECTIVES)
        en_words.append(adj_en)
        de_words.append(adj_de + ENDINGS[key])
    en_words.append(en_pl if plural else en_sg)
    de_words.append(de_pl if plural else de_sg)
    if en_words[0] == "a" and en_words[1][0] in "aeiou":
        en_words[0] = "an"
    return " ".join(en_words), " ".join(de_words), "pl" if plural else "3sg"


def _subject(rng: random.Random) -> tuple[str, str, str]:
    """(English, German, person) of a subject: a pronoun or a noun phrase in the nominative."""
    if rng.random() < 0.25:
        return rng.choice(PRONOUNS)
    return _noun_phrase(rng, "nom", people=True)


def _verb(rng: random.Random, verbs: list, person: str) -> tuple[str, str]:
    """(English, German) forms of a random verb that agree with person ("1sg", "3sg" or "pl").

    Example: ("see", "sees", "sehe", "sieht", "sehen"), "3sg" -> ("sees", "sieht")
    """
    en_base, en_3sg, de_1sg, de_3sg, de_pl = rng.choice(verbs)
    return (en_3sg if person == "3sg" else en_base), {"1sg": de_1sg, "3sg": de_3sg, "pl": de_pl}[person]


def _clause(rng: random.Random) -> tuple[str, str, str, list[str]]:
    """One clause: (English text, German subject, German verb, German rest). The caller orders the
    German: main clause "subject verb rest" (verb second), subordinate "subject rest verb" (verb last).

    Example: ("the dog sleeps in the garden", "der Hund", "schläft", ["im Garten"])
    """
    en_subj, de_subj, person = _subject(rng)
    transitive = rng.random() < 0.6
    en_verb, de_verb = _verb(rng, TRANSITIVE if transitive else INTRANSITIVE, person)
    en_words, de_rest = [en_subj, en_verb], []
    if transitive:
        en_obj, de_obj, _ = _noun_phrase(rng, "acc", people=rng.random() < 0.3)
        en_words.append(en_obj)
        de_rest.append(de_obj)
    if rng.random() < 0.3:
        en_place, de_place = rng.choice(PLACES)
        en_words.append(en_place)
        de_rest.append(de_place)
    return " ".join(en_words), de_subj, de_verb, de_rest


def synthetic_pair(rng: random.Random) -> tuple[str, str]:
    """One (German, English) sentence pair from the grammar. Examples of the four shapes:
    ("Der Junge wirft einen roten Ball.", "The boy throws a red ball.")               verb second
    ("Heute sieht der Mann die Katze.", "Today the man sees the cat.")                inverted after a time
    ("Der Hund lacht, weil die Katze im Garten schläft.",
     "The dog laughs because the cat sleeps in the garden.")
    ("Sie sagt, dass das Kind einen Fußballspieler sieht.",
     "She says that the child sees a football player.")
    """
    shape = rng.random()
    if shape < 0.2:  # "X says that ...": the verb of the dass-clause goes last
        en_subj, de_subj, person = _subject(rng)
        en_say, de_say = _verb(rng, SAY, person)
        en_sub, sub_subj, sub_verb, sub_rest = _clause(rng)
        return (_sentence(" ".join([de_subj, de_say + ",", "dass", sub_subj, *sub_rest, sub_verb])),
                _sentence(f"{en_subj} {en_say} that {en_sub}"))
    en, de_subj, de_verb, de_rest = _clause(rng)
    if shape < 0.45:  # a fronted time phrase: German inverts, the verb stays second
        en_time, de_time = rng.choice(TIMES)
        en, de = f"{en_time} {en}", " ".join([de_time, de_verb, de_subj, *de_rest])
    else:
        de = " ".join([de_subj, de_verb, *de_rest])
    if shape > 0.7:  # "..., weil ...": a subordinate clause, its verb last
        conj_en, conj_de = rng.choice(CONJUNCTIONS)
        en_sub, sub_subj, sub_verb, sub_rest = _clause(rng)
        en, de = f"{en} {conj_en} {en_sub}", " ".join([de + ",", conj_de, sub_subj, *sub_rest, sub_verb])
    return _sentence(de), _sentence(en)


def _sentence(text: str) -> str:
    """Capitalize the first letter and end with a full stop.
    Example: "der mann lacht" -> "Der mann lacht."."""
    return text[0].upper() + text[1:] + "."


def synthetic_corpus(n_sentences: int, seed: int = 0) -> list[tuple[str, str]]:
    """n_sentences distinct (German, English) pairs, the same for the same seed.

    Example: synthetic_corpus(2, seed=0) == synthetic_corpus(2, seed=0) (and differs for seed=1)
    """
    rng, seen, pairs = random.Random(seed), set(), []
    for _ in range(20 * n_sentences + 100):
        if len(pairs) == n_sentences:
            break
        pair = synthetic_pair(rng)
        if pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    if len(pairs) < n_sentences:
        raise ValueError(f"the grammar gave only {len(pairs)} distinct sentences, {n_sentences} were asked "
                         "for")
    return pairs


def load_synthetic(n_train: int = 20000, n_val: int = 500, n_test: int = 500,
                   seed: int = 0) -> dict[str, tuple[list[str], list[str]]]:
    """The synthetic corpus split like Multi30k: {"train": (German lines, English lines), "val": ..., "test":
    ...},
    no sentence in two splits. Example: load_synthetic(100, 10, 10)["val"][0][:2] -> two German sentences
    """
    pairs = synthetic_corpus(n_train + n_val + n_test, seed)
    bounds = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, len(pairs))}
    return {split: ([de for de, _ in pairs[a:b]], [en for _, en in pairs[a:b]])
            for split, (a, b) in bounds.items()}


def load_data(data: str = "multi30k", cache_dir=None, synthetic_sizes=(20000, 500, 500), seed: int = 0,
              **download) -> tuple[str, dict[str, tuple[list[str], list[str]]]]:
    """The lesson's DATA switch: returns (name of what was loaded, splits).

    "multi30k": download (or reuse the cache); if that fails, say why on stdout and fall back to the
    synthetic corpus. "synthetic": the synthetic corpus. "wmt14": WMT 2014, German to English; "wmt14-en-de":
    the paper's direction, English to German (load_wmt14; cache_dir is then the WMT cache). A URL or a folder:
    that Multi30k mirror (failure is an error there: you asked for that mirror). `download` goes to
    load_multi30k (retries, timeout, backoff).
    Example: name, splits = load_data("synthetic"); name -> "synthetic"
    """
    if data == "synthetic":
        return "synthetic", load_synthetic(*synthetic_sizes, seed=seed)
    if data in ("wmt14", "wmt14-en-de"):  # no fallback: a run of the paper's data wants the paper's data
        return data, load_wmt14(cache_dir=cache_dir, direction="en-de" if data == "wmt14-en-de" else "de-en",
                                **download)
    if data != "multi30k":
        return "multi30k", load_multi30k(data, cache_dir, **download)
    try:
        return "multi30k", load_multi30k("multi30k", cache_dir, **download)
    except DataDownloadError as e:
        print(f"Could not load Multi30k: {e}\nFalling back to the synthetic corpus (DATA=\"synthetic\"). "
              f"Its BLEU scores are NOT comparable with Multi30k results.", flush=True)
        return "synthetic", load_synthetic(*synthetic_sizes, seed=seed)
