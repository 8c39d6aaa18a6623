"""The flash-linear-attention peers (``fla-gated-deltanet``, ``fla-mamba2``): fla's own
models behind weirdnet's LM interface.  Where fla is missing, one clear error naming the
install command; where it is importable (``PYTHONPATH`` to a ``pip install --no-deps
--target`` folder of its wheels is enough), construction, the mapping of widths and the
parameter matching on the CPU; the forward (fla's Triton kernels) on CUDA only."""

import sys

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

from weirdnet.cli import main  # noqa: E402
from weirdnet.models import load  # noqa: E402
from weirdnet_lab import matching  # noqa: E402
from weirdnet_lab.peers import FLA_INSTALL, FLA_PEERS, PeerLM  # noqa: E402

CLASSES = {"fla-gated-deltanet": "GatedDeltaNetForCausalLM",
           "fla-mamba2": "Mamba2ForCausalLM"}


def _fla_importable() -> bool:
    try:
        import fla.models  # noqa: F401
    except ImportError:
        return False
    return True


needs_fla = pytest.mark.skipif(not _fla_importable(),
                               reason=f"flash-linear-attention is not installed "
                                      f"({FLA_INSTALL})")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="fla runs on CUDA")


def _peer(name: str, **backbone) -> PeerLM:
    torch.manual_seed(0)
    return PeerLM({"peer": name, "backbone": {"dim": 64, "depth": 2, "vocab_size": 40,
                                              "max_len": 64, "causal": True, **backbone}})


@pytest.fixture
def no_fla(monkeypatch):
    """fla as if it were not installed (an import of it raises ImportError)."""
    for name in [m for m in sys.modules if m == "fla" or m.startswith("fla.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "fla", None)
    monkeypatch.setitem(sys.modules, "fla.models", None)
    matching._matched_cached.cache_clear()
    yield
    matching._matched_cached.cache_clear()


@pytest.mark.parametrize("name", sorted(FLA_PEERS))
def test_without_fla_a_peer_is_one_error_naming_the_install_command(name, no_fla):
    with pytest.raises(ImportError, match="flash-linear-attention==0.6.0"):
        _peer(name)


def test_bench_speed_without_fla_is_one_line_and_exit_2(no_fla, tmp_path, capsys):
    status = main(["bench", "speed", "--task", "lm", "--mechanisms", "fla-gated-deltanet",
                   "--lengths", "64", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("weirdnet bench speed: peer 'fla-gated-deltanet' comes from "
                          "flash-linear-attention") and FLA_INSTALL in err


def test_weirdnet_train_without_fla_is_one_line_and_exit_2(no_fla, tmp_path, capsys):
    config = tmp_path / "gdn.toml"
    config.write_text('[data]\ndataset = "python-stdlib"\noptions = { seq_len = 32 }\n'
                      '[model]\npeer = "fla-gated-deltanet"\n[model.backbone]\ndim = 32\n'
                      '[train]\nsteps = 1\nbatch_size = 2\n')
    assert main(["train", str(config), "--set", f"run.out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and FLA_INSTALL in err[0], err


@needs_fla
@pytest.mark.parametrize("name", sorted(FLA_PEERS))
def test_each_fla_peer_is_flas_own_model(name, tmp_path):
    import fla.models

    model = _peer(name)
    assert type(model.peer).__name__ == CLASSES[name]
    assert type(model.peer).__module__.startswith("fla.models")
    direct = getattr(fla.models, CLASSES[name])(model.config.transformers_config())
    assert model.num_parameters() == sum(p.numel() for p in direct.parameters())
    cfg = model.peer.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (64, 2, 40)
    assert model.peer.get_output_embeddings().weight is model.peer.get_input_embeddings(
        ).weight  # tied, as every peer's
    model.save(tmp_path / "m")
    again = load(tmp_path / "m")
    assert type(again.peer) is type(model.peer) and again.config == model.config
    for (key, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), key


@needs_fla
def test_the_mapping_of_widths_keeps_flas_proportions():
    gdn = _peer("fla-gated-deltanet", dim=1024, d_ff=96).peer.config
    assert (gdn.head_dim, gdn.num_heads, gdn.expand_v, gdn.intermediate_size,
            gdn.max_position_embeddings) == (256, 3, 2.0, 96, 64)
    small = _peer("fla-gated-deltanet").peer.config  # one head of the whole width
    assert (small.head_dim, small.num_heads, small.intermediate_size) == (64, 1, None)
    mamba2 = _peer("fla-mamba2").peer.config
    assert (mamba2.num_heads * mamba2.head_dim, mamba2.state_size, mamba2.n_groups) == (
        2 * 64, 128, 1)
    options = PeerLM({"peer": "fla-mamba2", "options": {"state_size": 16},
                      "backbone": {"dim": 32, "depth": 1, "vocab_size": 40, "causal": True}})
    assert options.peer.config.state_size == 16


@needs_fla
@pytest.mark.parametrize("name", sorted(FLA_PEERS))
def test_fla_peers_are_matched_to_the_reference_like_the_other_peers(name):
    widths = {"dim": 256, "depth": 4, "d_ff": 1024, "heads": 4}
    table, got, target = matching.matched_variant(name, widths)
    assert abs(got - target) <= matching.TOLERANCE * target
    knob = "depth" if name == "fla-mamba2" else "d_ff"
    assert matching.knob(table) == knob and table["backbone"]["dim"] == 256
    if name == "fla-mamba2":  # the same blocks as transformers' Mamba-2: the same count
        assert got == matching.matched_variant("mamba2", widths)[1]


@needs_fla
@needs_cuda
@pytest.mark.parametrize("name", sorted(FLA_PEERS))
def test_an_fla_peer_trains_in_bf16_with_weirdnets_loss_on_cuda(name):
    model = _peer(name).cuda()
    ids = torch.randint(0, 40, (2, 65), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(ids[:, :-1], ids[:, 1:])
    assert out.logits.shape == (2, 64, 40) and torch.isfinite(out.logits).all()
    want = F.cross_entropy(out.logits.float().reshape(-1, 40), ids[:, 1:].reshape(-1))
    assert torch.allclose(out.loss.float(), want, rtol=1e-3)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
