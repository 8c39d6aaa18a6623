"""Pixel sequences: CIFAR-10 python batches (gray), MNIST/Fashion-MNIST IDX files."""

import gzip
import os
import pickle
import struct

import numpy as np
import pytest

from weirdnet.data import DataMissingError, get
from weirdnet.data.lra.images import load_cifar_batch, read_idx, to_gray
from weirdnet.data.sources.packages import FASHION_MNIST


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def _cifar(root, n: int = 10, rows: int = 3072):
    """cifar-10-batches-py with 5 train batches and a test batch of n random images."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, name in enumerate([*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]):
        batch = {b"batch_label": name.encode(), b"labels": [(i + j) % 10 for j in range(n)],
                 b"data": rng.integers(0, 256, (n, rows), dtype=np.uint8),
                 b"filenames": [f"{j}.png".encode() for j in range(n)]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return folder


def test_gray_levels_follow_itu_r_601():
    pixels = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255], [10, 20, 30]])
    rgb = pixels.T.reshape(1, -1).astype(np.uint8)  # R plane, G plane, B plane
    expected = [76, 150, 29, 255, round(0.299 * 10 + 0.587 * 20 + 0.114 * 30)]
    assert to_gray(rgb).tolist() == [expected]


def test_cifar10_items(tmp_path):
    folder = _cifar(tmp_path)
    test = get("cifar10", "test", root=tmp_path)
    data, labels = load_cifar_batch(folder / "test_batch")
    assert len(test) == 10 and test.info.vocab_size == 256 and test.info.max_len == 1024
    item = test[3]
    assert item["tokens"].shape == (1024,) and item["label"] == int(labels[3])
    r, g, b = data[3].reshape(3, 1024).astype(float)
    assert item["tokens"].tolist() == np.floor(0.299 * r + 0.587 * g + 0.114 * b + 0.5).tolist()
    train = get("cifar10", "train", root=folder)
    val = get("cifar10", "val", root=folder)
    assert (len(train), len(val)) == (45, 5)


def test_cifar_errors(tmp_path):
    with pytest.raises(DataMissingError, match="cifar-10-python.tar.gz"):
        get("cifar10", "test", root=tmp_path)
    folder = _cifar(tmp_path / "bad", rows=3000)
    with pytest.raises(ValueError, match="3072"):
        get("cifar10", "test", root=folder)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataMissingError, match="data_batch_3"):
        get("cifar10", "train", root=folder)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > pwned.txt",))


def test_cifar_pickles_cannot_run_code(tmp_path):
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps({b"data": _Exploit(), b"labels": []}, protocol=2))
    with pytest.raises(ValueError, match="refusing to load"):
        load_cifar_batch(path)
    assert not (tmp_path / "pwned.txt").exists()


def _idx(path, array: np.ndarray, compress: bool):
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I",
                                                                      *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if compress else data)


def _mnist(root, n_train=20, n_test=6, size=28, compress=True):
    rng = np.random.default_rng(1)
    suffix = ".gz" if compress else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        _idx(root / f"{prefix}-images-idx3-ubyte{suffix}",
             rng.integers(0, 256, (n, size, size)), compress)
        _idx(root / f"{prefix}-labels-idx1-ubyte{suffix}", np.arange(n) % 10, compress)


@pytest.mark.parametrize("compress", [True, False])
def test_mnist_idx_files(tmp_path, compress):
    _mnist(tmp_path, compress=compress)
    test = get("mnist", "test", root=tmp_path)
    suffix = ".gz" if compress else ""
    images = read_idx(tmp_path / f"t10k-images-idx3-ubyte{suffix}")
    assert images.shape == (6, 28, 28)
    assert test[4]["tokens"].tolist() == images[4].reshape(-1).tolist()
    assert test[4]["label"] == 4 and test.info.max_len == 784
    train, val = get("mnist", "train", root=tmp_path), get("mnist", "val", root=tmp_path)
    assert (len(train), len(val)) == (18, 2)


def test_idx_errors(tmp_path):
    with pytest.raises(DataMissingError, match="t10k-images-idx3-ubyte"):
        get("mnist", "test", root=tmp_path)
    _mnist(tmp_path, size=27)
    with pytest.raises(ValueError, match="28x28"):
        get("mnist", "test", root=tmp_path)
    path = tmp_path / "cut.idx"
    _idx(path, np.zeros((10, 28, 28)), compress=False)
    path.write_bytes(path.read_bytes()[:-28])
    with pytest.raises(ValueError, match="header says 10x28x28"):
        read_idx(path)
    path.write_bytes(b"\x08\x03\x00\x00garbage")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(path)
    other = tmp_path / "other"
    other.mkdir()
    _mnist(other, n_test=6)
    _idx(other / "t10k-labels-idx1-ubyte.gz", np.arange(5), compress=True)
    with pytest.raises(ValueError, match="6 images but labels"):
        get("mnist", "test", root=tmp_path / "other")


@pytest.mark.skipif(not FASHION_MNIST.path.is_dir(),
                    reason="Fashion-MNIST needs `apt-get install -y dataset-fashion-mnist`")
def test_real_fashion_mnist():
    test = get("fashion-mnist", "test")
    assert len(test) == 10_000 and test[0]["tokens"].shape == (784,)
    assert sorted(set(test.labels.tolist())) == list(range(10))
    assert len(get("fashion-mnist", "val")) == 6_000
