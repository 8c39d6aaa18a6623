"""The settings of ``weirdnet bench context`` that its command and its report share (one
module that both import, so neither imports the other)."""

CORPUS = "shakespeare"
CORPORA = ("shakespeare", "python-docs")
"""The offline corpora of long documents (``--corpus``): whole works, whole doc pages."""
BOUNDS = (0, 128, 1024, 4096, 16384, 32768)
"""The bounds of the position buckets of the report (bytes of the same document a target sees)."""
