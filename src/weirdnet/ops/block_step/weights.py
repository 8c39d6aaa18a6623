"""The tensors one fused block step reads, gathered and checked once."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

ACTIVATIONS = ("gelu", "leaky_relu")


@dataclass(frozen=True)
class ScanMixerWeights:
    """The mixer part of a fused block step: a causal Weird-attention layer's
    projections in ``nn.Linear`` layouts (a_weight, v_weight, o_weight (D, D); biases (D,)
    or None) and its scan log-weights ``log_w`` (K, D), as a layer's
    :meth:`~weirdnet.layers.Mixer.scan_step` hands them to the block."""

    a_weight: torch.Tensor
    a_bias: torch.Tensor | None
    v_weight: torch.Tensor
    v_bias: torch.Tensor | None
    o_weight: torch.Tensor
    o_bias: torch.Tensor | None
    log_w: torch.Tensor


@dataclass(frozen=True)
class BlockWeights:
    """One pre-norm Weird-attention block with a feed-forward network (width D, inner F):

        x = x + W_O scan(A = W_A LN_mix(x) + b_A, V = W_V LN_mix(x) + b_V) + b_O
        x = x + W_2 act(W_1 LN_ffn(x) + b_1) + b_2

    Weights are ``nn.Linear`` layouts: a_weight, v_weight, o_weight (D, D), inner_weight
    (F, D), outer_weight (D, F); biases (D,) or (F,), or None; LayerNorm weight and bias
    (D,) or None; log_w (K, D) the scan's log-weights.  activation: "gelu" (exact, erf)
    or "leaky_relu" (slope 0.01).
    """

    norm_mix_weight: torch.Tensor | None
    norm_mix_bias: torch.Tensor | None
    eps_mix: float
    a_weight: torch.Tensor
    a_bias: torch.Tensor | None
    v_weight: torch.Tensor
    v_bias: torch.Tensor | None
    o_weight: torch.Tensor
    o_bias: torch.Tensor | None
    log_w: torch.Tensor
    norm_ffn_weight: torch.Tensor | None
    norm_ffn_bias: torch.Tensor | None
    eps_ffn: float
    inner_weight: torch.Tensor
    inner_bias: torch.Tensor | None
    outer_weight: torch.Tensor
    outer_bias: torch.Tensor | None
    activation: str = "gelu"

    @property
    def dim(self) -> int:
        return self.a_weight.shape[1]

    @property
    def d_ff(self) -> int:
        return self.inner_weight.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.a_weight.dtype

    def tensors(self) -> dict[str, torch.Tensor | None]:
        """Every tensor field by name (None where absent)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("eps_mix", "eps_ffn", "activation")}

    def check(self) -> None:
        """ValueError unless every tensor has its shape, one float dtype and one device."""
        D, F = self.dim, self.d_ff
        shapes = {"norm_mix_weight": (D,), "norm_mix_bias": (D,), "a_weight": (D, D),
                  "a_bias": (D,), "v_weight": (D, D), "v_bias": (D,), "o_weight": (D, D),
                  "o_bias": (D,), "log_w": (self.log_w.shape[0], D),
                  "norm_ffn_weight": (D,), "norm_ffn_bias": (D,), "inner_weight": (F, D),
                  "inner_bias": (F,), "outer_weight": (D, F), "outer_bias": (D,)}
        for name, tensor in self.tensors().items():
            if tensor is None:
                continue
            if tuple(tensor.shape) != shapes[name]:
                raise ValueError(f"{name} must have shape {shapes[name]}, got "
                                 f"{tuple(tensor.shape)}")
            if tensor.dtype != self.dtype or tensor.device != self.a_weight.device:
                raise ValueError(f"{name} is {tensor.dtype} on {tensor.device}; every weight "
                                 f"must be {self.dtype} on {self.a_weight.device}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got "
                             f"{self.activation!r}")
