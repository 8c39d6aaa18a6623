"""Imports every module that registers a built-in dataset (see :mod:`weirdnet.data.registry`)."""

# Each import registers its datasets as a side effect.  Add new dataset modules here.
