"""Models: shapes for every pattern, padding, causality, cached generation, errors."""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.config.typed import from_dict
from weirdnet.models import (
    BackboneConfig,
    ClassifierConfig,
    ConfigError,
    LMConfig,
    Seq2SeqConfig,
    WeirdNetClassifier,
    WeirdNetDualEncoder,
    WeirdNetLM,
    WeirdNetSeq2Seq,
)
from weirdnet.models.size import check_fits_in_memory, parameter_count

CAUSAL_PATTERNS = ["B", "A", "softmax", "ps", "relation", "linear", "local", "weird,relation"]
ENCODER_PATTERNS = ["A", "B", "dba", "relation", "linformer", "linear", "local", "ps",
                    "weird,dba"]


def backbone(pattern="B", causal=True, **options):
    config = {"dim": 32, "depth": 3, "max_len": 64, "pattern": pattern, "causal": causal,
              "vocab_size": 50, "heads": 4,
              "mixer_options": {"local": {"window": 5}, "linformer": {"k": 8}}}
    config.update(options)
    return config


def lm(pattern="B", seed=0, **options):
    torch.manual_seed(seed)
    return WeirdNetLM({"backbone": backbone(pattern, True, **options)}).double().eval()


def classifier(pattern="A", causal=False, seed=0, **options):
    torch.manual_seed(seed)
    config = {"backbone": backbone(pattern, causal, **options), "num_classes": 3}
    return WeirdNetClassifier(config).double().eval()


def tokens(batch, length, seed=1, vocab=50):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pattern", CAUSAL_PATTERNS)
def test_lm_shapes_and_loss(pattern):
    model = lm(pattern)
    x = tokens(2, 17)
    out = model(x[:, :-1], x[:, 1:])
    assert out.logits.shape == (2, 16, 50)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("pattern", ENCODER_PATTERNS)
def test_classifier_shapes(pattern):
    model = classifier(pattern)
    out = model(tokens(3, 20), labels=torch.tensor([0, 1, 2]))
    assert out.logits.shape == (3, 3) and torch.isfinite(out.loss)


def test_continuous_inputs_and_dual_encoder_shapes():
    torch.manual_seed(0)
    config = {"backbone": backbone("A", False, vocab_size=None, input_dim=6), "num_classes": 4}
    model = WeirdNetClassifier(config)
    assert model(torch.randn(2, 11, 6)).logits.shape == (2, 4)
    dual = WeirdNetDualEncoder({"backbone": backbone("A", False), "mlp_dim": 16})
    out = dual(tokens(2, 9), tokens(2, 13, seed=2), labels=torch.tensor([0, 1]))
    assert out.logits.shape == (2, 2) and torch.isfinite(out.loss)


def test_patterns_resolve_as_the_papers_say():
    assert BackboneConfig(depth=4, pattern="A").mixers == ["weird"] * 4
    assert BackboneConfig(depth=5, pattern="B").mixers == ["weird", "softmax"] * 2 + ["weird"]
    assert BackboneConfig(depth=3, pattern="dba,relation").mixers == ["dba", "relation", "dba"]
    with pytest.raises(ConfigError, match="unknown mixer"):
        BackboneConfig(pattern="weird,sofmax")


@pytest.mark.parametrize("pattern,causal", [(p, False) for p in ENCODER_PATTERNS]
                         + [(p, True) for p in ("B", "relation", "linear")])
def test_padding_never_changes_pooled_outputs(pattern, causal):
    model = classifier(pattern, causal)
    lengths = [20, 7, 13]
    x = tokens(3, 20)
    mask = torch.arange(20) < torch.tensor(lengths)[:, None]
    padded = x.masked_fill(~mask, 49)  # arbitrary pad token: it must not matter
    batch = model(padded, mask).logits
    for i, n in enumerate(lengths):
        alone = model(x[i:i + 1, :n]).logits[0]
        assert rel_err(batch[i], alone) < 1e-10, (pattern, i)


@pytest.mark.parametrize("pattern", CAUSAL_PATTERNS)
def test_lm_never_sees_the_future(pattern):
    model = lm(pattern)
    x = tokens(2, 30)
    y = x.clone()
    y[:, 18:] = tokens(2, 12, seed=5)
    a, b = model(x).logits, model(y).logits
    assert torch.equal(a[:, :18], b[:, :18]) or rel_err(a[:, :18], b[:, :18]) < 1e-13
    assert rel_err(a[:, 18:], b[:, 18:]) > 1e-3


