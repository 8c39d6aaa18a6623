"""The lab's tests share the core tests' fixtures (tests/conftest.py: the test-isolation
check every test runs under, the scan backends, one thread) and helpers (tests/helpers),
so that both suites hold every test to the same rules."""

import importlib.util
import sys
from pathlib import Path

CORE_TESTS = Path(__file__).resolve().parents[2] / "tests"
if str(CORE_TESTS) not in sys.path:
    sys.path.insert(0, str(CORE_TESTS))  # `from helpers.train import run_cli`

_spec = importlib.util.spec_from_file_location("weirdnet_core_conftest",
                                               CORE_TESTS / "conftest.py")
_core = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_core)

backend = _core.backend
isolated = _core.isolated
one_thread = _core.one_thread
