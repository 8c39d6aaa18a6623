"""The ``scan-timing`` job of ``weirdnet bench gpu`` (issue 73, part 7): the new Triton
scan kernel against the old one and SDPA causal, timed with ``triton.testing.do_bench``
(median, the L2 cache flushed before every repetition), B = 8, D = 1024, bf16.

In this order, each measurement appended to a JSON-lines file (flushed) before the next
starts, so a run cut short keeps what it measured:

1. ``env``: device, capability, torch and triton versions, the SDPA backend PyTorch picks
   for causal (B, 16, L, 64) bf16, the backends' names and whether this checkout has them;
2. ``selfcheck``: each scan backend against the PyTorch backend (forward and gradients,
   a small input): a timing of a wrong kernel says nothing;
3. ``copy``: device-to-device copy bandwidth over B·L·D bf16 (read + write);
4. ``race``: new, old, SDPA causal at each length, forward and forward + backward (and
   the host syncs CUDA reports in one forward + backward);
5. ``passes``: each forward pass alone, and with its level loop emptied, through the
   backend module's ``bench_passes(a, v, log_w, nlev)`` hook; a backend without it is a
   record saying so;
6. ``path-a``: the share of tile segments that take the exact path A, through the
   backend module's ``path_counts(a, v, log_w) -> (O, {pass: (path-B segments,
   segments)})`` hook (default initialisation, 16K), or a record saying it is missing.

A time budget (``budget_s``) skips what is left cleanly: each skipped measurement is a
record saying so.  A backend this checkout lacks is a record, never an error.  Without
CUDA (``weirdnet bench gpu --dry-run-cpu``) the same control flow runs at tiny sizes on
the CPU with a wall clock (the Triton kernels under the interpreter): no GPU number.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable

import torch

OLD = "triton"


class Records:
    """Appends one JSON object per line to ``path``; knows the time left."""

    def __init__(self, path: str, budget_s: float):
        self.path, self.deadline = path, time.monotonic() + budget_s
        self.rows: list[dict] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write(self, **row) -> dict:
        row["t_left_s"] = round(self.left(), 1)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.rows.append(row)
        return row

    def skip_if_late(self, need_s: float, **row) -> bool:
        """True (and a "skipped" record) when less than ``need_s`` seconds are left."""
        if self.left() >= need_s:
            return False
        self.write(**row, status="skipped",
                   note=f"time budget: {max(self.left(), 0):.0f} s left, {need_s:g} s needed")
        return True

    @contextlib.contextmanager
    def errors_recorded(self, **row):
        """Run the block; an exception in it becomes the row's "error" record (a record,
        not a crash: the next measurement still runs)."""
        try:
            yield
        except Exception as error:  # noqa: BLE001 - a record, not a crash
            self.write(**row, status="error", note=f"{type(error).__name__}: {error}"[:300])


def read_rows(path) -> list[dict]:
    """The records a run wrote to ``path`` (none if it wrote nothing; a line cut short by
    a stop is left out)."""
    rows = []
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return rows
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    """Median ms of ``fn``: do_bench (L2 flushed) on CUDA, else a wall clock (dry run)."""
    if device.type == "cuda":
        import triton.testing

        return lambda fn: float(triton.testing.do_bench(fn, warmup=10, rep=50,
                                                       return_mode="median"))

    def wall(fn) -> float:
        fn()
        times = []
        for _ in range(2):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return sorted(times)[0]

    return wall


def missing(name: str, device: torch.device) -> str | None:
    """Why scan backend ``name`` cannot be timed here (None: it can)."""
    from weirdnet.ops.weird_scan import dispatch

    if name not in dispatch.BACKENDS:
        return f"backend {name!r} is not in this checkout"
    return dispatch.BACKENDS[name].unavailable(device)


def scan_inputs(batch: int, length: int, dim: int, dtype, device, grad: bool = True):
    gen = torch.Generator(device=device).manual_seed(length)
    a, v = (torch.randn(batch, length, dim, generator=gen, device=device, dtype=dtype)
            .requires_grad_(grad) for _ in range(2))
    levels = max(1, math.ceil(math.log2(max(length, 2))))
    log_w = (-torch.rand(levels, dim, generator=gen, device=device)).requires_grad_(grad)
    return a, v, log_w


def _forward(name: str, batch: int, length: int, dim: int, dtype, device):
    """(inputs, forward) of one method: a scan backend or "sdpa-causal"."""
    if name == "sdpa-causal":
        gen = torch.Generator(device=device).manual_seed(length)
        qkv = [torch.randn(batch, 16, length, dim // 16, generator=gen, device=device,
                           dtype=dtype, requires_grad=True) for _ in range(3)]
        return qkv, lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True)
    from weirdnet.ops import weird_scan

    return (list(scan_inputs(batch, length, dim, dtype, device)),
            lambda a, v, log_w: weird_scan(a, v, log_w, backend=name))


def _env(rec: Records, spec: dict, device, names: list[str]) -> None:
    from weirdnet_lab.gpu.sdpa import chosen_backend

    row = {"torch": torch.__version__, "device": str(device)}
    try:
        import triton

        row["triton"] = triton.__version__
    except ImportError:
        row["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        row.update(device_name=props.name, capability=f"{props.major}.{props.minor}",
                   multiprocessors=props.multi_processor_count,
                   l2_mib=round(getattr(props, "L2_cache_size", 0) / 2**20, 1))
    q = torch.zeros(spec["batch"], 16, min(spec["lengths"]), spec["dim"] // 16,
                    device=device, dtype=getattr(torch, spec["dtype"]))
    row["sdpa_causal_backend"] = chosen_backend(q, q, q, is_causal=True)
    row["backends"] = {n: missing(n, device) or "available" for n in names}
    rec.write(step="env", status="ok", **row)


def _selfcheck(rec: Records, device, names: list[str]) -> None:
    from weirdnet.ops.weird_scan import dispatch

    for name in names:
        if rec.skip_if_late(20, step="selfcheck", backend=name):
            continue
        why = missing(name, device)
        if why:
            rec.write(step="selfcheck", backend=name, status="skipped", note=why)
            continue
        error = dispatch.selfcheck_error(dispatch.BACKENDS[name], device)
        rec.write(step="selfcheck", backend=name, status="ok" if error is None else "failed",
                  note=error or "agrees with the PyTorch backend")


def _copy(rec: Records, spec: dict, device, bench) -> None:
    length = spec["copy_length"]
    if rec.skip_if_late(10, step="copy", L=length):
        return
    n = spec["batch"] * length * spec["dim"]
    src = torch.randn(n, device=device).to(getattr(torch, spec["dtype"]))
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    moved = 2 * n * src.element_size()
    rec.write(step="copy", status="ok", L=length, bytes=moved, ms=ms,
              gb_per_s=moved / ms / 1e6)


def _race(rec: Records, spec: dict, device, bench, methods: list[str]) -> None:
    for length in spec["lengths"]:
        for name in methods:
            base = {"step": "race", "method": name, "L": length}
            if rec.skip_if_late(spec.get("need_s", {}).get(str(length), 15), **base):
                continue
            why = None if name == "sdpa-causal" else missing(name, device)
            if why:
                rec.write(**base, status="skipped", note=why)
                continue
            with rec.errors_recorded(**base):
                rec.write(**base, status="ok", **_time(name, length, spec, device, bench))
            if device.type == "cuda":
                torch.cuda.empty_cache()


def _time(name: str, length: int, spec: dict, device, bench) -> dict:
    """{"fwd_ms", "fwdbwd_ms"} of one method at one length."""
    inputs, forward = _forward(name, spec["batch"], length, spec["dim"],
                               getattr(torch, spec["dtype"]), device)
    with torch.no_grad():
        fwd = bench(lambda: forward(*inputs))
    grad = torch.randn_like(forward(*inputs).detach())

    def both():
        for x in inputs:
            x.grad = None
        forward(*inputs).backward(grad)

    return {"fwd_ms": fwd, "fwdbwd_ms": bench(both), "host_syncs": host_syncs(both, device)}


def host_syncs(fn: Callable[[], object], device) -> int | None:
    """Syncs CUDA reports in one call of ``fn`` (``torch.cuda.set_sync_debug_mode``);
    None off CUDA."""
    if device.type != "cuda":
        return None
    import warnings

    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in caught)


def _hook(name: str, hook: str, device):
    """The backend module's measuring hook ``hook``, or (None, why not)."""
    from weirdnet.ops.weird_scan import dispatch

    why = missing(name, device)
    if why:
        return None, why
    module = dispatch.BACKENDS[name].load()
    fn = getattr(module, hook, None)
    if fn is None:
        return None, f"backend {name!r} has no {hook}() hook ({module.__name__})"
    return fn, None


