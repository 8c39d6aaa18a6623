"""Model configurations: plain dataclasses that round-trip through JSON.

:class:`BackboneConfig` describes a stack of blocks (docs/design.md §2); each model class has
its own config holding one (or two, for the encoder–decoder) backbone configs plus its
head's options.  ``from_dict`` rejects unknown keys (suggesting the closest) and values of
the wrong type, so a config file with a typo fails loudly instead of being ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weirdnet.config.typed import ConfigError

ACTIVATIONS = ("gelu", "leaky_relu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope", "none")
STRUCTURES = {"A": ("weird",), "B": ("weird", "softmax")}
"""The papers' structures (Weird-Net §III.E): A = every mixer Weird-attention; B = Weird in
layers 1, 3, 5, ... and softmax self-attention in layers 2, 4, ..."""


def resolve_pattern(pattern: str | list[str] | tuple[str, ...], depth: int) -> list[str]:
    """The mixer name of every layer: ``pattern`` ("A", "B", or registry names separated by
    commas, e.g. "weird,softmax") repeated cyclically to ``depth`` layers."""
    names = pattern_mixers(pattern)
    return [names[i % len(names)] for i in range(depth)]


def pattern_mixers(pattern: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The mixer names of one cycle of ``pattern`` (ConfigError for a pattern that names
    no mixer or an unknown one)."""
    if isinstance(pattern, str):
        names = STRUCTURES.get(pattern.strip()) or tuple(
            part.strip() for part in pattern.split(",") if part.strip())
    else:
        names = tuple(pattern)
    if not names:
        raise ConfigError(f"pattern {pattern!r} names no mixer; use 'A', 'B' or registry "
                          "names such as 'weird,softmax'")
    from weirdnet.layers.registry import available  # deferred: the layers import torch

    unknown = [name for name in names if name not in available()]
    if unknown:
        raise ConfigError(f"pattern {pattern!r}: unknown mixer(s) {unknown}; available: "
                          f"{', '.join(available())} (or the structures 'A' and 'B')")
    return names


@dataclass
class BackboneConfig:
    """A stack of pre-norm blocks ``x + Mixer(LN(x))``, ``x + FFN(LN(x))``, final LN.

    Inputs are tokens (``vocab_size``) or continuous values (``input_dim`` channels, a
    linear input projection); exactly one of the two is set.

    - ``dim``: model width D; ``depth``: number of blocks N; ``d_ff``: FFN width
      (default 4·D; 0: no feed-forward sublayer, as Zoology's recall models);
      ``heads``: heads of the multi-head mixers (default: the mixer's).
    - ``max_len``: longest sequence (learned positions, Weird-attention levels).
    - ``pattern``: "A", "B" or comma-separated mixer names, repeated to ``depth``.
    - ``causal``: decoder (True) or encoder (False) mixers.
    - ``activation``: the FFN: "gelu" (Weird-Net), "leaky_relu" (Moss, slope 0.01) or
      "swiglu" (``W_2 (SiLU(x W_gate) ⊙ x W_up)``, Llama's and the Transformer++'s).
    - ``norm``: "layernorm" (the papers') or "rmsnorm" (Llama); ``norm_eps``: its eps.
    - ``positions``: "learned" (an embedding per position, the papers'), "rope" (rotary
      positions inside every mixer that takes ``rope``: softmax attention; no position
      embedding) or "none" (no position signal but what the mixers make).
      ``rope_theta``: the rotary base.
    - ``bias``: biases in the FFN, the short convolution and the mixers that take
      ``bias`` (softmax, linear, local attention, Linformer); False as in Llama.
    - ``short_conv``: 0 (none) or the width k of a causal depthwise convolution on every
      mixer's input (fla's ``use_short_conv``, Mamba's ``d_conv``), with its own decoding
      state.
    - ``dropout``: on the embeddings and on each residual branch; ``attn_dropout``: given
      to mixers that have an attention dropout.
    - ``init_std``: None (each module's own initialisation: the papers') or a standard
      deviation: every ``nn.Linear`` and ``nn.Embedding`` weight of the backbone is drawn from
      N(0, init_std) and their biases zeroed (0.02: GPT-2's and Zoology's); parameters a
      mixer holds itself (Weird-attention's distance weights, DBA's Z) keep their own.
    - ``mixer_options``: per mixer name, extra constructor options, e.g.
      ``{"weird": {"weights": "exp"}, "dba": {"d_p": 16, "d_in": 24}}``.
    """

    dim: int = 256
    depth: int = 4
    d_ff: int | None = None
    heads: int | None = None
    max_len: int = 1024
    pattern: str = "A"
    causal: bool = False
    vocab_size: int | None = 256
    input_dim: int | None = None
    activation: str = "gelu"
    norm: str = "layernorm"
    positions: str = "learned"
    rope_theta: float = 10000.0
    bias: bool = True
    short_conv: int = 0
    init_std: float | None = None
    dropout: float = 0.0
    attn_dropout: float = 0.0
    norm_eps: float = 1e-5
    mixer_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("dim", "depth", "max_len"):
            _positive(self, name)
        for name in ("heads", "vocab_size", "input_dim"):
            if getattr(self, name) is not None:
                _positive(self, name)
        if self.d_ff is not None and not _is_count(self.d_ff):
            raise ConfigError(f"d_ff must be an int >= 0 (0: no feed-forward), got "
                              f"{self.d_ff!r}")
        if (self.vocab_size is None) == (self.input_dim is None):
            raise ConfigError("set exactly one of vocab_size (token inputs) and input_dim "
                              f"(continuous inputs); got vocab_size={self.vocab_size}, "
                              f"input_dim={self.input_dim}")
        for name, known in (("activation", ACTIVATIONS), ("norm", NORMS),
                            ("positions", POSITIONS)):
            if getattr(self, name) not in known:
                raise ConfigError(f"{name} must be one of {known}, got {getattr(self, name)!r}")
        if not _is_count(self.short_conv):
            raise ConfigError(f"short_conv must be 0 (none) or a convolution width >= 1, got "
                              f"{self.short_conv!r}")
        if self.init_std is not None:
            _positive_number(self, "init_std", "None or a positive number")
        for name in ("rope_theta", "norm_eps"):
            _positive_number(self, name)
        for name in ("dropout", "attn_dropout"):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {value!r}")
        if not isinstance(self.mixer_options, dict) or not all(
                isinstance(v, dict) for v in self.mixer_options.values()):
            raise ConfigError("mixer_options must map mixer names to dicts of options, got "
                              f"{self.mixer_options!r}")
        pattern_mixers(self.pattern)  # the names only: depth may be anything

    @property
    def ffn_dim(self) -> int:
        """The FFN width: ``d_ff`` or 4·D."""
        return self.d_ff if self.d_ff is not None else 4 * self.dim

    @property
    def mixers(self) -> list[str]:
        """The mixer name of every layer."""
        return resolve_pattern(self.pattern, self.depth)


def _is_count(value: Any) -> bool:
    """An int >= 0 (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    """An int or a float (a bool is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _positive_number(config: Any, name: str, kind: str = "a positive number") -> None:
    """ConfigError unless ``config.name`` is a finite number > 0 (an eps, a scale)."""
    value = getattr(config, name)
    if not _is_number(value) or not 0 < value < float("inf"):
        raise ConfigError(f"{name} must be {kind}, got {value!r}")


def _positive(config: Any, name: str) -> None:
    value = getattr(config, name)
    if not _is_count(value) or value < 1:
        raise ConfigError(f"{name} must be a positive int, got {value!r}")
