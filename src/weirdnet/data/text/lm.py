"""Byte-level language modelling: the official enwik8/text8 zips, any text file, and the
dataset that cuts a byte string into training crops or evaluation windows.

Item: ``{"tokens": LongTensor (seq_len + 1,)}``, bytes as ids 0..255 (vocabulary 256);
inputs ``tokens[:-1]``, targets ``tokens[1:]``.  ``info.encoding`` names the text encoding
of the bytes ("utf-8" for enwik8/text8/tinyshakespeare; text-file: ``as_encoding`` if given,
else ``encoding``), so generated ids can be decoded back to text.

- training (``random_crops=True``, the default for split "train"): item ``i`` of epoch
  ``e`` is the window of ``seq_len + 1`` bytes starting at a uniform random offset drawn
  from ``numpy.random.default_rng([seed, e, i])``, so it is reproducible and independent of
  the order items are read in; :meth:`ByteLMDataset.set_epoch` moves to the next epoch.
  ``epoch_length`` items per epoch (default: as many as non-overlapping windows fit).
- evaluation (val/test): contiguous windows ``[k*seq_len, k*seq_len + seq_len + 1)``, so
  every byte after the first is predicted exactly once; the last window may be shorter
  (pad it with :func:`weirdnet.data.collate.pad_collate` and use ``tokens_mask``).  The
  mean of the target bytes' cross-entropy in bits is the BPC.

Packed documents (``pack=True``; ``data.options.pack = true`` in a config).  A dataset
whose bytes hold several documents (books, source files, wiki pages: each factory knows
where its documents start, ``doc_pattern``) can give every item ``"doc_ids"``
(seq_len + 1,) int64 as well: the index of each byte's document.  The windows still run
over the documents laid end to end (no padding), but the model mixes nothing across a
document start, positions restart there, and the LM task never counts the prediction of a
document's first byte from the previous document (see :mod:`weirdnet.ops.packing`).

Splits are contiguous byte ranges, ``split_scheme``:
``"standard"``: 90% / 5% / 5% (enwik8/text8: the usual 90M/5M/5M);
``"last10m"``: 85% / 5% / 10% (the papers: last 10M bytes as test, the 5M before as val).
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from weirdnet.data.common import BYTE_VOCAB, byte_tokens, check_option, contiguous_bounds
from weirdnet.data.registry import DataMissingError, DatasetInfo, Root, register, signature_options
from weirdnet.data.sources.download import REMOTE_FILES, RemoteFile
from weirdnet.data.sources.members import members_under

__all__ = ["LM_OPTIONS", "SPLIT_SCHEMES", "ByteLMDataset", "lm_dataset", "read_official",
           "read_text_file", "read_zip_member", "transcode"]

SPLIT_SCHEMES = {"standard": (0.90, 0.05, 0.05), "last10m": (0.85, 0.05, 0.10)}
"""(train, val, test) fractions of the byte string, in this order along the file."""

SPLITS = ("train", "val", "test")


def document_starts(data: bytes, doc_pattern: bytes | None) -> np.ndarray:
    """Sorted int64 offsets where the documents of ``data`` start: 0 and the start of every
    match of the regular expression ``doc_pattern`` (multi-line mode; None: one document)."""
    starts = [0] if doc_pattern is None else \
        [0, *(m.start() for m in re.finditer(doc_pattern, data, re.MULTILINE))]
    return np.unique(np.asarray(starts, dtype=np.int64))


class ByteLMDataset(Dataset):
    """Windows of ``seq_len + 1`` bytes of ``data`` (uint8 array); see the module doc.

    doc_starts: sorted offsets in ``data`` where documents start (None: one document);
    pack: give each item the ``"doc_ids"`` of its bytes (needs documents)."""

    def __init__(self, data: np.ndarray, *, seq_len: int = 1024, random_crops: bool = True,
                 epoch_length: int | None = None, seed: int = 0, name: str = "bytes",
                 encoding: str | None = "utf-8", doc_starts: np.ndarray | None = None,
                 pack: bool = False):
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        need = seq_len + 1 if random_crops else 2
        if len(data) < need:
            raise ValueError(f"{name}: the split has {len(data):,} bytes, fewer than the "
                             f"{need:,} one window needs (lower seq_len)")
        self.data = data
        self.doc_starts = np.zeros(1, np.int64) if doc_starts is None else doc_starts
        if pack and len(self.doc_starts) < 2:
            raise ValueError(f"{name}: pack=True needs documents, and this text is one "
                             "document (no document boundary found; text-file takes "
                             "doc_pattern=)")
        self.pack = bool(pack)
        self.seq_len = seq_len
        self.random_crops = random_crops
        self.epoch_length = epoch_length or max(1, (len(data) - 1) // seq_len)
        self.seed = seed
        self.epoch = 0
        self.info = DatasetInfo(task="lm", vocab_size=BYTE_VOCAB, max_len=seq_len + 1,
                                encoding=encoding)

    def set_epoch(self, epoch: int) -> None:
        """Draw the random crops of ``epoch`` (training mode only).  Call it before the
        DataLoader iterator of that epoch is created: workers copy the dataset then."""
        self.epoch = epoch

    def __len__(self) -> int:
        if self.random_crops:
            return self.epoch_length
        return -(-(len(self.data) - 1) // self.seq_len)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} windows")
        if self.random_crops:
            rng = np.random.default_rng([self.seed, self.epoch, index])
            start = int(rng.integers(0, len(self.data) - self.seq_len))
        else:
            start = index * self.seq_len
        tokens = byte_tokens(self.data[start:start + self.seq_len + 1])
        if not self.pack:
            return {"tokens": tokens}
        offsets = np.arange(start, start + len(tokens))
        doc_ids = np.searchsorted(self.doc_starts, offsets, side="right") - 1
        return {"tokens": tokens, "doc_ids": torch.from_numpy(doc_ids.astype(np.int64))}

    @property
    def documents(self) -> int:
        """Number of documents that start in (or run into) this split."""
        return len(self.doc_starts)


def lm_dataset(data: bytes, split: str, *, name: str, seq_len: int = 1024,
               split_scheme: str = "standard", random_crops: bool | None = None,
               epoch_length: int | None = None, seed: int = 0, pack: bool = False,
               encoding: str | None = "utf-8",
               doc_pattern: bytes | None = None) -> ByteLMDataset:
    """The ``split`` of a byte string as a :class:`ByteLMDataset` (options: module doc).

    encoding: the text encoding of ``data``, reported as ``info.encoding`` (None: not text).
    doc_pattern: a regular expression (bytes) that matches where a document starts.
    """
    check_option("split", split, SPLITS)
    check_option("split_scheme", split_scheme, tuple(SPLIT_SCHEMES))
    start, stop = contiguous_bounds(len(data), split, SPLIT_SCHEMES[split_scheme])
    part = np.frombuffer(data, dtype=np.uint8)[start:stop].copy()
    starts = document_starts(data, doc_pattern)
    inside = starts[(starts > start) & (starts < stop)] - start
    doc_starts = np.concatenate([[0], inside]).astype(np.int64)  # the split opens one
    crops = split == "train" if random_crops is None else random_crops
    return ByteLMDataset(part, seq_len=seq_len, random_crops=crops,
                         epoch_length=epoch_length, seed=seed, name=f"{name} {split}",
                         encoding=encoding, doc_starts=doc_starts, pack=pack)


LM_OPTIONS = signature_options(lm_dataset, exclude=("data", "split", "name", "encoding",
                                                    "doc_pattern"))
"""The options of every byte-LM dataset (seq_len, split_scheme, random_crops, epoch_length,
seed): what a factory's ``**options`` pass on to :func:`lm_dataset`."""


