"""The ``dev`` extra (the README's ``pip install -e ".[dev]"``) holds the test tools and
what most tests need, not what only one path needs (issue 72: it installed about 105
packages, lm-evaluation-harness's and triton on a CPU machine among them).  Those are
extras of their own, and the tests that need them skip, naming the extra."""

import re
import tomllib

from helpers.docs import ROOT

EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"]["optional-dependencies"]


def requirements(extra: str) -> set[str]:
    """The names of the distributions ``weirdnet[extra]`` asks for, its own extras
    (``weirdnet[hf]``) followed."""
    names = set()
    for requirement in EXTRAS[extra]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)[0].lower().replace("_", "-")
        inner = re.fullmatch(r"weirdnet\[([\w,-]+)\]", requirement.split(";")[0].strip())
        names |= set().union(*map(requirements, inner[1].split(","))) if inner else {name}
    return names


def test_dev_leaves_out_the_harness_and_triton():
    dev = requirements("dev")
    assert {"pytest", "transformers"} <= dev
    assert not dev & {"lm-eval", "accelerate", "triton"}, dev & {"lm-eval", "triton"}


def test_the_extras_left_out_exist():
    assert "lm-eval" in requirements("harness") and "transformers" in requirements("harness")
    assert requirements("triton") == {"triton"}
