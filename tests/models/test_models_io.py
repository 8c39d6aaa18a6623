"""Save/load (config JSON + safetensors), presets on the meta device, ``weirdnet info``."""

import json
import math
import re
import subprocess
import sys

import pytest
import torch

from weirdnet.cli import main
from weirdnet.models import (
    PRESETS,
    CheckpointError,
    WeirdNetClassifier,
    WeirdNetDualEncoder,
    WeirdNetLM,
    WeirdNetSeq2Seq,
    build_preset,
    load,
)
from weirdnet.run.safetensors_io import load_file, save_file

SMALL = {"dim": 32, "depth": 2, "max_len": 64, "heads": 4}


def models():
    torch.manual_seed(0)
    return [
        WeirdNetLM({"backbone": {**SMALL, "pattern": "B", "causal": True},
                    "tie_embeddings": False}),
        WeirdNetClassifier({"backbone": {**SMALL, "pattern": "dba,weird"}, "num_classes": 5}),
        WeirdNetDualEncoder({"backbone": SMALL}),
        WeirdNetSeq2Seq({"encoder": SMALL, "decoder": {**SMALL, "pattern": "B", "causal": True},
                         "cross": "dba"}),
    ]


@pytest.mark.parametrize("model", models(), ids=lambda m: type(m).__name__)
def test_save_load_round_trips_bit_identically(model, tmp_path):
    model.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json",
                                                                  "model.safetensors"]
    for loaded in (type(model).load(tmp_path / "m"), load(tmp_path / "m")):
        assert type(loaded) is type(model) and loaded.config == model.config
        ours, theirs = model.state_dict(), loaded.state_dict()
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) and ours[k].dtype == theirs[k].dtype
                   for k in ours)
        assert not any(p.is_meta for p in loaded.parameters())


def test_weights_are_standard_safetensors(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    model = models()[0]
    model.save(tmp_path)
    theirs = safetensors.load_file(tmp_path / "model.safetensors")
    assert all(torch.equal(theirs[k], v) for k, v in model.state_dict().items())
    tensors = {"x": torch.randn(3, 2).bfloat16(), "n": torch.arange(5)}
    safetensors.save_file(tensors, tmp_path / "t.safetensors")
    read, _ = load_file(tmp_path / "t.safetensors")
    assert all(torch.equal(read[k], v) for k, v in tensors.items())


def test_bf16_model_round_trips(tmp_path):
    model = models()[1].to(torch.bfloat16)
    model.save(tmp_path)
    loaded = WeirdNetClassifier.load(tmp_path)
    assert all(torch.equal(a, b) and b.dtype == torch.bfloat16
               for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))


def test_mismatched_config_is_a_clear_error(tmp_path):
    models()[0].save(tmp_path)
    path = tmp_path / "config.json"
    document = json.loads(path.read_text())
    document["config"]["backbone"]["dim"] = 48
    path.write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="does not match its config.json.*mismatched"):
        load(tmp_path)
    document["config"]["backbone"]["dim"] = 32
    document["config"]["backbone"]["dimension"] = 32
    path.write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="unknown key.*dimension"):
        load(tmp_path)


def test_missing_keys_and_wrong_class_are_clear_errors(tmp_path):
    model = models()[0]
    model.save(tmp_path)
    tensors, meta = load_file(tmp_path / "model.safetensors")
    del tensors["head.weight"]
    save_file(tensors, tmp_path / "model.safetensors", meta)
    with pytest.raises(CheckpointError, match=r"missing keys \['head.weight'\]"):
        load(tmp_path)
    with pytest.raises(CheckpointError, match="holds a WeirdNetLM, not a WeirdNetClassifier"):
        WeirdNetClassifier.load(tmp_path)


@pytest.mark.parametrize("damage", ["flip", "truncate", "header", "empty"])
def test_corrupted_weights_are_clear_errors(tmp_path, damage):
    models()[1].save(tmp_path)
    path = tmp_path / "model.safetensors"
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-5] ^= 0x40
    elif damage == "truncate":
        raw = raw[:len(raw) // 2]
    elif damage == "header":
        raw[10:14] = b"\xff\xfe{{"
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupted|truncated|not valid JSON|too short"):
        load(tmp_path)


def test_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="config.json not found"):
        load(tmp_path)
    models()[2].save(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="weights of the saved model are missing"):
        load(tmp_path)


