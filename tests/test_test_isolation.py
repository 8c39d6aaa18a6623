"""conftest's ``isolated`` fixture: a test that leaves process-wide state changed (a
compile config, the environment, torch's thread count) fails by name, the state is put
back, and the next test sees it as it was; a test that patches with a context manager
or monkeypatch passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.train import subprocess_env

_LEAKY_TESTS = '''
import os

import torch
import torch._inductor.config


def test_leaks_a_compile_config():
    torch._inductor.config.force_disable_caches = True


def test_sees_the_compile_config_put_back():
    assert torch._inductor.config.force_disable_caches is False


def test_leaks_the_environment():
    os.environ["WEIRDNET_LEAKED"] = "1"


def test_sees_the_environment_put_back():
    assert "WEIRDNET_LEAKED" not in os.environ


def test_leaks_the_thread_count():
    torch.set_num_threads(torch.get_num_threads() + 1)


def test_patches_in_a_block():
    with torch._inductor.config.patch(force_disable_caches=True):
        assert torch._inductor.config.force_disable_caches is True


def test_patches_with_monkeypatch(monkeypatch):
    monkeypatch.setenv("WEIRDNET_LEAKED", "1")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # module attributes: fine
'''


def test_a_leaking_test_fails_and_the_next_one_finds_the_state_put_back(tmp_path):
    conftest = Path(__file__).with_name("conftest.py")
    (tmp_path / "conftest.py").write_text(conftest.read_text())
    (tmp_path / "test_leaky.py").write_text(_LEAKY_TESTS)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p",
                          "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                         cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True,
                         timeout=300)
    summary = {}
    for line in out.stdout.splitlines():
        outcome, _, rest = line.partition(" ")
        if outcome in ("PASSED", "ERROR", "FAILED") and "::" in rest:
            summary.setdefault(rest.split("::")[1].split(" ")[0], set()).add(outcome)
    assert summary == {
        "test_leaks_a_compile_config": {"PASSED", "ERROR"},  # the call passed, teardown not
        "test_sees_the_compile_config_put_back": {"PASSED"},
        "test_leaks_the_environment": {"PASSED", "ERROR"},
        "test_sees_the_environment_put_back": {"PASSED"},
        "test_leaks_the_thread_count": {"PASSED", "ERROR"},
        "test_patches_in_a_block": {"PASSED"},
        "test_patches_with_monkeypatch": {"PASSED"},
    }, out.stdout[-4000:]
    # force_disable_caches lives in torch.compiler.config (inductor's name is an alias)
    assert "config.force_disable_caches: False -> True" in out.stdout
    assert "environment: " in out.stdout and "torch threads: " in out.stdout


def test_monkeypatch_must_not_patch_torch_config_modules():
    """Why the compile tests use ``config.patch``: from pytest 9.2, monkeypatch's undo
    deletes an attribute that was not in the module's ``__dict__``, and a torch config
    module keeps its values elsewhere, so the undo removes the setting ("does not exist")
    instead of restoring it; every later compile then fails.  No test may do that."""
    import re

    pattern = re.compile(r"monkeypatch\.setattr\(\s*torch\.(_inductor|_dynamo|compiler|"
                         r"_functorch)\.config")
    offenders = [path.name for path in Path(__file__).parent.rglob("test_*.py")
                 if pattern.search(path.read_text(encoding="utf-8"))]
    assert offenders == [], offenders
