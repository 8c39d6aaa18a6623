"""A decoding cache belongs to the layer (or backbone) whose ``init_cache`` made it.

Two layers of one class share the cache type, and stepping one over the other's cache
ran without an error and gave outputs off by up to 1.21 (issue 65 item 7).  Every
registered mixer that decodes, the fused C block step and the backbone's cache now refuse
another module's cache with one ValueError naming the class, while the copies and
reorders a cache supports keep working.
"""

import copy

import pytest
import torch

from weirdnet.layers import available, build
from weirdnet.models import BackboneConfig, LMConfig, WeirdNetLM

B, D = 2, 16


def _decoding_mixers():
    names = []
    for name in available():
        try:
            build(name, D, causal=True).init_cache(B)
        except ValueError:
            continue  # not causal, or keeps no cache (cross-attention)
        names.append(name)
    return names


DECODING = _decoding_mixers()


def _pair(name):
    torch.manual_seed(0)
    first = build(name, D, causal=True).double().eval()
    torch.manual_seed(1)
    return first, build(name, D, causal=True).double().eval()


def _x(seed=0):
    return torch.randn(B, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_the_decoding_mixers_are_found():
    assert {"weird", "ps", "softmax", "linear", "local", "relation"} <= set(DECODING)


@pytest.mark.parametrize("name", DECODING)
def test_a_layer_refuses_another_layers_cache(name):
    layer, other = _pair(name)
    match = f"another {type(layer).__name__}"
    with torch.no_grad(), pytest.raises(ValueError, match=match):
        layer.step(_x(), other.init_cache(B))
    with torch.no_grad(), pytest.raises(ValueError, match=match):
        layer(_x()[:, None], cache=other.init_cache(B))
    with torch.no_grad(), pytest.raises(ValueError, match=match):  # a copy is another layer
        copy.deepcopy(layer).step(_x(), layer.init_cache(B))


@pytest.mark.parametrize("name", DECODING)
def test_copies_and_reorders_of_a_cache_still_decode(name):
    layer, _ = _pair(name)
    with torch.no_grad():
        cache = layer.init_cache(B)
        layer.step(_x(0), cache)
        twin = copy.deepcopy(cache)
        want = layer.step(_x(1), cache)
        assert torch.equal(layer.step(_x(1), twin), want)  # a deep copy decodes the same
        shallow = copy.copy(cache)
        shallow.reorder(torch.tensor([1, 0]))
        layer.step(_x(2)[[1, 0]], shallow)


@pytest.mark.parametrize("name", ["weird", "ps"])
def test_the_fused_step_refuses_another_layers_cache(name):
    layer, other = _pair(name)
    with pytest.raises(ValueError, match=f"another {type(layer).__name__}"):
        layer.scan_step(other.init_cache(B))


def _lm(seed):
    torch.manual_seed(seed)
    backbone = BackboneConfig(dim=D, depth=2, heads=2, max_len=32, pattern="weird,softmax",
                              causal=True)
    return WeirdNetLM(LMConfig(backbone)).eval()


def test_a_backbone_refuses_another_backbones_cache():
    first, second = _lm(0).backbone, _lm(1).backbone
    tokens = torch.tensor([5, 7])
    for grad in (False, True):  # the fused C step (no autograd) and the PyTorch step
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match="another Backbone"):
            first.step(tokens, second.init_cache(B))
    with torch.no_grad():
        with pytest.raises(ValueError, match="another Backbone"):
            first(tokens[:, None].repeat(1, 3), cache=second.init_cache(B))
        own = first.init_cache(B)
        twin = copy.deepcopy(own)
        want = first.step(tokens, own)
        assert torch.equal(first.step(tokens, twin), want)
        own.reorder(torch.tensor([1, 0]))
        first.step(tokens, own)


def test_the_hf_model_refuses_another_models_cache():
    hf = pytest.importorskip("weirdnet.hf")
    first = hf.WeirdNetForCausalLM.from_weirdnet(_lm(0))
    second = hf.WeirdNetForCausalLM.from_weirdnet(_lm(1))
    foreign = hf.WeirdNetCache(second.backbone.init_cache(B))
    with torch.no_grad(), pytest.raises(ValueError, match="another Backbone"):
        first(torch.tensor([[5], [7]]), past_key_values=foreign, use_cache=True)
