"""Small configs and datasets for the trainer tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from torch.utils.data import Dataset

from weirdnet.data.registry import NO_ROOT, DatasetInfo, register

TINY_LM = """
[run]
seed = 3
[data]
dataset = "python-stdlib"
options = {{ seq_len = 32, epoch_length = 512 }}
test_split = ""
[model.backbone]
dim = 32
depth = 2
d_ff = 64
heads = 2
dropout = {dropout}
[schedule]
warmup_steps = 4
[train]
steps = {steps}
batch_size = 8
eval_every = {eval_every}
eval_batches = 2
final_eval_batches = 4
log_every = 5
checkpoint_every = {checkpoint_every}
keep_last = 3
"""


def write_config(directory: Path, name: str = "tiny.toml", *, steps: int = 12,
                 eval_every: int = 6, checkpoint_every: int = 3, dropout: float = 0.1,
                 extra: str = "") -> Path:
    path = Path(directory) / name
    path.write_text(TINY_LM.format(steps=steps, eval_every=eval_every, dropout=dropout,
                                   checkpoint_every=checkpoint_every) + extra)
    return path


def relative_difference(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    """||got - want|| / ||want|| over the tensors of ``want`` (every key of ``want`` must be
    in ``got``), in float64: how far two runs' weights are apart."""
    num = sum(float((got[k] - want[k]).double().norm() ** 2) for k in want) ** 0.5
    return num / sum(float(want[k].double().norm() ** 2) for k in want) ** 0.5


def subprocess_env() -> dict[str, str]:
    """One thread per process: deterministic, and two processes fit on two cores."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1"}


def weirdnet_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "weirdnet", *args]


def run_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(weirdnet_cmd(*args), cwd=cwd, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


class FirstTokenParity(Dataset):
    """Classification: label = first token mod 2 (variable lengths 3..12, vocab 10)."""

    def __init__(self, size: int, seed: int, pairs: bool = False):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(size):
            lengths = torch.randint(3, 13, (2,), generator=g).tolist()
            first = torch.randint(1, 10, (lengths[0],), generator=g)
            item = {"tokens": first, "label": int(first[0]) % 2}
            if pairs:
                item["tokens2"] = torch.randint(1, 10, (lengths[1],), generator=g)
            self.items.append(item)
        self.info = DatasetInfo(task="retrieval" if pairs else "classification",
                                vocab_size=10, num_classes=2, max_len=12)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.items[index]


_SIZES = {"train": 64, "val": 32, "test": 32}
_SEEDS = {"train": 0, "val": 1, "test": 2}


@register("test-parity", splits=("train", "val", "test"), task="classification", root=NO_ROOT,
          summary="tests only: first-token parity")
def _parity(split, root=None, size=None):
    return FirstTokenParity(size if size is not None else _SIZES[split], _SEEDS[split])


@register("test-parity-pairs", splits=("train", "val", "test"), task="retrieval", root=NO_ROOT,
          summary="tests only: first-token parity of the first document")
def _parity_pairs(split, root=None):
    return FirstTokenParity(_SIZES[split], _SEEDS[split], pairs=True)


class NoisyValues(Dataset):
    """Classification on ``values`` (L=6, C=2): label = sign of the first value; with
    ``infinite`` the first item's values are +inf (a model reads them and computes NaN)."""

    def __init__(self, size: int, seed: int, infinite: bool = False):
        g = torch.Generator().manual_seed(seed)
        values = torch.randn(size, 6, 2, generator=g)
        if infinite:
            values[0] = float("inf")
        self.items = [{"values": v, "label": int(v[0, 0] > 0)} for v in values]
        self.info = DatasetInfo(task="classification", input_dim=2, num_classes=2, max_len=6)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.items[index]


@register("test-values", splits=("train", "val", "test"), task="classification",
          root=NO_ROOT, summary="tests only: sign of the first value; infinite= a split "
                                "whose first item is +inf")
def _values(split, root=None, infinite: str = ""):
    return NoisyValues(_SIZES[split], _SEEDS[split], infinite=split == infinite)
