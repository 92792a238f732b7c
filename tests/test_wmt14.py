"""The WMT 2014 English-German loader (issue 19) on a small fixture made here in the real archives' formats:
zip files with the statmt.org folder layout, plain-text training and newstest2013 files, and newstest2014 in
SGML. Nothing downloads: a folder, and a mirror on 127.0.0.1, stand for the pinned URLs."""
import hashlib
import zipfile

import pytest

from solutions import data
from solutions.data import WMT14_SOURCES, DataDownloadError, fetch_wmt14, load_data, load_wmt14

from .test_data import serve

SGML_SRC = """<srcset setid="newstest2014" srclang="any">
<doc sysid="ref" docid="1012-bbc" genre="news" origlang="en">
<p>
<seg id="1">Gutach: Noch mehr Sicherheit für Fußgänger</seg>
<seg id="2"> Sie stehen  keine 100 Meter voneinander entfernt </seg>
</p>
</doc>
</srcset>
"""
SGML_REF = SGML_SRC.replace("Gutach: Noch mehr Sicherheit für Fußgänger",
                            "Gutach: Increased safety for pedestrians") \
    .replace(" Sie stehen  keine 100 Meter voneinander entfernt ", "They are not even 100 metres apart")


def make_fixture(folder) -> dict[str, str]:
    """The four archives with a few lines each, where the real ones keep them; returns their sha256."""
    contents = {
        "training-parallel-europarl-v7.zip": {
            "training/europarl-v7.de-en.de": "Wiederaufnahme der Sitzungsperiode\nIch bitte Sie.\n",
            "training/europarl-v7.de-en.en": "Resumption of the session\nPlease rise.\n",
            "training/europarl-v7.fr-en.fr": "Reprise de la session\n"},  # other pairs are left alone
        "training-parallel-commoncrawl.zip": {  # no folder; a line separator inside a line is not a new line
            "commoncrawl.de-en.de": "Ein Satz\u2028mit Trenner\r\n",
            "commoncrawl.de-en.en": "A sentence\r\n"},
        "training-parallel-nc-v9.zip": {
            "training/news-commentary-v9.de-en.de": "Gold für 10.000 Dollar?\n",
            "training/news-commentary-v9.de-en.en": "$10,000 Gold?\n"},
        "dev.zip": {
            "dev/newstest2013.de": "Eine Kreuzung in Gutach\nZwei Häuser\nDrei\n",
            "dev/newstest2013.en": "A crossing in Gutach\nTwo houses\nThree\n",
            "dev/newstest2014-deen-src.de.sgm": SGML_SRC, "dev/newstest2014-deen-ref.en.sgm": SGML_REF},
    }
    sums = {}
    for name, members in contents.items():
        with zipfile.ZipFile(folder / name, "w") as z:
            for member, text in members.items():
                z.writestr(member, text.encode("utf-8"))
        sums[name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    assert set(sums) == set(WMT14_SOURCES)
    return sums


def test_reads_the_fixture_in_both_directions(tmp_path):
    sums = make_fixture(tmp_path)
    splits = load_wmt14(str(tmp_path), checksums=sums)
    de, en = splits["train"]  # Europarl, Common Crawl, News Commentary, in that order
    assert de == ["Wiederaufnahme der Sitzungsperiode", "Ich bitte Sie.", "Ein Satz\u2028mit Trenner",
                  "Gold für 10.000 Dollar?"]
    assert en == ["Resumption of the session", "Please rise.", "A sentence", "$10,000 Gold?"]
    assert splits["val"] == (["Eine Kreuzung in Gutach", "Zwei Häuser", "Drei"],
                             ["A crossing in Gutach", "Two houses", "Three"])
    # newstest2014 in SGML: the text of each <seg>, spaces collapsed as sacreBLEU reads it
    assert splits["test"] == (["Gutach: Noch mehr Sicherheit für Fußgänger",
                               "Sie stehen keine 100 Meter voneinander entfernt"],
                              ["Gutach: Increased safety for pedestrians",
                               "They are not even 100 metres apart"])
    # the paper's direction: English first
    paper = load_wmt14(str(tmp_path), direction="en-de", checksums=sums)
    assert paper["test"] == splits["test"][::-1] and paper["train"] == splits["train"][::-1]


def test_a_wrong_checksum_is_refused_naming_the_file(tmp_path):
    sums = make_fixture(tmp_path)
    # the pinned sums are those of the real archives: the fixture's first archive is refused, by name
    with pytest.raises(DataDownloadError, match=r"training-parallel-europarl-v7\.zip: checksum mismatch"):
        load_wmt14(str(tmp_path))
    (tmp_path / "dev.zip").write_bytes((tmp_path / "dev.zip").read_bytes() + b"!")  # a damaged copy
    with pytest.raises(DataDownloadError,
                       match=r"WMT 2014 file dev\.zip: checksum mismatch .*expected sha256 "
                                                + sums["dev.zip"]):
        load_wmt14(str(tmp_path), checksums=sums)


def test_lines_that_do_not_pair_are_an_error(tmp_path):
    make_fixture(tmp_path)
    with zipfile.ZipFile(tmp_path / "training-parallel-nc-v9.zip", "w") as z:
        z.writestr("training/news-commentary-v9.de-en.de", "eins\nzwei\n")
        z.writestr("training/news-commentary-v9.de-en.en", "one\n")
    sums = {name: data.sha256_of(tmp_path / name) for name in WMT14_SOURCES}
    with pytest.raises(DataDownloadError, match="2 lines in news-commentary-v9.de-en.de but 1 in"):
        load_wmt14(str(tmp_path), checksums=sums)


def test_a_mirror_fills_the_cache_once(tmp_path):
    fixture, cache = tmp_path / "mirror", tmp_path / "cache"
    fixture.mkdir()
    sums = make_fixture(fixture)
    with serve(folder=fixture) as (url, requests):
        splits = load_wmt14(url, cache_dir=cache, checksums=sums, retries=0)
        assert sorted(p.name for p in cache.iterdir()) == sorted(WMT14_SOURCES) and len(requests) == 4
        # from the cache
        assert load_wmt14(url, cache_dir=cache, checksums=sums) == splits and len(requests) == 4
        (cache / "dev.zip").write_bytes(b"damaged")  # a bad cached copy is fetched again
        assert fetch_wmt14("dev.zip", url, cache, sums).read_bytes() == (fixture / "dev.zip").read_bytes()
        assert len(requests) == 5


def test_load_data_offers_both_directions(monkeypatch):
    calls = []
    monkeypatch.setattr(data, "load_wmt14", lambda **kw: calls.append(kw["direction"]) or {"test": ([], [])})
    assert load_data("wmt14")[0] == "wmt14" and load_data("wmt14-en-de")[0] == "wmt14-en-de"
    assert calls == ["de-en", "en-de"]
