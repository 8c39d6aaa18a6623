"""``python-stdlib``: the byte-level text of the running interpreter's standard library.

Every machine that runs weirdnet has this corpus, with no download and no extra package,
so it is the project's built-in, always-available text for the quick-start and for smoke
tests of byte-level language models.

Content: every ``*.py`` file under ``sysconfig.get_paths()["stdlib"]``, except test code
(a path component named ``test``, ``tests`` or ``idle_test``, or starting with ``test_``),
``site-packages``, ``dist-packages`` and ``__pycache__``; in sorted relative-path order
(POSIX separators).  Each file is written as a header line ``# ===== <relative path> =====``
followed by its bytes with the trailing newlines replaced by exactly one (an empty file
gives the header alone).  Files that are not valid UTF-8 are skipped, so the corpus is
UTF-8 text (``info.encoding == "utf-8"``).

The content depends on the Python version (and, slightly, on the distribution's build of
it): about 12.1 MB (12,143,671 bytes from 734 files) on CPython 3.11.7, built in about
0.15 s (mostly reading the files) and cached as
``data_root()/corpora/python-stdlib-<X.Y.Z>-<fingerprint>.bin``, the fingerprint being a
digest of the kept files' paths, sizes and modification times (so a changed standard
library is read again).

``root=`` may name another directory of ``.py`` files to read instead, with the same rules
(not cached; a missing directory or one without any ``.py`` file raises
:class:`~weirdnet.data.registry.DataMissingError`).  Splits are contiguous byte ranges like
enwik8's: ``split_scheme="standard"`` 90% / 5% / 5% (train/val/test), ``"last10m"``
85% / 5% / 10%.  Items and options (seq_len, split_scheme, random_crops, epoch_length,
seed): :mod:`weirdnet.data.text.lm`.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from weirdnet.data.common import source_cached
from weirdnet.data.registry import DataMissingError, Root, register
from weirdnet.data.sources.fingerprint import fingerprint
from weirdnet.data.text.lm import LM_OPTIONS, SPLITS, ByteLMDataset, lm_dataset

__all__ = ["EXCLUDED_NAMES", "is_excluded", "python_sources", "stdlib_bytes", "stdlib_dir"]

EXCLUDED_NAMES = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages",
                            "__pycache__"})
"""Path components (directories or files) whose whole subtree is left out."""


def stdlib_dir() -> Path:
    """The running interpreter's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_excluded(component: str) -> bool:
    """True for a path component that marks test code or installed packages."""
    return component in EXCLUDED_NAMES or component.startswith("test_")


def python_sources(root: Path) -> list[str]:
    """Relative POSIX paths of the kept ``*.py`` files under ``root``, sorted."""
    found: list[str] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not is_excluded(d)]
        base = Path(directory).relative_to(root)
        found.extend((base / name).as_posix() for name in files
                     if name.endswith(".py") and not is_excluded(name))
    return sorted(found)


def _sources(root: Path) -> list[str]:
    """:func:`python_sources` of ``root``; DataMissingError if it is not a folder."""
    if not root.is_dir():
        raise DataMissingError(f"python-stdlib: source directory {root} does not exist "
                               f"(root= must be a directory of .py files)")
    return python_sources(root)


def _build(root: Path, names: list[str]) -> bytes:
    """The corpus bytes of the ``.py`` files ``names`` under ``root`` (rules: module
    doc)."""
    if not names:
        raise DataMissingError(f"python-stdlib: no .py file under {root} (outside test, "
                               f"site-packages and __pycache__ directories)")
    chunks: list[bytes] = []
    for name in names:
        data = (root / name).read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        body = data.rstrip(b"\n")
        chunks.append(f"# ===== {name} =====\n".encode() + (body + b"\n" if body else b""))
    if not chunks:
        raise DataMissingError(f"python-stdlib: no .py file under {root} is valid UTF-8")
    return b"".join(chunks)


def stdlib_bytes(root: Path | None = None) -> bytes:
    """The corpus bytes: of the standard library (cached per Python version) or of the
    ``.py`` files under ``root`` (read every time)."""
    if root is not None:
        return _build(Path(root), _sources(Path(root)))
    version = ".".join(map(str, sys.version_info[:3]))
    root = stdlib_dir()
    names = _sources(root)
    source = fingerprint((root / name for name in names), content=False)
    return source_cached(f"python-stdlib-{version}", source, lambda: _build(root, names))


FILE_STARTS = rb"^# ===== .+ =====$"
"""Where each source file (a document, for ``pack``) starts: its header line."""


@register("python-stdlib", splits=SPLITS, task="lm", options=LM_OPTIONS,
          summary="the running Python's standard-library source, UTF-8 bytes (always offline)",
          root=Root("folder", "a folder of .py files"))
def _python_stdlib(split: str, root: Path | None = None, **options) -> ByteLMDataset:
    """python-stdlib: root=None the interpreter's stdlib, else a directory of .py files.
    Options: see weirdnet.data.text.lm."""
    return lm_dataset(stdlib_bytes(root), split, name="python-stdlib", encoding="utf-8",
                      doc_pattern=FILE_STARTS, **options)
