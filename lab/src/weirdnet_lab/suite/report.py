"""The suite's Markdown report: the papers' table layouts with our numbers beside theirs,
and a plain check of each ordering the papers claim.

Everything here works on stored cell records (dicts written by :mod:`.child`), so a
report can be rebuilt at any time from ``OUT/suite-<budget>/cells`` (``--report-only``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from weirdnet_lab.opbench.report import markdown_table
from weirdnet_lab.suite import numbers
from weirdnet_lab.suite.tasks import get_task
from weirdnet_lab.sweep.baselines import best, learned
from weirdnet_lab.sweep.intervals import Z95, accuracy_interval, mean_interval
from weirdnet_lab.variants import VARIANTS

SPEED_TASKS = ("text", "listops", "image")
"""The tasks whose cells give each mechanism's speed and memory, in order of preference:
byte-level text classification first (as in Weird-Net Table V and DBA Table 1), else the
first of the others a budget measured (the laptop budget leaves Text out)."""


@dataclass
class Score:
    """One table entry: the mean over seeds (None: not measured), why it is missing, and
    its 95% interval (low, high), when one is known (:func:`score_of`).  ``bounds``
    (0-100 for an accuracy in %, 0-inf for bits per byte) clip the interval where it is
    printed; ``low``, ``high`` and :attr:`se` stay unclipped (a t interval over two seeds
    can pass 100%)."""

    mean: float | None = None
    std: float = 0.0
    n: int = 0
    missing: str = "–"
    low: float | None = None
    high: float | None = None
    bounds: tuple[float, float] | None = None

    @property
    def se(self) -> float | None:
        """Standard error implied by the interval (None: no interval)."""
        return None if self.low is None or self.high is None else \
            (self.high - self.low) / (2 * Z95)

    def with_interval(self, digits: int = 1) -> str:
        """``mean [low, high]``, or the mean alone when no interval is known."""
        if self.mean is None:
            return self.missing
        if self.low is None:
            return f"{self.mean:.{digits}f}"
        low, high = self.low, self.high
        if self.bounds is not None:
            low, high = max(low, self.bounds[0]), min(high, self.bounds[1])
        return f"{self.mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    def text(self, digits: int = 1) -> str:
        """The entry as printed: mean (± std over seeds) or why it is missing."""
        if self.mean is None:
            return self.missing
        spread = f" ± {self.std:.{digits}f}" if self.n > 1 else ""
        return f"{self.mean:.{digits}f}{spread}"


class Results:
    """The stored records of one budget, indexed by (task, variant)."""

    def __init__(self, records: Sequence[dict[str, Any]],
                 shortcuts: dict[str, list[dict[str, Any]]] | None = None):
        self.shortcuts = shortcuts or {}  # task -> its shortcut baselines (.shortcuts)
        self.by_cell: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for record in records:
            self.by_cell.setdefault((record["task"], record["variant"]), []).append(record)

    def done(self, task: str, variant: str) -> list[dict[str, Any]]:
        """The finished records of (task, variant), one per seed."""
        return [r for r in self.by_cell.get((task, variant), []) if r.get("status") == "done"]

    def score(self, task: str, variant: str) -> Score:
        """The task's test metric (accuracy in %, or bpc) over the finished seeds."""
        reason = VARIANTS[variant].unsupported(get_task(task).group) if variant in VARIANTS \
            else None
        if reason:
            return Score(missing="n/a")
        records = self.done(task, variant)
        if not records:
            failed = self.by_cell.get((task, variant))
            return Score(missing="error" if failed else "–")
        metric = get_task(task).metric
        values = [metric_of(r, metric) for r in records]
        accuracy = metric == "accuracy"
        return score_of(values, _items(records[0]) if accuracy else None, accuracy)

    def baselines(self, task: str) -> list[dict[str, Any]]:
        """The task's trivial baselines: the one its Transformer records state (majority
        class or unigram entropy, :mod:`weirdnet_lab.sweep.baselines`), then its stored
        ones (:mod:`.shortcuts`: the majority class where no record states it, and the
        shortcuts)."""
        stated = next((r["baseline"] for r in self.done(task, "softmax") if r.get("baseline")),
                      None)
        found = [stated] if stated else []
        kinds = {b["kind"] for b in found}
        return found + [b for b in self.shortcuts.get(task, []) if b["kind"] not in kinds]

    def baseline(self, task: str) -> dict[str, Any] | None:
        """The strongest of :meth:`baselines` (None: no record says)."""
        return best(self.baselines(task))

    def learned(self, task: str) -> bool | None:
        """Whether the Transformer clearly learned ``task`` under this budget (its mean
        score clears :func:`.baselines.bar`); None when that is unknown (no Transformer
        record, or records older than the baseline)."""
        baseline, score = self.baseline(task), self.score(task, "softmax")
        if baseline is None or score.mean is None:
            return None
        return learned(baseline, score.mean)

    def speed(self, task: str, variant: str, machine: str | None = None
              ) -> tuple[float | None, float | None]:
        """(steps/s, memory MiB), means over the finished seeds (only those run on
        ``machine``, a CPU/GPU name as :func:`machine_of` gives, when given)."""
        records = [r for r in self.done(task, variant)
                   if machine is None or machine_of(r) == machine]
        rates = [r["steps_per_s"] for r in records if r.get("steps_per_s")]
        memory = [r["memory_mib"] for r in records if r.get("memory_mib") is not None]
        return (statistics.fmean(rates) if rates else None,
                statistics.fmean(memory) if memory else None)

    def speed_task(self) -> str:
        """The first of :data:`SPEED_TASKS` where the Transformer's speed is measured (the
        first of them when none is)."""
        return next((t for t in SPEED_TASKS if self.speed(t, "softmax")[0]), SPEED_TASKS[0])

    def relative_speed(self, variant: str) -> tuple[float | None, float | None]:
        """Steps/s and memory on :meth:`speed_task` relative to the Transformer's, from
        cells run on the same machine as the Transformer's (None where there are none:
        a ratio across machines would measure the machines)."""
        task = self.speed_task()
        machines = {machine_of(r) for r in self.done(task, "softmax")}
        if len(machines) != 1:
            return None, None
        machine = machines.pop()
        rate, memory = self.speed(task, variant, machine)
        base_rate, base_memory = self.speed(task, "softmax", machine)
        return (rate / base_rate if rate and base_rate else None,
                memory / base_memory if memory is not None and base_memory else None)

    def common_tasks(self, tasks: Sequence[str], names: Sequence[str]) -> tuple[str, ...]:
        """The tasks to average ``names`` over so that each is averaged over the same ones:
        all of ``tasks`` when every name is measured on each; else those on which every
        name is measured and the Transformer is not known to have failed to learn (such a
        task ranks nothing).  Empty when no task is left."""
        if all(self.average(tasks, n).mean is not None for n in names):
            return tuple(tasks)
        return tuple(t for t in tasks if self.learned(t) is not False
                     and all(self.score(t, n).mean is not None for n in names))

    def average(self, tasks: Sequence[str], variant: str) -> Score:
        """Mean over ``tasks`` of the per-task means; None unless every task is measured.
        Its interval treats the tasks as independent (standard errors added in
        quadrature); none unless every task has one."""
        scores = [self.score(t, variant) for t in tasks]
        if any(s.mean is None for s in scores):
            return Score()
        mean = statistics.fmean(s.mean for s in scores)
        if any(s.se is None for s in scores):
            return Score(mean, n=1)
        half = Z95 * math.sqrt(sum(s.se ** 2 for s in scores)) / len(scores)
        return Score(mean, n=1, low=mean - half, high=mean + half, bounds=scores[0].bounds)


