"""The command line's first seconds: ``--help`` and ``--version`` import no torch, and a
SIGINT or SIGTERM at any moment of a command's start (parser, imports, data, model)
ends it with one line on stderr and exit status 130/143, never a traceback or a silent
death."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.train import run_cli, subprocess_env, weirdnet_cmd

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.toml"
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}

# Runs in a fresh interpreter: every command's and subcommand's --help, then --version,
# through weirdnet.cli.main; prints the torch modules that were imported.
_HELP_EVERYWHERE = """
import argparse, json, sys
from weirdnet.cli import build_parser, main

def commands(parser, prefix):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield [*prefix, name]
                yield from commands(sub, [*prefix, name])

seen = []
for argv in [[], *commands(build_parser(), [])]:
    try:
        main([*argv, "--help"])
    except SystemExit as stop:
        assert stop.code == 0, (argv, stop.code)
    seen.append(" ".join(argv))
try:
    main(["--version"])
except SystemExit as stop:
    assert stop.code == 0
print(json.dumps({"helped": seen,
                  "torch": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}))
"""


def test_help_of_every_command_and_version_import_no_torch():
    """Building the parser reads every command module (bench and experiments included):
    none may import torch, or `weirdnet --version` takes seconds and a Ctrl-C meets a
    half-imported torch."""
    out = subprocess.run([sys.executable, "-c", _HELP_EVERYWHERE], env=subprocess_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"train", "eval", "bench", "bench lm", "bench suite", "bench decode",
            "export-hf"} <= set(found["helped"])
    assert found["torch"] == []


@pytest.mark.parametrize("argv", [["--version"], ["bench", "--help"], ["train", "--help"],
                                  ["bench", "lm", "--help"]], ids=" ".join)
def test_the_installed_script_imports_no_torch_for_help_and_version(argv):
    """The real program path (the ``weirdnet`` script, else ``python -m weirdnet``), with
    Python's own import log."""
    script = shutil.which("weirdnet")
    command = [script, *argv] if script else weirdnet_cmd(*argv)
    env = {**subprocess_env(), "PYTHONPROFILEIMPORTTIME": "1"}
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:")]
    assert "weirdnet.cli" in imported
    assert [m for m in imported if m.split(".")[0] == "torch"] == []


# --- the signal sweep ---------------------------------------------------------------------

DELAYS = (0.3, 1.0, 2.0, 3.5, 5.5, 8.0)
"""Seconds after the start at which the signal is sent (alternately SIGINT and SIGTERM):
interpreter start, parser, torch import, data, model, first steps."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A two-step quickstart run to evaluate, sample from and export."""
    tmp = tmp_path_factory.mktemp("sweep")
    done = run_cli("train", str(QUICKSTART), "--set", f"run.out_dir={tmp / 'runs'}",
                   "--set", "run.name=base", "--set", "train.steps=2", "--set",
                   "train.eval_every=2", "--set", "train.eval_batches=1", "--set",
                   "train.final_eval_batches=1", "--no-progress", cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "runs" / "base"


def _commands(run: Path, tmp: Path, case: str) -> dict[str, list[str]]:
    out = tmp / case
    return {
        "train": ["train", str(QUICKSTART), "--set", f"run.out_dir={out}", "--set",
                  "train.steps=100000", "--no-progress"],
        "eval": ["eval", str(run), "--split", "val"],
        "generate": ["generate", str(run), "--prompt", "def ", "--max-new-tokens", "50",
                     "--num-samples", "2"],
        "bench": ["bench", "scan", "--quick", "--out", str(out)],
        "export-hf": ["export-hf", str(run), str(out / "hf")],
    }


def _signal_at(command: list[str], delay: float, signum: int, cwd: Path
               ) -> tuple[int | None, str]:
    """Run ``weirdnet command``; send ``signum`` ``delay`` seconds after the start unless
    it has ended by then; (exit status, stderr); the status is None if the signal was
    never sent (it had ended)."""
    err_path = cwd / f"stderr-{signum}-{delay}.txt"
    with open(err_path, "w") as err:
        process = subprocess.Popen(weirdnet_cmd(*command), cwd=cwd, env=subprocess_env(),
                                   stdout=subprocess.DEVNULL, stderr=err)
        try:
            process.wait(timeout=delay)
            sent = False
        except subprocess.TimeoutExpired:
            process.send_signal(signum)
            sent = True
        try:
            status = process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
    return (status if sent else None), err_path.read_text(errors="replace")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["train", "eval", "generate", "bench", "export-hf"])
