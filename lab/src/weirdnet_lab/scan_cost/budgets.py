"""The CPU-proxy budgets of the Triton scan backends (issue 73, part 5), in one table.

A test (``lab/tests/test_scan_cost.py``) holds each backend of :data:`BUDGETS` that this
checkout has to its row: what it measured (lab/results/scan-cost/, ``weirdnet bench
scan-cost --backend NAME``), so a regression fails; a backend the checkout lacks is
skipped.  :data:`TARGETS` holds issue 73's targets for :data:`NEW_BACKEND`; the tests
that hold it to them are strict expected failures until it meets them (then they fail
as "unexpectedly passing", the measured row moves down to the target, and the test's
kind joins :data:`TARGETS_MET`, which makes it a plain test).  Bytes are
checked at ``bytes_length`` at the issue's B = 8, D = 1024, bf16 (derived exactly from an
interpreter run at B = 1, D = 16: :mod:`weirdnet_lab.scan_cost.derive`), launches and
syncs at every length of :data:`LAUNCH_LENGTHS` at that shape (host code on meta tensors).
"""

from __future__ import annotations

from dataclasses import dataclass

NEW_BACKEND = "triton-e2"
"""Issue 73's new Triton scan backend: the name the lead merges it under (edit here)."""

SHAPE = {"batch": 8, "dim": 1024}
SMALL = {"batch": 1, "dim": 16}
"""The interpreter runs at SMALL (one channel block); bytes are derived for SHAPE."""
LAUNCH_LENGTHS = (1024, 4096, 16384, 65536, 262144)


@dataclass(frozen=True)
class Budget:
    """Largest values a backend may measure (None: not budgeted, only recorded).

    bytes_length: the L of the bytes check (the issue's targets are at 16K; the test runs
    at a length with the same passes, the record at 16K).  launches: device launches
    (Triton kernels plus the host code's PyTorch ops) per forward and per backward,
    per L of LAUNCH_LENGTHS.  loop_barriers / loop_shared: bar.sync and shared-memory
    instructions inside the level loops (the innermost loops,
    :func:`weirdnet_lab.scan_cost.ptx.inspect_ptx`) of the sm_90 PTX of each kernel, issue
    73's target; any_loop_barriers / any_loop_shared: the same inside every loop (an outer
    segment loop too).  Each PTX field is one limit for every kernel, or a limit per phase
    ({"forward": n, "backward": n}: the kernels the forward launches, and those the
    backward does).
    """

    fwd_bytes: float
    fwdbwd_bytes: float
    bytes_length: int
    fwd_launches: dict[int, int]
    bwd_launches: dict[int, int] | None
    syncs: int = 0
    loop_barriers: int | dict[str, int] | None = None
    loop_shared: int | dict[str, int] | None = None
    any_loop_barriers: int | dict[str, int] | None = None
    any_loop_shared: int | dict[str, int] | None = None
    source: str = ""


def _each(n: int) -> dict[int, int]:
    return dict.fromkeys(LAUNCH_LENGTHS, n)


BUDGETS: dict[str, Budget] = {
    # measured at 1d15adb (lab/results/scan-cost/scan_cost_triton.md; at L = 2048:
    # 38.003 and 142.712 B/elem): a regression fails
    "triton": Budget(
        fwd_bytes=38.01, fwdbwd_bytes=142.72, bytes_length=2048,
        fwd_launches={1024: 2, 4096: 3, 16384: 20, 65536: 96, 262144: 96},
        bwd_launches={1024: 15, 4096: 21, 16384: 100, 65536: 496, 262144: 496},
        source="measured (the committed kernel)"),
    # measured: a regression fails.  Forward: its passes, one launch each over every
    # channel since the commit "triton-e2 forward: one launch per pass" (at its merge
    # 16 / 64 / 64 at 16K / 64K / 256K, run per channel chunk like "triton"'s).  Backward:
    # its own (triton_e2_backward: one kernel per pass and direction per channel chunk,
    # and the float64 sum of the d log_w partials).  PTX at 16K, forward: no bar.sync and
    # no shared memory in the level loops (the gathers are warp shuffles); 8 bar.sync and
    # 30 shared ld / st in the segment loop around them (the plan's column reductions, the
    # path decision).  Backward: none in any loop (each level's d log_w partial is a sum
    # over the rows within a warp, kept per residue column in registers and stored after
    # the level loop; until then 2 bar.sync and 2 shared accesses per adjoint level, the
    # partial's change of layout for its store).  Forward bytes at
    # L = 2048: 22.0027 = 22 + 4 K / (B L) of log_w (K = 11 levels, each launch reads its
    # levels' weights once), which no tiling removes (docs/kernels.md); forward + backward
    # 68.40 (with the "triton" backward it reused, 126.72)
    NEW_BACKEND: Budget(
        fwd_bytes=22.003, fwdbwd_bytes=68.41, bytes_length=2048,
        fwd_launches={1024: 1, 4096: 2, 16384: 2, 65536: 2, 262144: 2},
        bwd_launches={1024: 2, 4096: 4, 16384: 13, 65536: 49, 262144: 81},
        loop_barriers={"forward": 0, "backward": 0}, loop_shared={"forward": 0, "backward": 0},
        any_loop_barriers={"forward": 8, "backward": 0},
        any_loop_shared={"forward": 30, "backward": 0},
        source="measured (triton-e2)"),
}

TARGETS: dict[str, Budget] = {
    # issue 73's targets for the new kernel (the backward's launches are not a target).
    # The backward's loop over the adjoint's levels holds the forward recompute's level
    # loops inside it, so the checker's rule (a level loop is an innermost loop) does not
    # see it as one: a barrier per adjoint level would pass the level-loop check.  The
    # backward's target is held on every loop instead.
    NEW_BACKEND: Budget(
        fwd_bytes=22.0, fwdbwd_bytes=46.0, bytes_length=2048,
        fwd_launches=_each(2), bwd_launches=None, loop_barriers=0, loop_shared=0,
        any_loop_barriers={"backward": 0}, any_loop_shared={"backward": 0},
        source="issue 73 targets"),
}

TARGETS_MET: frozenset[str] = frozenset({"launches", "ptx-forward", "ptx-backward"})
"""The kinds of test ("launches": launches and syncs, "bytes", "ptx-forward" and
"ptx-backward": the level loops of the kernels each phase launches) whose TARGETS row
:data:`NEW_BACKEND` meets: no longer expected to fail."""
