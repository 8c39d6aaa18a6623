"""Arguments no ``weirdnet bench scan|mixers`` run can take: one line, exit status 2, and
the output folder is not touched (no folder, no lock file)."""

from __future__ import annotations

import pytest

from weirdnet.cli import main

BAD = {
    "seed over 64 bits": (["--seed", str(2**64)],
                          f"--seed must be an int of at most 64 bits (-2^63 <= value < 2^63), "
                          f"got {2**64}"),
    "seed under -2^63": (["--seed", str(-2**63 - 1)],
                         f"--seed must be an int of at most 64 bits (-2^63 <= value < 2^63), "
                         f"got {-2**63 - 1}"),
    "width": (["--dim", "33", "--head-dim", "16"],
              "--dim 33 is not a multiple of --head-dim 16"),
}


@pytest.mark.parametrize("suite", ["scan", "mixers"])
@pytest.mark.parametrize("case", BAD)
def test_a_bad_argument_is_one_line_and_writes_nothing(tmp_path, capsys, suite, case):
    argv, line = BAD[case]
    out = tmp_path / "reports"
    assert main(["bench", suite, "--quick", *argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"weirdnet bench: {line}\n"
    assert captured.out == ""
    assert not out.exists()


def test_a_negative_seed_within_64_bits_is_taken(tmp_path):
    """What torch's generators take is taken (the seeds of `weirdnet train` alike)."""
    from weirdnet.cli import check_seed

    for seed in (-2**63, -1, 2**63 - 1):
        check_seed(seed)
