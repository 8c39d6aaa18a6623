"""``weirdnet train``: train and evaluate a model from a config (or continue a run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import add_set_argument, expected_errors, fail

HELP = "train and evaluate a model from a config"

DESCRIPTION = """\
Train a model of a config file and evaluate it; the same command runs on one process or,
under torchrun, on several (DDP; FSDP for models above 300M parameters).

CONFIG is a TOML file (see configs/, and weirdnet.train.config for every key), the name
of a config shipped with weirdnet (`weirdnet configs` lists them: `weirdnet train
lra/listops-cpu` works from any directory), or an existing run directory (its
train_config.json; implies --resume; the run is trained where it is, wherever it was
copied or moved to, and --set cannot change its run.out_dir or run.name).  --set
overrides a key:
--set train.steps=100 --set model.backbone.dim=64 --set data.options.seq_len=512.

Config tables and keys (defaults and meanings: weirdnet/train/config.py):
  extends = "base.toml"   start from another config file
  [run]       name, out_dir ("runs"), seed, deterministic, device ("auto"), tensorboard
  [data]      dataset (required), root, options, eval_options, train_split,
              eval_split, test_split ("" = none)
  [model]     preset (optional), class (optional), then any key of the model config,
              e.g. [model.backbone] dim, depth, d_ff, heads, pattern, dropout, ...
  [optim]     name (adamw|adam), lr, betas, eps, weight_decay
  [schedule]  name (cosine|rsqrt|constant), warmup_steps, min_lr_ratio
  [train]     steps, batch_size (global), grad_accum, clip, precision
              (auto|fp32|bf16|fp16), eval_every, eval_spacing (even|doubling),
              eval_batches, final_eval_batches, checkpoint_every, keep_last,
              early_stop_patience, early_stop_at,
              best_metric, log_every, num_workers, distributed (auto|ddp|fsdp), compile
              (true: torch.compile the training step), activation_checkpointing
              (none|blocks|every_k), activation_checkpointing_k, ffn_chunk,
              init_from (a trained run or checkpoint to start from: a warm start)

The run goes to RUN = run.out_dir/run.name (default runs/<config name>): log.jsonl,
checkpoints/step-* (the last train.keep_last), best/ (the best model by the evaluation
metric), results.json.  Every value is checked before RUN is created or changed;
--overwrite deletes RUN only if everything in it, at every level, is weirdnet's own.
A progress bar shows loss, tokens/s and the ETA; a results table is printed at the end.
Ctrl-C saves a checkpoint; --resume continues exactly where the last intact checkpoint
left off (model, optimizer, schedule, random states, data order), on the same data:
RUN/data_fingerprint.json records the data's source (data.root: each file's SHA-256),
and a resume whose source changed is refused in one line naming the file, unless
--allow-data-change.  Every eval_every steps, and at the last step, the first
train.eval_batches batches of the evaluation split are scored (log.jsonl and a line on
the terminal: the periodic validation, which picks best/); the final table scores best/
on train.final_eval_batches batches (0: the whole split) and says what each read.

examples:
  weirdnet train configs/quickstart.toml
  weirdnet train lra/listops-cpu --set train.steps=200     # a packaged config, by name
  weirdnet train runs/quickstart --resume --set train.steps=2000   # continue, longer
  torchrun --nproc_per_node 2 -m weirdnet train configs/lm/enwik8-weirdnet-small.toml
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG",
                        help="TOML config file, packaged config name (e.g. lra/listops-cpu; "
                             "`weirdnet configs` lists them) or run directory")
    add_set_argument(parser)
    parser.add_argument("--resume", action="store_true",
                        help="continue the run from its last intact checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="delete an existing run directory of the same name first "
                             "(not with --resume or a run directory as CONFIG)")
    parser.add_argument("--allow-data-change", action="store_true",
                        help="continue a run although its data source (data.root) changed "
                             "since it started (refused without this: the run would not "
                             "be the one its checkpoints continue); the new data are "
                             "recorded")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Load the config (or the run's), train; the exit status."""
    from weirdnet.run.rundir import RunDirError, check_flags
    from weirdnet.train.config import load_config
    from weirdnet.train.named_configs import resolve
    from weirdnet.train.trainer import train

    resume = args.resume
    try:
        source = resolve(args.config)
        check_flags(resume, args.overwrite, run_dir_given=source.is_dir())
        if source.is_dir():
            resume = True
            config = run_dir_config(source, args.overrides)
        else:
            config = load_config(source, args.overrides)
        if args.allow_data_change and not resume:
            raise ValueError("--allow-data-change is for continuing a run: add --resume, or "
                             "give the run directory as CONFIG")
        train(config, resume=resume, overwrite=args.overwrite,
              progress_bar=not args.no_progress, allow_data_change=args.allow_data_change)
    except (RunDirError, *expected_errors()) as error:
        return fail("train", error)
    return 0


def run_dir_config(run_dir: Path, overrides: list[str]):
    """The config of the run in ``run_dir`` (its ``train_config.json`` with ``overrides``),
    placed in ``run_dir`` itself: ``run.out_dir`` and ``run.name`` become its parent and its
    name, whatever the file says (a copied, moved or renamed run trains where it is; the
    trainer says so when they differ).  Overriding them is refused: RUN_DIR is the run."""
    from weirdnet.config.typed import ConfigError
    from weirdnet.train.config import load_config

    config_file = run_dir / "train_config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{run_dir} is a directory without train_config.json; give a "
                                "TOML config file or a run directory")
    moved = [o for o in overrides
             if o.partition("=")[0].strip() in ("run", "run.name", "run.out_dir")]
    if moved:
        raise ConfigError(f"--set {moved[0]!r}: a run directory is trained where it is; to "
                          f"start a new run from its config, give {config_file} as CONFIG")
    if run_dir.name in ("", ".", ".."):  # "." or "..": name it by its real name
        run_dir = run_dir.resolve()
    config = load_config(config_file, overrides)
    config.run.out_dir, config.run.name = str(run_dir.parent), run_dir.name
    return config
