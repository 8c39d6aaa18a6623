"""Datasets for every experiment of the papers: generators, official-format readers, offline data.

``weirdnet.data.get(name, split, root=None, **options)`` is the entry point; see
:mod:`weirdnet.data.registry` for the item formats and :func:`available` for the names.
"""

from weirdnet.data.registry import (
    DataMissingError,
    DatasetInfo,
    available,
    data_root,
    entry,
    get,
    register,
)

__all__ = ["DataMissingError", "DatasetInfo", "available", "data_root", "entry", "get",
           "register"]
