"""Peers from ``transformers`` (Llama, Mamba, Mamba-2, RWKV, Qwen3-Next, RecurrentGemma,
xLSTM) behind weirdnet's LM interface: built from their own config classes, trained by weirdnet's
trainer with its loss, saved, loaded, evaluated and sampled like a weirdnet LM."""

import json

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

from weirdnet.cli import main  # noqa: E402
from weirdnet.models import ConfigError, load  # noqa: E402
from weirdnet_lab.peers import PeerLM  # noqa: E402

CLASSES = {"llama": "LlamaForCausalLM", "mamba": "MambaForCausalLM",
           "mamba2": "Mamba2ForCausalLM", "rwkv": "RwkvForCausalLM",
           "qwen3-next": "Qwen3NextForCausalLM",
           "recurrent-gemma": "RecurrentGemmaForCausalLM", "xlstm": "xLSTMForCausalLM"}


def _peer(name: str, **backbone) -> PeerLM:
    torch.manual_seed(0)
    return PeerLM({"peer": name, "backbone": {"dim": 32, "depth": 2, "vocab_size": 40,
                                              "max_len": 64, "causal": True, **backbone}})


@pytest.mark.parametrize("name", sorted(CLASSES))  # fla's: test_peers_fla.py
def test_each_peer_is_the_transformers_model_with_weirdnets_loss(name):
    model = _peer(name).eval()
    assert type(model.peer).__name__ == CLASSES[name]
    direct = transformers.AutoModelForCausalLM.from_config(model.config.transformers_config())
    assert model.num_parameters() == sum(p.numel() for p in direct.parameters())
    cfg = model.peer.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (32, 2, 40)
    ids = torch.randint(0, 40, (2, 17), generator=torch.Generator().manual_seed(1))
    out = model(ids[:, :-1], ids[:, 1:])
    assert out.logits.shape == (2, 16, 40) and torch.isfinite(out.logits).all()
    want = F.cross_entropy(out.logits.reshape(-1, 40), ids[:, 1:].reshape(-1))
    assert torch.allclose(out.loss, want)
    with torch.no_grad():  # transformers' own loss (it shifts the labels itself)
        theirs = model.peer(ids, labels=ids, use_cache=False).loss
    assert torch.allclose(model(ids[:, :-1], ids[:, 1:]).loss, theirs, rtol=1e-5)


def test_the_mapping_of_widths_and_options():
    llama = _peer("llama", d_ff=48, heads=4).peer.config
    assert (llama.intermediate_size, llama.num_attention_heads, llama.num_key_value_heads,
            llama.max_position_embeddings) == (48, 4, 4, 64)
    assert _peer("llama").peer.config.intermediate_size == 96  # 8·32/3 up to a multiple of 32
    assert _peer("rwkv", d_ff=80).peer.config.intermediate_size == 80
    mamba2 = _peer("mamba2").peer.config
    assert mamba2.num_heads * mamba2.head_dim == 2 * 32
    qwen = _peer("qwen3-next", depth=6, d_ff=40).peer.config
    assert qwen.layer_types == (["linear_attention"] * 3 + ["full_attention"]
                                + ["linear_attention"] * 2)
    assert _peer("qwen3-next").peer.config.layer_types == ["linear_attention",
                                                            "full_attention"]
    assert qwen.mlp_only_layers == list(range(6)) and qwen.intermediate_size == 40
    assert (qwen.linear_num_key_heads, qwen.linear_num_value_heads,
            qwen.linear_key_head_dim, qwen.linear_value_head_dim) == (1, 2, 32, 32)
    wide = _peer("qwen3-next", dim=512, depth=4).peer.config
    assert (wide.linear_num_key_heads, wide.linear_num_value_heads,
            wide.num_attention_heads, wide.head_dim) == (4, 8, 8, 64)
    assert wide.layer_types[-1] == "full_attention" and wide.layer_types.count(
        "full_attention") == 1
    griffin = _peer("recurrent-gemma", depth=4, d_ff=40).peer.config
    assert griffin.block_types == ["recurrent", "recurrent", "attention", "recurrent"]
    assert griffin.intermediate_size == 80 and griffin.lru_width == 32
    assert _peer("recurrent-gemma").peer.config.block_types == ["recurrent", "attention"]
    xlstm = _peer("xlstm", dim=128, d_ff=40).peer
    assert xlstm.config.num_heads == 1 and xlstm.config.autocast_kernel_dtype == "float32"
    assert xlstm.backbone.blocks[0].ffn.up_proj_dim == 40  # exactly d_ff
    model = PeerLM({"peer": "mamba", "options": {"state_size": 8},
                    "backbone": {"dim": 32, "depth": 1, "vocab_size": 40, "causal": True}})
    assert model.peer.config.state_size == 8


