"""docs/papers.md's headline results in full (issue 63): every number of ours in the
section's tables is the stored records', reproduced from them.

Each row (by how its first cell begins) has its *claims* (:data:`CLAIMS`): the phrases
of the row that carry measured numbers, written here from the records the section links
with the lab's own code (means and 95% intervals over seeds: :func:`score_of`; a
difference of two models and its interval: :func:`difference`; MQAR's learning rate
chosen on validation: :func:`chosen`; the truncation test: :func:`truncation`) and
printed as the row prints them.  A row passes when every claim is in it and, the claims
taken out, no number is left but its conditions: those of its first cell (the question
or measurement: lengths, seeds, budgets) and the settings named inline (:data:`SETTING`).
A number that drifts by one digit is then a claim not found, or a number left over.

The papers' own numbers are recognised by their row: its first cell says
"(the papers')" (:data:`PAPERS`) and its verdict "paper's numbers"; such a row is skipped,
saying so.  Prose numbers written as words ("one epoch") are checked only where a claim
writes them.
"""

import functools
import json
import re
from types import SimpleNamespace

import pytest

from helpers.docs import RESULTS, ROOT, linked_records, numbers, section, table_rows
from weirdnet_lab.context.report import truncation, window_bpc
from weirdnet_lab.recall import zoology
from weirdnet_lab.recall.report import chosen
from weirdnet_lab.recall.zoology_report import cell_interval, sampling_error, sampling_note
from weirdnet_lab.suite.claims import difference
from weirdnet_lab.suite.report import Results, Score, score_of
from weirdnet_lab.suite.shortcuts import read_shortcuts
from weirdnet_lab.suite.tasks import get_task
from weirdnet_lab.sweep.cell import training_rate, training_seconds
from weirdnet_lab.sweep.store import CellStore

PAGE = ROOT / "docs" / "papers.md"
HEADING = "## The README's headline results, in full (ours)"
PAPERS = "(the papers')"
"""How a row of the papers' own numbers says so in its first cell."""
SETTING = re.compile(
    r"L = \d+(?: and \d+)?"    # a sequence length
    r"|\d+(?:\.\d+)?e-\d+"     # a learning rate
    r"|\d+K\b"                 # a context or window, in bytes
    r"|\d+ (?:B|bytes)\b"      # the same
    r"|epoch \d+"              # an epoch of the budget
    r"|\d+ seeds?\b"           # how many seeds ran
    r"|(?<![\d.])99%"          # Zoology's early-stopping accuracy
    r"|(?:GPT|Mamba|RWKV)-\d")  # a model's name
"""Conditions a row names inline, outside its first cell (not results)."""
K = 1024


def _section() -> str:
    return section(PAGE, HEADING)


def _rows() -> list[list[str]]:
    return table_rows(_section())


# ---- the records ------------------------------------------------------------------------

@functools.cache
def _records(folder: str) -> dict[str, dict]:
    """The finished records of ``RESULTS/folder`` by name (``cells/<name>.json``); the
    section must link one of the folder's reports."""
    assert any(link.split("/")[0] == folder for link in linked_records(_section())), \
        f"the section draws on results/{folder}/ but links none of its records"
    paths = sorted((RESULTS / folder / "cells").glob("*.json"))
    records = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in paths}
    return {name: r for name, r in records.items() if r.get("status") == "done"}


def _named(folder: str, pattern: str) -> list[dict]:
    """The records of ``folder`` whose name matches ``pattern`` (a regex) whole."""
    found = [r for name, r in _records(folder).items() if re.fullmatch(pattern, name)]
    assert found, f"no record of results/{folder}/ is named like {pattern!r}"
    return found


def _report(path: str, pattern: str) -> tuple[str, ...]:
    """The groups of ``pattern`` in the report ``RESULTS/path`` (a number it states that
    its records alone do not: the cells planned, the time left)."""
    found = re.search(pattern, (RESULTS / path).read_text(encoding="utf-8"), re.S)
    assert found, f"results/{path} no longer says {pattern!r}"
    return found.groups()


# bench lm: test bits per byte after 10 CPU-minutes ("m10") or 100 steps ("n100")

def _lm_records(name: str, context: int, budget: str) -> list[dict]:
    return _named("lm", rf"{name}--L{context}--{budget}--s\d+")


def _lm(name: str, context: int, budget: str = "m10") -> Score:
    values = [r["results"]["test"]["bpc"] for r in _lm_records(name, context, budget)]
    return score_of(values, None, accuracy=False)


