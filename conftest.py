"""The two test tiers (issue 74), for every test folder (tests/ and lab/tests/).

- ``python -m pytest -q`` runs the fast tier: every test not marked ``slow``; each
  module's behaviour, in minutes (the README gives the recorded time).
- ``python -m pytest -q --slow`` runs both tiers (the whole suite); ``-m slow`` runs only
  the slow tier, and any other ``-m`` expression selects as written.  A test named by its
  id on the command line (``path::name``) runs even when it is marked slow.
- ``PYTEST_ADDOPTS=--slow`` does the same from the environment, as for any pytest option.

The ``slow`` marker (pyproject.toml) is for subprocess trainings, spawned process groups,
torch.compile, the Triton interpreter, 64K stability runs and the large sizes of a
parametrized check whose small sizes stay in the fast tier.  docs/testing.md says how a
new test is placed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_SLOW_LEFT = pytest.StashKey[int]()
"""How many slow tests the fast tier left out (for the summary line)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (the whole suite); "
                          "`-m slow` runs only them")


def _named_ids(config: pytest.Config) -> list[str]:
    """The test ids named on the command line (``path::name``, with or without
    parameters), as node ids relative to the root directory."""
    named = []
    for arg in config.args:
        if "::" not in arg:
            continue
        path, rest = arg.split("::", 1)
        full = (Path(config.invocation_params.dir) / path).resolve()
        try:
            path = full.relative_to(config.rootpath).as_posix()
        except ValueError:
            continue
        named.append(f"{path}::{rest}")
    return named


def _named(nodeid: str, named: list[str]) -> bool:
    return any(nodeid == n or nodeid.startswith((n + "::", n + "[")) for n in named)


@pytest.hookimpl(trylast=True)  # after -k and the other selections: count what is left
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the slow tier unless --slow or a -m expression asks for it."""
    if config.getoption("--slow") or config.getoption("markexpr"):
        return
    named = _named_ids(config)
    keep, slow = [], []
    for item in items:
        is_slow = item.get_closest_marker("slow") and not _named(item.nodeid, named)
        (slow if is_slow else keep).append(item)
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = keep
        config.stash[_SLOW_LEFT] = len(slow)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    left = config.stash.get(_SLOW_LEFT, 0)
    if left:
        terminalreporter.write_line(
            f"fast tier: {left} slow tests not run (`python -m pytest -q --slow` runs "
            "both tiers, `-m slow` the slow tier alone)")


class _KeepModuleFixturesTogether:
    """Under ``pytest-xdist --dist loadgroup`` (.ci/tiers.py's slow tier), the tests that
    use a module- or class-scoped fixture of their own module share one worker, so that
    fixture (a built wheel, a process group, a trained run) is built once; every other
    test is handed out one by one, so a long module (the Triton interpreter's) no longer
    holds one worker while the other idles, as ``--dist loadscope`` did (issue 74)."""

    @pytest.hookimpl(tryfirst=True)  # before xdist's hook, which reads the marks
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            module = item.nodeid.split("::", 1)[0]
            info = getattr(item, "_fixtureinfo", None)
            defs = info.name2fixturedefs.values() if info is not None else ()
            if any(d.scope in ("module", "class") and d.baseid.split("::", 1)[0] == module
                   for chain in defs for d in chain):
                item.add_marker(pytest.mark.xdist_group(module))


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):  # the dev extra's; the marks are its own
        config.pluginmanager.register(_KeepModuleFixturesTogether(), "weirdnet-xdist-groups")
