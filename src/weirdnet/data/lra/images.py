"""Images as pixel sequences: LRA Image (CIFAR-10, gray) and MNIST / Fashion-MNIST.

Item: ``{"tokens": LongTensor (H*W,), "label": int}``, the gray levels 0..255 in row-major
order, vocabulary 256.  All items of a dataset have the same length, so padding is never
needed (pad_id 0 would coincide with black).

- ``cifar10`` (official, LRA Image): ``cifar-10-batches-py/data_batch_{1..5}`` (train,
  50,000) and ``test_batch`` (10,000).  Each RGB image becomes
  ``floor(0.299 R + 0.587 G + 0.114 B + 0.5)`` (ITU-R 601 luma, rounded to uint8 as LRA's
  ``tf.image.rgb_to_grayscale`` + uint8 cast does), 32x32 = 1024 tokens.  The batches are
  Python pickles: they are read with an unpickler that only resolves the globals a pickled
  numpy array needs (``numpy...multiarray._reconstruct``, ``numpy.ndarray``,
  ``numpy.dtype``, ``_codecs.encode``) and refuses any other, so a crafted file cannot run
  code.
- ``mnist`` / ``fashion-mnist``: the IDX files ``{train,t10k}-{images-idx3,labels-idx1}-
  ubyte`` (``.gz`` or plain), 28x28 = 784 tokens; Fashion-MNIST's offline copy is the
  Debian package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``).

Splits: test is the official test set; val is a seeded ``val_fraction`` (default 0.1, as
LRA's 90%/10% CIFAR split) of the official training set, and train is the rest.
"""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from weirdnet.data.common import BYTE_VOCAB, byte_tokens, check_option, seeded_split
from weirdnet.data.registry import DataMissingError, DatasetInfo, Root, data_root, register
from weirdnet.data.sources.packages import FASHION_MNIST

__all__ = ["ImageTokens", "load_cifar_batch", "read_idx", "to_gray"]

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_URL = "https://github.com/zalandoresearch/fashion-mnist (data/fashion/)"
SPLITS = ("train", "val", "test")


class ImageTokens(Dataset):
    """uint8 images (N, H*W) with labels (N,) as token items."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, *, num_classes: int = 10):
        self.images = images
        self.labels = labels
        self.info = DatasetInfo(task="classification", vocab_size=BYTE_VOCAB,
                                num_classes=num_classes, max_len=images.shape[1])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict:
        return {"tokens": byte_tokens(self.images[index]), "label": int(self.labels[index])}


class _ArrayUnpickler(pickle.Unpickler):
    """Resolves only what a pickled numpy array needs; anything else is refused."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a CIFAR batch "
                                         f"holds only numpy arrays, lists and bytes")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = module.replace("numpy.core.", "numpy._core.", 1)
        return super().find_class(module, name)


