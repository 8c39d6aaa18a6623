"""Sequence classifiers and the retrieval dual encoder (Weird-Net §IV.A, docs/design.md §2).

The readout (``pooling``) is a model option, so each paper config can use its paper's:

- ``"auto"`` (default): as Weird-Net §IV.A does it, ``"mean"`` for an encoder
  (bidirectional backbone), ``"last"`` for a decoder (causal backbone);
- ``"mean"``: the average over the valid positions;
- ``"last"``: the last valid position (in a causal backbone the only one that has seen the
  whole sequence);
- ``"first"``: the first valid position (the Relation paper §3.2.1);
- ``"cls"``: a learned token prepended to every sequence (BERT's [CLS], Luna's LRA
  readout): its embedding is a parameter (``backbone.cls``), it takes position 0 and the
  tokens take positions 1..L, so the backbone gets ``max_len + 1`` positions and still
  takes sequences of up to ``max_len`` tokens.

A causal backbone refuses ``"first"`` and ``"cls"``: its first position sees nothing but
itself, so the readout would ignore every other token.  Padding never changes the pooled
vector.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from weirdnet.config.typed import ConfigError

from .backbone import Backbone
from .base import WeirdNetModel, register_model
from .config import BackboneConfig
from .dba_authors import DBAuthorsBackbone, backbone_class, build_backbone

POOLINGS = ("auto", "mean", "last", "first", "cls")
"""The readouts ``pooling`` takes (see the module docstring)."""


def pool(hidden: torch.Tensor, mask: torch.Tensor | None, how: str) -> torch.Tensor:
    """hidden (B, L, D), mask (B, L) bool or None -> (B, D): "mean" over the valid
    positions, the "last" valid one, or the "first" valid one ("cls": position 0, where
    :class:`_PooledEncoder` puts its CLS token)."""
    if how == "mean":
        if mask is None:
            return hidden.mean(1)
        weights = mask.to(hidden.dtype).unsqueeze(-1)
        total = torch.where(mask.unsqueeze(-1), hidden, 0).sum(1)
        return total / weights.sum(1).clamp(min=1)
    if how == "cls":
        return hidden[:, 0]
    if how not in ("first", "last"):
        raise ValueError(f"pooling must be one of {POOLINGS[1:]}, got {how!r}")
    if mask is None:
        return hidden[:, 0 if how == "first" else -1]
    length = mask.shape[1]
    positions = torch.arange(1, length + 1, device=mask.device)
    if how == "first":  # the highest weight on the earliest valid position
        positions = length + 1 - positions
    chosen = (mask.long() * positions).argmax(1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), chosen]


def _check_pooling(pooling: str, backbone: BackboneConfig) -> None:
    if pooling not in POOLINGS:
        raise ConfigError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    if backbone.causal and pooling in ("first", "cls"):
        raise ConfigError(f"pooling={pooling!r} reads the first position, which sees only "
                          "itself in a causal backbone; use 'last' (or 'auto') for a causal "
                          "backbone, or set backbone.causal=false")


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


class ClsBackbone(Backbone):
    """A backbone whose inputs start with a learned CLS token (``pooling = "cls"``).

    It has ``config.max_len`` positions, one more than the tokens it takes: the caller
    gives inputs (B, 1 + L) whose column 0 is a placeholder (id 0, or zeros) and a mask
    with a True column 0; the placeholder's embedding is replaced by the parameter
    ``cls`` (1, 1, D), initialised as the token embedding (N(0, 1/√D)).  Positions count
    as in :class:`Backbone`: the CLS token has position 0, the real tokens 1, 2, ...
    """

    def __init__(self, config: BackboneConfig):
        super().__init__(config)
        self.cls = nn.Parameter(torch.empty(1, 1, config.dim))
        self._reset_cls()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if isinstance(getattr(self, "cls", None), nn.Parameter):
            self._reset_cls()

    def _reset_cls(self) -> None:
        nn.init.normal_(self.cls, std=self.config.dim ** -0.5)

    def embed_values(self, inputs: torch.Tensor) -> torch.Tensor:
        """inputs (B, 1 + L[, input_dim]) with a placeholder column 0 -> (B, 1 + L, D):
        CLS, then the token/value embeddings (positions are added by the caller)."""
        tokens = super().embed_values(inputs[:, 1:])
        return torch.cat([self.cls.to(tokens.dtype).expand(len(tokens), 1, -1), tokens], 1)


class ClsDBAuthorsBackbone(ClsBackbone, DBAuthorsBackbone):
    """A :class:`ClsBackbone` whose DBA layers hand Z on
    (:class:`~weirdnet.models.dba_authors.DBAuthorsBackbone`)."""


def with_cls_slot(inputs: torch.Tensor, mask: torch.Tensor | None):
    """Prepend a placeholder column for the CLS token: inputs (B, L[, C]) -> (B, 1 + L[, C])
    (id 0, or zeros) and mask (B, L) -> (B, 1 + L) with a True column 0 (None stays)."""
    slot = inputs.new_zeros((inputs.shape[0], 1, *inputs.shape[2:]))
    inputs = torch.cat([slot, inputs], 1)
    if mask is not None:
        mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], 1)
    return inputs, mask


class _PooledEncoder(WeirdNetModel):
    """A backbone and its pooling: ``encode(inputs, mask) -> (B, D)``."""

    def _build_encoder(self, backbone: BackboneConfig, pooling: str) -> None:
        self.pooling = pooling if pooling != "auto" else ("last" if backbone.causal else "mean")
        if self.pooling == "cls":  # one more position, for the CLS token
            config = dataclasses.replace(backbone, max_len=backbone.max_len + 1)
            carrying = backbone_class(config) is DBAuthorsBackbone
            self.backbone = (ClsDBAuthorsBackbone if carrying else ClsBackbone)(config)
        else:
            self.backbone = build_backbone(backbone)

    def encode(self, inputs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """inputs (B, L) ids or (B, L, input_dim) values; mask (B, L) -> pooled (B, D)."""
        if self.pooling != "cls":
            return pool(self.backbone(inputs, mask), mask, self.pooling)
        if isinstance(inputs, torch.Tensor) and inputs.dim() >= 2:  # else the backbone says
            limit = self.backbone.config.max_len - 1
            if inputs.shape[1] > limit:
                raise ValueError(f"sequence length {inputs.shape[1]} exceeds max_len={limit}: "
                                 f"the model takes at most {limit} tokens (plus its CLS token)")
            inputs, mask = with_cls_slot(inputs, mask)
        return pool(self.backbone(inputs, mask), mask, "cls")


@dataclass
class ClassifierConfig:
    """A backbone (structure A by default), ``num_classes`` and the ``pooling``: "auto"
    (mean for an encoder, last valid position for a causal backbone), "mean", "last",
    "first" or "cls" (a learned token prepended; see the module docstring)."""

    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    num_classes: int = 2
    pooling: str = "auto"

    def __post_init__(self) -> None:
        _check_classes(self.num_classes)
        _check_pooling(self.pooling, self.backbone)


@register_model
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
    ``[u, v, u − v, u ⊙ v] → Linear(4D, mlp_dim) → GELU → Linear(mlp_dim, classes)``;
    ``pooling`` as :class:`ClassifierConfig`'s, the same for both documents."""

    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    num_classes: int = 2
    mlp_dim: int | None = None
    pooling: str = "auto"

    def __post_init__(self) -> None:
        _check_classes(self.num_classes)
        _check_pooling(self.pooling, self.backbone)
        if self.mlp_dim is not None and (isinstance(self.mlp_dim, bool) or self.mlp_dim < 1):
            raise ConfigError(f"mlp_dim must be None or a positive int, got {self.mlp_dim!r}")


@register_model
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
