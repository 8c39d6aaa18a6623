"""weirdnet.train.plot: reading run logs and drawing their curves."""

from __future__ import annotations

import argparse
import json
import math
import re
import struct
import warnings

import pytest

from weirdnet.train import plot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _events(steps=range(10, 101, 10), eval_every=50, task="lm", start=0, resumed=None,
            loss0=3.0, metrics=("loss", "bpc", "perplexity")):
    yield {"event": "start", "step": start, "time": 1.0, "run": "r", "task": task,
           "world_size": 1, "parameters": 1234, "resumed_from": resumed}
    for step in steps:
        loss = loss0 / (1 + step / 50)
        yield {"event": "train", "step": step, "time": 1.0 + step, "elapsed": step / 10,
               "loss": loss, "lr": 1e-3, "grad_norm": 0.5, "tokens_per_s": 4e4,
               "samples_per_s": 150.0, "unknown_extra": [1, 2]}
        if step % eval_every == 0:
            values = {"loss": loss * 1.1, "bpc": loss * 1.1 / math.log(2),
                      "perplexity": math.exp(loss * 1.1), "accuracy": 1 - loss / 4}
            yield {"event": "eval", "step": step, "time": 2.0 + step, "split": "val",
                   "metrics": {m: values[m] for m in metrics}}


def _write(run, *events, tail: str = ""):
    run.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(e) + "\n" for e in events) + tail
    (run / "log.jsonl").write_text(text, encoding="utf-8")
    return run


@pytest.fixture
def resumed_run(tmp_path):
    """Steps 10..60 with an eval at 50, a crash, a resume from step 40 redoing 50..100
    with other losses, and a half-written last line."""
    first = list(_events(range(10, 61, 10)))
    second = list(_events(range(50, 101, 10), start=40, resumed="ckpt/step40", loss0=2.0))
    end = {"event": "end", "step": 100, "time": 500.0, "best_step": 100,
           "results": {"val": {"loss": 1.0}, "test": {"loss": 1.1}}}
    return _write(tmp_path / "quickstart", *first, *second, end,
                  tail='{"event": "train", "step": 11')


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    try:
        from PIL import Image
    except ImportError:
        return width, height
    with Image.open(path) as image:
        image.verify()
    return width, height


def test_read_log_last_wins_and_warns_on_bad_line(resumed_run):
    with pytest.warns(UserWarning, match=r"log\.jsonl:\d+: skipped a malformed line"):
        log = plot.read_log(resumed_run)
    assert log.name == "quickstart" and log.task == "lm"
    steps = [p.step for p in log.train]
    assert steps == list(range(10, 101, 10))  # no duplicate, sorted
    by_step = {p.step: p for p in log.train}
    assert by_step[40].loss == pytest.approx(3.0 / 1.8)  # from before the resume
    assert by_step[50].loss == pytest.approx(2.0 / 2)  # redone after it: last wins
    assert by_step[60].lr == 1e-3 and by_step[60].targets_per_s == 4e4  # legacy tokens_per_s
    assert math.isnan(by_step[60].input_tokens_per_s) and by_step[60].samples_per_s == 150
    assert [s for s, _ in log.evals["val"]] == [50, 100]
    assert log.evals["val"][0][1]["loss"] == pytest.approx(1.1)
    assert log.metrics("val") == ["loss", "bpc", "perplexity"]
    assert log.results == {"val": {"loss": 1.0}, "test": {"loss": 1.1}}
    assert log.best_step == 100
    # the file itself works too, and the warning names file and line
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert plot.read_log(resumed_run / "log.jsonl").train == log.train
    assert len(caught) == 1
    n_lines = len((resumed_run / "log.jsonl").read_text().splitlines())
    assert f"{resumed_run / 'log.jsonl'}:{n_lines}:" in str(caught[0].message)


def test_read_log_drops_points_a_resume_has_not_redone_yet(tmp_path):
    """Crashed at 60, resumed from 40, now at 50: the old 60 is stale and not shown."""
    run = _write(tmp_path / "r", *_events(range(10, 61, 10)),
                 *_events([50], start=40, loss0=2.0))
    log = plot.read_log(run)
    assert [p.step for p in log.train] == [10, 20, 30, 40, 50]
    assert [s for s, _ in log.evals["val"]] == [50]
    assert log.results is None


def test_read_log_ignores_unknown_events_and_keys(tmp_path):
    run = _write(tmp_path / "r", *_events([10]), {"event": "checkpoint", "step": 10},
                 {"event": "train", "step": 20, "time": 3.0, "loss": None})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        log = plot.read_log(run)
    assert [p.step for p in log.train] == [10, 20] and math.isnan(log.train[1].loss)


@pytest.mark.parametrize("line", ["[1, 2]", '{"step": 3}', '{"event": "train", "step": "x"}'])
def test_read_log_skips_lines_without_event_or_integer_step(tmp_path, line):
    run = _write(tmp_path / "r", *_events([10]), tail=line + "\n")
    with pytest.warns(UserWarning, match=r"log\.jsonl:\d+: skipped"):
        assert len(plot.read_log(run).train) == 1


