"""Byte-level text: enwik8/text8 and any text file, offline real corpora, and the
Python standard library's source (always offline)."""
