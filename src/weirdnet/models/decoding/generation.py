"""The decoding loop shared by the language model and the encoder–decoder.

The prompt goes through the causal backbone once, filling every layer's cache; then each
new token costs one cached step per layer (``Backbone.step``: one fused C call per
Weird-attention block on CPU).  Dropout is off while decoding and the model's
mode is restored afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .sampling import check_sampling, sample_next


@dataclass(frozen=True)
class Sampling:
    """temperature (0 = greedy), top_k, top_p, eos_id, generator: see
    :func:`~weirdnet.models.decoding.sampling.sample_next`."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    eos_id: int | None = None
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_k, self.top_p)


def check_length(prompt_length: int, max_new_tokens: int, max_len: int) -> None:
    """ValueError when a prompt of ``prompt_length`` tokens plus ``max_new_tokens`` would
    pass the model's ``max_len`` positions."""
    total = prompt_length + max_new_tokens
    if total > max_len:
        raise ValueError(f"prompt length {prompt_length} + max_new_tokens {max_new_tokens} = "
                         f"{total} exceeds the model's max_len={max_len}")


def check_prompt(backbone: torch.nn.Module, prompt_ids: torch.Tensor, max_new_tokens: int,
                 prompt_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Validate a (left-padded) prompt; returns the mask, or None when nothing is padded."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    backbone.check_inputs(prompt_ids, prompt_mask, check_ids=True)  # once per generate
    check_length(prompt_ids.shape[1], max_new_tokens, backbone.config.max_len)
    if prompt_mask is None:
        return None
    ends_real, no_gap, unpadded = torch.stack([  # one host read for the three tests
        prompt_mask[:, -1].all(),
        ~(prompt_mask[:, 1:].long() < prompt_mask[:, :-1].long()).any(),
        prompt_mask.all()]).tolist()
    if not ends_real or not no_gap:
        raise ValueError("prompt_mask must describe left padding: False only before each "
                         "prompt's first real token, True to the end")
    return None if unpadded else prompt_mask


@contextmanager
def inference(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd inside; the model's mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def decode(model: torch.nn.Module, backbone: torch.nn.Module,
           logits_of: Callable[[torch.Tensor], torch.Tensor], prompt_ids: torch.Tensor,
           max_new_tokens: int, sampling: Sampling, prompt_mask=None, context=None
           ) -> torch.Tensor:
    """Continue ``prompt_ids`` (B, Lp) by up to ``max_new_tokens``: (B, Lp + new).

    ``logits_of`` maps hidden states (B, D) to logits (B, V); ``context`` goes to the
    backbone's cross mixers.  After ``eos_id`` a sequence keeps emitting it; decoding
    stops early once every sequence has.
    """
    prompt_mask = check_prompt(backbone, prompt_ids, max_new_tokens, prompt_mask)
    with inference(model):
        return _loop(backbone, logits_of, prompt_ids, max_new_tokens, sampling, prompt_mask,
                     context)


def _loop(backbone, logits_of, prompt_ids, max_new_tokens, sampling: Sampling, prompt_mask,
          context):
    batch, prompt_len = prompt_ids.shape
    out = prompt_ids.new_empty(batch, prompt_len + max_new_tokens)
    out[:, :prompt_len] = prompt_ids
    if max_new_tokens == 0:
        return out
    cache = backbone.init_cache(batch, prompt_len + max_new_tokens)
    hidden = backbone(prompt_ids, prompt_mask, cache=cache, context=context)[:, -1]
    done = torch.zeros(batch, dtype=torch.bool, device=prompt_ids.device)
    eos = sampling.eos_id
    for t in range(max_new_tokens):
        token = sample_next(logits_of(hidden), sampling.temperature, sampling.top_k,
                            sampling.top_p, sampling.generator)
        if eos is not None:
            token = torch.where(done, torch.full_like(token, eos), token)
            done |= token == eos
        out[:, prompt_len + t] = token
        if t + 1 == max_new_tokens or (eos is not None and bool(done.all())):
            return out[:, :prompt_len + t + 1]
        hidden = backbone.step(token, cache, context=context)
    return out