@pytest.mark.parametrize("pattern", CAUSAL_PATTERNS)
def test_cached_steps_equal_the_full_forward(pattern):
    """Prefill then one token at a time: the logits at every step equal a full forward."""
    model = lm(pattern)
    x = tokens(2, 40)
    full = model(x).logits
    cache = model.backbone.init_cache(2, 40)
    pieces = [model.logits(model.backbone(x[:, :9], cache=cache))]
    for t in range(9, 40):
        pieces.append(model.logits(model.backbone(x[:, t:t + 1], cache=cache)))
    assert rel_err(torch.cat(pieces, 1), full) < 1e-10


@pytest.mark.parametrize("pattern", ["B", "softmax", "A"])
def test_generate_equals_recomputing_the_full_forward(pattern):
    model = lm(pattern)
    out = model.generate(tokens(2, 6), 20, temperature=0)
    assert out.shape == (2, 26)
    for t in range(6, 26):  # every greedy choice is the argmax of a full recompute
        assert torch.equal(model(out[:, :t]).logits[:, -1].argmax(-1), out[:, t])


def test_sampled_generation_matches_full_recompute_with_the_same_seed():
    model = lm("B")
    prompt = tokens(3, 5)
    out = model.generate(prompt, 12, temperature=0.8, top_k=10, top_p=0.9,
                         generator=torch.Generator().manual_seed(3))
    from weirdnet.models.decoding.sampling import sample_next

    gen = torch.Generator().manual_seed(3)
    seq = prompt
    for _ in range(12):
        nxt = sample_next(model(seq).logits[:, -1], 0.8, 10, 0.9, gen)
        seq = torch.cat([seq, nxt[:, None]], 1)
    assert torch.equal(seq, out)


def test_left_padded_prompts_generate_as_if_alone():
    model = lm("B")
    x = tokens(2, 8)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, :3] = False
    batch = model.generate(x, 10, temperature=0, prompt_mask=mask)
    alone = model.generate(x[1:, 3:], 10, temperature=0)
    assert torch.equal(batch[1, 8:], alone[0, 5:])


def test_top_k_1_is_greedy_and_eos_stops():
    model = lm("B")
    prompt = tokens(2, 4)
    greedy = model.generate(prompt, 8, temperature=0)
    assert torch.equal(model.generate(prompt, 8, top_k=1), greedy)
    eos = int(greedy[0, 4])
    out = model.generate(prompt, 8, temperature=0, eos_id=eos)
    assert (out[0, 4:] == eos).all()


def test_generation_restores_training_mode():
    model = lm("B").train()
    model.generate(tokens(1, 3), 2)
    assert model.training


@pytest.mark.parametrize("cross", ["softmax", "dba"])
def test_seq2seq_generation_and_source_padding(cross):
    torch.manual_seed(0)
    config = {"encoder": backbone("A", False), "decoder": backbone("B", True), "cross": cross}
    model = WeirdNetSeq2Seq(config).double().eval()
    src = tokens(2, 25)
    src_mask = torch.arange(25) < torch.tensor([[25], [16]])
    out = model.generate(src, 10, bos_id=1, temperature=0, src_mask=src_mask)
    teacher = model(src, out[:, :-1], src_mask=src_mask).logits
    assert torch.equal(teacher.argmax(-1), out[:, 1:])
    alone = model(src[1:, :16], out[1:, :-1]).logits
    assert rel_err(teacher[1:], alone) < 1e-10
    loss = model(src, out[:, :-1], src_mask=src_mask, targets=out[:, 1:]).loss
    assert torch.isfinite(loss)


def test_seq2seq_decoder_is_causal_with_dba_cross():
    torch.manual_seed(0)
    config = {"encoder": backbone("A", False), "decoder": backbone("B", True), "cross": "dba"}
    model = WeirdNetSeq2Seq(config).double().eval()
    src, tgt = tokens(1, 12), tokens(1, 10, seed=3)
    other = tgt.clone()
    other[:, 6:] = 0
    a, b = model(src, tgt).logits, model(src, other).logits
    assert rel_err(a[:, :6], b[:, :6]) < 1e-13


