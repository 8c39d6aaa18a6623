"""The link graph between the pages of a Sphinx documentation, from its reST sources.

This gives the offline stand-in of LRA Retrieval (``python-doc-pairs``): pages of the
Python documentation (``_sources/**/*.rst.txt`` of the Debian package ``python3.11-doc``)
that reference each other.

Pages are named by their path without ``.rst.txt``/``.txt`` (``library/os``).  A page
*defines* the targets

- ``.. _label:`` (for ``:ref:``), lower-cased as Sphinx does;
- ``.. module:: name``; and Python objects of ``.. function::``, ``.. class::``,
  ``.. method::``, ``.. data::`` ... under their bare name and qualified by the current
  module (``.. module::``/``.. currentmodule::``) and, for members indented under a
  ``.. class::``/``.. exception::``, by their class;
- C objects of ``.. c:function::``, ``.. c:type::``, ``.. c:member::`` ...;
- every ``:term:`` if it holds the ``.. glossary::``.

A page *references* targets with ``:ref:``, ``:doc:`` (relative or ``/``-absolute paths),
``:term:``, the Python roles (``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:exc:``,
``:attr:``, ``:data:``, ``:const:``, ``:obj:``) and the C roles, in the forms ``target``,
``title <target>``, ``~a.b``, ``!a``, ``.a`` and ``f()``; a Python name is looked up as
written, then under the current module.  Two pages are *linked* when one references a
target the other defines (first definition wins; links to itself are dropped).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from weirdnet.data.registry import DataMissingError
from weirdnet.data.sources.packages import PYTHON_DOC

__all__ = ["Targets", "define_targets", "link_graph", "linked_pairs", "page_links",
           "read_pages"]

_LABEL = re.compile(r"^\.\. _([^:`][^:]*):\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\. (?:py:)?([a-z:]+)::\s*(.*)$")
_ROLE = re.compile(r":(?:py:)?(ref|doc|term|mod|func|class|meth|exc|attr|data|const|obj|"
                   r"c:func|c:type|c:member|c:data|c:macro|c:var):`([^`]+)`")
_PY_OBJECTS = {"function", "class", "exception", "method", "attribute", "data", "decorator",
               "classmethod", "staticmethod", "coroutinefunction", "coroutinemethod",
               "abstractmethod", "decoratormethod", "property"}
_MEMBERS = {"method", "attribute", "classmethod", "staticmethod", "coroutinemethod",
            "abstractmethod", "decoratormethod", "property"}
_C_OBJECTS = {"c:function", "c:type", "c:member", "c:var", "c:macro", "c:struct", "c:data"}


def read_pages(folder: Path) -> dict[str, bytes]:
    """Every ``*.txt`` under ``folder`` by page name (path without .rst.txt), in name order."""
    pages = {}
    for path in sorted(Path(folder).rglob("*.txt")):
        name = path.relative_to(folder).as_posix().removesuffix(".txt").removesuffix(".rst")
        pages[name] = path.read_bytes()
    if not pages:
        raise DataMissingError(f"no reST sources (*.txt) under {folder}; pass root= a Sphinx "
                               f"_sources folder ({PYTHON_DOC.how_to_get()})")
    return pages


@dataclass
class Targets:
    """Which page defines each label, object and C object, and the glossary page."""

    labels: dict[str, str] = field(default_factory=dict)
    objects: dict[str, str] = field(default_factory=dict)
    c_objects: dict[str, str] = field(default_factory=dict)
    glossary: str | None = None


def _signature_name(signature: str, c: bool) -> str | None:
    """The object's name in a directive's signature (C: the identifier before "(")."""
    if c:
        found = re.search(r"(\w+)\s*\(", signature) or re.search(r"(\w+)\s*$", signature)
    else:
        found = re.match(r"([\w.]+)", signature)
    return found.group(1) if found else None


def _lines(text: str):
    """(line, directive match or None, current module) for each line of a page."""
    module = ""
    for line in text.splitlines():
        directive = _DIRECTIVE.match(line)
        if directive and directive.group(2) in ("module", "currentmodule"):
            module = directive.group(3).strip()
        yield line, directive, module


def _define_page(name: str, text: str, targets: Targets) -> None:
    klass: tuple[int, str] | None = None
    for line, directive, module in _lines(text):
        label = _LABEL.match(line)
        if label:
            targets.labels.setdefault(label.group(1).strip().lower(), name)
        if not directive:
            continue
        indent, kind, signature = len(directive.group(1)), directive.group(2), directive.group(3)
        if kind == "glossary" and targets.glossary is None:
            targets.glossary = name
        elif kind == "module":
            targets.objects.setdefault(module, name)
        elif kind in _C_OBJECTS and (obj := _signature_name(signature, c=True)):
            targets.c_objects.setdefault(obj, name)
        elif kind in _PY_OBJECTS and (obj := _signature_name(signature, c=False)):
            if kind in _MEMBERS and klass and indent > klass[0] and "." not in obj:
                obj = f"{klass[1]}.{obj}"
            if kind in ("class", "exception"):
                klass = (indent, obj)
            targets.objects.setdefault(obj, name)
            if module and not obj.startswith(f"{module}."):
                targets.objects.setdefault(f"{module}.{obj}", name)


def define_targets(pages: dict[str, bytes]) -> Targets:
    """The targets each page defines (module doc)."""
    targets = Targets()
    for name, data in pages.items():
        _define_page(name, data.decode("utf-8", "replace"), targets)
    return targets


def _target(content: str) -> str:
    found = re.search(r"<([^<>]+)>\s*$", content)
    target = (found.group(1) if found else content).strip()
    return target.lstrip("~!.").removesuffix("()")


def _resolve(page: str, role: str, target: str, module: str, targets: Targets) -> str | None:
    if role == "ref":
        return targets.labels.get(target.lower())
    if role == "doc":
        base = posixpath.dirname(page)
        return posixpath.normpath(target.lstrip("/") if target.startswith("/")
                                  else posixpath.join(base, target))
    if role == "term":
        return targets.glossary
    if role.startswith("c:"):
        return targets.c_objects.get(target)
    return targets.objects.get(target) or targets.objects.get(f"{module}.{target}")


def page_links(name: str, text: str, targets: Targets) -> set[str]:
    """The pages that page ``name`` references (itself excluded)."""
    found = set()
    for line, _, module in _lines(text):
        for role, content in _ROLE.findall(line):
            other = _resolve(name, role, _target(content), module, targets)
            if other is not None and other != name:
                found.add(other)
    return found


def link_graph(pages: dict[str, bytes]) -> list[tuple[str, str]]:
    """Sorted unordered pairs (a, b), a < b, of linked pages (both in ``pages``)."""
    targets = define_targets(pages)
    edges = set()
    for name, data in pages.items():
        for other in page_links(name, data.decode("utf-8", "replace"), targets):
            if other in pages:
                edges.add((min(name, other), max(name, other)))
    return sorted(edges)


def linked_pairs(pages: dict[str, bytes], *, seed: int = 0
                 ) -> tuple[list[tuple[str, str]], list[int]]:
    """All linked page pairs (label 1) and as many random unlinked ones (label 0),
    shuffled; reproducible from ``seed``."""
    positives = link_graph(pages)
    names = sorted(pages)
    linked = set(positives)
    rng = np.random.default_rng(seed)
    negatives: set[tuple[str, str]] = set()
    if len(positives) > len(names) * (len(names) - 1) // 4:
        raise ValueError("the pages are too densely linked to draw as many unlinked pairs")
    while len(negatives) < len(positives):
        i, j = rng.choice(len(names), size=2, replace=False)
        pair = (min(names[i], names[j]), max(names[i], names[j]))
        if pair not in linked:
            negatives.add(pair)
    pairs = positives + sorted(negatives)
    labels = [1] * len(positives) + [0] * len(negatives)
    order = rng.permutation(len(pairs))
    return [pairs[i] for i in order], [labels[i] for i in order]
