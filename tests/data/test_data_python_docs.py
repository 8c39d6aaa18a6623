"""python-docs: the Python documentation's reST pages as a byte-LM corpus of long
documents, one document per page."""

import re

import pytest
import torch

from weirdnet.data.registry import get
from weirdnet.data.sources.packages import PYTHON_DOC
from weirdnet.data.text.corpora import PAGE_HEADER, python_docs_bytes

pytestmark = pytest.mark.skipif(not PYTHON_DOC.path.is_dir(),
                                reason="python-docs needs `apt-get install -y python3.11-doc`")


def _pages(tmp_path):
    folder = tmp_path / "_sources"
    (folder / "library").mkdir(parents=True, exist_ok=True)
    (folder / "library" / "os.rst.txt").write_bytes(b"os\n==\n\nText of os.\n\n")
    (folder / "about.rst.txt").write_bytes(b"About\n=====\n")
    (folder / "glossary.rst.txt").write_bytes(b".. _glossary:\n\nGlossary\n")
    return folder


def test_each_page_is_one_document_after_its_header(tmp_path):
    data = python_docs_bytes(_pages(tmp_path))
    headers = re.findall(PAGE_HEADER, data, re.MULTILINE)
    assert sorted(headers) == [b".. page: about\n", b".. page: glossary\n",
                               b".. page: library/os\n"]
    assert b".. page: library/os\nos\n==\n\nText of os.\n\n" in data  # the page, as is
    assert python_docs_bytes(_pages(tmp_path)) == data  # a fixed order (names' SHA-1)


def test_the_packaged_pages_split_into_long_packed_documents():
    data = get("python-docs", "test", seq_len=4096, pack=True, random_crops=False)
    assert data.info.task == "lm" and data.info.encoding == "utf-8"
    item = data[0]
    assert item["tokens"].shape == item["doc_ids"].shape == (4097,)
    inside = sum(bool((data[i]["doc_ids"] == data[i]["doc_ids"][0]).all())
                 for i in range(len(data)))
    assert inside > len(data) // 3  # many 4K windows lie inside one page
    assert torch.equal(get("python-docs", "test", seq_len=4096)[0]["tokens"], item["tokens"])


def test_a_missing_folder_says_how_to_get_it(tmp_path):
    from weirdnet.data.registry import DataMissingError

    with pytest.raises(DataMissingError, match="apt-get install -y python3.11-doc"):
        python_docs_bytes(tmp_path / "nowhere")
