"""Peers from ``transformers`` and flash-linear-attention, trained by weirdnet's own
trainer, data, loss and scorer: the lab's models for comparisons, which join weirdnet's
model table (``model.peer`` in a training config, ``weirdnet.models.load``) through the
lab's entry point (:data:`weirdnet_lab.commands.MODEL_MODULES`).

:class:`PeerLM` wraps a ``transformers`` causal LM built from its own config class (never
re-implemented): ``peer = "llama" | "mamba" | "mamba2" | "rwkv" | "qwen3-next" |
"recurrent-gemma" | "xlstm"``, or flash-linear-attention's own model (``fla.models``,
the ``fla-core`` / ``flash-linear-attention`` 0.6 wheels): ``peer = "fla-gated-deltanet" |
"fla-mamba2"``.  The backbone keys it
reads are the ones every peer has a counterpart for (``dim``, ``depth``, ``vocab_size``,
``max_len``, ``norm_eps``, and ``d_ff`` / ``heads`` where the peer has them); the rest of
the peer's config keeps the peer's recommended defaults unless ``options`` sets them:

- ``llama``: hidden_size = dim, num_hidden_layers = depth, intermediate_size = d_ff
  (default: 8·D/3 rounded up to a multiple of 32), heads (default max(1, D // 64)), no
  biases, max_position_embeddings = max_len.
- ``mamba``: hidden_size = dim, num_hidden_layers = depth; Mamba's d_state 16, expand 2,
  d_conv 4; ``use_mambapy`` (without the CUDA kernels, it trains through mamba.py's
  parallel scan, ``transformers``' recommended fallback, rather than a step-by-step loop;
  the ``mambapy`` package comes with ``weirdnet[hf]``).
- ``mamba2``: hidden_size = dim, num_hidden_layers = depth; Mamba-2's d_state 128, expand 2,
  head_dim 64 (or expand·D when smaller), 1 group, chunk 256.
- ``rwkv``: hidden_size = dim, num_hidden_layers = depth, intermediate_size = d_ff (default
  4·D), context_length = max_len.
- ``qwen3-next``: Qwen3-Next's blocks: Gated DeltaNet layers (with their short
  convolution and output gate) and, every fourth layer, gated softmax attention with
  partial rotary positions; dense SwiGLU feed-forwards (its mixture of experts left out:
  ``mlp_only_layers`` holds every layer).  hidden_size = dim, num_hidden_layers = depth,
  intermediate_size = d_ff (default 8·D/3 rounded up to a multiple of 32), attention heads
  (default max(1, D // 64)) of D / heads channels; the Gated DeltaNet heads keep
  Qwen3-Next's proportions (key heads of min(128, D) channels summing to D, twice as many
  value heads).  Where depth < 4 leaves no attention layer, the last layer is one
  (``transformers``' decoding cache needs one).
- ``recurrent-gemma``: Griffin's blocks (RecurrentGemma): two RG-LRU recurrent blocks, then
  one local-attention block (window 2,048), repeated; gated GELU feed-forwards.
  hidden_size = lru_width = dim, num_hidden_layers = depth, intermediate_size = 2·d_ff
  (each of its two feed-forward branches is d_ff wide; default 3·D, RecurrentGemma-2B's
  ratio), attention heads (default max(1, D // 256)).  Where depth < 3 leaves no
  attention block, the last block is one.
- ``xlstm``: xLSTM-7B's blocks (mLSTM layers and gated feed-forwards), on ``transformers``'
  native PyTorch kernels.  hidden_size = dim, num_hidden_layers = depth, num_heads
  max(1, D // 512) (xLSTM-7B's ratio; ``options.num_heads`` sets it), feed-forward width
  d_ff (default
  ``transformers``' 2.667·D rounded up to a multiple of 64); the kernels compute in
  float32, as weirdnet trains on a CPU (``autocast_kernel_dtype``; bfloat16 is the GPU
  default).  Its cached decoding in ``transformers`` 5.24 needs D·qk_dim_factor and
  D·v_dim_factor to be multiples of 64 (the cache rounds them up, the layers do not):
  :meth:`PeerLM.generate` refuses other widths with one clear error; training and
  evaluation take any width.
- ``fla-gated-deltanet``: flash-linear-attention's GatedDeltaNetForCausalLM (Gated
  DeltaNet layers with their short convolution and output gate, SwiGLU feed-forwards).
  hidden_size = dim, num_hidden_layers = depth, intermediate_size = d_ff (default fla's:
  8·D/3 rounded up to a multiple of 256); fla's proportions for the heads: head_dim
  min(256, D), num_heads max(1, round(0.75·D / head_dim)) (fla's default 6 heads of 256
  at D = 2048), value heads expand_v = 2 times wider; max_position_embeddings = max_len.
- ``fla-mamba2``: flash-linear-attention's Mamba2ForCausalLM with the widths of
  ``mamba2`` above (d_state 128, expand 2, head_dim 64, 1 group, chunk 256).

The fla peers run fla's Triton kernels, so they train and decode on a GPU only (on a CPU
they can be built, counted and matched); a missing fla is one error naming
:data:`FLA_INSTALL`.

On a CPU the Mamba, Mamba-2, Gated DeltaNet and mLSTM layers run ``transformers``'
pure-PyTorch paths (their fused kernels, mamba_ssm's, flash-linear-attention's and
mlstm_kernels', need a GPU): correct, slower than on a GPU.  Install with
``pip install 'weirdnet[hf]'``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from weirdnet.models import (
    BackboneConfig,
    ConfigError,
    LMOutput,
    WeirdNetModel,
    lm_loss,
    positions_at,
    register_model,
    selected_output,
    swiglu_width,
)
from weirdnet.ops import check_doc_ids, per_document

_MAPPED = frozenset({"dim", "depth", "vocab_size", "max_len", "norm_eps", "causal"})
"""The backbone keys every peer reads (causal: a peer is always a causal LM)."""


def _llama(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    heads = b.heads or max(1, b.dim // 64)
    return "LlamaConfig", {
        "hidden_size": b.dim, "num_hidden_layers": b.depth, "num_attention_heads": heads,
        "num_key_value_heads": heads, "intermediate_size": b.d_ff or swiglu_width(b.dim, 32),
        "max_position_embeddings": b.max_len, "rms_norm_eps": b.norm_eps,
        "attention_bias": False, "mlp_bias": False}


def _mamba(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    return "MambaConfig", {"hidden_size": b.dim, "num_hidden_layers": b.depth,
                           "layer_norm_epsilon": b.norm_eps, "use_mambapy": True}


def _mamba2(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    inner = 2 * b.dim
    head_dim = min(64, inner)
    return "Mamba2Config", {"hidden_size": b.dim, "num_hidden_layers": b.depth,
                            "expand": 2, "head_dim": head_dim, "num_heads": inner // head_dim,
                            "n_groups": 1, "layer_norm_epsilon": b.norm_eps}


def _fla_gated_deltanet(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    head_dim = min(256, b.dim)
    keys = {"hidden_size": b.dim, "num_hidden_layers": b.depth, "head_dim": head_dim,
            "num_heads": max(1, round(0.75 * b.dim / head_dim)),
            "max_position_embeddings": b.max_len, "norm_eps": b.norm_eps}
    return "GatedDeltaNetConfig", keys | ({"intermediate_size": b.d_ff} if b.d_ff else {})


def _fla_mamba2(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    keys = _mamba2(b)[1]
    keys["norm_eps"] = keys.pop("layer_norm_epsilon")
    return "Mamba2Config", keys


def _rwkv(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    return "RwkvConfig", {"hidden_size": b.dim, "num_hidden_layers": b.depth,
                          "attention_hidden_size": b.dim,
                          "intermediate_size": b.d_ff or 4 * b.dim,
                          "context_length": b.max_len, "layer_norm_epsilon": b.norm_eps}


def _qwen3_next(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    heads = b.heads or max(1, b.dim // 64)
    key_head_dim = min(128, b.dim)
    key_heads = max(1, b.dim // key_head_dim)
    layers = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
              for i in range(b.depth)]
    if "full_attention" not in layers:
        layers[-1] = "full_attention"
    return "Qwen3NextConfig", {
        "hidden_size": b.dim, "num_hidden_layers": b.depth, "layer_types": layers,
        "mlp_only_layers": list(range(b.depth)),
        "intermediate_size": b.d_ff or swiglu_width(b.dim, 32),
        "num_attention_heads": heads, "num_key_value_heads": heads,
        "head_dim": b.dim // heads, "linear_num_key_heads": key_heads,
        "linear_num_value_heads": 2 * key_heads, "linear_key_head_dim": key_head_dim,
        "linear_value_head_dim": key_head_dim, "max_position_embeddings": b.max_len,
        "rms_norm_eps": b.norm_eps}


_GRIFFIN_PATTERN = ("recurrent", "recurrent", "attention")


def _recurrent_gemma(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    blocks = [_GRIFFIN_PATTERN[i % 3] for i in range(b.depth)]
    if "attention" not in blocks:
        blocks[-1] = "attention"
    return "RecurrentGemmaConfig", {
        "hidden_size": b.dim, "lru_width": b.dim, "num_hidden_layers": b.depth,
        "block_types": blocks, "intermediate_size": 2 * (b.d_ff or 3 * b.dim),
        "num_attention_heads": b.heads or max(1, b.dim // 256),
        "rms_norm_eps": b.norm_eps}


def _xlstm(b: BackboneConfig) -> tuple[str, dict[str, Any]]:
    keys = {"hidden_size": b.dim, "num_hidden_layers": b.depth,
            "num_heads": max(1, b.dim // 512), "norm_eps": b.norm_eps,
            "autocast_kernel_dtype": "float32"}
    if b.d_ff:  # width = d_ff rounded up to a multiple of d_ff: exactly d_ff
        keys |= {"ffn_proj_factor": b.d_ff / b.dim, "ffn_round_up_to_multiple_of": b.d_ff}
    return "xLSTMConfig", keys


def _xlstm_widths(config) -> list[tuple[str, float]]:
    """(factor name, hidden_size x factor) of the mLSTM's query-key and value widths."""
    return [(name, config.hidden_size * getattr(config, name))
            for name in ("qk_dim_factor", "v_dim_factor")]