def _bpb(name: str, context: int, budget: str = "m10") -> str:
    """Mean test bits per byte [95% interval over seeds], as the lm report prints it."""
    return _lm(name, context, budget).with_interval(3)


def _steps(name: str, context: int) -> int:
    return _lm_records(name, context, "m10")[0]["steps"]


def _entry(label: str, name: str, context: int) -> str:
    return f"{label}: {_bpb(name, context)} ({_steps(name, context)} steps)"


def _lead(ahead: str, behind: str, context: int, budget: str = "m10") -> Score:
    """How much lower ``ahead``'s test bits per byte are than ``behind``'s."""
    return difference(_lm(behind, context, budget), _lm(ahead, context, budget))


def _by(ahead: str, behind: str, context: int, budget: str = "m10") -> str:
    """:func:`_lead` as printed: with its 95% interval where both have one."""
    return _lead(ahead, behind, context, budget).with_interval(2)


def _signed(score: Score) -> str:
    text = f"{score.mean:+.2f} [{score.low:+.2f}, {score.high:+.2f}]"
    return text.replace("-", "\N{MINUS SIGN}")


# MQAR at Zoology's recipe (D = 64) and at weirdnet's quick recipe

def _chosen(records: list[dict], lr: float | None = None) -> list[dict]:
    """The records at ``lr``, else at the rate validation chose (:func:`chosen`)."""
    if lr is not None:
        return [r for r in records if r["lr"] == lr]
    if len({r.get("lr") for r in records}) == 1:
        return records
    group = [SimpleNamespace(key=str(i), lr=r["lr"]) for i, r in enumerate(records)]
    return chosen(group, {str(i): r for i, r in enumerate(records)})[0]


def _mqar(length: int, name: str, conv: int = 0, lr: float | None = None,
          full: bool = False) -> list[dict]:
    """Zoology-recipe records of one model: its budget's 8 epochs, or Zoology's ``full``
    64; at ``lr``, else at the rate validation chose."""
    shape = f"zoology--mqar--L{length}--d64--{name}" + (f"--conv{conv}" if conv else "")
    return _chosen(_named("recall-zoology", shape + r"--lr[\d.]+" + ("" if full else "--e8")
                          + r"--s\d+"), lr)


def _percent(records: list[dict], digits: int = 1) -> str:
    return f"{100 * cell_interval(records)[0]:.{digits}f}"


def _z(length: int, name: str, conv: int = 0, lr: float | None = None,
       digits: int = 1) -> str:
    """Test accuracy (%) of a Zoology-recipe model, as printed."""
    return _percent(_mqar(length, name, conv, lr), digits)


def _epochs(records: list[dict], length: int) -> int:
    return round(records[0]["steps"] / zoology.steps_per_epoch(length))


def _after(length: int, name: str, conv: int = 0) -> str:
    epochs = _epochs(_mqar(length, name, conv), length)
    return "after one epoch" if epochs == 1 else f"after {epochs} epochs"


def _rate(length: int, name: str, conv: int = 0) -> str:
    """The chosen learning rate as the row writes it ("2.2e-3")."""
    mantissa, exponent = f"{_mqar(length, name, conv)[0]['lr']:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _quick(name: str) -> str:
    return _percent(_chosen(_named("recall", rf"mqar--L128--d16--{name}(--lr[\d.]+)?--s\d+")))


# the laptop suite (and its curriculum budget) and bench context

@functools.cache
def _suite(folder: str) -> Results:
    records = list(_records(folder).values())
    store = CellStore(RESULTS / folder, RESULTS / folder)
    return Results(records, read_shortcuts(store, records))


def _suite_score(folder: str, task: str, name: str) -> str:
    """A model's mean test score over seeds [95% interval], as printed: "33.8% [31.0,
    36.8]" (accuracy), "2.702 [2.649, 2.754]" (bits per byte)."""
    score = _suite(folder).score(task, name)
    if get_task(task).metric != "accuracy":
        return score.with_interval(3)
    mean, interval = score.with_interval(1).split(" ", 1)
    return f"{mean}% {interval}"


def _context(name: str) -> list[dict]:
    return _named("context", rf"{name}--L16384--n\d+--s\d+")


