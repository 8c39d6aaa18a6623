"""The trainer: tasks, resume after a kill, damaged checkpoints, errors, eval/generate."""

import json
import math
import signal
import subprocess
import time

import pytest
import torch

from helpers.train import relative_difference, run_cli, subprocess_env, weirdnet_cmd, write_config
from weirdnet.cli import main
from weirdnet.models.base import CheckpointError, load
from weirdnet.run import checkpoint as ckpt
from weirdnet.run.safetensors_io import load_file
from weirdnet.train.config import load_config
from weirdnet.train.trainer import RunError, train

pytestmark = pytest.mark.slow  # training runs, some in subprocesses


def _weights(run_dir, step):
    tensors, _ = load_file(run_dir / "checkpoints" / f"step-{step:08d}" / "model.safetensors")
    return tensors


def _train(tmp_path, *overrides, **kwargs):
    config = load_config(write_config(tmp_path, **kwargs),
                         [f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}", *overrides])
    return train(config, progress_bar=False)


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """One tiny language-model run shared by the eval/generate/plot tests."""
    tmp = tmp_path_factory.mktemp("lm")
    summary = _train(tmp, "run.name=lm")
    return tmp / "runs" / "lm", summary


def test_lm_run_writes_its_files_and_results(lm_run, capsys):
    run_dir, summary = lm_run
    for name in ("log.jsonl", "results.json", "train_config.json", "data_info.json",
                 "best/model.safetensors", "best/metrics.json", "best/manifest.json"):
        assert (run_dir / name).is_file(), name
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == [
        "step-00000006", "step-00000009", "step-00000012"]  # keep_last = 3
    events = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events][:1] == ["start"] and events[-1]["event"] == "end"
    train_events = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train_events] == [5, 10, 12]
    assert all(e["input_tokens_per_s"] > 0 and math.isfinite(e["loss"]) for e in train_events)
    assert [e["step"] for e in events if e["event"] == "eval"] == [6, 12]
    metrics = summary["results"]["val"]
    assert metrics["bpc"] == pytest.approx(metrics["loss"] / math.log(2))
    assert summary["best_step"] in (6, 12)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["results"] == summary["results"]


def test_eval_cli_matches_the_run(lm_run, capsys):
    run_dir, summary = lm_run
    assert main(["eval", str(run_dir), "--split", "val", "--batch-size", "8",
                 "--limit", "32"]) == 0  # final_eval_batches 4 x batch 8
    out = capsys.readouterr().out
    assert f"{summary['results']['val']['loss']:.4f}" in out and "bpc" in out


