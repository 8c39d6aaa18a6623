"""Arguments no ``weirdnet bench`` run can take: a usage error or one line, exit status 2,
and the output folder is not touched (no folder, no lock file)."""

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


def test_a_negative_seed_within_64_bits_is_taken():
    """What torch's generators take is taken (the seeds of `weirdnet train` alike)."""
    from weirdnet.cli import check_seed

    for seed in (-2**63, -1, 2**63 - 1):
        check_seed(seed)


# Every count option of the bench commands has a floor, checked by argparse (before any
# folder): a value below it was read as "not given", ran a report of failed rows, or
# ended in a traceback.
BELOW_THE_FLOOR = [
    ("scan", "--lengths", "0", 1), ("scan", "--batch", "0", 1), ("scan", "--dim", "0", 1),
    ("scan", "--head-dim", "0", 1), ("scan", "--repeats", "-1", 1),
    ("scan", "--warmup", "-1", 0), ("scan", "--threads", "0", 1),
    ("scan", "--mem-jobs", "0", 1), ("mixers", "--batch", "0", 1),
    ("decode", "--contexts", "0", 1), ("decode", "--new-tokens", "0", 1),
    ("decode", "--batch", "0", 1), ("decode", "--threads", "0", 1),
    ("speed", "--lengths", "0", 1), ("speed", "--dim", "0", 1),
    ("recall", "--lengths", "0", 1), ("recall", "--seeds", "0", 1),
    ("recall", "--short-convs", "-1", 0), ("lm", "--contexts", "0", 1),
    ("lm", "--steps", "0", 1), ("lm", "--seeds", "0", 1),
    ("context-parallel", "--processes", "0", 1), ("context-parallel", "--steps", "-1", 0),
    ("compile", "--steps", "0", 1), ("compile", "--warmup", "-1", 0),
    ("context", "--train-context", "1", 2), ("context", "--eval-contexts", "1", 2),
    ("scan-cost", "--length", "0", 1), ("lm", "--jobs", "0", 1),
]


@pytest.mark.parametrize("command, option, value, floor", BELOW_THE_FLOOR,
                         ids=lambda x: str(x))
def test_a_count_below_its_floor_is_a_usage_error(tmp_path, capsys, command, option,
                                                   value, floor):
    out = tmp_path / "reports"
    with pytest.raises(SystemExit) as exc:
        main(["bench", command, option, value, "--out", str(out)])
    assert exc.value.code == 2
    assert (f"argument {option}: must be at least {floor}, got {value}"
            in capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("command, option, value", [
    ("lm", "--minutes", "0"), ("lm", "--minutes", "nan"), ("recall", "--lrs", "-0.1"),
    ("compile", "--timeout", "-1"), ("scan-cost", "--timeout", "0"),
    ("context-parallel", "--timeout", "inf"),
])
def test_a_number_not_above_its_floor_is_a_usage_error(capsys, command, option, value):
    with pytest.raises(SystemExit) as exc:
        main(["bench", command, option, value])
    assert exc.value.code == 2
    assert f"argument {option}: must be a number above 0, got {value}" in \
        capsys.readouterr().err


def test_a_context_that_does_not_exceed_the_new_tokens_is_one_line(tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(["bench", "decode", "--models", "weirdnet-a-small-cpu", "--contexts", "32",
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "weirdnet bench: weirdnet-a-small-cpu: context 32 must exceed the 32 new tokens "
        "and stay within its max_len=16384\n")
    assert not out.exists()