def _truncated(name: str, context: int | None = None) -> tuple[float, str]:
    """(test bits per byte with ``context`` bytes visible, else the longest; its
    difference from the longest and the interval, as the context report prints them)."""
    contexts, rows = truncation(_context(name))
    bpc, diff, low, high = rows[context or contexts[-1]]
    return bpc, f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]"


def _uses(name: str, context: int = 128) -> str:
    """"2.509 and 2.508": test bits per byte with ``context`` bytes visible and with the
    longest context."""
    return f"{_truncated(name, context)[0]:.3f} and {_truncated(name)[0]:.3f}"


def _windows(name: str) -> list[float]:
    """Test bits per byte of the whole split at 16K, 32K and 64K windows."""
    return [window_bpc(_context(name), c * K) for c in (16, 32, 64)]


def _read(name: str) -> str:
    return " / ".join(f"{v:.3f}" for v in _windows(name))


# ---- the claims of each row -----------------------------------------------------------

def _mqar_attention() -> list[str]:
    full, long = _mqar(64, "transformerpp", full=True), _mqar(256, "transformerpp")
    before = [e["metrics"]["accuracy"] for e in long[0]["evaluations"][:-1]]
    at_one_rate = {(r["variant"], r["short_conv"]) for r in _records("recall-zoology").values()
                   if r["length"] == 256 and r["lr"] == 0.01}
    return [f"at most ±{sampling_error():.1f} points, "
            + re.search(r"±[\d.]+ at 99%", sampling_note())[0],
            f"Transformer++: {_z(64, 'transformerpp')}% at L = 64, "
            f"{_z(128, 'transformerpp')}% at L = 128",
            f"({_percent(full)}% at L = 64 after {_epochs(full, 64)} of Zoology's full "
            f"{zoology.EPOCHS} epochs)",
            f"{_percent(long)}% at L = 256 ({_epochs(long, 256)} epochs, "
            f"{training_seconds(long[0]) / 60:.0f} min on one thread, after {len(before)} "
            f"epochs at {100 * min(before):.0f}–{100 * max(before):.0f}%)",
            f"all {len(at_one_rate)} models have finished at lr 1e-2"]


def _mqar_mechanisms() -> list[str]:
    done = sum("--e8--" in name for name in _records("recall-zoology"))
    planned = _report("recall-zoology/recall-zoology.md", r"\d+ of (\d+) cells done")[0]
    hours = _report("recall-zoology/recall-zoology.md", r"about (\d+) h here.*?and (\d+) h")
    runs: dict[tuple, list[dict]] = {}
    for name, r in _records("recall-zoology").items():
        if r["length"] == 256 and "--e8--" in name:
            runs.setdefault((r["variant"], r["short_conv"]), []).append(r)
    rates = {r["lr"] for model in runs.values() for r in model}
    left = [100 * r["results"]["test"]["accuracy"] for model in runs.values()
            if len(model) < len(rates)
            and all(r["results"]["val"]["accuracy"] < zoology.EARLY_STOP for r in model)
            for r in model]
    return [
        f"**Weird-Net B** {_z(64, 'weird-b')} / {_z(128, 'weird-b')}% "
        f"({_z(64, 'weird-b', 4)} / {_z(128, 'weird-b', 4)}% with a short convolution; "
        f"**{_z(256, 'weird-b')}% at L = 256 {_after(256, 'weird-b')}**, where the "
        f"Transformer++ needed {_epochs(_mqar(256, 'transformerpp'), 256)}; with a short "
        f"convolution {_z(256, 'weird-b', 4)}% at L = 256 too, in "
        f"{_epochs(_mqar(256, 'weird-b', 4), 256)} epochs at lr {_rate(256, 'weird-b', 4)}, "
        f"where 1e-2 stayed at {_z(256, 'weird-b', 4, lr=0.01)}%)",
        f"with a short convolution {_z(64, 'softmax', 4)} / {_z(128, 'softmax', 4)}% "
        f"({_z(256, 'softmax', 4)}% at L = 256 {_after(256, 'softmax', 4)})",
        f"the Transformer++ with one ({_z(256, 'transformerpp', 4)}% at L = 256 "
        f"{_after(256, 'transformerpp', 4)})",
        f"linear attention with a convolution {_z(64, 'linear', 4)} / {_z(128, 'linear', 4)}% "
        f"({_z(256, 'linear', 4)}% at L = 256",
        f"{_z(256, 'linear', 4, lr=0.0022)}% at lr 2.2e-3",
        f"local attention with one {_z(64, 'local', 4)} / {_z(128, 'local', 4)}% "
        f"({_z(256, 'local', 4)}% at L = 256; {_z(256, 'local', 4, lr=0.0022)}% at 2.2e-3)",
        f"Weird-Net A {_z(64, 'weird-a', digits=0)} / {_z(128, 'weird-a')}% "
        f"({_z(64, 'weird-a', 4, digits=0)} / {_z(128, 'weird-a', 4)}% with a convolution; "
        f"{_z(256, 'weird-a')}% at L = 256, {_z(256, 'weird-a', 4)}% with a convolution)",
        f"PS-attention {_z(64, 'ps', digits=0)} / {_z(128, 'ps')}% "
        f"({_z(64, 'ps', 4, digits=0)} / {_z(128, 'ps', 4)}%; "
        f"{_z(256, 'ps')}% at L = 256, {_z(256, 'ps', 4)}% with a convolution)",
        f"linear attention {_z(64, 'linear', digits=0)} / {_z(128, 'linear')}%",
        f"local attention {_z(64, 'local')} / {_z(128, 'local')}% (lr {_rate(64, 'local')}; "
        f"{_z(64, 'local', lr=0.01)} / {_z(128, 'local', lr=0.01)}% at 1e-2)",
        f"Relation {_z(64, 'relation')} / {_z(128, 'relation')}% (L = 128 at lr "
        f"{_rate(128, 'relation')}, {_z(128, 'relation', lr=0.01)}% at 1e-2; "
        f"{_z(64, 'relation', 4)} / {_z(128, 'relation', 4)}% with a convolution, L = 64 at "
        f"lr {_rate(64, 'relation', 4)}; {_z(256, 'relation')}% at L = 256, "
        f"{_z(256, 'relation', 4)}% with a convolution)",
        f"without a convolution {_z(64, 'softmax')} / {_z(128, 'softmax')}%",
        f"would with Zoology's {zoology.EPOCHS} epochs",
        f"{done} of {planned} cells of the grid run",
        f"the {len(left)} cells left, models at {min(left):.1f}–{max(left):.1f}% at 1e-2, "
        f"would take {hours[0]}–{hours[1]} h",
        f"the GPT-2-style Transformer {_z(256, 'softmax')}%, linear attention "
        f"{_z(256, 'linear')}%, local attention {_z(256, 'local')}%"]