def test_a_stop_signal_in_the_first_seconds_gives_one_line_and_130_or_143(name, trained,
                                                                         tmp_path):
    if name == "export-hf" and importlib.util.find_spec("transformers") is None:
        pytest.skip("export-hf needs the hf extra: pip install 'weirdnet[hf]'")
    signals = [signal.SIGINT, signal.SIGTERM] * len(DELAYS)
    cases = []
    for i, (delay, signum) in enumerate(zip(DELAYS, signals, strict=False)):
        command = _commands(trained, tmp_path, f"case{i}")[name]
        status, err = _signal_at(command, delay, signum, tmp_path)
        cases.append((delay, signum.name, status, err))
        assert "Traceback" not in err, (delay, signum.name, err[-3000:])
        if status is None:  # ended before the signal: the later delays would too
            break
        lines = [line for line in err.splitlines() if line.strip()]
        if status == 0 and name != "train":  # finished as the signal arrived
            continue
        assert status == STATUS[signum], (delay, signum.name, status, err[-3000:])
        assert lines and lines[-1].startswith("weirdnet"), (delay, err[-3000:])
        assert signum.name in lines[-1], (delay, lines[-1])
    assert cases and cases[0][2] is not None, f"{name} ended within {DELAYS[0]} s"



def test_the_stop_line_starts_a_line_of_its_own_after_an_open_progress_bar(monkeypatch,
                                                                          capsys):
    """A progress bar left open by the stopped command (transformers' "Writing model
    shards" in export-hf) is closed first, so the one line is a line of its own."""
    from tqdm import tqdm

    from weirdnet import cli
    from weirdnet.run.signals import Interrupted

    def stopped(argv, where):
        where[0] = "weirdnet export-hf"
        tqdm(total=3, desc="Writing model shards")  # left open, as a signal leaves it
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(cli, "_run", stopped)
    assert cli.main(["export-hf", "a", "b"]) == 130
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[-1] == "weirdnet export-hf: interrupted by SIGINT"


def test_the_stop_line_starts_a_line_of_its_own_after_a_bar_that_cannot_close(monkeypatch,
                                                                               capsys):
    """A bar the signal caught half built cannot be closed: its line is ended, so the one
    line still starts a line of its own (bench scan's bar, stopped 0.3 s in)."""
    from tqdm import tqdm

    from weirdnet import cli
    from weirdnet.run.signals import Interrupted

    bars = []

    def stopped(argv, where):
        where[0] = "weirdnet bench"
        bar = tqdm(total=42, unit="meas", leave=False)
        bars.append(bar)
        monkeypatch.setattr(bar, "close", lambda: 1 / 0)  # half built: close() raises
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(cli, "_run", stopped)
    try:
        assert cli.main(["bench", "scan"]) == 130
    finally:
        for bar in bars:
            type(bar).close(bar)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[-1] == "weirdnet bench: interrupted by SIGINT"


def test_the_stop_line_starts_a_line_of_its_own_after_a_bar_tqdm_no_longer_lists(monkeypatch,
                                                                                 capsys):
    """A bar the signal caught inside its own ``__init__`` has drawn its line but is gone
    from tqdm's list of bars (CI: export-hf stopped at 2 s, "Writing model shards:   0%|"
    and the stop message on one line): the line is ended all the same."""
    from weirdnet import cli
    from weirdnet.run.signals import Interrupted

    def stopped(argv, where):
        where[0] = "weirdnet export-hf"
        sys.stderr.write("Writing model shards:   0%|          | 0/1 [00:00<?, ?it/s]")
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(cli, "_run", stopped)
    assert cli.main(["export-hf", "a", "b"]) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "weirdnet export-hf: interrupted by SIGINT"
    assert err.count("\n") == 2  # the bar's line, ended once; the one line


def test_main_called_from_code_puts_its_stderr_back(monkeypatch):
    from weirdnet import cli

    before = sys.stderr
    monkeypatch.setattr(cli, "_run", lambda argv, where: 0)
    assert cli.main(["info"]) == 0
    assert sys.stderr is before


def test_the_line_end_tracker_writes_through_and_knows_where_the_cursor_is():
    import io

    from weirdnet.run.line_end import LineEndTracker, end_the_line

    stream = io.StringIO()
    tracker = LineEndTracker(stream)
    assert not tracker.mid_line
    tracker.write("a bar  10%")
    assert tracker.mid_line
    end_the_line(tracker)
    assert stream.getvalue() == "a bar  10%\n" and not tracker.mid_line
    tracker.write("\r          \r")  # tqdm removing a bar (leave=False)
    tracker.write("")  # an empty write changes nothing
    assert not tracker.mid_line
    end_the_line(tracker)  # at a line's start: nothing written
    tracker.writelines(["one\n", "two"])
    assert tracker.mid_line and stream.getvalue().endswith("\r          \rone\ntwo")
    assert tracker.getvalue() == stream.getvalue()  # everything else is the stream's
    end_the_line(stream)  # a plain stream: left alone
    assert stream.getvalue().endswith("two")