@pytest.mark.parametrize("bad,match", [
    ({"peer": "gpt5"}, "peer must be one of"),
    ({"peer": "mamba", "backbone": {"dim": 32, "pattern": "B"}}, "pattern would be ignored"),
    ({"peer": "mamba", "backbone": {"dim": 32, "d_ff": 64}}, "d_ff would be ignored"),
    ({"peer": "llama", "backbone": {"dim": 32, "positions": "rope"}}, "positions would be"),
    ({"peer": "llama", "backbone": {"dim": 32, "vocab_size": None, "input_dim": 3}},
     "needs token inputs"),
])
def test_bad_peer_configs_are_one_clear_error(bad, match):
    with pytest.raises(ConfigError, match=match):
        PeerLM(bad)


def test_xlstm_widths_its_heads_or_its_cache_cannot_take_are_one_clear_error():
    with pytest.raises(ConfigError, match="must be a whole multiple of num_heads = 4"):
        PeerLM({"peer": "xlstm", "options": {"num_heads": 4},
                "backbone": {"dim": 36, "vocab_size": 40, "causal": True}})
    model = _peer("xlstm", dim=64).eval()  # trains and evaluates at any width ...
    assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()
    with pytest.raises(ValueError, match="multiple of 64, got 32"):  # ... but its cache
        model.generate(torch.tensor([[1, 2, 3]]), 2, temperature=0)


