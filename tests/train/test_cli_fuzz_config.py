"""Fuzz ``weirdnet train --set KEY=VALUE`` over every config key with values of the wrong
type, out of range, empty and unknown names: each run must either be refused with one
line on stderr and exit status 2, or be a valid config that reaches training.  Never a
traceback.  Training itself is replaced by a marker, so a valid value costs nothing."""

import contextlib
import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.train import write_config
from weirdnet.cli import main
from weirdnet.models.config import BackboneConfig
from weirdnet.train import config as train_config
from weirdnet.train import trainer

pytestmark = pytest.mark.slow  # 120 hypothesis examples

SECTIONS = {"run": train_config.RunConfig, "data": train_config.DataConfig,
            "optim": train_config.OptimConfig, "schedule": train_config.ScheduleConfig,
            "train": train_config.TrainSection}
KEYS = sorted(
    [f"{name}.{f.name}" for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    + [f"model.backbone.{f.name}" for f in dataclasses.fields(BackboneConfig)]
    + ["data.options.seq_len", "data.options.seqlen", "data.options.epoch_length",
       "data.eval_options.seq_len", "model.preset", "model.nosuch", "nosuch.key",
       "train.nosuch", "run.nosuch"])
# Values that are wrong somewhere: types, ranges, empty, unknown names.  Sizes stay small
# so that a value that happens to be valid never builds a large model.
VALUES = ["abc", '""', "-1", "0", "-0.5", "2.5", "1e30", "nan", "inf", "true", "[]",
          "[1, 2]", "{}", "{ x = 1 }", '"nosuch"', "-100000000000", "'../x'", "3"]
SAFE_KEYS_FOR_HUGE = ("optim.", "schedule.")  # 1e30 only where it cannot allocate


class _ReachedTraining(BaseException):
    """The config was valid: the trainer got as far as fit()."""


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("fuzz"), steps=1, eval_every=0)


def _run(config_path, key, value, capsys):
    out_dir = json.dumps(str(config_path.parent / "runs"))
    with contextlib.chdir(config_path.parent):  # a drawn relative run.out_dir lands here
        status = main(["train", str(config_path), "--no-progress", "--overwrite",
                       "--set", f"run.out_dir={out_dir}", "--set", "model.backbone.dim=16",
                       "--set", "model.backbone.d_ff=16", "--set", f"{key}={value}"])
    return status, capsys.readouterr()


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(KEYS), value=st.sampled_from(VALUES))
def test_every_bad_value_is_one_line_and_status_2(config_path, key, value, capsys,
                                                 monkeypatch):
    if value in ("1e30", "-100000000000") and not key.startswith(SAFE_KEYS_FOR_HUGE):
        value = "-7"

    def reached(self):
        raise _ReachedTraining

    monkeypatch.setattr(trainer.Trainer, "fit", reached)
    try:
        status, captured = _run(config_path, key, value, capsys)
    except _ReachedTraining:
        capsys.readouterr()
        return  # a valid config: fine
    finally:
        monkeypatch.undo()
    err = captured.err
    assert "Traceback" not in err, (key, value, err)
    assert status == 2, (key, value, status, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("weirdnet train: "), (key, value, err)


def test_a_huge_number_of_data_workers_is_refused(config_path, capsys):
    status, captured = _run(config_path, "train.num_workers", "1000", capsys)
    assert status == 2 and "train.num_workers must be <= 64" in captured.err
