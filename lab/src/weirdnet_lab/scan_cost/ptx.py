"""The PTX of a Triton scan backend's kernels, compiled for a GPU on this CPU, and what
its level loops do.

Triton compiles for a target without a GPU (``triton.compile`` with a ``GPUTarget``; its
wheel carries ptxas).  Each distinct specialization the interpreter saw a backend launch
(kernel, constexprs, argument types and 16-byte alignment, ``num_warps``:
:class:`weirdnet_lab.scan_cost.count.Launch`) is compiled once, in a process where
TRITON_INTERPRET is unset (:func:`compile_specs` refuses otherwise), and its PTX read:

- loops: a label with a later branch back to it (``$L__BB0_3: ... bra $L__BB0_3``);
  nested loops are told apart and each loop's own body (its inner loops' lines excluded)
  is counted.  *Level loops* are the innermost loops (no loop inside): the scan kernels'
  ``range`` loops over levels.  An outer loop (``triton-e2``'s segment loop, which runs
  between two form points and holds the level loops) is counted apart, so issue 73's
  "no bar.sync and no shared memory inside a level loop" is measured on the level loops
  alone (``in_level_loops``) and every loop together (``in_loops``) beside it;
- per loop body: ``bar.sync``/``barrier``, shared-memory loads and stores, shuffles,
  FP32 arithmetic (``add/sub/mul/fma/min/max/neg/abs/div/rcp/sqrt/ex2/lg2 .f32``),
  ``ex2``, selects; per kernel: global load and store widths (``ld.global.v4.b32``: 128
  bits).

"FP32 instructions per level per element" is a loop body's FP32 count over the elements
each thread holds: the largest block one load of the program touched (from the
interpreter run) over the 32·num_warps threads.  A window with a halo computes each
output element's level on 2 window elements; that factor is the kernel's, reported apart.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

F32_OPS = re.compile(r"^\s*(?:@%p\d+\s+)?(add|sub|mul|fma|min|max|neg|abs|div|rcp|sqrt|ex2|lg2)"
                     r"(?:\.\w+)*\.f32\b", re.M)
COUNTS = {
    "bar_sync": r"\b(?:bar\.sync|barrier\.sync|bar\.arrive|barrier\.cta)",
    "ld_shared": r"\bld\.shared", "st_shared": r"\bst\.shared",
    "shfl": r"\bshfl\.sync", "ex2": r"\bex2\.approx", "selp": r"\bselp\.",
    "fma_f32": r"\bfma\.rn\.f32", "ld_global": r"\bld\.global", "st_global": r"\bst\.global",
    "mma": r"\b(?:mma\.sync|wgmma\.mma_async)",
}
LABEL = re.compile(r"^(\$L__\w+):", re.M)
BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+);")
WIDTH = re.compile(r"\b(ld|st)\.global(?:\.\w+)*?(?:\.v(\d))?\.(b|u|s|f)(8|16|32|64)\b")


@dataclass(frozen=True)
class Loop:
    start: int  # line of the label
    end: int  # line of the branch back
    depth: int


def loops(ptx: str) -> list[Loop]:
    """Every loop of ``ptx`` (label ... backward branch), outermost first by start."""
    lines = ptx.splitlines()
    labels = {}
    found = []
    for i, line in enumerate(lines):
        m = LABEL.match(line)
        if m:
            labels[m.group(1)] = i
        b = BRANCH.search(line)
        if b and b.group(1) in labels and labels[b.group(1)] < i:
            found.append((labels[b.group(1)], i))
    # merge back edges to one label (a loop with several continues)
    spans = {}
    for start, end in found:
        spans[start] = max(end, spans.get(start, end))
    out = []
    for start, end in sorted(spans.items()):
        depth = sum(1 for s, e in spans.items() if s < start and e >= end)
        out.append(Loop(start, end, depth))
    return out


def _count(text: str) -> dict:
    c = {k: len(re.findall(p, text)) for k, p in COUNTS.items()}
    c["f32"] = len(F32_OPS.findall(text))
    c["lines"] = text.count("\n") + 1
    return c


def loop_bodies(ptx: str) -> list[dict]:
    """Per loop: its lines, depth and the counts of its own body (inner loops excluded)."""
    lines = ptx.splitlines()
    all_loops = loops(ptx)
    out = []
    for lp in all_loops:
        inner = [x for x in all_loops if x.start > lp.start and x.end <= lp.end]
        own = [line for i, line in enumerate(lines[lp.start:lp.end + 1], lp.start)
               if not any(x.start <= i <= x.end for x in inner)]
        out.append({"start": lp.start, "end": lp.end, "depth": lp.depth,
                    "inner_loops": len(inner), **_count("\n".join(own))})
    return out


def widths(ptx: str) -> dict[str, int]:
    """Global loads and stores by width in bits ("ld 16": 12 means twelve 16-bit loads)."""
    out: dict[str, int] = {}
    for op, vec, _, bits in WIDTH.findall(ptx):
        key = f"{op} {int(vec or 1) * int(bits)}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def inspect_ptx(ptx: str, threads: int, block_elements: int) -> dict:
    """The kernel's totals, its loops (each marked ``level`` when innermost), load widths,
    FP32 ops per level per element, and the barrier / shared-memory / shuffle counts in
    all loops (``in_loops``) and in the level loops alone (``in_level_loops``)."""
    per_thread = max(1, block_elements // threads) if block_elements else None
    bodies = loop_bodies(ptx)
    for body in bodies:
        body["f32_per_element"] = body["f32"] / per_thread if per_thread else None
    keys = ("bar_sync", "ld_shared", "st_shared", "shfl")
    for body in bodies:
        body["level"] = body["inner_loops"] == 0
    in_loops = {k: sum(b[k] for b in bodies) for k in keys}
    in_level_loops = {k: sum(b[k] for b in bodies if b["level"]) for k in keys}
    return {"totals": _count(ptx), "loops": bodies, "widths": widths(ptx),
            "elements_per_thread": per_thread, "in_loops": in_loops,
            "in_level_loops": in_level_loops}


def specs(launches) -> list[dict]:
    """The distinct specializations among ``launches`` (dicts of Launch.as_dict())."""
    seen = {}
    for x in launches:
        key = (x["module"], x["kernel"], repr(sorted(x["constexprs"].items())),
               repr(sorted(x["signature"].items())), tuple(x["aligned"]), x["num_warps"])
        if key not in seen:
            seen[key] = {k: x[k] for k in ("module", "kernel", "constexprs", "signature",
                                           "aligned", "num_warps", "block_elements")}
    return list(seen.values())


def _value(v):
    import triton.language as tl

    if isinstance(v, dict) and "tl_dtype" in v:
        return tl.str_to_ty(v["tl_dtype"], None)
    return v


def compile_spec(spec: dict, arch: int = 90) -> tuple[str, float]:
    """(PTX, seconds) of one specialization compiled for sm_ARCH."""
    import importlib

    import triton
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(spec["module"]), spec["kernel"])
    names = [p.name for p in fn.params]
    signature = {n: ("constexpr" if n in spec["constexprs"] else spec["signature"][n])
                 for n in names}
    constexprs = {(names.index(k),): _value(v) for k, v in spec["constexprs"].items()}
    attrs = {(names.index(n),): BaseBackend.parse_attr("D") for n in spec["aligned"]}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    start = time.perf_counter()
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": spec["num_warps"]})
    return compiled.asm["ptx"], time.perf_counter() - start


def compile_specs(spec_list: list[dict], arch: int = 90) -> list[dict]:
    """Each specialization compiled and inspected (a failure is its row's error)."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("unset TRITON_INTERPRET: the interpreter compiles nothing")
    rows = []
    for spec in spec_list:
        row = {"kernel": spec["kernel"], "constexprs": spec["constexprs"],
               "num_warps": spec["num_warps"], "arch": arch}
        try:
            ptx, seconds = compile_spec(spec, arch)
            row.update(seconds=round(seconds, 1), **inspect_ptx(
                ptx, 32 * spec["num_warps"], spec.get("block_elements", 0)))
        except Exception as error:  # noqa: BLE001 - one kernel's failure is its row
            row["error"] = f"{type(error).__name__}: {error}"[:300]
        rows.append(row)
    return rows
