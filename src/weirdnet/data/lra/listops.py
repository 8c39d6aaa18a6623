"""LRA ListOps: a faithful generator, the official TSV reader and the ``"listops"`` dataset.

The task (Nangia & Bowman 2018, as used by the Long Range Arena): evaluate a nested list
expression over the digits 0-9 with the operators MIN, MAX, MED (``int`` of the median) and
SM (sum modulo 10); the label is the value, 10 classes.

Official file format (``lra_release/listops-1000/basic_{train,val,test}.tsv``): a header
``Source<TAB>Target``, then one row per sample; ``Source`` is LRA's left-nested string, e.g.
``[MAX 2 [SM 3 4 ] ]`` is written ``( ( ( [MAX 2 ) ( ( ( [SM 3 ) 4 ) ] ) ) ] )``, and
``Target`` is the value.

Tokenisation: parentheses are removed (they carry no information; LRA's length measure does
not count them), every other whitespace-separated symbol is one token, ``]`` included.
Vocabulary (:data:`VOCAB`, 16 ids)::

    0 <pad> | 1-10 digits "0"-"9" | 11 [MIN | 12 [MAX | 13 [MED | 14 [SM | 15 ]

(LRA's own TensorFlow pipeline used a tokenizer that also dropped ``[`` and ``]``; keeping ``]``
as a token, as later work such as S4 does, keeps the expression unambiguous.)

Items: ``{"tokens": LongTensor (L,), "label": int}`` with 500 < L < 2000 for LRA-distributed
data (L is truncated to ``max_len``, default 2000).

Generator (re-implements LRA's ``lra_benchmarks/data/listops.py``): a node at depth d < 10 is
an operator with probability 0.25 (else a digit); an operator takes 2-10 arguments; depth-10
nodes are digits; only trees with 500 < length < 2000 are kept (length = number of tokens
above: digits, operators and ``]``); duplicates are dropped; train/val/test are consecutive
slices of one deduplicated stream, so the splits are disjoint.  Seeded with
:class:`random.Random`, deterministic.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from weirdnet.data.lra.cache import build_dir_atomically, cache_dir
from weirdnet.data.registry import DataMissingError, DatasetInfo, Root, register

__all__ = ["END", "OPERATORS", "SPLITS", "VOCAB", "ListOpsConfig", "ListOpsDataset",
           "UnknownTokenError", "decode", "encode", "encode_many", "evaluate", "find_listops_file",
           "generate_listops", "generated_listops_dir", "iter_listops", "read_listops_tsv",
           "render", "sample_tree", "to_lra_string", "write_listops_files", "write_listops_tsv"]

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
"""The operator tokens LRA uses (FIRST and LAST exist in the original code but are unused)."""
END = "]"
VALUE_P = 0.25
"""Probability that a node shallower than ``max_depth`` is an operator (LRA's ``VALUE_P``)."""
VOCAB = ("<pad>", *(str(d) for d in range(10)), *OPERATORS, END)
"""Token strings by id: pad 0, digits 1-10, operators 11-14, ``]`` 15."""
SPLITS = ("train", "val", "test")
HEADER = "Source\tTarget"
RELEASE_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
LRA_SIZES = {"train": 96_000, "val": 2_000, "test": 2_000}
"""LRA's split sizes; also the defaults of the generated set (about 70 s to generate once:
~1,500 samples/s on one CPU core, 630 MB of TSV)."""
GENERATOR_VERSION = 1

_TOKEN_ID = {tok: i for i, tok in enumerate(VOCAB) if i > 0}


@dataclass(frozen=True)
class ListOpsConfig:
    """Generation parameters (LRA's flags and defaults).

    Lengths are exclusive bounds: a sample is kept when ``min_length < length < max_length``.
    """

    max_depth: int = 10
    max_args: int = 10
    min_length: int = 500
    max_length: int = 2000

    def __post_init__(self) -> None:
        if self.max_depth < 1 or self.max_args < 2 or self.min_length >= self.max_length - 1:
            raise ValueError(f"invalid ListOps configuration {self}: need max_depth >= 1, "
                             "max_args >= 2 and min_length < max_length - 1")


# ---------------------------------------------------------------------------- generator

class _TooLong(Exception):
    """Raised inside :func:`sample_tree` once a tree can no longer be short enough."""


def _grow(rand, depth: int, cfg: ListOpsConfig, room: int):
    """One random (sub)tree as ``(tree, length)``; raises :class:`_TooLong` at ``room``.

    ``rand`` is a ``random.Random().random``; integer draws are ``int(rand() * k)``, uniform
    like ``randint``/``choice`` and several times faster.
    """
    if depth < cfg.max_depth and rand() <= VALUE_P:
        length = 2  # the operator and its closing "]"
        args = []
        for _ in range(2 + int(rand() * (cfg.max_args - 1))):
            sub, sub_len = _grow(rand, depth + 1, cfg, room - length)
            args.append(sub)
            length += sub_len
            if length >= room:
                raise _TooLong
        return (OPERATORS[int(rand() * len(OPERATORS))], tuple(args)), length
    return int(rand() * 10), 1


def sample_tree(rng: random.Random, cfg: ListOpsConfig = ListOpsConfig()):
    """Draw one tree as LRA's ``generate_tree(1, ...)`` does; return ``(tree, length)``.

    A tree is a digit ``int`` or ``(operator, (arg, ...))``.  Returns None for a tree that
    reached ``cfg.max_length`` tokens: it would be rejected anyway, so it is abandoned early
    (this does not change the distribution of the kept samples).
    """
    try:
        return _grow(rng.random, 1, cfg, cfg.max_length)
    except _TooLong:
        return None


def _apply(op: str, values: list[int]) -> int:
    """One operator: MIN, MAX, MED = int(median) (as ``int(np.median(...))``), SM = sum mod 10."""
    if op == "[MIN":
        return min(values)
    if op == "[MAX":
        return max(values)
    if op == "[MED":  # int(np.median(values)) for non-negative integers
        values = sorted(values)
        n = len(values)
        return (values[(n - 1) // 2] + values[n // 2]) // 2
    if op == "[SM":
        return sum(values) % 10
    raise ValueError(f"unknown ListOps operator {op!r}")


def _render(tree, parts: list[str]) -> int:
    """Append the LRA string pieces of ``tree`` to ``parts``; return its value."""
    if isinstance(tree, int):
        parts.append(str(tree))
        return tree
    op, args = tree
    parts.append("( " * (len(args) + 1) + op)
    values = []
    for arg in args:
        parts.append(" ")
        values.append(_render(arg, parts))
        parts.append(" )")
    parts.append(f" {END} )")
    return _apply(op, values)


def render(tree) -> tuple[str, int]:
    """``(LRA Source string, value)`` of a tree in one pass (see :func:`to_lra_string`)."""
    parts: list[str] = []
    value = _render(tree, parts)
    return "".join(parts), value


def evaluate(tree) -> int:
    """The value of a tree: MIN, MAX, MED = int(median) (numpy's), SM = sum mod 10."""
    return render(tree)[1]


def to_lra_string(tree) -> str:
    """LRA's left-nested ``Source`` string: ``[MAX 2 9 ]`` -> ``( ( ( [MAX 2 ) 9 ) ] )``.

    An operator with k arguments is k + 1 nested pairs: ``(op, a1)``, then ``(that, a2)``,
    ..., then ``(that, ])``, each printed as ``( left right )``.
    """
    return render(tree)[0]


def iter_listops(*, seed: int = 0, config: ListOpsConfig = ListOpsConfig()
                 ) -> Iterator[tuple[str, int]]:
    """Endless stream of distinct samples ``(source, label)`` with LRA's distribution.

    Deterministic in ``seed``.  Duplicates are recognised by a 128-bit digest of the source
    string, so memory stays small however many samples are drawn.
    """
    rng = random.Random(seed)
    seen: set[bytes] = set()
    while True:
        drawn = sample_tree(rng, config)
        if drawn is None or not config.min_length < drawn[1] < config.max_length:
            continue
        source, value = render(drawn[0])
        digest = hashlib.blake2b(source.encode(), digest_size=16).digest()
        if digest not in seen:
            seen.add(digest)
            yield source, value


def generate_listops(n: int, *, seed: int = 0, config: ListOpsConfig = ListOpsConfig()
                     ) -> list[tuple[str, int]]:
    """The first ``n`` samples of :func:`iter_listops` as a list."""
    return list(itertools.islice(iter_listops(seed=seed, config=config), n))


def write_listops_tsv(path: Path, rows: Iterable[tuple[str, int]]) -> None:
    """Write the official format: header ``Source\\tTarget``, one ``source\\tlabel`` row each."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["Source", "Target"])
        writer.writerows(rows)


def write_listops_files(out_dir: Path, *, n_train: int = LRA_SIZES["train"],
                        n_val: int = LRA_SIZES["val"], n_test: int = LRA_SIZES["test"],
                        seed: int = 0, config: ListOpsConfig = ListOpsConfig(),
                        progress: bool = False) -> dict[str, Path]:
    """Generate and write ``out_dir/basic_{train,val,test}.tsv``; return the paths by split.

    The splits are consecutive slices of one :func:`iter_listops` stream (train first), so
    they never share a sample.  Progress: a tqdm bar on stderr when ``progress``.
    """
    sizes = {"train": n_train, "val": n_val, "test": n_test}
    if min(sizes.values()) < 0 or sum(sizes.values()) == 0:
        raise ValueError(f"split sizes must be >= 0 and not all 0, got {sizes}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stream = iter_listops(seed=seed, config=config)
    paths = {}
    with tqdm(total=sum(sizes.values()), desc="generating ListOps", unit="sample",
              disable=not progress) as bar:
        for split in SPLITS:
            paths[split] = out_dir / f"basic_{split}.tsv"
            rows = itertools.islice(stream, sizes[split])
            write_listops_tsv(paths[split], _counted(rows, bar))
    return paths


def _counted(rows, bar):
    """``rows`` unchanged, advancing ``bar`` by one per row (``tqdm.update`` returns True
    when it redraws, so it cannot sit inside an ``or`` expression)."""
    for row in rows:
        bar.update(1)
        yield row


# ---------------------------------------------------------------------------- tokeniser

_FAST_OPS = tuple(zip(OPERATORS, "abcd"))  # one byte per operator (not in any token)
_DROP_PARENS = str.maketrans("", "", "()")


def _byte_table() -> np.ndarray:
    """Byte -> token id for the packed text of :func:`_pack` (-1: not a token)."""
    table = np.full(256, -1, dtype=np.int16)
    for op, code in _FAST_OPS:
        table[ord(code)] = _TOKEN_ID[op]
    for tok in (*VOCAB[1:11], END):
        table[ord(tok)] = _TOKEN_ID[tok]
    return table


_LUT = _byte_table()


class UnknownTokenError(ValueError):
    """A Source string holds a symbol outside :data:`VOCAB`; ``index`` is the string's index."""

    def __init__(self, index: int, token: str) -> None:
        super().__init__(f"unknown ListOps token {token!r} in string {index}; tokens are "
                         f"{', '.join(VOCAB[1:])} and parentheses")
        self.index, self.token = index, token


def _encode_careful(index: int, source: str) -> np.ndarray:
    """Token ids of one string by splitting on whitespace; UnknownTokenError if any."""
    tokens = source.translate(_DROP_PARENS).split()
    for tok in tokens:
        if tok not in _TOKEN_ID:
            raise UnknownTokenError(index, tok)
    return np.array([_TOKEN_ID[tok] for tok in tokens], dtype=np.uint8)


def _pack(sources: Sequence[str]) -> np.ndarray | None:
    """All strings as one byte array, one byte per token, strings separated by newlines.

    Parentheses are dropped and each operator becomes one letter (``a``-``d``).  None when a string
    already holds a newline or one of those bytes (the careful path handles it).
    """
    text = "\n".join(sources)
    if text.count("\n") != len(sources) - 1 or any(c in text for _, c in _FAST_OPS):
        return None
    text = text.translate(_DROP_PARENS)
    for op, code in _FAST_OPS:
        text = text.replace(op, code)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def encode_many(sources: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of many LRA ``Source`` strings, vectorised; parentheses are dropped.

    Returns ``(ids, offsets)``: flat uint8 ids and int64 offsets (N + 1,), string ``i`` is
    ``ids[offsets[i]:offsets[i + 1]]``.  Raises :class:`UnknownTokenError` for the first
    string holding a symbol outside :data:`VOCAB`.
    """
    raw = _pack(sources) if len(sources) else None
    if raw is None:
        return _join([_encode_careful(i, src) for i, src in enumerate(sources)])
    solid = np.flatnonzero((raw != ord(" ")) & (raw != ord("\n")))
    ids = _LUT[raw[solid]]
    # string boundaries, then per string: #bytes, #runs of bytes (tokens), #unknown bytes
    bounds = np.concatenate(([0], np.flatnonzero(raw == ord("\n")), [len(raw)]))
    offsets = np.searchsorted(solid, bounds)
    starts = solid[np.diff(solid, prepend=-2) > 1]
    bad = np.diff(np.searchsorted(starts, bounds)) != np.diff(offsets)
    bad[np.searchsorted(bounds, solid[ids < 0], side="right") - 1] = True
    if not bad.any():
        return ids.astype(np.uint8), offsets.astype(np.int64)
    return _join([_encode_careful(i, src) if bad[i] else
                  ids[offsets[i]:offsets[i + 1]].astype(np.uint8)
                  for i, src in enumerate(sources)])


def _join(chunks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(flat ids, offsets)`` of a list of id arrays."""
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in chunks], out=offsets[1:])
    flat = np.concatenate(chunks) if len(chunks) else np.zeros(0, dtype=np.uint8)
    return flat.astype(np.uint8), offsets


def encode(source: str) -> np.ndarray:
    """Token ids (uint8 array) of one LRA ``Source`` string (see :func:`encode_many`)."""
    return encode_many([source])[0]


def decode(ids: Sequence[int] | torch.Tensor) -> str:
    """Space-separated token strings of ids (pads skipped), e.g. ``[MAX 2 9 ]``."""
    return " ".join(VOCAB[int(i)] for i in ids if int(i) != 0)


# ---------------------------------------------------------------------------- reader

class ListOpsDataset(torch.utils.data.Dataset):
    """ListOps samples held as one flat uint8 token array.

    Item ``i``: ``{"tokens": LongTensor (L_i,), "label": int}``; ``info`` is the
    :class:`DatasetInfo`; ``lengths`` the (truncated) lengths; ``path`` the source file.
    """

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray, labels: np.ndarray,
                 info: DatasetInfo, path: Path | None = None) -> None:
        self.tokens, self.offsets, self.labels = tokens, offsets, labels
        self.info, self.path = info, path

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, index: int) -> dict:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} ListOps samples")
        index %= len(self)
        start, stop = self.offsets[index], self.offsets[index + 1]
        tokens = torch.from_numpy(self.tokens[start:stop].astype(np.int64))
        return {"tokens": tokens, "label": int(self.labels[index])}


