"""``seq2seq-digits``: synthetic sequence-to-sequence tasks on strings of decimal digits.

Tasks (option ``task``):

- ``"reverse"`` (default): the source is a digit string, the target its digits reversed
  (``"1203"`` -> ``"3021"``);
- ``"sort"``: the target is the digits sorted ascending (``"1203"`` -> ``"0123"``);
- ``"add"``: the source is ``"a+b"``, a and b non-negative integers in decimal without
  leading zeros, the target their sum (``"123+45"`` -> ``"168"``).

The digit string (reverse, sort) or each operand (add) has a length drawn uniformly from
``[min_digits, max_digits]`` (defaults 1 and 16); digits are uniform 0-9, except that the
first digit of a multi-digit operand is 1-9.

Tokens are the bytes of the ASCII text (vocabulary 256): pad 0, bos 2 (STX), eos 3 (ETX),
none of which occurs in the text.  Item::

    {"src": LongTensor (Ls,), "tgt": LongTensor (Lt,)}
    src = bytes of "123+45"                (no bos/eos)
    tgt = [2] + bytes of "168" + [3]

``info = DatasetInfo(task="seq2seq", vocab_size=256, max_len=..., pad_id=0, bos_id=2,
eos_id=3, encoding="ascii")``; ``max_len`` is the longest ``src`` or ``tgt`` the options
allow (reverse/sort: ``max_digits + 2``; add: ``max(2 * max_digits + 1, max_digits + 3)``).
Batch with :func:`weirdnet.data.collate.pad_collate` (adds ``src_mask``/``tgt_mask``);
:func:`decode` turns ids back into text.

Sampling: item ``i`` of split ``s`` is drawn from
``numpy.random.default_rng([seed, SPLIT_CODE[s], i])``, so it is reproducible and
independent of the order items are read in; nothing is cached.  The splits use different
streams but are not deduplicated against each other: short strings (there are only ten of
one digit) recur across splits, long ones practically never.  ``num_samples`` defaults to
20,000 (train), 1,000 (val) and 1,000 (test).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from weirdnet.data.common import BYTE_VOCAB, byte_tokens, check_option
from weirdnet.data.registry import NO_ROOT, DatasetInfo, register, signature_options

__all__ = ["BOS_ID", "DEFAULT_NUM_SAMPLES", "EOS_ID", "PAD_ID", "SPLITS", "SPLIT_CODE",
           "TASKS", "Seq2SeqDigitsDataset", "decode", "sample_pair"]

SPLITS = ("train", "val", "test")
SPLIT_CODE = {"train": 0, "val": 1, "test": 2}
"""The second word of every item's seed, so the splits draw from different streams."""
TASKS = ("reverse", "sort", "add")
DEFAULT_NUM_SAMPLES = {"train": 20_000, "val": 1_000, "test": 1_000}
PAD_ID, BOS_ID, EOS_ID = 0, 2, 3
"""Padding, start (ASCII STX) and end (ASCII ETX) of the target."""


def _digits(rng: np.random.Generator, length: int, leading_zero: bool) -> str:
    """A string of ``length`` uniform digits; no leading 0 unless allowed or length 1."""
    digits = rng.integers(0, 10, size=length)
    if not leading_zero and length > 1:
        digits[0] = rng.integers(1, 10)
    return "".join(map(str, digits.tolist()))


def sample_pair(task: str, rng: np.random.Generator, min_digits: int, max_digits: int
                ) -> tuple[str, str]:
    """One ``(source, target)`` text pair of ``task`` drawn from ``rng`` (module doc)."""
    if task == "add":
        a, b = (_digits(rng, int(rng.integers(min_digits, max_digits + 1)), False)
                for _ in range(2))
        return f"{a}+{b}", str(int(a) + int(b))
    source = _digits(rng, int(rng.integers(min_digits, max_digits + 1)), True)
    if task == "reverse":
        return source, source[::-1]
    if task == "sort":
        return source, "".join(sorted(source))
    raise ValueError(f"task={task!r} is not one of {', '.join(map(repr, TASKS))}")


def decode(tokens: torch.Tensor | Iterable[int]) -> str:
    """The text of a ``src`` or ``tgt`` (or a generated sequence): a leading bos is
    dropped, everything from the first eos on is cut, padding is removed."""
    ids = [int(t) for t in tokens]
    if ids and ids[0] == BOS_ID:
        ids = ids[1:]
    if EOS_ID in ids:
        ids = ids[:ids.index(EOS_ID)]
    return bytes(i for i in ids if i != PAD_ID).decode("ascii", errors="replace")


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


class Seq2SeqDigitsDataset(Dataset):
    """``num_samples`` generated pairs of one split; see the module doc."""

    def __init__(self, split: str, *, task: str = "reverse", min_digits: int = 1,
                 max_digits: int = 16, num_samples: int | None = None, seed: int = 0):
        check_option("split", split, SPLITS)
        check_option("task", task, TASKS)
        _check_int("min_digits", min_digits, 1)
        _check_int("max_digits", max_digits, 1)
        if max_digits < min_digits:
            raise ValueError(f"max_digits must be >= min_digits, got max_digits={max_digits} "
                             f"< min_digits={min_digits}")
        num_samples = DEFAULT_NUM_SAMPLES[split] if num_samples is None else num_samples
        _check_int("num_samples", num_samples, 1)
        _check_int("seed", seed, 0)
        self.split, self.task, self.seed = split, task, int(seed)
        self.min_digits, self.max_digits = int(min_digits), int(max_digits)
        self.num_samples = int(num_samples)
        longest = (max(2 * max_digits + 1, max_digits + 3) if task == "add"
                   else max_digits + 2)
        self.info = DatasetInfo(task="seq2seq", vocab_size=BYTE_VOCAB, max_len=longest,
                                pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                                encoding="ascii")

    def __len__(self) -> int:
        return self.num_samples

    def pair(self, index: int) -> tuple[str, str]:
        """The ``(source, target)`` text of item ``index``."""
        if not 0 <= index < self.num_samples:
            raise IndexError(f"index {index} out of range for {self.num_samples} samples")
        rng = np.random.default_rng([self.seed, SPLIT_CODE[self.split], index])
        return sample_pair(self.task, rng, self.min_digits, self.max_digits)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        source, target = self.pair(index)
        return {"src": byte_tokens(source.encode("ascii")),
                "tgt": byte_tokens(bytes([BOS_ID]) + target.encode("ascii") + bytes([EOS_ID]))}


@register("seq2seq-digits", splits=SPLITS, task="seq2seq",
          summary="synthetic digit strings: reverse, sort or add (task=), ASCII bytes",
          root=NO_ROOT,
          options=signature_options(Seq2SeqDigitsDataset.__init__, exclude=("self", "split")))
def _seq2seq_digits(split: str, root: Path | None = None, **options) -> Seq2SeqDigitsDataset:
    """Generated on the fly (no root: the registry refuses one).  Options: task,
    min_digits, max_digits, num_samples, seed."""
    return Seq2SeqDigitsDataset(split, **options)