def _listops() -> list[str]:
    first = next(b["value"] for b in _suite("suite-laptop").baselines("listops")
                 if b["kind"] == "first-operator")
    curriculum = _records("suite-laptop-curriculum")["listops--softmax--s0"]
    stage = curriculum["stages"][0]
    scratch = _records("suite-laptop")["listops--softmax--s0"]
    return [f"A: {_suite_score('suite-laptop', 'listops', 'weird-a')}; Transformer: "
            f"{_suite_score('suite-laptop', 'listops', 'softmax')}; the first operator alone: "
            f"{first:.1f}%",
            f"{stage['steps']:,} steps on expressions under "
            f"{stage['config']['data']['options']['max_length']} tokens first, "
            f"+{stage['wall_s'] / 60:.1f} min",
            f"the Transformer: {_suite_score('suite-laptop-curriculum', 'listops', 'softmax')}",
            f"by step {curriculum['best_step']} of {curriculum['steps']} instead of "
            f"{scratch['best_step']}"]


def _long_context() -> list[str]:
    windows = _context("weird-b-pp")[0]["truncation_bpc"]["windows"]
    return [f"Weird-Net A {_uses('weird-a-long')} ({_truncated('weird-a-long', 128)[1]})",
            f"Transformer++ {_uses('transformerpp')} ({_truncated('transformerpp', 128)[1]})",
            f"alternating) {_uses('weird-b-pp')} ({_truncated('weird-b-pp', 128)[1]}; "
            f"4K against 15K: {_truncated('weird-b-pp', 4 * K)[1]})",
            f"a little ({_truncated('weird-b-pp', 128)[0] - _truncated('weird-b-pp')[0]:.3f} "
            f"bits/byte, paired over {windows} windows",
            f"Mamba-2 ({_uses('mamba2')}: {_truncated('mamba2', 128)[1]})"]


