"""Decoding with every new token one CUDA graph replay: :func:`graph_generate`.

One eager decoding step (:meth:`Backbone.step <weirdnet.models.backbone.Backbone.step>`)
launches a few kernels per layer, so at batch 1 a GPU waits on the host's launches.
Captured once in a ``torch.cuda.CUDAGraph``, the whole step (embedding, every block,
the final norm and the output head) is one replay per token.

A graph replays the same kernels on the same buffers with the same scalar arguments, so
the step must keep its state in fixed tensors and must not depend on a Python number that
changes from token to token.  Two things in today's step do:

- the scan's decoding step takes the position as a Python int (``WeirdScanCache`` ->
  ``ops.weird_scan.op.extend(..., t0, ...)``, a kernel argument): during the step each
  scan cache follows a position *tensor* that the graph itself advances
  (``WeirdScanCache.follow``), and runs the PyTorch backend's ring update with tensor
  row indices (``ops.weird_scan.pytorch.extend_at``, the same ``combine``);
- ``BackboneCache.lengths`` is replaced by a new tensor at each step: the captured step
  copies it back into the tensor it read.

So a model whose every block is a causal Weird-attention block without a short
convolution or cross mixer (Weird-Net A; ``supported`` says why another is not) decodes
through graphs; greedy tokens equal the full pass's (tests/models/test_graph_decode.py).
:func:`graph_generate` with ``capture=False`` runs the same static-buffer step eagerly,
which is how a CPU checks it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .cache import BackboneCache
from .generation import Sampling, check_prompt, inference
from .sampling import sample_next


def supported(backbone: torch.nn.Module) -> str | None:
    """Why ``backbone`` cannot decode through a CUDA graph, or None: causal, token inputs,
    every block's mixer decoding through a weird scan (``Mixer.scan_step``: its scan
    cache's position can be a tensor) with no short convolution or cross mixer (their
    caches index by a Python int)."""
    if not backbone.config.causal or not backbone.takes_tokens:
        return "graph decoding needs a causal token model"
    for index, block in enumerate(backbone.blocks):
        mixer = block.mixer
        if not mixer.causal or mixer.scan_step(mixer.init_cache(1, 1)) is None:
            return (f"graph decoding supports Weird-attention blocks only (a mixer whose "
                    f"decoding step is a weird scan); block {index} mixes with "
                    f"{type(mixer).__name__}")
        if block.conv is not None or block.cross is not None:
            return f"graph decoding: block {index} has a short convolution or cross mixer"
    return None


def _scans(backbone: torch.nn.Module, cache) -> list:
    """Every layer's scan cache (``Mixer.scan_step``), in block order."""
    return [block.mixer.scan_step(layer)[1]
            for block, layer in zip(backbone.blocks, cache.layers)]


class StaticStep:
    """One decoding step on fixed buffers: ``token`` (B,) in, ``logits`` (B, V) out, the
    cache advanced; captured as a CUDA graph with ``capture=True`` (then :meth:`__call__`
    is one replay).  Made after the prompt filled ``cache``."""

    def __init__(self, backbone: torch.nn.Module, logits_of: Callable, cache: BackboneCache,
                 token: torch.Tensor, capture: bool):
        self.backbone, self.logits_of, self.cache = backbone, logits_of, cache
        self.scans = _scans(backbone, cache)
        if cache.fused is None:  # every block as PyTorch ops (a fused C step reads the
            cache.fused = [None] * len(cache.layers)  # Python position)
        self.token = token.clone()
        self.position = torch.tensor(cache.steps, device=token.device)
        self.lengths = cache.lengths
        self.graph = None
        self.logits = self._eager()  # the first step runs eagerly (warms every kernel)
        if capture:
            self._capture()

    def _follow(self, position: torch.Tensor | None) -> None:
        """Every layer's scan cache reads its position from ``position`` (None: its own)."""
        for scan in self.scans:
            scan.follow(position)

    def _body(self) -> torch.Tensor:
        self._follow(self.position)
        try:
            hidden = self.backbone.step(self.token, self.cache)
        finally:
            self._follow(None)
        self.lengths.copy_(self.cache.lengths)
        self.cache.lengths = self.lengths
        self.position.add_(1)
        return self.logits_of(hidden)

    def _eager(self) -> torch.Tensor:
        return self._body()

    def _capture(self) -> None:
        """Record one step; the capture runs no kernel, so the Python counters it moved
        are put back."""
        saved = self._counters()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream), torch.cuda.graph(self.graph, stream=stream):
            self.logits = self._body()
        torch.cuda.current_stream().wait_stream(stream)
        self._set_counters(saved)

    def _counters(self) -> tuple[int, list[int]]:
        return self.cache.steps, [scan.position for scan in self.scans]

    def _set_counters(self, saved: tuple[int, list[int]]) -> None:
        self.cache.steps = saved[0]
        for scan, position in zip(self.scans, saved[1]):
            scan.position = position

    def __call__(self, token: torch.Tensor) -> torch.Tensor:
        """Feed ``token`` (B,); the next logits (B, V) (a buffer the next call rewrites)."""
        self.token.copy_(token)
        if self.graph is None:
            return self._eager()
        self.graph.replay()
        steps, positions = self._counters()  # what the replay did on the device
        self._set_counters((steps + 1, [p + 1 for p in positions]))
        return self.logits


def graph_generate(model: torch.nn.Module, backbone: torch.nn.Module, logits_of: Callable,
                   prompt_ids: torch.Tensor, max_new_tokens: int, sampling: Sampling,
                   capture: bool | None = None) -> torch.Tensor:
    """Continue ``prompt_ids`` (B, Lp) by ``max_new_tokens``: (B, Lp + new), as
    :func:`weirdnet.models.decoding.generation.decode` does for unpadded prompts (the same
    sampling and ``eos_id`` rule); each token after the first is a replay of a captured
    step.
    ``capture``: None = on CUDA; False runs the same static-buffer step eagerly.
    ValueError for a model :func:`supported` refuses, or capture without CUDA."""
    why = supported(backbone)
    if why:
        raise ValueError(why)
    capture = prompt_ids.device.type == "cuda" if capture is None else capture
    if capture and prompt_ids.device.type != "cuda":
        raise ValueError("CUDA graph decoding needs the model on a CUDA device")
    check_prompt(backbone, prompt_ids, max_new_tokens, None)
    batch, prompt_len = prompt_ids.shape
    out = prompt_ids.new_empty(batch, prompt_len + max_new_tokens)
    out[:, :prompt_len] = prompt_ids
    if max_new_tokens == 0:
        return out
    with inference(model):
        cache = backbone.init_cache(batch, prompt_len + max_new_tokens)
        logits = logits_of(backbone(prompt_ids, cache=cache)[:, -1])
        done = torch.zeros(batch, dtype=torch.bool, device=prompt_ids.device)
        eos, step = sampling.eos_id, None
        for t in range(max_new_tokens):
            token = sample_next(logits, sampling.temperature, sampling.top_k,
                                sampling.top_p, sampling.generator)
            if eos is not None:  # as decode: after eos a sequence keeps emitting it
                token = torch.where(done, torch.full_like(token, eos), token)
                done |= token == eos
            out[:, prompt_len + t] = token
            if t + 1 == max_new_tokens or (eos is not None and bool(done.all())):
                return out[:, :prompt_len + t + 1]
            if step is None:
                step = StaticStep(backbone, logits_of, cache, token, capture)
                logits = step.logits
            else:
                logits = step(token)
    return out