def read_zip_member(path: Path, member: str) -> bytes:
    """The bytes of ``member`` inside the zip ``path``; ValueError naming both if absent."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = members_under(archive.namelist())
            if member not in members:
                raise ValueError(f"{path} has no member {member!r} "
                                 f"(members: {', '.join(list(members)[:5])})")
            return archive.read(members[member])
    except zipfile.BadZipFile as err:
        raise ValueError(f"{path} is not a valid zip file ({err}); download it again") from err


def read_official(remote: RemoteFile, root: Path | None) -> bytes:
    """The member of an official zip (enwik8/text8), from the zip or an unpacked copy.

    root: the zip, the unpacked member file, or a directory holding either;
    None: ``data_root()/<name>/``, where ``weirdnet data download <name>`` puts it.
    """
    directory = remote.target().parent if root is None else Path(root)
    if directory.is_file():
        candidates = [directory]
    else:
        candidates = [directory / remote.filename, directory / remote.member]
    for path in candidates:
        if path.is_file():
            is_zip = path.suffix == ".zip" or zipfile.is_zipfile(path)
            return read_zip_member(path, remote.member) if is_zip else path.read_bytes()
    raise DataMissingError(f"{remote.filename} not found in {directory}. "
                           f"{remote.how_to_get(None if root is None else directory)}")


def transcode(data: bytes, encoding: str, as_encoding: str | None, source: str) -> bytes:
    """``data`` (text in ``encoding``) as bytes in ``as_encoding`` (default: unchanged).

    The text is always decoded once, so a wrong encoding fails here with the byte offset.
    """
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        raise ValueError(f"{source} is not valid {encoding} at byte {err.start}: "
                         f"{err.reason} (pass encoding=...)") from err
    if as_encoding is None or as_encoding.lower() == encoding.lower():
        return data
    return text.encode(as_encoding)


def read_text_file(path: Path, encoding: str = "utf-8", as_encoding: str | None = None) -> bytes:
    """The bytes of a text file in ``encoding``, re-encoded to ``as_encoding`` if given."""
    if not Path(path).is_file():
        raise DataMissingError(f"text file {path} does not exist")
    return transcode(Path(path).read_bytes(), encoding, as_encoding, str(path))


PAGE_STARTS = rb"<page>"
"""Where a document starts in MediaWiki XML (enwik8, wiki-xml): each page."""


def _official_factory(name: str):
    pattern = PAGE_STARTS if name == "enwik8" else None  # text8 has no page structure

    def factory(split: str, root: Path | None = None, **options) -> ByteLMDataset:
        return lm_dataset(read_official(REMOTE_FILES[name], root), split, name=name,
                          doc_pattern=pattern, **options)

    factory.__name__ = f"_{name}"
    factory.__doc__ = (f"{name}: the official {name}.zip (root: the zip, the unpacked file or "
                       f"their directory). Options: seq_len, split_scheme, random_crops, "
                       f"epoch_length, seed.")
    return factory


register("enwik8", splits=SPLITS, task="lm", options=LM_OPTIONS,
         summary="enwik8 bytes (official enwik8.zip); 90M/5M/5M or last10m",
         root=Root("either", "enwik8.zip, the unpacked enwik8, or their folder"))(
    _official_factory("enwik8"))
register("text8", splits=SPLITS, task="lm", options=LM_OPTIONS,
         summary="text8 bytes (official text8.zip); 90M/5M/5M or last10m",
         root=Root("either", "text8.zip, the unpacked text8, or their folder"))(
    _official_factory("text8"))


@register("text-file", splits=SPLITS, task="lm", options=LM_OPTIONS,
          summary="bytes of any text file (encoding=, as_encoding=)",
          root=Root("file", "the text file", required=True))
def _text_file(split: str, root: Path | None = None, *, encoding: str = "utf-8",
               as_encoding: str | None = None, doc_pattern: str | None = None,
               **options) -> ByteLMDataset:
    """Any text file: root is the file; encoding is its encoding, as_encoding the bytes';
    doc_pattern: a regular expression matching where each document starts (for
    ``pack``; e.g. ``"^CHAPTER "``), None: the file is one document."""
    if root is None or not Path(root).is_file():
        raise DataMissingError(f"dataset 'text-file' needs root= an existing text file, got "
                               f"{root}")
    data = read_text_file(root, encoding, as_encoding)
    pattern = None if doc_pattern is None else doc_pattern.encode(as_encoding or encoding)
    try:
        re.compile(pattern or b"")
    except re.error as err:
        raise ValueError(f"doc_pattern {doc_pattern!r} is not a regular expression: {err}") \
            from None
    return lm_dataset(data, split, name=Path(root).name, encoding=as_encoding or encoding,
                      doc_pattern=pattern, **options)


@register("tinyshakespeare", splits=SPLITS, task="lm", options=LM_OPTIONS,
          summary="char-rnn tinyshakespeare bytes (1.1 MB)",
          root=Root("either", "the file, or its directory"))
def _tinyshakespeare(split: str, root: Path | None = None, **options) -> ByteLMDataset:
    """root: the file, or a directory with tinyshakespeare.txt or input.txt; None: the
    download location ``data_root()/tinyshakespeare/tinyshakespeare.txt``."""
    remote = REMOTE_FILES["tinyshakespeare"]
    directory = remote.target().parent if root is None else Path(root)
    names = [directory] if directory.is_file() else [directory / remote.filename,
                                                     directory / "input.txt"]
    for path in names:
        if path.is_file():
            return lm_dataset(read_text_file(path), split, name="tinyshakespeare", **options)
    raise DataMissingError(f"tinyshakespeare.txt not found in {directory}. "
                           f"{remote.how_to_get(None if root is None else directory)}")
