"""The contract every sequence mixer keeps, written once: :class:`Mixer`, and the
multi-head projection base of the attention mixers, :class:`MultiHeadMixer`.

A mixer maps (B, L, dim) to (B, L, dim)::

    y = mixer(x, mask=None)                  # the full pass
    y = mixer(x, mask, doc_ids=doc_ids)      # packed documents, each mixed on its own
    cache = mixer.init_cache(B, max_len)     # causal mixers only
    y = mixer(x, mask, cache=cache)          # L more tokens; the cache advances in place
    y_t = mixer.step(x_t, cache, mask_t)     # one token: (B, dim) -> (B, dim)
    cache.reorder(index)                     # keep batch rows ``index`` (beam search)
    cache.start_document(rows)               # rows (B,) bool forget their past

``forward`` always returns the output tensor (the cache is updated in place, never
returned).  ``mask`` is (B, L) bool, True for real tokens.  ``forward`` (the checks of x,
mask, doc_ids and the cache, then one hook) and ``step`` are here; a mixer implements
``init_cache`` when it decodes and at most three hooks:

    mix(x, mask, doc_ids)    the full pass on checked inputs (doc_ids None: one document
                             per row)
    extend(x, mask, cache)   the cached pass (a mixer that decodes)
    scan_step(cache)         the capability of decoding through a weird scan (Weird/PS
                             attention: the fused C step, CUDA-graph decoding)

The backbone settings a mixer takes (max_len, heads, ...) are declared where it is
registered (``register(name, shared=...)``, :mod:`weirdnet.layers.registry`).
``tests/layers/test_mixers_common.py`` checks the contract for every registered mixer.

Packed documents (``doc_ids``, the convention of :mod:`weirdnet.ops.packing`): every
mixer gives each document the outputs it gets alone.  A mixer with a native packed path
takes them in ``mix`` (Weird/PS-attention: the scan's document gate; softmax attention: a
block-diagonal mask); the others call :meth:`Mixer.each_document`, which mixes each
document as a row of a padded batch (exact wherever padding is, and padding is exact in
every mixer; it costs the padding of the longest document).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..ops import sequence_per_document
from ..ops.checks import check_float_tensor, check_mask, check_rows
from ..ops.packing import check_doc_ids
from ..ops.softmax_attention import check_dropout, check_step_mask, merge_heads, split_heads
from .ownership import check_owner, owner_of

__all__ = ["Mixer", "MultiHeadMixer", "autocast_input",
           "check_dtype_matches", "check_positive_int", "clear_rows", "resolve_heads",
           "select_rows"]


def select_rows(index: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Rows ``index`` (B',) of each (B, ...) tensor, in that order: the body of every
    cache's ``reorder`` (beam search keeps, drops and repeats sequences this way)."""
    return tuple(t.index_select(0, index.to(t.device)) for t in tensors)


def clear_rows(rows: torch.Tensor, *tensors: torch.Tensor, value=0) -> None:
    """Set rows ``rows`` ((B,) bool, checked against the tensors' B) of each (B, ...)
    tensor to ``value``, in place: the body of every cache's ``start_document`` (those
    rows forget their past)."""
    check_rows(rows, tensors[0].shape[0])
    for t in tensors:
        t[rows.to(t.device)] = value


def _weight_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of ``module``'s first floating parameter, depth first (None: it has
    none).  Read from the modules' own tables: ``parameters()`` would cost a few
    microseconds on every decoding step."""
    for weight in module._parameters.values():
        if weight is not None and weight.is_floating_point():
            return weight.dtype
    for child in module._modules.values():
        dtype = None if child is None else _weight_dtype(child)
        if dtype is not None:
            return dtype
    return None


def check_dtype_matches(x: torch.Tensor, module: nn.Module, name: str = "x") -> None:
    """ValueError (one line, naming both dtypes) unless ``x`` has the dtype of
    ``module``'s floating parameters, as the ``nn.Linear`` inside needs; under autocast
    on ``x``'s device every floating dtype passes (:func:`autocast_input` casts it).  A
    module without floating parameters takes any."""
    if torch.is_autocast_enabled(x.device.type):
        return
    dtype = _weight_dtype(module)
    if dtype is None or x.dtype == dtype:
        return
    raise ValueError(f"{name} is {x.dtype} but {type(module).__name__}'s parameters are "
                     f"{dtype}: cast one to the other ({name}.to({dtype}) or "
                     f"module.to({x.dtype})) or run under torch.autocast")


def autocast_input(x: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """Under autocast on ``x``'s device, ``x`` in the dtype of ``module``'s parameters
    (from bfloat16 or float16 up to float32 the cast is exact, and autocast casts back
    down for each matrix product), so a mixer's own ops, which autocast does not cover,
    see the dtypes they were built for; otherwise ``x`` itself
    (:func:`check_dtype_matches` has refused another dtype)."""
    if not torch.is_autocast_enabled(x.device.type):
        return x
    dtype = _weight_dtype(module)
    return x if dtype is None or x.dtype == dtype else x.to(dtype)


def check_positive_int(value, name: str, optional: bool = False) -> None:
    """ValueError unless ``value`` is a positive int (or None when ``optional``)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        kind = "None or a positive int" if optional else "a positive int"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


