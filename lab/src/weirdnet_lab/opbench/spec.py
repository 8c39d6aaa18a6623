"""What distinguishes one operator benchmark from another (``weirdnet bench scan`` and
``weirdnet bench mixers``; not to be confused with ``weirdnet bench suite``, the papers'
tables).

An :class:`OpBench` names its methods, default lengths, ratios, targets and report header;
the shared machinery (:mod:`.runner`: timing, memory children, reports) takes it as a
parameter.  Each lives in its own module (:mod:`.scan`, :mod:`.mixers`), defining
``OPBENCH``; :func:`get_opbench` imports one by name (the memory child and the report
renderer look them up that way).  Nothing here imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only (methods imports torch)
    from weirdnet_lab.opbench.methods import Method


@dataclass(frozen=True)
class Ratio:
    """``metric`` of method ``num`` divided by that of method ``den``, per length.

    ``group``: the report puts ratios of one group in one table, titled ``group`` (ratios
    without a group share one untitled table); ``column`` is the table's column header
    (default: ``label``).  ``den_metric``: the denominator's metric where it is not
    ``metric`` (for example a method's fwd+bwd over its own forward).
    """

    key: str
    label: str
    metric: str
    num: str
    den: str
    group: str = ""
    column: str = ""
    den_metric: str = ""


@dataclass(frozen=True)
class Target:
    """Requirement ``ratio`` at length ``L`` ``op`` ``threshold`` (op: ">=", "<=" or "<").

    ``fallbacks``: ratio keys tried in order when ``ratio`` was not measured; the first
    measured one is used.  ``baselines`` (optional) describes what each of ``ratio``,
    ``*fallbacks`` compares against, for the report.
    """

    key: str
    text: str
    L: int
    ratio: str
    op: str
    threshold: float
    fallbacks: tuple[str, ...] = ()
    baselines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cap:
    """A length cap for the suite's slow methods (``Method.capped``).

    ``option`` is the command-line option setting it (0: no cap), ``default`` its value.
    """

    option: str
    default: int
    help: str


@dataclass(frozen=True)
class Variants:
    """An input-class option of a suite (e.g. ``--log-w``): every method that has a twin
    per class runs once per chosen class, as the method named ``name + classes[class]``.

    ``classes``: class -> method-name suffix, in report order; ``both`` (a choice too)
    runs every class; ``default``: the choice when the option is not given.
    """

    option: str
    classes: dict[str, str]
    default: str
    help: str

    @property
    def choices(self) -> tuple[str, ...]:
        """What the option accepts: each class and "both"."""
        return (*self.classes, "both")

    def expand(self, methods: Sequence[str], known: Sequence[str], choice: str) -> list[str]:
        """``methods`` with each name that has a twin per class replaced by the twins of
        ``choice`` (every class for "both"); other names kept."""
        chosen = list(self.classes) if choice == "both" else [choice]
        out = []
        for name in methods:
            twins = [name + self.classes[c] for c in chosen]
            out += twins if all(t in known for t in twins) else [name]
        return list(dict.fromkeys(out))


@dataclass(frozen=True)
class OpBench:
    """A benchmark suite.

    - ``name``: the subcommand, the output file prefix (``<name>_<device>``) and the
      memory child's ``--suite``.
    - ``title``: the report title (" on <device>" is appended).
    - ``method_names()``: every name ``--methods`` accepts, in table order (may import
      torch); ``method(name)``: its :class:`~.methods.Method`.
    - ``default_methods``: methods run by default (None: all of ``method_names()``).
    - ``default_lengths``: lengths run by default.
    - ``ratios(methods)``: the ratios of a run of ``methods``; ``targets``: its targets.
    - ``describe(doc)``: report header lines on shapes and methods; ``grad_inputs``: what
      requires grad in fwd+bwd; ``ratio_note``: how to read the ratios.
    - ``cap``: optional length cap for the methods marked ``capped``.
    - ``variants``: optional input-class option (:class:`Variants`).
    - ``methods_help``: help text of ``--methods`` (default: the list of names).
    """

    name: str
    title: str
    method_names: Callable[[], tuple[str, ...]]
    method: Callable[[str], Method]
    default_lengths: tuple[int, ...]
    ratios: Callable[[Sequence[str]], tuple[Ratio, ...]]
    targets: tuple[Target, ...]
    describe: Callable[[dict], list[str]]
    default_methods: tuple[str, ...] | None = None
    grad_inputs: str = "all inputs"
    ratio_note: str = ""
    cap: Cap | None = None
    methods_help: str = ""
    variants: Variants | None = None


OPBENCH_MODULES = {"scan": "weirdnet_lab.opbench.scan", "mixers": "weirdnet_lab.opbench.mixers"}
"""Module defining ``OPBENCH`` for each suite name, in ``weirdnet bench`` order."""


def get_opbench(name: str) -> OpBench:
    """The operator benchmark called ``name`` (imports its module)."""
    if name not in OPBENCH_MODULES:
        raise ValueError(f"unknown operator benchmark {name!r}; choose from "
                         f"{', '.join(OPBENCH_MODULES)}")
    return importlib.import_module(OPBENCH_MODULES[name]).OPBENCH