def _extrapolation() -> list[str]:
    a, b, t, m = (_windows(n) for n in ("weird-a-long", "weird-b-pp", "transformerpp",
                                          "mamba2"))
    return [f"Weird-Net A {_read('weird-a-long')}; Weird-Net B++ {_read('weird-b-pp')}; "
            f"Transformer++ (RoPE) {_read('transformerpp')}; Mamba-2 {_read('mamba2')}",
            f"loses {t[1] - t[0]:.2f} and {t[2] - t[0]:.2f} bits/byte",
            f"after these {_context('mamba2')[0]['steps']} steps Mamba-2 leads B++ by "
            f"{b[0] - m[0]:.2f} and A by {a[0] - m[0]:.2f}, and the Transformer++ is "
            f"{t[0] - a[0]:.1f} behind A"]


def _minutes_1k() -> list[str]:
    lead = functools.partial(_lead, context=K)
    return [
        "; ".join([_entry("A", "weird-a", K),
                   _entry("A with the Transformer++ options (SwiGLU, RMSNorm)", "weird-a-pp", K),
                   _entry("B", "weird-b", K), _entry("B with them", "weird-b-pp", K)]),
        "; ".join([_entry("Transformer++", "transformerpp", K), _entry("Llama", "llama", K),
                   _entry("Mamba-2 on `transformers`' CPU path", "mamba2", K),
                   _entry("Mamba on it", "mamba", K),
                   _entry("GPT-2-style Transformer", "softmax", K),
                   _entry("RWKV-4 on `transformers`' CPU path", "rwkv", K)]),
        f"A ahead of the Transformer++ by {lead('weird-a', 'transformerpp').mean:.2f}",
        f"ahead of Mamba-2 by {lead('weird-a', 'mamba2').mean:.2f}",
        "of the other four by {:.2f}, {:.2f}, {:.2f} and {:.2f}".format(
            *(lead("weird-a", n).mean for n in ("llama", "mamba", "softmax", "rwkv"))),
        f"A++ and B++ ahead of the Transformer++ by "
        f"{lead('weird-a-pp', 'transformerpp').mean:.2f} and "
        f"{lead('weird-b-pp', 'transformerpp').mean:.2f}",
        f"B level with it ({-lead('weird-b', 'transformerpp').mean:+.2f}, undecided) and "
        f"behind A by {lead('weird-a', 'weird-b').mean:.2f}"]


def _minutes_4k() -> list[str]:
    rwkv = _steps("rwkv", 4 * K)
    calibration = _records("lm")[f"calibrate--rwkv--L{4 * K}"]
    by = functools.partial(_by, context=4 * K)
    return [
        "; ".join([_entry("A", "weird-a", 4 * K),
                   _entry("A with the Transformer++ options", "weird-a-pp", 4 * K),
                   _entry("B", "weird-b", 4 * K), _entry("B with them", "weird-b-pp", 4 * K)]),
        "; ".join([_entry("Transformer++", "transformerpp", 4 * K),
                   _entry("Llama", "llama", 4 * K),
                   _entry("GPT-2-style Transformer", "softmax", 4 * K),
                   _entry("Mamba-2 on `transformers`' CPU path", "mamba2", 4 * K),
                   f"RWKV-4 on it: {_bpb('rwkv', 4 * K)} (its minimum of {rwkv} steps, "
                   f"{rwkv / training_rate(calibration) / 60:.0f} min)",
                   _entry("Mamba on it", "mamba", 4 * K)]),
        f"A ahead of the Transformer++ by {by('weird-a', 'transformerpp')} (decided)**, "
        f"against {_lead('weird-a', 'transformerpp', K).mean:.2f} at 1K",
        f"A {100 * _steps('weird-a', 4 * K) / _steps('weird-a', K):.0f}%",
        f"B ahead of it by {by('weird-b', 'transformerpp')} and behind A by "
        f"{by('weird-a', 'weird-b')}",
        f"A ahead of Mamba-2 by {by('weird-a', 'mamba2')}",
        f"B level with it ({_signed(difference(_lm('weird-b', 4 * K), _lm('mamba2', 4 * K)))})",
        f"Mamba-2 ahead of the Transformer++ by {by('mamba2', 'transformerpp')}",
        f"A ahead of Llama and the GPT-2-style Transformer by {by('weird-a', 'llama')} and "
        f"{by('weird-a', 'softmax')}",
        f"A++ and B++ {by('weird-a-pp', 'transformerpp')} and "
        f"{by('weird-b-pp', 'transformerpp')} ahead",
        f"A ahead of Mamba by {by('weird-a', 'mamba')}"]


