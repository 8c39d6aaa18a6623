"""Shared data helpers: byte tokens, seeded splits, contiguous bounds, cache writes."""

import numpy as np
import pytest

from weirdnet.data.common import (
    byte_tokens,
    cache_path,
    cached_bytes,
    contiguous_bounds,
    seeded_split,
    split_fractions,
)
from weirdnet.run.files import write_atomic


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def test_byte_tokens_shift_and_truncate():
    assert byte_tokens(b"\x00\xffab").tolist() == [0, 255, 97, 98]
    assert byte_tokens(b"\x00\xffab", shift=1, max_len=3).tolist() == [1, 256, 98]
    assert byte_tokens(np.array([3, 4], dtype=np.uint8)).dtype.is_floating_point is False


def test_seeded_split_is_disjoint_complete_and_reproducible():
    train = seeded_split(100, "train", val_fraction=0.2, seed=3)
    val = seeded_split(100, "val", val_fraction=0.2, seed=3)
    assert len(val) == 20 and len(train) == 80
    assert sorted([*train, *val]) == list(range(100))
    assert np.array_equal(val, seeded_split(100, "val", val_fraction=0.2, seed=3))
    assert not np.array_equal(val, seeded_split(100, "val", val_fraction=0.2, seed=4))
    with pytest.raises(ValueError, match="val_fraction"):
        seeded_split(10, "val", val_fraction=1.0, seed=0)


def test_three_way_splits():
    parts = [split_fractions(50, s, (0.8, 0.1, 0.1), seed=0) for s in ("train", "val", "test")]
    assert [len(p) for p in parts] == [40, 5, 5]
    assert sorted(np.concatenate(parts)) == list(range(50))
    assert contiguous_bounds(1000, "train", (0.9, 0.05, 0.05)) == (0, 900)
    assert contiguous_bounds(1000, "test", (0.85, 0.05, 0.1)) == (900, 1000)
    with pytest.raises(ValueError, match="summing to 1"):
        contiguous_bounds(10, "train", (0.5, 0.1, 0.1))
    with pytest.raises(ValueError, match="split="):
        contiguous_bounds(10, "dev", (0.8, 0.1, 0.1))


def test_cache_writes_are_atomic_and_reused(tmp_path):
    path = cache_path("corpora", "x.bin")
    assert path.parent == tmp_path / "cache" / "corpora" and path.parent.is_dir()
    assert cached_bytes(path, lambda: b"abc") == b"abc"
    assert cached_bytes(path, lambda: b"other") == b"abc"
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new" and list(path.parent.iterdir()) == [path]
