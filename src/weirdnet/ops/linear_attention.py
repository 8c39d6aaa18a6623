"""Linear attention (Katharopoulos et al. 2020) and its float64 reference.

With the feature map phi(x) = elu(x) + 1 > 0,

    out_i = phi(q_i) S_i / (phi(q_i) . z_i + eps),   S_i = sum_j phi(k_j)^T v_j,
                                                      z_i = sum_j phi(k_j),

where j runs over all real keys (bidirectional) or over real keys j <= i (causal).
Shapes: q, k (B, H, L, d), v (B, H, L, dv), ``mask`` (B, L) bool, True = real token;
padded keys contribute nothing (phi(k_j) is zeroed).  A query with no real key in reach
gets 0 / eps = 0.

The causal form is computed chunk by chunk: inside a chunk of C positions a C x C masked
product, across chunks the running state (S, z) as an exclusive prefix sum of per-chunk
states.  Time O(L C d + L d dv), memory O(L C + (L / C) d dv): linear in L.
Decoding continues from a :class:`LinearAttentionState` (:func:`linear_attention_step`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .checks import check_float_tensor
from .softmax_attention import check_qkv, check_step_mask


@dataclass
class LinearAttentionState:
    """Running sums of a causal linear attention: ``kv`` = sum phi(k)^T v (B, H, d, dv),
    ``z`` = sum phi(k) (B, H, d)."""

    kv: torch.Tensor
    z: torch.Tensor

    @classmethod
    def zeros(cls, batch: int, heads: int, d: int, dv: int, *, dtype=None, device=None):
        """The empty state (no token seen)."""
        kv = torch.zeros(batch, heads, d, dv, dtype=dtype, device=device)
        return cls(kv, torch.zeros(batch, heads, d, dtype=dtype, device=device))

    def augmented(self) -> torch.Tensor:
        """(B, H, d, dv + 1): ``kv`` with ``z`` as its last column."""
        return torch.cat([self.kv, self.z.unsqueeze(-1)], -1)

    @classmethod
    def from_augmented(cls, s: torch.Tensor) -> LinearAttentionState:
        return cls(s[..., :-1], s[..., -1])


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1."""
    if torch.compiler.is_compiling():
        # On a head-split (transposed) view, elu_backward's real output is laid out like
        # its incoming gradient but its fake (traced) one like the input, so a graph traced
        # by AOTAutograd without re-layout (backend="aot_eager") reshapes the gradient
        # with a view its real strides do not allow ("view size is not compatible").  A
        # contiguous input gives both one layout; the values are the same.
        x = x.contiguous()
    return F.elu(x) + 1.0


def check_chunk_size(chunk_size) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    return chunk_size


def check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"eps must be a positive float, got {eps!r}")
    return float(eps)


def _features(q, k, v, mask):
    """phi(q), phi(k) with padded keys zeroed, and v with a column of ones appended
    (so one product gives numerator and normaliser)."""
    fq, fk = feature_map(q), feature_map(k)
    if mask is not None:
        fk = fk * mask[:, None, :, None].to(fk.dtype)
    ones = v.new_ones(v.shape[:-1] + (1,))
    return fq, fk, torch.cat([v, ones], -1)


def _normalise(out: torch.Tensor, eps: float) -> torch.Tensor:
    """(..., dv + 1) numerator | normaliser -> (..., dv)."""
    return out[..., :-1] / (out[..., -1:] + eps)


def _check_state(state, B, H, d, dv, like: torch.Tensor) -> None:
    if not isinstance(state, LinearAttentionState):
        raise ValueError(f"state must be a LinearAttentionState, got {type(state).__name__}")
    if tuple(state.kv.shape) != (B, H, d, dv) or tuple(state.z.shape) != (B, H, d):
        raise ValueError(f"state must hold kv {(B, H, d, dv)} and z {(B, H, d)}, got "
                         f"{tuple(state.kv.shape)} and {tuple(state.z.shape)}")
    if state.kv.dtype != like.dtype or state.kv.device != like.device:
        raise ValueError(f"state must be {like.dtype} on {like.device}, got "
                         f"{state.kv.dtype} on {state.kv.device}")


