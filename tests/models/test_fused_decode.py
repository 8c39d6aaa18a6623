"""The fused CPU decode wrapper (models/decoding/fused_decode.py), driven directly.

``fused_block_step`` makes a block's fused C step exactly where it applies (LayerNorm +
GELU/LeakyReLU FFN, no short convolution, no cross mixer, a mixer with a fused step, CPU
float32/float64 weights); ``fused_step`` decodes through them as ``Backbone.step`` does
(bitwise) and agrees with the PyTorch cached path to rounding (float64: 1e-12); ``may_fuse``
refuses training, autograd and batches past ``FUSED_STEP_MAX_BATCH``.
"""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.models import WeirdNetLM
from weirdnet.models.decoding import fused_decode
from weirdnet.models.decoding.fused_decode import (
    FusedBlockStep,
    fused_block_step,
    fused_step,
    may_fuse,
)
from weirdnet.ops import block_step

needs_c = pytest.mark.skipif(block_step.unavailable_reason() is not None,
                             reason="no C compiler for the fused step")


def backbone(dtype=torch.float64, seed=0, **options):
    torch.manual_seed(seed)
    config = {"dim": 16, "depth": 2, "max_len": 32, "pattern": "weird", "causal": True,
              "vocab_size": 20, **options}
    return WeirdNetLM({"backbone": config}).backbone.to(dtype).eval()


@needs_c
@pytest.mark.parametrize("options, fused", [
    ({}, True),
    ({"activation": "leaky_relu"}, True),
    ({"pattern": "softmax", "heads": 2}, False),   # no fused step for the mixer
    ({"norm": "rmsnorm"}, False),
    ({"activation": "swiglu"}, False),
    ({"short_conv": 3}, False),
    ({"d_ff": 0}, False),
], ids=["gelu", "leaky_relu", "softmax", "rmsnorm", "swiglu", "short_conv", "no_ffn"])
def test_a_fused_step_is_made_exactly_where_it_applies(options, fused):
    bb = backbone(**options)
    cache = bb.init_cache(2)
    made = [fused_block_step(block, layer) for block, layer in zip(bb.blocks, cache.layers)]
    assert all(isinstance(m, FusedBlockStep) if fused else m is None for m in made)


@needs_c
def test_a_float16_block_is_not_fused():
    bb = backbone(torch.float16)
    cache = bb.init_cache(1)
    assert fused_block_step(bb.blocks[0], cache.layers[0]) is None


@needs_c
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("length", [1, 2, 3, 7, 32])
def test_fused_step_is_backbone_step_bitwise_and_the_pytorch_path_to_rounding(dtype, length):
    bb = backbone(dtype)
    x = torch.randint(0, 20, (3, length), generator=torch.Generator().manual_seed(1))
    fused, by_step, slow = (bb.init_cache(3) for _ in range(3))
    with torch.no_grad():
        for t in range(length):
            got = fused_step(bb, x[:, t], fused)
            assert torch.equal(got, bb.step(x[:, t], by_step)), f"position {t}"
            with torch.enable_grad():  # autograd on: the PyTorch path
                want = bb(x[:, t:t + 1], cache=slow).detach()
            assert not torch.isnan(got).any()
            assert rel_err(got, want[:, 0]) <= (1e-12 if dtype == torch.float64 else 1e-5)
    assert fused.fused is not None and all(f is not None for f in fused.fused)
    assert slow.fused is None
    assert (fused.steps, fused.lengths.tolist()) == (length, [length] * 3)


def test_may_fuse_refuses_training_autograd_and_large_batches(monkeypatch):
    bb = backbone()
    with torch.no_grad():
        assert may_fuse(bb, 1) and may_fuse(bb, fused_decode.FUSED_STEP_MAX_BATCH)
        assert not may_fuse(bb, fused_decode.FUSED_STEP_MAX_BATCH + 1)
        monkeypatch.setattr(fused_decode, "FUSED_STEP_MAX_BATCH", 2)
        assert not may_fuse(bb, 3)
        assert not may_fuse(bb.train(), 1)
    assert not may_fuse(bb.eval(), 1)  # autograd on


def test_the_threshold_is_still_importable_from_the_backbone():
    from weirdnet.models.backbone import FUSED_STEP_MAX_BATCH
    assert FUSED_STEP_MAX_BATCH == fused_decode.FUSED_STEP_MAX_BATCH
