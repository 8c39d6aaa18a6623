"""Count what a Triton scan backend does, from its own kernels, under Triton's interpreter.

:func:`count` runs ``weird_scan``'s forward, then its backward, through a backend's
``fwd``/``bwd`` (``weirdnet.ops.weird_scan.dispatch.BACKENDS[name]``, the functions the
custom ops call) on CPU tensors, and records:

- every Triton launch: the kernel, its grid, its specialization (constexprs, argument
  types and alignment, ``num_warps``: what :mod:`.ptx` compiles), and per pointer
  argument the distinct elements it loads and stores (masked-off lanes excluded) and the
  bytes they make: the device-memory traffic of a kernel that keeps on chip whatever it
  touches twice within one launch (a halo re-read is free, a round trip through memory
  between launches is not);
- every PyTorch op the host code runs between launches (a ``TorchDispatchMode``; views
  and metadata excluded), with the bytes of its tensor inputs and outputs (an in-place
  op's inputs only): on a GPU each is a kernel launch of its own;
- host syncs: ops that make the host wait for the device (``.item()``, ``nonzero``,
  ``masked_select``, ``unique``, ...).

With ``execute=False`` the kernels are not run (their launches are recorded, nothing is
interpreted): the host code's launches, ops and syncs at a shape the interpreter cannot
run, for :func:`weirdnet_lab.scan_cost.derive.full_shape`.

TRITON_INTERPRET=1 must be set before the backend's kernel module is first imported
(:func:`interpreter_ready` says whether it was).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that only describe a tensor (no data moved, no kernel on a GPU).
VIEW_OPS = frozenset({
    "aten.view", "aten._unsafe_view", "aten.expand", "aten.permute", "aten.slice",
    "aten.select", "aten.unsqueeze", "aten.squeeze", "aten.t", "aten.transpose",
    "aten.alias", "aten.detach", "aten.as_strided", "aten.split", "aten.unbind",
    "aten.diagonal", "aten.lift_fresh", "aten.empty", "aten.empty_strided",
    "aten.empty_like", "aten.new_empty", "aten.new_empty_strided", "aten.sym_size",
    "aten.sym_stride", "aten.sym_numel", "aten.is_contiguous", "aten._reshape_alias",
    "aten.reshape", "aten.contiguous", "aten.clone_if_needed", "aten.set_",
    "aten.split_with_sizes", "aten.narrow"})
# Ops whose result the host must read back before it can go on: a device sync.
SYNC_OPS = frozenset({
    "aten._local_scalar_dense", "aten.item", "aten.nonzero", "aten.nonzero_static",
    "aten.masked_select", "aten.unique", "aten._unique", "aten._unique2",
    "aten.unique_consecutive", "aten.unique_dim", "aten.is_nonzero", "aten.equal",
    "aten.allclose", "aten.repeat_interleave", "aten.bincount", "aten.histc",
    "aten.tolist", "aten._assert_async"})


@dataclass
class Launch:
    """One Triton launch: kernel, grid, specialization and bytes per pointer argument."""

    kernel: str
    module: str
    grid: tuple[int, ...]
    num_warps: int
    constexprs: dict
    signature: dict  # argument name -> Triton type ("*bf16", "i32", ...)
    aligned: list[str]  # arguments specialised as divisible by 16
    args: dict = field(default_factory=dict)  # name -> {numel, size, loaded, stored}
    block_elements: int = 0  # the largest block one load or store of a program touches

    @property
    def bytes_read(self) -> int:
        return sum(a["loaded"] * a["size"] for a in self.args.values())

    @property
    def bytes_written(self) -> int:
        return sum(a["stored"] * a["size"] for a in self.args.values())

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "module": self.module, "grid": list(self.grid),
                "num_warps": self.num_warps, "constexprs": self.constexprs,
                "signature": self.signature, "aligned": self.aligned, "args": self.args,
                "block_elements": self.block_elements,
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written}


@dataclass
class Op:
    """One PyTorch op of the host code: its name and the bytes of its tensors."""

    name: str
    bytes: int
    sync: bool

    def as_dict(self) -> dict:
        return {"name": self.name, "bytes": self.bytes, "sync": self.sync}


@dataclass
class Phase:
    """What the forward (or the backward) did."""

    launches: list[Launch] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    @property
    def syncs(self) -> list[str]:
        return [o.name for o in self.ops if o.sync]

    def as_dict(self) -> dict:
        return {"launches": [x.as_dict() for x in self.launches],
                "ops": [o.as_dict() for o in self.ops], "syncs": self.syncs}


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(y) for y in x)
    return 0


class _HostOps(TorchDispatchMode):
    """Records the host code's ops into ``self.phase`` (not those inside a launch)."""

    def __init__(self, recorder: _Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        if self.recorder.in_kernel or name in VIEW_OPS:
            return out
        size = _tensor_bytes(args) + _tensor_bytes(list(kwargs.values()))
        if not func._schema.is_mutable:  # an in-place op's output is its first input
            size += _tensor_bytes(out)
        self.recorder.phase.ops.append(Op(name, size, name in SYNC_OPS))
        return out


class _Recorder:
    """Patches the interpreter's launch, load and store; collects one :class:`Phase`."""

    def __init__(self, execute: bool):
        self.execute = execute
        self.phase = Phase()
        self.in_kernel = False
        self._loaded: dict[str, set] = {}
        self._stored: dict[str, set] = {}
        self._ranges: list[tuple[int, int, str]] = []
        self.block = 0

    # -- address bookkeeping ----------------------------------------------------------
    def _owner(self, address: int) -> str | None:
        for lo, hi, name in self._ranges:
            if lo <= address < hi:
                return name
        return None

    def _note(self, table: dict[str, set], ptrs, mask) -> None:
        import numpy as np

        self.block = max(self.block, ptrs.data.size)
        addresses = np.unique(ptrs.data[mask.data.astype(bool)])
        if addresses.size == 0:
            return
        # each address counts once, for the first argument whose memory holds it
        for lo, hi, name in self._ranges:
            here = (addresses >= lo) & (addresses < hi)
            if here.any():
                table.setdefault(name, set()).update(addresses[here].tolist())
                addresses = addresses[~here]
            if addresses.size == 0:
                break

    @contextlib.contextmanager
    def patched(self):
        import triton.runtime.interpreter as interp

        builder = interp.InterpreterBuilder
        load, store = builder.create_masked_load, builder.create_masked_store
        run = interp.InterpretedFunction.run
        recorder = self

        def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
            recorder._note(recorder._loaded, ptrs, mask)
            return load(self, ptrs, mask, other, cache_policy, is_volatile)

        def masked_store(self, ptrs, value, mask, cache_policy):
            recorder._note(recorder._stored, ptrs, mask)
            return store(self, ptrs, value, mask, cache_policy)

        def counted_run(self, *args, grid, warmup, **kwargs):
            if warmup:
                return run(self, *args, grid=grid, warmup=warmup, **kwargs)
            launch, tensors = recorder._describe(self, args, grid, kwargs)
            recorder.phase.launches.append(launch)
            recorder._ranges = _ranges(tensors)
            if not recorder.execute:
                launch.args = {name: {**launch.args[name.split("=")[0]]}
                               for _, _, name in recorder._ranges}
                return None
            recorder._loaded, recorder._stored, recorder.block = {}, {}, 0
            recorder.in_kernel = True
            try:
                out = run(self, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                recorder.in_kernel = False
            launch.block_elements = recorder.block
            launch.args = {}
            for _, _, name in recorder._ranges:
                first = tensors[name.split("=")[0]]
                launch.args[name] = {"numel": first.numel(), "size": first.element_size(),
                                     "loaded": len(recorder._loaded.get(name, ())),
                                     "stored": len(recorder._stored.get(name, ()))}
            return out

        builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
        interp.InterpretedFunction.run = counted_run
        try:
            yield
        finally:
            builder.create_masked_load, builder.create_masked_store = load, store
            interp.InterpretedFunction.run = run

    def _describe(self, fn, args, grid, kwargs) -> tuple[Launch, dict]:
        """The launch's record (no counts yet) and its tensor arguments by name."""
        import inspect

        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend

        params = inspect.signature(fn.fn).parameters
        bound = dict(zip(fn.arg_names, args))
        bound.update({k: v for k, v in kwargs.items() if k in params})
        constexpr_names = {n for n, p in params.items() if "constexpr" in str(p.annotation)}
        constexprs, signature, aligned, tensors = {}, {}, [], {}
        for name in fn.arg_names:
            value = bound[name]
            if name in constexpr_names:
                constexprs[name] = _plain(value)
                continue
            kind, attr = native_specialize_impl(BaseBackend, value, False, True, True)
            if kind == "constexpr":  # an int equal to 1: specialised as a constant
                constexprs[name] = _plain(attr)
                continue
            signature[name] = kind
            if attr == "D":
                aligned.append(name)
            if isinstance(value, torch.Tensor):
                tensors[name] = value
        grid_t = tuple(grid(bound) if callable(grid) else grid)
        launch = Launch(fn.fn.__name__, fn.fn.__module__, grid_t,
                        int(kwargs.get("num_warps", 4)), constexprs, signature, aligned,
                        {n: {"numel": t.numel(), "size": t.element_size(), "loaded": 0,
                             "stored": 0} for n, t in tensors.items()})
        return launch, tensors


def _ranges(tensors: dict[str, torch.Tensor]) -> list[tuple[int, int, str]]:
    """(first byte, past the last byte, name) of each tensor argument, in argument order;
    arguments passed the same memory (a dummy pointer, an output named twice) are one
    range named "a=b"."""
    ranges: dict[tuple[int, int], str] = {}
    for name, t in tensors.items():
        # meta tensors (a run that executes nothing) all start at 0: tell them apart by
        # their storage
        start = t.data_ptr() + (t.untyped_storage()._cdata if t.is_meta else 0)
        key = (start, start + _span(t))
        ranges[key] = f"{ranges[key]}={name}" if key in ranges else name
    return [(lo, hi, name) for (lo, hi), name in ranges.items()]


def _span(t: torch.Tensor) -> int:
    """Bytes from the first element's address to past the last one's (a strided view)."""
    if t.numel() == 0:
        return 0
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


def _plain(value):
    """A JSON-friendly constexpr value (a Triton dtype becomes {"tl_dtype": name})."""
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        value = value.value
    if isinstance(value, tl.dtype):
        return {"tl_dtype": str(value)}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


def interpreter_ready(backend: str) -> str | None:
    """None when ``backend`` runs on CPU tensors here (its kernels built for the
    interpreter), else why not."""
    from weirdnet.ops.weird_scan import dispatch

    if backend not in dispatch.BACKENDS:
        return f"backend {backend!r} is not in this checkout"
    return dispatch.BACKENDS[backend].unavailable(torch.device("cpu"))


def inputs(batch: int, length: int, dim: int, dtype=torch.bfloat16, seed: int = 0,
           fill: bool = True):
    """(a, v, log_w, grad) of the issue's benchmark: bf16 (B, L, D), log_w (K, D) float32
    with K = ceil(log2 L) (at least 1).  ``fill=False``: uninitialised memory, for a run
    whose kernels are not executed."""
    levels = max(1, math.ceil(math.log2(max(length, 2))))
    if not fill:
        make = lambda: torch.empty(batch, length, dim, dtype=dtype, device="meta")  # noqa: E731
        return make(), make(), torch.empty(levels, dim, device="meta"), make()
    gen = torch.Generator().manual_seed(seed)
    a, v, g = (torch.randn(batch, length, dim, generator=gen).to(dtype) for _ in range(3))
    log_w = -(torch.rand(levels, dim, generator=gen) * 0.5).cumsum(0)
    return a, v, log_w, g


def count(backend: str, batch: int, length: int, dim: int, *, backward: bool = True,
          execute: bool = True, masked: bool = False, documents: bool = False,
          n_causal: int | None = None, dtype=torch.bfloat16) -> dict[str, Phase]:
    """{"forward": Phase, "backward": Phase} of one causal bf16 scan at (B, L, D).

    ``execute=False``: on meta tensors (no memory, no arithmetic), the kernels recorded
    but not run: the host code's launches, ops and syncs at any shape.  Host code that
    reads device data raises there; that is recorded as a sync ("raised: ...").  The
    other forms of the op, for the kernels' specializations: ``masked`` (a padding mask),
    ``documents`` (packed documents' ids), ``n_causal`` (the first n channels causal, the
    rest anti-causal: the bidirectional form) and ``dtype`` (a, v and grad's; float64
    also makes log_w and the states float64)."""
    from weirdnet.ops.weird_scan import dispatch

    why = interpreter_ready(backend)
    if why is not None:
        raise RuntimeError(why)
    chosen = dispatch.BACKENDS[backend]
    a, v, log_w, grad = inputs(batch, length, dim, dtype, fill=execute)
    if dtype == torch.float64:
        log_w = log_w.double()
    device = a.device
    mask = torch.ones(batch, length, dtype=torch.bool, device=device) if masked else None
    doc = torch.zeros(batch, length, dtype=torch.int64, device=device) if documents else None
    n_causal = dim if n_causal is None else n_causal
    nlev = log_w.shape[0]
    phases = {}
    for name in ("forward", "backward") if backward else ("forward",):
        recorder = _Recorder(execute)
        with recorder.patched(), _HostOps(recorder), torch.no_grad():
            try:
                if name == "forward":
                    chosen.fwd(a, v, log_w, mask, doc, n_causal, nlev)
                else:
                    chosen.bwd(a, v, log_w, mask, doc, grad, n_causal, nlev)
            except (NotImplementedError, RuntimeError) as error:
                if execute or "meta" not in str(error).lower():
                    raise
                recorder.phase.ops.append(Op(f"raised: {str(error)[:120]}", 0, True))
        phases[name] = recorder.phase
    return phases


def summarize(phase: Phase, elements: int) -> dict:
    """Launches, bytes per element and syncs of a phase over ``elements`` = B·L·D."""
    kernel = sum(x.bytes_read + x.bytes_written for x in phase.launches)
    host = sum(o.bytes for o in phase.ops)
    return {"triton_launches": len(phase.launches), "host_ops": len(phase.ops),
            "launches": len(phase.launches) + len(phase.ops),
            "kernel_bytes_per_elem": kernel / elements, "host_bytes_per_elem": host / elements,
            "bytes_per_elem": (kernel + host) / elements, "syncs": phase.syncs,
            "kernels": [x.kernel for x in phase.launches],
            "host_op_names": sorted({o.name for o in phase.ops})}
