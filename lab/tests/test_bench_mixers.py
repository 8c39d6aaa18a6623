"""``weirdnet bench mixers``: every registered mixer form as a full layer, vs SDPA."""

from __future__ import annotations

import json

import pytest

from weirdnet import layers
from weirdnet.cli import main
from weirdnet_lab.opbench import analysis, mixers, report, runner
from weirdnet_lab.opbench.methods import Shape

QUICK_D, QUICK_LENGTHS = 32, (64, 128)


def _existing_forms(dim: int, max_len: int) -> set[str]:
    """Method names of every (mixer, form) that builds at width ``dim``."""
    names = set()
    for mixer in [*layers.available(), *mixers.NAMED_FORMS]:
        options = mixers.layer_options(mixer, Shape(1, max_len, dim, min(64, dim)))
        registered = mixers.NAMED_FORMS.get(mixer, (mixer,))[0]
        for causal in (False, True):
            try:
                layers.build(registered, dim, causal=causal, **options)
            except ValueError:
                continue
            names.add(mixer + "-causal" if causal else mixer)
    return names


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "mixers", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in ("--lengths", "--batch", "--dim", "--dtype", "--device", "--methods",
                   "--repeats", "--quick", "--no-memory", "--out", "--check-targets",
                   "--softmax-max-len"):
        assert option in text


def test_methods_are_discovered_from_the_registry(capsys):
    names = mixers.method_names()
    for name in ("weird", "weird-causal", "ps", "ps-causal", "sdpa", "sdpa-causal"):
        assert name in names
    every = [*layers.available(), *mixers.NAMED_FORMS]  # DBA's second reading is named
    assert "dba-paper-literal" in names
    assert set(names) == {*every, *(m + "-causal" for m in every), "sdpa", "sdpa-causal"}
    assert mixers.layer_options("dba-paper-literal", Shape(1, 8, 256)) == {
        "form": "paper-literal", "heads": 4}
    with pytest.raises(SystemExit) as exc:
        main(["bench", "mixers", "--methods", "weird,nope"])
    assert exc.value.code == 2
    assert "nope" in capsys.readouterr().err


def test_quick_run_has_rows_for_every_mixer_form(tmp_path, capsys):
    assert main(["bench", "mixers", "--quick", "--no-memory", "--out", str(tmp_path)]) == 0
    stdout = capsys.readouterr().out
    md, js = tmp_path / "mixers_cpu.md", tmp_path / "mixers_cpu.json"
    assert md.read_text() == stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "mixers_cpu.json",
                                                          "mixers_cpu.md"]

    doc = json.loads(js.read_text())
    assert doc["benchmark"] == "mixers"
    forms = _existing_forms(QUICK_D, max(QUICK_LENGTHS))
    assert {"weird", "weird-causal", "ps", "ps-causal"} <= forms
    rows = doc["results"]
    assert {(r["method"], r["L"]) for r in rows} == {
        (m, L) for m in forms | {"sdpa", "sdpa-causal"} for L in QUICK_LENGTHS}
    for r in rows:
        assert r["error"] is None, r
        assert r["fwd_ms"] > 0 and r["fwdbwd_ms"] > 0
        assert r["repeats"] == 1 and r["mem_mib"] is None
    weird = next(r for r in rows if r["method"] == "weird" and r["L"] == 128)
    assert weird["options"] == {"max_len": 128}

    # forms that do not exist are named in the notes
    for mixer in layers.available():
        for name in (mixer, mixer + "-causal"):
            if name not in forms:
                assert any(n.startswith(f"{name} not run") for n in doc["notes"]), name
    assert [e["L"] for e in doc["ratios"]] == list(QUICK_LENGTHS)
    assert doc["ratios"][0]["fwdbwd_speedup_vs_sdpa:weird-causal"] is not None
    assert doc["targets"] == []  # targets are at L = 4096 and 16384 only
    text = md.read_text()
    assert text.startswith("# Sequence mixers (full layers) vs SDPA on cpu")
    assert "| 64 | weird-causal |" in text and "| 128 | sdpa |" in text
    assert "### fwd+bwd speed-up vs raw SDPA" in text and "## Targets" not in text


