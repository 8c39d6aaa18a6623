"""``weirdnet bench decode``: a quick run writes a complete report."""

import json

import pytest

from weirdnet.cli import main


def test_quick_generation_benchmark_writes_its_report(tmp_path, capsys):
    assert main(["bench", "decode", "--quick", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    for model in ("weirdnet-a-small-cpu", "weirdnet-small-cpu", "gpt2-small-cpu"):
        assert f"| 512 | {model} |" in text
    doc = json.loads((tmp_path / "decode_cpu.json").read_text())
    assert {r["context"] for r in doc["results"]} == {256, 512}
    for row in doc["results"]:
        assert row["tokens_per_s"] > 0 and row["batch"] == 1
        assert (row["weird_layer_step_us"] is None) == (row["model"] == "gpt2-small-cpu")
        assert (row["softmax_layer_step_us"] is None) == (row["model"] ==
                                                          "weirdnet-a-small-cpu")
    speed = {(r["model"], r["context"]): r["tokens_per_s"] for r in doc["results"]}
    assert set(doc["ratios"]) == {"weirdnet-a-small-cpu", "weirdnet-small-cpu"}
    for model, ratios in doc["ratios"].items():
        assert ratios["512"] == speed[model, 512] / speed["gpt2-small-cpu", 512]
    assert "Tokens/s relative to gpt2-small-cpu" in text
    assert (tmp_path / "decode_cpu.md").read_text() == text


def test_a_batch_decodes_together(tmp_path, capsys):
    assert main(["bench", "decode", "--quick", "--batch", "3", "--models",
                 "weirdnet-a-small-cpu", "--out", str(tmp_path)]) == 0
    assert "- batch 3," in capsys.readouterr().out
    doc = json.loads((tmp_path / "decode_cpu.json").read_text())
    assert doc["config"]["batch"] == 3
    assert all(r["batch"] == 3 and r["tokens_per_s"] > 0 for r in doc["results"])
    with pytest.raises(SystemExit) as stop:  # argparse: --batch has a floor of 1
        main(["bench", "decode", "--quick", "--batch", "0", "--out", str(tmp_path / "zero")])
    assert stop.value.code == 2 and not (tmp_path / "zero").exists()


def test_bench_lm_models_and_a_transformers_peer_decode_side_by_side(tmp_path, capsys):
    """--models takes bench lm's matched models; a peer decodes through its own cached
    generate, timed between tokens; the last model is the baseline of the ratios."""
    pytest.importorskip("transformers")
    assert main(["bench", "decode", "--quick", "--models", "weird-a,llama,transformerpp",
                 "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    doc = json.loads((tmp_path / "decode_cpu.json").read_text())
    rows = {(r["model"], r["context"]): r for r in doc["results"]}
    assert rows["llama", 512]["generate"] == "transformers"
    assert rows["llama", 512]["tokens_per_s"] > 0 and rows["llama", 512]["prefill_s"] > 0
    assert rows["weird-a", 512]["weird_layer_step_us"] is not None
    assert set(doc["ratios"]) == {"weird-a", "llama"}
    assert "Tokens/s relative to transformerpp" in text and "own cached greedy" in text
    assert main(["bench", "decode", "--quick", "--models", "mamba3", "--out",
                 str(tmp_path / "bad")]) == 2


def test_too_long_context_is_a_clear_error(tmp_path, capsys):
    """One line, exit status 2, before the output folder is touched."""
    out = tmp_path / "reports"
    assert main(["bench", "decode", "--contexts", "20000", "--new-tokens", "8",
                 "--models", "weirdnet-small-cpu", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "weirdnet bench: weirdnet-small-cpu: context 20000 must exceed the 8 new tokens "
        "and stay within its max_len=16384\n")
    assert not out.exists()


def test_the_old_spellings_are_gone(capsys):
    """`bench generate` and `data generate` were renamed in 0.1 (now `bench decode` and
    `data build`); the aliases are gone, and argparse names the valid choices."""
    for command in (["bench", "generate"], ["data", "generate", "listops"]):
        with pytest.raises(SystemExit) as stop:
            main(command)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "invalid choice: 'generate'" in err and ("decode" in err or "build" in err)


def test_cuda_graph_rows_are_marked_and_decode_the_same_way(tmp_path, capsys):
    """--cuda-graph: Weird-Net A takes the static graph step (on a CPU run eagerly), the
    GPT-2 baseline (softmax KV caches) decodes as usual; the report marks the rows."""
    assert main(["bench", "decode", "--quick", "--cuda-graph", "--contexts", "256",
                 "--models", "weirdnet-a-small-cpu,gpt2-small-cpu",
                 "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    doc = json.loads((tmp_path / "decode_cpu.json").read_text())
    assert doc["config"]["cuda_graph"] is True
    graph = {r["model"]: r["cuda_graph"] for r in doc["results"]}
    assert graph == {"weirdnet-a-small-cpu": True, "gpt2-small-cpu": False}
    assert all(r["tokens_per_s"] > 0 for r in doc["results"])
    assert "| weirdnet-a-small-cpu (CUDA graph) |" in text and "| gpt2-small-cpu |" in text
