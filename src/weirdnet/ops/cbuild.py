"""Build and cache the C kernels of ``ops``: one shared library per C source file.

A source needs no Python or PyTorch headers: it is compiled once per machine with the
system C compiler (``$CC``, else ``cc``/``gcc``/``clang``) into
``$WEIRDNET_CACHE_DIR/kernels`` (default ``~/.cache/weirdnet/kernels``), keyed by every
C file it can include, the compiler, the flags and the CPU, and loaded with
:mod:`ctypes`.  The file is written to a temporary name and renamed, so a concurrent
reader sees a whole library or none.

A kernel that should exist but cannot be built (no compiler, a failed build, sources
missing from the installed package) is reported by :func:`unavailable`: one warning line
per kernel and process, naming why and the fix, or an error when
``$WEIRDNET_REQUIRE_CPU_KERNEL`` is 1 (CI sets it).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from weirdnet.run.files import apply_umask
from weirdnet.run.warnings import WeirdnetWarning, warn

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
REQUIRE_ENV = "WEIRDNET_REQUIRE_CPU_KERNEL"

_warned: set[str] = set()


class KernelBuildError(RuntimeError):
    """A C kernel that cannot be built: ``reason`` and ``fix`` are one line each; the
    message adds every compiler message."""

    def __init__(self, reason: str, fix: str, detail: str = ""):
        super().__init__(f"{reason}; {fix}" + (f"\n{detail}" if detail else ""))
        self.reason, self.fix = reason, fix


class KernelUnavailableWarning(WeirdnetWarning):
    """A C kernel could not be built and a slower path is used instead."""


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
        apply_umask(tmp, executable=True)  # mkstemp's 0600: a shared cache is readable
        os.replace(tmp, target)  # atomic: a concurrent reader sees all or nothing
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(source: Path, include_dirs: tuple[Path, ...] = ()) -> ctypes.CDLL:
    """Compile ``source`` (C11; ``#include`` may reach ``include_dirs``) and load it.

    Tries ``-march=native`` first, then without it.  :class:`KernelBuildError` (a
    RuntimeError), with every compiler message, when a source is missing, no compiler is
    found or no build succeeds."""
    _check_sources(source, include_dirs)
    compiler = find_compiler()
    if compiler is None:
        raise KernelBuildError("no C compiler found", "install one (gcc or clang) or set $CC")
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    folders = (source.parent, *include_dirs)
    sources = "\0".join(p.read_text() for d in folders for p in sorted(d.glob("*.[ch]")))
    includes = [f"-I{d}" for d in include_dirs]
    errors: list[tuple[str, BaseException]] = []
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
            errors.append((" ".join(flags), err))
    raise _build_error(compiler, source, errors)


def _build_error(compiler: str, source: Path,
                 errors: list[tuple[str, BaseException]]) -> KernelBuildError:
    """The error of a build that failed with every set of flags: its reason names the
    compiler's first error line (or the OS error)."""
    detail = "\n".join(f"{flags}: {err} {getattr(err, 'stderr', '') or ''}".rstrip()
                       for flags, err in errors)
    _, last = errors[-1]
    if isinstance(last, subprocess.SubprocessError):
        lines = [ln.strip() for ln in (getattr(last, "stderr", "") or "").splitlines()
                 if ln.strip()]
        status = f"exit status {getattr(last, 'returncode', '?')}, no message"
        first = next((ln for ln in lines if "error" in ln), lines[0] if lines else status)
        return KernelBuildError(f"{compiler} failed to build {source.name}: {first[:200]}",
                                "check the compiler, or set $CC to another one", detail)
    return KernelBuildError(f"building or loading {source.name} in {cache_dir()} failed: {last}",
                            "make that folder writable or set $WEIRDNET_CACHE_DIR", detail)


def _check_sources(source: Path, include_dirs: tuple[Path, ...]) -> None:
    missing = [str(p) for p in (source, *include_dirs) if not p.exists()]
    if missing:
        raise KernelBuildError(
            f"its C sources {', '.join(missing)} are missing from the installed package",
            "reinstall weirdnet from a wheel or source tree that ships ops/*/csrc")


def required() -> bool:
    """Whether ``$WEIRDNET_REQUIRE_CPU_KERNEL`` is 1: a kernel that cannot be built is an
    error, not a fallback."""
    return os.environ.get(REQUIRE_ENV, "").strip() == "1"


def unavailable(kernel: str, error: BaseException, fallback: str) -> None:
    """Report that the C kernel ``kernel`` could not be built (``error``, from
    :func:`build`): RuntimeError when :func:`required`, else one
    :class:`KernelUnavailableWarning` line per kernel and process, saying what is used
    instead (``fallback``), why and the fix."""
    reason = getattr(error, "reason", None) or str(error).splitlines()[0]
    fix = getattr(error, "fix", None) or "check the C compiler"
    if required():
        raise RuntimeError(f"the C kernel {kernel} could not be built ({reason}) and "
                           f"{REQUIRE_ENV}=1 requires it; {fix}")
    if kernel in _warned:
        return
    _warned.add(kernel)
    warn(f"weirdnet: the C kernel {kernel} is unavailable ({reason}); {fallback}. Fix: "
         f"{fix}. ({REQUIRE_ENV}=1 makes this an error.)", KernelUnavailableWarning,
         stacklevel=3)


class Kernel:
    """One C kernel library of an op, built on first use, once per process and thread-safe.

    ``make()`` builds and declares the library (calling :func:`build`); ``fallback`` says
    what runs instead when it cannot be built, for :func:`unavailable`'s one line."""

    def __init__(self, name: str, make: Callable[[], ctypes.CDLL], fallback: str):
        self.name, self._make, self._fallback = name, make, fallback
        self._lock = threading.Lock()
        self._lib: ctypes.CDLL | None = None
        self._failure: RuntimeError | None = None

    @property
    def failure(self) -> RuntimeError | None:
        """Why the library could not be built (None: built, or not tried yet)."""
        return self._failure

    def load(self) -> ctypes.CDLL | None:
        """The library, or None when it cannot be built (reported once, see
        :func:`unavailable`: an error under ``WEIRDNET_REQUIRE_CPU_KERNEL=1``)."""
        if self._lib is None and self._failure is None:
            with self._lock:
                if self._lib is None and self._failure is None:
                    try:
                        self._lib = self._make()
                    except RuntimeError as err:
                        self._failure = err
        if self._failure is not None:
            unavailable(self.name, self._failure, self._fallback)
        return self._lib
