"""Incremental (token-by-token) causal decoding of the Weird-attention scan.

Level k of the causal scan combines position t with position t - 2^k, using the state of
t - 2^k *before* level k.  A ring buffer per level holding the last 2^k such states lets
one new token be processed in O(D log L) time (O(D L) memory in all, about 3 L D numbers),
with exactly the operations of the full pass: in float32 (and float64) the outputs are
bitwise identical to ``weird_scan(..., reverse=False)`` on the whole sequence.
"""

from __future__ import annotations

import torch

from ..checks import (
    check_finite_log_w,
    check_float_tensor,
    check_mask,
    check_rows,
    check_same_layout,
    levels_needed,
    max_len_for_levels,
    on_host,
)
from . import dispatch
from .dispatch import compute_dtype, prepare_input
from .op import extend
from .pytorch import extend_at, neg_sentinel


class WeirdScanCache:
    """Decoding state of one causal ``weird_scan`` (one layer) for a batch of sequences.

    Args:
        log_w: (K, D) log-weights, as passed to ``weird_scan`` (copied, detached).
        batch_size: number of sequences B decoded together.
        max_len: capacity in tokens; at most 2**K.  Defaults to 2**K.
        backend: None (auto, the same choice ``weird_scan`` makes) or a backend name.

    Use :meth:`step` for one token, :meth:`extend` for several (e.g. a prompt).
    """

    def __init__(self, log_w: torch.Tensor, batch_size: int, max_len: int | None = None, *,
                 dtype: torch.dtype | None = None, backend: str | None = None):
        check_float_tensor(log_w, "log_w", 2)
        K, D = log_w.shape
        limit = max_len_for_levels(K)
        max_len = limit if max_len is None else int(max_len)
        if not 1 <= max_len <= limit:
            raise ValueError(
                f"max_len must be in [1, {limit}] (log_w has {K} levels), got {max_len}"
            )
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size, self.dim, self.capacity = int(batch_size), D, max_len
        self.dtype = compute_dtype(dtype or log_w.dtype)
        self.device = log_w.device
        self.backend = dispatch.resolve(self.device, backend).name
        self.levels = levels_needed(max_len)
        if on_host(log_w):
            check_finite_log_w(log_w, self.levels)
        self.log_w = log_w.detach().to(self.dtype).contiguous()
        rows = (1 << self.levels) - 1
        shape = (rows, self.batch_size, D)
        self._ring = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(3)]
        self.position = 0
        self.position_tensor: torch.Tensor | None = None

    def follow(self, position: torch.Tensor | None) -> None:
        """Read the position of each :meth:`step` from the 0-dim int64 tensor ``position``
        (on the cache's device) instead of :attr:`position`; whoever owns the tensor advances
        it.  Each step then runs the PyTorch backend's ring update with tensor indices
        (:func:`weirdnet.ops.weird_scan.pytorch.extend_at`), the same kernels at every
        position, so it can be captured in a CUDA graph (``weirdnet.models.decoding.graph_decode``).
        ``None`` goes back to the Python position."""
        if position is not None and (position.dim() != 0 or position.dtype != torch.int64
                                     or position.device != self.device):
            raise ValueError(f"position must be a 0-dim int64 tensor on {self.device}")
        if position is not None and not dispatch.BACKENDS[self.backend].torch_steps:
            raise ValueError(f"backend {self.backend!r} decodes in its own kernel, whose "
                             "states the PyTorch ring step cannot continue bit for bit; "
                             "decode it without CUDA graphs")
        self.position_tensor = position

    @property
    def nbytes(self) -> int:
        """Memory held by the ring buffers, in bytes."""
        return sum(r.numel() * r.element_size() for r in self._ring)

    @property
    def rings(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The (m, h, u) ring buffers, each (2^levels - 1, B, D): a fused decoding step
        (``weirdnet.ops.block_step``) updates them in place, then calls :meth:`advance`."""
        return self._ring[0], self._ring[1], self._ring[2]

    def advance(self, tokens: int = 1) -> None:
        """Count ``tokens`` more positions as consumed (after an in-place update of
        :attr:`rings`)."""
        if self.position + tokens > self.capacity:
            raise ValueError(f"decoding past the cache's capacity: {self.position} tokens "
                             f"held, {tokens} more, capacity max_len={self.capacity}")
        self.position += tokens

    def reset(self) -> None:
        """Forget all tokens; the next one is position 0."""
        self.position = 0

    def start_document(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` (B,) bool forget every token so far: their ring states become
        padding, which adds exactly nothing to a later token (the relative distances of
        the new document's tokens are unchanged), so each such row continues as a fresh
        cache would, at any position.  In place: a fused step's rings stay valid."""
        check_rows(rows, self.batch_size, self.device)
        ring_m, ring_h, ring_u = self._ring
        ring_m[:, rows] = neg_sentinel(self.dtype)
        ring_h[:, rows] = 0.0
        ring_u[:, rows] = 1.0

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (B',), e.g. for beam search; B becomes len(index)."""
        self._ring = [r.index_select(1, index.to(self.device)) for r in self._ring]
        self.batch_size = self._ring[0].shape[1]

    def extend(self, a: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None):
        """Consume T tokens. a, v: (B, T, D); mask: optional (B, T) bool.

        Returns O: (B, T, D) in ``a``'s dtype, equal to the full causal pass's outputs at
        positions ``position .. position + T - 1``.
        """
        check_float_tensor(a, "a", 3)
        check_float_tensor(v, "v", 3)
        check_same_layout(a, v, "a", "v")
        B, T, D = a.shape
        if (B, D) != (self.batch_size, self.dim):
            raise ValueError(
                f"expected tokens of shape ({self.batch_size}, T, {self.dim}) for this cache, "
                f"got {tuple(a.shape)}"
            )
        check_mask(mask, B, T)
        if self.position + T > self.capacity:
            raise ValueError(
                f"decoding past the cache's capacity: {self.position} tokens held, {T} more "
                f"requested, capacity max_len={self.capacity}"
            )
        if a.device != self.device or (mask is not None and mask.device != self.device):
            raise ValueError(f"tokens and mask must be on {self.device}, got {a.device}")
        inputs = prepare_input(a, self.dtype), prepare_input(v, self.dtype), self.log_w, mask
        with torch.no_grad():
            if self.position_tensor is None:
                out = extend(*inputs, *self._ring, self.position, self.backend)
            else:
                out = extend_at(*inputs, *self._ring, self.levels, self.position_tensor,
                                dispatch.BACKENDS[self.backend].pow2_states)
        self.position += T
        return out.to(a.dtype)

    def step(self, a_t: torch.Tensor, v_t: torch.Tensor, mask_t: torch.Tensor | None = None):
        """Consume one token. a_t, v_t: (B, D); mask_t: optional (B,) bool. Returns (B, D)."""
        check_float_tensor(a_t, "a_t", 2)
        check_float_tensor(v_t, "v_t", 2)
        if mask_t is not None:
            check_mask(mask_t.unsqueeze(1) if isinstance(mask_t, torch.Tensor) else mask_t,
                       a_t.shape[0], 1, "mask_t (as (B, 1))")
            mask_t = mask_t.unsqueeze(1)
        return self.extend(a_t.unsqueeze(1), v_t.unsqueeze(1), mask_t)[:, 0]