def expected_parameters(preset) -> int:
    """Parameter count from the papers' definitions, independent of the model code."""
    cfg = preset.config
    if "backbone" not in cfg:
        raise NotImplementedError
    bb = cfg["backbone"]
    D, N, L = bb["dim"], bb["depth"], bb["max_len"]
    # token ids: an embedding table; values (UEA channels): a linear layer with a bias
    embed = bb["vocab_size"] * D if bb.get("vocab_size") else (bb["input_dim"] + 1) * D
    d_ff = bb.get("d_ff") or 4 * D
    heads = bb.get("heads")
    names = {"A": ["weird"], "B": ["weird", "softmax"]}.get(bb["pattern"],
                                                            bb["pattern"].split(","))
    bias = bb.get("bias", True)  # the Transformer++ options (positions, norm, FFN)
    moss = bb.get("mixer_options", {}).get("weird", {}).get("bias", False)  # b_A, b_V
    per_mixer = {
        "weird": 3 * D * D + D + math.ceil(math.log2(L)) * D + (2 * D if moss else 0),
        "softmax": 4 * D * D + (4 * D if bias else 0),  # W_Q, W_K, W_V, W_O (+ biases)
        "linear": 4 * D * D + (4 * D if bias else 0),  # the same projections
        "relation": 4 * D * D + 2 * D,  # W_H, W_G (+ biases), W_1, W_O (inner width D)
    }
    swiglu = bb.get("activation") == "swiglu"
    ffn = (3 if swiglu else 2) * D * d_ff + ((2 if swiglu else 1) * d_ff + D if bias else 0)
    norm = D if bb.get("norm") == "rmsnorm" else 2 * D  # weight (and bias)
    positions = L * D if bb.get("positions", "learned") == "learned" else 0
    carried_z = 0
    if "dba" in names:  # the authors' form (the default)
        d_p, d_in = bb["mixer_options"]["dba"]["d_p"], bb["mixer_options"]["dba"]["d_in"]
        # P_Q (+bias), P_K, P_V (+bias); Q, K (+biases) to d_in; V (+bias); LayerNorm;
        # reconstruction (+bias) to H·d_p; W_O + b_O
        per_mixer["dba"] = (2 * D * d_in + d_in + D * D + D + 2 * (D * d_in + d_in)
                            + D * D + D + 2 * D + (D + 1) * heads * d_p + D * D + D)
        carried_z = d_p * D  # the first DBA layer's learned Z; later ones receive it
    layers = sum(per_mixer[names[i % len(names)]] + ffn + 2 * norm
                 for i in range(N)) + carried_z
    total = embed + positions + layers + norm
    if preset.model == "WeirdNetClassifier":
        total += D * cfg["num_classes"] + cfg["num_classes"]
    elif preset.model == "WeirdNetDualEncoder":
        total += 4 * D * D + D + D * 2 + 2
    return total


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_build_on_meta_with_the_expected_count(name):
    model = build_preset(name, device="meta")
    assert all(p.is_meta for p in model.parameters())
    assert model.num_parameters() == expected_parameters(PRESETS[name])


def test_table_vii_counts():
    """GPT-2 sizes match the real GPT-2 weights; Weird-Net B saves one D² per Weird layer."""
    assert build_preset("gpt2-small", device="meta").num_parameters() == 124_439_808
    assert build_preset("gpt2-medium", device="meta").num_parameters() == 354_823_168
    assert build_preset("gpt2-large", device="meta").num_parameters() == 774_030_080


@pytest.mark.slow  # child processes
def test_meta_build_allocates_no_memory():
    code = (
        "import resource, torch\n"
        "from weirdnet.models import build_preset\n"
        "torch.zeros(1)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "m = build_preset('weirdnet-large', device='meta')\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(m.num_parameters(), (after - before) // 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert int(out[0]) > 700_000_000
    assert int(out[1]) < 64, f"building on meta grew the peak RSS by {out[1]} MiB"


def test_info_command(capsys):
    assert main(["info", "weirdnet-small"]) == 0
    text = capsys.readouterr().out
    assert "120,933,120" in text and "paper states 110M" in text and "structure B" in text
    assert main(["info", "lra-lstops"]) == 2
    assert "did you mean lra-listops" in capsys.readouterr().err
    assert main(["info", "--list"]) == 0
    assert "dba-lra-text-cpu" in capsys.readouterr().out


def test_info_on_a_saved_model(tmp_path, capsys):
    models()[2].save(tmp_path)
    assert main(["info", str(tmp_path)]) == 0
    assert "WeirdNetDualEncoder" in capsys.readouterr().out


def test_damaged_checkpoint_warning_is_one_clean_line(tmp_path):
    """Issue 35 item 10: the warning printed Python's raw format (file, line, category and
    the source line ``warnings.warn(...)``); a user sees one line saying what happened."""
    from weirdnet.run import checkpoint as ckpt

    model = models()[0]
    for step in (1, 2):  # a trainer state has these keys (an incomplete one is damage)
        state = {key: {} for key in ("progress", "optimizer", "scheduler", "scaler", "rng")}
        ckpt.save_checkpoint(tmp_path, step, model.save, state | {"progress": {"step": step}},
                             keep_last=2)
    weights = tmp_path / "checkpoints" / "step-00000002" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01
    weights.write_bytes(bytes(data))
    script = ("import sys\nfrom weirdnet.run.checkpoint import load_latest\n"
              "print(load_latest(sys.argv[1])[0].name)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "step-00000001"
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("weirdnet: checkpoint step-00000002 is damaged and is skipped"), \
        lines[0]
    assert "model.safetensors" in lines[0] and "Warning" not in lines[0]


# ---- a saved config is checked before anything is built (issue 72, items 3 and 5)

@pytest.mark.parametrize("key,value,words", [
    ("norm_eps", -1.0, "config.backbone.norm_eps must be a positive number, got -1.0"),
    ("norm_eps", 0.0, "config.backbone.norm_eps must be a positive number, got 0.0"),
    ("depth", 1_000_000_000, "parameters do not fit in this machine's memory"),
    ("dim", 10**12, "parameters do not fit in this machine's memory"),
])
def test_a_saved_config_out_of_range_is_one_line(tmp_path, key, value, words):
    """norm_eps = -1 loaded and gave NaN logits; depth = 10^9 built blocks for minutes."""
    models()[0].save(tmp_path)
    path = tmp_path / "config.json"
    document = json.loads(path.read_text())
    document["config"]["backbone"][key] = value
    path.write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match=re.escape(words)) as err:
        load(tmp_path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)