class Mixer(nn.Module):
    """Base of the sequence mixers (see the module docstring).

    Subclasses set ``self.dim`` and ``self.causal`` in ``__init__``.
    """

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                cache=None, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, L, dim); mask: optional (B, L) bool, True = real token; doc_ids:
        optional (B, L) integer ids of packed documents (a document starts where the id
        changes; nothing is mixed across a start).

        Returns y (B, L, dim).  With ``cache`` (from :meth:`init_cache`) the L tokens
        continue the cached sequences and the cache advances in place.
        """
        self.check_input(x, mask)
        x = autocast_input(x, self)
        check_doc_ids(doc_ids, x.shape[0], x.shape[1], x.device)
        if cache is None:
            return self.mix(x, mask, doc_ids)
        if doc_ids is not None:
            raise ValueError("doc_ids belong to the full pass; when decoding, start a new "
                             "document in chosen rows with cache.start_document(rows)")
        self.check_cache(cache, x.shape[0])
        return self.extend(x, mask, cache)

    def init_cache(self, batch_size: int, max_len: int | None = None):
        """An empty decoding cache for ``batch_size`` sequences of up to ``max_len`` tokens
        (None: the mixer's own limit, if it has one).  Causal mixers that decode implement
        it: :meth:`check_cache_args`, then the cache stamped with :func:`.ownership.own`;
        here it refuses."""
        raise self.not_decodable("init_cache() is not available")

    def check_cache_args(self, batch_size, max_len) -> None:
        """The checks of :meth:`init_cache`'s arguments: a causal mixer, positive ints."""
        if not self.causal:
            raise self.not_decodable("init_cache() is not available")
        check_positive_int(batch_size, "batch_size")
        check_positive_int(max_len, "max_len", optional=True)

    def step(self, x_t: torch.Tensor, cache, mask_t: torch.Tensor | None = None
             ) -> torch.Tensor:
        """Decode one token: x_t (B, dim), mask_t optional (B,) bool -> y_t (B, dim); the
        cache advances by one."""
        check_float_tensor(x_t, "x_t", 2)
        check_step_mask(mask_t, x_t.shape[0])
        mask = None if mask_t is None else mask_t.unsqueeze(1)
        return self.forward(x_t.unsqueeze(1), mask, cache=cache)[:, 0]

    def check_input(self, x, mask=None, name: str = "x", width: int | None = None) -> None:
        """x (B, L, width) floating (width defaults to ``dim``), mask None or (B, L) bool."""
        width = self.dim if width is None else width
        check_float_tensor(x, name, 3)
        check_dtype_matches(x, self, name)
        if x.shape[-1] != width:
            raise ValueError(f"{name} must have shape (batch, length, {width}), "
                             f"got {tuple(x.shape)}")
        check_mask(mask, x.shape[0], x.shape[1], device=x.device)

    def check_cache(self, cache, batch: int) -> None:
        """``cache`` must come from this mixer's :meth:`init_cache` (this very layer's:
        :func:`.ownership.check_owner`), for ``batch`` rows."""
        if not self.causal:
            raise self.not_decodable("forward() takes no cache")
        if type(owner_of(cache)) is not type(self):
            raise ValueError(f"cache must come from {type(self).__name__}.init_cache(), "
                             f"got {type(cache).__name__}")
        check_owner(cache, self)
        if cache.batch_size != batch:
            raise ValueError(f"cache was made for batch_size={cache.batch_size}, "
                             f"got a batch of {batch}")

    def scan_step(self, cache):
        """The capability of decoding through a weird scan: ``(weights, scan)`` for this
        mixer's cache ``cache`` (from :meth:`init_cache`), with weights a
        :class:`weirdnet.ops.block_step.ScanMixerWeights` (the projections around the
        scan) and scan the :class:`weirdnet.ops.WeirdScanCache` its step advances; None
        where the mixer's decoding step is no weird scan (the default: every mixer but
        causal Weird/PS-attention).  The fused C block step (on the C scan backend) and
        CUDA-graph decoding ask for it (:mod:`weirdnet.models.decoding`)."""
        return None

    def not_decodable(self, what: str) -> ValueError:
        """The error for decoding with a mixer that cannot (``what``: the refused call)."""
        return ValueError(f"incremental decoding needs a causal layer (causal=True): "
                          f"{what}; {type(self).__name__} was built with causal=False")

    def mix(self, x: torch.Tensor, mask: torch.Tensor | None,
            doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The full pass on checked inputs x (B, L, dim), mask, doc_ids (None: one
        document per row): y (B, L, dim).  Every mixer implements it."""
        raise NotImplementedError

    def extend(self, x: torch.Tensor, mask: torch.Tensor | None, cache) -> torch.Tensor:
        """The cached pass: the L tokens of x continue ``cache`` (checked: this mixer's,
        for x's batch), which advances in place.  Mixers that decode implement it."""
        raise NotImplementedError

    def each_document(self, x: torch.Tensor, mask: torch.Tensor | None,
                      doc_ids: torch.Tensor) -> torch.Tensor:
        """Packed documents, each mixed alone: the documents become the rows of a padded
        batch (N, longest, dim), go through :meth:`mix` with padding masked, and come
        back to their places (what a mixer without a cheaper exact form calls)."""
        return sequence_per_document(self.mix, x, mask, doc_ids)


def resolve_heads(dim: int, heads) -> int:
    """``heads`` checked against ``dim``; None gives dim // 64 heads of width 64 when 64
    divides dim, else one head."""
    if heads is None:
        return dim // 64 if dim % 64 == 0 else 1
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise ValueError(f"heads must be a positive int, got {heads!r}")
    if dim % heads:
        raise ValueError(f"dim={dim} is not divisible by heads={heads}")
    return heads


class MultiHeadMixer(Mixer):
    """Base of the attention mixers: Q/K/V/O projections (Xavier-uniform weights, zero
    biases, as ``nn.MultiheadAttention``) and the head split.  A subclass supplies
    ``_attend(q, k, v, mask)`` on (B, H, L, D / H) heads and, when it decodes,
    ``init_cache`` and ``_attend_cached(q, k, v, mask, cache)``; packed documents run
    through :meth:`Mixer.each_document` unless the subclass's ``mix`` takes them.

    Args:
        dim: model width D.
        causal: decoder (True) or encoder (False) form.
        heads: number of heads H (default: see :func:`resolve_heads`); head width D / H.
        bias: biases on the four projections.
        dropout: attention-probability dropout (training only), where the mixer has one.
        context_dim: width of the inputs of the K/V projections (default ``dim``).
    """

    def __init__(self, dim: int, *, causal: bool, heads: int | None = None, bias: bool = True,
                 dropout: float = 0.0, context_dim: int | None = None):
        super().__init__()
        check_positive_int(dim, "dim")
        context_dim = dim if context_dim is None else context_dim
        check_positive_int(context_dim, "context_dim")
        self.dim, self.causal = dim, bool(causal)
        self.heads = resolve_heads(dim, heads)
        self.head_dim = dim // self.heads
        self.dropout = check_dropout(dropout)
        self.proj_q = nn.Linear(dim, dim, bias=bias)
        self.proj_k = nn.Linear(context_dim, dim, bias=bias)
        self.proj_v = nn.Linear(context_dim, dim, bias=bias)
        self.proj_o = nn.Linear(dim, dim, bias=bias)
        MultiHeadMixer.reset_parameters(self)  # subclasses initialise their own parameters

    def reset_parameters(self) -> None:
        """Xavier-uniform projection weights, zero biases."""
        for proj in (self.proj_q, self.proj_k, self.proj_v, self.proj_o):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    @property
    def dropout_p(self) -> float:
        """The attention dropout now: ``dropout`` in training mode, else 0."""
        return self.dropout if self.training else 0.0

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L, dim) -> queries (B, H, L, D / H)."""
        return split_heads(self.proj_q(x), self.heads)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, L, context_dim) -> keys, values (B, H, L, D / H)."""
        return split_heads(self.proj_k(x), self.heads), split_heads(self.proj_v(x), self.heads)

    def project_qkv(self, x: torch.Tensor):
        """x (B, L, dim) -> q, k, v (B, H, L, D / H)."""
        return (self.project_q(x), *self.project_kv(x))

    def project_out(self, o: torch.Tensor) -> torch.Tensor:
        """Head outputs (B, H, L, D / H) -> y (B, L, dim)."""
        return self.proj_o(merge_heads(o))

    def mix(self, x, mask, doc_ids=None):
        if doc_ids is not None:
            return self.each_document(x, mask, doc_ids)
        return self.project_out(self._attend(*self.project_qkv(x), mask))

    def extend(self, x, mask, cache):
        return self.project_out(self._attend_cached(*self.project_qkv(x), mask, cache))

    def _param(self) -> torch.Tensor:
        return self.proj_q.weight

    def _attend(self, q, k, v, mask):
        raise NotImplementedError

    def _attend_cached(self, q, k, v, mask, cache):
        raise NotImplementedError

    def extra_repr(self) -> str:
        form = "causal" if self.causal else "bidirectional"
        return f"dim={self.dim}, {form}, heads={self.heads}, dropout={self.dropout}"