def _xlstm_config_problem(config) -> str | None:
    for name, width in _xlstm_widths(config):
        if width != int(width) or int(width) % config.num_heads:
            return (f"hidden_size x {name} = {width:g} must be a whole multiple of "
                    f"num_heads = {config.num_heads}")
    return None


def _xlstm_decoding_problem(config) -> str | None:
    for name, width in _xlstm_widths(config):
        if width % 64:
            return (f"xLSTM's cached decoding in transformers needs hidden_size x {name} "
                    f"to be a multiple of 64, got {width:g} (its cache rounds the width "
                    f"up, its layers do not); use a width that is a multiple of 128 or "
                    f"set model.options.{name}")
    return None


_CONFIG_PROBLEMS: dict[str, Callable[[Any], str | None]] = {"xlstm": _xlstm_config_problem}
"""Peers whose ``transformers`` config accepts widths its layers cannot split into heads:
the reason, or None."""

_DECODING_PROBLEMS: dict[str, Callable[[Any], str | None]] = {
    "xlstm": _xlstm_decoding_problem}
"""Peers whose ``transformers`` cache breaks at some widths: the reason, or None."""


PEERS: dict[str, tuple[Callable[[BackboneConfig], tuple[str, dict]], frozenset]] = {
    "llama": (_llama, frozenset({"d_ff", "heads"})),
    "mamba": (_mamba, frozenset()),
    "mamba2": (_mamba2, frozenset()),
    "rwkv": (_rwkv, frozenset({"d_ff"})),
    "qwen3-next": (_qwen3_next, frozenset({"d_ff", "heads"})),
    "recurrent-gemma": (_recurrent_gemma, frozenset({"d_ff", "heads"})),
    "xlstm": (_xlstm, frozenset({"d_ff"})),
    "fla-gated-deltanet": (_fla_gated_deltanet, frozenset({"d_ff"})),
    "fla-mamba2": (_fla_mamba2, frozenset()),
}
"""peer name -> (its config class name and keys from the backbone keys, the optional
backbone keys it reads besides dim, depth, vocab_size, max_len and norm_eps)."""

