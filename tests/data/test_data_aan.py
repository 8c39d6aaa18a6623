"""LRA Retrieval: AAN TSV pairs and the offline Python-doc link pairs."""

import pytest

from weirdnet.data import DataMissingError, get
from weirdnet.data.lra.aan import read_aan_tsv
from weirdnet.data.lra.pydoc_graph import link_graph, linked_pairs, read_pages
from weirdnet.data.sources.packages import PYTHON_DOC


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def _tsv(root, part: str, rows: list[str], header: bool = False):
    folder = root / "tsv_data"
    folder.mkdir(parents=True, exist_ok=True)
    text = ("label\tid1\tid2\ttext1\ttext2\n" if header else "") + "\n".join(rows) + "\n"
    (folder / f"new_aan_pairs.{part}.tsv").write_text(text, encoding="utf-8")


def test_aan_rows_become_two_shifted_documents(tmp_path):
    long = "Citation analysis " * 400
    _tsv(tmp_path, "train", ["1\tP00-1\tP00-2\tAbstract é one\tAbstract two",
                             f"0.0\tP00-3\tP00-4\t{long}\tshort"], header=True)
    train = get("aan", "train", root=tmp_path)
    assert len(train) == 2 and train.info.task == "retrieval" and train.info.vocab_size == 257
    first = train[0]
    assert first["label"] == 1
    assert first["tokens"].tolist() == [b + 1 for b in "Abstract é one".encode()]
    assert first["tokens2"].tolist() == [b + 1 for b in b"Abstract two"]
    assert train[1]["label"] == 0 and len(train[1]["tokens"]) == 4000
    assert len(get("aan", "train", root=tmp_path / "tsv_data", max_len=50)[1]["tokens"]) == 50


def test_val_reads_the_eval_file(tmp_path):
    _tsv(tmp_path, "eval", ["1\ta\tb\tx\ty"])
    assert get("aan", "val", root=tmp_path)[0]["label"] == 1
    with pytest.raises(DataMissingError, match="new_aan_pairs.test.tsv.*lra_release.gz"):
        get("aan", "test", root=tmp_path)


def test_bad_rows_name_file_and_line(tmp_path):
    _tsv(tmp_path, "train", ["1\ta\tb\tx\ty", "0\ta\tb\tcut here"])
    path = tmp_path / "tsv_data" / "new_aan_pairs.train.tsv"
    with pytest.raises(ValueError, match=r"line 2: expected 5 .* got 4 \(truncated row\?\)"):
        read_aan_tsv(path)
    _tsv(tmp_path, "train", ["2\ta\tb\tx\ty"])
    with pytest.raises(ValueError, match="line 1: label must be 0 or 1"):
        read_aan_tsv(path)


def _docs(root):
    """A small Sphinx _sources tree with every kind of reference."""
    pages = {
        "a.rst.txt": ".. _label-a:\n\nA\n=\n\n.. module:: mod_a\n\n.. function:: f(x)\n\n"
                     ".. class:: K\n\n   .. method:: m()\n",
        "b.rst.txt": "See :ref:`the A page <label-a>` and :ref:`missing-label`.\n",
        "c.rst.txt": ".. currentmodule:: mod_a\n\nUse :func:`~mod_a.f`, :meth:`K.m`.\n",
        "sub/d.rst.txt": "Read :doc:`e` and :doc:`/b`; :term:`thing`.\n",
        "sub/e.rst.txt": ".. c:function:: PyObject* Py_Foo(int x)\n",
        "glossary.rst.txt": ".. glossary::\n\n   thing\n      A thing.\n",
        "f.rst.txt": "Calls :c:func:`Py_Foo` and :mod:`mod_a`, and itself :ref:`label-f`.\n"
                     ".. _label-f:\n",
        "lonely.rst.txt": "Nothing here.\n",
    }
    for name, text in pages.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_link_graph_resolves_sphinx_references(tmp_path):
    pages = read_pages(_docs(tmp_path))
    assert "sub/d" in pages and "glossary" in pages
    assert link_graph(pages) == [("a", "b"), ("a", "c"), ("a", "f"), ("b", "sub/d"),
                                 ("f", "sub/e"), ("glossary", "sub/d"), ("sub/d", "sub/e")]


def test_linked_pairs_are_balanced_and_reproducible(tmp_path):
    pages = read_pages(_docs(tmp_path))
    pairs, labels = linked_pairs(pages, seed=3)
    positives = set(link_graph(pages))
    assert sum(labels) == len(positives) == len(labels) - sum(labels)
    assert {p for p, y in zip(pairs, labels, strict=True) if y == 1} == positives
    assert not {p for p, y in zip(pairs, labels, strict=True) if y == 0} & positives
    assert len(set(pairs)) == len(pairs)
    assert linked_pairs(pages, seed=3) == (pairs, labels)
    parts = [get("python-doc-pairs", s, root=tmp_path, seed=3) for s in ("train", "val", "test")]
    assert sum(len(p) for p in parts) == len(pairs)
    assert parts[0][0]["tokens"].max() <= 256 and parts[0].info.num_classes == 2


@pytest.mark.skipif(not PYTHON_DOC.path.is_dir(),
                    reason="Python doc pairs need `apt-get install -y python3.11-doc`")
def test_real_python_doc_pairs():
    parts = [get("python-doc-pairs", s) for s in ("train", "val", "test")]
    sizes = [len(p) for p in parts]
    assert sum(sizes) > 8000 and sizes[1] == sizes[2]
    labels = [y for p in parts for y in p.labels]
    assert sum(labels) * 2 == len(labels)
    item = parts[2][0]
    assert len(item["tokens"]) <= 4000 and len(item["tokens2"]) <= 4000
