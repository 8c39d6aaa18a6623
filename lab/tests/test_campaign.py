"""lab/benchmarks/campaign.sh: every command of its lanes is one the CLI accepts, naming
models and options that exist (the lanes are rerun across sessions to resume)."""

import shlex
import subprocess
from pathlib import Path

import pytest

from weirdnet.cli import build_parser
from weirdnet_lab.variants import get_variant

SCRIPT = Path(__file__).resolve().parents[2] / "lab" / "benchmarks" / "campaign.sh"


def _commands() -> list[list[str]]:
    listing = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True,
                             text=True, check=True).stdout
    return [shlex.split(line) for line in listing.splitlines() if line.startswith("weirdnet ")]


def test_every_lane_command_parses_and_names_known_models():
    commands = _commands()
    assert {c[2] for c in commands} >= {"lm", "recall", "context", "suite"}
    parser = build_parser()
    for command in commands:
        args = parser.parse_args(command[1:])
        names = getattr(args, "mechanisms", None) or ""  # suite: already a list
        for name in names.split(",") if isinstance(names, str) else names:
            if name:
                get_variant(name)  # ValueError for an unknown model


def test_an_unknown_lane_is_a_usage_error():
    out = subprocess.run(["bash", str(SCRIPT), "nope"], capture_output=True, text=True)
    assert out.returncode == 2 and "usage" in out.stderr


@pytest.mark.parametrize("lane", ["lm", "zoology", "context", "listops"])
def test_each_lane_lists_commands(lane):
    listing = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True,
                             text=True, check=True).stdout
    assert f"# {lane}\nweirdnet bench" in listing


@pytest.mark.parametrize("code,calls", [(130, 1), (143, 1), (1, None), (0, None)])
def test_a_stopped_command_ends_the_lane_and_a_failed_one_does_not(tmp_path, code, calls):
    """A `weirdnet bench` stopped by SIGINT/SIGTERM (130/143) ends the lane; another
    failure is reported and the lane goes on (a stand-in `weirdnet` on PATH)."""
    log = tmp_path / "calls"
    fake = tmp_path / "weirdnet"
    fake.write_text(f"#!/usr/bin/env bash\necho \"$*\" >> {log}\nexit {code}\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(["bash", str(SCRIPT), "context"], capture_output=True, text=True,
                         env=env)
    lines = log.read_text().splitlines()
    assert len(lines) == (calls or 3) and lines[0].startswith("bench context")
    assert out.returncode == code