FLA_PEERS = frozenset({"fla-gated-deltanet", "fla-mamba2"})
"""The peers built from flash-linear-attention's ``fla.models`` (the rest: ``transformers``)."""

FLA_INSTALL = "pip install flash-linear-attention==0.6.0"
"""The command that installs fla (it brings fla-core); a GPU machine without a package
registry installs the wheels of ``lab/benchmarks/fetch_gpu_wheels.sh`` instead (docs/speed.md)."""


_NO_WEIGHT_DECAY = {"mamba": ("A_log", "D"), "mamba2": ("A_log", "D"),
                    "qwen3-next": ("A_log", "dt_bias")}
"""Tensors the peer's reference training leaves out of weight decay (mamba_ssm marks
Mamba's A_log and D ``_no_weight_decay``, flash-linear-attention Gated DeltaNet's A_log
and dt_bias; ``transformers`` does not carry the mark)."""


def _peer_backbone() -> BackboneConfig:
    return BackboneConfig(causal=True)


@dataclass
class PeerConfig:
    """``peer``: a key of :data:`PEERS`; ``backbone``: the width, depth, vocabulary and
    length it maps (the other backbone keys must keep their defaults: the peer has its own
    blocks); ``tie_embeddings``; ``options``: more keys of the peer's ``transformers``
    config (e.g. ``{"state_size": 16}``), over the mapped ones."""

    peer: str = "llama"
    backbone: BackboneConfig = field(default_factory=_peer_backbone)
    tie_embeddings: bool = True
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.peer not in PEERS:
            raise ConfigError(f"peer must be one of {tuple(PEERS)}, got {self.peer!r}")
        b, reads = self.backbone, _MAPPED | PEERS[self.peer][1]
        if b.vocab_size is None:
            raise ConfigError("a peer language model needs token inputs (backbone.vocab_size)")
        defaults = _peer_backbone()
        ignored = [f.name for f in dataclasses.fields(b)
                   if f.name not in reads and getattr(b, f.name) != getattr(defaults, f.name)]
        if ignored:
            raise ConfigError(f"peer {self.peer!r} has its own blocks: backbone key(s) "
                              f"{', '.join(sorted(ignored))} would be ignored; set the "
                              f"peer's own keys in model.options instead")

    def transformers_config(self):
        """The peer's config object (a ``transformers`` config class; fla's for the
        :data:`FLA_PEERS`)."""
        source = _import_fla(self.peer) if self.peer in FLA_PEERS else _import_transformers()
        build = PEERS[self.peer][0]
        class_name, mapped = build(self.backbone)
        keys = {"vocab_size": self.backbone.vocab_size,
                "tie_word_embeddings": self.tie_embeddings, **mapped, **self.options}
        try:
            config = getattr(source, class_name)(**keys)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"peer {self.peer!r}: {class_name} refused the config: "
                              f"{error}") from None
        check = _CONFIG_PROBLEMS.get(self.peer)
        problem = check(config) if check else None
        if problem:
            raise ConfigError(f"peer {self.peer!r}: {problem}")
        return config


