"""Markdown tables and the plot of ``weirdnet bench speed`` (see :mod:`.speed`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from weirdnet_lab.lm.report import label as _label
from weirdnet_lab.opbench.report import markdown_table
from weirdnet_lab.suite import numbers
from weirdnet_lab.variants import VARIANTS


def _by_cell(result: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["mechanism"], r["length"]): r for r in result["rows"]}


def _lengths(result: dict[str, Any]) -> list[int]:
    return sorted({r["length"] for r in result["rows"]})


def _mechanisms(result: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(r["mechanism"] for r in result["rows"]))


def _short(length: int) -> str:
    return f"{length // 1024}K" if length % 1024 == 0 else str(length)


def reference(result: dict[str, Any]) -> str:
    """The mechanism every ratio is taken against (older results: the Transformer)."""
    return result["settings"].get("reference", "softmax")


def _is_lm(result: dict[str, Any]) -> bool:
    return result["settings"].get("task") in ("lm", "long")


def _is_long(result: dict[str, Any]) -> bool:
    return result["settings"].get("task") == "long"


def _gib(cell: dict[str, Any]) -> float:
    """A cell's peak memory in GiB: its RSS where measured, else the allocator's."""
    mib = cell["rss_mib"] if cell.get("rss_mib") is not None else cell["memory_mib"]
    return mib / 1024


def _own_ratio(result, mechanism: str, length: int) -> float | None:
    """Tokens/s at ``length`` over the same model's at its shortest measured length."""
    cells = [c for c in result["rows"] if c["mechanism"] == mechanism and c["status"] == "ok"]
    if not cells:
        return None
    first = min(cells, key=lambda c: c["length"])
    mine = next((c for c in cells if c["length"] == length), None)
    return None if mine is None else mine["tokens_per_s"] / first["tokens_per_s"]


def _long_sections(result) -> list[str]:
    """The largest length each model trains at within the budget, and its tokens/s
    against its own at the shortest length (near-linear cost: near 1)."""
    budget = result["settings"].get("memory_budget_gib")
    lines = [f"## How long one machine trains (ours): the largest length within "
             f"{budget:g} GiB" if budget else "## The largest length each model trained at",
             ""]
    rows = []
    for mechanism in _mechanisms(result):
        cells = [c for c in result["rows"] if c["mechanism"] == mechanism]
        fits = [c for c in cells if c["status"] == "ok"
                and (budget is None or _gib(c) <= budget)]
        best = max(fits, key=lambda c: c["length"]) if fits else None
        stop = next((c["status"] for c in cells if c["status"] != "ok"), "")
        rows.append([_label(mechanism), _short(best["length"]) if best else "–",
                     f"{_gib(best):.1f}" if best else "–",
                     f"{best['tokens_per_s']:,.0f}" if best else "–", stop or "–"])
    lines += markdown_table(["Model", "largest length", "peak GiB there", "tokens/s there",
                             "why not longer"], rows)
    shortest = _short(min(_lengths(result)))
    lines += ["", f"### Training tokens/s relative to the same model at {shortest} (ours; "
                  "near-linear cost keeps it near 1, the target is >= 0.5 at 1M)", "",
              *_per_length(result, lambda m, n: "–" if _own_ratio(result, m, n) is None
                           else f"{_own_ratio(result, m, n):.2f}"), ""]
    return lines


def ratio(result: dict[str, Any], mechanism: str, length: int, key: str) -> float | None:
    """``key`` ("steps_per_s", "memory_mib" or "rss_mib") of ``mechanism`` over the
    reference's."""
    cells = _by_cell(result)
    mine, base = cells.get((mechanism, length)), cells.get((reference(result), length))
    if not mine or not base or mine["status"] != "ok" or base["status"] != "ok":
        return None
    if mine.get(key) is None or not base.get(key):
        return None
    return mine[key] / base[key]


def _entry(result, mechanism: str, length: int, key: str) -> str:
    cell = _by_cell(result).get((mechanism, length))
    if cell is None:
        return "–"
    if cell["status"] != "ok":
        return cell["status"].split(" (")[0]
    value = ratio(result, mechanism, length, key)
    return "–" if value is None else f"{value:.2f}"


def _per_length(result, entry) -> list[str]:
    """One row per mechanism, one column per length: ``entry(mechanism, length)``."""
    lengths = _lengths(result)
    return markdown_table(["Model", *(_short(n) for n in lengths)],
                          [[_label(m), *(entry(m, n) for n in lengths)]
                           for m in _mechanisms(result)])


def _table(result, key: str) -> list[str]:
    return _per_length(result, lambda m, n: _entry(result, m, n, key))


