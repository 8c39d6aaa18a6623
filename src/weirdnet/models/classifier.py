"""Sequence classifiers and the retrieval dual encoder (Weird-Net §IV.A, docs/design.md §2).

Pooling as the papers do it: an encoder (bidirectional backbone) averages its outputs over
the valid positions; a decoder (causal backbone) takes its last valid position, the only
one that has seen the whole sequence.  Padding never changes the pooled vector.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .backbone import Backbone
from .base import WeirdNetModel
from .config import BackboneConfig, ConfigError

POOLINGS = ("auto", "mean", "last")


def pool(hidden: torch.Tensor, mask: torch.Tensor | None, how: str) -> torch.Tensor:
    """hidden (B, L, D), mask (B, L) bool or None -> (B, D): "mean" over valid positions
    or the "last" valid one."""
    if how == "mean":
        if mask is None:
            return hidden.mean(1)
        weights = mask.to(hidden.dtype).unsqueeze(-1)
        total = torch.where(mask.unsqueeze(-1), hidden, 0).sum(1)
        return total / weights.sum(1).clamp(min=1)
    if mask is None:
        return hidden[:, -1]
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    last = (mask.long() * positions).argmax(1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def _check_pooling(pooling: str) -> None:
    if pooling not in POOLINGS:
        raise ConfigError(f"pooling must be one of {POOLINGS}, got {pooling!r}")


def _check_classes(num_classes: int) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ConfigError(f"num_classes must be an int >= 2, got {num_classes!r}")


@dataclass
class ClassifierOutput:
    """logits (B, classes); loss: mean cross-entropy when labels were given."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


# a pytree node: torch.export and torch.compile can return it from a graph
torch.export.register_dataclass(ClassifierOutput)


def classification_loss(logits: torch.Tensor, labels: torch.Tensor | None):
    if labels is None:
        return None
    if labels.shape != logits.shape[:1]:
        raise ValueError(f"labels must have shape ({logits.shape[0]},), got "
                         f"{tuple(labels.shape)}")
    return F.cross_entropy(logits.float(), labels.long())


class _PooledEncoder(WeirdNetModel):
    """A backbone and its pooling: ``encode(inputs, mask) -> (B, D)``."""

    def _build_encoder(self, backbone: BackboneConfig, pooling: str) -> None:
        self.backbone = Backbone(backbone)
        self.pooling = pooling if pooling != "auto" else ("last" if backbone.causal else "mean")

    def encode(self, inputs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """inputs (B, L) ids or (B, L, input_dim) values; mask (B, L) -> pooled (B, D)."""
        return pool(self.backbone(inputs, mask), mask, self.pooling)


@dataclass
class ClassifierConfig:
    """A backbone (structure A by default), ``num_classes`` and the pooling ("auto": mean
    for an encoder, last valid position for a causal backbone)."""

    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    num_classes: int = 2
    pooling: str = "auto"

    def __post_init__(self) -> None:
        _check_classes(self.num_classes)
        _check_pooling(self.pooling)


class WeirdNetClassifier(_PooledEncoder):
    """Sequence classifier: backbone, pooling, Linear(D, classes)."""

    config_class = ClassifierConfig

    def __init__(self, config: ClassifierConfig | dict | None = None):
        super().__init__(ClassifierConfig() if config is None else config)
        self._build_encoder(self.config.backbone, self.config.pooling)
        self.head = nn.Linear(self.config.backbone.dim, self.config.num_classes)
        nn.init.normal_(self.head.weight, std=self.config.backbone.dim ** -0.5)
        nn.init.zeros_(self.head.bias)

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> ClassifierOutput:
        """inputs (B, L) or (B, L, input_dim); mask (B, L) bool; labels (B,) -> output."""
        logits = self.head(self.encode(inputs, mask))
        return ClassifierOutput(logits, classification_loss(logits, labels))


@dataclass
class DualEncoderConfig:
    """Retrieval (LRA AAN): one shared backbone encodes both documents to u and v, then
    ``[u, v, u − v, u ⊙ v] → Linear(4D, mlp_dim) → GELU → Linear(mlp_dim, classes)``."""

    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    num_classes: int = 2
    mlp_dim: int | None = None
    pooling: str = "auto"

    def __post_init__(self) -> None:
        _check_classes(self.num_classes)
        _check_pooling(self.pooling)
        if self.mlp_dim is not None and (isinstance(self.mlp_dim, bool) or self.mlp_dim < 1):
            raise ConfigError(f"mlp_dim must be None or a positive int, got {self.mlp_dim!r}")


class WeirdNetDualEncoder(_PooledEncoder):
    """Two documents, one shared encoder, an MLP on ``[u, v, u−v, u⊙v]``."""

    config_class = DualEncoderConfig

    def __init__(self, config: DualEncoderConfig | dict | None = None):
        super().__init__(DualEncoderConfig() if config is None else config)
        cfg = self.config
        self._build_encoder(cfg.backbone, cfg.pooling)
        dim = cfg.backbone.dim
        hidden = cfg.mlp_dim or dim
        self.head = nn.Sequential(nn.Linear(4 * dim, hidden), nn.GELU(),
                                  nn.Linear(hidden, cfg.num_classes))

    def forward(self, inputs: torch.Tensor, inputs2: torch.Tensor,
                mask: torch.Tensor | None = None, mask2: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> ClassifierOutput:
        """Two batches of documents (B, L1) and (B, L2) with their masks; labels (B,)."""
        if inputs.shape[0] != inputs2.shape[0]:
            raise ValueError(f"both documents need the same batch size, got "
                             f"{inputs.shape[0]} and {inputs2.shape[0]}")
        u, v = self.encode(inputs, mask), self.encode(inputs2, mask2)
        logits = self.head(torch.cat([u, v, u - v, u * v], dim=-1))
        return ClassifierOutput(logits, classification_loss(logits, labels))
