"""The building blocks of benchmark methods: shapes, cases, methods and their builders.

Every method builds a :class:`Case` for a shape ``(B, L, D)``: leaf input tensors that
all require grad, a fixed random ``grad_out`` of the output's shape, and a ``forward``
closure.  Inputs are drawn directly in their final shape and dtype, so building a case
creates no temporary larger than one input (the memory child relies on that).

- weird_scan (:func:`scan_builder`): ``a, v`` of shape (B, L, D), ``log_w`` of shape
  (K, D) with K = max(1, ceil(log2 L)), drawn as the cumulative sum of ``step`` x N(0, 1)
  (the paper's ``"cumexp"`` parametrisation): step 1 is the default initialisation of
  ``WeirdAttention`` (the "wide" class: log-weights spread over tens, most channels' backward
  runs the running-max form), step 0.1 the "typical" class.  Output (B, L, D).
- SDPA (:func:`sdpa_builder`): ``q, k, v`` of shape (B, H, L, D / H) with
  H = D / head_dim heads (4 x 64 for D = 256), i.e. each the size of ``a``.
  Output (B, H, L, D / H).
- a mixer layer (:func:`layer_builder`): ``x`` of shape (B, L, D) and all the layer's
  parameters; ``weirdnet.layers.build(name, D, causal=..., **options)``.  Output (B, L, D).

Which methods a benchmark compares is up to its suite (:mod:`.scan`, :mod:`.mixers`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Shape:
    """Benchmark shape: batch ``B``, length ``L``, channels ``D``, SDPA ``head_dim``."""

    B: int
    L: int
    D: int
    head_dim: int = 64

    @property
    def heads(self) -> int:
        """SDPA heads: D / head_dim (one head of width D when D < head_dim)."""
        return max(1, self.D // self.head_dim)

    @property
    def levels(self) -> int:
        """Scan levels K = max(1, ceil(log2 L))."""
        return max(1, math.ceil(math.log2(self.L)))


@dataclass
class Case:
    """Everything one measurement needs: leaf ``inputs``, ``grad_out`` and ``forward``."""

    inputs: tuple[torch.Tensor, ...]
    grad_out: torch.Tensor
    forward: Callable[[], torch.Tensor]

    def input_bytes(self) -> int:
        """Bytes held by the inputs and grad_out."""
        return sum(t.numel() * t.element_size() for t in (*self.inputs, self.grad_out))


def forward_step(case: Case) -> Callable[[], None]:
    """One inference forward of ``case`` (no autograd graph)."""

    def step() -> None:
        with torch.no_grad():
            case.forward()

    return step


def forward_backward_step(case: Case) -> Callable[[], None]:
    """One forward+backward of ``case``; gradients are reset first, not accumulated."""

    def step() -> None:
        for t in case.inputs:
            t.grad = None
        out = case.forward()
        out.backward(case.grad_out)

    return step


@dataclass(frozen=True)
class Method:
    """A compared method: CLI ``name``, table ``label`` and a ``build`` function.

    - ``capped``: the suite's length cap (``OpBench.cap``, e.g. ``--torch-max-len``)
      applies to it.
    - ``check()``: None if the method can run here, else why not (its rows then carry
      that reason as their error).
    - ``probe(dim, head_dim, max_len)``: None if the method exists at width ``dim``, else
      why not; a method that does not exist is left out of the run with a note.
    - ``options(shape)``: constructor options it uses at ``shape``, recorded in its rows.
    """

    name: str
    label: str
    family: str
    build: Callable[[Shape, torch.dtype, torch.device, int], Case]
    capped: bool = False
    check: Callable[[], str | None] | None = None
    probe: Callable[[int, int, int], str | None] | None = None
    options: Callable[[Shape], dict] | None = None

    def available(self) -> str | None:
        """None if the method can run here, else the reason it cannot."""
        return self.check() if self.check is not None else None

    def missing(self, dim: int, head_dim: int, max_len: int) -> str | None:
        """None if the method exists at width ``dim``, else why not."""
        return self.probe(dim, head_dim, max_len) if self.probe is not None else None


def _randn(shape: tuple[int, ...], gen: torch.Generator, dtype, device) -> torch.Tensor:
    """A leaf N(0, 1) tensor drawn directly in ``dtype`` on ``device``."""
    return torch.randn(shape, generator=gen, dtype=dtype, device=device)


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def scan_ops_check(name: str) -> Callable[[], str | None]:
    """``Method.check`` of a weird_scan method: does ``weirdnet.ops`` provide it?"""

    def check() -> str | None:
        try:
            import weirdnet.ops as ops
        except Exception as exc:  # noqa: BLE001 - any import failure means unavailable
            return f"weirdnet.ops does not import: {exc!r}"
        if not hasattr(ops, name):
            return f"weirdnet.ops has no {name}"
        return None

    return check


def scan_builder(reverse: bool, backend: str | None, bidirectional: bool = False,
                 step: float = 1.0):
    """Build function for ``weird_scan`` (or ``weird_scan_bidirectional``); log_w is the
    cumulative sum of ``step`` x N(0, 1)."""

    def build(shape: Shape, dtype: torch.dtype, device: torch.device, seed: int) -> Case:
        from weirdnet import ops

        gen = _generator(device, seed)
        size = (shape.B, shape.L, shape.D)
        a = _randn(size, gen, dtype, device).requires_grad_()
        v = _randn(size, gen, dtype, device).requires_grad_()
        log_w = (step * _randn((shape.levels, shape.D), gen, dtype, device)).cumsum(0)
        log_w.requires_grad_()
        grad_out = _randn(size, gen, dtype, device)
        if bidirectional:
            def forward() -> torch.Tensor:
                return ops.weird_scan_bidirectional(a, v, log_w, backend=backend)
        else:
            def forward() -> torch.Tensor:
                return ops.weird_scan(a, v, log_w, reverse=reverse, backend=backend)
        return Case((a, v, log_w), grad_out, forward)

    return build


class _DirectScan(torch.autograd.Function):
    """A backend's kernels called directly (no argument checks, no custom op): the baseline
    that shows what the ``weird_scan`` wrapper costs."""

    @staticmethod
    def forward(ctx, a, v, log_w, impl, nlev):
        ctx.save_for_backward(a, v, log_w)
        ctx.impl, ctx.nlev = impl, nlev
        return impl.fwd(a, v, log_w, None, None, a.shape[-1], nlev)

    @staticmethod
    def backward(ctx, grad):
        a, v, log_w = ctx.saved_tensors
        da, dv, dlogw = ctx.impl.bwd(a, v, log_w, None, None, grad, a.shape[-1], ctx.nlev)
        grad_log_w = log_w.new_zeros(log_w.shape)
        grad_log_w[: ctx.nlev] = dlogw.to(log_w.dtype)
        return da, dv, grad_log_w, None, None


def direct_scan_builder(step: float = 1.0):
    """Build function for the causal scan's kernels called without the custom op (log_w
    as :func:`scan_builder`'s)."""
    scan_build = scan_builder(False, None, step=step)

    def build(shape: Shape, dtype: torch.dtype, device: torch.device, seed: int) -> Case:
        from weirdnet.ops import levels_needed
        from weirdnet.ops.weird_scan import dispatch

        case = scan_build(shape, dtype, device, seed)
        a, v, log_w = case.inputs
        impl, nlev = dispatch.resolve(device), levels_needed(shape.L)

        def forward() -> torch.Tensor:
            return _DirectScan.apply(a, v, log_w, impl, nlev)

        return Case(case.inputs, case.grad_out, forward)

    return build