def test_initialisation_follows_the_papers():
    torch.manual_seed(0)
    model = WeirdNetLM({"backbone": {"dim": 256, "depth": 6, "d_ff": 1024, "max_len": 128,
                                     "pattern": "A", "causal": True}})
    block = model.backbone.blocks[0]
    D, N, d_ff = 256, 6, 1024
    expected = {
        "embed": D ** -0.5, "pos": D ** -0.5, "inner": D ** -0.5,
        "outer": 1.7047 * ((1 - 2 / D) / (2 * N * d_ff)) ** 0.5,
        "proj_o": ((1 - 2 / D) / (2 * N * D)) ** 0.5, "w": 1.0,
    }
    measured = {
        "embed": model.backbone.embed.weight.detach().std(),
        "pos": model.backbone.pos.weight.detach().std(),
        "inner": block.ffn.inner.weight.detach().std(),
        "outer": block.ffn.outer.weight.detach().std(),
        "proj_o": block.mixer.proj_o.weight.detach().std(), "w": block.mixer.w.detach().std(),
    }
    for name, std in expected.items():
        assert abs(float(measured[name]) / std - 1) < 0.1, name
    assert float(block.ffn.inner.bias.detach().abs().max()) == 0


def test_bad_inputs_give_clear_errors():
    model = lm("B")
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 50\)"):
        model(torch.tensor([[3, 50]]))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.randn(1, 4))
    with pytest.raises(ValueError, match="exceeds max_len=64"):
        model(tokens(1, 65))
    with pytest.raises(ValueError, match="exceeds the model's max_len=64"):
        model.generate(tokens(1, 60), 5)
    with pytest.raises(ValueError, match="left padding"):
        model.generate(tokens(1, 4), 2, prompt_mask=torch.tensor([[True, True, False, True]]))
    with pytest.raises(ValueError, match="temperature"):
        model.generate(tokens(1, 4), 2, temperature=-1)
    with pytest.raises(ValueError, match="not causal"):
        WeirdNetLM({"backbone": backbone("dba", True)})
    with pytest.raises(ConfigError, match="did you mean 'depth'"):
        WeirdNetLM({"backbone": {**backbone(), "deph": 2}})
    with pytest.raises(ConfigError, match="causal backbone"):
        WeirdNetLM({"backbone": backbone("A", False)})
    with pytest.raises(ValueError, match="unknown option"):
        WeirdNetLM({"backbone": backbone("B", mixer_options={"weird": {"window": 3}})})


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_info_on_a_missing_model_directory_says_so(tmp_path, monkeypatch, where):
    """``weirdnet info runs/X/best`` with best/ missing (issue 35): the path does not exist
    and holds no model, one line; never "unknown preset"."""
    from weirdnet.models.info import TargetError, resolve_target

    (tmp_path / "runs" / "X" / "checkpoints").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    target = "runs/X/best" if where == "relative" else str(tmp_path / "runs/X/best")
    with pytest.raises(TargetError) as info:
        resolve_target(target)
    message = str(info.value)
    assert f"{target} does not exist" in message and "holds no saved model" in message
    assert "unknown preset" not in message and "\n" not in message


def test_info_targets_that_name_no_model(tmp_path, monkeypatch):
    """A file, a directory without a model (a run directory points to its best/), and an
    unknown preset name each give their own one-line TargetError (a ValueError)."""
    from weirdnet.models.info import TargetError, describe_target

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "run" / "best").mkdir(parents=True)
    expected = {"notes.txt": "is a file, not a saved model directory",
                "run": "a training run keeps its model in run/best",
                "lra-lstops": "did you mean lra-listops"}
    for target, words in expected.items():
        with pytest.raises(TargetError, match=words) as info:
            describe_target(target)
        assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    assert "structure B" in describe_target("weirdnet-small")


