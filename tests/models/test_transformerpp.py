"""The Transformer++ options (rotary positions, SwiGLU, RMSNorm, no biases) are the
standard ones: weights copied from a `transformers` LlamaForCausalLM give the same logits
(float32, 1e-5) and the same greedy continuation; cached decoding equals the full pass with
every option."""

import pytest
import torch

from weirdnet.config.typed import ConfigError
from weirdnet.models import WeirdNetLM
from weirdnet.models.config import BackboneConfig
from weirdnet.ops.rotary import rotary, rotary_angles

transformers = pytest.importorskip("transformers")

D, HEADS, DEPTH, D_FF, VOCAB, MAX_LEN = 32, 4, 2, 64, 61, 64


def _llama(tie: bool):
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=D, intermediate_size=D_FF, num_hidden_layers=DEPTH,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=MAX_LEN,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=tie, attention_bias=False,
        mlp_bias=False, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # away from the zero/one initialisation of the norms
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def _weirdnet_like(llama, tie: bool) -> WeirdNetLM:
    backbone = {"dim": D, "depth": DEPTH, "d_ff": D_FF, "heads": HEADS, "max_len": MAX_LEN,
                "pattern": "softmax", "causal": True, "vocab_size": VOCAB, "short_conv": 0,
                "positions": "rope", "norm": "rmsnorm", "activation": "swiglu",
                "bias": False, "norm_eps": 1e-6, "rope_theta": 10000.0}
    model = WeirdNetLM({"backbone": backbone, "tie_embeddings": tie}).eval()
    source, target = llama.model, model.backbone
    with torch.no_grad():
        target.embed.weight.copy_(source.embed_tokens.weight)
        for block, layer in zip(target.blocks, source.layers):
            attn, mlp = layer.self_attn, layer.mlp
            block.norm_mix.weight.copy_(layer.input_layernorm.weight)
            block.norm_ffn.weight.copy_(layer.post_attention_layernorm.weight)
            for mine, theirs in (("proj_q", "q_proj"), ("proj_k", "k_proj"),
                                 ("proj_v", "v_proj"), ("proj_o", "o_proj")):
                getattr(block.mixer, mine).weight.copy_(getattr(attn, theirs).weight)
            block.ffn.gate.weight.copy_(mlp.gate_proj.weight)
            block.ffn.inner.weight.copy_(mlp.up_proj.weight)
            block.ffn.outer.weight.copy_(mlp.down_proj.weight)
        target.norm.weight.copy_(source.norm.weight)
        if not tie:
            model.head.weight.copy_(llama.lm_head.weight)
    return model


@pytest.mark.parametrize("tie", [True, False])
def test_llama_weights_give_llamas_logits_and_greedy_tokens(tie):
    llama = _llama(tie)
    model = _weirdnet_like(llama, tie)
    assert sum(p.numel() for p in model.parameters()) == \
        sum(p.numel() for p in llama.parameters())
    ids = torch.randint(0, VOCAB, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = llama(ids).logits
        mine = model(ids).logits
    assert torch.isfinite(mine).all()
    assert (mine - theirs).abs().max() <= 1e-5 * max(1.0, theirs.abs().max().item())
    prompt = ids[:, :8]
    with torch.no_grad():
        theirs = llama.generate(prompt, max_new_tokens=20, do_sample=False,
                                attention_mask=torch.ones_like(prompt), pad_token_id=0)
    mine = model.generate(prompt, 20, temperature=0.0)
    assert torch.equal(mine, theirs)


def test_rotary_matches_transformers_and_keeps_relative_positions():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    q = torch.randn(2, 3, 9, 8)
    k = torch.randn(2, 3, 9, 8)
    pos = torch.arange(9).expand(2, 9)
    config = transformers.LlamaConfig(hidden_size=24, num_attention_heads=3, rope_theta=500.0)
    cos_t, sin_t = LlamaRotaryEmbedding(config)(q, pos)
    q_t, k_t = apply_rotary_pos_emb(q, k, cos_t, sin_t)
    cos, sin = rotary_angles(pos, 8, 500.0)
    assert torch.allclose(rotary(q, cos, sin), q_t, atol=1e-6)
    assert torch.allclose(rotary(k, cos, sin), k_t, atol=1e-6)
    # <R(p) q, R(s) k> depends on p - s only
    x, y = torch.randn(2, 1, 1, 1, 8, dtype=torch.float64).unbind(0)
    def dot(p, s):
        cp, sp = rotary_angles(torch.tensor([[p]]), 8, dtype=torch.float64)
        cs, ss = rotary_angles(torch.tensor([[s]]), 8, dtype=torch.float64)
        return (rotary(x, cp, sp) * rotary(y, cs, ss)).sum()
    assert torch.allclose(dot(7, 3), dot(104, 100))


OPTIONS = [
    {"positions": "rope", "norm": "rmsnorm", "activation": "swiglu", "bias": False,
     "short_conv": 4},
    {"positions": "none"},
    {"positions": "rope"},
    {"norm": "rmsnorm"},
    {"activation": "swiglu"},
    {"short_conv": 4},
    {"short_conv": 1, "positions": "none"},
    {"d_ff": 0},  # no feed-forward: Zoology's recall models
]


@pytest.mark.parametrize("pattern", ["softmax", "B", "A", "linear,local"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}"
                                                                   for k, v in o.items()))
