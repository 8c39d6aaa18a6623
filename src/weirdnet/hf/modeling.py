"""``WeirdNetForCausalLM``: a weirdnet language model as a Hugging Face ``PreTrainedModel``.

The model *is* a :class:`~weirdnet.models.WeirdNetLM` in module layout: the same
``backbone`` and ``head`` submodules, so its state dict has the same names and one
``model.safetensors`` loads as either (``weirdnet.models.load(dir)`` or
``AutoModelForCausalLM.from_pretrained(dir)``).  :meth:`WeirdNetForCausalLM.from_weirdnet`
wraps an existing ``WeirdNetLM`` without copying a weight.

``forward`` follows the ``transformers`` conventions: ``labels`` are the inputs (the shift
happens inside, -100 is not counted), ``attention_mask`` is 1 for real tokens (left padding
for batched generation), ``logits_to_keep`` keeps the last n positions' logits, and the
output is a ``CausalLMOutputWithPast`` whose ``cache`` is a :class:`~.cache.WeirdNetCache`.
``generate`` works with greedy search, sampling (temperature, top-k, top-p) and beam search;
strategies that roll the cache back are refused (see :mod:`.cache`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from weirdnet.models import Backbone, WeirdNetLM
from weirdnet.models.decoding.generation import check_length
from weirdnet.models.lm import lm_loss, output_head, output_logits, token_nll
from weirdnet.models.size import check_fits_in_memory
from weirdnet.ops.packing import doc_ids_from_positions
from weirdnet.run.safetensors_io import add_checksum, verify_file

from .cache import WeirdNetCache
from .configuration import WeirdNetConfig, check_generation_file
from .remote import write_remote_code


class WeirdNetPreTrainedModel(PreTrainedModel):
    """Shared ``transformers`` settings of the weirdnet models."""

    config_class = WeirdNetConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    _no_split_modules = ["Block", "ZCarryBlock"]
    supports_gradient_checkpointing = True  # Backbone.gradient_checkpointing, per block
    _is_stateful = True  # transformers refuses assisted decoding for stateful models

    def _init_weights(self, module: torch.nn.Module) -> None:
        """Nothing: every weirdnet module initialises itself when built (Weird-Net
        §III.G; ``docs/design.md``), and loaded weights replace it."""

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """``transformers``' ``from_pretrained``, strict: weights that are missing, left
        over or of another shape are an error naming them (``transformers`` would only
        warn and leave such weights uninitialised).  From a local folder, each weights
        file that stores a SHA-256 (every export does) is checked first: a damaged file
        is a ValueError naming it; a file without a digest loads unchecked."""
        wants_info = kwargs.pop("output_loading_info", False)
        name = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        if name is not None and os.path.isdir(name):
            folder = Path(name) / (kwargs.get("subfolder") or "")
            for path in _weight_files(folder, kwargs.get("variant")):
                verify_file(path)
            check_generation_file(folder / "generation_config.json")
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        problems = [f"{kind.replace('_', ' ')}: {sorted(map(str, keys))[:8]}"
                    for kind, keys in info.items() if keys and kind != "error_msgs"]
        if problems:
            raise ValueError(f"{name}: the weights do not match the config "
                             f"({'; '.join(problems)})")
        return (model, info) if wants_info else model

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """``transformers``' ``save_pretrained``, then the SHA-256 of each weights file
        in its metadata (as ``model.save`` stores it: checked by ``from_pretrained`` and
        ``weirdnet.models.load``), and the remote-code files and ``auto_map``
        (:mod:`.remote`), so the folder also loads with ``trust_remote_code=True`` in a
        process that never imported ``weirdnet.hf`` (which runs the folder's Python files:
        :data:`.remote.RISK`)."""
        classes = (type(self), type(self.config))
        registered = [cls._auto_class for cls in classes]
        for cls in classes:  # never let transformers copy this package's files into the folder
            cls._auto_class = None
        try:
            super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            for cls, auto_class in zip(classes, registered):
                cls._auto_class = auto_class
        for path in _weight_files(Path(save_directory), kwargs.get("variant")):
            add_checksum(path)
        write_remote_code(save_directory)


def _weight_files(folder: Path, variant: str | None = None) -> list[Path]:
    """The safetensors weights files ``from_pretrained`` reads from ``folder``: the shards
    its index names, else the single file (none when neither is there)."""
    single = folder / ("model.safetensors" if not variant else f"model.{variant}.safetensors")
    index = single.with_name(single.name + ".index.json")
    if index.is_file():
        try:
            names = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return []  # transformers reports a broken index itself
        return [folder / name for name in sorted(names) if (folder / name).is_file()]
    return [single] if single.is_file() else []


class WeirdNetForCausalLM(WeirdNetPreTrainedModel, GenerationMixin):
    """A weirdnet causal LM (any causal mixer pattern; structure B by default).

    input_ids (B, L) -> logits (B, L, vocab); see the module docstring.
    """

    def __init__(self, config: WeirdNetConfig):
        super().__init__(config)
        lm_config = config.lm_config
        check_fits_in_memory(WeirdNetLM, lm_config)  # its layout: WeirdNetLM's
        self.backbone = Backbone(lm_config.backbone)
        self.head = output_head(lm_config.backbone, lm_config.tie_embeddings)
        self.post_init()

    @classmethod
    def from_weirdnet(cls, lm: WeirdNetLM, **config_kwargs) -> WeirdNetForCausalLM:
        """Wrap ``lm``: the returned model shares its modules (no weight is copied), so
        training either trains both.  ``config_kwargs`` go to :class:`WeirdNetConfig`."""
        if not isinstance(lm, WeirdNetLM):
            raise TypeError(f"from_weirdnet takes a WeirdNetLM, got {type(lm).__name__}")
        config = WeirdNetConfig.from_lm_config(lm.config, **config_kwargs)
        with torch.device("meta"):  # the modules are replaced below: build nothing real
            model = cls(config)
        model.backbone, model.head = lm.backbone, lm.head
        return model

    def to_weirdnet(self) -> WeirdNetLM:
        """A :class:`~weirdnet.models.WeirdNetLM` sharing this model's modules."""
        with torch.device("meta"):
            lm = WeirdNetLM(self.config.lm_config)
        lm.backbone, lm.head = self.backbone, self.head
        return lm

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # forward makes its own WeirdNetCache; a DynamicCache cannot serve

    def generate(self, inputs: torch.Tensor | None = None, *args, **kwargs):
        """``transformers``' ``generate``, with the model's length limit checked before the
        first step when ``max_new_tokens`` is given (otherwise the cache refuses the token
        that would pass it)."""
        prompt = kwargs.get("input_ids", inputs)
        new = kwargs.get("max_new_tokens")
        if isinstance(prompt, torch.Tensor) and prompt.dim() == 2 and isinstance(new, int):
            check_length(prompt.shape[1], new, self.config.max_position_embeddings)
        return super().generate(inputs, *args, **kwargs)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.backbone.embed

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        self.backbone.embed = value

    def get_output_embeddings(self) -> torch.nn.Module | None:
        return self.head  # None when tied: the logits use the token embedding itself

    def forward(self, input_ids: torch.LongTensor | None = None,
                attention_mask: torch.Tensor | None = None, cache: WeirdNetCache | None = None,
                labels: torch.LongTensor | None = None, use_cache: bool | None = None,
                logits_to_keep: int | torch.Tensor = 0, return_dict: bool | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                inputs_embeds: torch.Tensor | None = None, num_items_in_batch=None,
                past_key_values: WeirdNetCache | None = None,
                doc_ids: torch.Tensor | None = None,
                position_ids: torch.LongTensor | None = None) -> CausalLMOutputWithPast:
        """Logits of ``input_ids`` (B, L), and the loss when ``labels`` are given.

        Args:
            input_ids: (B, L) byte ids (or any ids below the vocabulary size).
            attention_mask: (B, L') 1 = real token, 0 = padding; with a ``cache``, L' covers
                the cached positions too (``generate``'s convention) and its last L
                columns are the new tokens'.
            cache (alias ``past_key_values``): a :class:`WeirdNetCache` to continue; the
                inputs continue its sequences and it advances in place.
            labels: (B, L) target ids for the inputs themselves (shifted inside; -100
                is not counted).  The loss is the mean cross-entropy in nats, or the sum
                over ``num_items_in_batch`` when that is given (gradient accumulation).
            use_cache: return a cache (a new one when ``cache`` is None).  Default: only
                when a cache is passed in (``generate`` asks for one explicitly), so a
                plain forward pass stays the full-sequence pass.
            logits_to_keep: n > 0 keeps the last n positions' logits; a 1-D tensor keeps
                those positions; 0 keeps all.
            doc_ids: (B, L) packed documents (``weirdnet.ops.packing``): each is modelled
                alone.  Full pass only (no cache).
            position_ids: read only as ``transformers``' packing convention
                (``DataCollatorWithFlattening``): a document starts wherever a position
                does not follow the previous one.  The model's own positions restart at
                each document either way.
        """
        cache = _one_cache(cache, past_key_values)
        _refuse_unsupported(inputs_embeds, output_attentions, output_hidden_states)
        if input_ids is None:
            raise ValueError("WeirdNetForCausalLM needs input_ids (batch, length)")
        use_cache = cache is not None if use_cache is None else use_cache
        if position_ids is not None and doc_ids is None and not use_cache:
            doc_ids = doc_ids_from_positions(position_ids)
        if doc_ids is not None and use_cache:
            raise ValueError("doc_ids (packed documents) belong to the full pass: pass "
                             "use_cache=False")
        if use_cache and cache is None:
            cache = WeirdNetCache(self.backbone.init_cache(input_ids.shape[0]))
        mask = _new_tokens_mask(attention_mask, input_ids, cache if use_cache else None)
        if use_cache and _one_real_token(input_ids, mask, cache):  # generate's steps
            self.backbone.check_inputs(input_ids, mask)
            hidden = self.backbone.step(input_ids[:, 0], cache.state)[:, None]
        elif use_cache:
            hidden = self.backbone(input_ids, mask, cache=cache.state)
        else:
            hidden = self.backbone(input_ids, mask, doc_ids=doc_ids)
        logits = output_logits(_keep(hidden, logits_to_keep), self.backbone, self.head)
        loss = None
        if labels is not None:
            loss = _shifted_loss(logits, labels, logits_to_keep, num_items_in_batch)
        output = CausalLMOutputWithPast(loss=loss, logits=logits,
                                        cache=cache if use_cache else None)
        return output if return_dict is not False else output.to_tuple()


