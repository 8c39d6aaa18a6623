"""weirdnet bench speed: one process per (mechanism, length), ratios to the Transformer,
the skip rule for slow mechanisms, and the written table and JSON."""

from __future__ import annotations

import json

import pytest

from helpers.train import run_cli
from weirdnet_lab.speed import measure
from weirdnet_lab.speed_report import markdown, ratio

pytestmark = pytest.mark.slow  # benchmark child processes

TINY = ["--dim", "16", "--depth", "1", "--d-ff", "32", "--heads", "2", "--batch", "2",
        "--steps", "1", "--warmup", "0"]


def test_measure_one_cell_in_process():
    row = measure({"device": "cpu", "mechanism": "weird-b", "length": 37, "dim": 16,
                   "depth": 2, "d_ff": 32, "heads": 2, "batch": 2, "steps": 2,
                   "warmup": 1})
    assert row["status"] == "ok" and row["step_s"] > 0 and row["memory_mib"] >= 0
    assert row["parameters"] > 0


def test_speed_command_writes_table_and_json(tmp_path):
    out = run_cli("bench", "speed", "--lengths", "64", "128", "--mechanisms", "weird-a,dba",
                  "--out", str(tmp_path), *TINY, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "speed_cpu.json").read_text())
    mechanisms = {r["mechanism"] for r in result["rows"]}
    assert mechanisms == {"weird-a", "dba", "softmax"}  # the reference is always added
    assert all(r["status"] == "ok" for r in result["rows"])
    text = (tmp_path / "speed_cpu.md").read_text()
    rows = {(r["mechanism"], r["length"]): r for r in result["rows"]}
    for mechanism, length, key in (("weird-a", 64, "steps_per_s"), ("dba", 128, "memory_mib")):
        want = rows[(mechanism, length)][key] / rows[("softmax", length)][key]
        assert ratio(result, mechanism, length, key) == pytest.approx(want, rel=1e-12)
        assert f"{want:.2f}" in text  # the report prints the ratio the rows give
    assert "| Weird-Net A |" in text and "DBA Table 1" in text  # ours, then the papers'
    assert text == markdown(result, "speed_cpu.png")


def test_slow_mechanisms_skip_longer_lengths(tmp_path):
    out = run_cli("bench", "speed", "--lengths", "32", "64", "--mechanisms", "softmax",
                  "--max-step-seconds", "0", "--out", str(tmp_path), *TINY, cwd=tmp_path,
                  timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "speed_cpu.json").read_text())["rows"]
    assert rows[0]["status"] == "ok" and rows[1]["status"].startswith("skipped")
    assert "| Transformer | 1.00 | skipped |" in (tmp_path / "speed_cpu.md").read_text()


def test_unknown_mechanism_is_a_clear_error(tmp_path):
    out = run_cli("bench", "speed", "--mechanisms", "mamba3", "--out", str(tmp_path),
                  cwd=tmp_path)
    assert out.returncode == 2 and "unknown mechanism 'mamba3'" in out.stderr
    # a transformers peer is a language model: classification refuses it, naming the task
    out = run_cli("bench", "speed", "--mechanisms", "mamba", "--out", str(tmp_path),
                  cwd=tmp_path)
    assert out.returncode == 2 and "language models only" in out.stderr


def test_language_model_speed_with_a_peer_against_the_transformerpp(tmp_path):
    """--task lm: matched byte-level LMs, a transformers peer among them, ratios against
    the Transformer++ (added as the reference), tokens/s and parameters in the report."""
    pytest.importorskip("transformers")
    out = run_cli("bench", "speed", "--task", "lm", "--lengths", "32", "--mechanisms",
                  "weird-a,rwkv", "--out", str(tmp_path), "--steps", "1", "--warmup", "0",
                  cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "speed_lm_cpu.json").read_text())
    assert result["settings"]["reference"] == "transformerpp"
    rows = {r["mechanism"]: r for r in result["rows"]}
    assert set(rows) == {"weird-a", "rwkv", "transformerpp"}
    assert all(r["status"] == "ok" and r["tokens_per_s"] > 0 for r in rows.values())
    counts = [r["non_embedding_parameters"] for r in rows.values()]
    assert max(counts) <= 1.05 * min(counts) / 0.95  # each within 5% of one reference
    text = (tmp_path / "speed_lm_cpu.md").read_text()
    assert "relative to the Transformer++" in text and "| RWKV-4 (transformers) ¹ |" in text
    assert "DBA Table 1" not in text and result["machine"]["transformers"]


def test_long_context_speed_checkpoints_and_stops_at_the_budget(tmp_path):
    """--task long: checkpointed language models by length, the RSS of the timed step,
    each model's largest length within the memory budget, its tokens/s against its own at
    the shortest length, and lengths predicted over the budget skipped (not run)."""
    out = run_cli("bench", "speed", "--task", "long", "--lengths", "64", "128", "256",
                  "65536", "--mechanisms", "weird-a-long", "--dim", "32", "--d-ff", "64",
                  "--ffn-chunk", "48", "--memory-budget-gib", "0.05",
                  "--out", str(tmp_path), cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "speed_long_cpu.json").read_text())
    settings = result["settings"]
    assert (settings["checkpointing"], settings["ffn_chunk"], settings["memory"]) == \
        ("blocks", 48, "rss")
    rows = {(r["mechanism"], r["length"]): r for r in result["rows"]}
    assert all(rows[("weird-a-long", n)]["status"] == "ok" for n in (64, 128, 256))
    assert rows[("weird-a-long", 65536)]["status"].startswith("skipped (predicted")
    text = (tmp_path / "speed_long_cpu.md").read_text()
    assert "the largest length within 0.05 GiB" in text
    assert "relative to the same model at 64" in text
    assert (tmp_path / "speed_long_cpu.png").is_file()


def test_the_memory_prediction_grows_at_least_linearly_with_length():
    """A short step's RSS increase is page-level noise that can shrink from one length to
    the next; the prediction still grows at least in proportion to the length (the
    activations do), while a time that shrinks is carried forward at its larger value."""
    from weirdnet_lab.speed import _predicted_over

    done = [{"length": 128, "step_s": 0.02, "rss_mib": 2.9},
            {"length": 256, "step_s": 0.01, "rss_mib": 2.0}]
    why = _predicted_over(done, 65536, max_step_s=10.0, budget_gib=0.05)
    assert why is not None and why.startswith("predicted") and "GiB" in why
    assert _predicted_over(done, 512, max_step_s=10.0, budget_gib=0.05) is None
    assert _predicted_over(done, 65536, max_step_s=10.0, budget_gib=None) is None