def test_cached_decoding_equals_the_full_pass_with_every_option(pattern, options):
    torch.manual_seed(0)
    backbone = {"dim": 16, "depth": 2, "d_ff": 32, "heads": 2, "max_len": 32,
                "pattern": pattern, "causal": True, "vocab_size": 11, **options}
    model = WeirdNetLM({"backbone": backbone}).double().eval()
    if backbone["d_ff"] == 0:
        assert all(block.ffn is None and block.norm_ffn is None
                   for block in model.backbone.blocks)
    ids = torch.randint(0, 11, (2, 13))
    mask = torch.ones(2, 13, dtype=torch.bool)
    mask[1, :3] = False  # left padding: positions count real tokens only
    with torch.no_grad():
        full = model(ids, mask=mask).logits
        cache = model.backbone.init_cache(2, 32)
        first = model.logits(model.backbone(ids[:, :5], mask[:, :5], cache=cache))
        rest = [model.logits(model.backbone(ids[:, t:t + 1], mask[:, t:t + 1], cache=cache))
                for t in range(5, 13)]
    steps = torch.cat([first, *rest], dim=1)
    real = mask[:, :, None].expand_as(full)
    assert torch.allclose(steps[real], full[real], rtol=1e-10, atol=1e-10)


def test_bad_options_are_one_clear_error():
    for key, value, match in [("positions", "alibi", "positions must be one of"),
                              ("norm", "batchnorm", "norm must be one of"),
                              ("activation", "relu", "activation must be one of"),
                              ("rope_theta", 0.0, "rope_theta must be a positive"),
                              ("short_conv", -1, "short_conv must be 0"),
                              ("short_conv", True, "short_conv must be 0"),
                              ("d_ff", -1, "d_ff must be an int >= 0"),
                              ("d_ff", 2.5, "d_ff must be an int >= 0"),
                              ("init_std", 0.0, "init_std must be None or a positive"),
                              ("init_std", float("nan"), "init_std must be None")]:
        with pytest.raises(ConfigError, match=match):
            BackboneConfig(**{key: value})
    with pytest.raises(ValueError, match="even head width"):
        WeirdNetLM({"backbone": {"dim": 12, "depth": 1, "heads": 4, "pattern": "softmax",
                                 "causal": True, "positions": "rope"}})


@pytest.mark.parametrize("pattern", ["softmax", "B"])
def test_the_hugging_face_export_keeps_every_option(pattern, tmp_path):
    import weirdnet.hf as hf

    torch.manual_seed(0)
    backbone = {"dim": 32, "depth": 2, "d_ff": 48, "heads": 2, "max_len": 64,
                "pattern": pattern, "causal": True, "vocab_size": 256, **OPTIONS[0]}
    lm = WeirdNetLM({"backbone": backbone, "tie_embeddings": False}).eval()
    lm.save(tmp_path / "weirdnet")
    hf.export_hf(tmp_path / "weirdnet", tmp_path / "export")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "export").eval()
    ids = torch.randint(4, 256, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, lm(ids).logits)
    got = loaded.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    assert torch.equal(got, lm.generate(ids, 10, temperature=0))


