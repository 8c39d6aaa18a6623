"""Imports every module that registers a built-in dataset (see :mod:`weirdnet.data.registry`)."""

# Each import registers its datasets as a side effect.  Add new dataset modules here.
import weirdnet.data.aan  # noqa: F401  (real-data loaders)
import weirdnet.data.corpora  # noqa: F401  (real-data loaders)
import weirdnet.data.images  # noqa: F401  (real-data loaders)
import weirdnet.data.imdb  # noqa: F401  (real-data loaders)
import weirdnet.data.listops  # noqa: F401  (LRA ListOps: generator + reader)
import weirdnet.data.pathfinder  # noqa: F401  (LRA Pathfinder/Path-X: generator + reader)
import weirdnet.data.seq2seq_synthetic  # noqa: F401  (seq2seq-digits: generator)
import weirdnet.data.stdlib_corpus  # noqa: F401  (python-stdlib: always offline)
import weirdnet.data.text  # noqa: F401  (real-data loaders)
import weirdnet.data.uea  # noqa: F401  (real-data loaders)