def listops_info(max_len: int = 2000) -> DatasetInfo:
    """The :class:`DatasetInfo` of ListOps: 16 token ids, 10 classes, pad 0."""
    return DatasetInfo(task="classification", vocab_size=len(VOCAB), num_classes=10,
                       max_len=max_len, pad_id=0)


def _parse_fields(line: str, where: str) -> tuple[str, int]:
    """``(source, label)`` of one data row; ValueError naming ``where`` (file:line)."""
    fields = line.split("\t")
    if len(fields) != 2:
        raise ValueError(f"{where}: expected 2 tab-separated fields (Source, Target), found "
                         f"{len(fields)}: truncated or malformed row")
    text = fields[1].strip()
    if not (text.isascii() and text.isdigit()) or int(text) > 9:
        raise ValueError(f"{where}: label {fields[1]!r} is not an integer 0-9")
    if not fields[0].strip("() "):
        raise ValueError(f"{where}: empty Source expression")
    return fields[0], int(text)


def _rows(path: Path, block: int = 4096):
    """Blocks of ``(line numbers, sources, labels)`` of a ListOps TSV after its header."""
    with open(path, encoding="utf-8", newline="") as f:
        header = f.readline().rstrip("\r\n")
        if header != HEADER:
            raise ValueError(f"{path}:1: expected the header 'Source\\tTarget', found "
                             f"{header[:60]!r}; is this a ListOps TSV file?")
        linenos, sources, labels = [], [], []
        for lineno, line in enumerate(f, start=2):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            source, label = _parse_fields(line, f"{path}:{lineno}")
            linenos.append(lineno)
            sources.append(source)
            labels.append(label)
            if len(sources) == block:
                yield linenos, sources, labels
                linenos, sources, labels = [], [], []
        if sources:
            yield linenos, sources, labels