def _import_transformers():
    try:
        import transformers
    except ImportError:
        raise ImportError("peer models come from transformers: pip install "
                          "'weirdnet[hf]'") from None
    return transformers


def _import_fla(peer: str):
    """``fla.models``; ImportError naming :data:`FLA_INSTALL` where fla (or a package it
    needs: transformers, einops, triton) cannot be imported."""
    _import_transformers()
    try:
        import fla.models
    except ImportError as error:
        raise ImportError(f"peer {peer!r} comes from flash-linear-attention, which cannot be "
                          f"imported ({error}): {FLA_INSTALL}") from None
    return fla.models


def _peer_model(peer: str, config):
    """The causal LM of ``config``: fla's ``<Name>ForCausalLM`` for the :data:`FLA_PEERS`,
    else ``transformers``' auto class."""
    if peer in FLA_PEERS:
        name = type(config).__name__.removesuffix("Config") + "ForCausalLM"
        return getattr(_import_fla(peer), name)(config)
    return _import_transformers().AutoModelForCausalLM.from_config(config)


@register_model
class PeerLM(WeirdNetModel):
    """A ``transformers`` or fla causal LM (:data:`PEERS`) behind weirdnet's LM interface:
    ``forward(input_ids, targets, mask) -> LMOutput`` with weirdnet's loss, and
    ``generate``.  Its weights live under ``peer.``."""

    config_class = PeerConfig
    build_on_meta = False  # rotary buffers are not saved; tied embeddings stay tied

    def __init__(self, config: PeerConfig | dict | None = None):
        super().__init__(PeerConfig() if config is None else config)
        self.peer = _peer_model(self.config.peer, self.config.transformers_config())
        for name, parameter in self.peer.named_parameters():
            if name.rsplit(".", 1)[-1] in _NO_WEIGHT_DECAY.get(self.config.peer, ()):
                parameter._no_weight_decay = True

    @property
    def max_len(self) -> int:
        return self.config.backbone.max_len

    def check_cached_decoding(self) -> None:
        """ValueError where the peer's ``transformers`` cache cannot decode this config."""
        check = _DECODING_PROBLEMS.get(self.config.peer)
        problem = check(self.peer.config) if check else None
        if problem:
            raise ValueError(problem)

    def after_load(self) -> None:
        """Tie the embeddings again (a load onto the meta device assigns each tensor)."""
        self.peer.tie_weights()

    def set_activation_checkpointing(self, mode: str, every: int = 1,
                                     ffn_chunk: int = 0) -> None:
        """``train.activation_checkpointing`` through the peer's own
        ``activation_checkpointing_enable`` (every ``every``-th layer for "every_k",
        non-reentrant); "none" leaves it as it is.  ``ffn_chunk`` (a weirdnet backbone's)
        must be 0: a peer has its own blocks."""
        peer = self.peer
        if ffn_chunk:
            raise ConfigError("train.ffn_chunk applies to weirdnet backbones; a transformers "
                              "peer has its own blocks: set it to 0")
        if mode == "none" or not hasattr(peer, "activation_checkpointing_enable"):
            return
        if not getattr(peer, "supports_gradient_checkpointing", False):
            raise ConfigError(f"train.activation_checkpointing: the {type(peer).__name__} "
                              "peer does not support it; set it to \"none\"")
        peer.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False},
            every_n_layers=every if mode == "every_k" else 1)

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, doc_ids: torch.Tensor | None = None, *,
                logits_at: torch.Tensor | None = None) -> LMOutput:
        """input_ids (B, L); targets (B, L) (-100 = not counted); mask (B, L) bool, True =
        real token; doc_ids (B, L) packed documents, each run alone as a row of a
        right-padded batch (the peers' CPU paths have no document boundaries);
        ``logits_at`` (B, L) bool: logits (N, V) and the loss only at those positions, as
        :meth:`WeirdNetLM.forward <weirdnet.models.WeirdNetLM.forward>` (a peer computes
        every position's logits and then selects).  Returns
        :class:`~weirdnet.models.LMOutput`."""
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(f"input_ids must be integer ids (batch, length), got "
                             f"{input_ids.dtype} {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.max_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_len="
                             f"{self.max_len}")
        check_doc_ids(doc_ids, input_ids.shape[0], input_ids.shape[1], input_ids.device)
        if doc_ids is None:
            logits = self._logits(input_ids, mask)
        else:
            logits = per_document(self._logits, input_ids, mask, doc_ids)
        if logits_at is not None:
            return selected_output(*positions_at(logits_at, logits, targets, mask))
        loss = None if targets is None else lm_loss(logits, targets, mask)
        return LMOutput(logits, loss)

    def _logits(self, input_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        attention = None if mask is None else mask.long()
        return self.peer(input_ids=input_ids, attention_mask=attention, use_cache=False).logits

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, *,
                 prompt_mask: torch.Tensor | None = None, eos_id: int | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """(B, Lp) -> (B, Lp + new) through the peer's own cached ``generate``
        (temperature 0: greedy).  ``transformers`` samples from the global random state:
        with ``generator``, that state is seeded from the generator's seed for this call
        and restored afterwards, so a seed gives the same samples every time."""
        self.check_cached_decoding()
        sampling = {"do_sample": False} if temperature == 0 else {
            "do_sample": True, "temperature": temperature, "top_k": top_k or 0,
            "top_p": 1.0 if top_p is None else top_p}
        attention = None if prompt_mask is None else prompt_mask.long()
        devices = [prompt_ids.device] if prompt_ids.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=generator is not None):
            if generator is not None:
                torch.manual_seed(generator.initial_seed())
            return self.peer.generate(prompt_ids, attention_mask=attention,
                                      max_new_tokens=max_new_tokens, eos_token_id=eos_id,
                                      pad_token_id=0 if eos_id is None else eos_id,
                                      **sampling)