def test_save_load_and_seeded_generation(tmp_path):
    model = _peer("llama").eval()
    model.save(tmp_path / "m")
    again = load(tmp_path / "m")
    assert type(again) is PeerLM and again.config == model.config
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k
    peer = again.peer  # tied embeddings stay one tensor
    assert peer.lm_head.weight is peer.model.embed_tokens.weight
    prompt = torch.tensor([[1, 2, 3]])
    greedy = model.generate(prompt, 6, temperature=0)
    assert greedy.shape == (1, 9) and torch.equal(greedy, again.generate(prompt, 6, 0))
    seeded = [model.generate(prompt, 6, temperature=1.0,
                             generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(*seeded)


PEER_CONFIG = """
[run]
seed = 3
[data]
dataset = "python-stdlib"
options = {{ seq_len = 32, epoch_length = 256 }}
test_split = ""
[model]
peer = "{peer}"
[model.backbone]
dim = {dim}
depth = 2
[train]
steps = 4
batch_size = 4
eval_every = 2
eval_batches = 1
final_eval_batches = 2
log_every = 2
"""


@pytest.mark.slow
@pytest.mark.parametrize("peer", sorted(CLASSES))
def test_weirdnet_train_trains_evaluates_and_samples_each_peer(peer, tmp_path, capsys):
    config = tmp_path / f"{peer}.toml"
    # xLSTM's cache in transformers decodes only widths whose head splits are multiples of 64
    config.write_text(PEER_CONFIG.format(peer=peer, dim=128 if peer == "xlstm" else 32))
    run = tmp_path / "runs" / peer
    assert main(["train", str(config), "--set", f"run.out_dir={tmp_path / 'runs'}",
                 "--set", f"run.name={peer}", "--no-progress"]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["steps"] == 4 and results["results"]["val"]["bpc"] > 0
    assert type(load(run / "best")).__name__ == "PeerLM"
    assert main(["eval", str(run)]) == 0
    assert main(["generate", str(run), "--prompt", "def ", "--max-new-tokens", "5"]) == 0
    capsys.readouterr()


def test_a_peer_on_a_task_that_is_not_a_causal_lm_is_refused(tmp_path, capsys):
    config = tmp_path / "clf.toml"
    config.write_text('[data]\ndataset = "listops"\noptions = { n_train = 16, n_val = 8, '
                      'n_test = 8, min_length = 10, max_length = 40 }\n[model]\npeer = "llama"\n'
                      '[model.backbone]\ndim = 32\n[train]\nsteps = 1\nbatch_size = 2\n')
    assert main(["train", str(config), "--set", f"run.out_dir={tmp_path}"]) == 2
    assert "peer models are causal LMs" in capsys.readouterr().err


def test_info_describes_a_saved_peer_with_its_tied_weights_counted_once(tmp_path, capsys):
    model = _peer("mamba")
    model.save(tmp_path / "m")
    assert main(["info", str(tmp_path / "m")]) == 0
    text = capsys.readouterr().out
    assert "peer     MambaForCausalLM from transformers: D=32, 2 layers" in text
    assert f"parameters  {model.num_parameters():,}" in text and "layers: MambaBlock" in text


def test_mambas_decay_rate_and_skip_are_left_out_of_weight_decay():
    """mamba_ssm trains A_log and D without weight decay; the peer carries that mark and
    the trainer's optimiser honours it (Mamba's A_log is a matrix)."""
    from weirdnet.train import TrainConfig, make_optimizer

    model = _peer("mamba")
    marked = {n for n, p in model.named_parameters() if getattr(p, "_no_weight_decay", False)}
    assert marked and all(n.endswith(("A_log", ".D")) for n in marked)
    optimizer = make_optimizer(model, TrainConfig.from_dict({"data": {"dataset": "wiki-xml"}}))
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0
               for p in g["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    assert not any(names[i].endswith("A_log") for i in decayed)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    assert not any(getattr(p, "_no_weight_decay", False)
                   for p in _peer("llama").parameters())
    gated = {n for n, p in _peer("qwen3-next").named_parameters()
             if getattr(p, "_no_weight_decay", False)}
    assert gated and all(n.endswith(("A_log", "dt_bias")) for n in gated)


@pytest.mark.parametrize("name,dim", [("qwen3-next", 32), ("recurrent-gemma", 32),
                                      ("xlstm", 128)])
def test_a_recurrent_peers_cached_greedy_decoding_is_its_full_pass(name, dim):
    """The hybrids and xLSTM decode through their own caches (Gated DeltaNet's, the
    RG-LRU's and the mLSTM's recurrent states, beside an attention cache in the hybrids):
    greedy tokens equal re-reading the whole prefix at every step."""
    model = _peer(name, dim=dim).eval()
    prompt = torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(4))
    cached = model.generate(prompt, 8, temperature=0)
    ids = prompt
    with torch.no_grad():
        for _ in range(8):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(cached, ids)


@pytest.mark.parametrize("name", ["llama", "mamba2"])
def test_activation_checkpointing_of_a_peer_gives_the_same_gradients(name):
    """``train.activation_checkpointing`` reaches a peer through transformers' own
    switch; the gradients are those of the plain pass."""
    from weirdnet.train import enable_activation_checkpointing

    model = _peer(name).double().train()
    ids = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(0))

    def grads():
        model.zero_grad(set_to_none=True)
        model(ids[:, :-1], ids[:, 1:]).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    enable_activation_checkpointing(model, "blocks", 2)
    assert model.peer.is_activation_checkpointing
    for key, grad in grads().items():
        assert torch.allclose(grad, plain[key], rtol=1e-9, atol=1e-12), key


def test_a_peer_selects_logits_and_loss_at_the_asked_positions():
    model = _peer("llama").eval()
    ids = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(2))
    at = torch.zeros(2, 9, dtype=torch.bool)
    at[0, 3], at[1, 5:7] = True, True
    targets = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    full = model(ids, targets.masked_fill(~at, -100))
    part = model(ids, targets, logits_at=at)
    assert part.logits.shape == (3, 40)
    assert torch.allclose(part.logits, full.logits[at]) and torch.allclose(part.loss, full.loss)
