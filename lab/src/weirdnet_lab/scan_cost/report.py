"""scan_cost_BACKEND.md from the record of ``weirdnet bench scan-cost``."""

from __future__ import annotations


def _f(x, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _bytes_table(counts: dict) -> list[str]:
    d, m = counts["derived"], counts["measured"]
    rows = ["| | launches (Triton + host ops) | kernel B/elem | host-op B/elem | total B/elem "
            "| syncs | at B=1, D=16 (interpreter): total B/elem |", "|---|---|---|---|---|---|---|"]
    for phase in ("forward", "backward"):
        s = d[phase]
        rows.append(f"| {phase} | {s['launches']} ({s['triton_launches']} + {s['host_ops']}) "
                    f"| {_f(s['kernel_bytes_per_elem'], 2)} | {_f(s['host_bytes_per_elem'], 2)} "
                    f"| **{_f(s['bytes_per_elem'], 2)}** | {len(s['syncs'])} "
                    f"| {_f(m[phase]['bytes_per_elem'], 2)} |")
    s = d["fwdbwd"]
    rows.append(f"| forward + backward | {s['launches']} ({s['triton_launches']} Triton) "
                f"| {_f(s['kernel_bytes_per_elem'], 2)} | | **{_f(s['bytes_per_elem'], 2)}** "
                f"| {len(s['syncs'])} | {_f(m['fwdbwd']['bytes_per_elem'], 2)} |")
    return rows


def _launch_table(by_length: list[dict]) -> list[str]:
    rows = ["| L | forward launches (Triton + host ops) | backward launches | syncs |",
            "|---|---|---|---|"]
    for r in by_length:
        f, b = r["forward"], r["backward"]
        rows.append(f"| {r['L']:,} | {f['launches']} ({f['triton_launches']} + {f['host_ops']}) "
                    f"| {b['launches']} ({b['triton_launches']} + {b['host_ops']}) "
                    f"| {len(f['syncs']) + len(b['syncs'])} |")
    return rows


def _per_launch(counts: dict) -> list[str]:
    rows = ["| phase | # | kernel | grid | read B/elem | written B/elem |",
            "|---|---|---|---|---|---|"]
    n = counts["shape"]["batch"] * counts["length"] * counts["shape"]["dim"]
    for phase, launches in counts["launches"].items():
        for i, x in enumerate(launches, 1):
            rows.append(f"| {phase} | {i} | {x['kernel']} | {tuple(x['grid'])} "
                        f"| {_f(x['bytes_read'] / n, 2)} | {_f(x['bytes_written'] / n, 2)} |")
    return rows


def _ptx_table(ptx: dict | None) -> list[str]:
    if ptx is None:
        return ["Not compiled (--no-ptx)."]
    rows = [f"Compiled for sm_{ptx['arch']} with Triton {ptx['triton']} on the CPU. Per kernel: "
            "the loops of its PTX, with each loop's own body (nested loops excluded), level "
            "loops (the innermost ones) marked L, an outer loop (a segment loop around level "
            "loops) O; FP32 = add/sub/mul/fma/min/max/neg/abs/div/rcp/sqrt/ex2/lg2 .f32 "
            "instructions, per element = per thread over the elements each thread holds.", "",
            "| kernel | constexprs | s | level loops: bar.sync / shared ld+st / shfl "
            "| loops: bar.sync / ld.shared / st.shared / shfl | "
            "FP32 per level per element (per loop) | ex2 per loop | global widths (bits: count) "
            "| whole kernel: bar.sync / shared ld+st |", "|---|---|---|---|---|---|---|---|---|"]
    for k in ptx["kernels"]:
        c = k["constexprs"]
        key = ", ".join(f"{n}={c[n]}" for n in ("NL", "WIN", "BLOCK_R", "FIRST", "LAST", "TOP")
                        if n in c) or "–"
        if "error" in k:
            rows.append(f"| {k['kernel']} | {key} | | | error: {k['error'][:120]} | | | | |")
            continue
        loops = "; ".join(f"{'L' if b.get('level') else 'O'} {b['bar_sync']}/{b['ld_shared']}/"
                          f"{b['st_shared']}/{b['shfl']}" for b in k["loops"]) or "no loop"
        lv = k.get("in_level_loops")
        level = (f"{lv['bar_sync']} / {lv['ld_shared'] + lv['st_shared']} / {lv['shfl']}"
                 if lv else "–")
        f32 = "; ".join(_f(b["f32_per_element"], 2) for b in k["loops"]) or "–"
        ex2 = "; ".join(str(b["ex2"]) for b in k["loops"]) or "–"
        widths = ", ".join(f"{w}: {n}" for w, n in k["widths"].items())
        t = k["totals"]
        rows.append(f"| {k['kernel']} | {key} | {k['seconds']} | {level} | {loops} | {f32} "
                    f"| {ex2} "
                    f"| {widths} | {t['bar_sync']} / {t['ld_shared'] + t['st_shared']} |")
    return rows


def render(doc: dict) -> str:
    counts, m = doc["counts"], doc["machine"]
    shape = doc["shape"]
    lines = [f"# Scan kernel cost on the CPU: backend `{doc['backend']}`", "",
             f"- shape: B = {shape['batch']}, L = {shape['L']:,}, D = {shape['dim']}, bf16 in "
             "and out, causal; bytes derived from an interpreter run at B = "
             f"{doc['small']['batch']}, D = {doc['small']['dim']} (weirdnet_lab.scan_cost.derive)",
             f"- commit {m.get('commit')}{' (uncommitted changes)' if m.get('dirty') else ''}; "
             f"{m['date']}; {m['cpu_model']}; Python {m['python']}, torch {m['torch']}, "
             f"Triton {m.get('triton')}",
             f"- command: `{m['command']}`", "",
             "Bytes are the distinct addresses each launch reads and writes (a re-read within "
             "a launch is free, a round trip between launches is not) plus the tensors of "
             "the PyTorch ops the host code runs (each also a launch on a GPU). A step of "
             "training runs the forward, then the backward (which recomputes the forward's "
             "intermediates).", "", *_bytes_table(counts), "",
             "## Launches and syncs by length (B = 8, D = 1024; host code on meta tensors)", "",
             *_launch_table(counts["by_length"]), "",
             "## Each launch at the shape above", "", *_per_launch(counts), "",
             "## PTX", "", *_ptx_table(doc.get("ptx"))]
    budget = doc.get("budget")
    if budget:
        lines += ["", f"## Budget ({budget['source']})", "",
                  f"forward <= {budget['fwd_bytes']} B/elem and forward + backward <= "
                  f"{budget['fwdbwd_bytes']} B/elem at L = {budget['bytes_length']:,} "
                  f"(lab/tests/test_scan_cost.py); launches per forward "
                  f"{budget['fwd_launches']}; syncs <= {budget['syncs']}."]
    return "\n".join(lines) + "\n"