def machine_of(record: dict[str, Any]) -> str:
    """The processor a record's cell ran on (its GPU when it had one)."""
    machine = record.get("machine") or {}
    return str(machine.get("gpu") or machine.get("cpu_model"))


def metric_of(record: dict[str, Any], metric: str) -> float:
    """The test (else validation) ``metric`` of a record or of anything with its
    ``results``; accuracy in %."""
    results = record["results"]
    value = (results.get("test") or results["val"])[metric]
    return value * 100.0 if metric == "accuracy" else value


def _items(record: dict[str, Any]) -> int | None:
    """Items behind the record's test (else val) metric, where the record says."""
    evaluated = record.get("evaluated") or {}
    return evaluated.get("test") if record["results"].get("test") else evaluated.get("val")


def score_of(values: list[float], items: int | None, accuracy: bool) -> Score:
    """Mean over seeds with its 95% interval: Student's t over two or more seeds, and for
    an accuracy (in %) with a known number of test items never narrower than that test
    set's binomial (Wilson) interval at the mean (every seed reads the same test items,
    so their sampling error does not shrink with seeds; seeds that agree exactly would
    otherwise give a zero-width interval); with one seed the Wilson interval alone; else
    none.  The interval is printed within 0-100 (accuracy) or above 0 (bits per byte)."""
    score = Score(statistics.fmean(values), statistics.pstdev(values) if len(values) > 1
                  else 0.0, len(values), bounds=(0.0, 100.0) if accuracy else (0.0, math.inf))
    if accuracy and (items or len(values) > 1):
        _, low, high = accuracy_interval([v / 100.0 for v in values], items)
        score.low, score.high = 100.0 * low, 100.0 * high
    elif len(values) > 1:
        _, score.low, score.high = mean_interval(values)
    return score


