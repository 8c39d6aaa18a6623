"""python-stdlib: the running interpreter's standard-library source as an offline LM corpus."""

import re
import sys

import pytest

from weirdnet.data import DataMissingError, get
from weirdnet.data.common import contiguous_bounds
from weirdnet.data.text.stdlib import is_excluded, python_sources, stdlib_bytes, stdlib_dir

HEADER = re.compile(rb"^# ===== (\S+\.py) =====$", re.MULTILINE)  # xml/sax has "# ===== X ====="
VERSION = ".".join(map(str, sys.version_info[:3]))


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIRDNET_DATA", str(root))
        yield root


@pytest.fixture(scope="module")
def corpus() -> bytes:
    return stdlib_bytes()


def _utf8(path) -> bool:
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_corpus_is_the_stdlib_source_and_is_cached(corpus, cache):
    assert len(corpus) > 1_000_000 and corpus.startswith(b"# ===== ")
    corpus.decode("utf-8")
    os_source = (stdlib_dir() / "os.py").read_bytes().rstrip(b"\n") + b"\n"
    assert b"# ===== os.py =====\n" + os_source in corpus
    [cached] = (cache / "corpora").glob(f"python-stdlib-{VERSION}-*.bin")
    assert cached.read_bytes() == corpus
    assert stdlib_bytes() == corpus  # read back from the cache


def test_headers_list_the_sorted_non_test_sources(corpus):
    names = [m.decode() for m in HEADER.findall(corpus)]
    assert names == sorted(names) and "json/decoder.py" in names
    assert not any(is_excluded(part) for name in names for part in name.split("/"))
    assert not any(name.startswith(("test/", "unittest/test/")) for name in names)
    root = stdlib_dir()
    assert names == [n for n in python_sources(root) if _utf8(root / n)]


def test_splits_are_contiguous_and_cover_the_corpus(corpus):
    parts = {split: get("python-stdlib", split, seq_len=256) for split in ("train", "val", "test")}
    assert b"".join(parts[s].data.tobytes() for s in ("train", "val", "test")) == corpus
    for split, dataset in parts.items():
        start, stop = contiguous_bounds(len(corpus), split, (0.9, 0.05, 0.05))
        assert dataset.data.tobytes() == corpus[start:stop]
        assert dataset.info.task == "lm" and dataset.info.encoding == "utf-8"
        assert dataset.info.vocab_size == 256 and dataset.info.max_len == 257
    assert parts["train"][0]["tokens"].shape == (257,) and parts["train"].random_crops
    assert parts["val"][0]["tokens"].shape == (257,) and not parts["val"].random_crops
    last10m = get("python-stdlib", "test", seq_len=256, split_scheme="last10m")
    assert len(last10m.data) == len(corpus) - round(len(corpus) * 0.9)


def test_root_directory_gives_exactly_its_sources(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "x.py").write_bytes(b"x = 1")
    (tmp_path / "b.py").write_bytes("print('é')\n\n\n".encode())
    for skipped in ("tests/t.py", "test/u.py", "idle_test/v.py", "test_a.py",
                    "__pycache__/c.py", "site-packages/d.py", "notes.txt"):
        (tmp_path / skipped).parent.mkdir(exist_ok=True)
        (tmp_path / skipped).write_bytes(b"skipped = True\n")
    (tmp_path / "latin1.py").write_bytes(b"s = '\xe9'\n")  # not UTF-8: skipped
    expected = "# ===== b.py =====\nprint('é')\n# ===== pkg/x.py =====\nx = 1\n".encode()
    assert stdlib_bytes(tmp_path) == expected
    train = get("python-stdlib", "train", root=tmp_path, seq_len=8)
    assert train.data.tobytes() == expected[:round(len(expected) * 0.9)]
    assert train[0]["tokens"].shape == (9,)


def test_missing_or_empty_root_says_so(tmp_path):
    with pytest.raises(DataMissingError, match="does not exist"):
        get("python-stdlib", "train", root=tmp_path / "nowhere")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("x = 1\n")
    (tmp_path / "readme.txt").write_text("no python here\n")
    with pytest.raises(DataMissingError, match="no .py file"):
        get("python-stdlib", "train", root=tmp_path)
