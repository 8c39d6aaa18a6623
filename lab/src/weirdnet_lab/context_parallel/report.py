"""The record and report of ``weirdnet bench context-parallel``: one row per (model,
length, P) from its ranks' results, the Markdown table with the targets of issue 64, and
the plot of memory and tokens/s against length per P."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from weirdnet_lab.context_parallel.cost import ring_values, step_values
from weirdnet_lab.opbench.report import markdown_table
from weirdnet_lab.sweep import writing

MIB = 1024.0 * 1024.0
STEM = "context_parallel"
ITEMSIZE = 4  # float32 state


def formula_bytes(lengths: list[int], layers: int, channels: int, halos: str,
                  recomputed: bool = False) -> list[int]:
    """Halo bytes each rank sends in one checkpointed training step by formula: per
    Weird-attention layer, the forward once (selective checkpointing keeps the scan's
    output; twice with ``recomputed``: the checkpoint runs it again), the backward once,
    and with ``halos="resend"`` the forward's halos again in the backward; B = 1,
    float32."""
    unit = channels * ITEMSIZE * layers
    return [values * unit for values in step_values(lengths, halos, recomputed)]


def ring_bytes(P: int, shard: int, layers: int, channels: int,
               recomputed: bool = False) -> int:
    """Ring attention's bytes per rank for the same shards and the same step (K, V of
    width D; its forward once, its output kept by the same selective checkpointing, or
    twice with ``recomputed``)."""
    if P < 2:
        return 0
    f, b = ring_values(P, shard)
    return ((2 if recomputed else 1) * f + b) * channels * ITEMSIZE * layers


def row(cell: dict[str, Any], ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row from the ranks' worker results (rank order)."""
    lengths = [r["n"] for r in ranks]
    layers, channels = ranks[0]["weird_layers"], ranks[0]["scan_channels"]
    timed = ranks[0]["seconds"][1:] or ranks[0]["seconds"]
    seconds = statistics.median(timed)
    sent = [r["sent_forward"] + r.get("sent_recompute", 0) + r["sent_backward"]
            for r in ranks]
    halos, again = cell.get("halos", "keep"), cell.get("recompute_exchanges", False)
    return {**cell, "shards": lengths,
            "peak_rss_mib": max(r["peak_rss"] for r in ranks) / MIB,
            "step_extra_mib": max(r["peak_rss"] - r["base_rss"] for r in ranks) / MIB,
            "base_rss_mib": max(r["base_rss"] for r in ranks) / MIB,
            "seconds_per_step": seconds, "first_step_seconds": ranks[0]["seconds"][0],
            "tokens_per_s": cell["length"] / seconds,
            "sent_bytes": sent,
            "formula_bytes": formula_bytes(lengths, layers, channels, halos, again),
            "ring_bytes": ring_bytes(len(lengths), max(lengths), layers, channels, again),
            "messages": [r["messages"] for r in ranks], "weird_layers": layers,
            "parameters": ranks[0]["parameters"]}


def _single(rows: list[dict], r: dict) -> dict | None:
    for other in rows:
        if (other["model"], other["length"], other["P"]) == (r["model"], r["length"], 1) \
                and "error" not in other:
            return other
    return None


def _cells(rows: list[dict], r: dict) -> list[str]:
    if "error" in r:
        return [r["model"], f"{r['length']:,}", str(r["P"]), _halos(r), r["error"]] + [""] * 8
    one = _single(rows, r)
    ratio = (f"{r['peak_rss_mib'] / one['peak_rss_mib']:.2f} / "
             f"{r['step_extra_mib'] / one['step_extra_mib']:.2f}") if one else "n/a"
    sent, ring = max(r["sent_bytes"]), r["ring_bytes"]
    exact = "= formula" if r["sent_bytes"] == r["formula_bytes"] else \
        f"formula {max(r['formula_bytes']) / MIB:.1f}"
    return [r["model"], f"{r['length']:,}", str(r["P"]), _halos(r), f"{r['peak_rss_mib']:,.0f}",
            f"{r['step_extra_mib']:,.0f}", ratio, f"{r['seconds_per_step']:.1f}",
            f"{r['tokens_per_s']:,.0f}", f"{sent / MIB:.1f}", exact,
            f"{ring / MIB:.1f}" if ring else "", f"{sent / ring:.2f}" if ring else ""]


def _halos(r: dict) -> str:
    """The sharded scan's setting of a row: "keep" or "resend", "+ recompute" where the
    checkpoint recomputes the exchanges; empty for one process."""
    if r["P"] == 1:
        return ""
    return r.get("halos", "keep") + (" + recompute" if r.get("recompute_exchanges") else "")


HEADER = ("model", "L (bytes)", "P", "halos", "peak RSS / process (MiB)", "step extra (MiB)",
          "vs P = 1 (peak / extra)", "s / step", "tokens/s", "halo MiB sent / step (max rank)",
          "measured vs formula", "ring attention MiB", "sent / ring")


TARGET_HEADER = ("target (issue 64)", "cells", "measured", "bound", "verdict")