def test_missing_log(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a run directory: no log.jsonl"):
        plot.read_log(tmp_path)
    with pytest.raises(FileNotFoundError, match="weirdnet train"):
        plot.plot_runs([tmp_path / "nowhere"])


def test_order_metrics_and_ema():
    names = ["zeta", "accuracy", "alpha", "perplexity", "loss", "exact_match"]
    assert plot.order_metrics(names) == ["loss", "perplexity", "accuracy", "exact_match",
                                         "alpha", "zeta"]
    assert plot.ema([1.0, 3.0, math.nan, 3.0], 0.5) == [1.0, 2.0, 2.0, 2.5]
    assert plot.ema([4.0, 2.0], 0.0) == [4.0, 2.0]


def test_read_log_warns_once_however_many_lines_are_malformed(tmp_path):
    """A file that is mostly not a log: one warning naming the first bad line and the
    count of the rest, and the good lines still read."""
    run = _write(tmp_path / "noisy", *_events(range(10, 31, 10)))
    with (run / "log.jsonl").open("a") as handle:
        handle.write("".join(f"garbage {i}\n" for i in range(500)) + "[1, 2]\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = plot.read_log(run)
    assert len(caught) == 1
    assert re.search(r"log\.jsonl:\d+: skipped a malformed line \(.+\) and 500 more$",
                     str(caught[0].message))
    assert [p.step for p in log.train] == [10, 20, 30]


def test_plot_one_run_writes_png_in_the_run(resumed_run):
    pytest.importorskip("matplotlib")
    with pytest.warns(UserWarning, match="malformed"):
        path = plot.plot_runs([resumed_run])
    assert path == resumed_run / "curves.png"
    width, height = _png_size(path)
    assert width > 3 * height  # train loss + loss, bpc, perplexity side by side
    assert not list(resumed_run.glob(".curves.png.*"))  # no temporary file left


def test_plot_two_runs_and_metric_selection(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    a = _write(tmp_path / "a", *_events(task="classification", metrics=("loss", "accuracy")))
    b = _write(tmp_path / "b", *_events(eval_every=20, metrics=("loss", "accuracy")))
    monkeypatch.chdir(tmp_path)
    path = plot.plot_runs([a, b])
    assert path.resolve() == tmp_path / "curves.png"
    three = _png_size(path)
    out = plot.plot_runs([a, b], out=tmp_path / "sub" / "one.png", metrics=["accuracy"])
    two = _png_size(out)
    assert two[1] == three[1] and 1 < two[0] / two[1] < three[0] / three[1]
    with pytest.raises(ValueError, match="no run has evaluation metric.*bpc.*available: "
                                         "loss, accuracy"):
        plot.plot_runs([a, b], metrics=["bpc"])


def test_plot_needs_training_steps(tmp_path):
    run = _write(tmp_path / "fresh", *_events([]))
    with pytest.raises(ValueError, match="run fresh .* no training steps"):
        plot.plot_runs([run])
    with pytest.raises(ValueError, match="smooth"):
        plot.plot_runs([run], smooth=1.0)


def _parse(*argv):
    parser = argparse.ArgumentParser(prog="weirdnet plot")
    plot.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_arguments():
    args = _parse("runs/a", "runs/b", "--metrics", "loss, accuracy", "--smooth", "0.5")
    assert args.runs == ["runs/a", "runs/b"] and args.metrics == ["loss", "accuracy"]
    assert args.smooth == 0.5 and args.out is None
    for bad in (["--smooth", "1"], ["--smooth", "-0.1"], ["--metrics", ","], []):
        with pytest.raises(SystemExit):
            _parse("runs/a", *bad) if bad else _parse()
    assert "weirdnet plot runs/quickstart" in plot.DESCRIPTION


def test_run_exit_codes(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = _write(tmp_path / "r", *_events(), tail="{half")
    assert plot.run(_parse(str(run), "--out", str(tmp_path / "x.png")), []) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"wrote {tmp_path / 'x.png'}",
                                         "r: median samples/s 150.0, targets/s 40,000.0"]
    assert captured.err.count("skipped a malformed line") == 1
    assert "weirdnet plot: warning:" in captured.err and "log.jsonl:" in captured.err
    assert (tmp_path / "x.png").read_bytes()[:8] == PNG_SIGNATURE

    assert plot.run(_parse(str(tmp_path / "missing")), []) == 2
    assert "weirdnet plot: " in capsys.readouterr().err
    assert plot.run(_parse(str(run), "--metrics", "nope"), []) == 2
    assert "no run has evaluation metric(s) nope" in capsys.readouterr().err


def test_run_without_matplotlib(tmp_path, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    run = _write(tmp_path / "r", *_events())
    with pytest.raises(ImportError, match=r"pip install 'weirdnet\[plot\]'"):
        plot.plot_runs([run])
    assert plot.run(_parse(str(run)), []) == 2
    assert capsys.readouterr().err.startswith("weirdnet plot needs matplotlib: pip")