def _paper(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def lra_table(results: Results, variants: Sequence[str], tasks: Sequence[str]) -> list[str]:
    """Table III layout: accuracy per LRA task, ours beside the paper's, then the
    5-task average and speed/memory relative to the Transformer."""
    header = ["Model"]
    for task in tasks:
        header += [f"{get_task(task).label} (ours)", "(paper)"]
    on = get_task(results.speed_task()).label
    header += ["Avg of 5 (ours)", "Avg of 5 (paper)", f"speed × (ours, {on})",
               f"memory × (ours, {on})"]
    rows = []
    for name in variants:
        paper = numbers.LRA.get(name, ("", "", {}))[2]
        row = [VARIANTS[name].label]
        for task in tasks:
            row += [results.score(task, name).text(), _paper(paper.get(task))]
        paper_avg = statistics.fmean(paper[t] for t in tasks) \
            if all(t in paper for t in tasks) else None
        speed, memory = results.relative_speed(name)
        row += [results.average(tasks, name).text(), _paper(paper_avg), _ratio(speed),
                _ratio(memory)]
        rows.append(row)
    return markdown_table(header, rows)


def uea_table(results: Results, variants: Sequence[str], tasks: Sequence[str]) -> list[str]:
    """DBA Table 3 layout (the UEA problems of the suite)."""
    header = ["Model"]
    for task in tasks:
        header += [f"{get_task(task).label} (ours)", "(paper)"]
    header += ["Avg (ours)"]
    rows = []
    for name in variants:
        paper = numbers.UEA.get(name, {})
        row = [VARIANTS[name].label]
        for task in tasks:
            row += [results.score(task, name).text(), _paper(paper.get(task), 1)]
        rows.append(row + [results.average(tasks, name).text()])
    return markdown_table(header, rows)


def non_embedding_parameters(record: dict[str, Any]) -> int:
    """The non-embedding parameters of a finished LM cell's model (the count the peers
    are matched by; :mod:`weirdnet_lab.matching`), from its stored ``model`` table with
    any preset's backbone under it."""
    from weirdnet_lab.matching import count
    from weirdnet_lab.suite.cells import full_backbone

    model = record["config"]["model"]
    stored = {key: value for key, value in model.items() if key != "preset"}
    return count({**stored, "backbone": full_backbone(model)})


def _parameters_text(records: list[dict[str, Any]], reference: int | None) -> str:
    """All parameters, then the non-embedding ones and their difference from
    ``reference`` (the GPT-2-style Transformer's)."""
    if not records:
        return "–"
    mine = non_embedding_parameters(records[0])
    versus = f" ({mine / reference - 1:+.1%})" if reference else ""
    return f"{records[0]['parameters'] / 1e6:.2f}M; {mine / 1e6:.3f}M{versus}"


def lm_table(results: Results, variants: Sequence[str]) -> list[str]:
    """Byte-level LM: test bpc, parameters and speed (paper: enwik8, GPT-2-small size).
    Parameters: all, then the non-embedding ones against the GPT-2-style Transformer's
    (the ``softmax`` cell's) where it has run."""
    reference_records = results.done("lm", "softmax")
    reference = non_embedding_parameters(reference_records[0]) if reference_records \
        else None
    rows = []
    for name in variants:
        score = results.score("lm", name)
        rate, memory = results.speed("lm", name)
        rows.append([VARIANTS[name].label, score.text(3), _paper(numbers.LM.get(name), 2),
                     _parameters_text(results.done("lm", name), reference),
                     "–" if rate is None else f"{rate:.1f}",
                     "–" if memory is None else f"{memory:.0f}"])
    return markdown_table(["Model", "test bpc (ours)", "enwik8 bpc (paper, 110M+ params)",
                           "parameters; non-embedding (vs Transformer)", "steps/s",
                           "memory MiB"], rows)


def ablation_table(results: Results, paper_rows: dict[str, tuple[str, dict[str, float]]],
                   tasks: Sequence[str], first: str) -> list[str]:
    """Rows ``paper_rows`` (variant -> (label, paper numbers)), ours beside the paper's."""
    header = [first]
    for task in tasks:
        header += [f"{get_task(task).label} (ours)", "(paper)"]
    header += ["Avg (ours)", "Avg (paper)"]
    rows = []
    for name, (label, paper) in paper_rows.items():
        row = [label]
        for task in tasks:
            row += [results.score(task, name).text(), _paper(paper.get(task))]
        paper_avg = statistics.fmean(paper[t] for t in tasks) \
            if all(t in paper for t in tasks) else None
        rows.append(row + [results.average(tasks, name).text(), _paper(paper_avg)])
    return markdown_table(header, rows)


def table_xi(results: Results) -> list[str]:
    """Decoder structures A and B: our LM bpc beside the paper's WikiText-103 PPL."""
    rows = [[label, results.score("lm", name).text(3), _paper(ppl)]
            for name, (label, ppl) in numbers.TABLE_XI.items()]
    return markdown_table(["Structure (decoder)", "wiki-xml test bpc (ours)",
                   "WikiText-103 PPL, small (paper)"], rows)


def dba_form(record: dict[str, Any]) -> str | None:
    """The DBA form a record's model used ("authors" or "paper-literal"), None when it
    has no DBA layer.  A record whose config names no form was made while
    "paper-literal" was the default (before issue 29), so that is its form."""
    backbone = record.get("config", {}).get("model", {}).get("backbone", {})
    if "dba" not in str(backbone.get("pattern", "")).split(","):
        return None
    return backbone.get("mixer_options", {}).get("dba", {}).get("form", "paper-literal")


def readout(record: dict[str, Any]) -> str:
    """The classifier readout a record's model used ("auto" resolved as the model
    resolves it: the last position when causal, else the mean)."""
    model = record.get("config", {}).get("model", {})
    pooling = model.get("pooling", "auto")
    if pooling == "auto":
        return "last" if model.get("backbone", {}).get("causal") else "mean"
    return pooling


def form_table(results: Results, variants: Sequence[str], tasks: Sequence[str]) -> list[str]:
    """Rows ``variants`` (each with the DBA form its records used), columns the ``tasks``
    where any of them ran: mean over seeds [95% interval] and the seeds."""
    ran = [t for t in tasks if any(results.done(t, v) for v in variants)]
    if not ran:
        return ["No cells of this table have run under this budget."]
    rows = []
    for name in variants:
        forms = sorted({dba_form(r) or "–" for t in ran for r in results.done(t, name)})
        row = [VARIANTS[name].label, ", ".join(forms) or "–"]
        for task in ran:
            score = results.score(task, name)
            row.append(score.with_interval(3 if get_task(task).metric == "bpc" else 1)
                       + (f" ({score.n} seeds)" if score.n > 1 else ""))
        rows.append(row)
    return markdown_table(["Model", "form", *(get_task(t).label for t in ran)], rows)