def _hook_in_time(rec: Records, need_s: float, base: dict, name: str, hook: str, device):
    """(the backend's measuring hook, "ok"), or (None, why not) with its record written:
    "late" (fewer than ``need_s`` seconds left) or "missing" (no backend or no hook)."""
    if rec.skip_if_late(need_s, **base):
        return None, "late"
    fn, why = _hook(name, hook, device)
    if fn is None:
        rec.write(**base, status="missing", note=why)
        return None, "missing"
    return fn, "ok"


def _inputs(spec: dict, length: int, device):
    """(a, v, log_w) at ``length`` in the spec's batch, width and dtype, without grad."""
    return scan_inputs(spec["batch"], length, spec["dim"], getattr(torch, spec["dtype"]),
                       device, grad=False)


def _passes(rec: Records, spec: dict, device, bench, names: list[str]) -> None:
    for name in names:
        for length in spec["pass_lengths"]:
            base = {"step": "passes", "backend": name, "L": length}
            hook, state = _hook_in_time(rec, 20, base, name, "bench_passes", device)
            if state == "missing":
                break
            if hook is None:
                continue
            with rec.errors_recorded(**base), torch.no_grad():
                a, v, log_w = _inputs(spec, length, device)
                for label, run, run_empty in hook(a, v, log_w, log_w.shape[0]):
                    rec.write(**base, status="ok", pass_=label, ms=bench(run),
                              ms_no_levels=bench(run_empty) if run_empty else None)
            if device.type == "cuda":
                torch.cuda.empty_cache()


