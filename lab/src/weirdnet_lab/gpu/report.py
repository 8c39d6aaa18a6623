"""report.md of a ``weirdnet bench gpu`` run, one section per step, from its records."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from weirdnet_lab.scan_cost.budgets import NEW_BACKEND

from .plan import COPY_TARGET, COPY_TARGET_FROM_L, DRY_RUN_NOTE


def _f(value, digits: int = 2, suffix: str = "") -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}{suffix}"


def render_report(summary: dict, records: list[dict]) -> str:
    """report.md from the run's summary and its step records."""
    lines = ["# weirdnet bench gpu", ""]
    if summary["mode"] == "dry-run":
        lines += [f"**{DRY_RUN_NOTE}.** Every step ran on the CPU at tiny sizes to check "
                  "the control flow; no number here says anything about a GPU.", ""]
    dirty = " (with uncommitted changes)" if summary.get("dirty") else ""
    lines += [f"- date: {summary['date']}; mode: {summary['mode']}; device: "
              f"{summary['device']}; command: `{summary['command']}`",
              f"- commit: {summary.get('commit') or 'unknown'}{dirty}",
              f"- exit status: {summary['exit_status']} ("
              f"{'a' if summary['exit_status'] else 'no'} correctness check failed)", "",
              "| # | step | status | seconds | time box s | note |", "|---|---|---|---|---|---|"]
    for r in records:
        note = (r.get("note") or "").replace("|", "/").replace("\n", " ")[:200]
        lines.append(f"| {r['index']} | {r['step']} | {r['status']} | {r['seconds']:.0f} | "
                     f"{r['time_box_s']:g} | {note} |")
    for r in records:
        lines += ["", f"## {r['index']}. {r['title']}", "",
                  f"Status: **{r['status']}** in {r['seconds']:.0f} s (time box "
                  f"{r['time_box_s']:g} s)." + (f" {r['note']}" if r.get("note") else "")]
        lines += _SECTIONS[r["step"]](r.get("data") or {})
        if r.get("logs"):
            lines += ["", "Logs: " + ", ".join(f"`{p}`" for p in r["logs"])]
    lines += ["", "## Targets of issue 62 (computed from this run's records)", "",
              *(issue62_targets(records) or ["- none measured in this run"])]
    if any(r["step"] == "scan-timing" for r in records):
        lines += ["", "## Targets of issue 73 (computed from this run's records)", "",
                  *issue73_targets(records)]
    return "\n".join(lines) + "\n"


def _row(data: dict, method: str, length: int) -> dict:
    return next((r for r in data.get("rows", []) if r["method"] == method
                 and r["L"] == length and not r["error"]), {})


def _verdict(text: str, value, passed) -> str:
    if value is None:
        return f"- {text}: not measured"
    return f"- {text}: {_f(value, 3)} — {'PASS' if passed else 'FAIL'}"