def load_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(data uint8 (N, 3072) as R, G, B planes of 32x32, labels int64 (N,)) of one batch."""
    try:
        batch = _ArrayUnpickler(io.BytesIO(Path(path).read_bytes()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
        raise ValueError(f"{path}: not a readable CIFAR-10 python batch ({err})") from err
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: expected a pickled dict, got {type(batch).__name__}")
    data, labels = (batch.get(key, batch.get(key.decode())) for key in (b"data", b"labels"))
    if data is None or labels is None:
        raise ValueError(f"{path}: the batch has no 'data' and 'labels' entries")
    data, labels = np.asarray(data), np.asarray(labels, dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: expected uint8 images of 3x32x32 = 3072 values per row, "
                         f"got {data.dtype} {data.shape}")
    _check_labels(path, labels, len(data), 10)
    return data, labels


def _check_labels(path: Path, labels: np.ndarray, n: int, classes: int) -> None:
    if labels.shape != (n,):
        raise ValueError(f"{path}: {n} images but labels of shape {labels.shape}")
    if n and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"{path}: labels must be in 0..{classes - 1}, "
                         f"found {labels.min()}..{labels.max()}")


def to_gray(rgb: np.ndarray) -> np.ndarray:
    """(N, 3*P) R, G, B planes -> (N, P) uint8 ITU-R 601 luma, rounded half up."""
    planes = rgb.reshape(len(rgb), 3, -1).astype(np.float64)
    luma = 0.299 * planes[:, 0] + 0.587 * planes[:, 1] + 0.114 * planes[:, 2]
    return np.clip(np.floor(luma + 0.5), 0, 255).astype(np.uint8)


def _cifar_dir(root: Path | None) -> Path:
    base = data_root() if root is None else Path(root)
    for candidate in (base / "cifar-10-batches-py", base):
        if (candidate / "test_batch").is_file():
            return candidate
    raise DataMissingError(
        f"no cifar-10-batches-py (data_batch_1..5, test_batch) at {base}. Download "
        f"{CIFAR_URL} and unpack it there (`tar xzf cifar-10-python.tar.gz -C {base}`), or "
        f"pass root= the folder holding cifar-10-batches-py/.")


def _cifar_part(folder: Path, test: bool) -> tuple[np.ndarray, np.ndarray]:
    names = ["test_batch"] if test else [f"data_batch_{i}" for i in range(1, 6)]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise DataMissingError(f"{folder} lacks {', '.join(missing)}; unpack {CIFAR_URL} again")
    parts = [load_cifar_batch(folder / n) for n in names]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


IDX_DTYPES = {0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"),
              0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip-compressed or plain) as an array of the shape in its header."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as err:
            raise ValueError(f"{path}: damaged gzip data ({err})") from err
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (magic {raw[:4].hex() or 'missing'})")
    ndim, offset = raw[3], 4 + 4 * raw[3]
    if len(raw) < offset:
        raise ValueError(f"{path}: IDX header cut short")
    dims = struct.unpack(f">{ndim}I", raw[4:offset])
    dtype = IDX_DTYPES[raw[2]]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) - offset != expected:
        raise ValueError(f"{path}: header says {'x'.join(map(str, dims))} {dtype} "
                         f"({expected:,} bytes), the file has {len(raw) - offset:,}")
    return np.frombuffer(raw, dtype=dtype, offset=offset).reshape(dims)


def _idx_file(folder: Path, stem: str, how: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    raise DataMissingError(f"{stem}(.gz) not found in {folder}. {how}")


def _idx_part(folder: Path, test: bool, how: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 784), labels int64 (N,)) of the IDX train or t10k files."""
    prefix = "t10k" if test else "train"
    images_path = _idx_file(folder, f"{prefix}-images-idx3-ubyte", how)
    labels_path = _idx_file(folder, f"{prefix}-labels-idx1-ubyte", how)
    images, labels = read_idx(images_path), read_idx(labels_path).astype(np.int64)
    if images.dtype != np.uint8 or images.shape[1:] != (28, 28):
        raise ValueError(f"{images_path}: expected uint8 28x28 images, got {images.dtype} "
                         f"{'x'.join(map(str, images.shape[1:]))}")
    _check_labels(labels_path, labels, len(images), 10)
    return images.reshape(len(images), -1), labels


def _select(part: tuple[np.ndarray, np.ndarray], split: str, val_fraction: float,
            seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The official test part as is; train/val carved out of the train part by seed."""
    images, labels = part
    if split == "test":
        return images, labels
    chosen = seeded_split(len(images), split, val_fraction=val_fraction, seed=seed)
    return images[chosen], labels[chosen]


@register("cifar10", splits=SPLITS, task="classification",
          summary="LRA Image: CIFAR-10 gray, 1024 pixel tokens (official)",
          root=Root("folder", "the folder holding cifar-10-batches-py/, or that folder"))
def _cifar10(split: str, root: Path | None = None, *, val_fraction: float = 0.1,
             seed: int = 0) -> ImageTokens:
    check_option("split", split, SPLITS)
    images, labels = _select(_cifar_part(_cifar_dir(root), split == "test"), split,
                             val_fraction, seed)
    return ImageTokens(to_gray(images), labels)


def _idx_dataset(folder: Path, split: str, how: str, val_fraction: float,
                 seed: int) -> ImageTokens:
    check_option("split", split, SPLITS)
    images, labels = _select(_idx_part(folder, split == "test", how), split, val_fraction, seed)
    return ImageTokens(images, labels)


@register("fashion-mnist", splits=SPLITS, task="classification",
          summary="Fashion-MNIST, 784 pixel tokens (offline: Debian dataset-fashion-mnist)",
          root=Root("folder", "the folder holding the IDX files"))
def _fashion_mnist(split: str, root: Path | None = None, *, val_fraction: float = 0.1,
                   seed: int = 0) -> ImageTokens:
    how = f"{FASHION_MNIST.how_to_get()} Or download the files from {FASHION_URL}."
    return _idx_dataset(FASHION_MNIST.locate(root), split, how, val_fraction, seed)


@register("mnist", splits=SPLITS, task="classification",
          summary="MNIST, 784 pixel tokens (official IDX files)",
          root=Root("folder", "the folder holding the IDX files"))
def _mnist(split: str, root: Path | None = None, *, val_fraction: float = 0.1,
           seed: int = 0) -> ImageTokens:
    folder = data_root() / "mnist" if root is None else Path(root)
    how = (f"Download train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
           f"t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz from {MNIST_URL} into "
           f"{folder} (or pass root= their folder).")
    return _idx_dataset(folder, split, how, val_fraction, seed)