def _absolute(result) -> list[str]:
    cells = _by_cell(result)

    def entry(mechanism: str, length: int) -> str:
        cell = cells.get((mechanism, length))
        if not cell or cell["status"] != "ok":
            return "–"
        rss = f" (RSS {cell['rss_mib']:.0f})" if cell.get("rss_mib") is not None else ""
        tokens = f"{cell['tokens_per_s']:,.0f} tok/s, " if _is_lm(result) else ""
        return (f"{tokens}{cell['step_s'] * 1000:.0f} ms / {cell['memory_mib']:.0f} "
                f"MiB{rss}")

    return _per_length(result, entry)


def _paper(result) -> list[str]:
    lengths = [n for n in _lengths(result) if n <= 4096]
    header = ["Model (paper)", "source", *(f"speed {_short(n)}" for n in lengths),
              *(f"memory {_short(n)}" for n in lengths)]
    rows = []
    for mechanism, (source, values) in numbers.SPEED.items():
        speed = [f"{values[n][0]:.1f}" if n in values else "–" for n in lengths]
        memory = [f"{values[n][1]:.2f}" if n in values else "–" for n in lengths]
        rows.append([VARIANTS[mechanism].label, source, *speed, *memory])
    return markdown_table(header, rows)


_MEMORY_NOTE = {
    False: "Bytes held through PyTorch's CPU allocator, from a per-allocation trace of the "
           "first training step (the quantity CUDA's `max_memory_allocated` reports); the "
           "peak RSS below adds heap fragmentation and the C kernels' own workspaces.",
    True: "CUDA `max_memory_allocated` during the first training step."}


def _memory_note(result) -> str:
    if result["settings"].get("memory") == "rss":
        return ("The peak RSS of the timed training step above the model, optimizer and "
                "batch, with glibc's mmap threshold fixed at 1 MiB (freed large blocks go "
                "back to the system): what the machine must hold, C workspaces included.")
    return _MEMORY_NOTE[result["machine"]["device"] == "cuda"]


def _rss_section(result) -> list[str]:
    if not any(c.get("rss_mib") is not None for c in result["rows"]) \
            or result["settings"].get("memory") == "rss":  # the table above is the RSS
        return []
    return [f"### Peak RSS relative to the {VARIANTS[reference(result)].label} (ours)", "",
            *_table(result, "rss_mib"), ""]


def _parameters(result) -> list[str]:
    """Each language model's non-embedding parameters (the count they are matched by)."""
    counts: dict[str, int] = {}
    for row in result["rows"]:
        if row.get("status") == "ok" and row.get("non_embedding_parameters"):
            counts.setdefault(row["mechanism"], row["non_embedding_parameters"])
    if not counts:
        return []
    target = counts.get("softmax")
    return ["Non-embedding parameters (matched to the GPT-2-style Transformer's within 5%): "
            + "; ".join(f"{VARIANTS[m].label} {n / 1e6:.3f}M"
                        + (f" ({n / target - 1:+.1%})" if target else "")
                        for m, n in counts.items()), ""]


def _setting(result) -> str:
    s = result["settings"]
    what = ("byte-level language models (next-byte loss; the `bench lm` models and the "
            "`transformers` peers)" if _is_lm(result) else
            "byte-level text classification")
    extra = ""
    if s.get("checkpointing", "none") != "none" or s.get("ffn_chunk"):
        extra = (f"; activation checkpointing: {s.get('checkpointing', 'none')}"
                 + (f", weirdnet FFNs in chunks of {s['ffn_chunk']:,} positions"
                    if s.get("ffn_chunk") else ""))
    memory = ("; memory: the timed step's peak RSS" if s.get("memory") == "rss" else "")
    return (f"- {what}, batch {s['batch']} for every model, D = {s['dim']}, N = "
            f"{s['depth']}, d_ff = {s['d_ff']}, {s['heads']} heads; AdamW; median of "
            f"{s['steps']} timed steps after {s['warmup']} warm-up{extra}{memory}")


_SLOW_NOTE = ("¹ `transformers` runs this peer's layers on its pure-PyTorch path on a CPU "
              "(Mamba through mamba.py's parallel scan; the fused kernels of Mamba, Mamba-2, "
              "Gated DeltaNet and xLSTM need a GPU; RecurrentGemma's RG-LRU is a step-by-step "
              "loop on every device): its speed is what a CPU user gets, not what a GPU "
              "gives.")


