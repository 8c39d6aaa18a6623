"""Commands from other distributions (the entry-point group ``weirdnet.commands``): the
lab's ``weirdnet bench`` is one, and without the lab installed ``weirdnet bench`` is one
line saying how to install it, exit status 2."""

import importlib.metadata
import subprocess
import sys

import pytest

from helpers.train import subprocess_env
from weirdnet import cli

LINE = ("weirdnet bench: the benchmarks are the weirdnet-lab distribution, which is not "
        "installed: pip install -e ./lab in a checkout of weirdnet")


@pytest.fixture
def no_lab(monkeypatch):
    """The environment as a user of the weirdnet wheel alone has it: no entry points."""
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [])


@pytest.mark.parametrize("argv", [["bench"], ["bench", "--help"], ["bench", "lm", "--help"],
                                  ["bench", "scan", "--quick"]], ids=" ".join)
def test_bench_without_the_lab_is_one_line_and_status_2(no_lab, capsys, argv):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == LINE + "\n"


def test_help_without_the_lab_lists_bench_and_how_to_get_it(no_lab, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    assert "bench" in capsys.readouterr().out and "weirdnet-lab" in LINE


def test_the_core_commands_run_without_the_lab(no_lab, capsys):
    assert cli.main(["configs"]) == 0
    assert "quickstart" in capsys.readouterr().out


_WITHOUT_LAB = """
import importlib.metadata, sys
importlib.metadata.entry_points = lambda **_: []
from weirdnet.cli import main
status = main(["bench", "suite", "--budget", "cpu"])
print(sorted(m for m in sys.modules if m.split(".")[0] == "weirdnet_lab"))
sys.exit(status)
"""


def test_in_a_fresh_process_without_the_lab_no_lab_module_is_imported():
    done = subprocess.run([sys.executable, "-c", _WITHOUT_LAB], env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == LINE + "\n"
    assert done.stdout.strip() == "[]"


def test_the_lab_adds_bench_through_its_entry_point():
    """With the lab installed (``pip install -e ./lab``) its group is a command."""
    points = importlib.metadata.entry_points(group=cli.PLUGIN_GROUP)
    if "bench" not in {p.name for p in points}:
        pytest.skip("the lab (weirdnet-lab) is not installed: pip install -e ./lab")
    commands = cli.plugin_commands()
    assert set(commands["bench"].COMMANDS) >= {"scan", "lm", "suite", "gpu"}
    assert cli._missing_plugin(["bench", "lm"]) is None