def _path_a(rec: Records, spec: dict, device, name: str) -> None:
    length = spec["pass_lengths"][-1]
    base = {"step": "path-a", "backend": name, "L": length}
    hook, _ = _hook_in_time(rec, 15, base, name, "path_counts", device)
    if hook is None:
        return
    with rec.errors_recorded(**base), torch.no_grad():
        _, counts = hook(*_inputs(spec, length, device))
        took_b = sum(b for b, _ in counts.values())
        total = sum(n for _, n in counts.values())
        rec.write(**base, status="ok", rate=1 - took_b / total if total else None,
                  per_pass={str(lo): {"path_b": b, "segments": n}
                            for lo, (b, n) in counts.items()})


def job_scan_timing(spec: dict) -> dict:
    """Every measurement of the module doc, in order, within ``spec["budget_s"]``."""
    device = torch.device(spec["device"])
    os.environ.setdefault("WEIRDNET_SCAN_SELFCHECK", "0")  # checked as its own step
    rec = Records(spec["records"], spec["budget_s"])
    new = spec["new_backend"]
    names = [new, OLD]
    bench = timer(device)
    rec.write(step="plan", status="ok", new_backend=new, old_backend=OLD,
              timer="triton.testing.do_bench, median, L2 flushed" if device.type == "cuda"
              else "wall clock (CPU dry run: no GPU number)",
              **{k: spec[k] for k in ("batch", "dim", "dtype", "lengths", "pass_lengths")})
    _env(rec, spec, device, names)
    _selfcheck(rec, device, names)
    _copy(rec, spec, device, bench)
    _race(rec, spec, device, bench, [new, OLD, "sdpa-causal"])
    _passes(rec, spec, device, bench, names)
    _path_a(rec, spec, device, new)
    rec.write(step="done", status="ok")
    return {"rows": rec.rows}