def test_short_conv_is_a_causal_depthwise_convolution_that_skips_padding():
    from weirdnet.models.short_conv import ShortConv

    torch.manual_seed(0)
    conv = ShortConv(5, 3).double()
    x = torch.randn(2, 7, 5, dtype=torch.float64)
    y, state = conv(x)
    w, b = conv.conv.weight[:, 0], conv.conv.bias  # (D, k), (D,)
    for t in range(7):  # y_t = b + sum_j w[:, k-1-j] x_{t-j}
        want = b + sum(w[:, 2 - j] * x[:, t - j] for j in range(3) if t - j >= 0)
        assert torch.allclose(y[:, t], want, rtol=1e-12, atol=1e-12)
    assert torch.equal(state, x[:, -2:])
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, :2] = False  # left padding: the rest equals the sequence alone
    y_pad, _ = conv(x, mask)
    alone, _ = conv(x[1:, 2:])
    assert torch.allclose(y_pad[1, 2:], alone[0], rtol=1e-12, atol=1e-12)
    head, s1 = conv(x[:, :4])  # in two parts, through the state
    tail, s2 = conv(x[:, 4:], state=s1)
    assert torch.allclose(torch.cat([head, tail], 1), y) and torch.equal(s2, state)


def test_a_cache_with_short_convolutions_reorders_its_sequences():
    torch.manual_seed(0)
    backbone = {"dim": 16, "depth": 2, "d_ff": 32, "heads": 2, "max_len": 32,
                "pattern": "B", "causal": True, "vocab_size": 11, "short_conv": 3}
    model = WeirdNetLM({"backbone": backbone}).double().eval()
    ids = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        full = model(ids.flip(0)).logits
        cache = model.backbone.init_cache(2, 32)
        model.backbone(ids[:, :6], cache=cache)
        cache.reorder(torch.tensor([1, 0]))
        rest = model.logits(model.backbone(ids.flip(0)[:, 6:], cache=cache))
    assert torch.allclose(rest, full[:, 6:], rtol=1e-10, atol=1e-10)


def test_the_feed_forward_draws_its_weights_in_the_papers_order():
    """A seed gives the weights it gave before the SwiGLU gate existed (W_1, then W_2):
    every stored record's seed names the same initial model."""
    import math

    from weirdnet.models.blocks import FeedForward

    torch.manual_seed(7)
    ffn = FeedForward(8, 16, n_layers=2)
    torch.manual_seed(7)
    inner, outer = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
    torch.nn.init.normal_(inner.weight, std=1 / math.sqrt(8))
    torch.nn.init.normal_(outer.weight, std=1.7047 * math.sqrt((1 - 2 / 8) / (2 * 2 * 16)))
    assert torch.equal(ffn.inner.weight, inner.weight)
    assert torch.equal(ffn.outer.weight, outer.weight)


def test_init_std_draws_every_linear_and_embedding_weight_and_keeps_the_mixers_own():
    """``init_std = 0.02`` (Zoology's and GPT-2's): weights of N(0, 0.02), zero biases;
    Weird-attention's distance weights keep their own initialisation."""
    from weirdnet.models.backbone import normal_init

    torch.manual_seed(0)
    model = WeirdNetLM({"backbone": {"dim": 64, "depth": 2, "max_len": 64, "pattern": "B",
                                     "causal": True, "vocab_size": 300, "init_std": 0.02}})
    for name, module in model.backbone.named_modules():
        if isinstance(module, torch.nn.Linear | torch.nn.Embedding):
            assert abs(float(module.weight.detach().std()) - 0.02) < 0.003, name
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            assert not module.bias.detach().any(), name
    weights = model.backbone.blocks[0].mixer.w.detach().clone()
    normal_init(model.backbone, 0.02)
    assert torch.equal(model.backbone.blocks[0].mixer.w.detach(), weights)
