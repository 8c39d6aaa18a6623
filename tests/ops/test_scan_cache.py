"""Incremental decoding: bitwise equal to the full causal pass, O(log L) levels per token."""

import pytest
import torch

from helpers.numerics import random_log_w
from weirdnet.ops import WeirdScanCache, weird_scan


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("L", [1, 2, 3, 7, 64, 301])
@pytest.mark.parametrize("spread", ["typical", "wide"])
def test_step_and_extend_are_bitwise_the_full_pass(backend, dtype, L, spread):
    """Typical inputs, and wide-spread ones (logits 1e3 x N(0, 1), log_w = -100 |N(0, 1)|
    and +30 |N(0, 1)| channels: rescales by powers of two far beyond e^+-88)."""
    g = torch.Generator().manual_seed(L)
    B, D = 3, 21
    scale = 3.0 if spread == "typical" else 1e3
    a = torch.randn(B, L, D, generator=g, dtype=dtype) * scale
    v = torch.randn(B, L, D, generator=g, dtype=dtype)
    log_w = random_log_w(9, D, dtype=dtype, generator=g)
    if spread == "wide":
        steep = torch.randn(9, D, generator=g, dtype=dtype).abs()
        log_w = torch.where(torch.arange(D) % 2 == 0, -100 * steep, 30 * steep)
    mask = torch.rand(B, L, generator=g) > 0.2
    full = weird_scan(a, v, log_w, mask=mask, backend=backend)

    cache = WeirdScanCache(log_w, B, max_len=512, backend=backend)
    cut = L // 3
    prefix = cache.extend(a[:, :cut], v[:, :cut], mask[:, :cut])  # a "prompt"
    steps = [cache.step(a[:, t], v[:, t], mask[:, t]) for t in range(cut, L)]
    decoded = torch.cat([prefix, *[s.unsqueeze(1) for s in steps]], 1)
    assert cache.position == L
    assert torch.equal(decoded, full)


def test_bfloat16_tokens_decode_like_the_full_pass(backend):
    B, L, D = 2, 40, 8
    a = torch.randn(B, L, D).bfloat16()
    v = torch.randn(B, L, D).bfloat16()
    log_w = torch.randn(6, D).cumsum(0)
    full = weird_scan(a, v, log_w, backend=backend)
    cache = WeirdScanCache(log_w, B, backend=backend)
    out = torch.stack([cache.step(a[:, t], v[:, t]) for t in range(L)], 1)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, full)


def test_capacity_memory_and_reset():
    log_w = torch.zeros(10, 16)
    cache = WeirdScanCache(log_w, 2, max_len=100)
    assert cache.capacity == 100 and cache.levels == 7
    assert cache.nbytes == 3 * (2**7 - 1) * 2 * 16 * 4  # about 3 * L * D numbers per row
    cache.extend(torch.randn(2, 100, 16), torch.randn(2, 100, 16))
    with pytest.raises(ValueError, match="capacity"):
        cache.step(torch.randn(2, 16), torch.randn(2, 16))
    cache.reset()
    assert cache.position == 0
    # after a reset the cache decodes a new sequence exactly like a fresh one
    a, v = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    fresh = WeirdScanCache(log_w, 2, max_len=100)
    assert torch.equal(cache.extend(a, v), fresh.extend(a, v))
    assert torch.equal(cache.step(a[:, 0], v[:, 0]), fresh.step(a[:, 0], v[:, 0]))


def test_reorder_selects_batch_rows(backend):
    B, L, D = 3, 12, 5
    a, v = torch.randn(B, L, D), torch.randn(B, L, D)
    log_w = torch.randn(4, D).cumsum(0)
    full = weird_scan(a, v, log_w, backend=backend)
    cache = WeirdScanCache(log_w, B, backend=backend)
    cache.extend(a[:, :6], v[:, :6])
    index = torch.tensor([2, 0])
    cache.reorder(index)
    rest = cache.extend(a[index, 6:], v[index, 6:])
    assert torch.equal(rest, full[index, 6:])


def test_cache_argument_errors():
    log_w = torch.zeros(4, 8)
    with pytest.raises(ValueError, match="max_len"):
        WeirdScanCache(log_w, 1, max_len=17)  # 4 levels cover 16 positions
    with pytest.raises(ValueError, match="batch_size"):
        WeirdScanCache(log_w, 0)
    cache = WeirdScanCache(log_w, 2)
    with pytest.raises(ValueError, match=r"\(2, T, 8\)"):
        cache.extend(torch.randn(3, 1, 8), torch.randn(3, 1, 8))
    with pytest.raises(ValueError, match="floating"):
        cache.step(torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="mask"):
        cache.step(torch.randn(2, 8), torch.randn(2, 8), torch.ones(3, dtype=torch.bool))


def test_a_cache_following_a_position_tensor_steps_as_it_does_by_itself():
    """``follow``: the step at a tensor position (the CUDA-graph form) gives the Python
    position's outputs bit for bit, and the rings end the same."""
    B, L, D = 2, 37, 5
    g = torch.Generator().manual_seed(3)
    a, v = torch.randn(B, L, D, generator=g) * 3, torch.randn(B, L, D, generator=g)
    log_w = torch.randn(6, D, generator=g).cumsum(0) * 0.3
    plain = WeirdScanCache(log_w, B, backend="torch")
    followed = WeirdScanCache(log_w, B, backend="torch")
    position = torch.tensor(0)
    followed.follow(position)
    for t in range(L):
        assert torch.equal(followed.step(a[:, t], v[:, t]), plain.step(a[:, t], v[:, t]))
        position.add_(1)
    assert all(torch.equal(x, y) for x, y in zip(followed.rings, plain.rings))
    with pytest.raises(ValueError, match="0-dim int64 tensor"):
        followed.follow(torch.tensor([1]))