def test_generate_cli_is_greedy_and_reproducible(lm_run, capsys):
    run_dir, _ = lm_run
    args = ["generate", str(run_dir), "--prompt", "def ", "--max-new-tokens", "12",
            "--temperature", "0"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert first.startswith("def ") and main(args) == 0
    assert capsys.readouterr().out == first
    model = load(run_dir / "best")
    ids = model.generate(torch.tensor([list(b"def ")]), 12, temperature=0)
    assert first.rstrip("\n") == bytes(ids[0].tolist()).decode("utf-8", errors="replace")


def test_doubling_eval_spacing_evaluates_on_its_grid_and_at_the_last_step(tmp_path):
    _train(tmp_path, "run.name=d", "train.eval_spacing=\"doubling\"", steps=23, eval_every=1,
           checkpoint_every=0)
    events = [json.loads(line) for line in
              (tmp_path / "runs" / "d" / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "eval"] == [
        1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 23]


def test_plot_cli(lm_run, capsys):
    run_dir, _ = lm_run
    pytest.importorskip("matplotlib")
    assert main(["plot", str(run_dir)]) == 0
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_after_kill_equals_uninterrupted_run(tmp_path):
    """SIGKILL a run part-way (dropout on, so random states matter), resume it, and get
    bit-identical final weights and results."""
    config = write_config(tmp_path, steps=60, eval_every=20, checkpoint_every=5)
    full = run_cli("train", str(config), "--set", "run.name=full", "--no-progress",
                   cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    run_dir = tmp_path / "runs" / "cut"
    process = subprocess.Popen(weirdnet_cmd("train", str(config), "--set", "run.name=cut",
                                            "--no-progress"),
                               cwd=tmp_path, env=subprocess_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoints" / "step-00000015").is_dir():
        assert process.poll() is None and time.monotonic() < deadline, "run ended too early"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (run_dir / "results.json").exists(), "the run was not cut short"
    killed_at = ckpt.list_checkpoints(run_dir)[-1].name
    resumed = run_cli("train", str(run_dir), "--no-progress", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    start = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()
             if '"start"' in line]
    assert start[-1]["resumed_from"].endswith(killed_at)
    expected, got = _weights(tmp_path / "runs" / "full", 60), _weights(run_dir, 60)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    full_results = json.loads((tmp_path / "runs" / "full" / "results.json").read_text())
    cut_results = json.loads((run_dir / "results.json").read_text())
    assert full_results["results"] == cut_results["results"]


def test_damaged_latest_checkpoint_falls_back_to_the_previous(lm_run, tmp_path):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(lm_run[0], run_dir)
    latest = run_dir / "checkpoints" / "step-00000012" / "model.safetensors"
    data = bytearray(latest.read_bytes())
    data[-10] ^= 0xFF
    latest.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="step-00000012 is damaged.*corrupted"):
        directory, _, state = ckpt.load_latest(run_dir)
    assert directory.name == "step-00000009" and state["progress"]["step"] == 9
    for path in ckpt.list_checkpoints(run_dir):
        (path / "trainer.pt").write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match="every checkpoint .* is damaged"), \
            pytest.warns(UserWarning):
        ckpt.load_latest(run_dir)


def test_resume_with_a_damaged_checkpoint_continues_from_the_previous(tmp_path):
    _train(tmp_path, "run.name=r", steps=6, eval_every=0, checkpoint_every=3)
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "checkpoints" / "step-00000006" / "trainer.pt").write_bytes(b"x")
    config = load_config(run_dir / "train_config.json", ["train.steps=9"])
    with pytest.warns(UserWarning, match="step-00000006 is damaged"):
        summary = train(config, resume=True, progress_bar=False)
    assert summary["steps"] == 9
    log = (run_dir / "log.jsonl").read_text()
    assert "step-00000003" in log.splitlines()[-1] or "step-00000003" in log


def test_resume_into_a_different_model_is_a_clear_error(lm_run, tmp_path):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(lm_run[0], run_dir)
    config = load_config(run_dir / "train_config.json",
                         ["model.backbone.dim=48", f"run.out_dir={json.dumps(str(tmp_path))}",
                          "run.name=copy"])
    with pytest.raises(CheckpointError, match="does not fit the model of this config"):
        train(config, resume=True, progress_bar=False)


def test_existing_run_needs_resume_or_overwrite(lm_run):
    run_dir, _ = lm_run
    config = load_config(run_dir / "train_config.json")
    with pytest.raises(RunError, match="already exists; continue it with --resume"):
        train(config, progress_bar=False)


def test_cli_errors_are_one_line_with_exit_status_2(tmp_path, capsys):
    config = write_config(tmp_path)
    assert main(["train", str(config), "--set", "train.stepz=3"]) == 2
    assert "did you mean 'train.steps'" in capsys.readouterr().err
    assert main(["train", str(config), "--set", "train.steps=many"]) == 2
    assert "train.steps must be int, got 'many'" in capsys.readouterr().err
    assert main(["train", str(config), "--set", "model.backbone.dimm=3"]) == 2
    assert "unknown key model.backbone.dimm; did you mean 'dim'" in capsys.readouterr().err
    assert main(["train", str(config), "--set", "data.dataset=enwik9"]) == 2
    assert "did you mean 'enwik8'" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_empty_dataset_is_a_clear_error(tmp_path):
    config = load_config(write_config(tmp_path), ["data.dataset=test-parity",
                                                  "data.options={ size = 0 }",
                                                  "data.eval_options={ size = 8 }"])
    with pytest.raises(RunError, match="split 'train' is empty"):
        train(config, progress_bar=False)


@pytest.mark.parametrize("dataset, metric", [("test-parity", "accuracy"),
                                             ("test-parity-pairs", "accuracy")])
def test_classification_and_retrieval_train(tmp_path, dataset, metric):
    summary = _train(tmp_path, f"data.dataset={dataset}", "data.options={}",
                     "data.test_split=test", "model.backbone.pattern=A",
                     "model.backbone.causal=false", steps=20, eval_every=10,
                     checkpoint_every=0, dropout=0.0)
    val = summary["results"]["val"]
    assert set(val) == {"loss", "accuracy"} and 0 <= val[metric] <= 1
    assert summary["task"] == ("retrieval" if dataset.endswith("pairs") else "classification")


def test_seq2seq_trains_and_decodes(tmp_path, capsys):
    summary = _train(tmp_path, "run.name=s2s", "data.dataset=seq2seq-digits",
                     "data.options={ max_digits = 4, num_samples = 64 }",
                     "model={ encoder = { dim = 32, depth = 1 }, "
                     "decoder = { dim = 32, depth = 2 } }",
                     steps=6, eval_every=3, checkpoint_every=0, dropout=0.0)
    assert set(summary["results"]["val"]) == {"loss", "token_accuracy", "exact_match"}
    run_dir = tmp_path / "runs" / "s2s"
    capsys.readouterr()
    assert main(["generate", str(run_dir), "--prompt", "1234", "--temperature", "0",
                 "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out.startswith("1234 -> ")


def test_gradient_accumulation_matches_the_full_batch(tmp_path):
    """batch 8 in one micro-batch == 2 micro-batches of 4 (same items, float tolerance)."""
    one = _train(tmp_path, "run.name=one", steps=4, eval_every=0, checkpoint_every=0,
                 dropout=0.0)
    two = _train(tmp_path, "run.name=two", "train.grad_accum=2", steps=4, eval_every=0,
                 checkpoint_every=0, dropout=0.0)
    a, b = _weights(tmp_path / "runs" / "one", 4), _weights(tmp_path / "runs" / "two", 4)
    assert relative_difference(b, a) < 1e-5
    assert one["results"]["val"]["loss"] == pytest.approx(two["results"]["val"]["loss"],
                                                          rel=1e-5)


@pytest.mark.parametrize("pattern, causal", [("A", "false"), ("B", "true")])
def test_padding_to_a_multiple_trains_the_same_weights(tmp_path, pattern, causal):
    """data.pad_multiple = 8 pads the batches of 3..12-token items to 8 or 12 (the
    dataset's max_len caps it): the masks keep the padding out, so training and the final
    evaluation match padding to the longest item, to float rounding."""
    common = ("data.dataset=test-parity", "data.options={}", "data.test_split=test",
              f"model.backbone.pattern={pattern}", f"model.backbone.causal={causal}")
    kwargs = dict(steps=4, eval_every=0, checkpoint_every=0, dropout=0.0)
    one = _train(tmp_path, "run.name=one", *common, **kwargs)
    eight = _train(tmp_path, "run.name=eight", *common, "data.pad_multiple=8", **kwargs)
    a = _weights(tmp_path / "runs" / "one", 4)
    b = _weights(tmp_path / "runs" / "eight", 4)
    # softmax ignores a key bias (q.b is the same for every key): its gradient is zero up
    # to rounding, which Adam scales up to a full step either way
    a = {k: v for k, v in a.items() if not k.endswith("proj_k.bias")}
    assert relative_difference(b, a) < 1e-5
    for split in ("val", "test"):
        assert eight["results"][split]["loss"] == pytest.approx(
            one["results"][split]["loss"], rel=1e-5)
        assert eight["results"][split]["accuracy"] == one["results"][split]["accuracy"]


def test_compiled_training_matches_eager(tmp_path):
    """train.compile = true runs the same steps through torch.compile: the same weights
    (float tolerance) and results as the eager run."""
    eager = _train(tmp_path, "run.name=eager", steps=4, eval_every=0, checkpoint_every=0,
                   dropout=0.0)
    compiled = _train(tmp_path, "run.name=compiled", "train.compile=true", steps=4,
                      eval_every=0, checkpoint_every=0, dropout=0.0)
    a = _weights(tmp_path / "runs" / "eager", 4)
    b = _weights(tmp_path / "runs" / "compiled", 4)
    assert relative_difference(b, a) < 1e-4
    assert compiled["results"]["val"]["loss"] == pytest.approx(
        eager["results"]["val"]["loss"], rel=1e-4)


def test_early_stopping_after_patience_evaluations_without_improvement(tmp_path):
    """With lr 1e-12 the float32 weights never change, so the evaluation loss never
    improves after the first evaluation: patience 2 stops at the third."""
    summary = _train(tmp_path, "optim.lr=1e-12", "train.early_stop_patience=2",
                     steps=20, eval_every=2, checkpoint_every=0, dropout=0.0)
    assert summary["stopped_early"] is True
    assert summary["steps"] == 6 and summary["best_step"] == 2


def test_early_stop_at_a_target_value_of_the_best_metric(tmp_path):
    """``train.early_stop_at``: the first evaluation whose best metric (here the loss,
    lower is better) reaches the target ends the run, as Zoology stops at 99%."""
    reached = _train(tmp_path, "run.name=reached", "train.early_stop_at=100.0", steps=12,
                     eval_every=2, checkpoint_every=0, dropout=0.0)
    assert reached["stopped_early"] is True and reached["steps"] == 2
    missed = _train(tmp_path, "run.name=missed", "train.early_stop_at=0.0001", steps=4,
                    eval_every=2, checkpoint_every=0, dropout=0.0)
    assert missed["stopped_early"] is False and missed["steps"] == 4


def test_bf16_autocast_trains_and_fp16_needs_cuda(tmp_path):
    fp32 = _train(tmp_path, "run.name=fp32", steps=4, eval_every=0, checkpoint_every=0,
                  dropout=0.0)
    bf16 = _train(tmp_path, "run.name=bf16", "train.precision=bf16", steps=4, eval_every=0,
                  checkpoint_every=0, dropout=0.0)
    assert bf16["results"]["val"]["loss"] == pytest.approx(fp32["results"]["val"]["loss"],
                                                           rel=2e-2)
    if not torch.cuda.is_available():
        from weirdnet.config.typed import ConfigError

        with pytest.raises(ConfigError, match="fp16.*needs a CUDA device"):
            _train(tmp_path, "run.name=fp16", "train.precision=fp16", steps=2)


def test_init_from_starts_from_a_trained_model(lm_run, tmp_path):
    """train.init_from copies the weights (step 0 equals the source's best model), starts
    the optimizer and step count fresh, names the source in the log and results, and a
    resumed run continues from its own checkpoint (the source may be gone by then)."""
    import shutil

    from weirdnet.data.registry import get
    from weirdnet.train.setup import build_model
    from weirdnet.train.weights import load_initial_weights

    source = tmp_path / "source"
    shutil.copytree(lm_run[0], source)
    best, _ = load_file(source / "best" / "model.safetensors")
    config = load_config(source / "train_config.json")
    fresh = build_model(config, get("python-stdlib", "train", seq_len=32, epoch_length=8).info)
    assert load_initial_weights(fresh, source) == source / "best"
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, best[name]), name

    warm = ["run.name=warm", f"train.init_from={json.dumps(str(source))}",
            "train.eval_every=0", "train.checkpoint_every=0"]
    summary = _train(tmp_path, *warm, "train.steps=3")
    assert summary["steps"] == 3 and summary["initialised_from"] == str(source / "best")
    start = json.loads((tmp_path / "runs" / "warm" / "log.jsonl").read_text().splitlines()[0])
    assert start["initialised_from"] == str(source / "best") and start["step"] == 0
    shutil.rmtree(source)
    config = load_config(write_config(tmp_path),
                         [f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}", *warm,
                          "train.steps=5"])
    resumed = train(config, resume=True, progress_bar=False)
    assert resumed["steps"] == 5 and resumed["initialised_from"] == str(source)


def test_init_from_errors_are_clear_and_leave_nothing(lm_run, tmp_path, capsys):
    run_dir, _ = lm_run
    config = write_config(tmp_path)
    out = f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}"
    missing = tmp_path / "nothing"
    assert main(["train", str(config), "--set", out, "--set",
                 f"train.init_from={json.dumps(str(missing))}"]) == 2
    err = capsys.readouterr().err
    assert "train.init_from:" in err and "does not exist" in err
    assert main(["train", str(config), "--set", out, "--set", "model.backbone.dim=48",
                 "--set", f"train.init_from={json.dumps(str(run_dir))}"]) == 2
    err = capsys.readouterr().err
    assert "train.init_from:" in err and "the two models differ" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # checked before the run directory is made