def _one_cache(cache, past_key_values):
    """The cache passed under either name; only a WeirdNetCache serves."""
    if cache is not None and past_key_values is not None:
        raise ValueError("pass the cache once: cache= or past_key_values=, not both")
    cache = past_key_values if cache is None else cache
    if cache is not None and not isinstance(cache, WeirdNetCache):
        raise ValueError(f"a weirdnet model decodes with the WeirdNetCache it returns "
                         f"(use_cache=True), not a {type(cache).__name__}")
    return cache


def _refuse_unsupported(inputs_embeds, output_attentions, output_hidden_states) -> None:
    if inputs_embeds is not None:
        raise ValueError("WeirdNetForCausalLM takes input_ids, not inputs_embeds")
    if output_attentions:
        raise ValueError("weirdnet models have no attention matrices to return "
                         "(output_attentions=True); Weird-attention never forms one")
    if output_hidden_states:
        raise ValueError("output_hidden_states is not supported by weirdnet models; use "
                         "model.backbone(input_ids) for the final hidden states")


def _new_tokens_mask(attention_mask, input_ids, cache: WeirdNetCache | None):
    """The (B, L) bool mask of the new tokens (None when absent)."""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise ValueError("attention_mask must be a 2-D (batch, length) tensor of 0/1, got "
                         f"{getattr(attention_mask, 'shape', type(attention_mask).__name__)}")
    length = input_ids.shape[1]
    expected = length + (0 if cache is None else cache.get_seq_length())
    if attention_mask.shape != (input_ids.shape[0], expected):
        where = "" if cache is None else f" ({cache.get_seq_length()} cached + {length} new)"
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}; expected "
                         f"({input_ids.shape[0]}, {expected}){where}")
    return attention_mask[:, -length:].bool()