def test_cli_info_on_a_missing_model_directory(tmp_path, capsys):
    """The CLI end (needs cli.py's ``_run_info`` to use ``describe_target``): one line on
    stderr naming the missing path, exit status 2."""
    from weirdnet.cli import main

    missing = tmp_path / "runs" / "X" / "best"
    assert main(["info", str(missing)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("weirdnet info: ")
    assert f"{missing} does not exist" in err and "unknown preset" not in err


# ---- classifier readouts: pooling = auto | mean | last | first | cls (issue 29) ----------

def pooled(pooling, pattern="A", causal=False, model_class=WeirdNetClassifier, **options):
    torch.manual_seed(0)
    config = {"backbone": backbone(pattern, causal, **options), "pooling": pooling}
    if model_class is WeirdNetClassifier:
        config["num_classes"] = 3
    return model_class(config).double().eval()


def test_pool_first_and_last_read_the_valid_ends():
    from weirdnet.models.classifier import pool

    hidden = torch.arange(2 * 5, dtype=torch.float64).reshape(2, 5, 1)
    mask = torch.tensor([[False, False, True, True, False], [True, True, True, True, True]])
    assert pool(hidden, mask, "first")[:, 0].tolist() == [2.0, 5.0]
    assert pool(hidden, mask, "last")[:, 0].tolist() == [3.0, 9.0]
    assert pool(hidden, None, "first")[:, 0].tolist() == [0.0, 5.0]
    assert pool(hidden, None, "cls")[:, 0].tolist() == [0.0, 5.0]


@pytest.mark.parametrize("pooling", ["first", "cls", "mean"])
@pytest.mark.parametrize("pattern", ["A", "relation", "dba", "softmax"])
def test_padding_never_changes_first_and_cls_readouts(pooling, pattern):
    model = pooled(pooling, pattern)
    lengths = [20, 7, 13]
    x = tokens(3, 20)
    mask = torch.arange(20) < torch.tensor(lengths)[:, None]
    batch = model(x.masked_fill(~mask, 49), mask).logits
    for i, n in enumerate(lengths):
        assert rel_err(batch[i], model(x[i:i + 1, :n]).logits[0]) < 1e-10, (pooling, i)


def test_first_pooling_reads_the_first_position_of_the_top_layer():
    model = pooled("first", "relation")
    x = tokens(2, 12)
    hidden = model.backbone(x)
    assert torch.equal(model.encode(x), hidden[:, 0])


def test_cls_is_a_learned_token_at_position_zero():
    """The CLS embedding is a parameter (saved with the weights); the tokens move to
    positions 1..L; max_len still counts tokens, the backbone has one more position."""
    model = pooled("cls", "softmax", max_len=16)
    assert isinstance(model.backbone.cls, torch.nn.Parameter)
    assert model.backbone.cls.shape == (1, 1, 32) and "backbone.cls" in model.state_dict()
    assert model.backbone.pos.num_embeddings == 17 and model.config.backbone.max_len == 16
    x = tokens(2, 16)
    want = model.backbone.cls[0, 0] + model.backbone.pos.weight[0]
    got = model.backbone.embed_inputs(torch.cat([torch.zeros_like(x[:, :1]), x], 1), None)
    assert torch.equal(got[:, 0], want.expand(2, -1))
    assert torch.equal(got[:, 1:], model.backbone.embed(x) + model.backbone.pos.weight[1:])
    out = model(x, labels=torch.tensor([0, 2]))
    out.loss.backward()
    assert model.backbone.cls.grad is not None and model.backbone.cls.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"exceeds max_len=16: .*CLS token"):
        model(tokens(1, 17))


def test_cls_with_continuous_inputs_and_in_the_dual_encoder():
    model = pooled("cls", vocab_size=None, input_dim=6)
    values = torch.randn(2, 9, 6, dtype=torch.float64)
    mask = torch.tensor([[True] * 9, [True] * 4 + [False] * 5])
    assert rel_err(model(values, mask).logits[1], model(values[1:, :4]).logits[0]) < 1e-10
    for pooling in ("cls", "first"):
        dual = pooled(pooling, model_class=WeirdNetDualEncoder)
        mask2 = torch.arange(13) < torch.tensor([13, 5])[:, None]
        a = dual(tokens(2, 9), tokens(2, 13, seed=2), mask2=mask2).logits
        b = dual(tokens(2, 9)[1:], tokens(2, 13, seed=2)[1:, :5]).logits
        assert rel_err(a[1], b[0]) < 1e-10, pooling


@pytest.mark.parametrize("pooling", ["first", "cls"])
def test_causal_backbones_refuse_first_position_readouts(pooling):
    """A causal backbone's first position sees only itself: one line that names the fix."""
    for model_class in (WeirdNetClassifier, WeirdNetDualEncoder):
        with pytest.raises(ConfigError, match=r"sees only itself .* use 'last'"):
            pooled(pooling, "B", True, model_class)
    with pytest.raises(ConfigError, match="pooling must be one of"):
        pooled("max")


@pytest.mark.parametrize("pooling", ["first", "cls"])
@pytest.mark.parametrize("model_class", [WeirdNetClassifier, WeirdNetDualEncoder])
def test_save_load_round_trips_the_readout(pooling, model_class, tmp_path):
    from weirdnet.config.typed import from_dict, to_dict
    from weirdnet.models import load

    model = pooled(pooling, "weird,dba", model_class=model_class)
    assert from_dict(model.config_class, to_dict(model.config)) == model.config
    model.save(tmp_path / "m")
    loaded = load(tmp_path / "m").double().eval()
    assert loaded.config.pooling == pooling and loaded.pooling == pooling
    ours, theirs = model.state_dict(), loaded.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    x = tokens(2, 11)
    args = (x,) if model_class is WeirdNetClassifier else (x, tokens(2, 7, seed=3))
    assert torch.equal(model(*args).logits, loaded(*args).logits)


@pytest.mark.parametrize("key", ["norm_eps", "rope_theta", "init_std"])
@pytest.mark.parametrize("value", [-1.0, 0.0, float("nan"), float("inf"), "x", True])
def test_every_positive_number_of_the_backbone_is_range_checked(key, value):
    """Issue 72 item 3: norm_eps = -1 (or 0, NaN) was accepted and gave NaN outputs."""
    with pytest.raises(ConfigError, match=f"^{key} must be .*positive number, got"):
        BackboneConfig(**{key: value})
    with pytest.raises(ConfigError, match=f"^model.backbone.{key} must be"):
        from_dict(LMConfig, {"backbone": {"causal": True, key: value}}, where="model")


@pytest.mark.parametrize("key", ["dropout", "attn_dropout"])
@pytest.mark.parametrize("value", [-0.1, 1.0, float("nan"), "x"])
def test_dropouts_are_range_checked(key, value):
    with pytest.raises(ConfigError, match=rf"^{key} must be in \[0, 1\), got"):
        BackboneConfig(**{key: value})


@pytest.mark.parametrize("pattern", ["A", "B", "weird,softmax,linear"])
@pytest.mark.parametrize("depth", [1, 2, 3, 7, 10])
def test_the_parameter_count_before_building_is_the_built_models(pattern, depth):
    """weirdnet.models.size counts deep backbones from one and two pattern cycles (DBA
    layers that hand Z on included)."""
    config = LMConfig(BackboneConfig(dim=16, depth=depth, heads=2, max_len=32, causal=True,
                                     pattern=pattern), tie_embeddings=False)
    assert parameter_count(WeirdNetLM, config) == WeirdNetLM(config).num_parameters()
    classifier = ClassifierConfig(BackboneConfig(dim=16, depth=depth, heads=2, max_len=32,
                                                 pattern="dba,weird,dba"))
    assert parameter_count(WeirdNetClassifier, classifier) == \
        WeirdNetClassifier(classifier).num_parameters()
    seq = Seq2SeqConfig(encoder=BackboneConfig(dim=16, depth=depth, heads=2, max_len=32),
                        decoder=BackboneConfig(dim=16, depth=depth + 2, heads=2, max_len=32,
                                               causal=True, pattern="B"), cross="dba")
    assert parameter_count(WeirdNetSeq2Seq, seq) == WeirdNetSeq2Seq(seq).num_parameters()


def test_a_model_too_large_for_memory_is_refused_at_once():
    config = LMConfig(BackboneConfig(dim=16, depth=10**9, max_len=32, causal=True))
    with pytest.raises(ConfigError, match=r"^[\d,]+ parameters do not fit in this machine"):
        check_fits_in_memory(WeirdNetLM, config)
    check_fits_in_memory(WeirdNetLM, LMConfig())


def test_continuous_inputs_of_another_dtype_than_the_model_are_one_line():
    """Issue 72 item 7, the same mistake in the backbone's input projection: float64
    values into a float32 model raised torch's "mat1 and mat2 must have the same dtype"."""
    torch.manual_seed(0)
    model = WeirdNetClassifier({"backbone": {"dim": 16, "depth": 2, "heads": 2, "max_len": 32,
                                             "vocab_size": None, "input_dim": 3}})
    for dtype in (torch.float64, torch.float16):
        with pytest.raises(ValueError, match=f"^inputs is {dtype} but Backbone's parameters "
                                             "are torch.float32"):
            model(torch.randn(2, 5, 3, dtype=dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(model(torch.randn(2, 5, 3, dtype=torch.bfloat16)).logits).all()
