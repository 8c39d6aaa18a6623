"""``weirdnet train | eval | generate | plot``: parsers and handlers.

Each ``add_<name>(subparsers, formatter)`` registers one subcommand and sets
``handler(args, argv) -> exit status``.  Expected failures (bad config, missing data,
damaged checkpoint) print ``weirdnet <command>: <message>`` and return 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TRAIN_DESCRIPTION = """\
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
              (auto|fp32|bf16|fp16), eval_every, eval_batches, final_eval_batches,
              checkpoint_every, keep_last, early_stop_patience, best_metric, log_every,
              num_workers, distributed (auto|ddp|fsdp), compile (true: torch.compile
              the training step)

The run goes to RUN = run.out_dir/run.name (default runs/<config name>): log.jsonl,
checkpoints/step-* (the last train.keep_last), best/ (the best model by the evaluation
metric), results.json.  Every value is checked before RUN is created or changed;
--overwrite deletes RUN only if everything in it, at every level, is weirdnet's own.
A progress bar shows loss, tokens/s and the ETA; a results table is printed at the end.
Ctrl-C saves a checkpoint; --resume continues exactly where the last intact checkpoint
left off (model, optimizer, schedule, random states, data order).

examples:
  weirdnet train configs/quickstart.toml
  weirdnet train configs/lra/listops-cpu.toml --set train.steps=200
  weirdnet train runs/quickstart --resume --set train.steps=2000   # continue, longer
  torchrun --nproc_per_node 2 -m weirdnet train configs/lm/enwik8-weirdnet-small.toml
"""

EVAL_DESCRIPTION = """\
Evaluate a trained model: a run directory (its best/ model), its best/ directory or one of
its checkpoints/step-* directories.  The dataset and options come from the run's
train_config.json (override them with --set data.KEY=VALUE); a model saved with
model.save() outside a run needs --set data.dataset=NAME.  Prints a table of the metrics
(lm: loss, bpc, perplexity; classification/retrieval: loss, accuracy; seq2seq: loss,
token_accuracy, exact_match) on each split.

examples:
  weirdnet eval runs/quickstart
  weirdnet eval runs/quickstart/checkpoints/step-00000600 --split test
  weirdnet eval runs/listops --set data.root=/data/lra_release/listops-1000
"""

GENERATE_DESCRIPTION = """\
Generate text with a trained language model (or decode with a seq2seq model): CHECKPOINT
is a run directory (its best/ model), a best/ or checkpoints/step-* directory.  The prompt
is encoded with the text encoding of the run's dataset (UTF-8 for the byte corpora) and
the continuation is decoded the same way (bytes that do not decode are replaced).  Uses
the models' cached decoding (O(D log L) per token in Weird-attention layers).

A model reads at most max_len tokens (256 for configs/quickstart.toml): the prompt and
the new tokens together.  --max-new-tokens (default 200) is cut to what fits, with a
one-line note on stderr; a prompt that fills max_len is an error.  A seq2seq model's
limit is its decoder's max_len (by default it may use all of it; decoding stops at eos).

examples:
  weirdnet generate runs/quickstart --prompt "def "
  weirdnet generate runs/quickstart --prompt "import " --max-new-tokens 240 \\
      --temperature 0.8 --top-k 40 --num-samples 3 --seed 1
  weirdnet generate runs/seq2seq-reverse --prompt "12345" --temperature 0
"""


DEFAULT_NEW_TOKENS = 200
"""``weirdnet generate``'s default ``--max-new-tokens`` (fewer where max_len leaves less)."""


def _fail(command: str, error: BaseException) -> int:
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    print(f"weirdnet {command}: {message}", file=sys.stderr)
    return 2


def _expected_errors() -> tuple[type[BaseException], ...]:
    from weirdnet.data.registry import DataMissingError
    from weirdnet.models.base import CheckpointError
    from weirdnet.train.trainer import RunError
    from weirdnet.typed_config import ConfigError

    return (ConfigError, CheckpointError, DataMissingError, RunError, FileNotFoundError,
            KeyError, ImportError, ValueError)


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """The repeatable ``--set KEY=VALUE`` option (collected in ``args.overrides``)."""
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override a config key (dotted; TOML value), repeatable")


# ---- train ------------------------------------------------------------------------------