def markdown(result: dict[str, Any], plot: str | None) -> str:
    """The report: settings, relative speed, relative memory, absolute numbers, papers'.
    ``plot``: the PNG's file name, or None (no plot)."""
    m, ref = result["machine"], VARIANTS[reference(result)].label
    lm = _is_lm(result)
    versions = f"; transformers {m['transformers']}" if m.get("transformers") else ""
    out = [f"# Training speed and memory vs the {ref} ({m['device']})", "",
           *_partial_note(result), _setting(result),
           f"- machine: {m['cpu_model']} ({m['usable_cores']} usable cores"
           + (f", {m['memory_gib']:.1f} GiB" if m.get("memory_gib") else "") + ")"
           + (f", {m['gpu']}" if m.get("gpu") else "") + f"; torch {m['torch']}{versions}; "
           f"weirdnet {m['weirdnet']}"
           + (f" (commit {m['commit'][:10]})" if m.get("commit") else "") + f"; {m['date']}",
           f"- command: `{m['command']}`",
           "- softmax attention runs through `scaled_dot_product_attention` (a fused, "
           "memory-efficient kernel), not the materialised L x L attention of the papers' "
           "baselines", *precision_lines(result), "", *_parameters(result),
           f"## Training {'tokens' if lm else 'steps'} per second relative to the {ref} "
           "(ours, higher is faster)", "", *_table(result, "steps_per_s"), "",
           *([_SLOW_NOTE, ""] if lm else []),
           f"## Peak memory of a training step relative to the {ref} (ours, lower is "
           "smaller)", "", _memory_note(result), "",
           *_table(result, "memory_mib"), "", *_rss_section(result),
           *(_long_sections(result) if _is_long(result) else []),
           *([f"![speed and memory]({plot})", ""] if plot else []),
           f"## Absolute: {'training tokens/s, ' if lm else ''}time per training step / "
           "peak extra memory (ours)", "", *_absolute(result), ""]
    if not lm:
        out += ["## The papers' numbers (their GPUs and their baselines' implementations)",
                "", *_paper(result), ""]
    return "\n".join(out) + "\n"


def precision_lines(result: dict[str, Any]) -> list[str]:
    """What the rows computed in, the SDPA backend each model's rows ran, and a warning
    where a CUDA row ran another than FlashAttention or cuDNN (older results record
    neither: nothing)."""
    from weirdnet_lab.gpu.sdpa import unfair

    rows = [r for r in result["rows"] if r.get("status") == "ok"]
    precision = next((r["precision"] for r in rows if r.get("precision")), None)
    if precision is None:
        return []
    cuda = result["machine"]["device"] == "cuda"
    lines = [f"- precision: every model trains in {precision}"
             + (", SDPA limited to FlashAttention or cuDNN" if cuda else "")]
    ran: dict[str, set[str]] = {}
    for r in rows:
        if r.get("sdpa_backend"):
            ran.setdefault(r["mechanism"], set()).add(r["sdpa_backend"])
    if ran:
        lines.append("- SDPA backend run: " + "; ".join(
            f"{_label(m)} {', '.join(sorted(b))}" for m, b in ran.items()))
    bad = [r for r in rows if cuda and unfair(r.get("sdpa_backend"))]
    if bad:
        lines.append("- **not a fair GPU comparison**: " + ", ".join(
            f"{_label(r['mechanism'])} at {_short(r['length'])} ran {r['sdpa_backend']}"
            for r in bad))
    return lines


def _partial_note(result: dict[str, Any]) -> list[str]:
    """The warning heading a stopped run's report (none for a full one)."""
    if not result.get("partial"):
        return []
    cells = result["rows"]
    measured = sum(c["status"] == "ok" for c in cells)
    return [f"**Partial report: the run was stopped; {measured} of its {len(cells)} cells "
            "were measured** (the others say `not run`). Rerun the command for the full "
            "report.", ""]


def draw(result: dict[str, Any], out: Path) -> Path:
    """Two panels: relative steps/s and relative memory against L (log-log)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from weirdnet.run import write_png

    figure = Figure(figsize=(12, 4.8), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 2)
    lengths = _lengths(result)
    cells, long = _by_cell(result), _is_long(result)

    def value(mechanism: str, n: int, key: str) -> float | None:
        if not long:
            return ratio(result, mechanism, n, key)
        cell = cells.get((mechanism, n))
        if not cell or cell["status"] != "ok":
            return None
        return cell["tokens_per_s"] if key == "steps_per_s" else _gib(cell)

    for index, mechanism in enumerate(_mechanisms(result)):
        for ax, key in zip(axes, ("steps_per_s", "memory_mib")):
            points = [(n, value(mechanism, n, key)) for n in lengths]
            points = [(n, v) for n, v in points if v is not None]
            if points:
                ax.plot(*zip(*points), marker="o", color=f"C{index % 10}",
                        label=VARIANTS[mechanism].label)
    ref = VARIANTS[reference(result)].label
    titles = ((f"training steps/s relative to the {ref}", f"peak memory relative to the {ref}")
              if not long else ("training tokens/s", "peak memory (GiB)"))
    budget = result["settings"].get("memory_budget_gib")
    if long and budget:
        axes[1].axhline(budget, color="gray", linestyle="--", label=f"{budget:g} GiB")
    for ax, title in zip(axes, titles):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    task = "byte-level language models" if _is_lm(result) else "byte-level text classification"
    figure.suptitle(f"{task}, {result['machine']['device']}, "
                    f"batch {result['settings']['batch']}")
    figure.tight_layout()
    return write_png(figure, out)
