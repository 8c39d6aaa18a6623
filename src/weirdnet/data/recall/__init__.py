"""Recall diagnostics: synthetic sequences that test what a mixer can look up.

    dataset.py         RecallDataset: seeded items, the splits, the shared checks
    mqar.py            ``mqar``: multi-query associative recall (Zoology)
    selective_copy.py  ``selective-copy``: copy the scattered data tokens, in order
    induction.py       ``induction``: after a trigger seen before, predict what followed it

Every item is ``{"tokens": LongTensor (L,), "targets": LongTensor (L,)}`` with
``targets = IGNORE`` (-100) where nothing is asked, for the ``recall`` task (a causal
model predicts ``targets[t]`` at position ``t``; accuracy over the asked positions).
"""

from .dataset import IGNORE, RecallDataset
from .induction import induction_sample
from .mqar import mqar_sample
from .selective_copy import selective_copy_sample

__all__ = ["IGNORE", "RecallDataset", "induction_sample", "mqar_sample",
           "selective_copy_sample"]
