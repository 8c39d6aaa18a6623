"""LRA Retrieval: do two documents cite/link each other?  Pairs of byte documents.

- ``aan`` (official): LRA's ACL Anthology Network pairs, ``new_aan_pairs.{train,eval,test}
  .tsv`` (in ``lra_release/tsv_data/``), one pair a line: ``label \\t id1 \\t id2 \\t text1
  \\t text2`` (label 0/1, also written 0.0/1.0); split "val" reads the ``eval`` file.
- ``python-doc-pairs`` (offline): pages of the Python 3.11 documentation (reST sources of
  the Debian package ``python3.11-doc``, ``/usr/share/doc/python3.11/html/_sources``);
  label 1 for two pages where one references the other (see :mod:`weirdnet.data.lra.pydoc_graph`),
  label 0 for as many random unlinked pairs; all pairs shuffled by ``seed`` and split
  80% / 10% / 10%.  Pages recur across splits, pairs never do (as in LRA's AAN release).

Item: ``{"tokens": LongTensor (L1,), "tokens2": LongTensor (L2,), "label": int}``, each
document's first ``max_len`` (default 4000, LRA's) UTF-8 bytes as ids byte + 1; 0 is
padding, vocabulary 257.
"""

from __future__ import annotations

from pathlib import Path

from torch.utils.data import Dataset

from weirdnet.data.common import SHIFTED_BYTE_VOCAB, byte_tokens, check_option, split_fractions
from weirdnet.data.lra.pydoc_graph import linked_pairs, read_pages
from weirdnet.data.registry import DataMissingError, DatasetInfo, Root, data_root, register
from weirdnet.data.sources.packages import PYTHON_DOC

__all__ = ["BytePairs", "read_aan_tsv"]

LRA_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
SPLITS = ("train", "val", "test")
TSV_PART = {"train": "train", "val": "eval", "test": "test"}


class BytePairs(Dataset):
    """Pairs of byte documents with 0/1 labels (documents already cut to ``max_len``)."""

    def __init__(self, pairs: list[tuple[bytes, bytes]], labels: list[int], *, max_len: int):
        if len(pairs) != len(labels):
            raise ValueError(f"{len(pairs)} pairs but {len(labels)} labels")
        self.pairs = pairs
        self.labels = labels
        self.max_len = max_len
        self.info = DatasetInfo(task="retrieval", vocab_size=SHIFTED_BYTE_VOCAB, num_classes=2,
                                max_len=max_len, pad_id=0)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict:
        first, second = self.pairs[index]
        return {"tokens": byte_tokens(first, shift=1, max_len=self.max_len),
                "tokens2": byte_tokens(second, shift=1, max_len=self.max_len),
                "label": self.labels[index]}


def _parse_label(field: bytes, where: str) -> int:
    try:
        value = float(field)
    except ValueError:
        value = None
    if value not in (0.0, 1.0):
        raise ValueError(f"{where}: label must be 0 or 1, got {field[:20]!r}")
    return int(value)


def read_aan_tsv(path: Path, max_len: int = 4000) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    """Pairs (text1, text2 cut to ``max_len`` bytes) and labels of an AAN TSV file.

    A header line starting with ``label`` is skipped; any other line must have exactly the
    five tab-separated fields, else ValueError naming the file and line.
    """
    pairs: list[tuple[bytes, bytes]] = []
    labels: list[int] = []
    with Path(path).open("rb") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.rstrip(b"\r\n").split(b"\t")
            if number == 1 and fields[0].strip().lower() == b"label":
                continue
            if len(fields) != 5:
                raise ValueError(f"{path}, line {number}: expected 5 tab-separated fields "
                                 f"(label, id1, id2, text1, text2), got {len(fields)}"
                                 f"{' (truncated row?)' if len(fields) < 5 else ''}")
            labels.append(_parse_label(fields[0], f"{path}, line {number}"))
            pairs.append((fields[3][:max_len], fields[4][:max_len]))
    return pairs, labels


def _aan_file(root: Path | None, split: str) -> Path:
    base = data_root() / "lra_release" if root is None else Path(root)
    name = f"new_aan_pairs.{TSV_PART[split]}.tsv"
    for folder in (base, base / "tsv_data", base / "lra_release" / "tsv_data"):
        if (folder / name).is_file():
            return folder / name
    raise DataMissingError(
        f"{name} not found in {base} (nor its tsv_data/). Download the LRA release {LRA_URL}, "
        f"unpack it (`tar xzf lra_release.gz -C {base.parent}`), or pass root= the folder "
        f"holding the new_aan_pairs.*.tsv files.")


@register("aan", splits=SPLITS, task="retrieval",
          summary="LRA Retrieval: AAN citation pairs, 2x4000 bytes (official)",
          root=Root("folder", "the folder holding new_aan_pairs.*.tsv, or lra_release/"))
def _aan(split: str, root: Path | None = None, *, max_len: int = 4000) -> BytePairs:
    check_option("split", split, SPLITS)
    return BytePairs(*read_aan_tsv(_aan_file(root, split), max_len), max_len=max_len)


@register("python-doc-pairs", splits=SPLITS, task="retrieval",
          summary="linked/unlinked Python doc page pairs (offline: Debian python3.11-doc)",
          root=Root("folder", "a Sphinx _sources folder"))
def _python_doc_pairs(split: str, root: Path | None = None, *, max_len: int = 4000,
                      seed: int = 0) -> BytePairs:
    """root: a Sphinx ``_sources`` folder (default: the python3.11-doc package's)."""
    check_option("split", split, SPLITS)
    pages = read_pages(PYTHON_DOC.locate(root))
    pairs, labels = linked_pairs(pages, seed=seed)
    chosen = split_fractions(len(pairs), split, (0.8, 0.1, 0.1), seed=seed)
    docs = [(pages[pairs[i][0]][:max_len], pages[pairs[i][1]][:max_len]) for i in chosen]
    return BytePairs(docs, [labels[i] for i in chosen], max_len=max_len)