def issue62_targets(records: list[dict]) -> list[str]:
    """Issue 62's targets with PASS/FAIL from the kernels, models and decode-graph
    records (the scan rows of the new kernel, ``scan_cost.budgets.NEW_BACKEND``)."""
    by = {r["step"]: r.get("data") or {} for r in records}
    out = []
    if "kernels" in by:
        k = by["kernels"]
        new, sdpa = NEW_BACKEND, "sdpa-causal"
        f16, f64 = _row(k, new, 16384).get("fwd_ms"), _row(k, new, 65536).get("fwd_ms")
        b16, b1 = _row(k, new, 16384).get("fwdbwd_ms"), _row(k, new, 1024).get("fwdbwd_ms")
        s16, s1 = _row(k, sdpa, 16384).get("fwdbwd_ms"), _row(k, sdpa, 1024).get("fwdbwd_ms")
        copy = next((c for c in k.get("copy", []) if c["L"] == 16384), None)
        frac = copy["ms"] / f16 if copy and f16 else None
        m16, ms = _row(k, new, 16384).get("extra_mib"), _row(k, sdpa, 16384).get("extra_mib")
        out += [_verdict("scan fwd at 16K <= 0.6 ms (ms)", f16, f16 is not None and f16 <= 0.6),
                _verdict("scan fwd at 16K >= 40% of the copy bandwidth (fraction)", frac,
                         frac is not None and frac >= 0.4),
                _verdict("scan fwd+bwd at 16K <= 3.3 ms (ms)", b16,
                         b16 is not None and b16 <= 3.3),
                _verdict("scan fwd+bwd at 16K >= 10x SDPA causal (x)",
                         s16 / b16 if s16 and b16 else None, bool(s16 and b16) and
                         s16 / b16 >= 10),
                _verdict("scan fwd+bwd at 1K no slower than SDPA causal (x)",
                         s1 / b1 if s1 and b1 else None, bool(s1 and b1) and s1 / b1 >= 1),
                _verdict("64K fwd <= 4.5x the 16K fwd (x)", f64 / f16 if f64 and f16 else None,
                         bool(f64 and f16) and f64 / f16 <= 4.5),
                _verdict("extra memory at 16K <= 1.5x SDPA's (x)",
                         m16 / ms if m16 and ms else None, bool(m16 and ms) and m16 / ms <= 1.5)]
    if "models" in by:
        rows = {(r["mechanism"], r["length"]): r.get("steps_per_s")
                for r in by["models"].get("rows", []) if r.get("status") == "ok"}
        for length, need in ((4096, 2.0), (16384, 8.0)):
            a, t = rows.get(("weird-a", length)), rows.get(("transformerpp", length))
            out.append(_verdict(f"Weird-Net A >= {need:g}x the Transformer++'s steps/s at "
                                f"{length // 1024}K (x)", a / t if a and t else None,
                                bool(a and t) and a / t >= need))
            g = rows.get(("fla-gated-deltanet", length))
            out.append(_verdict(f"Weird-Net A >= fla Gated DeltaNet's steps/s at "
                                f"{length // 1024}K (x)", a / g if a and g else None,
                                bool(a and g) and a / g >= 1))
    for run_ in by.get("decode-graph", {}).get("runs", []):
        speed = max((r["tokens_per_s"] for r in run_["results"]), default=None)
        graph = "with" if run_["cuda_graph"] else "without"
        out.append(_verdict(f"Weird-Net A small >= 5,000 tokens/s at batch 1, 16K, {graph} "
                            "the CUDA graph (tokens/s)", speed,
                            speed is not None and speed >= 5000))
    return out


def _kernels_section(data: dict) -> list[str]:
    rows = data.get("rows")
    if not rows:
        return []
    c = data["config"]
    lines = ["", f"B={c['batch']}, D={c['dim']}, {c['dtype']}; median ms; extra MiB of "
                 "fwd+bwd", "", "| method | L | fwd ms | fwd+bwd ms | extra MiB | note |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['L']} | {_f(r['fwd_ms'], 3)} | {_f(r['fwdbwd_ms'], 3)} "
              f"| {_f(r['extra_mib'], 0)} | {(r['error'] or '')[:60]} |" for r in rows]
    lines += ["", "| L | copy ms | copy GB/s |", "|---|---|---|"]
    lines += [f"| {c['L']} | {_f(c['ms'], 3)} | {_f(c['gb_per_s'], 1)} |"
              for c in data.get("copy", [])]
    return lines


def _env_section(data: dict) -> list[str]:
    keys = ("device_name", "capability", "memory_gib", "driver", "cuda", "cudnn", "torch",
            "triton", "python", "weirdnet", "commit", "dirty", "platform")
    rows = [f"| {k} | {data.get(k) if data.get(k) is not None else '–'} |" for k in keys
            if k in data]
    rows += [f"| SDPA backend, {label} | {name} |"
             for label, name in (data.get("sdpa_backends") or {}).items()]
    return ["", "| what | value |", "|---|---|"] + rows


def _correctness_section(data: dict) -> list[str]:
    tests = data.get("tests")
    if not tests:
        return []
    lines = ["", f"- pytest: {tests.get('passed', '?')} passed, {tests.get('failures', '?')} "
                 f"failed, {tests.get('errors', '?')} errors, {tests.get('skipped', '?')} "
                 f"skipped (exit status {tests['exit_status']}; "
                 f"{tests.get('workers', 1)} pytest process(es))",
             "- tests: " + ", ".join(f"`{_short(p)}`" for p in tests["paths"][:10])]
    lines += [f"  - FAILED `{name}`" for name in tests.get("failed_tests", [])]
    if "selfcheck" in data:
        lines.append(f"- Triton self-check on {data['selfcheck'].get('device')}: "
                     f"{selfcheck_text(data['selfcheck'])}")
    return lines


def _short(test: str) -> str:
    """A test path or node id from its ``tests/`` folder on."""
    path, sep, rest = test.partition("::")
    parts = Path(path).parts
    where = len(parts) - 1 - parts[::-1].index("tests") if "tests" in parts else len(parts) - 1
    return str(Path(*parts[where:])) + sep + rest