def _verdict(value: float, bound: float) -> str:
    return "met" if value <= bound else "not met"


def targets(rows: list[dict]) -> list[str]:
    """The issue's memory and communication targets as measured in these rows: a table
    (memory: peak RSS per process at P = 4 over one process's at the same length;
    communication: the scan's halo bytes per step, the rank that sends most, over ring
    attention's for the same shards, the worst row of each P and setting)."""
    cells = []
    for r in rows:
        one = _single(rows, r)
        if r["P"] == 4 and "error" not in r and one:
            peak = r["peak_rss_mib"] / one["peak_rss_mib"]
            cells.append(["memory: peak RSS per process, P = 4 over P = 1",
                          f"{r['model']}, {r['length']:,} bytes, {_halos(r)}",
                          f"{peak:.3f}x", "<= 0.35x", _verdict(peak, 0.35)])
    for P, halos in sorted({(r["P"], _halos(r)) for r in rows
                            if r["P"] > 1 and "error" not in r}):
        worst = max(max(r["sent_bytes"]) / r["ring_bytes"] for r in rows
                    if (r["P"], _halos(r)) == (P, halos) and "error" not in r)
        cells.append(["communication: halo bytes per step over ring attention's",
                      f"P = {P}, {halos}", f"{worst:.5f}x", "<= 1x", _verdict(worst, 1.0)])
    return markdown_table(TARGET_HEADER, cells) if cells else ["(no P = 4 or P > 1 rows)"]


def markdown(record: dict[str, Any]) -> str:
    """context_parallel.md."""
    m, rows = record["machine"], record["rows"]
    out = ["# Context parallelism: memory, tokens/s and bytes sent per process", "",
           f"Machine: {m['cpu_model']}, {m['usable_cores']} usable cores, "
           f"{m.get('memory_gib', 0):.1f} GiB; torch {m['torch']}, gloo, one thread per process; "
           f"commit {m.get('commit')}{' (dirty)' if m.get('dirty') else ''}; {m['date']}; "
           f"load average after the run {', '.join(f'{x:.1f}' for x in m['load_average_after'])}.",
           f"Command: `{m['command']}`.", f"Allocator: {m['allocator']}.", "",
           "Byte-level LMs, D = 128, N = 2, d_ff = 4D, activation checkpointing per block, "
           "batch 1, AdamW. P = 1 is one process on its default backend (the C kernel); "
           "P > 1 runs `train.context_parallel`'s path (the halo scan, shards of L / P). "
           "The machine was shared (load average above the 2 cores' 2 while it ran). "
           "Peak RSS is the process's whole high-water mark (torch and the model included); "
           "step extra is that peak minus the RSS before the first step. Halo bytes are "
           "the Weird-attention scan's point-to-point sends in one step, measured and by "
           "formula: selective checkpointing keeps the scan's output, so the block's "
           "recomputation sends nothing (rows marked \"+ recompute\" recompute it and "
           "send the forward's halos once more); halos \"keep\" holds the forward's "
           "halos until the "
           "backward, \"resend\" exchanges them again in the backward. B++'s softmax layers "
           "and the gradient all_reduce are not counted. Ring attention: the same shards, "
           "K and V of width D, under the same checkpointing as the row.", ""]
    if record.get("quick"):
        out += ["**Quick run (tiny sizes): not a measurement.**", ""]
    out += markdown_table(HEADER, [_cells(rows, r) for r in rows])
    out += ["", "## Targets (issue 64)", "", *targets(rows), ""]
    return "\n".join(out)


def draw(rows: list[dict], path: Path) -> None:
    """Peak RSS per process and tokens/s against length, a line per (model, P)."""
    from weirdnet.run import write_png

    fig, axes = writing.panels(1, 2, 9.0, 3.6)
    good = [r for r in rows if "error" not in r]
    keys = sorted({(r["model"], r["P"]) for r in good})
    for model, P in keys:
        mine = sorted((r for r in good if (r["model"], r["P"]) == (model, P)),
                      key=lambda r: r["length"])
        xs = [r["length"] for r in mine]
        a = model == "weird-a"
        style = dict(marker="o" if a else "s", color=f"C{P}", ls="-" if a else "--",
                     label=f"{model}, P = {P}")
        axes[0][0].plot(xs, [r["peak_rss_mib"] for r in mine], **style)
        axes[0][1].plot(xs, [r["tokens_per_s"] for r in mine], **style)
    for ax, label in zip(axes[0], ("peak RSS per process (MiB)", "tokens/s")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (bytes)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0][0].set_yscale("log", base=2)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    write_png(fig, path)


def write(folder: Path, record: dict[str, Any]) -> list[Path]:
    """context_parallel.json, .md (and .png) in ``folder``; the paths written."""
    from weirdnet.run import write_atomic

    folder.mkdir(parents=True, exist_ok=True)
    data = write_atomic(folder / f"{STEM}.json", json.dumps(record, indent=1) + "\n")
    md = writing.write_report(folder, STEM, markdown(record),
                              lambda p: draw(record["rows"], p),
                              "memory and tokens/s against length")
    return [data, md]
