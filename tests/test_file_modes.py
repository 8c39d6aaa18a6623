"""Files and folders weirdnet writes honour the umask (issue 35, item 12): every atomically
written file was mode 0600 and export folders 0700 whatever the umask, so colleagues on a
shared machine could not read a run."""

import os
import stat
from pathlib import Path

import pytest
import torch

from weirdnet.models import WeirdNetLM
from weirdnet.run import checkpoint as ckpt
from weirdnet.run.files import write_atomic, write_png

UMASKS = [0o022, 0o002, 0o077]


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask{m:03o}")
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_modes(root: Path, umask: int) -> None:
    """``root`` and everything under it: folders 0777 & ~umask, files 0666 & ~umask."""
    paths = [root, *root.rglob("*")]
    wrong = [f"{p.relative_to(root.parent)}: {mode(p):o}" for p in paths
             if mode(p) != (0o777 if p.is_dir() else 0o666) & ~umask]
    assert not wrong, f"umask {umask:03o}: {wrong}"


def _tiny_lm() -> WeirdNetLM:
    torch.manual_seed(0)
    return WeirdNetLM({"backbone": {"dim": 16, "depth": 1, "heads": 2, "max_len": 32,
                                    "pattern": "weird", "causal": True}})


def test_atomic_files_honour_the_umask(umask, tmp_path):
    write_atomic(tmp_path / "out" / "results.json", "{}\n")
    write_atomic(tmp_path / "out" / "blob.bin", b"\0" * 10)
    assert_modes(tmp_path / "out", umask)


def test_plots_honour_the_umask(umask, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure()
    try:
        write_png(figure, tmp_path / "plots" / "loss.png")
    finally:
        plt.close(figure)
    assert_modes(tmp_path / "plots", umask)


def test_saved_models_and_checkpoints_honour_the_umask(umask, tmp_path):
    lm = _tiny_lm()
    lm.save(tmp_path / "run" / "best")
    ckpt.save_checkpoint(tmp_path / "run", 3, lm.save, {"step": 3}, keep_last=1)
    ckpt.save_checkpoint(tmp_path / "run", 4, lm.save, {"step": 4}, keep_last=1)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "run")] == ["step-00000004"]
    assert_modes(tmp_path / "run", umask)


def test_hf_exports_honour_the_umask(umask, tmp_path):
    pytest.importorskip("transformers")
    from weirdnet.hf import export_hf

    _tiny_lm().save(tmp_path / "model")
    export_hf(tmp_path / "model", tmp_path / "exports" / "hf")
    assert_modes(tmp_path / "exports", umask)
    export_hf(tmp_path / "model", tmp_path / "exports" / "hf", overwrite=True)
    assert_modes(tmp_path / "exports", umask)


def test_downloads_honour_the_umask(umask, tmp_path):
    import hashlib

    from weirdnet.data.sources import download as dl

    data = b"<mediawiki>" * 100
    (tmp_path / "source.txt").write_bytes(data)
    remote = dl.RemoteFile(name="toy", url=(tmp_path / "source.txt").as_uri(),
                           filename="toy.txt", size=len(data),
                           sha256=hashlib.sha256(data).hexdigest())
    dl.fetch(remote, tmp_path / "data" / "toy", progress=False)
    assert_modes(tmp_path / "data", umask)


@pytest.mark.slow
def test_built_kernels_honour_the_umask(umask, tmp_path, monkeypatch):
    """A kernel cache shared through $WEIRDNET_CACHE_DIR: libraries are 0777 & ~umask."""
    from weirdnet.ops import cbuild
    from weirdnet.ops.weird_scan.cpu import SOURCE

    if cbuild.find_compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("WEIRDNET_CACHE_DIR", str(tmp_path / "cache"))
    cbuild.build(SOURCE)
    (library,) = (tmp_path / "cache" / "kernels").glob("weird_scan_*.so")
    assert mode(library) == 0o777 & ~umask
    assert mode(tmp_path / "cache" / "kernels") == 0o777 & ~umask
