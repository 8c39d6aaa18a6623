"""Build and cache the C kernels of ``ops``: one shared library per C source file.

A source needs no Python or PyTorch headers: it is compiled once per machine with the
system C compiler (``$CC``, else ``cc``/``gcc``/``clang``) into
``$WEIRDNET_CACHE_DIR/kernels`` (default ``~/.cache/weirdnet/kernels``), keyed by every
C file it can include, the compiler, the flags and the CPU, and loaded with
:mod:`ctypes`.  The file is written to a temporary name and renamed, so a concurrent
reader sees a whole library or none.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = [
    "-O3",
    "-ffp-contract=off",  # no implicit FMA: results independent of vectorisation
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fPIC",
    "-shared",
    "-std=c11",
]
NATIVE_FLAG = "-march=native"


def cache_dir() -> Path:
    """Where the built libraries are kept."""
    root = os.environ.get("WEIRDNET_CACHE_DIR") or Path.home() / ".cache" / "weirdnet"
    return Path(root) / "kernels"


def find_compiler() -> str | None:
    """Path of the C compiler to use, or None."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_signature() -> str:
    """CPU model and feature flags, so a cache shared between machines stays valid."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    keep = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(keep)))


def _compile(compiler: str, command: list[str], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([compiler, *command[:-1], "-o", tmp, command[-1], "-lm"], check=True,
                       capture_output=True, text=True, timeout=300)
        os.replace(tmp, target)  # atomic: a concurrent reader sees all or nothing
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(source: Path, include_dirs: tuple[Path, ...] = ()) -> ctypes.CDLL:
    """Compile ``source`` (C11; ``#include`` may reach ``include_dirs``) and load it.

    Tries ``-march=native`` first, then without it.  RuntimeError, with every compiler
    message, when no compiler is found or no build succeeds."""
    compiler = find_compiler()
    if compiler is None:
        raise RuntimeError("no C compiler found (set $CC or install gcc)")
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    folders = (source.parent, *include_dirs)
    sources = "\0".join(p.read_text() for d in folders for p in sorted(d.glob("*.[ch]")))
    includes = [f"-I{d}" for d in include_dirs]
    errors = []
    for flags in (FLAGS + [NATIVE_FLAG], FLAGS):
        key = hashlib.sha256(
            "\0".join([str(source.name), sources, version, " ".join(flags),
                       _cpu_signature()]).encode()
        ).hexdigest()[:20]
        target = cache_dir() / f"{source.stem}_{key}.so"
        try:
            if not target.exists():
                _compile(compiler, [*flags, *includes, str(source)], target)
            return ctypes.CDLL(str(target))
        except (OSError, subprocess.SubprocessError) as err:
            detail = getattr(err, "stderr", "") or ""
            errors.append(f"{' '.join(flags)}: {err} {detail}".strip())
    raise RuntimeError(f"building the C kernel {source.name} failed:\n" + "\n".join(errors))