def _truncate(ids: np.ndarray, offsets: np.ndarray, max_len: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Keep the first ``max_len`` ids of every string."""
    lengths = np.minimum(np.diff(offsets), max_len)
    if (lengths == np.diff(offsets)).all():
        return ids, offsets
    position = np.arange(len(ids)) - np.repeat(offsets[:-1], np.diff(offsets))
    new_offsets = np.zeros_like(offsets)
    np.cumsum(lengths, out=new_offsets[1:])
    return ids[position < max_len], new_offsets


def read_listops_tsv(path: str | Path, max_len: int = 2000) -> ListOpsDataset:
    """Read an official ListOps TSV file; sequences are truncated to ``max_len`` tokens.

    Errors (ValueError, naming the file and line): missing header, a row without exactly two
    tab-separated fields, unknown tokens, labels outside 0-9.  Blank lines are ignored.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    path = Path(path)
    chunks, all_labels = [], []
    for linenos, sources, labels in _rows(path):
        try:
            ids, offsets = encode_many(sources)
        except UnknownTokenError as err:
            raise ValueError(f"{path}:{linenos[err.index]}: unknown token {err.token!r}; "
                             f"ListOps tokens are {', '.join(VOCAB[1:])} and parentheses"
                             ) from None
        ids, offsets = _truncate(ids, offsets, max_len)
        chunks.extend(np.split(ids, offsets[1:-1]))
        all_labels.extend(labels)
    tokens, offsets = _join(chunks)
    return ListOpsDataset(tokens, offsets, np.array(all_labels, dtype=np.int64),
                          listops_info(max_len), path)


# ---------------------------------------------------------------------------- locations

def find_listops_file(root: str | Path, split: str) -> Path:
    """The official ``basic_<split>.tsv`` under ``root``.

    ``root`` may hold the files itself, or be the LRA release directory (``listops-1000/``
    inside) or its parent (``lra_release/listops-1000/``).  Missing: DataMissingError.
    """
    root = Path(root)
    name = f"basic_{split}.tsv"
    candidates = [root / name, root / "listops-1000" / name,
                  root / "lra_release" / "listops-1000" / name]
    for path in candidates:
        if path.is_file():
            return path
    raise DataMissingError(
        f"ListOps {split} file not found; looked for {', '.join(map(str, candidates))}.\n"
        f"Get the Long Range Arena release from {RELEASE_URL} (tar xzf lra_release.gz) and "
        f"pass root=DIR with DIR/lra_release/listops-1000/{name}, or DIR/{name}.\n"
        "Offline: `weirdnet data build listops --out DIR` writes a set with LRA's "
        "distribution (root=None uses a generated set cached under $WEIRDNET_DATA).")


def generated_listops_dir(*, n_train: int = LRA_SIZES["train"], n_val: int = LRA_SIZES["val"],
                          n_test: int = LRA_SIZES["test"], seed: int = 0,
                          config: ListOpsConfig = ListOpsConfig(),
                          progress: bool = True) -> Path:
    """The cached generated set for these parameters, generated on first use.

    ``data_root()/listops/generated/seed<seed>-n<train>-<val>-<test>-<hash>/basic_*.tsv``;
    written atomically (temporary directory, then rename).
    """
    params = {"n_train": n_train, "n_val": n_val, "n_test": n_test, "seed": seed,
              "version": GENERATOR_VERSION, **asdict(config)}
    target = cache_dir("listops", f"seed{seed}-n{n_train}-{n_val}-{n_test}", params)
    return build_dir_atomically(target, lambda tmp: write_listops_files(
        tmp, n_train=n_train, n_val=n_val, n_test=n_test, seed=seed, config=config,
        progress=progress))


@register("listops", splits=SPLITS, task="classification",
          summary="LRA ListOps: nested MIN/MAX/MED/SM expressions, 10 classes, len < 2000",
          root=Root("folder", "the folder holding basic_*.tsv, or lra_release/"))
def _listops(split: str, root: Path | None = None, *, max_len: int = 2000,
             n_train: int = LRA_SIZES["train"], n_val: int = LRA_SIZES["val"],
             n_test: int = LRA_SIZES["test"], seed: int = 0, max_depth: int = 10,
             max_args: int = 10, min_length: int = 500, max_length: int = 2000
             ) -> ListOpsDataset:
    """``root=DIR``: the official TSV files; None: the generated cache (sizes, seed and
    generation parameters as options; LRA's 96K/2K/2K by default)."""
    if root is None:
        config = ListOpsConfig(max_depth, max_args, min_length, max_length)
        root = generated_listops_dir(n_train=n_train, n_val=n_val, n_test=n_test, seed=seed,
                                     config=config)
    return read_listops_tsv(find_listops_file(root, split), max_len=max_len)
