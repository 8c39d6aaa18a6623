"""Install a built weirdnet wheel into a fresh virtual environment and run
.ci/wheel_smoke.py there, from an empty folder with an empty kernel cache: one script for
`.ci/run` and tests/test_wheel.py.

    python .ci/wheel_check.py WHEEL DIR      # DIR/venv, DIR/work, DIR/cache

The venv is built without system site packages. It reaches the dependencies (torch, ...)
of the interpreter that runs this script through a .pth file listing that interpreter's
own site-packages folders (``site.getsitepackages()`` and the user site where it is
enabled), so it sees them wherever they are installed: a virtual environment, a conda
environment or the system Python. ``--system-site-packages`` reached only the base
interpreter's packages, so inside a user's venv torch was missing (issue 66). The venv's
own site-packages come first on ``sys.path``, so weirdnet is imported from the wheel;
a plain path line does not run the ``.pth`` files of the folders it adds, so an editable
install of weirdnet there stays out.

Exit status: 0 when the smoke test passed, else the failing step's (its message on
stderr).
"""

import os
import site
import subprocess
import sys
from pathlib import Path

SMOKE = Path(__file__).resolve().with_name("wheel_smoke.py")
PTH_NAME = "_weirdnet_wheel_check_parent.pth"


def parent_site_folders() -> list[str]:
    """The running interpreter's site-packages folders that exist, in ``sys.path``
    order where they are on it (the user site only where it is enabled)."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    real = {os.path.realpath(f) for f in folders if os.path.isdir(f)}
    ordered = [p for p in sys.path if p and os.path.realpath(p) in real]
    ordered += [f for f in folders if os.path.isdir(f)]
    return list(dict.fromkeys(ordered))


def _run(what: str, command: list[str], **kwargs) -> None:
    """Run ``command``; on failure say ``what`` failed on stderr and exit with its status."""
    done = subprocess.run(command, **kwargs)
    if done.returncode != 0:
        print(f"wheel check: {what} failed (status {done.returncode})", file=sys.stderr)
        sys.exit(done.returncode)


def make_venv(venv: Path) -> Path:
    """A fresh venv at ``venv`` that also sees :func:`parent_site_folders`; its python."""
    _run("python -m venv", [sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, PTH_NAME).write_text("".join(f"{f}\n" for f in parent_site_folders()),
                                       encoding="utf-8")
    return python


def main(wheel: str, directory: str) -> None:
    """Install ``wheel`` into ``directory``/venv and run the smoke test in
    ``directory``/work with the kernel cache ``directory``/cache."""
    root = Path(directory).resolve()
    python = make_venv(root / "venv")
    _run("pip install of the wheel", [str(python), "-m", "pip", "install", "-q",
                                      "--no-deps", "--no-index", str(Path(wheel).resolve())])
    work = root / "work"
    work.mkdir()
    env = dict(os.environ, WEIRDNET_CACHE_DIR=str(root / "cache"),
               WEIRDNET_REQUIRE_CPU_KERNEL="1")
    env.pop("PYTHONPATH", None)  # the wheel, not a source tree
    _run("the smoke test of the installed wheel", [str(python), str(SMOKE)], cwd=work,
         env=env)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python .ci/wheel_check.py WHEEL DIR")
    main(*sys.argv[1:])