def test_quick_memory_children_know_the_suite(tmp_path, capsys):
    # L=512: SDPA's extra memory at L=64 is a few KiB, which RSS can report as 0, and a
    # ratio over 0 is (rightly) undefined.
    argv = ["bench", "mixers", "--quick", "--lengths", "512", "--methods", "weird,sdpa",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    capsys.readouterr()
    doc = json.loads((tmp_path / "mixers_cpu.json").read_text())
    assert [r["method"] for r in doc["results"]] == ["weird", "sdpa"]
    for r in doc["results"]:
        assert r["error"] is None and r["mem_mib"] is not None, r
        assert r["memory"]["baseline_is_high_water"], r["memory"]
    assert doc["ratios"][0]["mem_vs_sdpa:weird"] is not None
    assert "### peak extra memory vs raw SDPA" in (tmp_path / "mixers_cpu.md").read_text()


def test_plan_caps_quadratic_rows_and_skips_missing_forms():
    config = runner.Config(
        batch=1, dim=QUICK_D, head_dim=32, heads=1, lengths=[64, 128],
        methods=["weird", "sdpa", "sdpa-causal", "linformer-causal"], dtype="float32",
        device="cpu", repeats=1, warmup=0, cap_max_len=64, threads=1, memory=False,
        mem_jobs=1, seed=0)
    if "linformer" not in layers.available():
        config.methods.remove("linformer-causal")
    pairs, notes = runner.plan(config, mixers.OPBENCH)
    assert pairs == [("weird", 64), ("sdpa", 64), ("sdpa-causal", 64), ("weird", 128)]
    assert "sdpa not run at L=[128] (--softmax-max-len 64)." in notes
    if "linformer" in layers.available():
        assert any(n.startswith("linformer-causal not run: no causal form") for n in notes)


def _row(method: str, L: int, ms: float | None, mib: float | None) -> dict:
    return {"method": method, "L": L, "fwd_ms": None if ms is None else ms / 3,
            "fwdbwd_ms": ms, "mem_mib": mib}


def _targets(rows: list[dict]) -> dict[str, dict]:
    ratios = analysis.compute_ratios(rows, mixers.OPBENCH)
    return {t["key"]: t for t in analysis.evaluate_targets(ratios, mixers.OPBENCH)}


def test_targets_prefer_the_softmax_layer_and_fall_back_to_sdpa():
    sdpa_rows = [
        _row("dba", 4096, 100.0, 50.0), _row("sdpa", 4096, 300.0, 40.0),
        _row("relation", 16384, 500.0, 10.0), _row("sdpa", 16384, 12000.0, 400.0),
    ]
    # only raw SDPA: dba 3x faster (FAIL), more memory (FAIL); relation 24x (PASS)
    t = _targets(sdpa_rows)
    assert set(t) == {"dba_speed_4k", "dba_memory_4k", "relation_speed_16k"}
    assert t["dba_speed_4k"]["value"] == pytest.approx(3.0)
    assert t["dba_speed_4k"]["ratio"] == "fwdbwd_speedup_vs_sdpa:dba"
    assert "raw SDPA" in t["dba_speed_4k"]["baseline"]
    assert not t["dba_speed_4k"]["passed"] and not t["dba_memory_4k"]["passed"]
    assert t["relation_speed_16k"]["passed"]

    # with the softmax layer (non-causal) it is the baseline; a causal one is not
    rows = sdpa_rows + [
        _row("softmax", 4096, 500.0, 60.0), _row("softmax-causal", 16384, 1000.0, 1.0),
        _row("softmax", 16384, None, None),  # measured but failed: fall back to sdpa
    ]
    t = _targets(rows)
    assert t["dba_speed_4k"]["value"] == pytest.approx(5.0) and t["dba_speed_4k"]["passed"]
    assert t["dba_speed_4k"]["ratio"] == "fwdbwd_speedup_vs_softmax:dba"
    assert "softmax mixer layer" in t["dba_speed_4k"]["baseline"]
    assert t["dba_memory_4k"]["value"] == pytest.approx(50 / 60) and t["dba_memory_4k"]["passed"]
    assert t["relation_speed_16k"]["ratio"] == "fwdbwd_speedup_vs_sdpa:relation"

    # "less peak memory" is strict
    equal = [_row("dba", 4096, 100.0, 40.0), _row("sdpa", 4096, 300.0, 40.0)]
    assert not _targets(equal)["dba_memory_4k"]["passed"]
    # nothing at the target lengths: no targets
    assert _targets([_row("dba", 1024, 1.0, 1.0), _row("sdpa", 1024, 2.0, 1.0)]) == {}


def test_report_names_the_baseline_of_each_target():
    rows = [_row("dba", 4096, 100.0, 50.0), _row("softmax", 4096, 500.0, 60.0),
            _row("sdpa", 4096, 300.0, 40.0)]
    for r in rows:
        r.update(label=r["method"], repeats=7)
    ratios = analysis.compute_ratios(rows, mixers.OPBENCH)
    doc = {
        "benchmark": "mixers",
        "machine": {"device": "cpu", "date": "today", "command": "weirdnet bench mixers",
                    "cpu_model": "cpu", "usable_cores": 2, "python": "3", "torch": "2",
                    "torch_threads": 2, "scan_backend": "cpu", "allocator": "glibc"},
        "config": {"batch": 4, "dim": 256, "heads": 4, "dtype": "float32", "warmup": 1,
                   "memory_how": "RSS"},
        "results": rows, "ratios": ratios,
        "targets": analysis.evaluate_targets(ratios, mixers.OPBENCH), "notes": [],
    }
    text = report.render_markdown(doc)
    assert ("- **PASS** DBA fwd+bwd at L=4096 at least 4x faster than SDPA (non-causal): "
            "measured 5.00x against the softmax mixer layer (`softmax`) (needs >= 4x)") in text
    assert "### fwd+bwd speed-up vs the softmax layer" in text
    assert "| L | dba | softmax |" in text  # vs raw SDPA: a column per method