def sdpa_builder(causal: bool):
    """Build function for ``scaled_dot_product_attention`` with D / head_dim heads."""

    def build(shape: Shape, dtype: torch.dtype, device: torch.device, seed: int) -> Case:
        gen = _generator(device, seed)
        size = (shape.B, shape.heads, shape.L, shape.D // shape.heads)
        q, k, v = (_randn(size, gen, dtype, device).requires_grad_() for _ in range(3))
        grad_out = _randn(size, gen, dtype, device)

        def forward() -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return Case((q, k, v), grad_out, forward)

    return build


def layer_builder(mixer: str, causal: bool, options: Callable[[Shape], dict]):
    """Build function for mixer layer ``mixer`` of ``weirdnet.layers`` (form ``causal``).

    The layer is ``build(mixer, D, causal=causal, **options(shape))``, its parameters
    initialised from ``seed``; the case's inputs are ``x`` (B, L, D) and every parameter.
    """

    def build(shape: Shape, dtype: torch.dtype, device: torch.device, seed: int) -> Case:
        from weirdnet import layers

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            layer = layers.build(mixer, shape.D, causal=causal, **options(shape))
        layer = layer.to(device=device, dtype=dtype)
        params = tuple(p for p in layer.parameters() if p.requires_grad)
        gen = _generator(device, seed)
        size = (shape.B, shape.L, shape.D)
        x = _randn(size, gen, dtype, device).requires_grad_()
        grad_out = _randn(size, gen, dtype, device)

        def forward() -> torch.Tensor:
            return layer(x)

        return Case((x, *params), grad_out, forward)

    return build
