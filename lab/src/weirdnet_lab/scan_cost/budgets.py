"""The CPU-proxy budgets of the Triton scan backends (issue 73, part 5), in one table.

A test (``lab/tests/test_scan_cost.py``) holds each backend of :data:`BUDGETS` that this
checkout has to its row: what it measured (lab/results/scan-cost/, ``weirdnet bench
scan-cost --backend NAME``), so a regression fails; a backend the checkout lacks is
skipped.  :data:`TARGETS` holds issue 73's targets for :data:`NEW_BACKEND`; the tests
that hold it to them are strict expected failures until it meets them (then they fail
as "unexpectedly passing", and the measured row moves down to the target).  Bytes are
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
    instructions inside the loops of the sm_90 PTX of every kernel.
    """

    fwd_bytes: float
    fwdbwd_bytes: float
    bytes_length: int
    fwd_launches: dict[int, int]
    bwd_launches: dict[int, int] | None
    syncs: int = 0
    loop_barriers: int | None = None
    loop_shared: int | None = None
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
    # measured at the merge of triton-e2 (forward: its two passes, run per channel chunk
    # like "triton"'s): a regression fails.  Backward: its own (triton_e2_backward),
    # measured at 897abac (lab/results/scan-cost/scan_cost_triton-e2.md; at L = 2048:
    # 68.398 B/elem forward + backward; at 16K the backward alone 46.59).  The PTX counts
    # are the largest of any loop: the checker counts every loop, and the forward's
    # author places these 8 barriers in the segment loop, outside the level loop; the
    # backward's kernels have at most 4 barriers and 4 shared accesses in loops (2 and 2
    # per adjoint level loop: the column sum of each level's d log_w partial)
    NEW_BACKEND: Budget(
        fwd_bytes=22.01, fwdbwd_bytes=68.41, bytes_length=2048,
        fwd_launches={1024: 1, 4096: 2, 16384: 16, 65536: 64, 262144: 64},
        bwd_launches={1024: 2, 4096: 4, 16384: 13, 65536: 49, 262144: 81},
        loop_barriers=8, loop_shared=30, source="measured (triton-e2 at its merge)"),
}

TARGETS: dict[str, Budget] = {
    # issue 73's targets for the new kernel (the backward's launches are not a target)
    NEW_BACKEND: Budget(
        fwd_bytes=22.0, fwdbwd_bytes=46.0, bytes_length=2048,
        fwd_launches=_each(2), bwd_launches=None, loop_barriers=0, loop_shared=0,
        source="issue 73 targets"),
}
