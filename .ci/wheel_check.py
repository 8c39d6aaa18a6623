"""Install a built weirdnet wheel into a fresh virtual environment and run
.ci/wheel_smoke.py there, from an empty folder with an empty kernel cache: one script for
`.ci/run` and tests/test_wheel.py.

    python .ci/wheel_check.py WHEEL DIR [LAB_WHEEL]   # DIR/venv, DIR/work, DIR/cache

First the weirdnet wheel alone: the smoke test trains, evaluates, generates and exports,
and checks that no lab module is imported and that ``weirdnet bench`` says how to install
the lab.  Then, given LAB_WHEEL (the weirdnet-lab wheel), that wheel is installed into the
same venv and ``weirdnet bench --help`` must list the benchmarks.

The venv is built without system site packages. It reaches the dependencies (torch, ...)
of the interpreter that runs this script through a .pth file listing that interpreter's
own site-packages folders (``site.getsitepackages()`` and the user site where it is
enabled), so it sees them wherever they are installed: a virtual environment, a conda
environment or the system Python. ``--system-site-packages`` reached only the base
interpreter's packages, so inside a user's venv torch was missing (issue 66). The venv's
own site-packages come first on ``sys.path``, so weirdnet is imported from the wheel;
a plain path line does not run the ``.pth`` files of the folders it adds, so an editable
install of weirdnet there stays out.  The ``.pth`` file lists one folder,
DIR/parent-site, of links to every entry of those folders except weirdnet's own
distributions (``weirdnet``, ``weirdnet-lab``, their dist-info and editable finders):
the parent's metadata of an editable weirdnet-lab would otherwise add its ``weirdnet
bench`` entry point to a venv that has only the weirdnet wheel.

Exit status: 0 when the smoke test passed, else the failing step's (its message on
stderr).
"""

import os
import re
import site
import subprocess
import sys
from pathlib import Path

SMOKE = Path(__file__).resolve().with_name("wheel_smoke.py")
PTH_NAME = "_weirdnet_wheel_check_parent.pth"
OURS = re.compile(r"^(__editable__[._]+)?_?weirdnet([-_.]|$)", re.IGNORECASE)
"""Entries of a site folder that are weirdnet's or weirdnet-lab's (packages, dist-info,
egg-links, editable finders and .pth files)."""


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


def parent_site_links(folder: Path) -> Path:
    """``folder`` filled with a link to each entry of :func:`parent_site_folders` (the
    first of a name wins, as on ``sys.path``) except weirdnet's own (:data:`OURS`)."""
    folder.mkdir()
    for parent in parent_site_folders():
        for entry in sorted(os.listdir(parent)):
            link = folder / entry
            if not OURS.match(entry) and not link.exists() and not link.is_symlink():
                link.symlink_to(Path(parent, entry))
    return folder


def make_venv(venv: Path) -> Path:
    """A fresh venv at ``venv`` that also sees the parent's packages but not its weirdnet
    distributions (:func:`parent_site_links`); its python."""
    _run("python -m venv", [sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    links = parent_site_links(venv.parent / "parent-site")
    Path(purelib, PTH_NAME).write_text(f"{links}\n", encoding="utf-8")
    return python


def install(python: Path, wheel: str) -> None:
    """``pip install`` ``wheel`` alone (no index, no dependencies) with ``python``."""
    _run(f"pip install of {Path(wheel).name}", [str(python), "-m", "pip", "install", "-q",
                                                 "--no-deps", "--no-index",
                                                 str(Path(wheel).resolve())])


def main(wheel: str, directory: str, lab_wheel: str | None = None) -> None:
    """Install ``wheel`` into ``directory``/venv and run the smoke test in
    ``directory``/work with the kernel cache ``directory``/cache; then, given
    ``lab_wheel``, install it too and run the smoke test's lab part."""
    root = Path(directory).resolve()
    python = make_venv(root / "venv")
    install(python, wheel)
    work = root / "work"
    work.mkdir()
    env = dict(os.environ, WEIRDNET_CACHE_DIR=str(root / "cache"),
               WEIRDNET_REQUIRE_CPU_KERNEL="1")
    env.pop("PYTHONPATH", None)  # the wheel, not a source tree
    _run("the smoke test of the installed wheel", [str(python), str(SMOKE)], cwd=work,
         env=env)
    if lab_wheel is not None:
        install(python, lab_wheel)
        _run("the smoke test of the installed lab wheel",
             [str(python), str(SMOKE), "--with-lab"], cwd=work, env=env)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python .ci/wheel_check.py WHEEL DIR [LAB_WHEEL]")
    main(*sys.argv[1:])
