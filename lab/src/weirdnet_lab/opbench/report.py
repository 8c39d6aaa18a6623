"""Markdown and JSON output of a benchmark suite's run, written atomically.

The document ``doc`` rendered here is the JSON object of the run: ``benchmark`` (the
suite's name), ``machine``, ``config``, ``results`` (rows), ``ratios``, ``targets`` and
``notes`` (see :mod:`.runner`).  The suite supplies the title, the header lines on shapes
and methods, and the ratio tables.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from weirdnet.run import write_atomic
from weirdnet_lab.opbench.analysis import ratio_specs
from weirdnet_lab.opbench.spec import OpBench, get_opbench


def fmt_ms(x: float | None) -> str:
    """Milliseconds with about three significant digits; "–" for missing."""
    if x is None:
        return "–"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_mib(x: float | None) -> str:
    """MiB with one decimal; "–" for missing."""
    return "–" if x is None else f"{x:.1f}"


def fmt_ratio(x: float | None) -> str:
    """A ratio as ``12.3x``; "–" for missing."""
    if x is None:
        return "–"
    return f"{x:.1f}x" if x >= 10 else f"{x:.2f}x"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table: header, separator, one line per row of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _header_lines(doc: dict, suite: OpBench) -> list[str]:
    m, c = doc["machine"], doc["config"]
    return [
        f"# {suite.title} on {m['device']}",
        "",
        f"- date: {m['date']}; command: `{m['command']}`",
        f"- machine: {m['cpu_model']}, {m['usable_cores']} usable cores; "
        f"python {m['python']}, torch {m['torch']}, {m['torch_threads']} torch threads; "
        f"scan backend: {m['scan_backend']}" + (f"; GPU: {m['gpu']}" if "gpu" in m else ""),
        *suite.describe(doc),
        f"- allocator: {m['allocator']} (in the timing process and in each memory child)",
        f"- CPU used by other processes during the run: {_other_cpu(m)}",
        f"- fwd: inference forward under torch.no_grad(); fwd+bwd: {suite.grad_inputs} "
        f"require grad, backward with a fixed random grad_out; median of the runs shown, "
        f"after {c['warmup']} warm-up run(s)",
        f"- peak extra memory of fwd+bwd: {c['memory_how']}",
    ]


def _other_cpu(m: dict) -> str:
    use = m.get("cpu_use_during_run")
    if not use:
        return "unknown"
    return (f"{use['other_processes_cores']:.2f} cores on average, steal "
            f"{use['steal_cores']:.2f} cores, over {use['wall_s']:.0f} s")


def _results_lines(doc: dict) -> list[str]:
    rows = [
        [str(r["L"]), r["label"], fmt_ms(r["fwd_ms"]), fmt_ms(r["fwdbwd_ms"]),
         fmt_mib(r["mem_mib"]), str(r["repeats"])]
        for r in doc["results"]
    ]
    header = ["L", "method", "fwd ms", "fwd+bwd ms", "peak extra MiB (fwd+bwd)", "runs"]
    return ["", "## Results", "", *markdown_table(header, rows)]


def _ratio_lines(doc: dict, suite: OpBench) -> list[str]:
    specs = ratio_specs(doc["results"], suite)
    used = [r for r in specs if any(e.get(r.key) is not None for e in doc["ratios"])]
    if not used:
        return []
    lines = ["", "## Ratios (same run)", "", suite.ratio_note]
    for group in dict.fromkeys(r.group for r in used):
        columns = [r for r in used if r.group == group]
        rows = [[str(e["L"]), *(fmt_ratio(e.get(r.key)) for r in columns)]
                for e in doc["ratios"]]
        if group:
            lines += ["", f"### {group}"]
        lines += ["", *markdown_table(["L", *(r.column or r.label for r in columns)], rows)]
    return lines


def _target_lines(doc: dict) -> list[str]:
    if not doc["targets"]:
        return []
    lines = ["", "## Targets", ""]
    for t in doc["targets"]:
        verdict = "PASS" if t["passed"] else "FAIL"
        against = f" against {t['baseline']}" if t.get("baseline") else ""
        lines.append(f"- **{verdict}** {t['text']}: measured {fmt_ratio(t['value'])}"
                     f"{against} (needs {t['op']} {t['threshold']:g}x)")
    return lines


def render_markdown(doc: dict, suite: OpBench | None = None) -> str:
    """The whole report as Markdown (``suite``: default, the one named by the document)."""
    suite = suite if suite is not None else get_opbench(doc.get("benchmark", "scan"))
    lines = (_header_lines(doc, suite) + _results_lines(doc) + _ratio_lines(doc, suite)
             + _target_lines(doc))
    if doc.get("notes"):
        lines += ["", "## Notes", "", *(f"- {n}" for n in doc["notes"])]
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, name: str, doc: dict, markdown: str) -> tuple[Path, Path]:
    """Write ``<name>.md`` and ``<name>.json`` into ``out_dir``; returns both paths."""
    md_path, json_path = out_dir / f"{name}.md", out_dir / f"{name}.json"
    write_atomic(json_path, json.dumps(doc, indent=2) + "\n")
    write_atomic(md_path, markdown)
    return md_path, json_path
