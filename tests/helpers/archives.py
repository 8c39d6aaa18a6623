"""Writers of small archives in the official layouts, and other helpers of the data tests."""

import importlib.metadata
import io
import tarfile
import zipfile
from pathlib import Path


def write_sdist(path: Path, top: str, files: dict[str, bytes]) -> Path:
    """A .tar.gz with ``top/name`` members, like an sdist."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def write_zip(path: Path, files: dict[str, bytes]) -> Path:
    """A zip (a wheel, enwik8.zip, ...) holding ``files``."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def installed(name: str) -> bool:
    """Whether the distribution ``name`` is installed (without importing it)."""
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def write_tar_members(path: Path, members: dict[str, bytes],
                      links: dict[str, str] | None = None) -> Path:
    """A .tar.gz with exactly these member names (no top folder added: crafted names such
    as ``../x`` or ``/abs/x`` stay as given) and symbolic links ``name -> target``."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path
