"""weirdnet.hf: the Hugging Face model, cache, tokenizer, export and lm-evaluation-harness.

A tiny LM whose layers cover every decodable mixer (Weird, PS, softmax, linear, local,
Relation) is built once, saved the weirdnet way and exported; the tests compare the
``transformers`` side with the weirdnet model it wraps.
"""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: E402

import weirdnet.hf as hf  # noqa: E402
import weirdnet.models as wm  # noqa: E402
from helpers.train import subprocess_env  # noqa: E402
from weirdnet.cli import main  # noqa: E402
from weirdnet.models import BackboneConfig, LMConfig, WeirdNetLM  # noqa: E402

PATTERN = "weird,softmax,linear,ps,local,relation"
NO_EOS = {"eos_token_id": None, "pad_token_id": 0}  # random models must not stop early


def _tiny_lm(seed: int = 0, max_len: int = 256) -> WeirdNetLM:
    torch.manual_seed(seed)
    backbone = BackboneConfig(dim=32, depth=6, heads=2, max_len=max_len, pattern=PATTERN,
                              causal=True, mixer_options={"local": {"window": 8}})
    return WeirdNetLM(LMConfig(backbone, tie_embeddings=False)).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(weirdnet LM, its weirdnet folder, its export folder)."""
    root = tmp_path_factory.mktemp("hf")
    lm = _tiny_lm()
    lm.save(root / "weirdnet")
    hf.export_hf(root / "weirdnet", root / "export")
    return lm, root / "weirdnet", root / "export"


@pytest.fixture(scope="module")
def model(saved):
    return AutoModelForCausalLM.from_pretrained(saved[2]).eval()


def _ids(batch=3, length=11, seed=1):
    return torch.randint(4, 256, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---- model and files -------------------------------------------------------------------

def test_auto_classes_load_the_export(saved, model):
    lm, _, out = saved
    assert type(model) is hf.WeirdNetForCausalLM
    cfg = model.config
    assert (cfg.model_type, cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == \
        ("weirdnet", 256, 32, 6)
    assert cfg.max_position_embeddings == 256 and cfg.tie_word_embeddings is False
    written = {p.name for p in out.iterdir()}
    assert written <= hf.export.EXPORT_FILES
    assert {"config.json", "model.safetensors", "tokenizer.json", "modeling_weirdnet.py",
            "configuration_weirdnet.py", "README.md"} <= written
    assert json.loads((out / "config.json").read_text())["auto_map"] == hf.remote.AUTO_MAP


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_logits_equal_the_weirdnet_model(saved, dtype, tol):
    lm, _, out = saved
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=dtype).eval()
    reference = wm.load(saved[1]).to(dtype).eval()
    ids, mask = _ids(), torch.ones(3, 11, dtype=torch.long)
    mask[1, 8:] = 0
    with torch.no_grad():
        got = loaded(ids, attention_mask=mask).logits
        want = reference(ids, mask=mask.bool()).logits
    assert got.dtype == dtype
    assert (got - want).norm() / want.norm() < tol


def test_round_trips_are_bit_identical(saved, model, tmp_path):
    lm, weirdnet_dir, out = saved
    want = lm.state_dict()
    for state in (model.state_dict(), wm.load(out).state_dict()):
        assert state.keys() == want.keys()
        assert all(torch.equal(state[k], want[k]) for k in want)
    model.save_pretrained(tmp_path / "again")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "again")
    assert all(torch.equal(again.state_dict()[k], want[k]) for k in want)
    # the weirdnet-written weights load as the Hugging Face model too
    shutil.copytree(out, tmp_path / "mixed")
    shutil.copy(weirdnet_dir / "model.safetensors", tmp_path / "mixed" / "model.safetensors")
    mixed = AutoModelForCausalLM.from_pretrained(tmp_path / "mixed")
    assert all(torch.equal(mixed.state_dict()[k], want[k]) for k in want)


def test_from_weirdnet_shares_the_modules():
    lm = _tiny_lm()
    wrapped = hf.WeirdNetForCausalLM.from_weirdnet(lm)
    assert wrapped.backbone is lm.backbone and wrapped.head is lm.head
    assert wrapped.to_weirdnet().backbone is lm.backbone


def test_labels_follow_the_shift_convention(model):
    ids = _ids()
    labels = ids.clone()
    labels[0, :3] = -100
    out = model(ids, labels=labels)
    targets = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    want = wm.lm.lm_loss(out.logits, targets)
    assert torch.allclose(out.loss, want)
    counted = int((targets != -100).sum())
    summed = model(ids, labels=labels, num_items_in_batch=counted).loss
    assert torch.allclose(summed, want)
    last = model(ids, logits_to_keep=2).logits  # 2 rows through the head, not 11: rounding
    assert torch.allclose(last, out.logits[:, -2:], rtol=1e-5, atol=1e-5)


# ---- generation ----------------------------------------------------------------------

def test_greedy_equals_weirdnet_generate(saved, model):
    lm = saved[0]
    ids = _ids()
    got = model.generate(ids, max_new_tokens=12, do_sample=False, **NO_EOS)
    assert torch.equal(got, lm.generate(ids, 12, temperature=0))


def test_sampling_equals_weirdnet_generate_with_the_same_seed(saved, model):
    lm = saved[0]
    ids = _ids()
    options = {"temperature": 0.8, "top_k": 40, "top_p": 0.9}
    torch.manual_seed(7)
    got = model.generate(ids, max_new_tokens=12, do_sample=True, **options, **NO_EOS)
    want = lm.generate(ids, 12, **options, generator=torch.Generator().manual_seed(7))
    assert torch.equal(got, want)


def test_left_padded_batch_equals_each_sequence_alone(model):
    ids = _ids(length=12)
    mask = torch.ones_like(ids)
    mask[0, :5], mask[2, :2] = 0, 0
    ids = ids.masked_fill(mask == 0, 0)
    batch = model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False,
                           **NO_EOS)
    for row in range(3):
        alone = ids[row][mask[row].bool()][None]
        single = model.generate(alone, max_new_tokens=10, do_sample=False, **NO_EOS)
        assert torch.equal(single[0, -10:], batch[row, -10:])


def _brute_force_beams(lm: WeirdNetLM, prompt: torch.Tensor, beams: int, steps: int):
    """Beam search over full recomputes: every step scores every extension of every beam
    by its total log-probability and keeps the best ``beams``."""
    alive = [(prompt.tolist(), 0.0)]
    for _ in range(steps):
        extended = []
        for tokens, score in alive:
            with torch.no_grad():
                logits = lm(torch.tensor([tokens])).logits[0, -1].double()
            logp = logits.log_softmax(-1)
            extended += [(tokens + [t], score + float(logp[t])) for t in range(logits.shape[0])]
        alive = sorted(extended, key=lambda item: -item[1])[:beams]
    return alive


def test_beam_search_equals_brute_force(saved, model):
    lm = saved[0]
    prompt = _ids(batch=1, length=6)[0]
    out = model.generate(prompt[None], max_new_tokens=4, num_beams=3, num_return_sequences=3,
                         do_sample=False, length_penalty=0.0, early_stopping=True,
                         output_scores=True, return_dict_in_generate=True, **NO_EOS)
    want = _brute_force_beams(lm, prompt, beams=3, steps=4)
    assert [seq.tolist() for seq in out.sequences] == [tokens for tokens, _ in want]
    scores = torch.tensor([score for _, score in want], dtype=torch.float64)
    assert torch.allclose(out.sequences_scores.double(), scores, atol=1e-4)
    # the cached search equals transformers' own search over full recomputes
    again = model.generate(prompt[None], max_new_tokens=4, num_beams=3, do_sample=False,
                           use_cache=False, **NO_EOS)
    assert torch.equal(again[0], out.sequences[0])


def test_strategies_that_roll_back_are_refused(model):
    ids = _ids(batch=1)
    with pytest.raises(ValueError, match="assisted generation is not supported"):
        model.generate(ids, max_new_tokens=3, prompt_lookup_num_tokens=2, **NO_EOS)
    cache = model(ids, use_cache=True).cache
    assert isinstance(cache, hf.WeirdNetCache) and cache.get_seq_length() == 11
    with pytest.raises(ValueError, match="cannot be cropped"):
        cache.crop(-2)


def test_a_cache_continues_and_reorders(model):
    ids = _ids()
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :7], use_cache=True)
        cache = out.cache
        cache.reorder_cache(torch.tensor([2, 0, 1]))
        rest = model(ids[[2, 0, 1], 7:], cache=cache).logits
    assert torch.allclose(rest, full[[2, 0, 1], 7:], atol=1e-5)
    assert cache.batch_size == 3 and cache.get_seq_length() == 11


def test_bad_input_gets_a_clear_error(model, tmp_path):
    ids = _ids()
    with pytest.raises(ValueError, match="WeirdNetCache"):
        model(ids, cache=DynamicCache(config=model.config))
    with pytest.raises(ValueError, match="attention_mask has shape"):
        model(ids[:, -1:], attention_mask=torch.ones(3, 4),
              cache=model(ids, use_cache=True).cache)
    with pytest.raises(ValueError, match="inputs_embeds"):
        model(inputs_embeds=torch.zeros(1, 2, 32))
    with pytest.raises(ValueError, match="max_len"):
        model.generate(_ids(batch=1, length=250), max_new_tokens=10, **NO_EOS)
    with pytest.raises(ValueError, match="pass the cache once"):
        model(ids, cache=model(ids, use_cache=True).cache, past_key_values=object())


def test_folders_that_are_not_this_model_are_refused(saved, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64)) \
        .save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="'gpt2' model, not a weirdnet model"):
        hf.WeirdNetForCausalLM.from_pretrained(tmp_path / "gpt2")
    shutil.copytree(saved[2], tmp_path / "bad")
    config = json.loads((tmp_path / "bad" / "config.json").read_text())
    config["weirdnet"]["config"]["backbone"]["depth"] = 7
    (tmp_path / "bad" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="do not match the config.*missing"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "bad")
    config["weirdnet"]["config"]["backbone"]["dimm"] = 7
    (tmp_path / "bad" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="did you mean 'dim'"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "bad")
    (tmp_path / "bad" / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="no tokenizer.json.*export-hf"):
        hf.load_tokenizer(tmp_path / "bad")


def _flip_a_weight_byte(folder):
    """Flip one bit in the last weight byte of ``folder``/model.safetensors."""
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("key,value", [("num_hidden_layers", 6), ("hidden_size", 32),
                                       ("vocab_size", 256), ("tie_word_embeddings", False)])
def test_a_top_level_derived_key_that_agrees_is_accepted(saved, tmp_path, key, value):
    copy = shutil.copytree(saved[2], tmp_path / "model")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, key: value}))
    loaded = AutoModelForCausalLM.from_pretrained(copy)
    assert getattr(loaded.config, key) == value


@pytest.mark.parametrize("key,value", [("num_hidden_layers", 2), ("max_position_embeddings",
                                                                   4096)])
def test_a_top_level_derived_key_that_conflicts_is_one_clear_error(saved, tmp_path, key,
                                                                    value):
    copy = shutil.copytree(saved[2], tmp_path / "model")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(ValueError, match=f"{key}={value} .*conflicts"):
        AutoModelForCausalLM.from_pretrained(copy)
    with pytest.raises(ValueError, match=f"{key}={value} .*conflicts"):
        AutoModelForCausalLM.from_pretrained(saved[2], **{key: value})


def test_the_export_stores_the_weights_sha256(saved):
    from weirdnet.run.safetensors_io import load_file

    _, metadata = load_file(saved[2] / "model.safetensors")
    assert len(metadata["weirdnet.sha256"]) == 64
    assert metadata["format"] == "pt"


def test_a_flipped_byte_in_an_export_is_a_clear_error(saved, tmp_path):
    """Issue 35 item 4: both loaders read a damaged export silently (a weight off by 83.8)."""
    damaged = tmp_path / "damaged"
    shutil.copytree(saved[2], damaged)
    _flip_a_weight_byte(damaged)
    weights = str(damaged / "model.safetensors")
    with pytest.raises(wm.CheckpointError, match="model.safetensors: checksum mismatch") as err:
        wm.load(damaged)
    assert weights in str(err.value) and "\n" not in str(err.value)
    for load in (AutoModelForCausalLM.from_pretrained, hf.WeirdNetForCausalLM.from_pretrained):
        with pytest.raises(ValueError, match="model.safetensors: checksum mismatch") as err:
            load(damaged)
        assert weights in str(err.value) and "\n" not in str(err.value)


def test_an_export_without_a_digest_still_loads(saved, tmp_path):
    """Folders written before the digest (or by other tools) load unchecked, as before."""
    from safetensors.torch import load_file as st_load
    from safetensors.torch import save_file as st_save

    lm, _, out = saved
    plain = tmp_path / "plain"
    shutil.copytree(out, plain)
    st_save(st_load(plain / "model.safetensors"), plain / "model.safetensors",
            metadata={"format": "pt"})
    want = lm.state_dict()
    for model in (wm.load(plain), AutoModelForCausalLM.from_pretrained(plain)):
        assert all(torch.equal(model.state_dict()[k], want[k]) for k in want)


# ---- tokenizer -------------------------------------------------------------------------

def test_the_tokenizer_maps_bytes_to_ids(saved):
    tokenizer = AutoTokenizer.from_pretrained(saved[2])
    text = "def f(x):\n\treturn 'héllo' + \"日本\"\x02\x03\x00 Ăă\x7f"
    assert tokenizer(text).input_ids == list(text.encode())
    assert tokenizer.decode(list(text.encode())) == text
    assert tokenizer.decode(list(b"a\x03b"), skip_special_tokens=True) == "ab"
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 2, 3)
    assert len(tokenizer) == 256
    assert hf.load_tokenizer(saved[2]).model_max_length == 256


# ---- export command --------------------------------------------------------------------

def test_export_command_never_replaces_a_foreign_folder(saved, tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    assert main(["export-hf", str(saved[1]), str(target), "--overwrite"]) == 2
    assert "not an earlier export" in capsys.readouterr().err
    assert (target / "notes.txt").read_text() == "mine"
    assert main(["export-hf", str(saved[1]), str(tmp_path / "out")]) == 0
    assert main(["export-hf", str(saved[1]), str(tmp_path / "out")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["export-hf", str(saved[1]), str(tmp_path / "out"), "--overwrite"]) == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_export_refuses_a_model_that_is_not_a_byte_lm(tmp_path, capsys):
    wm.WeirdNetClassifier(wm.ClassifierConfig(num_classes=2)).save(tmp_path / "clf")
    assert main(["export-hf", str(tmp_path / "clf"), str(tmp_path / "out")]) == 2
    assert "export-hf exports language models" in capsys.readouterr().err


def test_importing_without_transformers_says_what_to_install():
    code = ("import sys; sys.modules['transformers'] = None; import weirdnet, weirdnet.models\n"
            "try:\n    import weirdnet.hf\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=subprocess_env(), timeout=120)
    assert "pip install 'weirdnet[hf]'" in out.stdout, out.stderr


# ---- the documented paths run no file of the folder ------------------------------------

def _edited_export(saved, tmp_path, edit):
    """A copy of the export whose config.json ``edit`` (a function of the dict) changed."""
    copy = shutil.copytree(saved[2], tmp_path / "edited")
    config = json.loads((copy / "config.json").read_text())
    edit(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def _backbone_key(key, value):
    return lambda config: config["weirdnet"]["config"]["backbone"].__setitem__(key, value)


@pytest.mark.parametrize("key,value,words", [
    ("norm_eps", -1, "config.backbone.norm_eps must be a positive number"),
    ("norm_eps", 0, "norm_eps must be a positive number"),
    ("rope_theta", -5.0, "rope_theta must be a positive number"),
    ("attn_dropout", 1.5, "attn_dropout must be in [0, 1)"),
    ("init_std", -0.02, "init_std must be None or a positive number"),
], ids=["norm-eps-negative", "norm-eps-zero", "rope-theta", "attn-dropout", "init-std"])
def test_an_out_of_range_model_value_in_an_export_is_one_line(saved, tmp_path, key, value,
                                                               words):
    """Issue 72 item 3: norm_eps = -1 loaded through both loaders and gave NaN logits."""
    copy = _edited_export(saved, tmp_path, _backbone_key(key, value))
    for load in (AutoModelForCausalLM.from_pretrained, wm.load):
        with pytest.raises(ValueError, match=re.escape(words)) as err:
            load(copy)
        assert "\n" not in str(err.value)


def test_an_export_too_deep_for_memory_is_refused_before_building(saved, tmp_path):
    """Issue 72 item 5: depth = 1,000,000,000 made from_pretrained build blocks for
    minutes; the parameter count is checked before anything is built."""
    copy = _edited_export(saved, tmp_path, _backbone_key("depth", 1_000_000_000))
    for load in (AutoModelForCausalLM.from_pretrained, wm.load):
        start = time.perf_counter()
        with pytest.raises(ValueError, match="parameters do not fit in this machine's memory"):
            load(copy)
        assert time.perf_counter() - start < 30


@pytest.mark.parametrize("key,value,words", [
    ("pad_token_id", "x", "pad_token_id must be int | None, got 'x' (str)"),
    ("pad_token_id", True, "pad_token_id must be int | None, got True (bool)"),
    ("eos_token_id", 2.5, "eos_token_id must be int | None"),
    ("bos_token_id", 256, "bos_token_id must be None or a token id in [0, 256)"),
    ("pad_token_id", -1, "pad_token_id must be None or a token id in [0, 256)"),
    ("use_cache", "yes", "use_cache must be bool"),
    ("weirdnet", [1], "weirdnet must be dict[str, Any] | None"),
    ("output_hidden_states", "x", "output_hidden_states must be bool | None"),
    ("architectures", 3, "architectures must be list[str] | None"),
    ("transformers_version", 5, "transformers_version must be str | None"),
    ("dtype", "nonsense", "dtype must name a torch dtype"),
    ("dtype", 5, "dtype must be str | torch.dtype | None"),
])
def test_a_field_of_the_wrong_type_in_an_export_is_one_line(saved, tmp_path, key, value,
                                                             words):
    """Issue 72 item 8: pad_token_id = "x" gave TypeError: '<' not supported; every field
    of the config (ours and transformers') is type-checked on load."""
    copy = _edited_export(saved, tmp_path, lambda config: config.__setitem__(key, value))
    with pytest.raises(ValueError, match=re.escape(words)) as err:
        AutoModelForCausalLM.from_pretrained(copy)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key,value", [("pad_token_id", "x"), ("eos_token_id", [3, "x"]),
                                       ("bos_token_id", -2)])