def add_train(subparsers, formatter) -> None:
    """Register ``weirdnet train``."""
    parser = subparsers.add_parser("train", help="train and evaluate a model from a config",
                                   description=TRAIN_DESCRIPTION, formatter_class=formatter)
    parser.add_argument("config", metavar="CONFIG",
                        help="TOML config file, packaged config name (e.g. lra/listops-cpu; "
                             "`weirdnet configs` lists them) or run directory")
    add_set_argument(parser)
    parser.add_argument("--resume", action="store_true",
                        help="continue the run from its last intact checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="delete an existing run directory of the same name first")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace, argv: list[str]) -> int:
    """Handle ``weirdnet train``: load the config (or the run's), train, exit status."""
    from weirdnet.train.config import load_config
    from weirdnet.train.named_configs import resolve
    from weirdnet.train.trainer import train

    resume = args.resume
    try:
        source = resolve(args.config)
        if source.is_dir():
            resume = True
            config = run_dir_config(source, args.overrides)
        else:
            config = load_config(source, args.overrides)
        train(config, resume=resume, overwrite=args.overwrite,
              progress_bar=not args.no_progress)
    except _expected_errors() as error:
        return _fail("train", error)
    return 0


def run_dir_config(run_dir: Path, overrides: list[str]):
    """The config of the run in ``run_dir`` (its ``train_config.json`` with ``overrides``),
    placed in ``run_dir`` itself: ``run.out_dir`` and ``run.name`` become its parent and its
    name, whatever the file says (a copied, moved or renamed run trains where it is; the
    trainer says so when they differ).  Overriding them is refused: RUN_DIR is the run."""
    from weirdnet.train.config import load_config
    from weirdnet.typed_config import ConfigError

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


# ---- eval -------------------------------------------------------------------------------

def find_model_dir(path: Path) -> tuple[Path, Path | None]:
    """(directory of the saved model, directory holding its run files or None) for a run
    directory, its best/ or a checkpoint directory."""
    from weirdnet.train.checkpoint import TRAIN_CONFIG

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if not path.is_dir():
        model_near = any((path.parent / name).is_file() for name in ("config.json", TRAIN_CONFIG))
        hint = f" (such as {path.parent})" if model_near else ""
        raise FileNotFoundError(f"{path} is a file; give a run directory, its best/ or a "
                                f"checkpoints/step-* directory{hint}")
    model_dir = path / "best" if (path / "best" / "config.json").is_file() else path
    if not (model_dir / "config.json").is_file():
        from weirdnet.train.checkpoint import list_checkpoints

        found = list_checkpoints(path)
        if not found:
            raise FileNotFoundError(f"{path} holds no model: expected a run directory (with "
                                    "best/ or checkpoints/), or a directory with config.json "
                                    "and model.safetensors")
        model_dir = found[-1]
    for candidate in (model_dir, path, model_dir.parent.parent):
        if (candidate / TRAIN_CONFIG).is_file():
            return model_dir, candidate
    return model_dir, None


def load_trained(path: Path, device: str = "cpu"):
    """(model, train config dict or None, data info dict or None, model directory) of a
    run or checkpoint; the checkpoint's manifest is verified when it has one."""
    from weirdnet.models.base import load
    from weirdnet.train.checkpoint import DATA_INFO, MANIFEST, TRAIN_CONFIG, verify_directory

    model_dir, run_files = find_model_dir(path)
    if (model_dir / MANIFEST).is_file():
        verify_directory(model_dir)
    model = load(model_dir, map_location=device)
    config = info = None
    if run_files is not None:
        config = json.loads((run_files / TRAIN_CONFIG).read_text())
        if (run_files / DATA_INFO).is_file():
            info = json.loads((run_files / DATA_INFO).read_text())
    return model, config, info, model_dir


def add_eval(subparsers, formatter) -> None:
    """Register ``weirdnet eval``."""
    parser = subparsers.add_parser("eval", help="evaluate a run or checkpoint",
                                   description=EVAL_DESCRIPTION, formatter_class=formatter)
    parser.add_argument("target", metavar="RUN_OR_CHECKPOINT")
    parser.add_argument("--split", action="append", default=None,
                        help="split to evaluate (repeatable; default: the run's "
                             "evaluation and test splits)")
    add_set_argument(parser)
    parser.add_argument("--batch-size", type=int, default=32, help="items per batch (32)")
    parser.add_argument("--limit", type=int, default=0,
                        help="evaluate only the first N items of each split (0 = all)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.set_defaults(handler=run_eval)


def run_eval(args: argparse.Namespace, argv: list[str]) -> int:
    """Handle ``weirdnet eval``: print the metrics table of every split; exit status."""
    try:
        summary = evaluate_target(args)
    except _expected_errors() as error:
        return _fail("eval", error)
    from weirdnet.train.runlog import results_table

    print(results_table(summary))
    return 0


def evaluate_target(args: argparse.Namespace) -> dict:
    """Evaluate ``args.target`` on its splits; the summary for :func:`results_table`."""

    from weirdnet.data.registry import get
    from weirdnet.train.config import TrainConfig, apply_overrides
    from weirdnet.train.distributed import Processes, resolve_device
    from weirdnet.train.trainer import evaluate

    if args.batch_size < 1 or args.limit < 0:
        raise ValueError("--batch-size must be >= 1 and --limit >= 0")
    device = resolve_device(args.device, what="--device")
    model, config_dict, _, model_dir = load_trained(Path(args.target), device)
    overridden = apply_overrides(config_dict or {}, args.overrides)
    _check_task(model, overridden.get("data"), model_dir)
    config = TrainConfig.from_dict(overridden)
    data = config.data
    splits = args.split or [data.eval_split] + ([data.test_split] if data.test_split else [])
    results = {}
    for split in splits:
        options = {**data.options, **data.eval_options}
        dataset = get(data.dataset, split, root=data.root or None, **options)
        _check_fits(model, dataset.info, model_dir)
        results[split] = evaluate(model, dataset, dataset.info, args.batch_size,
                                  Processes(device=device), args.limit,
                                  progress=f"eval {split}")
    return {"model_dir": str(model_dir), "task": dataset.info.task, "dataset": data.dataset,
            "best_step": _step_of(model_dir), "parameters": model.num_parameters(),
            "results": results}


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


# ---- generate ---------------------------------------------------------------------------

def add_generate(subparsers, formatter) -> None:
    """Register ``weirdnet generate``."""
    parser = subparsers.add_parser("generate", help="generate text with a trained model",
                                   description=GENERATE_DESCRIPTION, formatter_class=formatter)
    parser.add_argument("target", metavar="CHECKPOINT", help="run, best/ or checkpoint dir")
    parser.add_argument("--prompt", default="", help="text to continue (default: empty)")
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                        help=f"tokens to add (default {DEFAULT_NEW_TOKENS}); never more than "
                             "fit in the model's max_len after the prompt: then fewer, "
                             "with a note on stderr")
    parser.add_argument("--temperature", type=float, default=0.8,
                        help="sampling temperature; 0 = greedy (0.8)")
    parser.add_argument("--top-k", type=int, default=None, help="sample from the k best")
    parser.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass")
    parser.add_argument("--num-samples", type=int, default=1, help="continuations (1)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (0)")
    parser.add_argument("--encoding", default=None,
                        help="text encoding of the tokens (default: the run's dataset's)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.set_defaults(handler=run_generate)


def run_generate(args: argparse.Namespace, argv: list[str]) -> int:
    """Handle ``weirdnet generate``: print each sample; exit status."""
    try:
        texts = generate_texts(args)
    except _expected_errors() as error:
        return _fail("generate", error)
    for i, text in enumerate(texts):
        if len(texts) > 1:
            print(f"--- sample {i + 1} ---")
        print(text)
    return 0


def generate_texts(args: argparse.Namespace) -> list[str]:
    """The prompt plus each sampled continuation, decoded to text."""
    import torch

    from weirdnet.models.lm import WeirdNetLM
    from weirdnet.models.peers import PeerLM
    from weirdnet.models.seq2seq import WeirdNetSeq2Seq
    from weirdnet.train.distributed import resolve_device

    if (args.max_new_tokens is not None and args.max_new_tokens < 1) or args.num_samples < 1:
        raise ValueError("--max-new-tokens and --num-samples must be >= 1")
    device = resolve_device(args.device, what="--device")
    encoding = args.encoding or "utf-8"
    _check_encoding(encoding)
    model, _, info, model_dir = load_trained(Path(args.target), device)
    info = info or {}
    encoding = args.encoding or info.get("encoding") or "utf-8"
    _check_encoding(encoding)
    if not isinstance(model, WeirdNetLM | PeerLM | WeirdNetSeq2Seq):
        raise ValueError(f"{model_dir} holds a {type(model).__name__}; generate needs a "
                         "language model (WeirdNetLM, PeerLM) or a WeirdNetSeq2Seq")
    vocab = (model.config.decoder if isinstance(model, WeirdNetSeq2Seq)
             else model.config.backbone).vocab_size
    if vocab != 256:
        raise ValueError(f"{model_dir} has a vocabulary of {vocab} ids, not bytes; generate "
                         "encodes prompts as bytes (vocab_size 256)")
    try:
        prompt = list(args.prompt.encode(encoding))
    except UnicodeEncodeError as error:
        raise ValueError(f"--prompt cannot be encoded as {encoding}: {error.reason} at "
                         f"{error.object[error.start:error.end]!r} (pass --encoding)") from None
    generator = torch.Generator(device=device).manual_seed(args.seed)
    sampling = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                "eos_id": info.get("eos_id"), "generator": generator}
    if isinstance(model, WeirdNetSeq2Seq):
        return _decode_seq2seq(model, prompt, args, sampling, info, encoding, device)
    if not prompt:  # an empty prompt starts from a newline
        prompt = [ord("\n")]
    ids = torch.tensor([prompt] * args.num_samples, device=device)
    out = model.generate(ids, _new_tokens(args.max_new_tokens, len(prompt), model.max_len),
                         **sampling)
    return [bytes(row).decode(encoding, errors="replace") for row in out.tolist()]


def _new_tokens(asked: int | None, prompt_length: int, max_len: int) -> int:
    """How many tokens to generate after a prompt of ``prompt_length``: ``asked`` (None:
    :data:`DEFAULT_NEW_TOKENS`), but never more than fit in the model's ``max_len``
    positions; fewer than asked is said in one line on stderr."""
    room = max_len - prompt_length
    if room < 1:
        raise ValueError(f"the prompt ({prompt_length} tokens) leaves no room in the model's "
                         f"max_len {max_len}; shorten --prompt")
    wanted = DEFAULT_NEW_TOKENS if asked is None else asked
    if wanted <= room:
        return wanted
    print(f"weirdnet generate: {wanted} new tokens do not fit the model's max_len {max_len} "
          f"after a {prompt_length}-token prompt; generating {room}", file=sys.stderr,
          flush=True)
    return room


def _check_encoding(encoding: str) -> None:
    """A text encoding Python knows (``codecs.lookup``), else ValueError."""
    import codecs

    try:
        text_encoding = getattr(codecs.lookup(encoding), "_is_text_encoding", True)
    except LookupError:
        text_encoding = False
    if not text_encoding:
        raise ValueError(f"unknown text encoding {encoding!r} (--encoding); e.g. utf-8, "
                         "ascii, gb18030, latin-1")


def _decode_seq2seq(model, prompt, args, sampling, info, encoding, device) -> list[str]:
    import torch

    bos, eos = info.get("bos_id"), info.get("eos_id")
    if bos is None:
        raise ValueError("the run's data_info.json names no bos_id; cannot start decoding")
    src = torch.tensor([prompt] * args.num_samples, device=device)
    # decoding stops at eos; the decoder cannot go beyond its max_len positions (after bos):
    # by default it may use them all, an explicit --max-new-tokens is cut with a note
    room = model.config.decoder.max_len - 1
    steps = min(DEFAULT_NEW_TOKENS, room) if args.max_new_tokens is None else _new_tokens(
        args.max_new_tokens, 1, model.config.decoder.max_len)
    out = model.generate(src, steps, bos, **sampling)
    texts = []
    for row in out[:, 1:].tolist():
        if eos in row:
            row = row[:row.index(eos)]
        texts.append(f"{args.prompt} -> {bytes(row).decode(encoding, errors='replace')}")
    return texts


# ---- plot -------------------------------------------------------------------------------

def add_plot(subparsers, formatter) -> None:
    """Register ``weirdnet plot`` (see :mod:`weirdnet.train.plot`)."""
    from weirdnet.train import plot

    parser = subparsers.add_parser("plot", help="draw learning curves of runs as a PNG",
                                   description=plot.DESCRIPTION, formatter_class=formatter)
    plot.add_arguments(parser)
    parser.set_defaults(handler=run_plot)


def run_plot(args: argparse.Namespace, argv: list[str]) -> int:
    """Handle ``weirdnet plot`` (:func:`weirdnet.train.plot.run`), after checking that the
    image can be written where it goes; exit status."""
    from weirdnet.train import plot

    out = args.out
    if out is None and len(args.runs) == 1:  # plot's default: RUN/curves.png
        run = Path(args.runs[0])
        out = (run if run.is_dir() else run.parent) / plot.PLOT_NAME
    try:
        if out is not None:
            check_output_file(out, "--out" if args.out is not None else "the plot")
        return plot.run(args, argv)
    except ValueError as error:
        return _fail("plot", error)
    except OSError as error:  # e.g. a run that cannot be read, a full or read-only disk
        return _fail("plot", f"{error.filename or out}: {error.strerror or error}")


def check_output_file(path: Path, what: str) -> None:
    """ValueError unless a file can be written at ``path``: it is not a folder, no part of
    its folder is a file, and the nearest part that exists is a writable folder."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; give a file name (e.g. "
                         f"{path / 'curves.png'})")
    from weirdnet._atomic import obstacle

    found = obstacle(path.parents)
    if found is not None:
        part, problem = found
        raise ValueError(f"{what} {path}: {part} is a file, not a folder" if problem == "file"
                         else f"{what} {path}: the folder {part} is not writable")
