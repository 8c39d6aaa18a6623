"""Bad input to the scan op gets a ValueError that names the problem."""

import pytest
import torch

from weirdnet.ops import weird_scan, weird_scan_reference


def ok_args(B=2, L=10, D=4):
    return torch.randn(B, L, D), torch.randn(B, L, D), torch.zeros(4, D)


@pytest.mark.parametrize("fn", [weird_scan, weird_scan_reference])
def test_sequence_longer_than_levels_names_max_len(fn):
    a, v, _ = ok_args(L=17)
    with pytest.raises(ValueError, match=r"length 17 exceeds the 16 positions.*max_len >= 17"):
        fn(a, v, torch.zeros(4, 4))


@pytest.mark.parametrize("fn", [weird_scan, weird_scan_reference])
def test_wrong_rank_and_shapes(fn):
    a, v, log_w = ok_args()
    with pytest.raises(ValueError, match="a must have 3 dimensions"):
        fn(a[0], v, log_w)
    with pytest.raises(ValueError, match="v must have the shape of a"):
        fn(a, v[:, :5], log_w)
    with pytest.raises(ValueError, match=r"log_w must have shape \(levels, D=4\)"):
        fn(a, v, torch.zeros(4, 5))
    with pytest.raises(ValueError, match="log_w must have 2 dimensions"):
        fn(a, v, torch.zeros(4))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.uint8])
def test_integer_dtypes(dtype):
    a, v, log_w = ok_args()
    with pytest.raises(ValueError, match="floating-point"):
        weird_scan(a.to(dtype), v.to(dtype), log_w)
    with pytest.raises(ValueError, match="floating-point"):
        weird_scan(a, v, log_w.to(dtype))


def test_mismatched_dtypes():
    a, v, log_w = ok_args()
    with pytest.raises(ValueError, match="same dtype"):
        weird_scan(a, v.double(), log_w)


def test_bad_masks():
    a, v, log_w = ok_args()
    with pytest.raises(ValueError, match=r"mask must have shape \(batch, length\) = \(2, 10\)"):
        weird_scan(a, v, log_w, mask=torch.ones(2, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        weird_scan(a, v, log_w, mask=torch.ones(2, 10))


def test_unknown_backend():
    a, v, log_w = ok_args()
    with pytest.raises(ValueError, match="backend must be one of"):
        weird_scan(a, v, log_w, backend="cuda-magic")


def test_empty_sequence_is_fine():
    a, v, log_w = ok_args(L=0)
    out = weird_scan(a.requires_grad_(), v, log_w)
    assert out.shape == (2, 0, 4)