def test_a_tampered_generation_config_is_one_line(saved, tmp_path, key, value):
    """The export's generation_config.json is read by from_pretrained too: "x" there gave
    the same TypeError: '<' not supported."""
    copy = shutil.copytree(saved[2], tmp_path / "edited")
    path = copy / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    with pytest.raises(ValueError, match=re.escape(f"{path}: {key} must be None or a token "
                                                   "id >= 0")) as err:
        AutoModelForCausalLM.from_pretrained(copy)
    assert "\n" not in str(err.value)


_MARKER = "remote-code-ran"


def _tampered_copy(out, where):
    """A copy of the export whose module files write a marker and raise when imported."""
    copy = where / out.name  # the name its README loads
    shutil.copytree(out, copy)
    for name in hf.remote.REMOTE_FILES:
        (copy / name).write_text(f"import pathlib\npathlib.Path({str(where / _MARKER)!r})"
                                 f".write_text({name!r})\nraise RuntimeError('tampered')\n")
    return copy


def _code_blocks(markdown: str, language: str = "") -> list[str]:
    parts = markdown.split("```")[1::2]
    return [block.split("\n", 1)[1] for block in parts if block.startswith(language)]


def test_the_model_card_code_runs_no_file_of_the_folder(saved, tmp_path):
    copy = _tampered_copy(saved[2], tmp_path)
    code = "\n".join(_code_blocks((copy / "README.md").read_text(), "python"))
    code = code.replace("max_new_tokens=100", "max_new_tokens=5")
    env = {**subprocess_env(), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / _MARKER).exists()
    trusting = ("from transformers import AutoConfig\n"  # the files do run when trusted
                f"AutoConfig.from_pretrained({str(copy)!r}, trust_remote_code=True)")
    done = subprocess.run([sys.executable, "-c", trusting], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert "tampered" in done.stderr and (tmp_path / _MARKER).exists()


def test_no_documented_command_trusts_remote_code(saved):
    docs = (Path(__file__).parents[2] / "docs" / "hf.md").read_text()
    card = (saved[2] / "README.md").read_text()
    from weirdnet.cli.commands import export_hf, harness_tasks
    examples = [command.DESCRIPTION for command in (export_hf, harness_tasks)]
    for block in [*_code_blocks(docs), *_code_blocks(card), *examples]:
        commands = [line for line in block.splitlines()
                    if any(word in line for word in ("from_pretrained(", "--model_args"))]
        assert not any("trust_remote_code=True" in line for line in commands), block
    for text in (docs, card, *examples):  # where it is mentioned, its risk is stated
        assert "trust_remote_code" not in text or "run code as you" in text


# ---- outside this process: remote code and lm-evaluation-harness ------------------------

@pytest.mark.slow
def test_trust_remote_code_loads_without_importing_weirdnet_first(saved, tmp_path):
    lm, _, out = saved
    ids = _ids()
    torch.save(ids, tmp_path / "ids.pt")
    code = f"""
import sys, torch
from transformers import AutoModelForCausalLM
assert not any(name.startswith("weirdnet") for name in sys.modules)
model = AutoModelForCausalLM.from_pretrained({str(out)!r}, trust_remote_code=True).eval()
ids = torch.load({str(tmp_path / 'ids.pt')!r})
with torch.no_grad():
    torch.save(model(ids).logits, {str(tmp_path / 'logits.pt')!r})
print(type(model).__name__)
"""
    env = {**subprocess_env(), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WeirdNetForCausalLM" in done.stdout
    with torch.no_grad():
        want = lm(ids).logits
    assert torch.allclose(torch.load(tmp_path / "logits.pt"), want, atol=1e-6)


@pytest.mark.slow
def test_lm_eval_scores_the_export_offline(saved, tmp_path):
    lm, _, out = saved
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed: "
                        "pip install -e '.[harness]'")
    assert main(["harness-tasks", str(tmp_path / "tasks"), "--items", "12",
                 "--passages", "2"]) == 0
    env = {**subprocess_env(), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf-home")}
    tampered = _tampered_copy(out, tmp_path)  # lm_eval through weirdnet runs none of its files
    command = [sys.executable, "-m", "weirdnet.hf.harness", "--model", "hf", "--model_args",
               f"pretrained={tampered}", "--include_path", str(tmp_path / "tasks"), "--tasks",
               "weirdnet_stdlib_nextline,weirdnet_stdlib_bpb", "--device", "cpu",
               "--batch_size", "4", "--log_samples", "--output_path", str(tmp_path / "res")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / _MARKER).exists()
    assert "weirdnet_stdlib_nextline" in done.stdout and "bits_per_byte" in done.stdout
    samples = next((tmp_path / "res").rglob("samples_weirdnet_stdlib_nextline_*.jsonl"))
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(records) == 12
    for record in records:
        context = record["doc"]["context"].encode()
        for choice, response in zip(record["doc"]["choices"], record["filtered_resps"]):
            assert float(response[0]) == pytest.approx(_loglikelihood(lm, context,
                                                                      choice.encode()),
                                                       rel=1e-4, abs=1e-3)


def _loglikelihood(lm: WeirdNetLM, context: bytes, continuation: bytes) -> float:
    """log P(continuation | context) from the weirdnet model directly, on the last
    max_len + 1 bytes as lm-evaluation-harness cuts a long context."""
    tokens = list(context + continuation)[-(lm.max_len + 1):]
    with torch.no_grad():
        logp = lm(torch.tensor([tokens[:-1]])).logits[0].double().log_softmax(-1)
    count = len(continuation)
    targets = torch.tensor(tokens[-count:])
    return float(logp[-count:].gather(-1, targets[:, None]).sum())


def test_harness_items_hold_the_true_line_once():
    from weirdnet.hf.harness import held_out_lines, nextline_items

    lines = held_out_lines()
    items = nextline_items(lines, 30, seed=3)
    assert items == nextline_items(lines, 30, seed=3)
    for item in items:
        assert len(item["choices"]) == 4 and 0 <= item["label"] < 4
        assert all(choice.startswith("\n") for choice in item["choices"])
        assert not item["context"].endswith("\n")
        true = item["choices"][item["label"]].strip()
        assert [c.strip() for c in item["choices"]].count(true) == 1


def test_harness_items_sized_to_a_model_fit_without_truncation():
    """With max_len, every context plus every choice fits in max_len bytes (lm_eval cuts
    nothing), contexts are whole trailing lines of the unsized item's, and without it the
    items are the unsized ones (the default did not change)."""
    from weirdnet.hf.harness import CONTEXT_LINES, held_out_lines, nextline_items

    lines = held_out_lines()
    unsized = nextline_items(lines, 200, seed=0)
    assert all(item["context"].count("\n") == CONTEXT_LINES - 1 for item in unsized)
    too_long = sum(len(item["context"].encode()) + max(len(c.encode()) for c in
                                                       item["choices"]) > 256
                   for item in unsized)
    assert too_long > 0  # the problem the sizing solves: 6 lines often exceed 256 bytes
    sized = nextline_items(lines, 200, seed=0, max_len=256)
    for item in sized:
        longest = max(len(choice.encode()) for choice in item["choices"])
        assert len(item["context"].encode()) + longest <= 256
        assert item["context"] and not item["context"].endswith("\n")
    assert sum(item["context"].count("\n") + 1 for item in sized) > len(sized)  # > 1 line


def test_harness_tasks_refuse_a_max_len_with_no_room(tmp_path):
    from weirdnet.hf.harness import write_tasks

    with pytest.raises(ValueError, match="max_len=50"):
        write_tasks(tmp_path, items=4, passages_count=1, max_len=50)
    assert not any(tmp_path.iterdir())


def test_activation_checkpointing_enable_gives_the_same_gradients():
    """``supports_gradient_checkpointing``: transformers' switch
    (``activation_checkpointing_enable``, formerly ``gradient_checkpointing_enable``)
    reaches the backbone's blocks, and the gradients are those of the plain pass."""
    wrapped = hf.WeirdNetForCausalLM.from_weirdnet(_tiny_lm().double()).train()
    ids = _ids(batch=2, length=9)

    def grads():
        wrapped.zero_grad(set_to_none=True)
        wrapped(ids, labels=ids).loss.backward()
        return {n: p.grad.clone() for n, p in wrapped.named_parameters() if p.grad is not None}

    plain = grads()
    wrapped.activation_checkpointing_enable()
    assert wrapped.backbone.gradient_checkpointing and wrapped.is_activation_checkpointing
    checkpointed = grads()
    assert checkpointed.keys() == plain.keys()
    for name, grad in checkpointed.items():
        assert torch.allclose(grad, plain[name], rtol=1e-10, atol=1e-12), name
    wrapped.activation_checkpointing_disable()
    assert not wrapped.backbone.gradient_checkpointing


def test_packed_documents_through_the_hf_model(model):
    """doc_ids, or transformers' packing convention (position_ids restarting at each
    sequence, DataCollatorWithFlattening's): every document's logits are its own."""
    first, second = _ids(1, 7, seed=3), _ids(1, 5, seed=4)
    packed = torch.cat([first, second], 1)
    with torch.no_grad():
        alone = [model(first).logits, model(second).logits]
        by_ids = model(packed, doc_ids=torch.tensor([[0] * 7 + [1] * 5])).logits
        positions = torch.tensor([list(range(7)) + list(range(5))])
        by_positions = model(packed, position_ids=positions).logits
    for got in (by_ids, by_positions):
        assert torch.allclose(got[:, :7], alone[0], atol=1e-5)
        assert torch.allclose(got[:, 7:], alone[1], atol=1e-5)
    with pytest.raises(ValueError, match="full pass"):
        model(packed, doc_ids=torch.zeros(1, 12, dtype=torch.long), use_cache=True)