def _steps_against_peers() -> list[str]:
    one, four = functools.partial(_bpb, context=K, budget="n100"), \
        functools.partial(_bpb, context=4 * K, budget="n100")
    behind = [_lead(n, "weird-a", K, "n100").mean for n in ("qwen3-next", "xlstm",
                                                            "recurrent-gemma", "mamba")]
    return [f"A at 1K: {one('weird-a')}; at 4K: {four('weird-a')}",
            f"Mamba-2: {one('mamba2')} at 1K, {four('mamba2')} at 4K",
            f"Llama: {one('llama')} at 1K",
            f"RWKV-4: {one('rwkv')} at 1K, {four('rwkv')} at 4K",
            f"Mamba: {one('mamba')} at 1K, {four('mamba')} at 4K",
            f"Qwen3-Next (Gated DeltaNet) {one('qwen3-next')}, xLSTM {one('xlstm')}, "
            f"RecurrentGemma {one('recurrent-gemma')}",
            f"Qwen3-Next {four('qwen3-next')}, xLSTM {four('xlstm')}, "
            f"RecurrentGemma {four('recurrent-gemma')}",
            "Qwen3-Next (by {:.2f}), xLSTM ({:.2f}) and RecurrentGemma ({:.2f})".format(
                *behind[:3]),
            f"Mamba {behind[3]:.2f} ahead of A at 1K, "
            f"{_lead('mamba', 'weird-a', 4 * K, 'n100').mean:.2f} at 4K"]


def _equal_steps(context: int) -> list[str]:
    return [f"A: {_bpb('weird-a', context, 'n100')}",
            f"Transformer++: {_bpb('transformerpp', context, 'n100')}"]


def _laptop(task: str, reference: str) -> list[str]:
    return [f"A: {_suite_score('suite-laptop', task, 'weird-a')}",
            f"{reference}: {_suite_score('suite-laptop', task, 'softmax')}"]


CLAIMS = {
    "Does attention solve MQAR at Zoology's recipe": _mqar_attention,
    "Which mechanisms solve MQAR": _mqar_mechanisms,
    "Does MQAR at weirdnet's quick recipe": lambda: [
        f"B: {_quick('weird-b')}%; Transformer: {_quick('softmax')}%"],
    "ListOps at LRA's lengths": _listops,
    "Does each model use long context?": _long_context,
    "Does it extrapolate?": _extrapolation,
    "byte LM, equal CPU-minutes (10), 1K context": _minutes_1k,
    "byte LM, equal CPU-minutes (10), 4K context": _minutes_4k,
    "byte LM, equal steps, 4K context": lambda: _equal_steps(4 * K),
    "byte LM, equal steps, 1K context": lambda: _equal_steps(K),
    "byte LM, equal steps vs the `transformers` peers": _steps_against_peers,
    "byte LM, `laptop` budget": lambda: _laptop("lm", "Transformer (GPT-2 style)"),
    "Fashion-MNIST as 784 pixels": lambda: _laptop("image", "Transformer"),
}
"""Each row of ours (by how its first cell begins) and the phrases of it that the records
write."""


# ---- the checks ---------------------------------------------------------------------------

def _unchecked(row: list[str], claims: list[str]) -> list[str]:
    """The numbers of ``row`` outside its first cell that neither a claim nor a setting
    (:data:`SETTING`) accounts for; fails on a claim not in the row."""
    text = " | ".join(row)
    for claim in claims:
        assert claim in text, f"row {row[0][:50]!r}: the records give {claim!r}"
        text = text.replace(claim, "…", 1)
    return numbers(SETTING.sub("…", text.split(" | ", 1)[1]))


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row[0][:40])
def test_every_number_of_ours_is_from_the_records(row):
    if PAPERS in row[0]:
        assert row[-1] == "paper's numbers"
        pytest.skip(f"the papers' own numbers ({row[0]}), not ours")
    keys = [key for key in CLAIMS if row[0].startswith(key)]
    assert len(keys) == 1, f"row {row[0][:50]!r}: every row of ours needs its CLAIMS"
    left = _unchecked(row, CLAIMS[keys[0]]())
    assert not left, f"row {row[0][:50]!r}: {left} are in no claim (a number of ours unchecked)"


def test_every_row_with_claims_is_in_the_section_and_one_is_the_papers():
    firsts = [row[0] for row in _rows()]
    assert all(any(f.startswith(key) for f in firsts) for key in CLAIMS)
    assert sum(PAPERS in f for f in firsts) == 1, "the section names one row of the papers'"
