"""Bits per byte by context length (issue 31, item 3): the buckets, packed windows, and
``weirdnet eval --positions``."""

import math

import pytest
import torch

from weirdnet.models import BackboneConfig, LMConfig, WeirdNetLM
from weirdnet.models.lm import token_nll
from weirdnet.train.positions import (
    bucket_table,
    check_bounds,
    evaluate_truncation,
    format_table,
    position_sums,
    target_context,
    truncated_nll,
)


def _lm():
    torch.manual_seed(0)
    config = BackboneConfig(dim=16, depth=2, max_len=64, pattern="A", causal=True,
                            positions="none")
    return WeirdNetLM(LMConfig(config)).eval()


def test_context_counts_the_bytes_a_target_sees():
    tokens = torch.zeros(1, 6, dtype=torch.long)
    assert target_context({"tokens": tokens}).tolist() == [[1, 2, 3, 4, 5]]
    packed = {"tokens": tokens, "doc_ids": torch.tensor([[0, 0, 0, 1, 1, 1]])}
    assert target_context(packed).tolist() == [[1, 2, 0, 1, 2]]  # a new document: 0


def test_buckets_split_the_loss_exactly():
    model = _lm()
    tokens = torch.randint(0, 256, (2, 41), generator=torch.Generator().manual_seed(1))
    bounds = check_bounds([0, 4, 16])
    sums = position_sums(model, {"tokens": tokens}, bounds)
    with torch.no_grad():
        nll = token_nll(model(tokens[:, :-1]).logits, tokens[:, 1:])
    # contexts 1..40: (0, 4] (4, 16] (16, ...), upper edges included
    assert sums["targets@0"] == 2 * 4 and sums["targets@4"] == 2 * 12
    assert sums["targets@16"] == 2 * 24
    assert math.isclose(sum(sums[f"nll@{b}"] for b in bounds), float(nll.sum()),
                        rel_tol=1e-6)
    assert math.isclose(sums["nll@0"], float(nll[:, :4].sum()), rel_tol=1e-6)
    rows = bucket_table(sums, bounds)
    assert [(r["from"], r["to"]) for r in rows] == [(0, 4), (4, 16), (16, None)]
    assert "| 16+ | 48 |" in format_table(rows)
    whole = position_sums(model, {"tokens": tokens[:, :17]}, bounds)  # a window of 16
    assert whole["targets@16"] == 0 and whole["targets@4"] == 2 * 12
    with pytest.raises(ValueError, match="start at 0 and increase"):
        check_bounds([1, 4])


def test_eval_reports_bits_per_byte_by_context(tmp_path, capsys):
    from weirdnet.cli import main

    model = _lm()
    model.save(tmp_path / "model")
    status = main(["eval", str(tmp_path / "model"), "--set", "data.dataset=python-stdlib",
                   "--set", "data.options={seq_len = 48}", "--split", "val", "--limit", "3",
                   "--positions", "0", "8", "32"])
    assert status == 0
    out = capsys.readouterr().out
    assert "bits per byte by context length (val)" in out and "| 8–32 |" in out


def test_eval_reports_the_truncation_test(tmp_path, capsys):
    from weirdnet.cli import main

    model = _lm()
    model.save(tmp_path / "model")
    common = ["eval", str(tmp_path / "model"), "--set", "data.dataset=python-stdlib",
              "--set", "data.options={seq_len = 48}", "--split", "val", "--limit", "5"]
    assert main([*common, "--truncation", "4", "16", "--span", "8"]) == 0
    out = capsys.readouterr().out
    assert "the last 8 bytes of each window with less context visible (val)" in out
    assert "| 4 | 5 |" in out and "| 16 | 5 | " in out
    assert main([*common, "--truncation", "60", "--span", "8"]) == 2
    assert "--truncation needs windows of 68 bytes" in capsys.readouterr().err


@pytest.mark.parametrize("options, line", [
    (["--truncation", "0"], "--truncation contexts and --span must be >= 1"),
    (["--truncation", "4", "--span", "0"], "--truncation contexts and --span must be >= 1"),
    (["--span", "8"], "--span applies to --truncation only"),
    (["--truncation", "60", "--span", "8"], "--truncation needs windows of 68 bytes"),
])
def test_eval_refuses_a_truncation_test_before_it_evaluates(tmp_path, capsys, monkeypatch,
                                                            options, line):
    """One line, exit status 2, and no split evaluated first."""
    import weirdnet.train.evaluation
    from weirdnet.cli import main

    def no_evaluation(*args, **kwargs):
        raise AssertionError("a split was evaluated before the options were checked")

    monkeypatch.setattr(weirdnet.train.evaluation, "evaluate", no_evaluation)
    model = _lm()
    model.save(tmp_path / "model")
    assert main(["eval", str(tmp_path / "model"), "--set", "data.dataset=python-stdlib",
                 "--set", "data.options={seq_len = 48}", "--split", "val", *options]) == 2
    assert line in capsys.readouterr().err


def test_one_pass_gives_the_split_metrics_and_the_buckets():
    """evaluate_positions: the metrics evaluate() gives, from the same single pass."""
    from weirdnet.data.registry import get
    from weirdnet.run.processes import Processes
    from weirdnet.train.evaluation import evaluate
    from weirdnet.train.positions import evaluate_positions

    model = _lm()
    data = get("python-stdlib", "val", seq_len=48)
    processes = Processes(device=torch.device("cpu"))
    metrics, rows = evaluate_positions(model, data, 2, processes, (0, 8, 32), limit=5)
    want = evaluate(model, data, data.info, 2, processes, 5)
    assert metrics.keys() == want.keys()
    for key, value in want.items():
        assert math.isclose(metrics[key], value, rel_tol=1e-6), key
    assert sum(r["targets"] for r in rows) == 5 * 48


def test_truncation_scores_the_same_bytes_with_less_context():
    model = _lm()
    tokens = torch.randint(0, 256, (41,), generator=torch.Generator().manual_seed(4))
    means = truncated_nll(model, tokens, (4, 16), 8)
    for context in (4, 16):
        piece = tokens[40 - 8 - context:]
        with torch.no_grad():
            logits = model(piece[None, :-1]).logits[0, -8:]
        want = float(token_nll(logits, piece[-8:]).mean())
        assert math.isclose(means[context], want, rel_tol=1e-5)
    assert means[4] != means[16]  # the same 8 bytes, seen with 4 or 16 before them
    with pytest.raises(ValueError, match="cannot hold 32 bytes of context and 16"):
        truncated_nll(model, tokens, (32,), 16)


def test_truncation_skips_windows_that_cross_a_document():
    model = _lm()
    g = torch.Generator().manual_seed(5)
    inside = {"tokens": torch.randint(0, 256, (25,), generator=g),
              "doc_ids": torch.zeros(25, dtype=torch.long)}
    across = {"tokens": torch.randint(0, 256, (25,), generator=g),
              "doc_ids": (torch.arange(25) >= 10).long()}
    short = {"tokens": inside["tokens"][:20], "doc_ids": inside["doc_ids"][:20]}
    model.train()
    result = evaluate_truncation(model, [inside, across, inside, short],
                                 torch.device("cpu"), (4, 16), 8)
    assert model.training  # its mode is restored
    assert (result["contexts"], result["span"], result["windows"]) == ([4, 16], 8, 2)
    assert result["bpc"]["4"][0] == result["bpc"]["4"][1] > 0  # the same window twice
    with pytest.raises(ValueError, match="no window of the split lies inside one document"):
        evaluate_truncation(model, [across], torch.device("cpu"), (4, 16), 8)
