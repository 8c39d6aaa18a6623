"""CUDA-graph decoding (weirdnet.models.decoding.graph_decode): the static-buffer step whose scan
position is a tensor gives the full pass's greedy tokens; eagerly on a CPU, captured and
replayed on CUDA; ``weirdnet generate --cuda-graph`` refuses what it cannot do."""

import pytest
import torch

from weirdnet.cli import main
from weirdnet.models import WeirdNetLM
from weirdnet.models.decoding.generation import Sampling
from weirdnet.models.decoding.graph_decode import StaticStep, graph_generate, supported

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _model(pattern: str = "A", **backbone) -> WeirdNetLM:
    torch.manual_seed(0)
    return WeirdNetLM({"backbone": {"dim": 32, "depth": 2, "d_ff": 64, "heads": 2,
                                    "max_len": 1100, "pattern": pattern, "causal": True,
                                    "vocab_size": 40, **backbone}}).eval()


def _full_pass_greedy(model, out: torch.Tensor, prompt_len: int) -> torch.Tensor:
    with torch.no_grad():
        return model(out[:, :-1]).logits.argmax(-1)[:, prompt_len - 1:]


@pytest.mark.parametrize("prompt_len,new", [(1, 1), (1, 2), (2, 3), (3, 7), (7, 40)])
def test_the_static_step_gives_the_full_pass_greedy_tokens(prompt_len, new):
    model = _model()
    prompt = torch.randint(0, 40, (2, prompt_len), generator=torch.Generator().manual_seed(1))
    out = graph_generate(model, model.backbone, model.logits, prompt, new,
                         Sampling(temperature=0), capture=False)
    assert out.shape == (2, prompt_len + new)
    assert torch.equal(out[:, prompt_len:], _full_pass_greedy(model, out, prompt_len))
    assert torch.equal(out, model.generate(prompt, new, temperature=0))


@pytest.mark.slow
def test_the_static_step_at_1000_positions():
    model = _model()
    prompt = torch.randint(0, 40, (1, 3), generator=torch.Generator().manual_seed(2))
    out = graph_generate(model, model.backbone, model.logits, prompt, 997,
                         Sampling(temperature=0), capture=False)
    assert torch.equal(out[:, 3:], _full_pass_greedy(model, out, 3))


def test_the_step_reads_its_position_from_a_tensor_it_advances():
    model = _model()
    with torch.no_grad():
        cache = model.backbone.init_cache(1, 16)
        model.backbone(torch.tensor([[1, 2, 3]]), cache=cache)
        step = StaticStep(model.backbone, model.logits, cache, torch.tensor([4]), False)
        for token in (5, 6, 7):
            step(torch.tensor([token]))
    assert int(step.position) == 7 and cache.steps == 7
    assert all(layer.scan.position == 7 for layer in cache.layers)
    assert cache.fused == [None, None]  # PyTorch ops: no fused C step with its int position


def test_sampling_and_eos_follow_the_eager_rule():
    model = _model()
    prompt = torch.tensor([[1, 2], [3, 4]])
    eager = model.generate(prompt, 12, temperature=1.0, eos_id=5,
                           generator=torch.Generator().manual_seed(3))
    graph = graph_generate(model, model.backbone, model.logits, prompt, 12,
                           Sampling(1.0, eos_id=5, generator=torch.Generator().manual_seed(3)),
                           capture=False)
    assert torch.equal(eager, graph)


def test_models_it_cannot_capture_are_one_clear_error():
    assert supported(_model().backbone) is None
    assert "Weird-attention blocks only" in supported(_model("B").backbone)
    with pytest.raises(ValueError, match="Weird-attention blocks only"):
        m = _model("softmax")
        graph_generate(m, m.backbone, m.logits, torch.tensor([[1]]), 2, Sampling(0))
    with pytest.raises(ValueError, match="needs the model on a CUDA device"):
        m = _model()
        graph_generate(m, m.backbone, m.logits, torch.tensor([[1]]), 2, Sampling(0),
                       capture=True)


def test_generate_cuda_graph_without_cuda_is_one_line_and_exit_2(tmp_path, capsys):
    model = _model(vocab_size=256)
    model.save(tmp_path / "m")
    status = main(["generate", str(tmp_path / "m"), "--device", "cpu", "--cuda-graph",
                   "--prompt", "ab", "--max-new-tokens", "3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err == ["weirdnet generate: --cuda-graph needs a CUDA device "
                                   "(--device cuda)"]


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_greedy_tokens_equal_the_full_pass(dtype):
    model = _model().to("cuda", dtype)
    prompt = torch.randint(0, 40, (2, 7), device="cuda")
    out = graph_generate(model, model.backbone, model.logits, prompt, 300,
                         Sampling(temperature=0))
    eager = graph_generate(model, model.backbone, model.logits, prompt, 300,
                           Sampling(temperature=0), capture=False)
    assert torch.equal(out, eager)
    if dtype == torch.float32:  # bf16 logits may tie differently from the full pass's
        assert torch.equal(out[:, 7:], _full_pass_greedy(model, out, 7))


@cuda
def test_generate_cuda_graph_on_cuda(tmp_path, capsys):
    model = _model(vocab_size=256)
    model.save(tmp_path / "m")
    assert main(["generate", str(tmp_path / "m"), "--device", "cuda", "--cuda-graph",
                 "--prompt", "ab", "--max-new-tokens", "20", "--temperature", "0"]) == 0
    graph = capsys.readouterr().out
    assert main(["generate", str(tmp_path / "m"), "--device", "cuda", "--prompt", "ab",
                 "--max-new-tokens", "20", "--temperature", "0"]) == 0
    assert capsys.readouterr().out == graph