def _chunked(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """(B, H, L, e) -> (B, H, n, chunk, e), zero-padded to n * chunk positions."""
    B, H, L, e = x.shape
    n = -(-L // chunk)
    return F.pad(x, (0, 0, 0, n * chunk - L)).reshape(B, H, n, chunk, e)


def causal_linear_attention(q, k, v, *, mask=None, chunk_size: int = 64, eps: float = 1e-6,
                            state: LinearAttentionState | None = None):
    """Causal linear attention, chunk-wise.  Returns ``(out, state)``: out (B, H, L, dv)
    and the state after the last token.  ``state`` (optional) holds the sums of earlier
    tokens that these L continue."""
    B, H, L, _ = check_qkv(q, k, v, mask, same_length=True)
    chunk, eps = check_chunk_size(chunk_size), check_eps(eps)
    d, dv = q.shape[-1], v.shape[-1]
    if state is not None:
        _check_state(state, B, H, d, dv, q)
    if L == 0:
        empty = LinearAttentionState.zeros(B, H, d, dv, dtype=q.dtype, device=q.device)
        return v.new_zeros(B, H, 0, dv), empty if state is None else state
    fq, fk, va = _features(q, k, v, mask)
    chunk = min(chunk, L)
    fq, fk, va = _chunked(fq, chunk), _chunked(fk, chunk), _chunked(va, chunk)
    per_chunk = fk.transpose(-1, -2) @ va  # (B, H, n, d, dv + 1)
    before = torch.cumsum(per_chunk, 2)
    total = before[:, :, -1]
    before = F.pad(before[:, :, :-1], (0, 0, 0, 0, 1, 0))  # exclusive prefix sums
    if state is not None:
        init = state.augmented()
        before, total = before + init.unsqueeze(2), total + init
    scores = (fq @ fk.transpose(-1, -2)).tril()  # (B, H, n, C, C): j <= i inside a chunk
    out = fq @ before + scores @ va
    out = _normalise(out, eps).reshape(B, H, -1, dv)[:, :, :L]
    return out, LinearAttentionState.from_augmented(total)


def linear_attention(q, k, v, *, causal: bool = False, mask=None, chunk_size: int = 64,
                     eps: float = 1e-6) -> torch.Tensor:
    """Linear attention, bidirectional or causal: (B, H, L, dv) (see the module docstring)."""
    if causal:
        return causal_linear_attention(q, k, v, mask=mask, chunk_size=chunk_size, eps=eps)[0]
    check_qkv(q, k, v, mask, same_length=True)
    return attend_sums(q, key_value_sums(k, v, mask), check_eps(eps))


def key_value_sums(k, v, mask=None) -> torch.Tensor:
    """(B, H, d, dv + 1): sum over the real keys of phi(k)^T [v, 1] (the augmented
    :class:`LinearAttentionState`); k (B, H, L, d), v (B, H, L, dv)."""
    ones = v.new_ones(v.shape[:-1] + (1,))
    fk = feature_map(k)
    if mask is not None:
        fk = fk * mask[:, None, :, None].to(fk.dtype)
    return fk.transpose(-1, -2) @ torch.cat([v, ones], -1)


def attend_sums(q, sums: torch.Tensor, eps: float) -> torch.Tensor:
    """Every query q (B, H, L, d) against the sums of :func:`key_value_sums`: (B, H, L, dv)."""
    return _normalise(feature_map(q) @ sums, eps)


def linear_attention_step(q_t, k_t, v_t, state: LinearAttentionState, *, mask_t=None,
                          eps: float = 1e-6):
    """One causal decoding step from ``state``: q_t, k_t (B, H, d), v_t (B, H, dv),
    ``mask_t`` (B,) bool.  Returns ``(out_t (B, H, dv), new state)``."""
    for name, t in (("q_t", q_t), ("k_t", k_t), ("v_t", v_t)):
        check_float_tensor(t, name, 3)
    B, H, d = q_t.shape
    if k_t.shape != q_t.shape or v_t.shape[:2] != (B, H):
        raise ValueError(f"k_t must have q_t's shape {(B, H, d)} and v_t shape (B, H, dv), "
                         f"got {tuple(k_t.shape)} and {tuple(v_t.shape)}")
    _check_state(state, B, H, d, v_t.shape[-1], q_t)
    check_step_mask(mask_t, B)
    eps = check_eps(eps)
    fq, fk, va = _features(q_t.unsqueeze(2), k_t.unsqueeze(2), v_t.unsqueeze(2),
                           None if mask_t is None else mask_t.unsqueeze(1))
    s = state.augmented() + fk.transpose(-1, -2) @ va
    out = _normalise(fq @ s, eps)[:, :, 0]
    return out, LinearAttentionState.from_augmented(s)


def linear_attention_reference(q, k, v, *, causal: bool = False, mask=None,
                               eps: float = 1e-6) -> torch.Tensor:
    """Float64 reference for :func:`linear_attention`: an explicit loop over query
    positions, each summing over its keys (all real keys, or real keys j <= i)."""
    B, H, L, _ = check_qkv(q, k, v, mask, same_length=True)
    q, k, v = q.double(), k.double(), v.double()
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    if mask is not None:
        fk = fk * mask[:, None, :, None].double()
    outs = []
    for i in range(L):
        end = i + 1 if causal else L
        w = (fq[:, :, i : i + 1] * fk[:, :, :end]).sum(-1)  # (B, H, keys)
        num = (w.unsqueeze(-1) * v[:, :, :end]).sum(2)
        outs.append(num / (w.sum(-1, keepdim=True) + eps))
    return torch.stack(outs, 2) if outs else v.new_zeros(B, H, 0, v.shape[-1])
