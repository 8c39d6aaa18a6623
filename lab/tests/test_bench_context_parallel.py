"""weirdnet bench context-parallel (issue 64, Deliver 4): a tiny run through the command
line (torchrun, gloo, P = 1 and 2) whose record holds the memory, speed and the bytes
sent, equal to the formula, beside ring attention's; the plan and its one-line errors."""

from __future__ import annotations

import json

import pytest

from helpers.train import run_cli
from weirdnet_lab.context_parallel.report import formula_bytes, ring_bytes


@pytest.mark.slow  # a benchmark child trains on a spawned process group
def test_quick_run_writes_record_report_and_plot(tmp_path):
    done = run_cli("bench", "context-parallel", "--quick", "--models", "weird-a",
                   "--halos", "keep", "resend", "--out", str(tmp_path), cwd=tmp_path,
                   timeout=600)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "context-parallel"
    record = json.loads((folder / "context_parallel.json").read_text())
    rows = {(r["P"], r["halos"]): r for r in record["rows"]}
    assert sorted(rows) == [(1, "keep"), (2, "keep"), (2, "resend")] and record["quick"]
    for r in rows.values():
        assert r["length"] == 512 and r["peak_rss_mib"] > 0 and r["tokens_per_s"] > 0
    for halos in ("keep", "resend"):
        sharded = rows[2, halos]
        assert sharded["shards"] == [256, 256] and sharded["weird_layers"] == 2
        want = formula_bytes([256, 256], 2, 32, halos)
        assert sharded["sent_bytes"] == want == sharded["formula_bytes"], halos
        assert sharded["sent_bytes"][0] > 0 and sharded["sent_bytes"][1] > 0
        assert sharded["ring_bytes"] == ring_bytes(2, 256, 2, 32) > 0
    # "resend" sends the forward's halos once more (rank 0 sends only forward halos)
    assert rows[2, "resend"]["sent_bytes"][0] == 2 * rows[2, "keep"]["sent_bytes"][0]
    assert rows[1, "keep"]["sent_bytes"] == [0]
    text = (folder / "context_parallel.md").read_text()
    assert "| weird-a | 512 | 2 | resend |" in text and "Quick run" in text
    assert "## Targets (issue 64)" in text
    assert "| communication: halo bytes per step over ring attention's | P = 2, keep |" in text
    assert (folder / "context_parallel.png").stat().st_size > 0


def test_dry_run_lists_the_cells_and_bad_settings_exit_2(tmp_path):
    done = run_cli("bench", "context-parallel", "--dry-run", "--lengths", "1024",
                   "--processes", "1", "4", "--model-lengths", "weird-b-pp=2048",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and all("torch.distributed.run" in line for line in lines)
    assert '"length": 2048' in lines[-1] and "--nproc-per-node=4" in lines[-1]
    assert all('"recompute_exchanges": false' in line for line in lines)
    flagged = run_cli("bench", "context-parallel", "--dry-run", "--lengths", "1024",
                      "--processes", "4", "--halos", "keep", "resend",
                      "--recompute-exchanges", cwd=tmp_path)
    assert flagged.returncode == 0, flagged.stderr
    cells = flagged.stdout.splitlines()
    assert len(cells) == 4  # two models x two settings of halos
    assert all('"recompute_exchanges": true' in line for line in cells)
    assert sum('"halos": "keep"' in line for line in cells) == 2
    for args, message in ((["--models", "dba"], "unknown model 'dba'"),
                          (["--lengths", "4", "--processes", "4"], "does not fit L = 4"),
                          (["--model-lengths", "weird-a=x"], "NAME=L,L")):
        bad = run_cli("bench", "context-parallel", "--dry-run", *args, cwd=tmp_path)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


def test_what_a_worker_would_refuse_is_one_line_before_torchrun_starts(tmp_path):
    """Issue 72 item 9: a cell every worker refuses (rotary positions need an even head
    width; D = 66 gives two heads of 33) started torchrun, and each failed cell ended in
    torchrun's ChildFailedError traceback.  The model and its context-parallel settings
    are checked first, so no process starts and nothing is written."""
    bad = run_cli("bench", "context-parallel", "--models", "weird-b-pp", "--lengths", "64",
                  "--processes", "1", "2", "--dim", "66", "--out", str(tmp_path / "out"),
                  cwd=tmp_path)
    assert bad.returncode == 2, bad.stderr
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "ChildFailedError" not in bad.stderr, bad.stderr
    assert lines[0] == ("weirdnet bench context-parallel: weird-b-pp L=64 P=1 (--dim 66, "
                        "--depth 2): rope needs an even head width, got dim=66 / heads=2 "
                        "= 33")
    assert not (tmp_path / "out").exists()


def test_a_failed_cell_reports_the_workers_error_not_torchruns_report():
    """A failed cell's row said only "error_file: <N/A> | traceback : To enable traceback
    see: ..." (the tail of torchrun's ChildFailedError report)."""
    from weirdnet_lab.context_parallel.command import worker_error

    output = "\n".join([
        "Traceback (most recent call last):",
        '  File "worker.py", line 93, in run',
        "ValueError: rope needs an even head width, got dim=66 / heads=2 = 33",
        "E1206 05:16:46.999000 9887 api.py:1002] failed (exitcode: 1) local_rank: 0",
        "Traceback (most recent call last):",
        '  File "torch/distributed/run.py", line 1032, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "============================================================"])
    assert worker_error(output) == ("ValueError: rope needs an even head width, got dim=66 / "
                                    "heads=2 = 33")
    assert worker_error("killed\nexit") == "killed | exit"