def _one_real_token(input_ids, mask, cache: WeirdNetCache) -> bool:
    """Whether this call continues a filled cache by one real token per sequence (what
    ``Backbone.step`` does, through the fused steps where they apply)."""
    return input_ids.dim() == 2 and input_ids.shape[1] == 1 and cache.get_seq_length() > 0 \
        and (mask is None or bool(mask.all()))


def _keep(hidden: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    if isinstance(logits_to_keep, torch.Tensor):
        return hidden[:, logits_to_keep]
    if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) \
            or logits_to_keep < 0:
        raise ValueError(f"logits_to_keep must be an int >= 0 or a 1-D tensor of positions, "
                         f"got {logits_to_keep!r}")
    return hidden[:, -logits_to_keep:] if logits_to_keep else hidden


def _shifted_loss(logits, labels, logits_to_keep, num_items_in_batch) -> torch.Tensor:
    """Next-token cross-entropy with labels (B, L) aligned to the inputs."""
    if not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
        raise ValueError("labels need the logits of every position (logits_to_keep=0)")
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must have the shape of input_ids {tuple(logits.shape[:2])}, "
                         f"got {tuple(labels.shape)}")
    targets = F.pad(labels[:, 1:], (0, 1), value=-100)
    if num_items_in_batch is None:
        return lm_loss(logits, targets)
    return token_nll(logits, targets).sum() / num_items_in_batch
