"""Byte-level LM: enwik8/text8 zips, text files, crops and evaluation windows."""

from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.archives import write_zip
from weirdnet.data import DataMissingError, get
from weirdnet.data.common import contiguous_bounds
from weirdnet.data.text.lm import ByteLMDataset, read_official

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
TEXT = ("<page><title>Ærø</title><text>'''Anarchism''' is a [[political philosophy]] — "
        "日本語 ok.</text></page>\n").encode() * 40


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def _zip(path: Path, member: str, data: bytes) -> Path:
    return write_zip(path, {member: data})


def _part(data: bytes, split: str, fractions=(0.9, 0.05, 0.05)) -> bytes:
    start, stop = contiguous_bounds(len(data), split, fractions)
    return data[start:stop]


def _eval_bytes(dataset) -> bytes:
    """Reassemble the split from its evaluation windows (they overlap by one byte)."""
    windows = [dataset[i]["tokens"] for i in range(len(dataset))]
    out = torch.cat([windows[0], *[w[1:] for w in windows[1:]]])
    return bytes(out.to(torch.uint8).tolist())


def test_enwik8_standard_split_covers_the_file_in_order(tmp_path):
    _zip(tmp_path / "enwik8.zip", "enwik8", TEXT)
    n = len(TEXT)
    val = get("enwik8", "val", root=tmp_path, seq_len=64)
    test = get("enwik8", "test", root=tmp_path / "enwik8.zip", seq_len=64)
    assert _eval_bytes(val) == TEXT[round(n * 0.9):round(n * 0.9) + round(n * 0.05)]
    assert _eval_bytes(test) == TEXT[round(n * 0.9) + round(n * 0.05):]
    assert all(len(val[i]["tokens"]) == 65 for i in range(len(val) - 1))
    assert val.info.task == "lm" and val.info.vocab_size == 256 and val.info.max_len == 65


def test_last10m_scheme_and_unpacked_file(tmp_path):
    (tmp_path / "enwik8").write_bytes(TEXT)
    test = get("enwik8", "test", root=tmp_path, seq_len=100, split_scheme="last10m")
    val = get("enwik8", "val", root=tmp_path, seq_len=100, split_scheme="last10m")
    assert _eval_bytes(test) == _part(TEXT, "test", (0.85, 0.05, 0.1))
    assert _eval_bytes(val) == _part(TEXT, "val", (0.85, 0.05, 0.1))
    assert len(_eval_bytes(test)) == len(TEXT) // 10
    with pytest.raises(ValueError, match="split_scheme"):
        get("enwik8", "test", root=tmp_path, split_scheme="last5m")


def test_training_crops_are_reproducible_random_windows(tmp_path):
    _zip(tmp_path / "text8.zip", "text8", TEXT)
    train = get("text8", "train", root=tmp_path, seq_len=32, epoch_length=50, seed=7)
    split = _part(TEXT, "train")
    assert len(train) == 50
    crops = [bytes(train[i]["tokens"].to(torch.uint8).tolist()) for i in range(50)]
    assert all(len(c) == 33 and c in split for c in crops)
    assert len(set(crops)) > 40
    again = get("text8", "train", root=tmp_path, seq_len=32, epoch_length=50, seed=7)
    assert torch.equal(again[3]["tokens"], train[3]["tokens"])
    train.set_epoch(1)
    assert not torch.equal(again[3]["tokens"], train[3]["tokens"])
    evaluation = get("text8", "train", root=tmp_path, seq_len=32, random_crops=False)
    assert _eval_bytes(evaluation) == split


def test_missing_and_bad_official_files(tmp_path):
    with pytest.raises(DataMissingError, match="mattmahoney.net/dc/enwik8.zip") as err:
        get("enwik8", "train", root=tmp_path)
    assert "weirdnet data download enwik8" in str(err.value)
    with pytest.raises(DataMissingError, match=str(tmp_path / "cache" / "text8")):
        get("text8", "train")
    _zip(tmp_path / "enwik8.zip", "something-else", TEXT)
    with pytest.raises(ValueError, match="no member 'enwik8'"):
        get("enwik8", "train", root=tmp_path)
    (tmp_path / "text8.zip").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match="not a valid zip"):
        get("text8", "train", root=tmp_path)


def test_too_short_splits_are_explained(tmp_path):
    _zip(tmp_path / "enwik8.zip", "enwik8", TEXT)
    with pytest.raises(ValueError, match="lower seq_len"):
        get("enwik8", "val", root=tmp_path, seq_len=10_000, random_crops=True)
    with pytest.raises(IndexError):
        ByteLMDataset(np.zeros(10, np.uint8), seq_len=4, random_crops=False)[3]


def test_text_file_utf8_and_gb18030(tmp_path):
    text = "人民日报 1998 年新年讲话。\n" * 50
    path = tmp_path / "zh.txt"
    path.write_text(text, encoding="utf-8")
    test = get("text-file", "test", root=path, seq_len=16, as_encoding="gb18030")
    encoded = text.encode("gb18030")
    assert _eval_bytes(test) == _part(encoded, "test")
    gb_path = tmp_path / "zh-gb.txt"
    gb_path.write_bytes(encoded)
    same = get("text-file", "test", root=gb_path, seq_len=16, encoding="gb18030")
    assert _eval_bytes(same) == _eval_bytes(test)
    with pytest.raises(ValueError, match="not valid utf-8 at byte"):
        get("text-file", "train", root=gb_path)
    with pytest.raises(DataMissingError, match="needs root="):
        get("text-file", "train")


def test_tinyshakespeare_root_file_or_directory(tmp_path):
    (tmp_path / "input.txt").write_text("First Citizen:\nBefore we proceed any further.\n" * 30)
    by_dir = get("tinyshakespeare", "val", root=tmp_path, seq_len=16)
    by_file = get("tinyshakespeare", "val", root=tmp_path / "input.txt", seq_len=16)
    assert torch.equal(by_dir[0]["tokens"], by_file[0]["tokens"])
    with pytest.raises(DataMissingError, match="karpathy/char-rnn"):
        get("tinyshakespeare", "train")


def test_read_official_defaults_to_the_download_location(tmp_path):
    from weirdnet.data.sources.download import REMOTE_FILES

    target = REMOTE_FILES["enwik8"].target()
    assert target == tmp_path / "cache" / "enwik8" / "enwik8.zip"
    target.parent.mkdir(parents=True)
    _zip(target, "enwik8", TEXT)
    assert read_official(REMOTE_FILES["enwik8"], None) == TEXT


@pytest.mark.skipif(not (SHARED_DATA / "tinyshakespeare.txt").is_file(),
                    reason="shared/data/tinyshakespeare.txt is not beside this checkout")
def test_real_tinyshakespeare():
    train = get("tinyshakespeare", "train", root=SHARED_DATA, seq_len=256)
    test = get("tinyshakespeare", "test", root=SHARED_DATA, seq_len=256)
    data = (SHARED_DATA / "tinyshakespeare.txt").read_bytes()
    assert len(data) == 1_115_394
    assert _eval_bytes(test) == _part(data, "test")
    assert train[0]["tokens"].shape == (257,) and len(train) == len(_part(data, "train")) // 256
