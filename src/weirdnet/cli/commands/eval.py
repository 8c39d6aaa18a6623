"""``weirdnet eval``: evaluate a run or checkpoint on its splits."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ._common import add_set_argument, expected_errors, fail

HELP = "evaluate a run or checkpoint"

DESCRIPTION = """\
Evaluate a trained model: a run directory (its best/ model), its best/ directory or one of
its checkpoints/step-* directories.  The dataset and options come from the run's
train_config.json (override them with --set data.KEY=VALUE); a model saved with
model.save() outside a run needs --set data.dataset=NAME.  Prints a table of the metrics
(lm: loss, bpc, perplexity; classification/retrieval: loss, accuracy; seq2seq: loss,
token_accuracy, exact_match) on each split.  --positions adds, for a language model,
bits per byte by context length (the bytes before a target that the model sees: 0-128,
128-1K, 1K-4K, ...), which shows whether it uses long context; a longer window than the
run trained at (--set data.eval_options.seq_len=32768) measures length extrapolation.
The buckets hold different bytes (a document's opening lines sit in the first ones);
--truncation holds them fixed: the last --span bytes of each window that lies inside one
document are scored with only C bytes before them visible, for each C, with the
difference from the longest C and its 95% interval over windows.  If the bits per byte
still fall from 4K to 12K, the model uses context beyond 4K.

examples:
  weirdnet eval runs/quickstart
  weirdnet eval runs/quickstart/checkpoints/step-00000600 --split test
  weirdnet eval runs/listops --set data.root=/data/lra_release/listops-1000
  weirdnet eval runs/long-context --positions --split test
  weirdnet eval runs/long-context --truncation 128 1024 4096 16384 --split test
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="RUN_OR_CHECKPOINT")
    parser.add_argument("--split", action="append", default=None,
                        help="split to evaluate (repeatable; default: the run's "
                             "evaluation and test splits)")
    add_set_argument(parser)
    parser.add_argument("--batch-size", type=int, default=32, help="items per batch (32)")
    parser.add_argument("--limit", type=int, default=0,
                        help="evaluate only the first N items of each split (0 = all)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--positions", type=int, nargs="*", default=None, metavar="EDGE",
                        help="language models: bits per byte by context length, in buckets "
                             "with these edges (default: 0 128 1024 4096 16384 32768 65536)")
    parser.add_argument("--truncation", type=int, nargs="*", default=None, metavar="C",
                        help="language models: the same bytes scored with C bytes of context "
                             "visible, for each C (default: 128 1024 4096 12288); the split "
                             "is read in windows of max(C) + --span bytes")
    parser.add_argument("--span", type=int, default=None,
                        help="--truncation: bytes scored per window (default 1024)")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Print the metrics table of every split; the exit status."""
    try:
        summary = evaluate_target(args)
    except expected_errors() as error:
        return fail("eval", error)
    from weirdnet.run.runlog import results_table

    print(results_table(summary))
    non_finite = _non_finite(summary["results"])
    if non_finite:  # printed, but never a success (issue 72 item 2)
        return fail("eval", f"{non_finite} for {summary['model_dir']}: its weights or "
                            "the split's items hold non-finite values")
    if summary.get("positions"):
        from weirdnet.train.positions import format_table

        for split, rows in summary["positions"].items():
            print(f"\nbits per byte by context length ({split}):\n{format_table(rows)}")
    if summary.get("truncation"):
        from weirdnet.train.positions import format_truncation, truncation_rows

        for split, test in summary["truncation"].items():
            rows = truncation_rows(test["bpc"], test["contexts"])
            print(f"\nthe last {test['span']} bytes of each window with less context "
                  f"visible ({split}):\n{format_truncation(rows)}")
    return 0


def evaluate_target(args: argparse.Namespace) -> dict:
    """Evaluate ``args.target`` on its splits; the summary for :func:`results_table`."""

    from weirdnet.run.processes import Processes, resolve_device
    from weirdnet.train.config import TrainConfig, apply_overrides
    from weirdnet.train.evaluation import evaluate
    from weirdnet.train.positions import evaluate_positions
    from weirdnet.train.setup import eval_dataset
    from weirdnet.train.trained import load_trained

    bounds = _check_options(args)
    device = resolve_device(args.device, what="--device")
    model, config_dict, _, model_dir = load_trained(Path(args.target), device)
    truncation = None if args.truncation is None else _truncation_plan(args, model)
    overridden = apply_overrides(config_dict or {}, args.overrides)
    _check_task(model, overridden.get("data"), model_dir)
    config = TrainConfig.from_dict(overridden)
    data = config.data
    splits = args.split or [data.eval_split] + ([data.test_split] if data.test_split else [])
    results, positions = {}, {}
    for split in splits:
        dataset = eval_dataset(data, split)
        _check_fits(model, dataset.info, model_dir)
        if bounds is not None and dataset.info.task != "lm":
            raise ValueError(f"--positions measures language models; {data.dataset} has "
                             f"task {dataset.info.task!r}")
        if bounds is None:
            results[split] = evaluate(model, dataset, dataset.info, args.batch_size,
                                      Processes(device=device), args.limit,
                                      progress=f"eval {split}")
        else:  # the same pass gives the split's metrics and the buckets
            results[split], positions[split] = evaluate_positions(
                model, dataset, args.batch_size, Processes(device=device), bounds, args.limit,
                progress=f"eval {split}")
    summary = {"model_dir": str(model_dir), "task": dataset.info.task,
               "dataset": data.dataset, "best_step": _step_of(model_dir),
               "parameters": model.num_parameters(), "results": results}
    if positions:
        summary["positions"] = positions
    if truncation is not None:
        summary["truncation"] = _truncation(args, model, data, splits, device, *truncation)
    return summary


def _check_options(args: argparse.Namespace) -> list[int] | None:
    """ValueError for options no evaluation can take, before anything is loaded; the
    ``--positions`` bucket edges (None: not asked for)."""
    from weirdnet.train.positions import BOUNDS, check_bounds

    if args.batch_size < 1 or args.limit < 0:
        raise ValueError("--batch-size must be >= 1 and --limit >= 0")
    if args.span is not None and args.truncation is None:
        raise ValueError("--span applies to --truncation only")
    too_small = [c for c in args.truncation or () if c < 1] + \
        ([args.span] if args.span is not None and args.span < 1 else [])
    if too_small:
        raise ValueError("--truncation contexts and --span must be >= 1")
    return None if args.positions is None else check_bounds(args.positions or BOUNDS)


def _truncation_plan(args: argparse.Namespace, model) -> tuple[list[int], int]:
    """(contexts, span) of the truncation test; ValueError, before any evaluation, when
    its windows (the largest context plus the span) are longer than the model holds."""
    from weirdnet.train.positions import SPAN, TRUNCATIONS

    contexts = sorted(set(args.truncation or TRUNCATIONS))
    span = SPAN if args.span is None else args.span
    window = contexts[-1] + span
    if window > model.max_len:
        raise ValueError(f"--truncation needs windows of {window} bytes (the largest "
                         f"context {contexts[-1]} + --span {span}); the model holds "
                         f"max_len={model.max_len}")
    return contexts, span


def _truncation(args: argparse.Namespace, model, data, splits: list[str], device,
                contexts: list[int], span: int) -> dict:
    """The truncation test of every split (:func:`weirdnet.train.positions.
    evaluate_truncation`), its windows as long as the largest context plus the span."""
    from weirdnet.train.positions import evaluate_truncation
    from weirdnet.train.setup import eval_dataset

    window = contexts[-1] + span
    tests = {}
    for split in splits:
        dataset = eval_dataset(data, split, seq_len=window, random_crops=False)
        if dataset.info.task != "lm":
            raise ValueError(f"--truncation measures language models; {data.dataset} has "
                             f"task {dataset.info.task!r}")
        tests[split] = evaluate_truncation(model, dataset, device, contexts, span,
                                           progress=f"truncation {split}", limit=args.limit)
    return tests


def _non_finite(results: dict[str, dict[str, float]]) -> str:
    """``"the val loss is nan"`` for the first non-finite metric of any split ("" if none)."""
    from weirdnet.train.evaluation import non_finite

    for split, metrics in results.items():
        found = non_finite(metrics)
        if found is not None:
            return f"the {split} {found[0]} is {found[1]}"
    return ""


def _step_of(model_dir: Path) -> str:
    metrics = model_dir / "metrics.json"
    if metrics.is_file():
        return str(json.loads(metrics.read_text()).get("step", "?"))
    return model_dir.name.removeprefix("step-").lstrip("0") or "0"


def _check_task(model, data, model_dir: Path) -> None:
    """The model fits the task of the config's dataset (checked before the dataset's
    options, which belong to another dataset when ``--set data.dataset`` changed it)."""
    from weirdnet.data.registry import available, entry
    from weirdnet.models.base import CheckpointError
    from weirdnet.train.tasks import MODEL_CLASSES, model_fits

    name = data.get("dataset") if isinstance(data, dict) else None
    if not isinstance(name, str) or name not in available():
        return  # the config check says what is wrong with it
    task = entry(name).task
    expected = MODEL_CLASSES.get(task)
    if not model_fits(type(model).__name__, task):
        raise CheckpointError(f"the model and the dataset do not match: {model_dir} holds a "
                              f"{type(model).__name__}, but dataset {name!r} has task "
                              f"{task!r}, which needs a {expected}")


def _check_fits(model, info, model_dir: Path) -> None:
    """The model and the dataset agree on the task, vocabulary/channels and classes."""
    from weirdnet.models.base import CheckpointError
    from weirdnet.train.tasks import MODEL_CLASSES, model_fits

    expected = MODEL_CLASSES.get(info.task)
    if not model_fits(type(model).__name__, info.task):
        raise CheckpointError(f"{model_dir} holds a {type(model).__name__}, but the dataset's "
                              f"task {info.task!r} needs a {expected}")
    cfg = model.config
    backbone = getattr(cfg, "backbone", None) or cfg.encoder
    for key in ("vocab_size", "input_dim"):
        if getattr(info, key) is not None and getattr(backbone, key) != getattr(info, key):
            raise CheckpointError(f"{model_dir} was built for {key}={getattr(backbone, key)}, "
                                  f"the dataset has {key}={getattr(info, key)}")
    classes = getattr(cfg, "num_classes", None)
    if classes is not None and info.num_classes is not None and classes != info.num_classes:
        raise CheckpointError(f"{model_dir} has {classes} classes, the dataset "
                              f"{info.num_classes}")