def _scan_section(data: dict) -> list[str]:
    scan = data.get("scan")
    if not scan:
        return []
    c = scan["config"]
    rows = {(r["method"], r["L"]): r for r in scan["results"]}
    methods = list(dict.fromkeys(r["method"] for r in scan["results"]))
    lines = ["", f"B={c['batch']}, D={c['dim']}, {c['dtype']}; scan backend "
                 f"{scan.get('scan_backend') or '?'}; median ms (fwd / fwd+bwd); full "
                 f"numbers: `{scan['file']}`", "",
             "| L | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for L in c["lengths"]:
        cells = []
        for m in methods:
            r = rows.get((m, L))
            cells.append("–" if r is None else r["error"][:40] if r["error"] else
                         f"{_f(r['fwd_ms'])} / {_f(r['fwdbwd_ms'])}")
        lines.append(f"| {L} | " + " | ".join(cells) + " |")
    if data.get("fractions"):
        lines += ["", "Forward vs a device-to-device copy of the same bytes (a, v read, the "
                      "output written):", "",
                  "| L | copy ms | copy GB/s | scan fwd ms | scan GB/s | fraction |",
                  "|---|---|---|---|---|---|"]
        for f in data["fractions"]:
            lines.append(f"| {f['L']} | {_f(f['copy_ms'], 3)} | {_f(f['copy_gb_per_s'], 1)} | "
                         f"{_f(f['scan_fwd_ms'], 3)} | {_f(f['scan_gb_per_s'], 1)} | "
                         f"{_f(f['fraction'])} |")
    targets = [f"- {t['text']}: {_f(t['value'])} — {'PASS' if t['passed'] else 'FAIL'}"
               for t in scan.get("targets", [])]
    targets += [f"- scan forward >= {COPY_TARGET:.0%} of the copy bandwidth at L={f['L']}: "
                f"{_f(f['fraction'])} — {'PASS' if f['fraction'] >= COPY_TARGET else 'FAIL'}"
                for f in data.get("fractions", [])
                if f["L"] >= COPY_TARGET_FROM_L and f["fraction"] is not None]
    return lines + ["", "Targets:"] + (targets or ["- none measured at these lengths"])


def _speed_section(data: dict) -> list[str]:
    rows = data.get("rows")
    if not rows:
        return []
    s = data["settings"]
    lines = ["", f"D={s['dim']}, depth {s['depth']}, d_ff {s['d_ff']}, batch {s['batch']}; "
                 f"full numbers: `{data['file']}`", "",
             "| mechanism | L | steps/s | peak memory MiB | status |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mechanism']} | {r['length']} | {_f(r.get('steps_per_s'))} | "
                     f"{_f(r.get('memory_mib'), 1)} | {r.get('status')} |")
    return lines


def _decode_section(data: dict) -> list[str]:
    lines = []
    for run_ in data.get("runs", []):
        lines += ["", f"Batch {run_['batch']} (`{run_['file']}`):", "",
                  "| context | model | tokens/s | step ms |", "|---|---|---|---|"]
        lines += [f"| {r['context']} | {r['model']} | {_f(r['tokens_per_s'], 1)} | "
                  f"{_f(r['step_ms_median'], 3)} |" for r in run_["results"]]
    return lines


def _suite_section(data: dict) -> list[str]:
    if not data.get("cells"):
        return []
    lines = ["", f"Budget `{data['budget']}`, ListOps, seed 0:", "",
             "| mechanism | status | wall s | steps | steps/s | peak MiB | test accuracy |",
             "|---|---|---|---|---|---|---|"]
    for c in data["cells"]:
        status = f"{c['status']} (resumed)" if c.get("resumed") else c["status"]
        lines.append(f"| {c['variant']} | {status} | {_f(c['wall_s'], 1)} | "
                     f"{c['steps'] if c['steps'] is not None else '–'} | "
                     f"{_f(c['steps_per_s'])} | {_f(c['memory_mib'], 1)} | "
                     f"{_f(c['test_accuracy'], 3)} |")
    e = data.get("estimate") or {}
    if e.get("mean_cell_wall_s"):
        lines += ["", f"The `{data['budget']}` budget plans {e['cells_in_budget']} cells; at "
                      f"the pilot's mean of {e['mean_cell_wall_s']:.1f} s per cell (ListOps "
                      f"only: other tasks differ) it would take about "
                      f"{e['budget_minutes_if_every_cell_cost_this']:.0f} minutes "
                      "(an extrapolation, not a measurement)."]
    if any(str(c.get("status")).startswith("unfinished") for c in data["cells"]):
        lines += ["", "An unfinished cell had no record when the step ended: its steps and "
                      "wall time are those of its last logged event, counted from its "
                      "process's start (its log: `logs/suite-CELL.jsonl`)."]
    if any(c.get("resumed") for c in data["cells"]):
        lines += ["", "A resumed cell continued from a checkpoint an earlier process left "
                      "in this folder: its wall time and steps/s cover only its last "
                      "process, so it is left out of the extrapolation."]
    return lines


def selfcheck_text(check: dict) -> str:
    if check.get("skipped"):
        return f"skipped ({check['skipped']})"
    return "passed" if check.get("error") is None else f"FAILED ({check['error']})"


def _race(data: dict, method: str, length: int) -> dict:
    return next((r for r in data.get("rows", []) if r.get("step") == "race"
                 and r.get("method") == method and r.get("L") == length
                 and r.get("status") == "ok"), {})


def issue73_targets(records: list[dict]) -> list[str]:
    """Issue 73's GPU targets with PASS/FAIL from the scan-timing record (the new
    backend's rows against SDPA causal's, measured side by side)."""
    data = next((r.get("data") or {} for r in records if r["step"] == "scan-timing"), {})
    new = (data.get("config") or {}).get("new_backend", "?")
    f16 = _race(data, new, 16384).get("fwd_ms")
    ratio = {}
    for length in (1024, 16384, 65536):
        ours, sdpa = _race(data, new, length), _race(data, "sdpa-causal", length)
        for key in ("fwd_ms", "fwdbwd_ms"):
            a, b = ours.get(key), sdpa.get(key)
            ratio[length, key] = b / a if a and b else None
    fb16, fb64, f1 = (ratio[16384, "fwdbwd_ms"], ratio[65536, "fwdbwd_ms"],
                      ratio[1024, "fwd_ms"])
    return [f"Backend `{new}` against SDPA causal (x: SDPA's time over the scan's).",
            _verdict("forward at 16K <= 2.0 ms (ms)", f16, f16 is not None and f16 <= 2.0),
            _verdict("forward + backward at 16K >= 4x SDPA causal (x)", fb16,
                     fb16 is not None and fb16 >= 4),
            _verdict("forward + backward at 64K >= 15x SDPA causal (x)", fb64,
                     fb64 is not None and fb64 >= 15),
            _verdict("forward at 1K no slower than SDPA causal (x)", f1,
                     f1 is not None and f1 >= 1)]


def _scan_timing_section(data: dict) -> list[str]:
    rows = data.get("rows", [])
    plan = next((r for r in rows if r.get("step") == "plan"), {})
    lines = ["", f"Timer: {plan.get('timer', '–')}. New backend: "
                 f"`{plan.get('new_backend', '–')}`, old: `{plan.get('old_backend', '–')}`."]
    env = next((r for r in rows if r.get("step") == "env"), None)
    if env:
        lines += ["", f"Device {env.get('device_name', env.get('device'))} (capability "
                      f"{env.get('capability', '–')}), torch {env.get('torch')}, triton "
                      f"{env.get('triton')}; SDPA causal backend: "
                      f"{env.get('sdpa_causal_backend')}; backends: {env.get('backends')}."]
    lines += ["", "| step | method / backend | L | status | fwd ms | fwd+bwd ms | ms | "
              "ms, levels emptied | note |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("step") in ("plan", "env", "done"):
            continue
        who = r.get("method") or r.get("backend") or ""
        if r.get("pass_"):
            who += f" {r['pass_']}"
        note = r.get("note") or (f"{r['gb_per_s']:,.0f} GB/s" if r.get("gb_per_s") else "")
        if r.get("rate") is not None:
            note = f"path-A rate {r['rate']}"
        lines.append(f"| {r['step']} | {who} | {r.get('L', '')} | {r.get('status')} "
                     f"| {_f(r.get('fwd_ms'), 3)} | {_f(r.get('fwdbwd_ms'), 3)} "
                     f"| {_f(r.get('ms'), 3)} | {_f(r.get('ms_no_levels'), 3)} "
                     f"| {str(note).replace('|', '/')[:160]} |")
    if not any(r.get("step") == "done" for r in rows):
        lines += ["", "The run stopped before its end: the rows above are what it measured."]
    return lines


_SECTIONS: dict[str, Callable[[dict], list[str]]] = {
    "env": _env_section, "correctness": _correctness_section, "scan": _scan_section,
    "speed": _speed_section, "decode": _decode_section, "suite": _suite_section,
    "kernels": _kernels_section, "models": _speed_section, "decode-graph": _decode_section,
    "scan-timing": _scan_timing_section}
